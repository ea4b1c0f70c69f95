"""Each measured run, simulated with the same workload: the predicted metrics beside the
measured ones.

The workload is the benchmark's as the file states it: its successful requests, sent as vLLM's
and SGLang's clients send them (request rate inf: all at once, at most ``max_concurrency`` in
flight, a new one the moment one finishes: a closed loop from an empty server to the last
departure; a request rate: Poisson arrivals), every request measured, as the benchmark measures
every request. Lengths are each request's own where the file lists them (``--save-detailed``),
else the run's mean prompt and output lengths for every request; each run says which.

Acceptance (a speculative method): the run's own (per-position shares as α per position, else
its acceptance length as τ at the method's K), else the ``--spec-metrics`` dump's, else the
method's preset.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError

from simspec.catalog.hardware import load_profile
from simspec.catalog.methods import preset_method
from simspec.catalog.models import id_precision, load_model, model_ids, preset_id
from simspec.config import (
    MAX_CONCURRENCY,
    MAX_K,
    MAX_MEAN_LEN,
    MAX_RUNS,
    MAX_TOTAL_REQUESTS,
    MIN_RATE,
    Deployment,
    LengthSpec,
    MethodConfig,
    Scenario,
    WorkloadConfig,
)
from simspec.engine.simulation import simulate
from simspec.errors import InputError, ScenarioError, first_error
from simspec.studies.bench.acceptance import drafted_only, with_acceptance
from simspec.studies.bench.measured import Acceptance, MeasuredRun, ordered, percentile_of
from simspec.studies.bench.simulated import simulated_metrics
from simspec.studies.provenance import deployment_fitted_on

COLUMNS = ("run", "metric", "measured", "predicted", "rel_error", "load", "lengths")


@dataclass(frozen=True)
class Plan:
    """How one run is simulated, and what was assumed to simulate it."""

    run: MeasuredRun
    scenario: Scenario
    lengths: str  # "per request" or "mean, fixed"
    notes: tuple[str, ...]


# quantised checkpoints name their weights in the repo id (Qwen/Qwen3-8B-FP8,
# hugging-quants/...-AWQ-INT4, RedHatAI/...-W8A8, nvidia/...-NVFP4)
_NAMED_PRECISION = re.compile(
    r"(?:^|[-_/.])(fp8|int8|w8a8|w8a16|int4|w4a16|awq|gptq|nvfp4|mxfp4|fp4)(?:$|[-_.])", re.I
)


def named_precision(model_id: str) -> str | None:
    """The weight format a model id names (``FP8``, ``AWQ``, ...), else None."""
    m = _NAMED_PRECISION.search(model_id)
    return m.group(1).upper() if m else None


def check_runs(runs: list[MeasuredRun]) -> None:
    """Every run fits simspec's bounds together (config.MAX_RUNS runs, MAX_TOTAL_REQUESTS
    requests over all of them: a command's bounds wherever runs are many)."""
    if len(runs) > MAX_RUNS:
        raise InputError(
            "RESULT", f"{len(runs):,} runs; one command simulates at most {MAX_RUNS:,}"
        )
    total = sum(_simulated_requests(r) for r in runs)
    if total > MAX_TOTAL_REQUESTS:
        raise InputError(
            "RESULT",
            f"{total:,} requests over the runs; one command simulates at most "
            f"{MAX_TOTAL_REQUESTS:,}",
        )


def _preset(model: str) -> str | None:
    """The packaged preset ``model`` names (its id, or a Hugging Face id read as one); None for
    anything else (a config.json path, a name simspec does not package)."""
    named = preset_id(model)
    return named if named in model_ids() else None


def plan_run(
    run: MeasuredRun,
    deployment: dict[str, Any],
    method: str,
    k: int | None,
    shared: Acceptance | None,
    lengths_dir: Path,
) -> Plan:
    """The scenario that replays ``run`` on ``deployment`` (Scenario fields the flags set;
    ``model`` defaults to the file's own when it names a preset) running ``method``.
    Per-request lengths are written to a JSONL file in ``lengths_dir`` (the workload reads
    lengths from a file), which must outlive the simulation."""
    notes: list[str] = []
    if not run.metrics:  # QA: "0 metric(s) compared", a header-only CSV and exit 0
        raise InputError(
            run.name,
            "holds no metric simspec compares (mean, median or percentile TTFT, TPOT, ITL or "
            "E2E latency, or a throughput): nothing to compare",
        )
    model = deployment.get("model")
    if model is None:
        if run.model is None:
            raise InputError("--model", f"{run.name} does not name its model: give --model")
        model = preset_id(run.model)
        try:
            load_model(model)
        except InputError:
            raise InputError(
                "--model",
                f"{run.name} names model {run.model!r}, not a simspec preset: give --model",
            ) from None
        notes.append(f"model {model}, as the file names it")
    elif (
        run.model is not None
        and (named := _preset(run.model)) is not None
        and (given := _preset(model)) is not None
        and named != given
    ):
        raise InputError(
            "--model",
            f"{model}, but {run.name} says it ran {run.model}: a run predicted on another "
            f"model is no comparison; give --model {named}, or leave it out",
        )
    elif run.model is not None and _preset(run.model) is None:  # QA: taken without a word
        notes.append(f"the file names model {run.model!r}, no simspec preset: simulated as {model}")
    if run.model is not None and deployment.get("precision") is None:
        said = named_precision(run.model)
        if (weights := id_precision(run.model)) is not None:
            # a preset's own -FP8 checkpoint id, as --model reads it (cli.flags)
            deployment = {**deployment, "precision": weights}
            notes.append(f"weights in {weights}, as the file's model {run.model!r} names them")
        elif said is not None:  # QA: Qwen3-8B-FP8 ran in the preset's bf16 without a word
            notes.append(
                f"the file's model {run.model!r} names {said} weights, and no --precision was "
                f"given: simulated at {model}'s own weights (give --precision to match)"
            )
    if run.failed:  # QA: a run that lost a third of its requests was compared without a word
        notes.append(
            f"{run.failed} of the {run.requests + run.failed} requests sent failed: the "
            f"{run.requests} that succeeded are simulated, and the load the server saw while "
            "the others were in flight is not"
        )
    work, lengths = _workload(run, lengths_dir, notes)
    acceptance = run.acceptance or shared
    cfg = _method(run, method, k, acceptance, model, deployment, notes)
    try:
        scenario = Scenario(**{**deployment, "model": model}, workload=work, method=cfg)
    except ValidationError as exc:
        field, message = first_error(exc)
        raise InputError(field, f"{run.name}: {message}") from None
    if scenario.profile is not None:
        prof = load_profile(scenario.profile)
        fitted = prof.gpu
        if fitted != scenario.gpu:  # QA: another GPU's profile was applied without a word
            notes.append(f"profile fitted on {fitted}, applied to {scenario.gpu}'s datasheet peaks")
        on = deployment_fitted_on(prof)
        if on is not None and on != (scenario.model, scenario.tp):
            # a calibrate bench profile's host constants are that server's (QA: fitted on
            # qwen3-8b at tp=1, compared against llama runs and at tp=2 without a word)
            notes.append(
                f"the profile's deployment constants were fitted on {on[0]} at tp={on[1]}, "
                f"applied to {scenario.model} at tp={scenario.tp}"
            )
    return Plan(run, scenario, lengths, tuple(notes))


def sglang_runs(runs: list[MeasuredRun]) -> bool:
    """Whether every run is SGLang bench output, whose server is SGLang's (compare and the
    explorer's Compare tab run them on its profile unless told another engine)."""
    return {r.kind.split("-")[0] for r in runs} == {"sglang"}


def _simulated_requests(run: MeasuredRun) -> int:
    return len(run.input_lens) if run.input_lens is not None else run.requests


def _workload(run: MeasuredRun, lengths_dir: Path, notes: list[str]) -> tuple[WorkloadConfig, str]:
    n = _simulated_requests(run)
    if run.detailed:
        assert run.input_lens is not None and run.output_lens is not None
        path = lengths_dir / f"{len(list(lengths_dir.iterdir()))}.jsonl"
        path.write_text(
            "".join(
                json.dumps({"prompt_len": p, "output_len": o, "acc_len": {"lengths": [1]}}) + "\n"
                for p, o in zip(run.input_lens, run.output_lens, strict=True)
            ),
            encoding="utf-8",
        )
        lengths = "per request"
        sizes: dict[str, Any] = {"lengths_from": str(path)}
        notes.append(f"lengths: each of the {n} requests' own, as the file lists them")
    else:
        lengths = "mean, fixed"
        for side, mean, total in (
            ("input", run.mean_input_len, "total_input_tokens"),
            ("output", run.mean_output_len, "total_output_tokens"),
        ):
            if mean > MAX_MEAN_LEN:  # LengthSpec's own bound, said of the file's fields (QA)
                raise InputError(
                    f"{run.name}: {total}",
                    f"{mean:,.0f} {side} tokens a request ({total} / completed); simspec runs "
                    f"lengths of at most {MAX_MEAN_LEN:,.0f}",
                )
        sizes = {
            "lengths_from": None,
            "prompt": LengthSpec(mean=max(1.0, run.mean_input_len)),
            "output": LengthSpec(mean=max(1.0, run.mean_output_len)),
        }
        notes.append(
            f"lengths: the run's means for every request ({run.mean_input_len:.1f} prompt, "
            f"{run.mean_output_len:.1f} output tokens): the file lists no per-request lengths"
        )
    if run.closed:
        c = min(run.max_concurrency or n, n)
        if c > MAX_CONCURRENCY:
            raise InputError(
                f"{run.name}: max_concurrency",
                f"{c:,} requests in flight at once; simspec holds at most {MAX_CONCURRENCY:,}",
            )
        if run.max_concurrency is None:
            notes.append(f"load: all {n} requests sent at once (request rate inf, no cap)")
        else:
            cap = run.max_concurrency  # the file's own cap, which c is at most (QA)
            notes.append(f"load: a closed loop of {c} (request rate inf, max_concurrency {cap})")
        work = WorkloadConfig(concurrency=c, requests=n, measure="whole", **sizes)
    else:
        if run.request_rate < MIN_RATE:
            raise InputError(
                f"{run.name}: request_rate",
                f"{run.request_rate:g} requests/s is below simspec's lowest, {MIN_RATE:g}",
            )
        # simspec's open loop sends each arrival when it comes (Poisson or a replay): a client
        # that holds arrivals back, or draws gamma gaps, is a load it cannot run
        if run.max_concurrency is not None and run.max_concurrency < n:
            raise InputError(
                f"{run.name}: max_concurrency",
                f"a cap of {run.max_concurrency} in flight under a request rate is not modelled "
                "(simspec's arrivals are never held back); compare a run without the cap, or "
                "one at request rate inf (a closed loop)",
            )
        if run.burstiness != 1.0:
            raise InputError(
                f"{run.name}: burstiness",
                f"{run.burstiness:g}: gamma arrivals are not modelled; simspec's arrivals are "
                "Poisson (burstiness 1) or a replayed trace",
            )
        # vllm bench serve rescales its drawn arrivals to end at n / rate (its get_request's
        # normalize_factor); SGLang's bench_serving sends the drawn gaps as they are
        vllm = run.kind.startswith("vllm")
        shape = ", the last sent at requests / rate as vllm bench serve does" if vllm else ""
        rate = run.request_rate
        if run.failed:
            # the client spread every request it sent over the run, the failed ones too
            # (get_request: total_requests / request_rate): the ones that succeeded arrive at
            # their share of the rate over that span (QA: spread over n / rate alone, the
            # throughput of a run with 10 % failed was predicted 11 % high)
            rate *= n / (n + run.failed)
            shape += f" (the {n} that succeeded of {n + run.failed} sent: {rate:.4g}/s)"
        notes.append(f"load: Poisson arrivals at {run.request_rate:g} requests/s{shape}")
        work = WorkloadConfig(
            arrival="poisson", rate=max(rate, MIN_RATE), requests=n, measure="whole",
            arrivals_end_at_rate=vllm, **sizes,
        )  # fmt: skip
    return work, lengths


def _method(
    run: MeasuredRun,
    name: str,
    k: int | None,
    acceptance: Acceptance | None,
    model: str,
    deployment: dict[str, Any],
    notes: list[str],
) -> MethodConfig:
    """The method the server ran, drafted as its engine drafts it (vLLM: a chain unless a
    config gives a tree), with the acceptance it measured where the run has one, taken as
    measured at the run's own temperature and top-p."""
    if name == "autoregressive":
        if k is not None:
            raise InputError("--k", "plain decoding drafts nothing: give --method too")
        if acceptance is not None:
            tau = f" (acceptance length {acceptance.length:.2f})" if acceptance.length else ""
            raise InputError(
                "--method",
                f"{run.name} measured speculative decoding{tau}: give --method, the method "
                "the server ran",
            )
        if "temperature" in deployment or "top_p" in deployment:  # QA: taken without a word
            notes.append(
                "--temperature/--top-p: plain decoding's time does not depend on them (they "
                "move a speculative method's acceptance only)"
            )
        return MethodConfig(name=name, k=0)
    engine = deployment.get("engine") or Deployment.model_fields["engine"].default
    # QA: a run stating only its acceptance length kept the preset's 63-node Medusa tree on
    # vLLM, which verifies a chain; the same run with per-position rates ran a chain
    fields = preset_method(name, target=model, engine=engine).model_dump(exclude_none=True)
    if k is not None:
        if not 1 <= k <= MAX_K:  # as every other command's --k (QA: 0 ran plain decoding)
            raise InputError(
                "--k",
                f"must be 1 to {MAX_K} (got {k}): the draft length of every speculative "
                "method; autoregressive is the method that drafts none",
            )
        fields["k"] = k
    if acceptance is None:
        notes.append(f"acceptance: {name}'s preset (the file measured none)")
        return MethodConfig(**fields)
    if drafted_only(acceptance, name):  # counted over drafting steps: the preset's replay
        preset = (fields.get("acceptance") or {}).get("source") or "packaged"
        notes.append(
            f"acceptance: {name}'s preset ({preset}), not the run's: its counts cover the "
            "steps that drafted alone (vLLM), and a lookup drafts only where its text matches"
        )
        return MethodConfig(**fields)
    sampled = (deployment.get("temperature", 0.0), deployment.get("top_p", 1.0))
    fields, note = with_acceptance(fields, acceptance, k, run.name, sampled=sampled)
    notes.append(note)
    return MethodConfig(**fields)


def compare(plans: list[Plan], step: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Simulate every plan; one row per run and measured metric (``COLUMNS``)."""
    rows = []
    for plan in plans:
        stated = ordered(plan.run.metrics)
        extra = tuple(
            sorted({q for m in stated if (q := percentile_of(m.split("_", 1)[0])) is not None})
        )
        try:
            sglang = plan.run.per_token_itl  # SGLang bench_serving's ITL per token
            predicted = simulated_metrics(simulate(plan.scenario), extra, per_token_itl=sglang)
        except ScenarioError as exc:
            raise ScenarioError(f"{plan.run.name}: {exc}") from None
        # a decode instance's TTFT is its wait for a slot, where the client's holds the
        # prefill instance and the KV transfer too: not predicted (QA: scored as -100 %)
        decode = plan.scenario.disaggregation_mode == "decode"
        for metric in stated:
            measured = plan.run.metrics[metric]
            value = predicted.get(metric, math.nan)
            if decode and "ttft" in metric:
                value = math.nan
            rows.append(
                {
                    "run": plan.run.name,
                    "metric": metric,
                    "measured": measured,
                    "predicted": value,
                    "rel_error": (value - measured) / measured if measured > 0 else math.nan,
                    "load": plan.run.load_label,
                    "lengths": plan.lengths,
                }
            )
        if step is not None:
            step(plan.run.name)
    return pd.DataFrame(rows, columns=list(COLUMNS))
