"""Published EAGLE-3 head layers (``simspec/data/eagle3_heads.yaml``): where a target's head was
trained wider than one dense layer of the target, or with plain attention where the target has
MLA, the head's own widths replace :meth:`~simspec.catalog.models.ModelShape.one_layer`'s."""

from __future__ import annotations

from simspec.catalog.models import ModelShape
from simspec.catalog.tables import packaged_table

# the fields a head entry sets; the rest of the layer is one_layer's
HEAD_FIELDS = ("intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim")
# a Llama layer's attention: none of the target's MLA, sparse index or q/k norm
LLAMA_ATTENTION = {
    "q_lora_rank": 0,
    "kv_lora_rank": 0,
    "qk_nope_head_dim": 0,
    "qk_rope_head_dim": 0,
    "v_head_dim": 0,
    "index_topk": 0,
    "index_n_heads": 0,
    "qk_norm": False,
}


def eagle3_head(layer: ModelShape, target_id: str) -> ModelShape:
    """``layer`` (one dense layer of the target) with the published head's widths and a Llama
    layer's attention, where ``eagle3_heads.yaml`` lists the target; else ``layer``."""
    entry = packaged_table("eagle3_heads.yaml").get(target_id)
    if entry is None:
        return layer
    update = {**LLAMA_ATTENTION, **{f: int(entry[f]) for f in HEAD_FIELDS}}
    return layer.model_copy(update=update)


def eagle3_head_refusal(target: ModelShape, attn_tp: int) -> str | None:
    """Why ``target``'s published EAGLE-3 head cannot run with its attention over ``attn_tp``
    GPUs, as the engines split it like the target's (None: it can, or the head is one layer of
    the target, whose own check stands): ModelShape.attention_tp_refusal on the head."""
    if target.id not in packaged_table("eagle3_heads.yaml"):
        return None
    head = eagle3_head(target, target.id).model_copy(
        update={"id": f"the published eagle3 head of {target.id} (eagle3_heads.yaml)"}
    )
    return head.attention_tp_refusal(attn_tp)


def eagle3_head_note(method: str, target_id: str) -> str | None:
    """What a run says of an EAGLE-3 head taken from its published configuration (None where
    the method is not EAGLE-3 or the head is one layer of the target)."""
    entry = packaged_table("eagle3_heads.yaml").get(target_id)
    if method != "eagle3" or entry is None:
        return None
    heads, kv, dim = entry["num_attention_heads"], entry["num_key_value_heads"], entry["head_dim"]
    return (
        f"eagle3's head for {target_id} is its published one, not a layer of the target: "
        f"MLP {entry['intermediate_size']:,} wide, {heads} heads ({kv} KV) of {dim} "
        "(simspec/data/eagle3_heads.yaml)"
    )
