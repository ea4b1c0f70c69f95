"""``simspec analytic``: the closed form at batch 1 beside the simulation."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from simspec.catalog.methods import family_draft, k_not_read, method_defaults, method_info
from simspec.catalog.models import load_model, preset_id
from simspec.cli import options as opt
from simspec.cli.common import csv_list, err, one_line_errors, one_method, refuse_unread, writing
from simspec.cli.flags import ServingFlags, given, with_flags, with_profile_gpu
from simspec.cli.tables import check_outputs, print_frame, print_provenance, write_frame
from simspec.config import AcceptanceConfig, Deployment, MethodConfig
from simspec.engine.speculators import SPECULATORS
from simspec.errors import InputError

if TYPE_CHECKING:
    import pandas as pd

    from simspec.studies.analytic import Batch1Costs


# --disaggregation-mode is not offered: the closed form prices one sequence's decode steps,
# which a decode instance runs as any replica does, and has no TTFT (QA: it was accepted and
# changed nothing; then offered and always refused)
@with_flags(ServingFlags, omit=("disaggregation_mode",))
@one_line_errors
def analytic(
    method: Annotated[
        str | None,
        typer.Option(help="method whose draft cost to use, priced as a chain [default: eagle3]"),
    ] = None,
    methods: opt.MethodsAlias = None,
    draft_model: opt.DraftModel = None,
    *,
    flags: ServingFlags,
    profile: opt.Profile = None,
    alpha: Annotated[
        str | None,
        typer.Option(
            help=opt.field_help(
                AcceptanceConfig,
                "alpha",
                ". One number adds its row to the table's α 0.5, 0.7, 0.9 (the --csv holds "
                "α 0.05 to 0.95 in steps of 0.05 and it); a comma list is one profile by "
                "position, reported by depth K beside them",
            )
        ),
    ] = None,
    k_max: Annotated[int, typer.Option(help="largest K to consider", min=1, max=32)] = 8,
    context: Annotated[
        int,
        typer.Option(
            help="tokens in the KV cache (at most 10M, the longest context)", min=1, max=10_000_000
        ),
    ] = 1024,
    compare: Annotated[
        bool, typer.Option("--compare", help="also simulate, and show where the two part")
    ] = False,
    html: Annotated[Path | None, typer.Option(help="write heatmaps of E and speedup")] = None,
    csv: Annotated[
        Path | None,
        typer.Option(
            help="write the α × K table as CSV (an --alpha profile's rows by depth too, "
            "named in an alpha_profile column)"
        ),
    ] = None,
) -> None:
    """Closed-form speedup at batch 1 and the best K per α.

    E = (1 − α^(K+1)) / (1 − α); speedup = E·t_AR / (t_draft + t_verify), with the step times
    from the calibrated cost model; --compare simulates beside it.

    Example: simspec analytic --method eagle3 --alpha 0.8 --k-max 8
    """
    from simspec.studies import analytic as an

    check_outputs((csv, "--csv", (".csv", ".parquet")), (html, "--html", (".html", ".htm")))
    why = "the closed form prices one method's draft: run it once per method"
    flag = "--methods" if methods is not None else "--method"
    method = one_method({"--method": method, "--methods": methods}, why) or "eagle3"
    if method == "autoregressive":
        speculative = [m for m in SPECULATORS if m != "autoregressive"]
        raise InputError(flag, f"choose a speculative method: {', '.join(speculative)}")
    # the closed form prices a chain of each K: a method that drafts no chain, or whose draft
    # length K does not set, has no such K to choose (QA: lookahead's best "K 8" was its
    # fixed 4-token draft priced 8 deep; redrafter failed on its tree)
    info = method_info(method)
    if "chain" not in info.shapes:
        raise InputError(
            flag,
            f"{method} drafts a {'/'.join(info.shapes)} tree, and the closed form prices chains "
            "of K: simspec sweep --methods " + method + " simulates it",
        )
    if (why := k_not_read({"name": method})) is not None:
        raise InputError(flag, f"the closed form chooses K, which {method} does not read: {why}")
    for name, value in (("--profile", profile), ("--draft-model", draft_model)):
        if value is not None and not value.strip():  # QA: '' ran the default, unsaid
            raise InputError(name, "is empty: give a value, or leave the flag out for its default")
    deploy = Deployment(**with_profile_gpu({**flags.serving_fields(), **given(profile=profile)}))
    draft = _draft(method, flag, draft_model, deploy.model)
    given_alphas = csv_list(alpha, "--alpha", float) if alpha is not None else []
    if any(not 0.0 <= a <= 1.0 for a in given_alphas):
        raise InputError("--alpha", "each α must be in [0, 1]")
    one = given_alphas[:1] if len(given_alphas) == 1 else []
    if compare and len(given_alphas) > 1:
        raise InputError(
            "--compare",
            "simulates one α beside the closed form, and --alpha gives a profile by position: "
            "give one --alpha value",
        )
    if compare:  # its requests fill the context and decode half their output past it
        from simspec.catalog.models import load_model
        from simspec.engine.build import max_model_len

        room = max_model_len(deploy, load_model(deploy.model)) - an.COMPARE_OUTPUT // 2
        if context > room:
            raise InputError(
                "--context",
                f"{context:,} tokens leave --compare's requests ({an.COMPARE_OUTPUT} output "
                f"tokens, half of them past the context) no room in {deploy.model}'s "
                f"{room + an.COMPARE_OUTPUT // 2:,}: give at most {room:,} with --compare",
            )
    # a profile is priced to its full depth even past --k-max
    depth = max(k_max, len(given_alphas)) if len(given_alphas) > 1 else k_max
    costs = an.batch1_costs(deploy, method, depth, context, draft)
    alphas = tuple(sorted({*an.ALPHAS, *an.REPORTED_ALPHAS, *one}))
    table = an.analytic_table(costs, alphas, k_max)
    picks = an.best_k(table)
    # a profile by position is no scalar α: its first value is not shown as one (its E is)
    shown = picks[picks.alpha.isin([*an.REPORTED_ALPHAS, *one])]
    where = f"{deploy.model} on {deploy.gpu} x{deploy.tp}, {deploy.engine}"
    by_k = an.profile_table(costs, given_alphas) if len(given_alphas) > 1 else None
    # files first: an output that cannot be written is the one error line, with nothing printed
    if csv:  # a profile's own rows too (QA: the file held the α grid alone)
        write_frame(
            table if by_k is None else _with_profile(table, by_k, costs, given_alphas), csv, "--csv"
        )
    if html:
        title = f"{method} on {deploy.model}, {deploy.gpu} x{deploy.tp}: closed form"
        with writing(html, "--html"):
            an.write_html(table, title, html)
    err.print(
        f"{where}, {method}{f' (draft {draft})' if draft else ''}, batch 1, {context} tokens "
        "of context: "
        f"plain step {costs.ar_s * 1e3:.2f} ms; draft step "
        f"{costs.draft_s[1] * 1e3:.2f} ms (cost ratio {costs.draft_s[1] / costs.ar_s:.2f})"
    )
    tree = method_defaults(method).get("tree")
    if tree not in (None, "chain"):  # the closed form is a chain's
        err.print(
            f"note: {method} drafts a {tree} tree by default; the closed form prices a chain of "
            "K of its draft steps (simspec sweep simulates the tree)",
            highlight=False,
        )
    print_frame(shown.round(3), "Best K per α (closed form, batch 1)")
    # the α are the given ones (a grid of them): no preset's acceptance
    drafted = MethodConfig(name=method, draft_model=draft, acceptance=AcceptanceConfig(alpha=0.5))
    # not the serving notes: the closed form is batch 1 and takes no scheduler flags (QA)
    print_provenance(deploy, [drafted], notes=False)
    capped = sorted(float(a) for a in shown.alpha[shown.best_k == k_max])
    if capped:  # QA: α 0.9's best K was --k-max's 8 (10 at --k-max 32) without a word
        alphas_text = ", ".join(f"{a:g}" for a in capped)
        err.print(
            f"note: the best K at α {alphas_text} is the largest tried ({k_max}): a larger one "
            "may be faster still; raise --k-max (at most 32)",
            highlight=False,
        )
    if len(given_alphas) > 1:
        e = an.profile_tokens(given_alphas)
        err.print(f"per-position profile {given_alphas}: E = 1 + Σ Π α = {e:.3f} tokens per step")
        assert by_k is not None
        print_frame(by_k.round(3), "The profile drafted to depth K (closed form, batch 1)")
        best = by_k.loc[by_k.speedup.idxmax()]
        err.print(
            f"best depth K = {int(best.k)}: {best.speedup:.2f}x"
            if best.speedup > 1.0
            else "no depth of this profile beats plain decoding at batch 1",
            highlight=False,
        )
    if compare:
        a = one[0] if one else 0.7
        k = int(picks.loc[(picks.alpha - a).abs().idxmin(), "best_k"])
        if k == 0:  # said, not swapped silently (QA)
            err.print(
                f"note: the best K at α={a} is 0 (speculation off): comparing at K=3",
                highlight=False,
            )
            k = 3
        both = an.compare(deploy, method, a, k, context, draft_model=draft).round(3)
        both.insert(0, "case", range(1, len(both) + 1))
        print_frame(both.drop(columns="why"), f"Closed form vs simulation, α={a}, K={k}")
        for case, why in zip(both["case"], both["why"], strict=True):
            err.print(f"  {case}: {why}")


def _draft(method: str, flag: str, draft_model: str | None, target: str) -> str | None:
    """draft_model's draft, whose forward is the draft cost: --draft-model (a Hugging Face id
    of a preset read as that preset), else the packaged draft of ``target``'s family; None for
    another method, which --draft-model would not change (so it is refused)."""
    if method != "draft_model":
        refuse_unread(
            f"is the draft of the draft_model method, and --method is {method}",
            {"--draft-model": draft_model},
        )
        return None
    if draft_model:
        draft = preset_id(draft_model)
        vocab, own = load_model(draft, "--draft-model").vocab_size, load_model(target).vocab_size
        if vocab != own:
            raise InputError(
                "--draft-model",
                f"{draft} has a {vocab}-token vocabulary and {target} {own}: a draft must share "
                "the target's tokenizer",
            )
        return draft
    found, why = family_draft(target)
    if found is None:
        raise InputError(flag, why)
    return found


def _with_profile(
    table: pd.DataFrame, by_k: pd.DataFrame, costs: Batch1Costs, alphas: list[float]
) -> pd.DataFrame:
    """The α grid's rows (``alpha_profile`` empty) and the profile's, one per depth K (their
    ``alpha`` empty, ``alpha_profile`` the profile as given), in the grid's columns."""
    rows = by_k.assign(
        alpha=float("nan"),
        draft_ms=[costs.draft_s[k] * 1e3 for k in by_k.k],
        verify_ms=[costs.verify_s[k] * 1e3 for k in by_k.k],
        ar_ms=costs.ar_s * 1e3,
        draft_cost_ratio=[costs.draft_s[k] / k / costs.ar_s for k in by_k.k],
        alpha_profile=",".join(f"{a:g}" for a in alphas),
    )
    import pandas as pd

    grid = table.assign(alpha_profile="")
    return pd.concat([grid, rows[grid.columns]], ignore_index=True)
