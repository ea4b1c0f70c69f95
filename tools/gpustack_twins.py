"""The README's checks outside ``../shared`` ("How far to trust it"), rerun: rows that GPUStack's
performance-lab pages print but ``cases_serving_gpustack.csv`` did not convert, each predicted as
the twin of a converted row of the same kind with the model, GPU, TP, precision, engine release
and serve command changed.

    python tools/gpustack_twins.py [--cases ../shared/validation/cases_serving_gpustack.csv]
        [--out twins.csv]

The printed numbers (``tools/gpustack_twins.csv``) are read from the pages
(github.com/gpustack/gpustack at 47277d7, ``docs/performance-lab/<page>.md``); each row names its
page and the converted row it is the twin of. They are a check, not validation
cases: nothing here is fitted to them, and ``simspec validate`` does not score them. Prints
simspec against the page per row, and the ratio. Needs ``../shared`` (the twins' source rows).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simspec.studies.validation.cases import read_cases  # after the path above
from simspec.studies.validation.run import validate

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT.parent / "shared" / "validation" / "cases_serving_gpustack.csv"
TWINS_CSV = Path(__file__).with_name("gpustack_twins.csv")
SUFFIX = {"tpot_ms": "tpot", "throughput_tok_s": "tput", "ttft_ms": "ttft"}


@dataclass(frozen=True)
class Twin:
    """One printed run (a row of ``gpustack_twins.csv``): the converted row it copies
    (``twin``: a case_id without its metric suffix), what differs, the printed totals and the
    printed metrics."""

    name: str
    page: str
    twin: str
    model: str
    gpu: str
    gpus: int
    release: str
    precision: str  # the notes' leading "<PRECISION>; precision: <precision>"
    serve: str
    prompts: int
    input_tokens: int
    output_tokens: int
    printed: dict[str, float] = field(default_factory=dict)
    swap: tuple[str, str] = ("", "")  # the twin's served model id in its notes, and this one's


def load_twins(path: Path = TWINS_CSV) -> tuple[Twin, ...]:
    """The printed runs, as the CSV beside this script lists them (one row per run; a metric
    the page does not print is left empty)."""
    table = pd.read_csv(path, dtype=str, keep_default_na=False)
    return tuple(
        Twin(
            r.name,
            r.page,
            r.twin,
            r.model,
            r.gpu,
            int(r.gpus),
            r.release,
            r.precision,
            r.serve,
            int(r.prompts),
            int(r.input_tokens),
            int(r.output_tokens),
            {m: float(getattr(r, m)) for m in SUFFIX if getattr(r, m)},
            (r.twin_served, r.served),
        )
        for r in table.itertuples(index=False)
    )


def twin_rows(source: pd.DataFrame) -> pd.DataFrame:
    """Every printed metric of every twin as a case row copied from its converted twin."""
    by_id = source.set_index("case_id")
    rows = []
    for t in load_twins():
        for metric, value in t.printed.items():
            base = by_id.loc[f"{t.twin}-{SUFFIX[metric]}"].to_dict()
            notes = base["notes"].split("; ", 2)[-1]  # past "<PRECISION>; precision: <p>"
            if t.swap[0]:
                notes = notes.replace(*t.swap)
            serve = notes.split("serve: ", 1)[1].split(";", 1)[0] if "serve: " in notes else ""
            notes = notes.replace(serve, t.serve) if serve else notes
            notes = notes.replace(base["engine_version"], t.release)
            base.update(
                case_id=f"{t.name} | {metric}", series=t.page, target_model=t.model, gpu=t.gpu,
                # every page here runs its GPUs as one tensor-parallel group
                num_gpus=str(t.gpus), tp=str(t.gpus), engine_version=t.release,
                load=str(t.prompts) if base["load_kind"] == "static_batch" else base["load"],
                prompt_len=str(t.input_tokens / t.prompts),
                output_len=str(t.output_tokens / t.prompts),
                measured_value=str(value), notes=f"{t.precision}; {notes}",
                source=f"GPUStack performance lab, docs/performance-lab/{t.page}.md at 47277d7",
            )  # fmt: skip
            rows.append({"case_id": base.pop("case_id"), **base})
    return pd.DataFrame(rows, dtype=str)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=Path, default=CASES, help=f"the converted rows [{CASES}]")
    ap.add_argument("--out", type=Path, help="write the twins' predictions here (CSV)")
    args = ap.parse_args()
    if not args.cases.is_file():
        print(f"error: --cases: {args.cases} not found (needs ../shared)", file=sys.stderr)
        return 2
    # the twins are read_cases' own rows with cells changed: validate takes them as they are
    out = validate(twin_rows(read_cases(args.cases)))
    if args.out is not None:
        out.to_csv(args.out, index=False)
    pd.set_option("display.width", 160)
    shown = out[["case_id", "measured_value", "predicted_value", "status"]].copy()
    shown["simspec/page"] = (
        pd.to_numeric(shown.predicted_value) / pd.to_numeric(shown.measured_value)
    ).round(2)
    print(shown.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
