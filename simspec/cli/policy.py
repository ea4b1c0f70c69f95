"""``simspec policy``: a load-following speculation policy against fixed settings."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from simspec.catalog.vllm import VLLM_KEYS
from simspec.cli.common import err, one_line_errors
from simspec.cli.flags import (
    DeploymentFlags,
    overlay,
    read_config,
    with_flags,
    with_preset_ids,
    with_profile_gpu,
)
from simspec.cli.method_flags import MethodFlags, preset_dataset, trace_methods
from simspec.cli.tables import check_outputs, print_frame, print_provenance, write_frame
from simspec.config import DEFAULT_MEASURED, MAX_REQUESTS, MethodConfig
from simspec.errors import InputError
from simspec.studies.schedule import SCHEDULE_FIELDS

if TYPE_CHECKING:
    from simspec.config import WorkloadConfig
    from simspec.studies.policy import PolicyConfig

# the comparison's columns as printed: the CSV keeps every column under its own name
SHOWN = {
    "setting": "setting",
    "throughput_tok_s": "tok/s",
    "tpot_ms_p50": "TPOT p50 ms",
    "tpot_ms_p99": "TPOT p99 ms",
    "ttft_ms_p99": "TTFT p99 ms",
    "e2e_s_p50": "e2e p50 s",
    "mean_accept_len": "τ",
    "policy_tpot_gain": "TPOT gain",
    "policy_e2e_gain": "e2e gain",
}


@with_flags(DeploymentFlags)
@one_line_errors
def policy(
    config: Annotated[
        Path | None,
        typer.Option(
            help="YAML/JSON: deployment, workload, method and policy (see "
            "examples/policy.yaml); flags override it. Without it: the deployment flags, "
            "a --speculative-config whose schedule is the policy, and a --rate-csv for the "
            "load (else a closed loop of one request, which a schedule's later bands never "
            "reach)",
        ),
    ] = None,
    rate_csv: Annotated[
        Path | None,
        typer.Option(
            help="arrival rate over time (CSV: time_s, rate): open-loop Poisson "
            "arrivals that follow it"
        ),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="write the comparison (.csv, or .parquet)")
    ] = None,
    *,
    flags: DeploymentFlags,
) -> None:
    """A load-following policy vs plain decoding and fixed settings.

    The policy, plain decoding and each fixed setting all run on the same (typically
    time-varying) workload and seed.

    Example: simspec policy --config examples/policy.yaml --out policy.csv
    """
    from simspec.engine.workload import read_rate_csv
    from simspec.studies.policy import run_policy, settings

    check_outputs(
        (out, "--out", (".csv", ".parquet")),
        inputs=[(rate_csv, "--rate-csv"), (config, "--config")],
    )
    if config is None and not flags.speculative_config:
        raise InputError(
            "--config",
            "give the policy: a --config file with method and policy (examples/policy.yaml), "
            "or a --speculative-config with num_speculative_tokens_per_batch_size (as "
            "simspec recommend prints it)",
        )
    # under a replay the trace's lengths are the requests': --dataset and --token-trace then
    # name acceptance, as with fleet --trace (QA: --dataset was refused as lengths_from)
    file = read_config(config) if config else {}
    data = flags._scenario(config, replay=replayed_trace(file) is not None)
    said = ""
    if rate_csv is not None:
        file_wl = file.get("workload") or {}
        for field in ("concurrency", "arrival_trace"):
            if isinstance(file_wl, dict) and file_wl.get(field) is not None:
                # Poisson arrivals following the CSV replace them (QA: a closed loop's
                # concurrency was dropped without a word)
                raise InputError(
                    f"workload.{field}",
                    f"the --config file sets it, and --rate-csv runs Poisson arrivals that "
                    f"follow the CSV instead: drop {field} from the file, or --rate-csv",
                )
        schedule = read_rate_csv(str(rate_csv))
        rates: dict[str, Any] = {"arrival": "poisson", "rate_schedule": schedule}
        if "requests" not in (data.get("workload") or {}):
            # no count stated (policy has no --requests flag): the requests the schedule
            # expects, so every piece runs (QA: the README's --rate-csv example was refused,
            # 256 requests arriving before its peak, with no flag to raise them)
            rates["requests"] = schedule_requests(schedule)
            if rates["requests"] > MAX_REQUESTS:  # QA: blamed on a --config file not given
                raise InputError(
                    "--rate-csv",
                    f"its schedule expects {rates['requests']:,} requests; a run serves at "
                    f"most {MAX_REQUESTS:,}: a shorter schedule or lower rates",
                )
            said = _requests_said(schedule, rates["requests"])
        data = overlay(data, {"workload": rates})
    try:
        cfg = policy_config(data, flags)
    except InputError as exc:  # named as written, before anything else is said (QA)
        raise policy_error(exc, from_flag=config is None) from None
    if said:
        err.print(said, highlight=False)
    check_schedule_covered(cfg.workload)
    try:
        frame = run_policy(cfg)
    except InputError as exc:
        raise policy_error(exc, from_flag=config is None) from None
    if out is not None:  # its deployment and provenance as columns (QA: the CSV had none)
        from simspec.cli.plan import with_asked
        from simspec.studies.provenance import with_provenance

        plain = MethodConfig(name="autoregressive", k=0)
        methods = [plain if s == "autoregressive" else cfg.method for s in frame["setting"]]
        write_frame(with_provenance(with_asked(frame, cfg, {}), cfg, methods), out)
    shown = frame[list(SHOWN)].rename(columns=SHOWN).round(2)
    layout = ", ".join(
        f"{n} {v}" for n, v in (("tp", cfg.tp), ("ep", cfg.ep), ("dp", cfg.dp)) if v > 1
    )
    where = f"{cfg.model}, {cfg.gpu}" + (f" ({layout})" if layout else "")
    print_frame(shown, f"Policy vs fixed settings: {cfg.method.name} on {where}")
    # the method as the policy runs it, its schedule included (tables.schedule_notes)
    print_provenance(cfg, [settings(cfg)[-1][1]])
    err.print(
        "gain = the setting's median (TPOT | end-to-end latency) / the policy's: > 1 means "
        "the policy is faster"
    )
    tail_note(frame)
    memory_note(frame)
    beaten_note(frame, open_loop=cfg.workload.arrival != "closed")


def memory_note(frame: Any) -> None:
    """A note where the policy's replica holds fewer KV blocks than plain decoding's: its
    draft's weights and KV are loaded whatever K its schedule picks, so under a load that fills
    the cache it runs fewer requests at once even where it never speculates (QA: a schedule of
    K=0 everywhere showed a 2 % TPOT gain over plain decoding)."""
    if "kv_blocks_total" not in frame.columns:
        return
    blocks = frame.set_index("setting")["kv_blocks_total"]
    if "policy" not in blocks or "autoregressive" not in blocks:
        return
    mine, plain = blocks["policy"], blocks["autoregressive"]
    if not mine < plain:
        return
    err.print(
        f"note: the policy's replica holds {mine:,.0f} KV blocks against {plain:,.0f} for "
        f"autoregressive ({1 - mine / plain:.1%} fewer): the draft's weights and KV stay loaded "
        "whatever K the schedule picks, so where the cache fills it runs fewer requests at "
        "once, even in bands that do not speculate",
        highlight=False,
    )


def beaten_note(frame: Any, open_loop: bool = False) -> None:
    """A note naming each fixed setting that matches or beats the policy on both throughput
    and median TPOT (QA: fixed K=2 beat the example policy on both, its gain shown as "1", and
    by 4 % on another schedule, without a word). Under open-loop arrivals every setting serves
    the same requests, and its throughput differs only by how long the last ones take to
    drain (QA: one 8,192-token request set the makespan): there the median end-to-end
    latency stands in for it."""
    rows = frame.set_index("setting")
    if "policy" not in rows.index:
        return
    mine = rows.loc["policy"]
    first, unit, said, fmt = (
        ("e2e_s_p50", "s", "e2e p50", ",.2f")
        if open_loop
        else ("throughput_tok_s", "tok/s", "throughput", ",.0f")
    )
    sign = -1.0 if open_loop else 1.0  # a lower latency is better, a higher throughput
    beaters = [
        f"{name} ({said} {r[first]:{fmt}} against {mine[first]:{fmt}} {unit}, TPOT "
        f"p50 {r.tpot_ms_p50:.2f} against {mine.tpot_ms_p50:.2f} ms)"
        for name, r in rows.drop("policy").iterrows()
        if sign * r[first] >= sign * mine[first]
        and r.tpot_ms_p50 <= mine.tpot_ms_p50
        and (sign * r[first] > sign * mine[first] or r.tpot_ms_p50 < mine.tpot_ms_p50)
    ]
    if beaters:
        both = (
            "median end-to-end latency and TPOT" if open_loop else "both throughput and median TPOT"
        )
        err.print(
            f"note: {'; '.join(beaters)} matches or beats the policy on {both} here: its "
            "switching gains nothing at this load",
            highlight=False,
        )


# a tail this many times another setting's is worth a word beside gains taken at the median
TAIL_RATIO = 2.0


def tail_note(frame: Any) -> None:
    """A note where the policy's TTFT p99 is far past another setting's: the gains compare
    medians (QA: a policy that never speculated showed TTFT p99 7.1 s against plain decoding's
    1.6 s, the draft's weights and KV leaving fewer blocks under overload, with "gain 1")."""
    by = frame.set_index("setting")["ttft_ms_p99"]
    if "policy" not in by:
        return
    others = by.drop("policy").dropna()
    if others.empty or not by["policy"] > TAIL_RATIO * others.min():
        return
    best = others.idxmin()
    err.print(
        f"note: the policy's TTFT p99 ({by['policy']:,.0f} ms) is "
        f"{by['policy'] / others.min():.1f}x {best}'s ({others.min():,.0f} ms): the gains "
        "compare medians; a tail this far apart is requests queueing where the policy serves "
        "its load more slowly (its replica holds the draft's weights and KV whether or not "
        "it speculates)",
        highlight=False,
    )


POLICY_FIELDS = ("k_schedule", "tree_schedule", "disable_by_batch_size")


def policy_error(exc: InputError, from_flag: bool) -> InputError:
    """A refusal of the policy named as the user wrote it: ``policy.<field>`` in a --config
    file, the key of a --speculative-config (QA: a K past the method's read
    ``methods.eagle3.k_schedule``, a field no file or flag has)."""
    name = exc.field.rsplit(".", 1)[-1]
    if name not in POLICY_FIELDS:
        return exc
    if from_flag:
        return InputError("--speculative-config", f"{VLLM_KEYS.get(name, name)}: {exc.message}")
    return InputError(f"policy.{name}", exc.message)


def schedule_expected(sched: list[tuple[float, float]]) -> tuple[float, float]:
    """The requests a rate schedule expects (its pieces' rates over their spans) and how long
    its last piece lasts for that: as long as the one before it (a one-piece schedule: a
    minute of it)."""
    if len(sched) < 2:
        return sched[0][1] * 60.0, 60.0
    spans = [sched[i + 1][0] - t for i, (t, _) in enumerate(sched[:-1])]
    expected = sum(r * d for (_, r), d in zip(sched[:-1], spans, strict=True))
    return expected + sched[-1][1] * spans[-1], spans[-1]


def schedule_requests(sched: list[tuple[float, float]]) -> int:
    """The requests a rate schedule expects (:func:`schedule_expected`), at least the default
    measured count."""
    return max(DEFAULT_MEASURED, math.ceil(schedule_expected(sched)[0]))


def _requests_said(sched: list[tuple[float, float]], requests: int) -> str:
    """What the workload's count is, and, where the least a run measures raised it past what
    the schedule expects, how much longer its last piece runs for it (QA: a schedule that
    expected 0.011 requests ran 256 over three days, said to be "what it expects")."""
    expected, last_s = schedule_expected(sched)
    if requests <= math.ceil(expected):
        return (
            f"workload: {requests:,} requests, what the rate schedule expects (its last piece "
            "as long as the one before it)"
        )
    rate = sched[-1][1]
    longer = f"{_s(last_s + (requests - expected) / rate)} s" if rate > 0 else "until they come"
    return (
        f"workload: {requests:,} requests, the least a run measures, where the rate schedule "
        f"expects {expected:,.4g} (its last piece as long as the one before it): the last "
        f"piece, at {rate:g} req/s, runs {longer} instead of {_s(last_s)} s"
    )


def _s(seconds: float) -> str:
    return f"{seconds:,.0f}" if seconds >= 100 else f"{seconds:.3g}"


def check_schedule_covered(wl: WorkloadConfig) -> None:
    """A rate schedule's pieces must all see arrivals: the policy is compared over the day the
    schedule describes, and requests that have all arrived before its last piece starts would
    leave that piece (and the rest of the one before) unsimulated without a word (QA: the
    example's evening, and a rate file's peak, never ran). Refused when the requests the
    schedule expects before its last piece starts reach ``workload.requests``."""
    sched = wl.rate_schedule
    if wl.arrival != "poisson" or not sched or len(sched) < 2:
        return
    expected = sum(r * (sched[i + 1][0] - t) for i, (t, r) in enumerate(sched[:-1]))
    n = wl.num_requests
    if expected >= n:
        last, rate = sched[-1]
        need = math.ceil(expected + rate * (last - sched[-2][0]))
        raise InputError(
            "workload.requests",
            f"{n:,} requests arrive, at this rate schedule, in about the first "
            f"{_arrived_by(sched, n):,.0f} s; its piece from {last:g} s on would never run: "
            f"give at least {need:,} (the pieces before it, then as long again at "
            f"{rate:g} req/s), or a shorter schedule",
        )


def _arrived_by(sched: list[tuple[float, float]], n: int) -> float:
    """When the schedule's expected arrivals reach ``n``."""
    count = 0.0
    for i, (t, r) in enumerate(sched):
        end = sched[i + 1][0] if i + 1 < len(sched) else math.inf
        if r > 0 and count + r * (end - t) >= n:
            return t + (n - count) / r
        count += r * (end - t) if end < math.inf else 0.0
    return sched[-1][0]


def replayed_trace(data: dict[str, Any]) -> str | None:
    """The arrival trace a policy file's workload replays (None: it replays none)."""
    wl = data.get("workload")
    if isinstance(wl, dict) and wl.get("arrival") == "replay":
        ref = wl.get("arrival_trace")
        return ref if isinstance(ref, str) else None
    return None


def policy_config(data: dict[str, Any], flags: MethodFlags) -> PolicyConfig:
    """The policy file with the method flags on top of its method; a --speculative-config
    replaces the method, and its schedule (num_speculative_tokens_per_batch_size,
    disable_by_batch_size) is the policy when the file states none."""
    from simspec.catalog.hardware import load_engine
    from simspec.studies.policy import PolicyConfig

    data = with_profile_gpu(with_preset_ids(dict(data)))
    if "method" in data or flags.speculative_config:
        if (ref := replayed_trace(data)) is not None:
            # the replayed trace's own dataset or domain column sets the acceptance, as fleet
            # and plan read it (QA: azure-code replayed ShareGPT's acceptance, TPOT 26 % off)
            from simspec.catalog.arrival_traces import load_arrival_trace

            trace = load_arrival_trace(ref, "workload.arrival_trace")
            chosen = trace_methods(flags, data, trace, None, [], "--config")
        else:
            dataset = preset_dataset(data.get("workload"), getattr(flags, "dataset", None))
            if flags.token_trace:
                data = overlay(data, {"workload": {"lengths_from": flags.checked_token_trace()}})
            chosen = flags.chosen(data, None, [], dataset, "--config")
        method = next((m for m in chosen if m.get("name") != "autoregressive"), chosen[-1])
        if flags.speculative_config:
            # a --speculative-config's schedule is the policy to compare
            schedule = {f: method.pop(f) for f in SCHEDULE_FIELDS if f in method}
            if schedule and "policy" in data:
                raise InputError(
                    "--speculative-config",
                    "states a schedule and the file a policy: drop one of them",
                )
            data.setdefault("policy", schedule)
            if not data["policy"]:  # in its own keys, not simspec's (QA)
                raise InputError(
                    "--speculative-config",
                    "give num_speculative_tokens_per_batch_size (vLLM's Dynamic SD schedule) "
                    "or disable_by_batch_size: a fixed K is no policy to follow",
                )
        data["method"] = method
    config = PolicyConfig(**data)
    if config.policy.k_schedule and load_engine(config.engine).disables_by_batch_size:
        # as the --speculative-config path refuses it (MethodFlags.vllm_method; QA: a file's
        # policy.k_schedule ran on vllm-v0 without a word)
        raise InputError(
            "policy.k_schedule",
            "is vLLM V1's Dynamic SD, which vLLM V0 (engine "
            f"{config.engine}) never reads: give V0's disable_by_batch_size, or run engine vllm",
        )
    if flags.k is not None and config.policy.k_schedule:
        # the bands set every step's K and the fixed settings compared are theirs (QA: --k 5
        # ran as without it, its CSV row saying k=5)
        raise InputError(
            "--k",
            "the policy's k_schedule sets every step's K, so no K of the method runs: drop --k "
            "and give the K in the schedule's bands",
        )
    return config
