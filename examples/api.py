from simspec import Deployment, Scenario, WorkloadConfig, preset_method, simulate, sweep

# One deployment: Llama-3.1-8B on one H100 in vLLM, 32 requests in flight, ShareGPT lengths.
deploy = Deployment(
    model="llama-3.1-8b",
    gpu="h100_sxm",
    engine="vllm",
    workload=WorkloadConfig(concurrency=32, requests=256, lengths_from="sharegpt"),
)

# Plain decoding and EAGLE-3 (K=3, acceptance replayed from the packaged ShareGPT trace),
# each drafted as this engine drafts it for this model (without target and engine a method
# is its published shape: eagle1's and medusa1's trees, where vLLM drafts chains).
runs = {}
for name in ("autoregressive", "eagle3"):
    method = preset_method(name, "sharegpt", target=deploy.model, engine=deploy.engine)
    scenario = Scenario(**deploy.model_dump(), method=method)
    runs[name] = simulate(scenario)  # SimResult: requests, iterations, summary, memory

base, spec = runs["autoregressive"].summary, runs["eagle3"].summary  # typed RunSummary
print(
    f"speedup {spec.throughput_tok_s / base.throughput_tok_s:.2f}x, "
    f"tau {spec.mean_accept_len:.2f}, TPOT p50 {base.tpot_ms_p50:.1f} -> {spec.tpot_ms_p50:.1f} ms"
)

# Per-iteration detail: where the time of one engine step goes.
steps = runs["eagle3"].iterations
print(steps[["decode_seqs", "draft_s", "verify_s", "overhead_s"]].mean())

# The same question over batch sizes: one row per (method, batch size), speedup included.
table = sweep({"methods": ["eagle3"], "batch_sizes": [1, 16, 64]})  # names, as --methods
print(table[["method", "batch_size", "speedup", "tpot_ms_p50"]])
