"""DeepSeek-V3 multi-token prediction reused as the draft."""

from __future__ import annotations

from simspec.engine.speculators.eagle import EagleHead


class MTP(EagleHead):
    """DeepSeek-V3 multi-token prediction: one transformer block fed [RMSNorm(h); RMSNorm(emb)]
    through a 2h->h projection, then the shared output head (DeepSeek-V3 report §2.2); engines
    reuse the one module for K > 1 (vLLM, SGLang). Costed as an EAGLE head of the same shape."""

    name = "mtp"
