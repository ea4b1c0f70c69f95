"""Speculative-decoding methods: one interface (:mod:`.base`), one module per family, and the
registry, a plain dict of name -> class."""

from __future__ import annotations

from simspec.catalog.hardware import EngineProfile
from simspec.catalog.methods import no_acceptance, unused_field
from simspec.catalog.models import ModelShape
from simspec.config import MethodConfig
from simspec.engine.costmodel import RooflineCostModel
from simspec.engine.speculators.base import Autoregressive, DraftStep, Speculator
from simspec.engine.speculators.draft_model import DraftModel
from simspec.engine.speculators.eagle import Eagle1, Eagle2, Eagle3
from simspec.engine.speculators.heads import Hydra, Medusa, Medusa2, ReDrafter
from simspec.engine.speculators.lookup import PLD, Lookahead, LookupSpeculator, NGram, Suffix
from simspec.engine.speculators.mtp import MTP
from simspec.engine.speculators.parallel import PEagle
from simspec.engine.speculators.self_spec import SelfSpec
from simspec.errors import InputError

__all__ = ["SPECULATORS", "DraftStep", "Speculator", "build_speculator", "known_method"]

SPECULATORS: dict[str, type[Speculator]] = {
    cls.name: cls
    for cls in (
        Autoregressive,
        DraftModel,
        Medusa,
        Medusa2,
        Hydra,
        Eagle1,
        Eagle2,
        Eagle3,
        ReDrafter,
        Lookahead,
        NGram,
        PLD,
        Suffix,
        SelfSpec,
        MTP,
        PEagle,
    )
}


def known_method(name: str, flag: str = "--methods") -> str:
    """The simspec method ``name`` means (``simspec methods`` lists them): case ignored, and
    vLLM's own method names (``eagle``, ``medusa``, the MTP aliases) read as the method vLLM
    runs for them (:data:`simspec.catalog.vllm.METHODS`); an unknown one is an error naming
    ``flag`` (the flag, or the field, that named it)."""
    from simspec.catalog.vllm import METHODS

    key = name.strip().lower()
    method = key if key in SPECULATORS else METHODS.get(key)
    if method is None:
        raise InputError(
            flag,
            f"unknown method {name!r}; choose from {', '.join(SPECULATORS)} "
            f"(or vLLM's names: {', '.join(sorted(set(METHODS) - set(SPECULATORS)))})",
        )
    return method


def build_speculator(
    cfg: MethodConfig,
    target: ModelShape,
    cost: RooflineCostModel,
    engine: EngineProfile,
    draft_cost: RooflineCostModel | None = None,
) -> Speculator:
    """The method's speculator, its drafting priced under ``cost`` (the target's) or, for a
    draft on GPUs of its own (``draft_tp``), under ``draft_cost``."""
    if cfg.name not in SPECULATORS:
        raise InputError(
            "methods.name", f"unknown method {cfg.name!r}; choose one of {', '.join(SPECULATORS)}"
        )
    unused = unused_field(cfg)
    if unused is not None:
        raise InputError(f"methods.{cfg.name}.{unused[0]}", unused[1])
    spec = SPECULATORS[cfg.name](cfg, target, draft_cost or cost, engine)
    spec.apart = draft_cost is not None
    acc = cfg.acceptance
    if spec.needs_acceptance and acc is None:
        raise InputError(
            f"methods.{cfg.name}.acceptance",
            no_acceptance(cfg.name) or "needs an acceptance model (alpha, tau, acc_len or tokens)",
        )
    if spec.tree is not None and acc is not None and acc.acc_len is not None:
        raise InputError(
            f"methods.{cfg.name}.acceptance",
            "a tree needs alpha or tau acceptance (--alpha, --tau): traces record chains; "
            "or draft a chain (tree: chain, no speculative_token_tree)",
        )
    if acc is not None and acc.tokens is not None:
        if not isinstance(spec, LookupSpeculator):
            lookups = ", ".join(
                n for n, c in SPECULATORS.items() if issubclass(c, LookupSpeculator)
            )
            raise InputError(
                f"methods.{cfg.name}.acceptance.tokens",
                f"a token trace replays lookup drafters ({lookups}); {cfg.name} drafts with a "
                "model, so give alpha, tau or an acc_len trace",
            )
    return spec
