"""The README's checks outside ``../shared`` ("How far to trust it"), rerun: rows that GPUStack's
performance-lab pages print but ``cases_serving_gpustack.csv`` did not convert, each predicted as
the twin of a converted row of the same kind with the model, GPU, TP, precision, engine release
and serve command changed.

    python tools/gpustack_twins.py [--cases ../shared/validation/cases_serving_gpustack.csv]
        [--out twins.csv]

The printed numbers below are read from the pages (github.com/gpustack/gpustack at 47277d7,
``docs/performance-lab/<page>.md``); each carries its page. They are a check, not validation
cases: nothing here is fitted to them, and ``simspec validate`` does not score them. Prints
simspec against the page per row, and the ratio. Needs ``../shared`` (the twins' source rows).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simspec.studies.validation.cases import read_cases  # after the path above
from simspec.studies.validation.run import validate

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT.parent / "shared" / "validation" / "cases_serving_gpustack.csv"
SUFFIX = {"tpot_ms": "tpot", "throughput_tok_s": "tput", "ttft_ms": "ttft"}


@dataclass(frozen=True)
class Twin:
    """One printed run: the converted row it copies (``twin``: a case_id without its metric
    suffix), what differs, the printed totals and the printed metrics."""

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


C4 = "gps-glm-4.x-h200-b11"  # ShareGPT, --max-concurrency 4, 100 prompts, vLLM 0.11
OSS120 = "vllm serve openai/gpt-oss-120b"
TWINS = (
    Twin("c4 gpt-oss-120b 1xH100", "gpt-oss-120b/h100", C4, "gpt-oss-120b", "h100_sxm", 1,
         "v0.10.2", "MXFP4; precision: mxfp4", f"{OSS120} --max-model-len 32768",
         100, 22946, 21691, {"tpot_ms": 8.31, "throughput_tok_s": 453.04},
         ("zai-org/GLM-4.6", "openai/gpt-oss-120b")),
    Twin("c4 gpt-oss-120b 2xH100 async", "gpt-oss-120b/h100", C4, "gpt-oss-120b", "h100_sxm", 2,
         "v0.10.2", "MXFP4; precision: mxfp4", f"{OSS120} --async-scheduling -tp 2",
         100, 22946, 21691, {"tpot_ms": 5.75, "throughput_tok_s": 645.55},
         ("zai-org/GLM-4.6", "openai/gpt-oss-120b")),
    Twin("c4 gpt-oss-120b 1xA100", "gpt-oss-120b/a100", C4, "gpt-oss-120b", "a100_80gb", 1,
         "v0.11.0", "MXFP4; precision: mxfp4", f"{OSS120} --max-model-len 32768",
         100, 22946, 21691, {"tpot_ms": 11.67, "throughput_tok_s": 326.09},
         ("zai-org/GLM-4.6", "openai/gpt-oss-120b")),
    Twin("c4 DeepSeek-R1 8xH200", "deepseek-r1/h200", C4, "deepseek-r1", "h200", 8,
         "v0.11.0", "FP8; precision: fp8", "vllm serve deepseek-ai/DeepSeek-R1-0528 -tp 8",
         100, 22836, 21338, {"tpot_ms": 19.36, "throughput_tok_s": 196.81, "ttft_ms": 123.30},
         ("zai-org/GLM-4.6", "deepseek-ai/DeepSeek-R1-0528")),
    # gpt-oss-20b on one GPU under load, each the twin of the Qwen3-14B row of its page and kind
    *(
        Twin(f"{kind} gpt-oss-20b 1x{gpu_name}", f"gpt-oss-20b/{page}", f"gps-qwen3-14b-{page}-{b}",
             "gpt-oss-20b", gpu, 1, "v0.11.0", "MXFP4; precision: mxfp4",
             "vllm serve openai/gpt-oss-20b", n, inp, out,
             {"throughput_tok_s": tput, "ttft_ms": ttft, "tpot_ms": tpot},
             ("Qwen/Qwen3-14B", "openai/gpt-oss-20b"))
        for page, gpu, gpu_name, rows in (
            ("h100", "h100_sxm", "H100", (
                ("b01", "sharegpt", 1000, 215312, 193979, 7817.03, 4881.62, 91.00),
                ("b08", "32K", 100, 3200000, 9350, 86.62, 53687.69, 239.44),
                ("b09", "4K", 500, 1999249, 52309, 847.43, 31245.12, 184.26),
                ("b10", "2K", 500, 999120, 47022, 1443.44, 16515.86, 149.76),
                ("b11", "128", 1000, 127755, 4000, 851.04, 3174.14, 178.91),
            )),
            ("a100", "a100_80gb", "A100", (
                ("b01", "sharegpt", 1000, 215312, 194171, 4620.12, 13654.59, 48.57),
                ("b08", "32K", 100, 3200000, 9533, 21.62, 219739.77, 268.03),
                ("b09", "4K", 500, 1999249, 53530, 415.64, 62947.13, 123.35),
                ("b10", "2K", 500, 999120, 47224, 813.35, 31669.55, 100.32),
                ("b11", "128", 1000, 127755, 4000, 735.40, 2774.46, 62.10),
            )),
        )
        for b, kind, n, inp, out, tput, ttft, tpot in rows
    ),
)  # fmt: skip


def twin_rows(source: pd.DataFrame) -> pd.DataFrame:
    """Every printed metric of every twin as a case row copied from its converted twin."""
    by_id = source.set_index("case_id")
    rows = []
    for t in TWINS:
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
    twins = twin_rows(read_cases(args.cases))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "twins.csv"
        twins.to_csv(path, index=False)
        out = validate(read_cases(path))
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
