"""The ``simspec`` command line. Bad input prints one line naming the field and exits 2."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from simspec.errors import InputError, ScenarioError
from simspec.scenario import DEFAULT_DRAFT_MODEL, preset_method
from simspec.speculators import SPECULATORS
from simspec.sweep import SweepConfig, run_sweep
from simspec.traces import packaged_traces

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Predict the speedup of speculative decoding under continuous batching.",
)
err = Console(stderr=True)
MAX_CONFIG_BYTES = 1024 * 1024


@app.callback()
def _root() -> None:
    """simspec: a discrete-event simulator of speculative decoding on real GPUs."""


def _fail(message: str) -> None:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)


def _validation_line(exc: ValidationError) -> str:
    e = exc.errors()[0]
    loc = ".".join(str(x) for x in e["loc"]) or "config"
    msg = e["msg"].removeprefix("Value error, ")
    got = e.get("input")
    tail = f" (got {got!r})" if got is not None and not isinstance(got, dict | list) else ""
    return f"{loc}: {msg}{tail}"


def _read_config(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise InputError("--config", f"{str(path)!r} is not a file")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise InputError("--config", f"{str(path)!r} is larger than {MAX_CONFIG_BYTES} bytes")
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as exc:
        raise InputError("--config", f"cannot parse {str(path)!r}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError("--config", "the file must hold a mapping of scenario fields")
    return data


def _csv_list(text: str, field: str, cast=str) -> list:
    try:
        items = [cast(x.strip()) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(field, f"expected a comma-separated list, got {text!r}") from None
    if not items:
        raise InputError(field, "the list is empty")
    return items


def _known_method(name: str) -> str:
    if name not in SPECULATORS:
        raise InputError(
            "--methods", f"unknown method {name!r}; choose from {', '.join(SPECULATORS)}"
        )
    return name


def build_config(config: Path | None, **flags: Any) -> SweepConfig:
    """Merge a scenario file with flags (flags win) into a validated sweep."""
    data = _read_config(config) if config else {}
    dataset = flags["dataset"] or "sharegpt"
    if flags["dataset"] and flags["dataset"] not in packaged_traces():
        raise InputError(
            "--dataset", f"unknown dataset {dataset!r}; choose from {', '.join(packaged_traces())}"
        )
    for key in ("model", "gpu", "tp", "engine", "profile", "seed"):
        if flags[key] is not None:
            data[key] = flags[key]
    if flags["batch_sizes"]:
        data["batch_sizes"] = _csv_list(flags["batch_sizes"], "--batch-sizes", int)
    wl = dict(data.get("workload") or {})
    if flags["requests"] is not None:
        wl["requests"] = flags["requests"]
    if flags["dataset"]:
        wl["trace"] = dataset
    if flags["prompt_len"] is not None or flags["output_len"] is not None:
        wl["trace"] = None
        wl["prompt"] = {"dist": "fixed", "mean": flags["prompt_len"] or 512}
        wl["output"] = {"dist": "fixed", "mean": flags["output_len"] or 256}
    data["workload"] = wl
    sched = dict(data.get("scheduler") or {})
    for key in ("max_num_seqs", "max_num_batched_tokens"):
        if flags[key] is not None:
            sched[key] = flags[key]
    data["scheduler"] = sched

    if flags["methods"] or "methods" not in data:
        names = _csv_list(flags["methods"] or "autoregressive,eagle,ngram", "--methods")
        data["methods"] = [
            preset_method(
                _known_method(n), dataset, flags["draft_model"] or DEFAULT_DRAFT_MODEL
            ).model_dump(exclude_none=True)
            for n in names
        ]
    override: dict[str, Any] = {}
    if flags["alpha"] is not None:
        override = {"alpha": flags["alpha"]}
    elif flags["tau"] is not None:
        override = {"tau": flags["tau"], "tau_k": flags["tau_k"]}
    methods = []
    for m in data["methods"]:
        if not isinstance(m, dict):
            raise InputError("methods", "each method must be a mapping with at least a name")
        m = dict(m)
        if m.get("name") != "autoregressive":
            if flags["k"] is not None:
                m["k"] = flags["k"]
            if override:
                m["acceptance"] = override
            if m.get("name") == "draft_model" and flags["draft_model"]:
                m["draft_model"] = flags["draft_model"]
            if (
                m.get("name") in SPECULATORS
                and m.get("acceptance") is None
                and m["name"] != "autoregressive"
            ):
                raise InputError(
                    f"methods.{m['name']}.acceptance",
                    "no packaged acceptance preset for this method and model: "
                    "give --alpha, or --tau with --tau-k",
                )
        methods.append(m)
    data["methods"] = methods
    return SweepConfig(**data)


def _write_atomic(frame: pd.DataFrame, out: Path) -> None:
    """Write to a temporary file beside ``out`` and rename: never a half-written output."""
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            frame.to_csv(fh, index=False, float_format="%.6g")
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _print_table(frame: pd.DataFrame, title: str) -> None:
    pivot = frame.pivot_table(index="batch_size", columns=["method", "k"], values="speedup")
    table = Table(title=title)
    table.add_column("batch size", justify="right")
    for method, k in pivot.columns:
        table.add_column(
            method if method == "autoregressive" else f"{method} K={k}", justify="right"
        )
    for bs, row in pivot.iterrows():
        table.add_row(str(bs), *(f"{v:.2f}x" for v in row.to_numpy()))
    Console().print(table)


@app.command()
def sweep(
    config: Annotated[
        Path | None, typer.Option(help="YAML/JSON scenario file; flags override it")
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="model preset (e.g. llama-3.1-8b) or config.json path [default: llama-3.1-8b]"
        ),
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option(help="GPU preset: h100_sxm, h200, a100_80gb, a100_40gb [default: h100_sxm]"),
    ] = None,
    tp: Annotated[int | None, typer.Option(help="tensor-parallel degree [default: 1]")] = None,
    engine: Annotated[str | None, typer.Option(help="engine profile [default: vllm]")] = None,
    profile: Annotated[
        str | None, typer.Option(help="hardware profile id or YAML path [default: the GPU's]")
    ] = None,
    methods: Annotated[
        str | None,
        typer.Option(
            help="comma list of autoregressive, draft_model, eagle, ngram [default: autoregressive,eagle,ngram]"
        ),
    ] = None,
    k: Annotated[
        int | None,
        typer.Option(help="draft tokens per step for every speculative method [default: 3]"),
    ] = None,
    batch_sizes: Annotated[
        str | None, typer.Option(help="comma list of concurrencies [default: 1,2,4,8,16,32,64,128]")
    ] = None,
    requests: Annotated[
        int | None, typer.Option(help="requests per run [default: max(100, 4 x batch size)]")
    ] = None,
    dataset: Annotated[
        str | None,
        typer.Option(
            help="packaged Llama-3.1-8B/H100 trace for lengths and acceptance: sharegpt, gsm8k, cnn, instructcoder [default: sharegpt]"
        ),
    ] = None,
    prompt_len: Annotated[
        int | None, typer.Option(help="fixed prompt length instead of the trace's")
    ] = None,
    output_len: Annotated[
        int | None, typer.Option(help="fixed output length instead of the trace's")
    ] = None,
    alpha: Annotated[
        float | None,
        typer.Option(
            help="i.i.d. acceptance per draft position for every speculative method (0..1)"
        ),
    ] = None,
    tau: Annotated[
        float | None, typer.Option(help="published mean tokens per step to fit α to (with --tau-k)")
    ] = None,
    tau_k: Annotated[int | None, typer.Option(help="chain length --tau was measured at")] = None,
    draft_model: Annotated[
        str | None, typer.Option(help="draft model preset for draft_model [default: llama-3.2-1b]")
    ] = None,
    max_num_seqs: Annotated[
        int | None, typer.Option(help="scheduler: max sequences per iteration [default: engine's]")
    ] = None,
    max_num_batched_tokens: Annotated[
        int | None, typer.Option(help="scheduler: token budget per iteration [default: engine's]")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="random seed [default: 0]")] = None,
    out: Annotated[Path | None, typer.Option(help="write the results table to this CSV")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="print no table or progress")] = False,
) -> None:
    """Speedup of each method over autoregressive decoding, by batch size (closed loop).

    Speedup is output-token throughput divided by autoregressive throughput on the same
    workload and seed, measured while the closed loop holds its full concurrency.
    """
    flags = dict(
        model=model,
        gpu=gpu,
        tp=tp,
        engine=engine,
        profile=profile,
        methods=methods,
        k=k,
        batch_sizes=batch_sizes,
        requests=requests,
        dataset=dataset,
        prompt_len=prompt_len,
        output_len=output_len,
        alpha=alpha,
        tau=tau,
        tau_k=tau_k,
        draft_model=draft_model,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        seed=seed,
    )
    try:
        cfg = build_config(config, **flags)
        total = len(cfg.runs())
        show = not quiet and sys.stderr.isatty()
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=err,
            disable=not show,
        ) as bar:
            task = bar.add_task("simulating", total=total)
            frame = run_sweep(
                cfg, progress=lambda label: bar.update(task, advance=1, description=label)
            )
    except ValidationError as exc:
        _fail(_validation_line(exc))
    except (InputError, ScenarioError) as exc:
        _fail(str(exc))
    if out is not None:
        try:
            _write_atomic(frame, out)
        except OSError as exc:
            _fail(f"--out: cannot write {str(out)!r}: {exc.strerror or exc}")
    if not quiet:
        _print_table(
            frame,
            f"Speedup over autoregressive: {cfg.model} on {cfg.gpu} x{cfg.tp}, "
            f"{cfg.engine}, {cfg.workload.trace or 'fixed lengths'}",
        )
        if out is not None:
            err.print(f"wrote {len(frame)} rows to {out}")


def main() -> None:
    """Entry point: usage errors (bad flag values) also become one ``error:`` line and exit 2."""
    try:
        code = app(standalone_mode=False)
    except typer.Abort:
        code = 1
    except Exception as exc:
        # click's exceptions (vendored inside typer) carry format_message() and exit_code
        if not (hasattr(exc, "format_message") and hasattr(exc, "exit_code")):
            raise
        if type(exc).__name__ == "NoArgsIsHelpError":
            code = 0  # typer has printed the help already
        else:
            err.print(
                f"[bold red]error:[/] {exc.format_message()}", highlight=False, soft_wrap=True
            )
            code = exc.exit_code
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
