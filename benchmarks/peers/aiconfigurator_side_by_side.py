"""NVIDIA AIConfigurator (pip `aiconfigurator`, Apache-2.0) on the published rows simspec
validates, so the two can be scored side by side (compare_with_simspec.py joins them).

AIConfigurator is not a dependency of simspec: install it in a venv of its own and point this
script at its executable. Every row of a case table gets one line: AIConfigurator's prediction,
or why there is none (a model, GPU, engine, method or metric it cannot express, or its own
refusal, verbatim). Each distinct deployment is estimated once, with
`aiconfigurator cli estimate --estimate-mode agg`, and cached by command.

    python benchmarks/peers/aiconfigurator_side_by_side.py \
        --aic /path/to/venv/bin/aiconfigurator \
        --cases ../shared/validation/cases_moe_serving.csv --assume gpu=h200 \
        --assume load_kind=single --out benchmarks/peers/aiconfigurator_moe_serving.csv

A row is read as `simspec validate` reads it (simspec.studies.validation.predict.plan_case, with
the same --assume): its TP (or the fewest GPUs that hold it), prompt/output lengths (the
dataset trace's means where unstated), load, precision and, for MTP, its acceptance. So both
tools predict the same deployment. AIConfigurator has no request queue or arrival process:

- ``single``: batch 1; ``concurrency`` N or ``static_batch`` N: a steady batch of N, halved
  until its KV fits (it reports OOM past capacity); a burst is read as that steady batch, so its
  TTFT is one prefill's, without the backlog a burst queues behind.
- ``qps`` R: the batch Little's law gives from its own request latency (R x latency, iterated
  from batch 1 to a fixed point).
- MTP: ``--nextn K --nextn-accepted A`` with A the row's measured_tau - 1, else the acceptance
  rate its notes state (K = 1), else simspec's acceptance for the row (tau - 1). A speedup is
  AIConfigurator with MTP over without (tokens/s at a fixed batch; request latency under qps).
  Other methods (EAGLE, n-gram, suffix) it cannot express.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import subprocess
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from simspec.catalog.models import load_model
from simspec.catalog.traces import first_method, load_trace
from simspec.studies.validation.assume import fill_unstated, parse_assumptions
from simspec.studies.validation.predict import CasePlan, Skip, plan_case

# simspec ids -> AIConfigurator's (its model_configs and systems/data folders, 0.12.0)
SYSTEMS = {"h100_sxm": "h100_sxm", "h200": "h200_sxm", "a100_80gb": "a100_sxm", "b200": "b200_sxm"}
HF_IDS = {
    "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
    "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B",
    "qwen3-32b": "Qwen/Qwen3-32B",
    "qwen3-14b": "Qwen/Qwen3-14B",
    "deepseek-v3": "deepseek-ai/DeepSeek-V3",
    "deepseek-r1": "deepseek-ai/DeepSeek-R1",
    "kimi-k2": "moonshotai/Kimi-K2-Instruct",
    "gpt-oss-120b": "openai/gpt-oss-120b",
    "llama-4-scout": "meta-llama/Llama-4-Scout-17B-16E-Instruct",
    "llama-4-maverick": "meta-llama/Llama-4-Maverick-17B-128E-Instruct",
    "llama-3.1-70b": "meta-llama/Meta-Llama-3.1-70B",
    "llama-3.1-8b": "meta-llama/Meta-Llama-3.1-8B",
}
# models AIConfigurator 0.12.0 does not package (it would fetch their config.json from Hugging
# Face): given as a local config.json, its packaged sibling's with simspec's catalog shapes
UNPACKAGED = {"qwen3-14b": "Qwen--Qwen3-32B"}
CONFIGS = Path(tempfile.gettempdir()) / "simspec-aic-configs"
BACKENDS = ("vllm", "sglang", "trtllm")
METRICS = ("tpot_ms", "ttft_ms", "throughput_tok_s", "speedup")
# a row that served an FP8 checkpoint: Qwen's and DeepSeek's FP8 releases are block-quantised
# (128x128), AIConfigurator's fp8_block
FP8 = ("--gemm-quant-mode", "fp8_block", "--moe-quant-mode", "fp8_block")
FIELDS = {
    "tpot_ms": r"TPOT:\s+([\d.,]+) ms",
    "ttft_ms": r"TTFT:\s+([\d.,]+) ms",
    "latency_ms": r"Request Latency:\s+([\d.,]+) ms",
    "throughput_tok_s": r"tokens/s:\s+([\d.,]+)",
}
STATED_RATE = re.compile(r"acceptance rate (\d+(?:\.\d+)?)\s*%(?:\s*-\s*(\d+(?:\.\d+)?)\s*%)?")
QPS_ITERATIONS = 6


@dataclass(frozen=True)
class Deployment:
    """What one AIConfigurator estimate is asked for, less the batch."""

    model: str
    system: str
    backend: str
    tp: int
    ep: int
    isl: int
    osl: int
    fp8: bool
    nextn: int = 0
    accepted: float = 0.0

    def command(self, aic: str, batch: int) -> list[str]:
        moe = (
            ["--moe-tp-size", "1", "--moe-ep-size", str(self.ep)]
            if self.ep > 1
            else ["--moe-tp-size", str(self.tp), "--moe-ep-size", "1"]
        )
        mtp = ["--nextn", str(self.nextn), "--nextn-accepted", f"{self.accepted:.4g}"]
        return [
            aic, "cli", "estimate", "--estimate-mode", "agg", "--model-path", self.model,
            "--system", self.system, "--backend", self.backend, "--tp-size", str(self.tp), *moe,
            "--batch-size", str(batch), "--isl", str(self.isl), "--osl", str(self.osl),
            *(FP8 if self.fp8 else ()), *(mtp if self.nextn else ()),
        ]  # fmt: skip


class Estimator:
    """One AIConfigurator call per distinct command, remembered in a JSON cache across runs,
    each call's full output kept under ``raw``."""

    def __init__(self, aic: str, cache: Path | None, raw: Path | None, timeout_s: float):
        self.aic, self.cache_path, self.raw, self.timeout_s = aic, cache, raw, timeout_s
        self.cache: dict = json.loads(cache.read_text()) if cache and cache.exists() else {}
        if raw:
            raw.mkdir(parents=True, exist_ok=True)
        self.calls = 0

    def __call__(self, dep: Deployment, batch: int) -> tuple[dict[str, float] | str, str]:
        cmd = dep.command(self.aic, batch)
        key = "aiconfigurator " + " ".join(cmd[1:])
        if key not in self.cache:
            self.cache[key] = self._run(cmd, key)
            if self.cache_path:
                self.cache_path.write_text(json.dumps(self.cache, indent=1, sort_keys=True))
        return self.cache[key], key

    def _run(self, cmd: list[str], key: str) -> dict[str, float] | str:
        self.calls += 1
        print(f"  [{self.calls}] {key}", flush=True)
        try:
            done = subprocess.run(
                cmd, capture_output=True, text=True, check=False, timeout=self.timeout_s
            )
            text = done.stdout + done.stderr
        except subprocess.TimeoutExpired:
            return f"timeout: no estimate within {self.timeout_s:g} s"
        except OSError as exc:  # QA: a wrong --aic ended in a FileNotFoundError traceback
            raise SystemExit(f"error: --aic: cannot run {cmd[0]}: {exc.strerror}") from None
        if self.raw:
            name = hashlib.sha1(key.encode()).hexdigest()[:12]
            (self.raw / f"{name}.txt").write_text(f"$ {key}\n{text}")
        found = {k: re.search(p, text) for k, p in FIELDS.items()}
        if not all(found.values()):
            said = [
                ln.strip()
                for ln in text.splitlines()
                if ln.startswith(("Error", "RuntimeError", "ValueError"))
                or " error: " in ln
                or "[E]" in ln
            ]
            return (said or [f"exit {done.returncode}, no estimate printed"])[-1]
        return {k: float(m.group(1).replace(",", "")) for k, m in found.items() if m}


def model_path(aic: str, model: str) -> str:
    """The --model-path: the Hugging Face id, or for a model AIConfigurator does not package a
    folder holding its config.json (the sibling's, with the shapes simspec's catalog gives)."""
    if model not in UNPACKAGED:
        return HF_IDS[model]
    site = next(Path(aic).resolve().parent.parent.glob("lib/python*/site-packages"))
    sibling = site / "aiconfigurator_core/model_configs" / f"{UNPACKAGED[model]}_config.json"
    cfg = json.loads(sibling.read_text())
    m = load_model(model)
    cfg.update(
        hidden_size=m.hidden_size,
        intermediate_size=m.intermediate_size,
        num_hidden_layers=m.num_hidden_layers,
        max_window_layers=m.num_hidden_layers,
        num_attention_heads=m.num_attention_heads,
        num_key_value_heads=m.num_key_value_heads,
        head_dim=m.head_dim,
        vocab_size=m.vocab_size,
        tie_word_embeddings=m.tie_word_embeddings,
    )
    folder = CONFIGS / HF_IDS[model].replace("/", "--")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    return str(folder)


def trace_means(dataset: str) -> tuple[float, float]:
    trace = load_trace(dataset, first_method(dataset))
    return float(trace.prompt_len.mean()), float(trace.output_len.mean())


def plan(row: dict[str, str], assumed: dict[str, str]) -> tuple[CasePlan, str]:
    """simspec's reading of the row; a row simspec has no engine profile for (TensorRT-LLM) is
    read with vLLM's, for its deployment only (the engine AIConfigurator is asked for stays)."""
    try:
        return plan_case(row, assume=assumed), ""
    except Skip as exc:
        if "no engine profile" not in str(exc):
            raise
        return plan_case({**row, "engine": "vllm"}, assume=assumed), (
            f"deployment read with the vllm profile ({exc})"
        )


def acceptance(row: dict[str, str], p: CasePlan) -> tuple[float, str]:
    """Mean accepted draft tokens per step for --nextn-accepted, and where it came from."""
    k = p.scenario.method.k
    tau = pd.to_numeric(row.get("measured_tau", ""), errors="coerce")
    if not pd.isna(tau):
        return float(tau) - 1, "measured_tau - 1"
    if k == 1 and (m := STATED_RATE.search(row.get("notes", ""))):
        lo, hi = float(m.group(1)), float(m.group(2) or m.group(1))
        return (lo + hi) / 200, f"acceptance rate stated in the notes ({m.group(0)})"
    acc = p.scenario.method.acceptance
    if acc.tau is not None and acc.tau_k in (None, k):
        return acc.tau - 1, "simspec's acceptance (tau - 1)"
    if acc.alpha is not None:
        return sum(acc.alpha**i for i in range(1, k + 1)), "simspec's alpha, chain sum"
    raise Skip("no acceptance AIConfigurator can take (--nextn-accepted)")


def deployment(
    aic: str, row: dict[str, str], assumed: dict[str, str]
) -> tuple[Deployment, str, str]:
    """(deployment with its method, load kind, notes) or Skip saying why AIConfigurator cannot."""
    filled, _ = fill_unstated(row, assumed)
    model, gpu, engine = filled["target_model"], filled["gpu"], filled["engine"]
    method, metric = filled["method"], filled["metric"]
    if metric not in METRICS:
        raise Skip(f"not expressible: metric {metric}")
    if model not in HF_IDS:
        raise Skip(f"no model: {model} is not in AIConfigurator 0.12.0's model list")
    if gpu not in SYSTEMS:
        raise Skip(f"no database: no AIConfigurator system for GPU {gpu!r}")
    if engine not in BACKENDS:
        raise Skip(f"not expressible: backend {engine}")
    if method not in ("autoregressive", "mtp"):
        raise Skip(
            f"not expressible: AIConfigurator speculates only by MTP (--nextn), not {method}"
        )
    if metric == "speedup" and filled.get("baseline") != "same-engine-no-spec":
        raise Skip(f"not expressible: baseline {filled.get('baseline')!r}")
    try:
        p, said = plan(row, assumed)
    except Skip as exc:
        raise Skip(f"no deployment: simspec cannot read the row ({exc})") from None
    sc, wl = p.scenario, p.scenario.workload
    isl, osl = (wl.prompt.mean, wl.output.mean)
    if wl.lengths_from is not None:
        isl, osl = trace_means(wl.lengths_from)
        said = "; ".join(filter(None, [said, f"lengths: the {wl.lengths_from} trace's means"]))
    dep = Deployment(
        model=model_path(aic, model), system=SYSTEMS[sc.gpu], backend=engine, tp=sc.tp,
        ep=sc.ep or 1, isl=max(1, round(isl)), osl=max(2, round(osl)),
        fp8=sc.precision == "fp8",
    )  # fmt: skip
    if method == "mtp":
        accepted, source = acceptance(row, p)
        dep = replace(dep, nextn=sc.method.k, accepted=min(max(accepted, 0.0), sc.method.k))
        said = "; ".join(filter(None, [said, f"nextn-accepted {accepted:.3g}: {source}"]))
    kind = filled["load_kind"]
    return dep, kind, said


def at_load(est: Estimator, dep: Deployment, kind: str, load: float):
    """(estimate or refusal, batch estimated, command) at the row's load."""
    if kind == "qps":
        batch = 1
        for _ in range(QPS_ITERATIONS):
            result, cmd = est(dep, batch)
            if isinstance(result, str):
                return result, batch, cmd
            nxt = max(1, round(load * result["latency_ms"] / 1e3))
            if nxt == batch:
                break
            batch = nxt
        return result, batch, cmd
    batch = 1 if kind == "single" else max(1, int(load))
    while True:
        result, cmd = est(dep, batch)
        if isinstance(result, dict) or "OOM" not in result or batch == 1:
            return result, batch, cmd
        batch //= 2


def predict(est: Estimator, row: dict[str, str], assumed: dict[str, str]) -> dict:
    out = {"aic_predicted": math.nan, "aic_batch": "", "aic_status": "ok", "aic_notes": ""}
    out["command"] = ""
    try:
        dep, kind, said = deployment(est.aic, row, assumed)
    except Skip as exc:
        reason = str(exc)
        status = reason.split(":")[0]
        return {**out, "aic_status": status, "aic_notes": reason}
    filled, _ = fill_unstated(row, assumed)
    load = float(filled.get("load") or 1)
    result, batch, cmd = at_load(est, dep, kind, load)
    out.update(aic_batch=batch, command=cmd, aic_notes=said)
    if isinstance(result, str):
        return {**out, "aic_status": "refused", "aic_notes": result}
    metric = filled["metric"]
    if metric != "speedup":
        return {**out, "aic_predicted": result[metric]}
    base, base_batch, base_cmd = at_load(est, replace(dep, nextn=0, accepted=0.0), kind, load)
    out["command"] = f"{cmd} / {base_cmd}"
    if isinstance(base, str):
        return {**out, "aic_status": "refused", "aic_notes": f"baseline: {base}"}
    if kind == "qps":  # both serve the same rate: the gain is in latency
        return {**out, "aic_predicted": base["latency_ms"] / result["latency_ms"]}
    return {**out, "aic_predicted": result["throughput_tok_s"] / base["throughput_tok_s"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--aic", required=True, help="the aiconfigurator executable")
    ap.add_argument("--cases", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--assume", action="append", default=[], help="as simspec validate's")
    ap.add_argument("--cache", type=Path, help="JSON of every estimate, reused across runs")
    ap.add_argument("--raw", type=Path, help="a folder for each call's full output")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per AIC call")
    args = ap.parse_args()
    assumed = parse_assumptions(args.assume)
    est = Estimator(args.aic, args.cache, args.raw, args.timeout)
    cases = pd.read_csv(args.cases, dtype=str, keep_default_na=False)
    out = []
    for row in cases.to_dict("records"):
        got = predict(est, row, assumed)
        out.append(
            {
                "case_id": row["case_id"],
                "series": row["series"],
                "metric": row["metric"],
                "method": row["method"],
                "load_kind": fill_unstated(row, assumed)[0]["load_kind"],
                "load": row["load"],
                "measured_value": float(row["measured_value"] or "nan"),
                **got,
            }
        )
    frame = pd.DataFrame(out)
    frame.to_csv(args.out, index=False)
    ok = int((frame["aic_status"] == "ok").sum())
    print(f"{len(frame)} rows, {ok} estimated, {est.calls} new AIC calls: wrote {args.out}")
    print(frame["aic_status"].value_counts().to_string())


if __name__ == "__main__":
    main()
