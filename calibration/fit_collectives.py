"""Tensor-parallel all-reduce and all-gather curves per GPU, GPU count and kernel, from
AIConfigurator's measured tables (``simspec/data/collectives.yaml`` holds what this writes).

Reads, under ``SHARED_DIR/calibration-data/moe-serving/`` (see its SOURCE.md, section 6, and
LICENSE-aiconfigurator.txt: Apache-2.0, converted from ai-dynamo/aiconfigurator's database):

- ``aiconfigurator_custom_allreduce_1node.csv``: the custom all-reduce kernels of vLLM 0.24.0
  and SGLang 0.5.14, bf16, replayed in a CUDA graph (``*_graph``) or launched from Python
  (``*_eager``), and TensorRT-LLM 1.3.0rc20's all-reduce op (mode ``trtllm``, graph-captured,
  written as ``trtllm_graph``), 2/4/8 GPUs of one node;
- ``aiconfigurator_nccl_tests_1node.csv``: nccl-tests 2.29.2 ``all_reduce`` / ``all_gather``,
  ``half``, 2/4/8 GPUs (out-of-place time).

With ``--aic-core WHEEL``, A100 SXM's tables are read too, from the aiconfigurator-core 0.12.0
wheel itself (``pip download aiconfigurator-core==0.12.0 --no-deps``; Apache-2.0, (c) 2025-2026
NVIDIA CORPORATION & AFFILIATES; the version is checked): ``systems/data/a100_sxm/comm/``
``vllm/0.14.0``, ``sglang/0.5.10`` and ``trtllm/1.0.0`` ``custom_allreduce_perf.parquet`` and
``nccl/2.27.3/nccl_perf.parquet``, converted as SOURCE.md section 6 converts the others
(``message_size`` in elements, bf16/half: 2 bytes each; ``latency`` in ms; the ``backend``
column is the mode, TRT-LLM's op is ``trtllm_graph``). Reading the parquet files needs pyarrow
(the ``parquet`` extra).

Each curve keeps the measured (bytes, seconds) points made monotone from the right (a point is
lowered to the cheapest larger message: a larger message never costs less, so an isolated
outlier, e.g. H100 SGLang graph at 1 KiB, does not hold up a whole span); the cost model
interpolates them log-log and extends the last segment's bandwidth beyond the largest size.
Custom curves keep the points up to the engines' switch to NCCL (8 MiB, ``custom_allreduce_max``
below) and one past it. Prints each curve's points and the largest correction it made::

    python calibration/fit_collectives.py [SHARED_DIR] [--aic-core WHEEL] \
        --out simspec/data/collectives.yaml

(``--out`` writes the file whole, after every curve is read: a failing read leaves it as it
was; without it the YAML goes to stdout.)
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

try:
    from calibration.aic_wheel import A100_FRAMEWORKS, system_tables  # imported as a package
except ImportError:  # run as a script: calibration/ is sys.path[0]
    from aic_wheel import A100_FRAMEWORKS, system_tables

GPUS = {"H100 SXM": "h100_sxm", "H200 SXM": "h200", "B200 SXM": "b200"}
CUSTOM_MODES = ("vllm_graph", "vllm_eager", "sglang_graph", "sglang_eager", "trtllm_graph")
# the table's mode -> the curve's name: TRT-LLM's rows are graph-captured only
MODE_NAMES = {"trtllm": "trtllm_graph"}
# kernels measured as the engine's whole all-reduce op, which picks NCCL or its own kernels by
# message size itself (TRT-LLM AllReduce, strategy AUTO): their curves keep every size and
# stand at every size (simspec.engine.costmodel.collectives)
OWN_SWITCH = ("trtllm",)
NCCL_OPS = ("all_reduce", "all_gather")
# vLLM CustomAllreduce(max_size=8192 * 1024) and SGLang CustomAllreduce._MAX_CAR_SIZE =
# 8192 * 1024 on CUDA: a message of this many bytes or more goes to NCCL (should_custom_ar:
# inp_size < self.max_size)
CUSTOM_MAX_BYTES = 8192 * 1024

HEADER = """\
# Tensor-parallel collectives inside one node, per GPU, GPU count and kernel: measured points
# (message bytes, seconds), interpolated log-log by simspec.engine.costmodel.collectives and
# extended past the largest size at the last segment's bandwidth.
#
# Written by `python calibration/fit_collectives.py [SHARED_DIR] --aic-core WHEEL
#   --out simspec/data/collectives.yaml`
# from shared calibration-data/moe-serving (AIConfigurator database, Apache-2.0, (c) 2025-2026
# NVIDIA CORPORATION & AFFILIATES; converted there, see its SOURCE.md section 6):
#   aiconfigurator_custom_allreduce_1node.csv: gpu H100 SXM / H200 SXM / B200 SXM, framework vLLM
#     0.24.0 (kernel_source vLLM_custom_graph / vLLM_custom_eager) and SGLang 0.5.14
#     (sglang_graph / sglang_eager), bf16, 2/4/8 GPUs, 20 runs after 3 warm-ups;
#     and TRTLLM 1.3.0rc20 (mode trtllm: TRT-LLM's AllReduce op, graph-captured, as trtllm_graph);
#   aiconfigurator_nccl_tests_1node.csv: nccl_version 2.29.2, op all_reduce / all_gather,
#     nccl_dtype half, 2/4/8 GPUs (all_gather bytes: the gathered total, as nccl-tests counts).
# Each curve is made monotone from the right (a point is lowered to the cheapest larger message).
# Custom curves stop one point past custom_allreduce_max_bytes, where vLLM and SGLang switch to
# NCCL; own_switch kernels (TRT-LLM's op, strategy AUTO, which switches itself) keep every size
# and have no eager curve: a forward TRT-LLM runs eagerly uses the graph curve, its launch
# cost being the engine's layer_launch_s.
# GPUs not listed (L40S, H20, MI300X, ...), and GPU counts a GPU's tables lack, keep their
# hardware profile's ring formula; GB200's and GB300's NCCL tables stop at 4, and past that
# NCCL takes B200's and B300's curves (simspec.engine.costmodel.collectives NCCL_SIBLINGS).
"""
AIC_HEADER = """\
# a100_80gb: aiconfigurator-core 0.12.0 (the PyPI wheel, Apache-2.0, (c) 2025-2026 NVIDIA
#   CORPORATION & AFFILIATES), systems/data/a100_sxm/comm: vllm/0.14.0, sglang/0.5.10 and
#   trtllm/1.0.0 custom_allreduce_perf.parquet (backend vllm_graph / vllm_eager / sglang_graph /
#   sglang_eager; TRT-LLM's op as trtllm_graph), nccl/2.27.3 nccl_perf.parquet (all_reduce /
#   all_gather, half); NVIDIA A100-SXM4-80GB, 2/4/8 GPUs; message_size elements x 2 bytes.
# b300, gb200, gb300: the same wheel's systems/data/{b300_sxm,gb200,gb300}/comm at the versions
#   the shared tables hold for H100/H200/B200: vllm/0.24.0, sglang/0.5.14 and trtllm/1.3.0rc20
#   custom_allreduce_perf.parquet, nccl/2.29.2 nccl_perf.parquet; B300 2/4/8 GPUs, GB200 and
#   GB300 2/4 (one compute tray's GPUs; GB300's custom kernels to 16).
"""
# the GPUs whose collectives the wheel gives: simspec's id, the wheel's system folder, the
# custom all-reduce tables read and the NCCL table read
BLACKWELL_FRAMEWORKS = ("vllm/0.24.0", "sglang/0.5.14", "trtllm/1.3.0rc20")
AIC_SYSTEMS = (
    ("a100_80gb", "a100_sxm", A100_FRAMEWORKS, "nccl/2.27.3"),
    ("b300", "b300_sxm", BLACKWELL_FRAMEWORKS, "nccl/2.29.2"),
    ("gb200", "gb200", BLACKWELL_FRAMEWORKS, "nccl/2.29.2"),
    ("gb300", "gb300", BLACKWELL_FRAMEWORKS, "nccl/2.29.2"),
)


def monotone(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """Sorted by size, each time lowered to the least time of any larger message."""
    points = sorted(points)
    out: list[tuple[int, float]] = []
    best = float("inf")
    for size, t in reversed(points):
        best = min(best, t)
        out.append((size, best))
    return out[::-1]


def read(shared: Path) -> dict[str, dict[str, dict[int, list[tuple[int, float]]]]]:
    base = shared / "calibration-data" / "moe-serving"
    curves: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    with (base / "aiconfigurator_custom_allreduce_1node.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            mode = MODE_NAMES.get(row["mode"], row["mode"])
            if row["gpu"] in GPUS and mode in CUSTOM_MODES:
                size = int(row["message_bytes_computed"])
                curve = curves[GPUS[row["gpu"]]][mode][int(row["num_gpus"])]
                curve.append((size, float(row["latency"]) * 1e-3))
    with (base / "aiconfigurator_nccl_tests_1node.csv").open(newline="") as f:
        for row in csv.DictReader(f):
            if row["gpu"] in GPUS and row["op_name"] in NCCL_OPS and row["nccl_dtype"] == "half":
                size = int(row["message_bytes_computed"])
                curve = curves[GPUS[row["gpu"]]]["nccl_" + row["op_name"]][int(row["num_gpus"])]
                curve.append((size, float(row["latency"]) * 1e-3))
    return curves


def read_aic(wheel: Path, curves: dict) -> None:
    """The AIC_SYSTEMS' curves from the aiconfigurator-core wheel, into ``curves`` (as
    ``read``)."""
    for gpu, system, sources, nccl in AIC_SYSTEMS:
        with system_tables(wheel, system) as table:
            for source in sources:
                frame = table(f"comm/{source}/custom_allreduce_perf.parquet")
                for row in frame.itertuples():
                    assert row.allreduce_dtype == "bfloat16", row
                    mode = getattr(row, "backend", None) or "trtllm"
                    mode = MODE_NAMES.get(mode, mode)
                    curve = curves[gpu][mode][int(row.num_gpus)]
                    curve.append((2 * int(row.message_size), float(row.latency) * 1e-3))
            frame = table(f"comm/{nccl}/nccl_perf.parquet")
            for row in frame.itertuples():
                if row.op_name in NCCL_OPS and row.nccl_dtype == "half":
                    curve = curves[gpu]["nccl_" + row.op_name][int(row.num_gpus)]
                    curve.append((2 * int(row.message_size), float(row.latency) * 1e-3))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    shared = Path(__file__).parents[2] / "shared"
    parser.add_argument("shared", nargs="?", type=Path, default=shared)
    parser.add_argument("--aic-core", type=Path, help="the aiconfigurator-core 0.12.0 wheel")
    parser.add_argument("--out", type=Path, help="the YAML to write whole (default: stdout)")
    args = parser.parse_args()
    curves = read(args.shared)
    if args.aic_core is not None:
        read_aic(args.aic_core, curves)
    lines = [
        HEADER.rstrip("\n"),
        *([AIC_HEADER.rstrip("\n")] if args.aic_core is not None else []),
        f"custom_allreduce_max_bytes: {CUSTOM_MAX_BYTES}",
        f"own_switch: [{', '.join(OWN_SWITCH)}]",
        "gpus:",
    ]
    for gpu in sorted(curves):
        lines.append(f"  {gpu}:")
        for kind in sorted(curves[gpu]):
            lines.append(f"    {kind}:")
            for n in sorted(curves[gpu][kind]):
                raw = sorted(curves[gpu][kind][n])
                if kind in CUSTOM_MODES and kind.rsplit("_", 1)[0] not in OWN_SWITCH:
                    past = [p for p in raw if p[0] >= CUSTOM_MAX_BYTES][:1]
                    raw = [p for p in raw if p[0] < CUSTOM_MAX_BYTES] + past
                pts = monotone(raw)
                worst = max(r[1] / p[1] for r, p in zip(raw, pts, strict=True))
                print(
                    f"{gpu} {kind} {n} GPUs: {len(pts)} points, largest lowering {worst:.2f}x",
                    file=sys.stderr,
                )
                body = ", ".join(f"[{s}, {t:.4e}]" for s, t in pts)
                lines.append(f"      {n}: [{body}]")
    text = "\n".join(lines) + "\n"
    if args.out is None:
        sys.stdout.write(text)
    else:
        from simspec.outputs import write_text_atomic

        write_text_atomic(args.out, text)


if __name__ == "__main__":
    main()
