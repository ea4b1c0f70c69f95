"""vLLM's ``--speculative-config`` JSON, as users already write it, mapped onto simspec methods.

Keys follow vLLM's ``SpeculativeConfig`` (vllm/config/speculative.py) plus the proposed Dynamic
SD schedule ``num_speculative_tokens_per_batch_size: [[start_bs, end_bs, K], ...]``. Keys that
change nothing simspec models (weights paths, quantization, revisions, logging) are accepted and
ignored; any other key is an error naming it, so a typo never silently changes a prediction.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from simspec.catalog.tables import parse_json, read_input_text
from simspec.errors import InputError

# simspec method -> the vLLM method name it is exported as (simspec.studies.schedule.export)
TO_VLLM = {
    "eagle1": "eagle",
    "eagle3": "eagle3",
    "ngram": "ngram",
    "draft_model": "draft_model",
    "mtp": "mtp",
    "medusa1": "medusa",
    "suffix": "suffix",
}
# vLLM's per-model names for multi-token-prediction heads, all of which run simspec's mtp:
# vllm/config/speculative.py MTPModelTypes on vLLM main (read 2026-12-07; each is "deprecated
# and replaced with mtp" there), less "mtp" itself (QA: qwen3_5_mtp was refused)
MTP_ALIASES = (
    "deepseek_mtp",
    "dots3_note_mtp",
    "mimo_mtp",
    "mimo_v2_mtp",
    "glm4_moe_mtp",
    "glm4_moe_lite_mtp",
    "glm_ocr_mtp",
    "ernie_mtp",
    "nemotron_h_mtp",
    "exaone_moe_mtp",
    "exaone4_5_mtp",
    "qwen3_next_mtp",
    "qwen3_5_mtp",
    "longcat_flash_mtp",
    "bailing_hybrid_v3_mtp",
    "minimax_m3_mtp",
    "bailing_hybrid_mtp",
    "kimi_k3_mtp",
    "pangu_ultra_moe_mtp",
    "step3p5_mtp",
    "hy_v3_mtp",
    "hy_v4_mtp",
    "gemma4_mtp",
    "inkling_mtp",
    "glm5_next_mtp",
)
# vLLM method name -> simspec method: every exported name read back, and the MTP aliases
METHODS = {**{vllm: name for name, vllm in TO_VLLM.items()}, **dict.fromkeys(MTP_ALIASES, "mtp")}
# accepted, and without effect on what simspec simulates
IGNORED = {
    "model": "the draft weights' path (draft_model: used as the draft model when it is a preset)",
    "quantization": "null, the default (a quantised draft is refused: to_method)",
    "max_model_len": "context limit of the draft",
    "revision": "weights revision",
    "code_revision": "code revision",
    "disable_logprobs": "logging",
    "disable_log_stats": "logging",
    "enforce_eager": "false, the default (an eager drafter is refused: to_method)",
    "disable_padded_drafter_batch": "false, vLLM's default (true is refused: to_method)",
}
# vLLM's SuffixDecoding settings, passed through as MethodConfig fields of the same name
SUFFIX_KEYS = (
    "suffix_decoding_max_tree_depth",
    "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor",
    "suffix_decoding_min_token_prob",
)
USED = (
    "method",
    "draft_tensor_parallel_size",
    "num_speculative_tokens",
    "num_speculative_tokens_per_batch_size",
    "disable_by_batch_size",
    "speculative_token_tree",
    "prompt_lookup_min",
    "prompt_lookup_max",
    "parallel_drafting",
    *SUFFIX_KEYS,
)
# methods whose vLLM proposer ignores speculative_token_tree: Medusa's proposes one token per head
# (vllm/v1/spec_decode/medusa.py, 0.10.1 wheel: no tree); n-gram, suffix and draft models are
# refused a tree by their own checks
TREELESS = ("medusa1", "medusa2")
# vLLM's parallel_drafting flag turns these methods into the one-forward drafters simspec names
# apart (vllm/v1/spec_decode/llm_base_proposer.py @ 00c4f22 reads it for both); a parallel
# draft model (PARD) has no packaged acceptance yet, so it is refused by name
PARALLEL = {"draft_model": "pard", "eagle3": "p_eagle"}
UNPACKAGED = {
    "pard": "a parallel draft model (PARD) is not a simspec method yet: no published PARD "
    "acceptance per K is packaged (simspec methods lists what is)"
}
MAX_JSON_BYTES = 256 * 1024
MAX_TREE_NODES = 1024  # MethodConfig.tree_nodes' bound
MAX_TREE_DEPTH = 64  # MethodConfig.k's bound


def read_speculative_config(text: str) -> dict[str, Any]:
    """The JSON object given inline or, with a leading '@', in a file."""
    field = "--speculative-config"
    if text.startswith("@"):
        text = read_input_text(Path(text[1:]), field, MAX_JSON_BYTES)
    elif len(text) > MAX_JSON_BYTES:
        raise InputError(field, f"longer than {MAX_JSON_BYTES} characters")
    elif (
        not text.lstrip().startswith("{") and Path(text).suffix == ".json" and Path(text).is_file()
    ):
        # QA: recommend --json's file passed back by name read as "not valid JSON"
        raise InputError(field, f"give a file as @{text} (without '@' the text is the JSON)")
    data = parse_json(text, field)
    if not isinstance(data, dict):
        raise InputError(field, 'must be a JSON object such as {"method": "eagle3", ...}')
    return data


def method_from_model(model: str) -> str:
    """The method vLLM picks for a config that names a ``model`` and no ``method``
    (vllm/config/speculative.py SpeculativeConfig.__post_init__): "ngram" or "[ngram]" is
    n-gram; a model whose name holds "eagle-" is EAGLE(-1), one whose name holds "eagle3" is
    EAGLE-3; else a draft model (vLLM also reads the draft's config.json model_type: medusa,
    mlp_speculator, an MTP type; a config that is one of those must say its method here).
    QA: an EAGLE-3 head given as its model alone ran as a stand-alone draft model."""
    name = model.lower()
    if name in ("ngram", "[ngram]"):
        return "ngram"
    if "eagle-" in name:
        return "eagle"
    if "eagle3" in name:
        return "eagle3"
    return "draft_model"


def to_method(cfg: dict[str, Any], tp: int = 1) -> dict[str, Any]:
    """MethodConfig fields for a vLLM speculative_config (acceptance is left to presets) of
    a target served at tensor parallelism ``tp``."""
    unknown = sorted(set(cfg) - set(IGNORED) - set(USED))
    if unknown:
        raise InputError(
            f"speculative_config.{unknown[0]}",
            f"unknown key; simspec understands {', '.join(USED + tuple(IGNORED))}",
        )
    if cfg.get("enforce_eager"):
        raise InputError(
            "speculative_config.enforce_eager",
            "true is not modelled (the drafter's forwards launched eagerly, outside CUDA graphs, "
            "while simspec prices them as the engine graphs them): leave it out or set it to false",
        )
    if cfg.get("quantization") is not None:
        raise InputError(
            "speculative_config.quantization",
            f"{cfg['quantization']!r} is not modelled (simspec prices the draft at its "
            "checkpoint's precision): leave it out",
        )
    if cfg.get("disable_padded_drafter_batch"):
        # vLLM >= 0.14 turns async scheduling off for it (vllm/config/vllm.py at PR #31998):
        # a different host timeline, as well as an unpadded drafter batch
        raise InputError(
            "speculative_config.disable_padded_drafter_batch",
            "true is not modelled (an unpadded drafter batch, which in vLLM 0.14+ also turns "
            "async scheduling off): leave it out or set it to false",
        )
    draft_tp = cfg.get("draft_tensor_parallel_size")
    if draft_tp is not None:
        draft_tp = _int(draft_tp, "draft_tensor_parallel_size", 1, 64)
        if draft_tp not in (1, tp):
            # SpeculativeConfig._verify_and_get_draft_tp: 1 or the target's
            raise InputError(
                "speculative_config.draft_tensor_parallel_size",
                f"vLLM takes 1 or the target's tensor parallelism (tp={tp}), not {draft_tp}",
            )
    method = cfg.get("method")
    if method is None:
        if not cfg.get("model"):
            raise InputError("speculative_config.method", "give a method (or a draft model)")
        method = method_from_model(str(cfg["model"]))
    if not isinstance(method, str) or method not in METHODS:
        raise InputError(
            "speculative_config.method",
            f"{method!r} is not modelled; choose one of {', '.join(sorted(METHODS))}",
        )
    out: dict[str, Any] = {"name": METHODS[method]}
    k = cfg.get("num_speculative_tokens")
    if k is not None:
        out["k"] = _int(k, "num_speculative_tokens", 1, 64)
    schedule = cfg.get("num_speculative_tokens_per_batch_size")
    if schedule is not None:
        out["k_schedule"] = _schedule(schedule)
        if k is None:  # vLLM builds the drafter for the longest draft the schedule asks for
            out["k"] = max([1, *(steps for _, _, steps in out["k_schedule"])])
        else:  # each band's K capped at num_speculative_tokens (capped_bands says where)
            out["k_schedule"] = [(lo, hi, min(out["k"], kk)) for lo, hi, kk in out["k_schedule"]]
    if cfg.get("disable_by_batch_size") is not None:
        out["disable_by_batch_size"] = _int(
            cfg["disable_by_batch_size"], "disable_by_batch_size", 1, 1_000_000
        )
    if cfg.get("speculative_token_tree") is not None:
        if out["name"] in TREELESS:
            raise InputError(
                "speculative_config.speculative_token_tree",
                f"vLLM drafts {method} as a chain whatever the tree says (only its EAGLE "
                "proposer reads speculative_token_tree: vllm/v1/spec_decode/eagle.py, 0.10.1 "
                "wheel): drop it",
            )
        out["tree_paths"] = _tree(cfg["speculative_token_tree"])
        nodes = len(out["tree_paths"])
        if k is not None and out["k"] != nodes:
            # vLLM drafts each of the tree's nodes as a speculative token and reserves
            # num_speculative_tokens slots a step: its users give the node count (QA: a tree of
            # 3 with num_speculative_tokens 1 ran as the tree without a word)
            raise InputError(
                "speculative_config.num_speculative_tokens",
                f"{out['k']}, and speculative_token_tree drafts {nodes} tokens (its nodes): give "
                f"num_speculative_tokens {nodes}, or leave it out",
            )
        out["tree"] = "static"
        out["k"] = max(len(p) for p in out["tree_paths"])
    if out["name"] == "ngram":
        out.update(_lookup_sizes(cfg))
    if out["name"] == "suffix":
        out.update({key: cfg[key] for key in SUFFIX_KEYS if cfg.get(key) is not None})
        depth = out.get("suffix_decoding_max_tree_depth")
        if k is None and depth is not None:  # vLLM's _validate_suffix_decoding default
            out["k"] = _int(depth, "suffix_decoding_max_tree_depth", 1, 64)
    if cfg.get("parallel_drafting") not in (None, False):
        if cfg["parallel_drafting"] is not True:
            raise InputError("speculative_config.parallel_drafting", "must be true or false")
        if out["name"] not in PARALLEL:
            raise InputError(
                "speculative_config.parallel_drafting",
                f"vLLM drafts in parallel with {' or '.join(PARALLEL)} only, not {method!r}",
            )
        if "tree_paths" in out:
            raise InputError(
                "speculative_config.parallel_drafting",
                "parallel drafting proposes one chain: drop speculative_token_tree",
            )
        out["name"] = PARALLEL[out["name"]]
        if out["name"] in UNPACKAGED:
            raise InputError("speculative_config.parallel_drafting", UNPACKAGED[out["name"]])
    if out["name"] == "draft_model" and isinstance(cfg.get("model"), str):
        out["draft_model"] = cfg["model"]
    if draft_tp is not None and draft_tp != tp:
        # a draft on one GPU beside a sharded target: the engine profile prices it (vLLM V0's
        # SmallerTpProposerWorker) or refuses it (V1), engines.yaml draft_tp_below_target
        out["draft_tp"] = draft_tp
    return out


def _lookup_sizes(cfg: dict[str, Any]) -> dict[str, int | None]:
    """The sizes the config gives, checked; one left unset stays unset, for the engine's own
    default (lookup_sizes with the profile's ngram_size_defaults: vLLM V0 took 1 for an unset
    min where V1 copies the max; QA: V1's rule was applied before the engine was known)."""
    low, high = cfg.get("prompt_lookup_min"), cfg.get("prompt_lookup_max")
    low = None if low is None else _int(low, "prompt_lookup_min", 1, 64)
    high = None if high is None else _int(high, "prompt_lookup_max", 1, 64)
    lookup_sizes(low, high, "speculative_config")  # refuses min > max
    return {"prompt_lookup_min": low, "prompt_lookup_max": high}


def lookup_sizes(
    low: int | None, high: int | None, where: str, defaults: str = "v1"
) -> tuple[int, int]:
    """vLLM's n-gram sizes (min, max): neither given -> 5 and 5 ("arbitrarily chosen"), one
    given -> the other copies it (SpeculativeConfig.__post_init__, vllm/config/speculative.py
    in the 0.33.0 wheel, l.1302-1319; the same in 0.10.1). ``defaults`` "v0" (the engine
    profile's ngram_size_defaults): vLLM before 0.8 required the max and took 1 for an unset
    min. ``where``: the input named in errors."""
    if defaults == "v0":
        if high is None:
            raise InputError(
                f"{where}.prompt_lookup_max",
                "vLLM V0 (before 0.8) requires it (SpeculativeConfig.maybe_create_spec_config: "
                "ngram_prompt_lookup_max must be > 0), its min defaulting to 1: give "
                "prompt_lookup_max",
            )
        low = low or 1
    high = high or low or 5
    low = low or high
    if low > high:
        raise InputError(
            f"{where}.prompt_lookup_min", f"must be <= prompt_lookup_max ({high}), got {low}"
        )
    return low, high


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int(value: Any, key: str, low: int, high: int) -> int:
    if not _is_int(value) or not low <= value <= high:
        raise InputError(f"speculative_config.{key}", f"must be an integer in [{low}, {high}]")
    return value


# simspec's method fields that a vLLM --speculative-config spells with its own key
VLLM_KEYS = {"k_schedule": "num_speculative_tokens_per_batch_size"}


def capped_bands(cfg: dict[str, Any]) -> str | None:
    """What vLLM does to the config's Dynamic SD bands whose K exceeds num_speculative_tokens
    (None where none does): it caps each at num_speculative_tokens, the longest draft its
    drafter is built for (build_dynamic_sd_schedule_lookup, vllm/v1/spec_decode/dynamic/
    utils.py: dense_schedule[bs] = min(vllm_num_speculative_tokens, K)), without a word."""
    k, bands = cfg.get("num_speculative_tokens"), cfg.get("num_speculative_tokens_per_batch_size")
    if not (_is_int(k) and isinstance(bands, list)):
        return None
    over = [b for b in bands if isinstance(b, list | tuple) and len(b) == 3 and b[2] > k]
    if not over:
        return None
    shown = ", ".join(str(list(b)) for b in over)
    return (
        f"band {shown} drafts more than num_speculative_tokens {k}: vLLM caps it at {k} "
        "(build_dynamic_sd_schedule_lookup), and so does simspec"
    )


def _schedule(value: Any) -> list[tuple[int, int, int]]:
    key = "speculative_config.num_speculative_tokens_per_batch_size"
    if not isinstance(value, list) or not value:
        raise InputError(key, "must be a non-empty list of [start_bs, end_bs, K]")
    out = []
    for entry in value:
        if isinstance(entry, list | tuple) and len(entry) == 5:
            # QA: vLLM's (bs_lo, bs_hi, ctx_lo, ctx_hi, K) form was refused as malformed
            raise InputError(
                key,
                f"{entry!r} is vLLM's batch-size and context form [bs_lo, bs_hi, ctx_lo, "
                "ctx_hi, K], which simspec does not model (its K by context length): give "
                "[start_bs, end_bs, K] entries",
            )
        if not (isinstance(entry, list | tuple) and len(entry) == 3 and all(map(_is_int, entry))):
            raise InputError(key, f"each entry is [start_bs, end_bs, K] of integers, got {entry!r}")
        start, end, k = entry
        if not (1 <= start <= end and 0 <= k <= 64):
            raise InputError(key, f"need 1 <= start_bs <= end_bs and 0 <= K <= 64, got {entry!r}")
        out.append((start, end, k))
    spans = sorted(out)
    for (_, end, _), (start, _, _) in zip(spans, spans[1:], strict=False):
        if start <= end:
            raise InputError(key, "batch-size ranges overlap")
    if spans[0][0] != 1:  # validate_and_normalize_dynamic_sd_schedule
        raise InputError(
            key, f"the first batch-size range must start at 1, as vLLM requires (got {spans[0][0]})"
        )
    return out


def _tree(value: Any) -> list[list[int]]:
    """vLLM's tree: a list (or its Python repr) of paths of 0-based sibling ranks."""
    key = "speculative_config.speculative_token_tree"
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)  # literals only: never code
        except (ValueError, SyntaxError, RecursionError, MemoryError):
            # RecursionError: ``-----...1`` nests one unary minus per sign
            raise InputError(key, "must be a list of paths such as [(0,), (1,), (0, 0)]") from None
    if not isinstance(value, list | tuple) or not value:
        raise InputError(key, "must be a non-empty list of paths")
    if len(value) > MAX_TREE_NODES:
        raise InputError(key, f"at most {MAX_TREE_NODES} paths (tree_nodes' bound)")
    paths = []
    for p in value:
        if not (
            isinstance(p, list | tuple)
            and 0 < len(p) <= MAX_TREE_DEPTH
            and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < 1024 for x in p)
        ):
            raise InputError(
                key, f"each path is a tuple of 1 to {MAX_TREE_DEPTH} ranks in [0, 1024), got {p!r}"
            )
        paths.append([int(x) for x in p])
    known = {()}
    for p in sorted(paths, key=len):
        if tuple(p[:-1]) not in known:
            raise InputError(key, f"path {tuple(p)} has no parent {tuple(p[:-1])} in the tree")
        known.add(tuple(p))
    if len(known) - 1 != len(paths):
        raise InputError(key, "paths repeat")
    return paths
