"""The method catalogue: each method's metadata, default configuration and packaged
acceptance per domain (``simspec/data/method_presets.yaml``), and the one map from a packaged
dataset to its domain."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath
from typing import Any, Literal

from simspec.catalog.draft_heads import eagle3_head_refusal
from simspec.catalog.models import load_model, model_ids, preset_id
from simspec.catalog.tables import packaged_table
from simspec.catalog.traces import load_trace, replay_tau
from simspec.catalog.vllm import lookup_sizes
from simspec.config import AcceptanceConfig, MethodConfig, TreeKind
from simspec.errors import InputError

# Datasets -> the domain whose preset acceptance stands for them (chat, code, math,
# summarisation, overall), the one map of it. The packaged traces (simspec/data/traces) are
# TRACE_DATASETS, one per domain; the rest are the datasets of shared/validation/cases.csv.
DATASET_DOMAIN = {
    "sharegpt": "chat",
    "instructcoder": "code",
    "gsm8k": "math",
    "cnn": "summarisation",
    "mt-bench": "chat",
    "alpaca": "chat",
    "humaneval": "code",
    "xsum": "summarisation",
    "mixed": "overall",
    "spec-bench-overall": "overall",
    # Spec-Bench (Xia et al., "Unlocking Efficiency in LLM Inference: A Comprehensive Survey of
    # Speculative Decoding", ACL Findings 2024): six subtasks (multi-turn chat, translation,
    # summarisation, QA, maths, RAG), one mixed suite
    "spec-bench": "overall",
    # code editing: vLLM's benchmark datasets (vllm/benchmarks/datasets.py) read BlazEdit
    # (vdaita/edit_5k_char, ise-uiuc/blazedit: a file and an edit instruction, the whole edited
    # file out) as InstructCoder (likaixin/InstructCoder: code, an edit instruction, the edited
    # code) is read; SWE-bench (Jimenez et al., ICLR 2024) asks for a patch to a repository
    "blazedit": "code",
    "swe-bench": "code",
}
TRACE_DATASETS = ("sharegpt", "instructcoder", "gsm8k", "cnn")
DEFAULT_K = 3
# where the packaged acceptance traces' provenance is written (each trace preset's source)
TRACES_SOURCE = "simspec/data/traces/SOURCE.md"
DEFAULT_DRAFT_MODEL = "llama-3.2-1b"
# Static trees whose presets do not state a top-k: Medusa's mc_sim_7b_63 (the Spec-Bench default
# for Medusa and Hydra) has at most 10 children at its root (method_presets.yaml, medusa1).
DEFAULT_TREE_TOPK = 10


def tree_capacity(topk: int, depth: int, dynamic: bool) -> int:
    """The most draft tokens a tree of ``depth`` levels and ``topk`` children per node can
    hold. A dynamic tree picks its nodes from the candidates its drafter expands: top-k at
    depth 1, then top-k children of each of the top-k beams at every further depth, ``topk +
    (depth - 1) * topk**2`` (SGLang eagle_utils ``organize_draft_results``:
    ``torch.topk(score_list, num_verify_tokens - 1)`` over that many scores; EAGLE-2's
    ``topK_genrate`` likewise); a static tree is at most the full ``topk``-ary tree."""
    if dynamic:
        return topk + (depth - 1) * topk * topk
    return sum(topk**d for d in range(1, depth + 1))


def at_depth(method: dict[str, Any], k: int) -> dict[str, Any]:
    """``method`` (MethodConfig fields) drafted ``k`` deep. Its packaged tree budget, where it
    has one and that depth cannot draft it, is cut to what the depth drafts (the preset's tree
    to K levels: Hydra's 63 nodes at K = 1 are its 10 top candidates); a budget the caller
    wrote stays, and a tree that cannot hold it is refused by the run, naming the field."""
    out = {**method, "k": k}
    name, nodes = method.get("name"), method.get("tree_nodes")
    tree = method.get("tree")
    if not nodes or tree in (None, "chain") or not isinstance(name, str):
        return out
    if nodes != method_defaults(name).get("tree_nodes"):
        return out
    topk = stated_topk(method.get("tree_topk"), nodes, k)
    out["tree_nodes"] = max(k, min(nodes, tree_capacity(topk, k, tree == "dynamic")))
    return out


def stated_topk(topk: int | None, nodes: int, depth: int) -> int:
    """A tree's top-k where a config leaves it unset: one child per node when the budget is
    the depth (the only tree of ``depth`` nodes that reaches that depth is the chain), the
    presets' :data:`DEFAULT_TREE_TOPK` for a larger budget, which must branch."""
    if topk:
        return topk
    return DEFAULT_TREE_TOPK if nodes > depth else 1


# Draft length for draft_model when the preset gives none: transformers' assisted generation
# starts at num_assistant_tokens = 5 (method_presets.yaml, draft_model config_source).
DEFAULT_DRAFT_MODEL_K = 5
# Lookup drafters whose proposer simspec replays exactly on token streams
# (simspec.engine.lookup; their speculators are LookupSpeculator subclasses, tests/test_lookup.py)
TOKEN_REPLAYED = ("ngram", "pld", "suffix")
# Methods with no published acceptance in shared/validation borrow a relative's, labelled so.
PROXIES = {
    "medusa2": (
        "medusa1",
        "Medusa-1's tau as a lower bound: Medusa-2's joint training raises "
        "acceptance, and no Medusa-2 tau is published in shared/validation",
    ),
}


def method_presets() -> dict[str, Any]:
    """``simspec/data/method_presets.yaml``: per method, its default config and per-domain
    acceptance, each tied to published rows."""
    return packaged_table("method_presets.yaml")


@dataclass(frozen=True)
class MethodInfo:
    """What the catalogue says of a method: its summary, the drafter family whose acceptance
    heterogeneity applies (a learned drafter's or a lookup's, acceptance_spread.yaml), the
    draft shapes it supports and its default configuration."""

    name: str
    summary: str
    drafter: Literal["learned", "lookup"]
    shapes: tuple[TreeKind, ...]
    defaults: dict[str, Any]

    @property
    def default_tree(self) -> TreeKind:
        return self.defaults.get("tree") or self.shapes[0]


AUTOREGRESSIVE = MethodInfo(
    "autoregressive", "plain decoding, one token per step", "learned", ("chain",), {"k": 0}
)


def method_info(name: str) -> MethodInfo:
    """The catalogue entry of ``name`` (KeyError for a name the catalogue does not hold)."""
    if name == "autoregressive":
        return AUTOREGRESSIVE
    entry = method_presets()[name]
    return MethodInfo(
        name,
        entry["summary"],
        entry["drafter"],
        tuple(entry["shapes"]),
        dict(entry.get("defaults") or {}),
    )


# methods that draft with a network of their own weights (not the target's layers, not a lookup)
DRAFT_NETWORKS = (
    "draft_model",
    "pard",
    "medusa1",
    "medusa2",
    "hydra",
    "eagle1",
    "eagle2",
    "eagle3",
    "redrafter",
    "mtp",
    "p_eagle",
)
# MethodConfig fields that one family reads, and the methods of it (the speculator reading each:
# simspec/engine/speculators; draft_vocab_size is EagleHead's, which MTP extends)
OWN_FIELDS: dict[str, tuple[str, ...]] = {
    "draft_model": ("draft_model", "pard"),
    "draft_vocab_size": ("eagle1", "eagle2", "eagle3", "mtp", "p_eagle"),
    "lookahead_window": ("lookahead",),
    "lookahead_ngram": ("lookahead",),
    "lookahead_guesses": ("lookahead",),
    "beam_width": ("redrafter",),
    # PLD matches n = 3 down to 1 whatever they say (speculators/lookup.py, PLD)
    "prompt_lookup_min": ("ngram",),
    "prompt_lookup_max": ("ngram",),
    "suffix_decoding_max_tree_depth": ("suffix",),
    "suffix_decoding_max_cached_requests": ("suffix",),
    "suffix_decoding_max_spec_factor": ("suffix",),
    "suffix_decoding_min_token_prob": ("suffix",),
    "draft_layers": ("self_spec", "p_eagle"),
    # a draft network of its own, which vLLM V0's SmallerTpProposerWorker can run on fewer GPUs
    # than the target (engines.yaml draft_tp_below_target)
    "draft_tp": DRAFT_NETWORKS,
}
# fields of a tree the method shapes itself (a static or dynamic tree in its catalogue shapes,
# drafted as that tree; ReDrafter's tree is its beams, beam_width x k)
TREE_FIELDS = ("tree_nodes", "tree_topk", "tree_schedule")


def unused_field(cfg: MethodConfig) -> tuple[str, str] | None:
    """The first field ``cfg`` sets that its method does not read, and why (None if none): a
    scenario that sets it would silently run without it (``lookahead_window`` on eagle3,
    ``tree_topk`` on a chain)."""
    set_fields = sorted(f for f in cfg.model_fields_set if getattr(cfg, f) is not None)
    if cfg.name == "autoregressive":
        extra = [f for f in set_fields if f not in ("name", "k")]
        return (extra[0], "plain decoding drafts nothing: drop it") if extra else None
    try:
        info = method_info(cfg.name)
    except KeyError:
        return None  # an unknown method is reported by name elsewhere
    for field in set_fields:
        owners = OWN_FIELDS.get(field, (cfg.name,))
        if cfg.name not in owners:
            return field, f"a field of {', '.join(owners)}, which {cfg.name} does not read"
    tree = cfg.tree or info.default_tree
    if "beam_width" in info.defaults and "tree_paths" in set_fields:
        # ReDrafter's tree is its beams: an explicit tree would set only its depth (QA)
        return "tree_paths", (
            f"{cfg.name} drafts its beams (beam_width x k), which tree_paths does not shape: "
            "give k and beam_width"
        )
    if tree == "chain" or "beam_width" in info.defaults:
        for field in set_fields:
            if field in TREE_FIELDS:
                shape = "its beams (beam_width)" if tree != "chain" else "a chain here"
                return field, (
                    f"{cfg.name} drafts {shape}, which {field} does not shape"
                    + (" (give tree: static or dynamic)" if len(info.shapes) > 1 else "")
                )
    return None


def acceptance_spread(kind: str, domain: str) -> tuple[float, str]:
    """Per-request heterogeneity (logit std) measured on the packaged traces."""
    table = packaged_table("acceptance_spread.yaml")
    return float(table[kind].get(domain, table[kind]["chat"])), table["source"]


def tau_spread(name: str, dataset: str) -> float:
    """The per-request spread a mean τ of ``name`` on ``dataset`` runs with: its drafter's,
    measured on the packaged traces of the dataset's domain (chat where it has none). A mean τ
    says nothing of how requests differ; the CLI and the explorer give it this one."""
    return acceptance_spread(method_info(name).drafter, DATASET_DOMAIN.get(dataset, "chat"))[0]


def method_defaults(name: str) -> dict[str, Any]:
    """MethodConfig fields of a method's packaged default configuration."""
    entry = method_presets().get(name, {})
    d = dict(entry.get("defaults") or {})
    info = method_info(name)
    out: dict[str, Any] = {"name": name}
    if name == "lookahead":
        out.update(
            {
                k: d[k]
                for k in ("lookahead_window", "lookahead_ngram", "lookahead_guesses")
                if d.get(k) is not None
            }
        )
        out["k"] = d["lookahead_ngram"] - 1
        return out
    if name == "redrafter":
        # a beam's length counts its first token, the one the target emitted (ReDrafter's
        # modeling_drafter.py): it drafts beam_length - 1
        out["k"] = d["beam_length"] - 1 if d.get("beam_length") else DEFAULT_K
        out["beam_width"] = d.get("beam_width")
        return {k: v for k, v in out.items() if v is not None}
    k = d.get("k")
    if k is None and name in PROXIES:  # e.g. Medusa-2's 64-node tree: depth not stated
        k = method_defaults(PROXIES[name][0])["k"]
    out["k"] = (
        k if k is not None else (DEFAULT_DRAFT_MODEL_K if name == "draft_model" else DEFAULT_K)
    )
    tree = info.default_tree
    if tree != "chain":
        out["tree"] = tree
        out["tree_nodes"] = d.get("tree_nodes")
        out["tree_topk"] = d.get("tree_topk") or DEFAULT_TREE_TOPK
    if d.get("draft_layers"):
        out["draft_layers"] = d["draft_layers"]
    if name == "ngram":  # written out: vLLM's own default where the catalogue sets none
        low, high = lookup_sizes(d.get("prompt_lookup_min"), d.get("prompt_lookup_max"), name)
        out.update(prompt_lookup_min=low, prompt_lookup_max=high)
    return {k: v for k, v in out.items() if v is not None}


def trace_setup(name: str) -> dict[str, Any]:
    """MethodConfig fields the packaged acceptance traces of ``name`` were recorded with, where
    they differ from its defaults (n-gram: prompt_lookup 3/5, method_presets.yaml): what a row
    standing for one of those recordings runs. Empty for a method without one."""
    return dict(method_presets().get(name, {}).get("trace_setup") or {})


def tau_measured_with(method: dict[str, Any], depth: int) -> dict[str, Any]:
    """The fields of an :class:`AcceptanceConfig` that say which draft structure a τ was
    measured with, when it was measured with ``method``'s own (a dict of MethodConfig fields)
    at ``depth``: a chain of that length; a static or dynamic tree of its node budget and top-k;
    ReDrafter's beams (width x length, verified together, as one tree of W·L nodes)."""
    tree = method.get("tree")
    if tree not in (None, "chain") and not method.get("tree_paths"):
        return {
            "tau_k": depth,
            "tau_tree_nodes": max(method.get("tree_nodes") or depth, depth),
            "tau_tree_topk": method.get("tree_topk"),
            "tau_dynamic_tree": tree == "dynamic",
        }
    if method.get("name") == "redrafter":
        beams = method.get("beam_width") or method_info("redrafter").defaults["beam_width"]
        return {"tau_k": depth, "tau_tree_nodes": beams * depth, "tau_tree_topk": beams}
    return {"tau_k": depth}


def measured_acceptance(
    method: dict[str, Any],
    *,
    alpha: float | None = None,
    tau: float | None = None,
    tau_k: int | None = None,
) -> dict[str, Any] | None:
    """The acceptance a user measured, as :class:`AcceptanceConfig` fields for ``method`` (a
    dict of MethodConfig fields): a rate α, or a τ measured with the method's own draft shape
    at chain length (or tree depth) ``tau_k``, by default the method's K. None if neither."""
    if alpha is not None:
        return {"alpha": alpha}
    if tau is None:
        return None
    return {"tau": tau, **tau_measured_with(method, tau_k or method.get("k") or DEFAULT_K)}


def k_not_read(method: dict[str, Any]) -> str | None:
    """Why ``method`` (a dict of MethodConfig fields) takes its draft length from something
    other than ``k`` (None: ``k`` is its draft length or tree depth): Lookahead drafts
    lookahead_ngram - 1 tokens (speculators/lookup.py, Lookahead), and an explicit tree's depth
    is the tree's (speculators/base.py, _explicit_tree)."""
    name = method.get("name")
    if name == "autoregressive":
        return "plain decoding drafts nothing"
    if name == "lookahead":
        return "lookahead drafts lookahead_ngram - 1 tokens: set lookahead_ngram instead"
    if method.get("tree_paths"):
        return f"{name}'s explicit tree (tree_paths) sets its depth"
    return None


def drafted_length(method: dict[str, Any]) -> int | None:
    """The draft length a method whose ``k`` is not its own (:func:`k_not_read`) drafts:
    Lookahead's lookahead_ngram - 1, an explicit tree's depth; None for any other."""
    if method.get("name") == "lookahead":
        ngram = method.get("lookahead_ngram") or method_defaults("lookahead")["lookahead_ngram"]
        return int(ngram) - 1
    if paths := method.get("tree_paths"):
        return max(len(path) for path in paths)
    return None


def preset_acceptance(
    name: str, dataset: str, domain: str | None = None, target: str | None = None
) -> AcceptanceConfig | None:
    """The packaged acceptance of ``name`` for ``dataset``'s domain (or the given ``domain``:
    chat, code, math, summarisation, overall): a published τ for this very ``target`` and
    ``dataset`` where one is listed, else the domain's preset, else the method's ``overall``
    one, else its only one, else a labelled proxy; None if none."""
    domain = domain or DATASET_DOMAIN.get(dataset, "chat")
    entry = method_presets().get(name)
    if entry is None:
        return None
    presets = entry.get("presets") or {}
    if target:
        exact = _exact_preset(name, presets, dataset, target, domain)
        if exact is not None:
            return exact
    note = ""
    preset = presets.get(domain) or presets.get("overall")
    if preset is None and presets:
        only = next(iter(presets))
        preset, note = presets[only], f" (only preset: {only}; none for {domain})"
    elif domain not in presets and preset is not None:
        note = f" (overall: no {domain} row)"
    if preset is None:
        if name not in PROXIES:
            return None
        relative, why = PROXIES[name]
        acc = preset_acceptance(relative, dataset, domain)
        return (
            None
            if acc is None
            else acc.model_copy(update={"source": f"proxy, {why}: {acc.source}"})
        )
    kind = method_info(name).drafter
    if "tokens" in preset:
        own = dataset in TRACE_DATASETS and DATASET_DOMAIN[dataset] == domain
        tokens = dataset if own else preset["tokens"]
        return AcceptanceConfig(
            tokens=tokens,
            source=f"{name} replayed on the {tokens} token streams, {TRACES_SOURCE}",
        )
    if "acc_len" in preset:
        own = dataset in TRACE_DATASETS and DATASET_DOMAIN[dataset] == domain
        trace = dataset if own else preset["acc_len"]
        return AcceptanceConfig(
            acc_len=trace,
            acc_len_method=preset["acc_len_method"],
            source=f"{preset['acc_len_method']} trace {trace}, {TRACES_SOURCE}",
        )
    spread, _ = acceptance_spread(kind, domain)
    source = f"{preset['source']}{note}; cases {', '.join(preset.get('case_ids') or [])}; " + (
        f"spread {spread} ({kind} drafters, simspec/data/acceptance_spread.yaml)"
    )
    cfg = method_defaults(name)
    if "alpha" in preset and cfg["k"] == 1:
        # with one draft token the acceptance rate is exactly tau - 1 (pooled over steps);
        # deeper positions, where a K > 1 run drafts them, decay as the preset says
        deeper = {k: preset[k] for k in ("depth_decay", "sourced_k") if preset.get(k)}
        if deeper:
            source += (
                f"; deeper positions: {preset['decay_source']}, extrapolated beyond "
                f"k={deeper['sourced_k']}"
            )
        return AcceptanceConfig(
            tau=1.0 + float(preset["alpha"]),
            tau_k=1,
            spread=spread,
            source=f"tau = 1 + acceptance rate; {source}",
            **deeper,
        )
    if "alpha" in preset:
        alpha = preset["alpha"]  # a rate, or one per draft position (p_eagle)
        sourced = {"sourced_k": preset["sourced_k"]} if preset.get("sourced_k") else {}
        return AcceptanceConfig(
            alpha=[float(a) for a in alpha] if isinstance(alpha, list) else float(alpha),
            spread=spread,
            source=source,
            **sourced,
        )
    # a tau measured with another draft shape than the method's defaults says which
    # (ReDrafter's: the beam grid's largest cell, method_presets.yaml measured_with)
    shape = {**cfg, **(preset.get("measured_with") or {})}
    return AcceptanceConfig(
        tau=float(preset["tau"]),
        spread=spread,
        source=source,
        **tau_measured_with(shape, shape["k"]),
    )


def engine_chains(name: str, engine: str | None) -> bool:
    """Whether ``engine`` drafts ``name`` as a chain unless given a tree: it ships the method
    (``simspec/data/method_engines.yaml``) and drafts chains unless a config gives a tree
    (engines.yaml ``chain_unless_tree_given``: vLLM). A method it does not ship runs as
    published when asked for by name (a research method: EAGLE-2's dynamic tree)."""
    from simspec.catalog.hardware import engine_ids, load_engine  # hardware is below methods

    if engine is None or engine not in engine_ids():
        return False  # an unknown engine is the scenario's to refuse
    profile = load_engine(engine)
    shipped = packaged_table("method_engines.yaml")["methods"].get(name) or []
    return profile.flag("chain_unless_tree_given") and profile.family in shipped


def as_engine_drafts(
    fields: dict[str, Any], chain_unless_tree_given: bool
) -> tuple[dict[str, Any], str]:
    """``fields`` (MethodConfig fields, a preset's or a method's defaults) as an engine that
    drafts a chain unless given a tree (``EngineProfile.flag("chain_unless_tree_given")``:
    vLLM) runs them, and a note saying so ("" where nothing changed): a static or dynamic tree
    that no config gave (no ``tree_paths``) becomes a chain of its depth. The acceptance stays:
    a τ measured on the tree says so (``tau_tree_nodes``), and the chain's α is read from it."""
    tree = fields.get("tree")
    if not chain_unless_tree_given or tree in (None, "chain") or fields.get("tree_paths"):
        return fields, ""
    out = {key: v for key, v in fields.items() if key not in ("tree_nodes", "tree_topk")}
    out["tree"] = "chain"
    note = (
        f"the engine drafts a chain unless its config gives a tree (vLLM's "
        f"speculative_token_tree): {fields.get('name', 'the method')}'s default {tree} tree "
        f"runs as a chain of {fields.get('k')}"
    )
    return out, note


def engine_picked_shape(
    name: str,
    engine: str | None,
    architecture: str,
    release: tuple[int, int, int] | None = None,
) -> tuple[dict[str, Any] | None, str] | None:
    """The shape (MethodConfig fields) ``engine`` drafts ``name`` with on a model of
    ``architecture`` when its server is given none (SGLang's auto_choose_speculative_params,
    by release: ``EngineProfile.auto_spec_shape``; ``release`` None: the profile's own), and a
    sentence saying so; None where the engine keeps no such default. The fields are None where
    the engine picks a tree and simspec drafts ``name`` as chains only.

    SGLang's top-1 shape is a chain of ``steps`` (it sets num_draft_tokens to steps + 1,
    server_args.py); a wider one is EAGLE-2's dynamic tree: ``steps`` expansions of ``topk``
    beams, then the ``num_draft_tokens - 1`` best candidates verified with the root
    (speculative/eagle_utils.py ``organize_draft_results``), at most what that tree holds
    (:func:`tree_capacity`); a method simspec drafts only as static trees keeps that budget in
    its static tree."""
    from simspec.catalog.hardware import engine_ids, load_engine  # hardware is below methods

    if engine is None or engine not in engine_ids():
        return None
    profile = load_engine(engine)
    picked = profile.auto_spec_shape(name, architecture, release)
    if picked is None:
        return None
    (steps, width, tokens), rule = picked
    fields: dict[str, Any] | None
    shapes = method_info(name).shapes
    # SGLang builds EAGLE-2's dynamic tree for every EAGLE head; a method simspec drafts only
    # as static trees (EAGLE-1) keeps the budget and top-k in its static tree, said so below
    kind = "dynamic" if "dynamic" in shapes else "static"
    if width == 1:
        fields = {"k": steps, "tree": "chain"}
    elif shapes == ("chain",):
        fields = None
    else:
        drafted = min(tokens - 1, tree_capacity(width, steps, dynamic=kind == "dynamic"))
        fields = {"k": steps, "tree": kind, "tree_topk": width,
                  "tree_nodes": max(drafted, steps)}  # fmt: skip
    version = ".".join(str(p) for p in release) if release else profile.release
    said = (
        f"SGLang {version} picks steps {steps}, topk {width}, {tokens} draft tokens for "
        f"{architecture or 'this model'} itself when given none (auto_choose_speculative_params, "
        f"its rule since {rule.since}: engines.yaml)"
    )
    if name == "ngram":
        said = (
            f"SGLang {version} verifies {tokens} n-gram draft tokens (the root included) when "
            f"given none (speculative_num_draft_tokens' default, its rule since {rule.since}: "
            "engines.yaml)"
        )
        return {"k": steps}, said
    if fields is not None:
        said += (
            f": a chain of {steps}"
            if width == 1
            else f": a {kind} tree of {fields['tree_nodes']} drafted tokens and the root"
            + ("" if kind == "dynamic" else f" (simspec drafts {name} trees static)")
        )
    return fields, said


def picks_shape(name: str, engine: str | None) -> bool:
    """Whether ``engine`` keeps a shape of its own for ``name`` at some architecture (cheap:
    reads no model)."""
    from simspec.catalog.hardware import AUTO_SHAPE_METHODS, engine_ids, load_engine

    if engine is None or engine not in engine_ids() or name not in AUTO_SHAPE_METHODS:
        return False
    return bool(load_engine(engine).auto_spec_shapes)


def with_engine_shape(fields: dict[str, Any], shape: dict[str, Any]) -> dict[str, Any]:
    """``fields`` (a method's) drafted in ``shape`` (:func:`engine_picked_shape`'s fields): a
    chain drops the tree's budget and top-k."""
    out = {key: v for key, v in fields.items() if key not in ("tree_nodes", "tree_topk")}
    return {**out, **shape}


def has_domain_preset(name: str, domain: str) -> bool:
    """Whether ``name`` has a packaged acceptance of ``domain`` itself (token streams of that
    domain to replay, or a published τ on it), not a fallback to another domain's. A lookup
    drafter (TOKEN_REPLAYED) proposes from the text itself, so for it another domain's is no
    stand-in: chat outputs repeat their prompt far less than edited code does."""
    return domain in ((method_presets().get(name) or {}).get("presets") or {})


def _exact_preset(
    name: str, presets: dict[str, Any], dataset: str, target: str, domain: str
) -> AcceptanceConfig | None:
    """A listed τ measured on ``target`` and ``dataset`` with its stated chain length."""
    for preset in presets.values():
        for cand in preset.get("alternatives") or []:
            if cand.get("target_model") != target or cand.get("dataset") != dataset:
                continue
            if "tau" not in cand or cand.get("tree") != "chain" or not cand.get("k"):
                continue
            spread, _ = acceptance_spread(method_info(name).drafter, domain)
            return AcceptanceConfig(
                tau=float(cand["tau"]),
                tau_k=int(cand["k"]),
                spread=spread,
                source=f"{cand['source']}; case {cand['case_id']}; spread {spread}",
            )
    return None


def named_alone(method: Any) -> bool:
    """A speculative method written as a mapping of its name alone (an acceptance aside), which
    runs as the name does: in its preset's shape (a script's or a scenario file's)."""
    return (
        isinstance(method, dict)
        and isinstance(method.get("name"), str)
        and method["name"] != "autoregressive"
        and not set(method) - {"name", "acceptance"}
    )


def preset_method(
    name: str,
    dataset: str = "sharegpt",
    draft_model: str | None = None,
    target: str | None = None,
    engine: str | None = None,
    engine_shape: bool = True,
) -> MethodConfig:
    """A method in its packaged default configuration, with its packaged acceptance for
    ``dataset``'s domain where one exists (``simspec methods`` lists them), drafted as
    ``engine`` runs it (:func:`engine_chains`; None: as published) and, with ``engine_shape``
    and a ``target``, in the shape the engine picks for the target when given none
    (:func:`engine_picked_shape`: SGLang). A caller that sets the draft length itself passes
    ``engine_shape=False``: the engine's pick is for a server given no shape at all.

    draft_model: the given draft, else the packaged draft that shares ``target``'s vocabulary
    (:func:`family_draft`; the acceptance then stays the preset pair's, as its source says), else
    :data:`DEFAULT_DRAFT_MODEL` without a target. Raises InputError for a target no packaged draft
    serves.
    """
    if name == "autoregressive":
        return MethodConfig(name=name, k=0)
    if name not in method_presets():
        known = ", ".join(["autoregressive", *method_presets()])
        raise InputError("methods.name", f"unknown method {name!r}; choose one of {known}")
    if dataset not in DATASET_DOMAIN and not PurePath(dataset).suffix:
        # QA: "GSM8K" or a typo took ShareGPT's (chat) acceptance without a word
        raise InputError(
            "dataset",
            f"unknown dataset {dataset!r}; choose one of {', '.join(DATASET_DOMAIN)}, or a "
            "trace file's path",
        )
    fields = method_defaults(name)
    acc = preset_acceptance(name, dataset)
    if name == "pard":
        fields["draft_model"] = draft_model or (
            draft_for(target, name) if target else family_drafts(name)[0]
        )
    if name == "draft_model":
        preset_draft = method_presets()[name]["defaults"].get("draft_model")
        fields["draft_model"] = draft_model or (
            draft_for(target) if target else DEFAULT_DRAFT_MODEL
        )
        if acc is not None and fields["draft_model"] != preset_draft:
            acc = acc.model_copy(
                update={"source": f"measured with a different draft pair: {acc.source}"}
            )
    fields, _ = as_engine_drafts(fields, engine_chains(name, engine))
    if engine_shape and target is not None and picks_shape(name, engine):
        if why := missing_draft_layers(name, target):  # the first reason, not a shape's (QA)
            raise InputError(f"methods.{name}", why)
        picked = engine_picked_shape(name, engine, load_model(target).architecture)
        if picked is not None and picked[0] is None:  # as validate refuses such a row
            raise InputError(
                f"methods.{name}",
                f"{picked[1]}: a tree, and simspec drafts {name} as chains only; give --k",
            )
        if picked is not None and picked[0] is not None:
            fields = with_engine_shape(fields, picked[0])
            if acc is not None and acc.acc_len is not None and fields["tree"] != "chain":
                acc = trace_as_tree(acc, int(fields["k"]), method_info(name).drafter)
    return MethodConfig(**fields, acceptance=acc)


def family_drafts(method: str = "draft_model") -> list[str]:
    """The packaged drafts of ``method`` (draft_model, pard), one per tokenizer."""
    return [d["draft"] for d in method_presets()[method]["family_drafts"]]


def family_draft(target: str, method: str = "draft_model") -> tuple[str | None, str]:
    """The packaged draft of ``method`` (draft_model's small LMs, pard's PARD checkpoints) that
    shares ``target``'s tokenizer (the first of the catalogue's ``family_drafts`` with its
    vocabulary, unless the target's architecture ships a tokenizer of its own), and why none
    does: (None, a sentence naming the vocabulary). Raises InputError for a target that cannot
    be loaded."""
    entry = method_presets()["draft_model"]
    model = load_model(target)
    own = (entry.get("own_tokenizer") or {}).get(model.model_type)
    drafts = family_drafts(method)
    if own is None:
        for draft in drafts:
            if load_model(draft).vocab_size == model.vocab_size:
                return draft, ""
    sizes = ", ".join(f"{d} {load_model(d).vocab_size}" for d in drafts)
    vocabulary = f"tokenizer ({own})" if own else f"{model.vocab_size}-token vocabulary"
    kind = "PARD draft" if method == "pard" else "draft"
    return None, (
        f"no packaged {kind} shares {target}'s {vocabulary}; packaged {kind}s (vocabulary): "
        f"{sizes}; name one with --draft-model"
    )


def own_tokenizer(model_type: str) -> str | None:
    """The tokenizer of models of ``model_type`` where the catalogue knows it is their own
    (``draft_model`` ``own_tokenizer`` in method_presets.yaml: Mistral's 32,000 tokens are not
    LLaMA's, for one); None: the vocabulary size tells."""
    own = method_presets()["draft_model"].get("own_tokenizer") or {}
    return own.get(model_type)


def draft_for(target: str, method: str = "draft_model") -> str:
    """The packaged draft of ``method`` for ``target`` (:func:`family_draft`); InputError
    naming ``methods.draft_model`` when none shares its tokenizer."""
    try:
        draft, why = family_draft(target, method)
    except InputError:
        return DEFAULT_DRAFT_MODEL  # the bad target is reported by name where it is loaded
    if draft is None:
        raise InputError("methods.draft_model", why)
    return draft


def sampled_from_trace(acc: AcceptanceConfig, k: int, kind: str) -> AcceptanceConfig:
    """A trace replays acceptance measured at its own temperature (greedy, assumed: the trace
    source does not state it); to sample at another temperature it becomes the parametric
    model with the trace's own τ at chain k and the trace domain's measured spread. Its
    steps start at output position 1, as a run's do (the first token comes from prefill)."""
    tau = replay_tau(load_trace(acc.acc_len, acc.acc_len_method), k, start=1)
    return sampled_from_tau(acc, tau, k, kind, str(acc.acc_len))


def trace_as_tree(acc: AcceptanceConfig, k: int, kind: str) -> AcceptanceConfig:
    """A trace records chain acceptance; a tree takes the trace's τ at the tree's depth as the
    parametric model's chain α, which the tree's rank model walks (as validate does)."""
    tree = sampled_from_trace(acc, k, kind)
    source = f"{acc.source}; its tau {tree.tau:.3f} at depth {k} as chain alpha for a tree"
    return tree.model_copy(update={"source": source})


def sampled_from_tau(
    acc: AcceptanceConfig, tau: float, k: int, kind: str, dataset: str
) -> AcceptanceConfig:
    """Greedy acceptance measured as ``tau`` at chain ``k`` on ``dataset``, as the parametric
    model (with the domain's measured spread) that the temperature model can move."""
    spread, _ = acceptance_spread(kind, DATASET_DOMAIN.get(dataset, "chat"))
    return AcceptanceConfig(
        tau=min(tau, k + 1.0),
        tau_k=k,
        spread=spread,
        temperature=acc.temperature,
        top_p=acc.top_p,
        source=f"{acc.source}; as tau {tau:.3f} at k={k} to sample at another temperature",
    )


def default_methods(dataset: str = "sharegpt") -> list[MethodConfig]:
    """The embedded default sweep: plain decoding, EAGLE-3 and n-gram lookup at K=3."""
    return [preset_method(n, dataset) for n in ("autoregressive", "eagle3", "ngram")]


def engine_refuses(name: str, engine: str) -> str | None:
    """Why ``engine`` cannot run the speculative method ``name`` (None: it can, or the engine
    simulates any method asked for): a method under the engine's ``refuses`` in
    ``simspec/data/method_engines.yaml``, and any but those listed for an engine under
    ``only_listed``."""
    table = packaged_table("method_engines.yaml")
    if why := (table.get("refuses", {}).get(engine) or {}).get(name):
        return f"does not run on engine {engine}: {' '.join(why.split())}"
    only = table.get("only_listed", {})
    if name == "autoregressive" or engine not in only:
        return None
    if engine in table["methods"].get(name, []):
        return None
    runs = [m for m, engines in table["methods"].items() if engine in engines]
    why = only[engine].get(name) or f"not one of the speculative modes engine {engine} ships"
    return f"does not run on engine {engine}: {why} (it runs {', '.join(runs)})"


# the EAGLE-style methods whose target classes simspec/data/draft_targets.yaml lists
DRAFT_TARGET_METHODS = ("eagle1", "eagle2", "eagle3")


def _target_entry(name: str, engine: str) -> dict | None:
    """``engine``'s entry for method ``name`` in draft_targets.yaml: the engine profile's own
    (vllm-v0), else its family's (None: unchecked)."""
    from simspec.catalog.hardware import engine_ids, load_engine

    table = packaged_table("draft_targets.yaml").get(name) or {}
    if engine in table:
        return table[engine]
    family = load_engine(engine).family if engine in engine_ids() else engine
    return table.get(family)


def draft_target_refusal(name: str, engine: str, architecture: str) -> str | None:
    """Why ``engine`` (a profile id, or a family) cannot run the EAGLE-style method ``name``
    on a target of ``architecture`` in any release simspec read (None: it can, or the method or
    engine is not checked, or the architecture is not one checked):
    simspec/data/draft_targets.yaml (QA: EAGLE-3 on Qwen3-Next was predicted for vLLM 0.11.0,
    which fails to load it; EAGLE-1 on Mixtral for SGLang, whose Mixtral has no
    get_embed_and_head)."""
    entry = _target_entry(name, engine)
    if entry is None or architecture in entry["since"]:
        return None
    if architecture not in entry["checked"]:  # a class simspec did not look for
        return None
    first, last = entry["oldest_read"], entry["read_through"]
    read = f"release {first}" if first == last else f"any release read ({first} to {last})"
    return (
        f"{engine} runs {name} only on targets whose model class gives the head what it reads "
        f"(hidden states, embeddings, LM head), and {architecture} is not one in {read}: "
        "simspec/data/draft_targets.yaml"
    )


def draft_target_since(name: str, engine: str, architecture: str) -> str | None:
    """The first release of ``engine`` (a profile id, or a family) that runs ``name`` on
    ``architecture``, where it is later than the oldest release read (None elsewhere): its
    earlier releases refuse it."""
    entry = _target_entry(name, engine)
    if entry is None:
        return None
    since = entry["since"].get(architecture)
    if since is None or since == entry["oldest_read"]:
        return None
    return str(since)


def left_out_of_all(
    name: str,
    model: str,
    draft: str | None = None,
    engine: str | None = None,
    dp: int = 1,
    tp: int = 1,
    context: int | None = None,
) -> str | None:
    """Why ``--methods all`` leaves ``name`` out for ``model`` (None: it is offered): a drafter
    made of the model's own MTP layers needs a model that declares them, a draft model needs
    one that shares the model's tokenizer (``draft``, else a packaged one), a method no engine
    profile ships (or ``engine``, where it runs only its own) is not something a user could
    deploy (``simspec/data/method_engines.yaml``), one the engine refuses beside data-parallel
    attention (``dp`` > 1) is not either, nor EAGLE-3 where its published head's attention
    cannot split over ``tp`` / ``dp`` GPUs, and one without packaged acceptance (pard) runs
    only with the user's own."""
    table = packaged_table("method_engines.yaml")
    why = cannot_draft_for(name, model, draft, context)
    if why:
        return why
    if name == "eagle3" and preset_id(model) in packaged_table("eagle3_heads.yaml"):
        if head := eagle3_head_refusal(load_model(model), tp // max(dp, 1)):
            return head
    if name != "autoregressive" and not table["methods"].get(name):
        from simspec.catalog.hardware import engine_ids

        return f"no engine simspec models ({', '.join(engine_ids())}) ships it"
    # no engine named: the default's target classes alone, as before a layout is known
    refused = refused_on(name, model, engine, dp if engine else 1)
    return refused or not_shipped(name, engine) or no_acceptance(name)


def refused_on(name: str, model: str, engine: str | None, dp: int = 1) -> str | None:
    """Why ``engine`` (None: the default) refuses to run ``name`` on ``model`` at all, as its
    run would (None: it runs, shipped or as published): the engine's own refusals
    (``method_engines.yaml`` refuses), one beside data-parallel attention (``dp`` > 1), and a
    drafter that needs an interface the target's class lacks (``draft_targets.yaml``). What
    the explorer leaves off its Methods list (QA: it offered EAGLE-1 on trtllm, whose run then
    refused the whole page)."""
    from simspec.catalog.hardware import load_engine
    from simspec.config import Deployment

    if engine and (refused := engine_refuses(name, engine)):
        return refused
    # None: the deployment's default engine
    profile = load_engine(engine or Deployment.model_fields["engine"].default)
    if dp > 1 and (refused := profile.dp_attention_refused.get(name)):
        return refused
    if name in DRAFT_TARGET_METHODS:
        try:
            architecture = load_model(model).architecture
        except InputError:  # a model file that does not load is refused where it runs
            return None
        return draft_target_refusal(name, profile.id, architecture)
    return None


def approximated(name: str, engine: str | None) -> str | None:
    """Why ``engine``'s own drafter for ``name`` is run as another engine's, or as some of its
    releases run it (None: neither; ``simspec/data/method_engines.yaml`` approximated)."""
    table = packaged_table("method_engines.yaml").get("approximated") or {}
    why = (table.get(engine or "") or {}).get(name)
    return None if why is None else " ".join(str(why).split())


def not_shipped(name: str, engine: str | None) -> str | None:
    """Why ``engine`` (None: the default, vLLM) offers no ``name`` (None: it ships it, or the
    engine is unknown, which is the scenario's to refuse): the engines that do ship it
    (``simspec/data/method_engines.yaml``). Asked for by name, such a method still runs, as
    its paper drafts it; ``--methods all`` leaves it out, as its help says."""
    from simspec.catalog.hardware import engine_ids, load_engine
    from simspec.config import Deployment

    engine = engine or Deployment.model_fields["engine"].default
    if name == "autoregressive" or engine not in engine_ids():
        return None
    shipped = packaged_table("method_engines.yaml")["methods"].get(name) or []
    family = load_engine(engine).family
    if family in shipped:
        return None
    return f"engine {engine} does not ship it ({', '.join(shipped) or 'no engine'} does)"


def no_acceptance(name: str) -> str | None:
    """Why ``name`` has no packaged acceptance (None: it has, or drafts nothing), as the
    catalogue says (``no_acceptance``): a run of it needs the user's own."""
    return (method_presets().get(name) or {}).get("no_acceptance")


def cannot_draft_for(
    name: str, model: str, draft: str | None = None, context: int | None = None
) -> str | None:
    """Why ``name`` has no drafter for ``model`` (None: it has, or ``model`` cannot be loaded,
    which is reported by name where it is): MTP needs the model's own multi-token-prediction
    layers, and draft_model a draft sharing its tokenizer (``draft``, else a packaged one)."""
    try:
        why = missing_draft_layers(name, model) or missing_head(name, model)
        if name in ("draft_model", "pard"):
            chosen, reason = (
                (draft, foreign_draft(draft, model)) if draft else family_draft(model, name)
            )
            why = why or reason or (short_draft(chosen, model, context) if chosen else None)
    except InputError:
        return None
    return why


def foreign_draft(draft: str, model: str) -> str:
    """Why a named ``draft`` cannot draft for ``model`` ("" where it can): it must share the
    model's tokenizer (own_tokenizer) and its vocabulary, as DraftModel refuses otherwise."""
    theirs, ours = load_model(draft, "draft_model"), load_model(model)
    if own_tokenizer(theirs.model_type) != own_tokenizer(ours.model_type):
        return f"draft {draft} does not share {model}'s tokenizer"
    if theirs.vocab_size != ours.vocab_size:
        return f"draft {draft} has {theirs.vocab_size} tokens, {model} {ours.vocab_size}"
    return ""


def short_draft(draft: str, model: str, context: int | None = None) -> str | None:
    """Why ``draft`` cannot draft for ``model`` at ``context`` (None: the model's own; None
    returned: it can): a draft serving fewer positions is refused where a run serves more
    (build.check_draft_model: vLLM drafts nothing for a batch past the draft's context)."""
    have = load_model(draft).max_position_embeddings
    need = context or load_model(model).max_position_embeddings
    if have >= need:
        return None
    return (
        f"draft {draft} serves {have:,} positions, fewer than the {need:,} {model} is served "
        f"at: a run at --max-model-len {have} or less drafts with it"
    )


def missing_head(name: str, model: str) -> str | None:
    """Why ``model`` has no published head for ``name`` (None: it has, or ``name`` needs none):
    a P-EAGLE head is trained on its own target's hidden states, and only the catalogue's
    ``heads`` are published."""
    heads = method_presets().get(name, {}).get("heads")
    if not heads or model in [h["target"] for h in heads]:
        return None
    named = ", ".join(f"{h['target']} ({h['checkpoint']})" for h in heads)
    return f"no published {name} head for {model}: a head is trained per target; heads: {named}"


def missing_draft_layers(name: str, model: str) -> str | None:
    """Why ``model`` cannot run ``name``, whose drafter is the model's own multi-token-
    prediction layers (None: it can, or the method needs none). Raises InputError for a model
    that cannot be loaded."""
    if name not in packaged_table("method_engines.yaml")["needs_mtp_layers"]:
        return None
    shape = load_model(model)
    if shape.num_nextn_predict_layers > 0:
        return None
    if shape.mtp_unserved:
        return f"{model}: {shape.mtp_unserved}"
    with_mtp = [m for m in model_ids() if load_model(m).num_nextn_predict_layers > 0]
    return (
        f"{model} declares no multi-token-prediction layers (num_nextn_predict_layers in its "
        f"config.json is 0 or absent); presets with them: {', '.join(with_mtp)}"
    )
