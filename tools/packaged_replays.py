"""Write or check the stored replays of the packaged token traces
(simspec/engine/lookup/packaged.py: STORED, on every packaged trace).

    python tools/packaged_replays.py --check   # each stored file equals a fresh replay (~25 s)
    python tools/packaged_replays.py --write   # after a change to a replay or a token trace

--check exits 1 naming every file that is missing, stale (its token file changed) or differs
from the replay the code computes now.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simspec.catalog.token_traces import load_token_trace, packaged_token_traces  # noqa: E402
from simspec.catalog.traces import PACKAGED_DIR  # noqa: E402
from simspec.engine.lookup import packaged  # noqa: E402
from simspec.engine.lookup.proposers import LookupProposer, ReplayTable  # noqa: E402

FOLDER = ROOT / "simspec" / "data" / "traces" / PACKAGED_DIR / "replays"


def fresh(trace: str, proposer: packaged.Key, k: int) -> ReplayTable:
    kind, params, padded = proposer
    return ReplayTable.of(LookupProposer(kind, params, padded).replay(load_token_trace(trace), k))


def same(a: ReplayTable, b: ReplayTable) -> bool:
    return all(
        np.array_equal(getattr(a, f), getattr(b, f))
        for f in ("offsets", "lengths", "proposed", "accepted")
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="replay and store every file")
    mode.add_argument("--check", action="store_true", help="compare every file with a replay")
    args = ap.parse_args()
    FOLDER.mkdir(parents=True, exist_ok=True)
    bad = []
    for trace in packaged_token_traces():
        for proposer, k in packaged.STORED:
            name = packaged.file_name(trace, proposer, k)
            table = fresh(trace, proposer, k)
            if args.write:
                tmp = FOLDER / (name + ".tmp")
                tmp.write_bytes(packaged.to_bytes(trace, table))
                tmp.replace(FOLDER / name)  # never a half-written file
                print(f"wrote {name}: {int(table.lengths.sum())} positions")
                continue
            stored = packaged.load(trace, proposer, k)
            ok = stored is not None and same(stored, table)
            print(f"{name}: {'same' if ok else 'MISSING, STALE OR DIFFERENT'}")
            if not ok:
                bad.append(name)
    if bad:
        print(f"{len(bad)} file(s) to rewrite: python tools/packaged_replays.py --write")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
