"""Draw the README's figures from simulations (docs/figures/*.png).

    pip install -e ".[docs]" && python docs/make_figures.py

temperature.png: how sampling temperature changes batch-1 speedup, per method.
load.png: speedup against concurrency for fixed K and for the best K per band, which is the
Dynamic SD schedule `simspec recommend`-style policies follow.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from simspec.catalog.methods import preset_method
from simspec.catalog.sampling import factor
from simspec.config import (
    AcceptanceConfig,
    LengthSpec,
    MethodConfig,
    Scenario,
    WorkloadConfig,
)
from simspec.engine.simulation import simulate
from simspec.studies.sweep import SweepConfig, run_sweep

OUT = Path(__file__).resolve().parent / "figures"
TEMPS = [0.0, 0.25, 0.5, 0.7, 0.85, 1.0, 1.2, 1.5]


def speedup(method: MethodConfig, temperature: float, wl: WorkloadConfig) -> float:
    ar = simulate(Scenario(workload=wl)).summary.throughput_tok_s
    spec = simulate(Scenario(method=method, workload=wl, temperature=temperature)).summary
    return spec.throughput_tok_s / ar


def temperature_figure() -> None:
    wl = WorkloadConfig(
        concurrency=1,
        requests=40,
        lengths_from=None,
        prompt=LengthSpec(mean=128),
        output=LengthSpec(mean=256),
    )
    methods = {
        "EAGLE-3, K=3 (trace preset)": preset_method("eagle3", "sharegpt"),
        "EAGLE-2, 50-node dynamic tree": preset_method("eagle2", "sharegpt"),
        "draft model (Llama-3.2-1B), α0=0.5, K=3": MethodConfig(
            name="draft_model",
            k=3,
            draft_model="llama-3.2-1b",
            acceptance=AcceptanceConfig(alpha=0.5),
        ),
    }
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(TEMPS, [factor(t) for t in TEMPS], marker="o", label="top-p 1.0")
    left.plot(TEMPS, [factor(t, 0.9) for t in TEMPS], marker="s", label="top-p 0.9")
    left.axvline(1.0, color="grey", linestyle=":", linewidth=1)
    left.set(title="Acceptance relative to greedy", xlabel="temperature", ylabel="α_T / α_greedy")
    left.legend()
    for label, method in methods.items():
        right.plot(TEMPS, [speedup(method, t, wl) for t in TEMPS], marker="o", label=label)
    right.axhline(1.0, color="black", linewidth=1)
    right.set(
        title="Batch-1 speedup, Llama-3.1-8B on H100 (vLLM profile)",
        xlabel="temperature",
        ylabel="speedup over plain decoding",
    )
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "temperature.png", dpi=110)


def load_figure() -> None:
    acc = AcceptanceConfig(acc_len="sharegpt", acc_len_method="eagle3")
    methods = [MethodConfig(name="eagle3", k=k, acceptance=acc) for k in (1, 2, 3, 4, 5)]
    batch = [1, 4, 16, 32, 64, 96, 128, 192]
    cfg = SweepConfig(methods=methods, batch_sizes=batch, workload=WorkloadConfig(requests=256))
    frame = run_sweep(cfg)
    fig, ax = plt.subplots(figsize=(7, 4))
    for k, part in frame.groupby("k"):
        ax.plot(part.batch_size, part.speedup, marker="o", label=f"fixed K={k}")
    best = frame.groupby("batch_size").speedup.max().clip(lower=1.0)
    ax.plot(
        best.index,
        best.values,
        color="black",
        linewidth=2.5,
        alpha=0.4,
        label="best K per concurrency (K=0 below 1.0)",
    )
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set(
        title="EAGLE-3 on Llama-3.1-8B, H100: the best K falls with load",
        xlabel="concurrent requests",
        ylabel="speedup over plain decoding",
    )
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "load.png", dpi=110)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    temperature_figure()
    load_figure()
    print(f"wrote {OUT / 'temperature.png'} and {OUT / 'load.png'}")


if __name__ == "__main__":
    main()
