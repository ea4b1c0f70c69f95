"""How a served batch's tokens spread over a MoE layer's experts, as the measured tables time
it: skewed, not uniform.

A real router sends more tokens to some experts than to others. AIConfigurator's MoE collectors
(ai-dynamo/aiconfigurator collector/{sglang,vllm,trtllm}/collect_moe.py,
``power_law_logits_v3``) time every MoE layer under balanced routing and under power-law
routing (per-expert loads drawn from a power law of exponent 1.01 or 1.2, rounded to sum to
tokens x top-k, so an expert drawn a small load gets none), and its MOEModel estimates a served
layer from the power_law_1.2 rows (src/aiconfigurator/sdk/models/moe.py
``_power_law_alpha = 1.2`` at 28db912; sdk/config.py ModelConfig
``workload_distribution = "power_law"`` at 00efb04). Their ratio depends on the routed
pairs per expert x = tokens x top-k / experts, the same way under vLLM, SGLang and TRT-LLM on
every GPU (``moe_kernels.yaml`` ``routing``, fitted by ``calibration/fit_moe_kernels.py``):

- x below ~0.3 (a decode step of a few sequences): every token still finds its own experts; ~1;
- x from ~0.3 to ~2 (a verify pass of b x (K+1) tokens): the skewed batch touches far fewer
  experts than the balanced one, and a MoE layer at these sizes is a stream of the touched
  experts' weights: down to ~0.55 at x = 1;
- x above ~8 (prefill chunks): every expert is touched either way and the hottest expert's
  extra row blocks cost more: up to ~1.1.

So simspec times the routed experts of a served step at the kernel fit's balanced routing
(min(E, pairs) experts touched, as the fit was made) times that ratio. It applies where the
fitted kernel was timed on balanced routing and to whole-layer routing on one GPU (ep 1: the
vLLM and SGLang tables hold no EP>1 rows simspec fits); elsewhere the uniform expectation
(:func:`~simspec.engine.costmodel.work.distinct_experts`) stands.
"""

from __future__ import annotations

import bisect
import math


def routing_ratio(nodes: tuple[tuple[float, float], ...], x: float) -> float:
    """The served (power-law) over balanced latency of a MoE layer at ``x`` routed pairs per
    expert: ``nodes`` (x, ratio) in increasing x, interpolated linearly in log x and held at
    the end nodes (the tables measure 1-16384 tokens; outside them the nearest measured ratio
    is the estimate)."""
    if not nodes or x <= 0:
        return 1.0
    xs = [n[0] for n in nodes]
    i = bisect.bisect_left(xs, x)
    if i == 0:
        return nodes[0][1]
    if i == len(nodes):
        return nodes[-1][1]
    (x0, r0), (x1, r1) = nodes[i - 1], nodes[i]
    w = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return r0 + w * (r1 - r0)


def served_touched(num_experts: int, pairs: float) -> float:
    """Experts the balanced layout touches for ``pairs`` routed pairs: one pair each until
    every expert has one (the collectors' ``balanced_logits``, which the kernel fit is on)."""
    return min(float(num_experts), pairs)
