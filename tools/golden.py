"""Check or re-record the golden numbers (tests/golden/cases.py).

    python tools/golden.py                  # check every case, print what moved
    python tools/golden.py NAME ...         # only these cases
    python tools/golden.py --update [NAME]  # re-record, printing what moved
    python tools/golden.py --list

``pytest -m golden`` runs the same check inside the suite.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.golden import cases  # after the path above


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("names", nargs="*", help="cases to run (default: all)")
    ap.add_argument("--update", action="store_true", help="re-record the values")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    args = ap.parse_args()
    if args.list:
        print("\n".join(cases.names()))
        return 0
    unknown = [n for n in args.names if n not in cases.names()]
    if unknown:
        ap.error(f"unknown case {unknown[0]!r}; --list shows them")
    failed = 0
    for name in args.names or cases.names():
        start = time.perf_counter()
        new = cases.compute(name)
        old = cases.recorded(name)
        moved = cases.compare(old or {}, new) if old is not None else ["(not recorded before)"]
        took = time.perf_counter() - start
        status = "ok" if not moved else ("updated" if args.update else "MOVED")
        print(f"{name:28s} {status:8s} {len(new):6d} metrics  {took:6.1f} s")
        for line in moved[:40]:
            print(f"    {line}")
        if len(moved) > 40:
            print(f"    ... and {len(moved) - 40} more")
        if args.update:
            cases.record(name, new)
        elif moved:
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
