"""Model shapes: the packaged presets (``simspec/data/models.yaml``, each with its source) or a
Hugging Face ``config.json`` given by path, read as a Llama-style dense decoder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from simspec.catalog.tables import packaged_table, parse_json, read_input_text, shown
from simspec.errors import InputError, first_error

BYTES_PER_PARAM = 2  # bf16/fp16 weights and KV cache
MAX_HF_CONFIG_BYTES = 4 * 1024 * 1024  # a config.json is a few KB; one with a label map, ~1 MB


class ModelShape(BaseModel):
    """Shapes of a Llama-style decoder (names follow Hugging Face ``config.json``)."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    id: str
    hidden_size: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    num_hidden_layers: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_key_value_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool = False
    max_position_embeddings: int = Field(default=4096, gt=0)
    # multi-token-prediction layers shipped with the weights, as DeepSeek-V3's config.json names
    # them; vLLM reads this key (or Qwen3.5's mtp_num_hidden_layers) to build its mtp drafter
    # (SpeculativeConfig.hf_config_override, vllm/config/speculative.py). No packaged preset
    # has any.
    num_nextn_predict_layers: int = Field(default=0, ge=0)
    hf_ids: tuple[str, ...] = ()
    source: str = ""

    @model_validator(mode="before")
    @classmethod
    def _fill_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            if "num_key_value_heads" not in data or data["num_key_value_heads"] is None:
                data["num_key_value_heads"] = data.get("num_attention_heads")
            hidden, heads = data.get("hidden_size"), data.get("num_attention_heads")
            # only from numbers: anything else is left for validation to name
            if (
                data.get("head_dim") is None
                and type(hidden) is int
                and type(heads) is int
                and heads > 0
            ):
                data["head_dim"] = hidden // heads
        return data

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def layer_params(self) -> int:
        """Weights of one decoder layer: QKV, O, gate+up, down (norm weights are negligible)."""
        h, i = self.hidden_size, self.intermediate_size
        return h * (self.q_dim + 2 * self.kv_dim) + self.q_dim * h + 3 * h * i

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def num_params(self) -> int:
        head = 0 if self.tie_word_embeddings else self.embedding_params
        return self.num_hidden_layers * self.layer_params + self.embedding_params + head

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V for every layer, before tensor-parallel sharding."""
        return 2 * self.num_hidden_layers * self.kv_dim * BYTES_PER_PARAM

    def kv_dim_per_gpu(self, tp: int) -> int:
        """KV width on one GPU: heads split over tp, replicated when there are fewer than tp."""
        return max(self.num_key_value_heads // tp, 1) * self.head_dim

    def kv_bytes_per_token_per_gpu(
        self, tp: int, layers: int | None = None, dtype_bytes: float = 2
    ) -> float:
        """K and V of ``layers`` (default: all) layers for one token on one GPU, at
        ``dtype_bytes`` per element (the KV-cache dtype: 2 for bf16, 1 for fp8)."""
        n = self.num_hidden_layers if layers is None else layers
        return 2 * n * self.kv_dim_per_gpu(tp) * dtype_bytes


def model_ids() -> list[str]:
    return sorted(packaged_table("models.yaml"))


def preset_id(ref: str) -> str:
    """The preset a Hugging Face repo id names (``meta-llama/Llama-3.1-8B-Instruct`` ->
    ``llama-3.1-8b``; case ignored, as the Hub ignores it), else ``ref`` unchanged: the names
    users already type reach the preset and its acceptance presets."""
    wanted = ref.strip().lower()
    for name, entry in packaged_table("models.yaml").items():
        if any(wanted == hf.lower() for hf in entry.get("hf_ids") or ()):
            return ref if _is_file(ref) else name  # a file by that name is what is meant
    return ref


def _is_file(ref: str) -> bool:
    try:
        return Path(ref).exists()
    except (OSError, ValueError):
        return False


def load_model(ref: str, field: str = "model") -> ModelShape:
    """A preset id (e.g. ``llama-3.1-8b``), a Hugging Face repo id of a preset, or a path to a
    Hugging Face ``config.json``."""
    table = packaged_table("models.yaml")
    ref = preset_id(ref)
    if ref in table:
        return ModelShape(id=ref, **table[ref])
    path = Path(ref)
    if path.suffix == ".json" or os.path.exists(ref):  # os.path: a too-long name is no error
        return load_hf_config(path)
    if ref.count("/") == 1 and not ref.startswith(("/", ".")):
        raise InputError(
            field,
            f"{ref!r} is not a packaged preset and simspec does not download models: fetch its "
            f"config.json (huggingface-cli download {ref} config.json --local-dir DIR) and give "
            "its path (--model DIR/config.json); presets: " + ", ".join(sorted(table)),
        )
    raise InputError(
        field,
        f"unknown model {ref!r}; choose a preset ({', '.join(sorted(table))}), a Hugging Face "
        "id of one, or give a path to a Hugging Face config.json",
    )


def load_hf_config(path: Path) -> ModelShape:
    """Read the shapes of a Llama-style model from its Hugging Face ``config.json``."""
    raw = parse_json(read_input_text(path, "model", MAX_HF_CONFIG_BYTES), "model", shown(path))
    if not isinstance(raw, dict):
        raise InputError("model", f"{str(path)!r} must hold a JSON object")
    if "text_config" in raw and isinstance(raw["text_config"], dict):
        raw = {**raw, **raw["text_config"]}
    aliases = {
        "n_layer": "num_hidden_layers",
        "n_head": "num_attention_heads",
        "mtp_num_hidden_layers": "num_nextn_predict_layers",  # Qwen3.5's name (vLLM reads both)
    }
    for old, new in aliases.items():
        if raw.get(new) is None and raw.get(old) is not None:
            raw[new] = raw[old]
    if raw.get("num_nextn_predict_layers") is None:
        raw.pop("num_nextn_predict_layers", None)  # null: no MTP layers
    needed = (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "vocab_size",
    )
    missing = [k for k in needed if raw.get(k) is None]
    if missing:
        raise InputError("model", f"{str(path)!r} lacks {', '.join(missing)}")
    name = raw.get("_name_or_path") or Path(path).parent.name or Path(path).stem
    try:
        return ModelShape(
            id=str(name),
            source=f"Hugging Face config.json at {path}",
            **{
                k: v
                for k, v in raw.items()
                if k in ModelShape.model_fields and k not in ("id", "source", "hf_ids")
            },
        )
    except ValidationError as exc:
        field, message = first_error(exc)
        raise InputError(f"model.{field}", message) from None
