"""The ``simspec`` command line. Bad input prints one line naming the field and exits 2."""

from __future__ import annotations

import csv as csv_module
import json
import sys
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from simspec.catalog.methods import preset_method, tau_measured_with
from simspec.catalog.traces import packaged_traces
from simspec.engine.speculators import SPECULATORS
from simspec.errors import InputError, ScenarioError, one_line, validation_message
from simspec.outputs import write_bytes_atomic, write_text_atomic
from simspec.studies.sweep import SweepConfig, cells, run_sweep

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # help texts are plain: "[default: engine's]" must not be read as a rich style tag
    rich_markup_mode=None,
    help="Predict the speedup of speculative decoding under continuous batching.",
)
err = Console(stderr=True)
MAX_CONFIG_BYTES = 1024 * 1024


@app.callback()
def _root() -> None:
    """simspec: a discrete-event simulator of speculative decoding on real GPUs."""


def _fail(message: str) -> None:
    err.print(
        f"[bold red]error:[/] {one_line(message)}", highlight=False, soft_wrap=True, markup=True
    )
    raise typer.Exit(code=2)


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
    odd = [k for k in data if not isinstance(k, str)]
    if odd:
        raise InputError("--config", f"field names must be text, got {odd[0]!r}")
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
    for key in ("model", "gpu", "tp", "engine", "profile", "seed", "temperature", "top_p"):
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

    target = data.get("model", "llama-3.1-8b")
    if flags["speculative_config"]:
        data["methods"] = [
            {"name": "autoregressive", "k": 0},
            _from_vllm(flags["speculative_config"], dataset, flags, target),
        ]
    elif flags["methods"] or "methods" not in data:
        names = _csv_list(flags["methods"] or "autoregressive,eagle3,ngram", "--methods")
        if names == ["all"]:
            names = list(SPECULATORS)
        data["methods"] = [
            preset_method(_known_method(n), dataset, flags["draft_model"], target).model_dump(
                exclude_none=True
            )
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
                m["acceptance"] = _override_for(m, override)
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


def _override_for(method: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """--alpha/--tau for one method: a --tau is taken as measured with the draft shape the
    method runs (--tau-k as its depth where given)."""
    if "tau" not in override:
        return override
    return {**override, **tau_measured_with(method, override.get("tau_k") or method.get("k", 1))}


def _from_vllm(text: str, dataset: str, flags: dict[str, Any], target: str) -> dict[str, Any]:
    """A vLLM --speculative-config as one simspec method: the method's preset, then the
    config's own fields on top."""
    from simspec.catalog.vllm import read_speculative_config, to_method

    fields = to_method(read_speculative_config(text))
    draft = flags["draft_model"] or fields.get("draft_model")
    base = preset_method(fields["name"], dataset, draft, target).model_dump(exclude_none=True)
    if "tree_paths" in fields:  # the config's own tree replaces the preset's shape; a preset tau
        base.pop("tree_nodes", None)  # stays tied to the tree it was measured with
        base.pop("tree_topk", None)
    return {**base, **fields}


def _write_atomic(frame: pd.DataFrame, out: Path) -> None:
    """CSV (or Parquet by suffix), written whole or not at all."""
    if out.suffix == ".parquet":
        write_bytes_atomic(out, frame.to_parquet(index=False))
    else:
        write_text_atomic(out, frame.to_csv(index=False, float_format="%.6g"))


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
            help="comma list of methods (see `simspec methods`), or 'all' [default: autoregressive,eagle3,ngram]"
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
    speculative_config: Annotated[
        str | None,
        typer.Option(
            help="a vLLM --speculative-config JSON (or @file.json): simulate it against "
            'autoregressive, e.g. \'{"method": "eagle3", "num_speculative_tokens": 5}\'; '
            "num_speculative_tokens_per_batch_size and disable_by_batch_size are honoured"
        ),
    ] = None,
    max_num_seqs: Annotated[
        int | None, typer.Option(help="scheduler: max sequences per iteration [default: engine's]")
    ] = None,
    max_num_batched_tokens: Annotated[
        int | None, typer.Option(help="scheduler: token budget per iteration [default: engine's]")
    ] = None,
    temperature: Annotated[
        float | None,
        typer.Option(help="sampling temperature of the requests, 0 = greedy [default: 0]"),
    ] = None,
    top_p: Annotated[
        float | None, typer.Option(help="nucleus sampling mass (0, 1] [default: 1]")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="random seed [default: 0]")] = None,
    grid: Annotated[
        Path | None,
        typer.Option(
            help="YAML/JSON grid: a scenario file with a `grid:` of axes (model, gpu, "
            "tp, engine, seed, temperature, top_p, dataset, k) to sweep over"
        ),
    ] = None,
    executor: Annotated[
        str, typer.Option(help="run cells serially, on a local process pool, or on Ray")
    ] = "process",
    workers: Annotated[
        int | None, typer.Option(help="parallel workers [default: every CPU]", min=1)
    ] = None,
    ray_address: Annotated[
        str | None, typer.Option(help="Ray cluster: 'auto' or HOST:PORT [default: local]")
    ] = None,
    resume: Annotated[
        bool,
        typer.Option(
            "--resume", help="skip cells a stopped sweep already finished (kept in OUT.partial)"
        ),
    ] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            help="write the results table (.csv, or .parquet); finished cells stream "
            "to OUT.partial meanwhile"
        ),
    ] = None,
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
        speculative_config=speculative_config,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        seed=seed,
        temperature=temperature,
        top_p=top_p,
    )
    try:
        if grid is not None and config is not None:
            raise InputError(
                "--grid",
                "give --grid or --config, not both (a grid file is a "
                "scenario file with a grid: section)",
            )
        if executor not in ("serial", "process", "ray"):
            raise InputError("--executor", f"choose serial, process or ray (got {executor!r})")
        if resume and out is None:
            raise InputError("--resume", "needs --out (the stopped sweep's OUT.partial)")
        if out is not None and out.suffix not in (".csv", ".parquet"):
            raise InputError("--out", f"write .csv or .parquet (got {str(out)!r})")
        cfg = build_config(grid or config, **flags)
        total = len(cells(cfg))
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
            journal = out.with_name(out.name + ".partial") if out is not None else None
            frame = run_sweep(
                cfg,
                progress=lambda label: bar.update(task, advance=1, description=label),
                executor=executor,  # type: ignore[arg-type]
                workers=workers,
                ray_address=ray_address,
                journal=journal,
                resume=resume,
            )
    except ValidationError as exc:
        _fail(validation_message(exc))
    except (InputError, ScenarioError) as exc:
        _fail(str(exc))
    if out is not None:
        try:
            _write_atomic(frame, out)
            out.with_name(out.name + ".partial").unlink(missing_ok=True)  # the table has them all
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
    if cfg.temperature > 0 or cfg.top_p < 1:
        from simspec.catalog.sampling import MAX_FITTED_TEMPERATURE, factor, sampling_source

        err.print(
            f"sampling at T={cfg.temperature}, top-p={cfg.top_p}: acceptance x "
            f"{factor(cfg.temperature, cfg.top_p):.3f} of greedy ({sampling_source()})"
        )
        if cfg.temperature > MAX_FITTED_TEMPERATURE:
            err.print(
                f"note: no published pair constrains acceptance above T="
                f"{MAX_FITTED_TEMPERATURE:g}; it is held at its T={MAX_FITTED_TEMPERATURE:g} "
                "value"
            )


@app.command("analytic")
def analytic_command(
    method: Annotated[str, typer.Option(help="chain method whose draft cost to use")] = "eagle3",
    model: Annotated[str, typer.Option(help="model preset or config.json path")] = "llama-3.1-8b",
    gpu: Annotated[str, typer.Option(help="GPU preset")] = "h100_sxm",
    tp: Annotated[int, typer.Option(help="tensor-parallel degree")] = 1,
    engine: Annotated[str, typer.Option(help="engine profile")] = "vllm",
    profile: Annotated[str | None, typer.Option(help="hardware profile id or file")] = None,
    alpha: Annotated[
        str | None,
        typer.Option(help="your α (one number), or a per-position profile (comma list)"),
    ] = None,
    k_max: Annotated[int, typer.Option(help="largest K to consider", min=1, max=32)] = 8,
    context: Annotated[int, typer.Option(help="tokens in the KV cache", min=1)] = 1024,
    compare: Annotated[
        bool, typer.Option("--compare", help="also simulate, and show where the two part")
    ] = False,
    html: Annotated[Path | None, typer.Option(help="write heatmaps of E and speedup")] = None,
    csv: Annotated[Path | None, typer.Option(help="write the α × K table as CSV")] = None,
) -> None:
    """The closed form at batch 1, the best K per α, and (--compare) the simulation beside it.

    E = (1 − α^(K+1)) / (1 − α); speedup = E·t_AR / (t_draft + t_verify), with the step times
    from the calibrated cost model.
    """
    from simspec.config import Deployment
    from simspec.studies import analytic as an

    try:
        if method not in SPECULATORS or method == "autoregressive":
            raise InputError("--method", f"choose a speculative method: {', '.join(SPECULATORS)}")
        deploy = Deployment(model=model, gpu=gpu, tp=tp, engine=engine, profile=profile)
        given = _csv_list(alpha, "--alpha", float) if alpha else []
        if any(not 0.0 <= a <= 1.0 for a in given):
            raise InputError("--alpha", "each α must be in [0, 1]")
        costs = an.batch1_costs(deploy, method, k_max, context)
        alphas = tuple(
            sorted({*an.ALPHAS, *an.REPORTED_ALPHAS, *(given[:1] if len(given) == 1 else [])})
        )
        table = an.analytic_table(costs, alphas)
        picks = an.best_k(table)
        shown = picks[picks.alpha.isin([*an.REPORTED_ALPHAS, *given[:1]])]
        err.print(
            f"{model} on {gpu} x{tp}, {engine}, {method}, batch 1, {context} tokens of context: "
            f"plain step {costs.ar_s * 1e3:.2f} ms; draft step "
            f"{costs.draft_s[1] * 1e3:.2f} ms (cost ratio {costs.draft_s[1] / costs.ar_s:.2f})"
        )
        _print_frame(shown.round(3), "Best K per α (closed form, batch 1)")
        if len(given) > 1:
            e = an.profile_tokens(given)
            err.print(f"per-position profile {given}: E = 1 + Σ Π α = {e:.3f} tokens per step")
        if compare:
            a = given[0] if len(given) == 1 else 0.7
            k = int(picks.loc[(picks.alpha - a).abs().idxmin(), "best_k"]) or 3
            both = an.compare(deploy, method, a, k, context).round(3)
            both.insert(0, "case", range(1, len(both) + 1))
            _print_frame(both.drop(columns="why"), f"Closed form vs simulation, α={a}, K={k}")
            for case, why in zip(both["case"], both["why"], strict=True):
                err.print(f"  {case}: {why}")
        if csv:
            write_text_atomic(csv, table.to_csv(index=False, float_format="%.6g"))
        if html:
            an.write_html(table, f"{method} on {model}, {gpu} x{tp}: closed form", html)
    except ValidationError as exc:
        _fail(validation_message(exc))
    except (InputError, ScenarioError) as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"cannot write a file: {exc}")


@app.command("policy")
def policy_command(
    config: Annotated[
        Path,
        typer.Option(
            help="YAML/JSON: deployment, workload, method and policy (see examples/policy.yaml)",
            show_default=False,
        ),
    ],
    rate_csv: Annotated[
        Path | None,
        typer.Option(
            help="arrival rate over time (CSV: time_s, rate): open-loop Poisson "
            "arrivals that follow it"
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="write the comparison as CSV")] = None,
) -> None:
    """A load-following speculation policy against plain decoding and each fixed setting.

    All run on the same (typically time-varying) workload and seed.
    """
    from simspec.engine.workload import read_rate_csv
    from simspec.studies.policy import PolicyConfig, run_policy

    try:
        data = _read_config(config)
        if rate_csv is not None:
            wl = dict(data.get("workload") or {})
            wl.update(arrival="poisson", rate_schedule=read_rate_csv(str(rate_csv)))
            data["workload"] = wl
        cfg = PolicyConfig(**data)
        frame = run_policy(cfg)
        if out is not None:
            _write_atomic(frame, out)
    except ValidationError as exc:
        _fail(validation_message(exc))
    except (InputError, ScenarioError) as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"cannot read or write a file: {exc}")
    shown = frame[
        [
            "setting",
            "throughput_tok_s",
            "tpot_ms_p50",
            "tpot_ms_p99",
            "ttft_ms_p99",
            "e2e_s_p50",
            "mean_accept_len",
            "policy_tpot_gain",
            "policy_e2e_gain",
        ]
    ]
    shown = shown.rename(
        columns={
            "throughput_tok_s": "tok/s",
            "tpot_ms_p50": "TPOT p50",
            "tpot_ms_p99": "TPOT p99",
            "ttft_ms_p99": "TTFT p99",
            "e2e_s_p50": "e2e p50 s",
            "mean_accept_len": "τ",
            "policy_tpot_gain": "TPOT gain",
            "policy_e2e_gain": "e2e gain",
        }
    ).round(2)
    _print_frame(shown, f"Policy vs fixed settings: {cfg.method.name} on {cfg.model}, {cfg.gpu}")
    err.print(
        "gain = the setting's median (TPOT | end-to-end latency) / the policy's: > 1 means "
        "the policy is faster"
    )


def _deployment(
    config: Path | None,
    model: str | None,
    gpu: str | None,
    tp: int | None,
    engine: str | None,
    dataset: str | None,
    temperature: float | None,
):
    """A deployment from an optional scenario file plus flags (flags win); the workload's
    lengths come from ``dataset``'s trace unless the file sets them."""
    from simspec.config import Deployment

    data = _read_config(config) if config else {}
    for key, value in (
        ("model", model),
        ("gpu", gpu),
        ("tp", tp),
        ("engine", engine),
        ("temperature", temperature),
    ):
        if value is not None:
            data[key] = value
    if dataset:
        data["workload"] = {**(data.get("workload") or {}), "trace": dataset}
    data.pop("methods", None)
    data.pop("batch_sizes", None)
    return Deployment(**data)


@app.command("plan")
def plan_command(
    qps: Annotated[float, typer.Option(help="target arrival rate (requests/s)", min=0.001)],
    slo_ttft_ms: Annotated[float, typer.Option(help="time-to-first-token SLO (ms)", min=1)],
    slo_tpot_ms: Annotated[float, typer.Option(help="time-per-output-token SLO (ms)", min=0.1)],
    methods: Annotated[
        str, typer.Option(help="comma list of methods (autoregressive is always included)")
    ] = "eagle3,ngram",
    percentile: Annotated[int, typer.Option(help="SLO percentile: 50 or 99")] = 99,
    gpu_hour_price: Annotated[
        float, typer.Option(help="price of one GPU-hour, for cost per million tokens", min=0)
    ] = 2.5,
    config: Annotated[Path | None, typer.Option(help="scenario file (YAML/JSON)")] = None,
    model: Annotated[str | None, typer.Option(help="model preset or config.json")] = None,
    gpu: Annotated[str | None, typer.Option(help="GPU preset")] = None,
    tp: Annotated[int | None, typer.Option(help="tensor-parallel degree")] = None,
    engine: Annotated[str | None, typer.Option(help="engine profile")] = None,
    dataset: Annotated[str | None, typer.Option(help="request lengths and presets")] = None,
    temperature: Annotated[float | None, typer.Option(help="sampling temperature")] = None,
    duration: Annotated[
        float, typer.Option(help="seconds of arrivals per probe run (steady state)", min=1)
    ] = 60.0,
    out: Annotated[Path | None, typer.Option(help="write the plan as CSV")] = None,
) -> None:
    """Capacity: the highest QPS per replica within the SLOs, replicas, GPUs and cost.

    For each method and plain decoding: doubling then bisection on the Poisson arrival rate,
    replicas and GPUs for --qps, and cost per million output tokens at --gpu-hour-price.
    """
    from simspec.studies.planning import Slo, plan

    try:
        if percentile not in (50, 99):
            raise InputError("--percentile", "choose 50 or 99")
        deploy = _deployment(config, model, gpu, tp, engine, dataset, temperature)
        ds = deploy.workload.trace or "sharegpt"
        names = [
            "autoregressive",
            *[n for n in _csv_list(methods, "--methods") if n != "autoregressive"],
        ]
        chosen = [preset_method(_known_method(n), ds, None, deploy.model) for n in names]
        slo = Slo(slo_ttft_ms, slo_tpot_ms, percentile)
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            console=err,
            disable=not sys.stderr.isatty(),
        ) as bar:
            task = bar.add_task("planning", total=len(chosen))
            frame = plan(
                deploy,
                chosen,
                qps,
                slo,
                gpu_hour_price,
                duration,
                progress=lambda m: bar.update(task, advance=1, description=m),
            )
        if out is not None:
            _write_atomic(frame, out)
    except ValidationError as exc:
        _fail(validation_message(exc))
    except (InputError, ScenarioError) as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"--out: cannot write {str(out)!r}: {exc.strerror or exc}")
    _print_frame(
        frame.round(3),
        f"Capacity for {qps} req/s, p{percentile} TTFT <= "
        f"{slo_ttft_ms} ms and TPOT <= {slo_tpot_ms} ms ({deploy.model} on {deploy.gpu} "
        f"x{deploy.tp}, ${gpu_hour_price}/GPU-hour)",
    )


@app.command("recommend")
def recommend_command(
    method: Annotated[str, typer.Option(help="speculative method to schedule")] = "eagle3",
    k_max: Annotated[int, typer.Option(help="largest K to consider", min=1, max=16)] = 5,
    tree_budgets: Annotated[
        str, typer.Option(help="tree methods: node budgets to choose between")
    ] = "8,16,32,64",
    concurrencies: Annotated[
        str, typer.Option(help="grid of concurrent requests to simulate")
    ] = "1,2,4,8,16,32,64,128,256",
    config: Annotated[Path | None, typer.Option(help="scenario file (YAML/JSON)")] = None,
    model: Annotated[str | None, typer.Option(help="model preset or config.json")] = None,
    gpu: Annotated[str | None, typer.Option(help="GPU preset")] = None,
    tp: Annotated[int | None, typer.Option(help="tensor-parallel degree")] = None,
    engine: Annotated[str | None, typer.Option(help="engine profile")] = None,
    dataset: Annotated[str | None, typer.Option(help="request lengths and presets")] = None,
    temperature: Annotated[float | None, typer.Option(help="sampling temperature")] = None,
    alpha: Annotated[float | None, typer.Option(help="acceptance instead of the preset")] = None,
    out: Annotated[Path | None, typer.Option(help="write the per-concurrency table (CSV)")] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="write the --speculative-config JSON")
    ] = None,
) -> None:
    """The best K per concurrency band, as a ready-to-paste vLLM --speculative-config.

    The schedule is vLLM's Dynamic SD form (num_speculative_tokens_per_batch_size), with K = 0
    where speculation should be off; tree methods get a tree budget per band instead.
    """
    from simspec.config import AcceptanceConfig
    from simspec.studies.planning import (
        recommend,
        schedule,
        speculative_config,
        speculative_config_json,
    )

    try:
        deploy = _deployment(config, model, gpu, tp, engine, dataset, temperature)
        grid = tuple(sorted(set(_csv_list(concurrencies, "--concurrencies", int))))
        if grid[0] < 1:
            raise InputError("--concurrencies", "must be >= 1")
        base = preset_method(
            _known_method(method), deploy.workload.trace or "sharegpt", None, deploy.model
        )
        if base.name == "autoregressive":
            raise InputError("--method", "choose a speculative method")
        if alpha is not None:
            base = base.model_copy(update={"acceptance": AcceptanceConfig(alpha=alpha)})
        is_tree = base.tree not in (None, "chain")
        if is_tree:
            ks = sorted(set(_csv_list(tree_budgets, "--tree-budgets", int)))
            if ks[0] < base.k:
                raise InputError("--tree-budgets", f"each budget must be >= the depth {base.k}")
        else:
            ks = list(range(1, k_max + 1))
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            console=err,
            disable=not sys.stderr.isatty(),
        ) as bar:
            task = bar.add_task("simulating", total=len(grid))
            table = recommend(
                deploy,
                base,
                ks,
                grid,
                knob="tree_nodes" if is_tree else "k",
                progress=lambda m: bar.update(task, advance=1, description=m),
            )
        from simspec.catalog.hardware import load_engine

        max_batch = int(load_engine(deploy.engine)["max_num_seqs"])
        bands = schedule(table, max_batch)
        spec_cfg = None if is_tree else speculative_config(base, bands)
        if out is not None:
            _write_atomic(table, out)
        if json_out is not None and spec_cfg is not None:
            write_text_atomic(json_out, speculative_config_json(spec_cfg) + "\n")
    except ValidationError as exc:
        _fail(validation_message(exc))
    except (InputError, ScenarioError) as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"cannot write a file: {exc.strerror or exc}")
    _print_frame(
        table.round(3),
        f"{base.name} on {deploy.model}, {deploy.gpu} x{deploy.tp}: "
        "speedup over plain decoding by K and concurrency",
    )
    err.print(
        "How: every K and plain decoding ran closed-loop at each concurrency on the same "
        "workload and seed; the best K (0 if none beats plain decoding) holds from its grid "
        "point up to the next; equal neighbours merge; the last band runs to max_num_seqs."
    )
    if is_tree:
        print(f"tree_schedule: {bands}")
        err.print(
            "a tree budget per band (0 = off): simspec's tree_schedule, for "
            "`simspec policy`; vLLM's Dynamic SD schedules K, not tree budgets"
        )
        return
    print(f"num_speculative_tokens_per_batch_size: {bands}")
    if spec_cfg is None:
        err.print(f"vLLM has no {base.name} method: the schedule above is simspec's k_schedule")
    else:
        print(f"--speculative-config '{speculative_config_json(spec_cfg)}'")


@app.command("methods")
def methods_command(
    name: Annotated[
        str | None, typer.Argument(help="one method: its defaults and every preset's source")
    ] = None,
) -> None:
    """Every method simspec models, its default configuration and acceptance presets.

    Presets are per domain (chat, code, math, summarisation), each with its source rows.
    """
    from simspec.catalog.methods import (
        DATASET_DOMAIN,
        TRACE_DATASETS,
        method_defaults,
        method_info,
        method_presets,
        preset_acceptance,
    )

    if name is not None and name not in SPECULATORS:
        _fail(f"method: unknown method {name!r}; choose from {', '.join(SPECULATORS)}")
    datasets = {DATASET_DOMAIN[ds]: ds for ds in TRACE_DATASETS}
    if name is None:
        table = Table(title="Methods (simspec methods NAME: what each is, and every source)")
        table.add_column("method", no_wrap=True, min_width=max(map(len, SPECULATORS)))
        for col in ("default config", *datasets):
            table.add_column(col)
        for n in SPECULATORS:
            if n == "autoregressive":
                continue
            cells = [_acceptance_cell(preset_acceptance(n, ds)) for ds in datasets.values()]
            table.add_row(n, _shape_cell(method_defaults(n)), *cells)
        Console().print(table)
        err.print(
            "acceptance: τ = published tokens per step (bonus included), α = rate, "
            "trace = replay of measured acceptance; '*' = fallback or proxy"
        )
        return
    entry = method_presets().get(name, {})
    console = Console()
    console.print(f"[bold]{name}[/]: {method_info(name).summary}")
    console.print(f"default config: {_config_cell(method_defaults(name))}")
    if entry.get("config_source"):
        console.print(f"config source: {entry['config_source']}")
    for domain, ds in datasets.items():
        acc = preset_acceptance(name, ds)
        text = "none (give --alpha or --tau)" if acc is None else acc.source
        console.print(f"- {domain} ({ds}): {_acceptance_cell(acc)} — {text}")
    if entry.get("note"):
        console.print(f"note: {entry['note']}")


def _shape_cell(cfg: dict[str, Any]) -> str:
    """A short description of a method's draft shape."""
    if cfg["name"] == "lookahead":
        return "W={lookahead_window} N={lookahead_ngram} G={lookahead_guesses}".format(**cfg)
    if cfg["name"] == "redrafter":
        return f"{cfg['beam_width']} beams x {cfg['k']}"
    if cfg.get("tree"):
        return f"{cfg['tree']} tree {cfg['tree_nodes']}, depth {cfg['k']}, top-{cfg['tree_topk']}"
    extra = f", {cfg['draft_layers']} layers" if cfg.get("draft_layers") else ""
    return f"chain K={cfg['k']}{extra}"


def _config_cell(cfg: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in cfg.items() if k != "name")


def _acceptance_cell(acc: Any) -> str:
    if acc is None:
        return "—"
    mark = "*" if ("proxy" in acc.source or "overall" in acc.source or "only" in acc.source) else ""
    if acc.trace:
        return f"trace {acc.trace}{mark}"
    if acc.tau is not None:
        return f"τ {acc.tau:g}{mark}"
    return f"α {acc.alpha:g}{mark}"


calibrate_app = typer.Typer(
    no_args_is_help=True,
    help="Fit hardware profiles to GPU timing tables and show how well they fit.",
)
app.add_typer(calibrate_app, name="calibrate")


@calibrate_app.command("fit")
def calibrate_fit(
    timings: Annotated[
        list[Path],
        typer.Argument(
            help="timing CSVs from calibration/time_forward.py, Vidur/LLMServingSim tables, "
            "or directories to search for them",
            show_default=False,
        ),
    ],
    out: Annotated[
        Path, typer.Option(help="profile to write (.yaml/.yml or .json)", show_default=False)
    ],
    gpu: Annotated[str, typer.Option(help="GPU the timings were taken on")] = "h100_sxm",
    fallback: Annotated[
        str | None,
        typer.Option(
            help="profile id or file for operators the timings lack (the harness times no "
            "all-reduce) [default: the GPU's packaged profile]"
        ),
    ] = None,
    only: Annotated[
        str | None,
        typer.Option(
            help="fit only these operators (comma list of gemm, attention, elementwise, "
            "allreduce); the rest come from --fallback. E.g. 'gemm,elementwise' keeps the "
            "packaged vLLM attention instead of the harness's PyTorch SDPA kernel"
        ),
    ] = None,
) -> None:
    """Fit every operator's constants to TIMINGS and write a profile with provenance.

    Example: simspec calibrate fit calibration/data/h100.csv --gpu h100_sxm --out my.yaml
    """
    from simspec.catalog.hardware import load_gpu, load_profile
    from simspec.studies.calibration.fit import FORMS, fit_all
    from simspec.studies.calibration.profile import build_profile, write_profile
    from simspec.studies.calibration.samples import discover

    if out.suffix not in (".yaml", ".yml", ".json"):
        _fail(f"--out: give a .yaml, .yml or .json file name (got {str(out)!r})")
    try:
        spec = load_gpu(gpu)
        samples, files = discover(timings, gpu)
        if only is not None:
            wanted = _csv_list(only, "--only")
            unknown = sorted(set(wanted) - set(FORMS))
            if unknown:
                raise InputError(
                    "--only", f"unknown operator {unknown[0]!r}; choose from {', '.join(FORMS)}"
                )
            samples = samples[samples["operator"].isin(wanted)]
        back = load_profile(fallback or gpu)
        fits = fit_all(samples, spec)
        profile = build_profile(gpu, fits, samples, files, fallback=back)
    except (InputError, ValueError) as exc:
        _fail(str(exc))
    except (OSError, pd.errors.ParserError, KeyError) as exc:
        _fail(f"timings: cannot read a table ({type(exc).__name__}: {exc})")
    try:
        write_profile(profile, out)
    except OSError as exc:
        _fail(f"--out: cannot write {str(out)!r}: {exc.strerror or exc}")
    table = Table(title=f"Fit of {gpu} from {len(files)} file(s)")
    for col in ("operator", "samples", "fit MAPE", "held-out MAPE", "held-out split"):
        table.add_column(col)
    for op, fit in fits.items():
        s = fit.summary()
        table.add_row(
            op,
            str(s["n_samples"]),
            f"{s['fit_mape']:.1%}",
            f"{s['heldout_mape']:.1%}",
            str(s["heldout_split"]),
        )
    Console().print(table)
    err.print(f"wrote {out}")


@calibrate_app.command("report")
def calibrate_report(
    profile: Annotated[
        str, typer.Option(help="profile id (e.g. h100_sxm) or profile file")
    ] = "h100_sxm",
    gpu: Annotated[
        str | None, typer.Option(help="GPU whose peaks to use [default: the profile's]")
    ] = None,
    timings: Annotated[
        list[Path] | None,
        typer.Option(
            help="timing tables to compare against (repeatable); without it, the "
            "errors stored in the profile are shown"
        ),
    ] = None,
    html: Annotated[
        Path | None, typer.Option(help="write a plotly page: predicted vs measured per operator")
    ] = None,
    csv: Annotated[Path | None, typer.Option(help="write per-sample predictions as CSV")] = None,
    cases: Annotated[
        Path | None,
        typer.Option(help="validation cases CSV: also simulate its plain-decoding TPOT rows"),
    ] = None,
) -> None:
    """A profile's per-operator fit and held-out error, and predicted vs measured.

    With --timings: every sample against the profile (and --html, --csv); with --cases: the
    published plain-decoding TPOT rows simulated end to end.
    """
    from simspec.catalog.hardware import load_gpu, load_profile
    from simspec.studies.calibration.report import (
        error_table,
        evaluate,
        forward_check,
        stored_fit_table,
        write_html,
    )
    from simspec.studies.calibration.samples import discover, is_harness_csv
    from simspec.studies.calibration.steps import check_step_times, step_time_rows
    from simspec.studies.validation.cases import read_cases

    try:
        prof = load_profile(profile)
        spec = load_gpu(gpu or prof.gpu)
        if not timings and (html or csv):
            raise InputError("--timings", "--html and --csv need timing tables to compare with")
        case_rows = step_time_rows(read_cases(cases), spec.id) if cases else None
        _print_frame(stored_fit_table(prof), f"Profile {prof.gpu} ({prof.status}): stored fit")
        if timings:
            samples, files = discover(timings, spec.id)
            evaluated = evaluate(prof, samples, spec)
            _print_frame(error_table(evaluated, ("operator",)), "Predicted vs measured")
            _print_frame(error_table(evaluated), "... per operation")
            for path in files:
                if path.endswith(".csv") and is_harness_csv(Path(path)):
                    steps = forward_check(prof, spec, Path(path))
                    _print_frame(
                        error_table(steps, ("kind", "op")),
                        f"Whole steps in {Path(path).name}: sum of operators vs measured",
                    )
            if csv:
                write_text_atomic(csv, evaluated.to_csv(index=False, float_format="%.6g"))
            if html:
                write_html(evaluated, prof, html)
        if case_rows is not None:
            steps = check_step_times(case_rows, profile if Path(profile).suffix else None)
            _print_frame(steps, f"Plain-decoding TPOT on {spec.id}: simulated vs published")
            if not steps.empty:
                err.print(f"TPOT MAPE over {len(steps)} rows: {steps.attrs['mape']:.1%}")
    except (InputError, ScenarioError, ValueError) as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"cannot read or write a file: {exc}")


@app.command("validate")
def validate_command(
    cases: Annotated[
        Path | None,
        typer.Option(
            help="case table with the shared/validation/cases.csv columns "
            "[default: the packaged copy of those cases]"
        ),
    ] = None,
    out: Annotated[
        Path,
        typer.Option(
            help="predictions: every input column plus predicted_value, "
            "predicted_tau, rel_error, status, skip_reason (.csv)"
        ),
    ] = Path("predictions.csv"),
    report: Annotated[
        Path | None, typer.Option(help="also write a self-contained plotly HTML report")
    ] = None,
    workers: Annotated[
        int | None, typer.Option(min=1, max=256, help="processes [default: all cores]")
    ] = None,
    assume_gpu: Annotated[
        str | None,
        typer.Option(
            help="run rows whose gpu is 'unknown' on this GPU preset (each such row "
            "says so in its assumptions column) [default: skip them]"
        ),
    ] = None,
) -> None:
    """Predict every published measurement in a case table and report the error honestly.

    Each row becomes a scenario (model, GPU, TP, engine profile, load, method and acceptance:
    the row's trace, else its measured_tau, else the method's preset) and the row's metric is
    predicted. Rows simspec cannot express are kept, with status "skipped" and the reason.
    Example: simspec validate --out predictions.csv --report validation.html
    """
    from simspec.studies.validation.cases import read_cases
    from simspec.studies.validation.report import write_report
    from simspec.studies.validation.run import validate
    from simspec.studies.validation.summary import series_table, unique_mape

    try:
        if out.suffix != ".csv":
            raise InputError("--out", f"must end in .csv, got {str(out)!r}")
        if report is not None and report.suffix not in (".html", ".htm"):
            raise InputError("--report", f"must end in .html, got {str(report)!r}")
        frame = read_cases(cases)
        if assume_gpu is not None:
            from simspec.catalog.hardware import load_gpu

            try:
                load_gpu(assume_gpu)
            except InputError as exc:
                raise InputError("--assume-gpu", exc.message) from None
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TimeRemainingColumn(),
            console=err,
            transient=True,
            disable=not err.is_terminal,
        ) as bar:
            task = bar.add_task("simulating the cases", total=None)
            pred = validate(
                frame,
                workers=workers,
                assume_gpu=assume_gpu,
                progress=lambda done, total: bar.update(task, completed=done, total=total),
            )
        table = series_table(pred)
        # text cells are quoted: a user's cell may hold a bare carriage return, which an
        # unquoted CSV would read back as a line break
        text = pred.to_csv(index=False, float_format="%.6g", quoting=csv_module.QUOTE_NONNUMERIC)
        write_text_atomic(out, text)
        if report is not None:
            write_report(pred, table, report)
    except InputError as exc:
        _fail(str(exc))
    except BrokenProcessPool:
        _fail("a worker process died (out of memory?); rerun with --workers 1")
    except OSError as exc:
        _fail(f"cannot read or write a file: {exc}")
    shown = table.rename(columns={"max_abs_error": "max |err|", "trend_rho": "trend rho"})
    _print_frame(shown, "Validation: predicted vs published, per series", width=140)
    ok = int(table.iloc[-1]["ok"])
    err.print(
        f"{ok} of {len(pred)} rows predicted; MAPE {table.iloc[-1]['mape']:.1%} "
        f"({unique_mape(pred):.1%} counting each measurement once); wrote {out}"
        + (f" and {report}" if report else "")
    )


def _print_frame(frame: pd.DataFrame, title: str, width: int | None = None) -> None:
    table = Table(title=title)
    for col in frame.columns:
        table.add_column(str(col), no_wrap=width is not None and col == frame.columns[0])
    for row in frame.itertuples(index=False):
        table.add_row(*(_number(v) if isinstance(v, float) else str(v) for v in row))
    console = Console()
    if width is not None and not console.is_terminal:
        console = Console(width=width)  # a file or pipe: keep long names whole
    console.print(table)


def _number(v: float) -> str:
    """Readable in a table: thousands with separators, small values to 3 significant digits."""
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    return f"{v:.1f}" if abs(v) >= 100 else f"{v:.3g}"


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
                f"[bold red]error:[/] {one_line(exc.format_message())}",
                highlight=False,
                soft_wrap=True,
            )
            code = exc.exit_code
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
