"""A schedule as deployed: vLLM's ready-to-paste ``--speculative-config``, or a method's own
schedule as one line of text."""

from __future__ import annotations

import json

from simspec.catalog.vllm import PARALLEL, TO_VLLM
from simspec.config import MethodConfig

# the settings a method ran with that vLLM reads under the same keys (SpeculativeConfig):
# written out, or vLLM runs its defaults instead of what was simulated (QA: an n-gram 2..4
# exported as vLLM's default 5/5)
CARRIED = (
    "prompt_lookup_min",
    "prompt_lookup_max",
    "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob",
)


def speculative_config(
    method: MethodConfig, bands: list[list[int]], weights: str | None = None
) -> dict | None:
    """The ready-to-paste vLLM ``--speculative-config`` for the schedule, or None when vLLM has
    no such method. ``weights``: the draft's ``model`` the user's own config named."""
    # a one-forward drafter is its base method with vLLM's parallel_drafting flag (QA: recommend
    # said vLLM has no p_eagle method, where sweep reads that config back as p_eagle)
    base = next((b for b, p in PARALLEL.items() if p == method.name), None)
    name = TO_VLLM.get(base or method.name)
    if name is None:
        return None
    top = max((k for _, _, k in bands), default=0)
    cfg: dict = {"method": name, "num_speculative_tokens": max(top, 1)}
    if not (len(bands) == 1 and bands[0][2] >= 1):
        # one band of one K is num_speculative_tokens alone: vLLM turns Dynamic SD on whenever
        # the key is there (SpeculativeConfig.uses_dynamic_speculative_decoding) and then runs
        # its CUDA graphs piecewise (VllmConfig._maybe_override_dynamic_sd_cudagraph_mode), a
        # cost for nothing (QA: a one-band table was exported)
        cfg["num_speculative_tokens_per_batch_size"] = bands
    # MTP drafts with the target's own layers: vLLM takes the target model when none is given
    # (the 0.34.0 wheel: MTP's default_model, vllm/v1/worker/gpu/spec_decode/mtp/config.py)
    if name in ("eagle", "eagle3", "medusa", "draft_model"):
        cfg["model"] = hf_id(method.draft_model) or weights or "<path to the draft weights>"
    for key in CARRIED:
        if (value := getattr(method, key)) is not None:
            cfg[key] = value
    if method.draft_tp is not None:  # vLLM's name for it
        cfg["draft_tensor_parallel_size"] = method.draft_tp
    if base is not None:
        cfg["parallel_drafting"] = True
    return cfg


def hf_id(draft: str | None) -> str | None:
    """The Hugging Face id vLLM loads for a draft simspec names by its preset (the preset's
    first hf_ids entry; QA: "llama-3.2-1b" is no id vLLM can load), else ``draft`` as given
    (a path, or an id already)."""
    if draft is None:
        return None
    from simspec.catalog.tables import packaged_table

    ids = (packaged_table("models.yaml").get(draft) or {}).get("hf_ids") or ()
    return ids[0] if ids else draft


def speculative_config_json(cfg: dict) -> str:
    return json.dumps(cfg, separators=(", ", ": "))


def schedule_of(method: MethodConfig) -> str:
    """A method's schedule as text ('' when it has none)."""
    bands = method.k_schedule or method.tree_schedule
    if not bands:
        return ""
    kind = "k_schedule" if method.k_schedule else "tree_schedule"
    return f"{kind}: {[list(b) for b in bands]}"
