"""Golden hashes: the numbers a refactor must leave byte-identical.

Prints one SHA-256 over the request and iteration tables of 20 scenarios (chains, trees,
lookup, heads, sampling, bursts, Poisson and time-varying arrivals, load policies,
preemption, TP, a layer split, other engines) and, with ``--cli``, the SHA-256 of the default
sweep CSV and of ``simspec validate``'s predictions CSV. Run it before and after a change that
must not move any number::

    python tools/golden.py            # the 20 scenarios (a few minutes on 2 cores)
    python tools/golden.py --cli      # also the default sweep and the validation run

The same script gives the same three hashes on the flat package (commit 5ff7fd9) and on the
layered one (issue 13)::

    20 golden scenarios: da08d44775b6636a03549b9cdae3fee0e74dc96c730ebce351d0e6b54711eb34
    default sweep CSV:   d3a8341c0a49cab1b812c1f50df9d752bda58a2c905da8a7c137c93aa9a783fb
    validate CSV:        4e634cfd946b491510df453a07c40bdf68b2bb2a9d46e1bda2d653ea3fbe6245

Issue 14 moved two on purpose (n-gram and suffix replayed on token streams, two new CSV columns,
τ-from-trace rows run over the whole trace) and left the scenarios' hash as it was: the
scenarios hash the iteration columns they were recorded with (:data:`ITERATION_COLUMNS`), and
their lookup methods replay ``acc_len`` traces, whose path did not change::

    20 golden scenarios: da08d44775b6636a03549b9cdae3fee0e74dc96c730ebce351d0e6b54711eb34
    default sweep CSV:   362efe60b6144ddb2fba9df8aba0e418743255705d20437a7508638c6f904d32
    validate CSV:        3265f0a28d5c1eff052ecb9eb8511ae5623a95773eb0d7df4d43a15de46d1b12

Issue 18 added the sweep CSV's ``tree``, ``tree_nodes`` and ``tree_topk`` columns; without them
the CSV hashes to the value above, and nothing else moved::

    default sweep CSV:   9372ec70d7ed440b2b0d50f1e333be49b018a6f153b60349e7f49bf044655ff1

Issue 15 (GPUs, precision) left the scenarios and the sweep CSV as they were; validate's
``assumptions`` column now says when a row's GPU profile is transferred (139 rows on rtx3090,
a100_80gb, a100_40gb), every number in it unchanged (compared column by column with the CSV
above)::

    validate CSV:        63bef3486927edb31afd464cf172e748a45064a54dc6da1d160fc951acdf43cc

Issue 15 (MoE, MLA, MTP) again left the scenarios and the sweep CSV as they were. validate moved
on purpose: the 34 rows whose notes say FP8 (Qwen3-8B-FP8 on SGLang) run at fp8, the 8 rows
against "other: vLLM 0.11.0 BF16 no-spec" are predicted with that baseline, and rows simspec
cannot serve name why (prefill/decode disaggregation, NVFP4, Gated DeltaNet, a target named
only in the notes); the other 214 predicted rows' numbers are unchanged::

    validate CSV:        8eae47eac0a15769c2978daa7328a8c95130168f0870ca754b761c5b41ab8048

Issue 16 moved all three on purpose: every run is measured over its steady-state window
(a closed loop starts stationary and measures at least 64 turnovers, an open loop warms up
for its relaxation time; README "Measurement"), the sweep CSV gains 14 interval columns, and
validate's closed-loop rows run 8 turnovers (256 of 413 rows, MAPE 18.5 %). Issue 17 (trace
workloads, fleets) left these three as issue 16 set them::

    20 golden scenarios: c04cca24f59f8dc26128f62ca2eb41d229d314a9be0a3e69c1ff09f2f3cc864a
    default sweep CSV:   7e9c22b1cff48bd4e67c81e68da037d8c70358c2cfec2ed1caa023f4df202f04
    validate CSV:        d3a3438652230ea9b4b167342585b6799c1b4ebdd6831a69759b5a1b8da086e4
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

try:  # the public API
    from simspec import Scenario, simulate
except ImportError:  # the flat package before the layered one (commit 5ff7fd9)
    from simspec.scenario import Scenario
    from simspec.simulation import simulate


def _method(name: str, **kw) -> dict:
    return {"name": name, **kw}


TRACE = {"trace": "sharegpt", "trace_method": "eagle3"}
NGRAM = {"trace": "sharegpt", "trace_method": "ngram"}
CLOSED = {"arrival": "closed", "concurrency": 8, "requests": 40}

SCENARIOS: list[dict] = [
    {"workload": CLOSED},
    {"workload": CLOSED, "method": _method("eagle3", k=3, acceptance=TRACE)},
    {
        "workload": {**CLOSED, "concurrency": 64, "requests": 160},
        "method": _method("eagle3", k=4, acceptance=TRACE),
    },
    {"workload": CLOSED, "method": _method("ngram", k=3, acceptance=NGRAM)},
    {
        "workload": CLOSED,
        "method": _method(
            "eagle1",
            k=5,
            tree="static",
            tree_nodes=25,
            tree_topk=10,
            acceptance={"tau": 3.6, "tau_k": 5},
        ),
    },
    {
        "workload": CLOSED,
        "method": _method(
            "eagle2",
            k=6,
            tree="dynamic",
            tree_nodes=50,
            tree_topk=10,
            acceptance={"tau": 4.2, "tau_k": 6, "spread": 0.5},
        ),
    },
    {
        "workload": CLOSED,
        "method": _method(
            "medusa1", k=4, tree="static", tree_nodes=63, acceptance={"alpha": [0.6, 0.4, 0.3, 0.2]}
        ),
    },
    {
        "workload": CLOSED,
        "method": _method(
            "hydra", k=4, tree="static", tree_nodes=63, acceptance={"alpha": 0.6, "spread": 0.4}
        ),
    },
    {
        "workload": CLOSED,
        "method": _method("redrafter", k=4, beam_width=4, acceptance={"alpha": 0.7}),
    },
    {
        "workload": CLOSED,
        "method": _method(
            "lookahead",
            k=4,
            lookahead_window=7,
            lookahead_ngram=5,
            lookahead_guesses=7,
            acceptance={"alpha": 0.4},
        ),
    },
    {
        "workload": CLOSED,
        "method": _method(
            "draft_model",
            k=5,
            draft_model="llama-3.2-1b",
            acceptance={"alpha": 0.7, "burst_scale": 0.5, "burstiness": 0.8},
        ),
    },
    {
        "workload": CLOSED,
        "method": _method("self_spec", k=4, draft_layers=12, acceptance={"alpha": 0.5}),
    },
    {"workload": CLOSED, "method": _method("mtp", k=2, acceptance={"tau": 2.4, "tau_k": 2})},
    {"workload": CLOSED, "method": _method("suffix", k=5, acceptance=NGRAM)},
    {
        "workload": {"arrival": "poisson", "rate": 6.0, "requests": 60},
        "method": _method("eagle3", k=3, acceptance=TRACE),
    },
    {
        "workload": {
            "arrival": "poisson",
            "rate_schedule": [[0.0, 2.0], [4.0, 20.0]],
            "requests": 80,
        },
        "method": _method(
            "eagle3",
            k=4,
            k_schedule=[[1, 8, 4], [9, 1024, 1]],
            acceptance={"tau": 3.0, "tau_k": 4, "spread": 0.6},
        ),
    },
    {
        "temperature": 1.0,
        "workload": CLOSED,
        "method": _method(
            "eagle2",
            k=6,
            tree="dynamic",
            tree_nodes=50,
            tree_topk=10,
            acceptance={"tau": 4.0, "tau_k": 6, "temperature": 1.0},
        ),
    },
    {"temperature": 0.7, "workload": CLOSED, "method": _method("eagle3", k=3, acceptance=TRACE)},
    {
        "model": "llama-3.1-70b",
        "tp": 4,
        "workload": {**CLOSED, "concurrency": 32, "requests": 64},
        "scheduler": {"max_num_seqs": 32},
        "method": _method("eagle3", k=3, disable_by_batch_size=16, acceptance=TRACE),
    },
    {
        "model": "llama-3.1-70b",
        "pp": 2,
        "engine": "hf",
        "gpu": "a100_80gb",
        "workload": {
            "arrival": "closed",
            "concurrency": 64,
            "requests": 128,
            "trace": None,
            "prompt": {"dist": "lognormal", "mean": 2000, "cv": 1.0, "max": 8000},
            "output": {"dist": "uniform", "low": 100, "high": 600},
        },
        "method": _method("medusa1", k=4, tree="static", tree_nodes=63, acceptance={"alpha": 0.6}),
    },
]


def _frame_bytes(frame) -> bytes:
    return frame.to_csv(index=False, float_format="%.17g").encode()


# the iteration columns of the first recorded hashes: columns added since (issue 14's
# decode_tokens, no_proposal_seqs) report more, and must not move these
ITERATION_COLUMNS = [
    "start_s",
    "duration_s",
    "decode_seqs",
    "prefill_seqs",
    "query_tokens",
    "output_tokens",
    "spec_tokens",
    "spec_seqs",
    "draft_s",
    "verify_s",
    "overhead_s",
    "kv_blocks_used",
]


def scenarios_hash() -> str:
    h = hashlib.sha256()
    for i, raw in enumerate(SCENARIOS):
        res = simulate(Scenario.model_validate(raw))
        one = hashlib.sha256()
        for part in (_frame_bytes(res.requests), _frame_bytes(res.iterations[ITERATION_COLUMNS])):
            h.update(part)
            one.update(part)
        print(
            f"  scenario {i:2d}: {len(res.iterations):6d} iterations, "
            f"{int(res.requests['preemptions'].sum())} preemptions, {one.hexdigest()[:12]}",
            file=sys.stderr,
        )
    return h.hexdigest()


def _cli_hash(args: list[str], name: str) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / name
        subprocess.run(
            [sys.executable, "-m", "simspec.cli", *args, "--out", str(out)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        return hashlib.sha256(out.read_bytes()).hexdigest()


def main() -> None:
    print(f"20 golden scenarios: {scenarios_hash()}")
    if "--cli" in sys.argv:
        print(f"default sweep CSV:   {_cli_hash(['sweep', '--quiet'], 'sweep.csv')}")
        print(f"validate CSV:        {_cli_hash(['validate'], 'predictions.csv')}")


if __name__ == "__main__":
    main()
