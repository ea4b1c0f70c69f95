"""Bit-identity of the engine: one SHA-256 per run over its request and iteration tables and its
summary, for every golden scenario (tests/golden/cases.py) and each closed-loop one again at
concurrency 1, each with its plain-decoding baseline. A refactor of the hot loop that must not
move a single bit writes the hashes before and checks them after; the golden numbers
(tools/golden.py) allow 1e-9.

    python tools/step_hashes.py --write before.json   # before the change (~45 s on 2 cores)
    python tools/step_hashes.py --check before.json   # after it: lists every run that moved
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simspec import Scenario, simulate  # after the path above
from tests.golden import cases


def run_hash(raw: dict, tables_only: bool = False) -> str:
    """The run's tables at full precision and (unless ``tables_only``) its summary, hashed."""
    res = simulate(Scenario.model_validate(raw))
    digest = hashlib.sha256()
    for frame in (res.requests, res.iterations):
        digest.update(frame.to_csv(float_format="%.17g").encode())
    if not tables_only:
        summary = json.dumps(res.summary.as_json_dict(), sort_keys=True, default=str)
        digest.update(summary.encode())
    return digest.hexdigest()[:16]


def scenarios() -> dict[str, dict]:
    """Every golden scenario, and each closed-loop one's plain-decoding baseline
    (``NAME/plain``), and both at concurrency 1 (``NAME@1``, ``NAME@1/plain``)."""
    out: dict[str, dict] = {}
    for name, raw in cases.SCENARIOS.items():
        out[name] = raw
        workload = raw.get("workload", {})
        if workload.get("arrival", "closed") == "closed":
            batch = copy.deepcopy(raw)  # its plain-decoding baseline (Replica._decode_steady_plain)
            batch["method"] = {"name": "autoregressive"}
            batch.pop("acceptance", None)
            out[f"{name}/plain"] = batch
            alone = copy.deepcopy(raw)
            alone.setdefault("workload", {})["concurrency"] = 1
            alone["workload"].setdefault("requests", 40)
            out[f"{name}@1"] = alone
            # and its plain-decoding baseline alone (Replica._decode_alone_plain)
            plain = copy.deepcopy(alone)
            plain["method"] = {"name": "autoregressive"}
            plain.pop("acceptance", None)
            out[f"{name}@1/plain"] = plain
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", type=Path, metavar="FILE", help="record the hashes in FILE")
    mode.add_argument("--check", type=Path, metavar="FILE", help="compare with FILE's hashes")
    ap.add_argument(
        "--tables-only",
        action="store_true",
        help="hash the requests and iterations alone, not the summary (a change that moves only "
        "how the summary measures, its intervals, keeps every step); give it to both runs",
    )
    args = ap.parse_args()
    hashes = {name: run_hash(raw, args.tables_only) for name, raw in scenarios().items()}
    if args.write:
        tmp = args.write.with_suffix(args.write.suffix + ".tmp")
        tmp.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")
        tmp.replace(args.write)
        print(f"{len(hashes)} runs hashed into {args.write}")
        return 0
    old = json.loads(args.check.read_text())
    moved = sorted(n for n in old.keys() | hashes.keys() if old.get(n) != hashes.get(n))
    for name in moved:
        print(f"moved: {name}")
    print(f"{len(hashes) - len(moved)} of {len(hashes)} runs bit-identical")
    return 1 if moved else 0


if __name__ == "__main__":
    sys.exit(main())
