"""``simspec models``: the model presets, and for one model (a preset or a config.json) its
parameters, layout, precision, KV cache per token and the GPUs it needs."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from simspec.catalog.hardware import gpu_ids, load_engine, load_gpu
from simspec.catalog.models import load_model, model_ids
from simspec.cli import options as opt
from simspec.cli.common import one_line_errors
from simspec.config import Deployment
from simspec.engine.kv_cache import min_gpus
from simspec.engine.layout import ParallelLayout
from simspec.errors import one_line
from simspec.studies.model_facts import billions, layout, model_facts, precision


@one_line_errors
def models(
    name: Annotated[
        str | None,
        typer.Argument(help="one model (a preset, its Hugging Face id, or a config.json path)"),
    ] = None,
    gpu: Annotated[
        str, typer.Option(help=f"GPU to size the deployment for ({', '.join(gpu_ids())})")
    ] = "h100_sxm",
    engine: Annotated[str, typer.Option(help="engine profile (its memory utilisation)")] = "vllm",
    tp: opt.Tp = None,
    ep: opt.Ep = None,
    dp: opt.Dp = None,
) -> None:
    """Model presets: parameters, layout, precision and the GPUs each needs.

    Without NAME, one row per packaged preset; with NAME, every fact about that model with its
    source. Active parameters count the embedding table and LM head whole, as most model
    cards do; GPUs needed is the fewest (tensor-parallel) GPUs whose memory holds the weights,
    activations and the KV cache of one 4,096-token sequence. With --tp (and --ep, --dp), what
    each GPU holds in that layout and the tokens its KV cache holds.
    """
    load_gpu(gpu), load_engine(engine)  # bad flags fail by name first
    asked = None
    if tp is not None or ep is not None or dp is not None:
        fields = {k: v for k, v in {"tp": tp, "ep": ep, "dp": dp}.items() if v is not None}
        d = Deployment(**fields)  # checked as a deployment's fields: an error names the field
        asked = ParallelLayout(d.tp, d.ep, d.dp)
    if name is None:
        _print_all(gpu, engine)
        return
    console = Console()
    for label, value in model_facts(name, gpu, engine, asked):
        console.print(f"[bold]{label}[/]: {escape(one_line(value))}", highlight=False)


def _print_all(gpu: str, engine: str) -> None:
    g, e = load_gpu(gpu), load_engine(engine)
    table = Table(title=f"Model presets (simspec models NAME: one model in full); GPUs of {gpu}")
    for col in ("model", "parameters", "active", "layout", "MTP", "weights", "KV/token", "GPUs"):
        table.add_column(col, no_wrap=col == "model")
    for m in model_ids():
        shape = load_model(m)
        need = min_gpus(g, e, shape)
        table.add_row(
            m,
            billions(shape.num_params),
            billions(shape.active_params) if shape.is_moe else "=",
            layout(shape),
            str(shape.num_nextn_predict_layers or ""),
            precision(shape),
            f"{shape.kv_bytes_per_token_per_gpu(1) / 1024:.0f} KiB",
            str(need) if need else ">64",
        )
    Console().print(table)
