"""vLLM's Prometheus ``/metrics`` text, read for its speculative-decoding counters: the
acceptance a server measured, per draft position.

The counters, as vllm-project/vllm defines them in vllm/v1/spec_decode/metrics.py
(``SpecDecodingProm``, commit 016a8587): ``vllm:spec_decode_num_drafts``,
``vllm:spec_decode_num_draft_tokens``, ``vllm:spec_decode_num_accepted_tokens`` and
``vllm:spec_decode_num_accepted_tokens_per_pos`` (label ``position``, 0-based), one series per
engine; prometheus_client exposes a counter with the suffix ``_total``. A chain accepts token
i only after every token before it, so accepted_per_pos[i] / drafts is the share of drafts that
reached position i; 1 + accepted / drafts is the mean acceptance length. ``vllm bench serve``
reads the same counters (``fetch_spec_decode_metrics``, vllm/benchmarks/serve.py, commit
009e6d4a), summing the engines' series and differencing a read before and after the run.

The counters count from the server's start: a dump taken after one benchmark on a fresh server
is that benchmark's; otherwise give the dump taken before it too.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from simspec.errors import InputError
from simspec.studies.bench.measured import MAX_POSITIONS, Acceptance, consistent

PREFIX = "vllm:spec_decode_"
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)(?:\s+\S+)?\s*$")
_POSITION = re.compile(r'position="(\d+)"')
_COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")


@dataclass
class SpecCounters:
    """The counters of one dump, summed over engines."""

    num_drafts: float = 0.0
    num_draft_tokens: float = 0.0
    num_accepted_tokens: float = 0.0
    per_position: dict[int, float] = field(default_factory=dict)

    def minus(self, before: SpecCounters) -> SpecCounters:
        return SpecCounters(
            self.num_drafts - before.num_drafts,
            self.num_draft_tokens - before.num_draft_tokens,
            self.num_accepted_tokens - before.num_accepted_tokens,
            {p: v - before.per_position.get(p, 0.0) for p, v in self.per_position.items()},
        )


def is_metrics_dump(text: str) -> bool:
    return PREFIX in text


def read_counters(text: str, where: str) -> SpecCounters:
    """The speculative-decoding counters of one ``/metrics`` dump."""
    out = SpecCounters()
    found = False
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line.startswith(PREFIX):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise InputError(f"{where} line {lineno}", "not a Prometheus sample line")
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        if not name.endswith("_total"):
            continue  # _created timestamps
        key = name.removeprefix(PREFIX).removesuffix("_total")
        number = _value(value, f"{where} line {lineno}: {name}")
        if key == "num_accepted_tokens_per_pos":
            pos = _POSITION.search(labels)
            if pos is None or int(pos.group(1)) >= MAX_POSITIONS:
                raise InputError(
                    f"{where} line {lineno}: {name}",
                    f"needs a position label 0 .. {MAX_POSITIONS - 1}",
                )
            p = int(pos.group(1))
            out.per_position[p] = out.per_position.get(p, 0.0) + number
        elif key in _COUNTERS:
            setattr(out, key, getattr(out, key) + number)
        else:
            continue
        found = True
    if not found:
        raise InputError(where, f"no {PREFIX}*_total counters (speculative decoding off?)")
    return out


def acceptance_from(counters: SpecCounters, where: str) -> Acceptance:
    """The acceptance the counters measured: per-position shares and the mean length."""
    drafts = counters.num_drafts
    if drafts == 0 and counters.num_draft_tokens > 0 and not counters.per_position:
        # QA: V0's dump read as "0 drafts counted (a later dump given first ...)"
        raise InputError(
            f"{where}: {PREFIX}num_drafts_total",
            "absent: these are vLLM V0's counters (draft and accepted tokens, no drafts or "
            "per-position counts), which do not give the acceptance per position or per step; "
            "give a V1 server's /metrics or a vllm bench serve --save-result of the run",
        )
    if not drafts > 0:
        raise InputError(
            f"{where}: {PREFIX}num_drafts_total",
            f"{drafts:g} drafts counted (a later dump given first, or no speculation ran)",
        )
    positions = sorted(counters.per_position)
    if positions != list(range(len(positions))):
        raise InputError(
            f"{where}: {PREFIX}num_accepted_tokens_per_pos_total",
            f"positions {positions} are not 0, 1, ...",
        )
    shares = []
    for p in positions:
        share = counters.per_position[p] / drafts
        if not 0 <= share <= 1 + 1e-9:
            raise InputError(
                f"{where}: {PREFIX}num_accepted_tokens_per_pos_total",
                f"position {p}: {counters.per_position[p]:g} accepted in {drafts:g} drafts",
            )
        shares.append(min(share, 1.0))
    accepted = counters.num_accepted_tokens
    if accepted < 0:
        raise InputError(f"{where}: {PREFIX}num_accepted_tokens_total", f"{accepted:g} < 0")
    # the same counters a server keeps, so the same rules (QA: rising per-position counts and
    # a total that disagreed with their sum were simulated as given)
    return consistent(
        Acceptance(
            per_position=tuple(shares),
            length=1.0 + accepted / drafts,
            source=f"{where}: the server's {PREFIX}* counters",
            drafted_steps_only=True,
            drafts=drafts,
        ),
        where,
        key=f"{PREFIX}num_accepted_tokens_per_pos_total",
        length_key=f"{PREFIX}num_accepted_tokens_total",
    )


def _value(text: str, at: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(at, f"not a number: {text[:40]!r}") from None
    if not math.isfinite(value) or value < 0:
        raise InputError(at, f"a counter is a finite number >= 0, got {text[:40]!r}")
    return value
