"""``simspec methods``: every method simspec models, its defaults and acceptance presets."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from simspec.catalog.methods import (
    DATASET_DOMAIN,
    TRACE_DATASETS,
    method_defaults,
    method_info,
    method_presets,
    preset_acceptance,
)
from simspec.cli.common import err, known_method, one_line_errors
from simspec.config import AcceptanceConfig
from simspec.engine.speculators import SPECULATORS


@one_line_errors
def methods(
    name: Annotated[
        str | None, typer.Argument(help="one method: its defaults and every preset's source")
    ] = None,
) -> None:
    """Every method, its defaults and acceptance presets.

    Every method simspec models, its default configuration and its acceptance presets per
    domain (chat, code, math, summarisation), each with its source rows.

    Example: simspec methods eagle3
    """
    datasets = {DATASET_DOMAIN[ds]: ds for ds in TRACE_DATASETS}
    if name is None:
        _print_all(datasets)
    else:
        _print_one(known_method(name, "method"), datasets)


def _print_all(datasets: dict[str, str]) -> None:
    """One row per method: its draft shape and its acceptance preset per domain."""
    table = Table(title="Methods (simspec methods NAME: what each is, and every source)")
    table.add_column("method", no_wrap=True, min_width=max(map(len, SPECULATORS)))
    for col in ("default config", *datasets):
        table.add_column(col)
    for n in SPECULATORS:
        if n == "autoregressive":
            continue
        cells = [_acceptance_cell(preset_acceptance(n, ds)) for ds in datasets.values()]
        table.add_row(n, _shape_cell(method_defaults(n)), *cells)
    Console().print(table)
    err.print(
        "acceptance: τ = published tokens per step (bonus included), α = rate, "
        "trace = replay of measured acceptance; '*' = fallback or proxy"
    )


def _print_one(name: str, datasets: dict[str, str]) -> None:
    """One method: what it is, its defaults, and every preset with its source."""
    entry = method_presets().get(name, {})
    console = Console()
    # the catalogue's text is printed as written: brackets in a source are not rich markup
    console.print(f"[bold]{name}[/]: {escape(method_info(name).summary)}")
    if name == "autoregressive":  # QA: printed "k=3" and asked for an acceptance to draft
        console.print("the baseline every speedup divides by: it drafts nothing (K = 0), and "
                      "no acceptance applies")  # fmt: skip
        return
    console.print(f"default config: {escape(_config_cell(method_defaults(name)))}")
    if entry.get("config_source"):
        console.print(f"config source: {escape(entry['config_source'])}")
    for domain, ds in datasets.items():
        acc = preset_acceptance(name, ds)
        text = "none (give --alpha or --tau)" if acc is None else acc.source
        console.print(f"- {domain} ({ds}): {escape(_acceptance_cell(acc))} — {escape(text)}")
    if entry.get("note"):
        console.print(f"note: {escape(entry['note'])}")


def _shape_cell(cfg: dict[str, Any]) -> str:
    """A short description of a method's draft shape."""
    if cfg["name"] == "lookahead":
        return "W={lookahead_window} N={lookahead_ngram} G={lookahead_guesses}".format(**cfg)
    if cfg["name"] == "redrafter":
        return f"{cfg['beam_width']} beams x {cfg['k']}"
    if cfg.get("tree"):
        return f"{cfg['tree']} tree {cfg['tree_nodes']}, depth {cfg['k']}, top-{cfg['tree_topk']}"
    extra = f", {cfg['draft_layers']} layers" if cfg.get("draft_layers") else ""
    if cfg.get("prompt_lookup_max"):
        extra = f", n-gram {cfg['prompt_lookup_min']}-{cfg['prompt_lookup_max']}"
    return f"chain K={cfg['k']}{extra}"


def _config_cell(cfg: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in cfg.items() if k != "name")


def _acceptance_cell(acc: AcceptanceConfig | None) -> str:
    """A preset in a few characters; '*' marks a fallback or a proxy."""
    if acc is None:
        return "—"
    mark = "*" if ("proxy" in acc.source or "overall" in acc.source or "only" in acc.source) else ""
    if acc.acc_len:
        return f"trace {acc.acc_len}{mark}"
    if acc.tokens:
        return f"tokens {acc.tokens}{mark}"
    if acc.tau is not None:
        return f"τ {acc.tau:g}{mark}"
    if isinstance(acc.alpha, list):  # one per draft position: first and last
        return f"α {acc.alpha[0]:g}..{acc.alpha[-1]:g}{mark}"
    return f"α {acc.alpha:g}{mark}"
