"""A server's measured acceptance as a method's acceptance (``--acceptance-from FILE``, and
each speculative run ``simspec compare`` replays).

vLLM verifies a chain, so per-position shares (vLLM's ``spec_decode_per_position_acceptance_
rates``, or the /metrics counters) become α per position (token i accepted given the ones
before it were) at K = the positions drafted; an acceptance length alone (SGLang's
``accept_length``, vLLM's ``spec_decode_acceptance_length``) becomes τ at the method's K.
"""

from __future__ import annotations

import os
from typing import Any

from simspec.catalog.methods import TOKEN_REPLAYED, measured_acceptance
from simspec.catalog.tables import read_input_text, shown
from simspec.errors import InputError
from simspec.studies.bench.measured import Acceptance, MeasuredRun

TREE_FIELDS = ("tree", "tree_nodes", "tree_topk", "tree_paths", "tree_schedule")


def read_acceptance(path: str | os.PathLike, field: str = "--acceptance-from") -> Acceptance:
    """The acceptance one file measured: a vLLM /metrics dump, or a benchmark result whose
    runs carry one (several runs pooled: :func:`pooled`)."""
    from simspec.studies.bench import MAX_RESULT_BYTES, _runs_of, read_metrics
    from simspec.studies.bench.prometheus import is_metrics_dump

    text = read_input_text(path, field, MAX_RESULT_BYTES)
    if is_metrics_dump(text):
        return read_metrics([path], field)  # again, under the /metrics bound
    runs = [r for r in _runs_of(text, path, field) if r.acceptance is not None]
    if not runs:
        raise InputError(
            field,
            f"{shown(path)} measured no acceptance: give a run against a server with "
            "speculative decoding (vLLM writes spec_decode_per_position_acceptance_rates, "
            "SGLang accept_length), or its /metrics text",
        )
    return pooled(runs, field, shown(path))


def pooled(runs: list[MeasuredRun], field: str, where: str) -> Acceptance:
    """One acceptance for runs of one server: per position where every run has the same
    positions, else the acceptance length where no run has positions. Each run weighs by the
    drafts its counters counted where every run says (a per-position share and τ - 1 are both
    per draft, so the pool is Σ accepted / Σ drafts), else by its output tokens."""
    with_acc = [r for r in runs if r.acceptance is not None]
    accs = [r.acceptance for r in with_acc if r.acceptance is not None]
    if len(accs) == 1:
        return accs[0]
    drafts = [a.drafts for a in accs]
    if all(d is not None for d in drafts):
        weights, by = [float(d or 0.0) for d in drafts], "the drafts it counted"
    else:
        weights, by = [float(r.total_output_tokens) for r in with_acc], "its output tokens"
    total = sum(weights)
    positions = {len(a.per_position) for a in accs}
    source = f"{where}: {len(accs)} runs pooled, each weighted by {by}"
    if len(positions) > 1:  # QA: a K=3 and a K=5 run pooled their lengths as one τ at K=3
        counts = ", ".join(map(str, sorted(positions)))
        raise InputError(
            field,
            f"{where}: its runs measured different draft lengths ({counts} positions); give "
            "the runs of one speculative configuration",
        )
    if len(positions) == 1 and 0 not in positions:
        shares = tuple(
            sum(w * a.per_position[i] for w, a in zip(weights, accs, strict=True)) / total
            for i in range(positions.pop())
        )
        drafted = any(a.drafted_steps_only for a in accs)
        return Acceptance(per_position=shares, source=source, drafted_steps_only=drafted)
    if all(a.length is not None for a in accs):
        length = sum(w * (a.length or 0.0) for w, a in zip(weights, accs, strict=True)) / total
        drafted = any(a.drafted_steps_only for a in accs)
        return Acceptance(length=length, source=source, drafted_steps_only=drafted)
    raise InputError(
        field,
        f"{where}: some of its runs measured no acceptance length; give the runs of one "
        "speculative configuration",
    )


def drafted_only(acc: Acceptance, name: object) -> str:
    """Why ``acc`` cannot stand for lookup method ``name``'s acceptance ("" where it can):
    vLLM counts it over the steps that drafted alone, and a lookup drafts only where its text
    matches, so run as measured every step would draft and accept so (QA: an n-gram run at
    2.5x its own speed)."""
    if not acc.drafted_steps_only or name not in TOKEN_REPLAYED:
        return ""
    return (
        f"vLLM counts acceptance over the steps that drafted alone (Scheduler."
        f"update_from_output records spec-decode stats only for a step with draft tokens), and "
        f"{name} drafts only where its lookup matches: simspec cannot tell from the counters "
        f"how many steps drafted nothing. Replay {name}'s proposer on token streams instead "
        "(--token-trace, or the method's preset)"
    )


def with_acceptance(
    fields: dict[str, Any],
    acc: Acceptance,
    k: int | None,
    who: str,
    flag: str = "--k",
    sampled: tuple[float, float] = (0.0, 1.0),
) -> tuple[dict[str, Any], str]:
    """``fields`` (a method's MethodConfig fields, K already applied if ``k`` was given) with
    the measured acceptance, and a note saying what it became. ``who`` names the measurement
    in errors. ``sampled`` is the (temperature, top-p) the measurement was taken at: a run
    compared on the server that measured it (QA: compare --temperature 1 scaled the run's own
    acceptance down again, as if measured greedily, while the note said it was used as is)."""
    temperature, top_p = sampled
    at = {"temperature": temperature, "top_p": top_p} if sampled != (0.0, 1.0) else {}
    how = f" (sampled at T={temperature:g}, top-p {top_p:g})" if at else ""
    out = dict(fields)
    name = out.get("name")
    if why := drafted_only(acc, name):
        raise InputError(f"{who}: acceptance", why)
    if acc.per_position:
        drafted = len(acc.per_position)
        if k is not None and k != drafted:
            raise InputError(
                flag, f"{who} drafted {drafted} tokens a step (its per-position acceptance)"
            )
        for key in TREE_FIELDS:  # vLLM verifies chains
            out.pop(key, None)
        out["k"] = drafted
        alpha = acc.conditional()
        out["acceptance"] = {"alpha": alpha, "source": acc.source, **at}
        shares = ", ".join(f"{a:.2f}" for a in alpha)
        return out, f"acceptance: α per position from the run ({shares}){how}"
    assert acc.length is not None
    depth = int(out.get("k") or 1)
    if not 1 <= acc.length <= depth + 1:
        raise InputError(
            f"{who}: acceptance length",
            f"{acc.length:g} is not in [1, K + 1 = {depth + 1}] for {name} at K={depth} "
            "(give --k, the draft length the server ran)",
        )
    measured = measured_acceptance(out, tau=acc.length, tau_k=depth) or {}
    out["acceptance"] = {**measured, "source": acc.source, **at}
    return out, f"acceptance: τ {acc.length:.2f} at K={depth} from the run{how}"
