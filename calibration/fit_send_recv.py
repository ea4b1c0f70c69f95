"""Fit ``latency + bytes / bandwidth`` to Vidur's intra-node send/recv timings (the numbers
``simspec/data/alltoall.yaml`` holds for expert-parallel dispatch and combine).

Reads ``../shared/calibration-data/vidur-profiling/data/profiling/network/<net>/send_recv.csv``
(median milliseconds per message size, two workers), keeps the rows with both workers on one
node (``devices_per_node == 2``: NVLink), and fits the two constants by least squares on the
relative error, so small messages (the latency) weigh as much as large ones (the bandwidth)::

    python calibration/fit_send_recv.py [SHARED_DIR]
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import numpy as np

NETWORKS = ("h100_dgx", "a100_dgx")


def fit(path: Path) -> tuple[float, float, float, int]:
    """(latency s, bandwidth B/s, median |relative error|, rows) of one send_recv.csv."""
    sizes, times = [], []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            if row["devices_per_node"] == "2" and row["num_workers"] == "2":
                sizes.append(float(row["size"]))
                times.append(float(row["time_stats.send_recv.median"]) * 1e-3)
    x, y = np.array(sizes), np.array(times)
    # minimise sum(((a + b x) - y) / y)^2: weighted least squares with weights 1 / y
    design = np.stack([np.ones_like(x), x], axis=1) / y[:, None]
    (lat, inv_bw), *_ = np.linalg.lstsq(design, np.ones_like(y), rcond=None)
    err = np.abs((lat + inv_bw * x) - y) / y
    return float(lat), float(1.0 / inv_bw), float(np.median(err)), len(x)


def main() -> None:
    shared = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[2] / "shared"
    base = shared / "calibration-data/vidur-profiling/data/profiling/network"
    for net in NETWORKS:
        lat, bw, err, n = fit(base / net / "send_recv.csv")
        print(
            f"{net}: latency {lat:.4e} s, bandwidth {bw:.4e} B/s, median |err| {err:.3f}, {n} rows"
        )


if __name__ == "__main__":
    main()
