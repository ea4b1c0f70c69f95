"""The explorer's page itself, timed through Streamlit's AppTest (which runs app.py in this
process, as the server does): the first render, four moves of the K slider on a one-method
page, and a temperature move (every run new). Run by hand; not a test.

    python benchmarks/bench_explorer_page.py [TREE]    # TREE: a checkout's root (default: this)
"""

import os
import sys
import time
from pathlib import Path

from streamlit.testing.v1 import AppTest

if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help"):
    print(__doc__)
    sys.exit(0)
root = sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).resolve().parents[1])
if not os.path.isfile(os.path.join(root, "app.py")):
    print(f"error: TREE: no app.py in {root}", file=sys.stderr)
    sys.exit(2)
print(f"machine: {os.cpu_count()} cores")
t = time.perf_counter()
at = AppTest.from_file(os.path.join(root, "app.py"), default_timeout=300)
at.run()
first = time.perf_counter() - t
ms = next(m for m in at.sidebar.multiselect if m.label == "Methods")
if ms.value != ["eagle3"]:
    ms.set_value(["eagle3"]).run()
next(r for r in at.sidebar.radio if r.label == "Draft length").set_value("set K").run()
times = []
for k in (4, 2, 5, 1):
    s = next(s for s in at.sidebar.slider if s.label.startswith("K ("))
    t = time.perf_counter()
    s.set_value(k).run()
    times.append(time.perf_counter() - t)
    assert not at.exception
t = time.perf_counter()
next(s for s in at.sidebar.slider if s.label == "Sampling temperature").set_value(0.5).run()
temp = time.perf_counter() - t
moves = ", ".join(f"{x:.2f}" for x in times)
print(f"load {os.getloadavg()[0]:.1f}: first page {first:.2f} s; K moved: {moves} s; ")
print(f"temperature moved (all runs new): {temp:.2f} s")
