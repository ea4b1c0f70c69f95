"""``simspec models``: the model presets, and for one model (a preset or a config.json) its
parameters, layout, precision, KV cache per token and the GPUs it needs."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from simspec.catalog.hardware import gpu_ids, load_engine, load_gpu
from simspec.catalog.models import id_precision, load_model, model_ids
from simspec.cli import options as opt
from simspec.cli.common import err, one_line_errors
from simspec.cli.tables import table_width
from simspec.config import Deployment
from simspec.engine.kv_cache import MAX_GPUS, min_gpus
from simspec.engine.layout import ParallelLayout
from simspec.errors import InputError, one_line
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
    precision: opt.Precision = None,
    kv_cache_dtype: opt.KvCacheDtype = None,
    wide: Annotated[
        bool,
        typer.Option(
            "--wide",
            "--all",
            help="every column of the list, each model on one line however long (by "
            "default the columns that fit the terminal, the others named below it)",
        ),
    ] = False,
) -> None:
    """Model presets: parameters, layout, precision and the GPUs each needs.

    Without NAME, one row per packaged preset, on one line: the columns that fit the
    terminal (--wide: all of them), those left out named below; with NAME, every fact about that model with its
    source. Active parameters count the embedding table and LM head whole, as most model
    cards do; GPUs needed is the fewest (tensor-parallel) GPUs whose memory holds the weights,
    activations and the KV cache of one 4,096-token sequence. With --tp (and --ep, --dp), what
    each GPU holds in that layout and the tokens its KV cache holds.

    Example: simspec models deepseek-v3 --gpu h200 --tp 8 --ep 8
    """
    gpu = gpu.lower()  # as a scenario's gpu field takes it
    load_gpu(gpu), load_engine(engine)  # bad flags fail by name first
    if name is None:
        # before the layout is checked as a deployment's: --ep 2 alone is a missing NAME, not
        # an ep/tp mismatch (QA)
        flags = (
            ("--tp", tp),
            ("--ep", ep),
            ("--dp", dp),
            ("--precision", precision),
            ("--kv-cache-dtype", kv_cache_dtype),
        )
        given = [f for f, v in flags if v]
        if given:
            raise InputError(
                given[0],
                f"{', '.join(given)} {'lays' if len(given) == 1 else 'lay'} out one model: "
                "give its NAME "
                f"(simspec models NAME {given[0]} ...)",
            )
    asked = None
    stated = {"precision": precision, "kv_cache_dtype": kv_cache_dtype}
    # checked as a deployment's fields: an error names the field
    d = Deployment(**{k: v for k, v in stated.items() if v is not None})
    if tp is not None or ep is not None or dp is not None:
        fields = {k: v for k, v in {"tp": tp, "ep": ep, "dp": dp}.items() if v is not None}
        d = Deployment(**fields, **{k: v for k, v in stated.items() if v is not None})
        asked = ParallelLayout(d.tp, d.ep, d.dp)
    if name is None:
        _print_all(gpu, engine, wide)
        return
    if wide:  # a flag the mode does not read is an error, never silently dropped (QA)
        raise InputError(
            "--wide", "lays out the list of models; with NAME every fact is shown already"
        )
    console = Console()
    # a preset's -FP8 checkpoint id: the preset at fp8
    weights = d.precision if d.precision is not None else id_precision(name)
    facts = model_facts(name, gpu, engine, asked, weights, d.kv_cache_dtype, d.disaggregation_mode)
    for label, value in facts:
        console.print(f"[bold]{label}[/]: {escape(one_line(value))}", highlight=False)


COLUMNS = ("model", "parameters", "active", "layout", "MTP", "weights", "KV/token", "GPUs")
# the columns a narrow terminal leaves out, first left out first: the long descriptions
# (`simspec models NAME` gives them in full) before the numbers one compares models by
LEFT_OUT_FIRST = ("layout", "weights", "MTP", "active", "parameters", "KV/token")


def _print_all(gpu: str, engine: str, wide: bool = False) -> None:
    """One row per preset, each on one line: the columns that fit the terminal (all with
    ``wide``, folding where they must), and a line naming those left out."""
    g, e = load_gpu(gpu), load_engine(engine)
    rows = []
    for m in model_ids():
        shape = load_model(m)
        need = min_gpus(g, e, shape)
        rows.append(
            [
                m,
                billions(shape.num_params),
                billions(shape.active_params) if shape.is_moe else "=",
                layout(shape),
                str(shape.num_nextn_predict_layers or ""),
                precision(shape),
                f"{shape.kv_bytes_per_token_per_gpu(1) / 1024:.0f} KiB",
                str(need) if need else f">{shape.largest_attention_tp(MAX_GPUS)}",
            ]
        )
    console = Console()
    widths = {c: max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)}
    shown = list(COLUMNS) if wide else _fitting(widths, console.width)
    if wide:  # every row on one line, however long: for a pager (less -S) or a file
        console = Console(width=max(console.width, table_width(list(widths.values()))))
    title = f"Model presets (simspec models NAME: one model in full); GPUs of {gpu}"
    table = Table(title=escape(title))
    for col in shown:
        table.add_column(col, no_wrap=True)
    for row in rows:
        table.add_row(*(row[COLUMNS.index(col)] for col in shown))
    console.print(table)
    if "KV/token" in shown:  # QA: a windowed model's column counts its full layers only
        err.print(
            "KV/token: the full-attention layers; windowed layers (gpt-oss, llama-4) add theirs "
            "for a window of tokens per sequence (simspec models NAME gives both)",
            highlight=False,
        )
    left = [col for col in COLUMNS if col not in shown]
    if left:
        err.print(
            f"left out at {console.width} columns: {', '.join(left)} (--wide shows every "
            "column; simspec models NAME, one model in full)"
        )


def _fitting(widths: dict[str, int], limit: int) -> list[str]:
    """The columns, in order, that fit ``limit`` characters side by side, leaving out those of
    :data:`LEFT_OUT_FIRST` in turn until they do (the model and its GPUs always stay)."""
    shown = list(COLUMNS)
    for col in LEFT_OUT_FIRST:
        if table_width([widths[c] for c in shown]) <= limit:
            break
        shown.remove(col)
    return shown
