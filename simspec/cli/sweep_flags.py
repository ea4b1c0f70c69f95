"""The scenario flags of ``simspec sweep``, typed, and how they turn a scenario file (or none)
into the sweep to run: each flag given overrides the file (:func:`~simspec.cli.flags.overlay`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from simspec.catalog.methods import TRACE_DATASETS
from simspec.catalog.traces import packaged_traces
from simspec.cli import options as opt
from simspec.cli.common import csv_list, one_spelling
from simspec.cli.flags import (
    SchedulerFlags,
    ServingFlags,
    given,
    overlay,
    read_config,
    scheduler_limits,
    with_preset_ids,
    with_profile_gpu,
)
from simspec.cli.method_flags import (
    MethodFlags,
    asks_all,
    preset_dataset,
    scenario_methods,
)
from simspec.config import check_precision_target
from simspec.engine.speculators import known_method
from simspec.errors import InputError
from simspec.studies.sweep import SweepConfig

DEFAULT_METHODS = "autoregressive,eagle3,ngram"
PrecisionTarget = Annotated[
    float | None,
    typer.Option(
        help=opt.field_help(SweepConfig, "precision_target")
        + "; on the command line it replaces a --config file's fixed length, and --requests "
        "or --turnovers replaces the file's target",
        metavar="SHARE",
    ),
]


# a sweep's own help for the flags other commands share: it has no arrival --trace, and its
# run length is its precision target's unless --requests or --turnovers fixes one (QA)
SweepDataset = Annotated[
    str | None,
    typer.Option(
        help="take prompt/output lengths (workload.lengths_from) from this recorded dataset "
        "(Llama-3.1-8B on H100), and the methods' acceptance presets from it: "
        f"{', '.join(TRACE_DATASETS)} [default: sharegpt]"
    ),
]
SweepRequests = Annotated[
    int | None,
    typer.Option(
        help="a fixed length instead of the precision target's: requests measured in each "
        "cell's steady window (at least --turnovers x concurrency) [default: the precision "
        "target's length]"
    ),
]
SweepTurnovers = Annotated[
    int | None,
    typer.Option(
        help="a fixed length instead of the precision target's: measure at least this many x "
        "concurrency requests (the batch's mix must turn over many times; 64 where only "
        "--requests is given) [default: the precision target's length]",
        metavar="N",
    ),
]


@dataclass(frozen=True)
class SweepFlags(MethodFlags, SchedulerFlags, ServingFlags):
    """What a sweep's flags say; None (or an empty value) = not given."""

    profile: opt.Profile = None
    methods: opt.Methods = None
    method: opt.MethodAlias = None
    concurrencies: opt.Concurrencies = None
    batch_sizes: opt.BatchSizesAlias = None
    schedule_grid: opt.ScheduleGridAlias = None
    requests: SweepRequests = None
    turnovers: SweepTurnovers = None
    precision_target: PrecisionTarget = None
    dataset: SweepDataset = None
    prompt_len: opt.PromptLen = None
    output_len: opt.OutputLen = None
    temperature: opt.Temperature = None
    top_p: opt.TopP = None
    seed: opt.Seed = None

    def sweep_config(self, config: Path | None, flag: str = "--config") -> SweepConfig:
        """The scenario file (or none; ``flag`` names it in errors) with these flags on top,
        validated."""
        self.check_acceptance_flags()
        file = read_config(config, flag) if config else {}
        fields = self.scenario_fields()
        self.check_grid_axes(file, fields, flag)
        data = self.run_length(with_profile_gpu(with_preset_ids(overlay(file, fields))))
        self.check_fixed_lengths(file)
        fixed_flags = self.prompt_len is not None or self.output_len is not None
        dataset_flag = self.dataset or self.token_trace
        if dataset_flag and not fixed_flags and isinstance(data.get("workload"), dict):
            # the flag's dataset replaces the file's fixed lengths, as a flag replaces what the
            # file sets (QA: refused, telling the user to edit the file the flag overrides);
            # fixed lengths on the command line stay (the dataset then sets the acceptance)
            fixed = ("prompt", "output")
            data["workload"] = {k: v for k, v in data["workload"].items() if k not in fixed}
        workload = file.get("workload")
        if isinstance(workload, dict) and "concurrency" in workload:
            # a sweep runs each of its batch sizes: the file's one would be read nowhere, said
            # nowhere (QA)
            raise InputError(
                "workload.concurrency",
                "a sweep runs each of batch_sizes (--concurrencies): give batch_sizes: "
                f"[{workload['concurrency']}] instead",
            )
        dataset = preset_dataset(data.get("workload"), self.dataset)
        names = None
        flag, listed = self.named_methods or ("--methods", None)
        if self.wants_all:
            names = scenario_methods(self.models(data), self.draft, data)[0]
        elif listed:
            names = csv_list(listed, flag)
            # the method each name means (case, vLLM's names): QA, --methods eagle3,EAGLE3 and
            # medusa,medusa1 ran one method twice into two identical rows
            meant = [known_method(n, flag) if n != "all" else n for n in names]
            twice = sorted({m for m in meant if meant.count(m) > 1})
            if twice:
                spelled = ", ".join(
                    "/".join(dict.fromkeys(n for n, m in zip(names, meant, strict=True) if m == t))
                    for t in twice
                )
                raise InputError(flag, f"{spelled} listed more than once: name each once")
        methods = self.chosen(data, names, csv_list(DEFAULT_METHODS, "--methods"), dataset, flag)
        data.pop("method", None)  # a scenario's one method, now among the methods
        data["methods"] = methods
        return SweepConfig(**data)

    def check_grid_axes(self, file: dict[str, Any], fields: dict[str, Any], flag: str) -> None:
        """A flag for what the file's grid varies is an error naming both: the grid's axis
        would replace the flag's value at every point, and a flag never loses quietly."""
        grid = file.get("grid")
        if not isinstance(grid, dict):
            return
        given_now = {
            axis: f"--{axis.replace('_', '-')}"
            for axis in ("model", "gpu", "tp", "engine", "seed", "temperature", "top_p")
            if axis in fields
        }
        if self.k is not None or self.speculative_config:
            given_now["k"] = "--k" if self.k is not None else "--speculative-config"
        if self.dataset or self.token_trace:
            given_now["dataset"] = "--dataset" if self.dataset else "--token-trace"
        elif self.prompt_len is not None or self.output_len is not None:
            # fixed lengths replace a dataset's, which the axis sets at every point (QA: the
            # error named neither flag and asked for lengths_from: null)
            given_now["dataset"] = "--prompt-len" if self.prompt_len is not None else "--output-len"
        for axis in grid:
            if axis in given_now:
                raise InputError(
                    given_now[axis],
                    f"the {flag} file's grid varies {axis}, which would replace the flag at "
                    f"every point: give the flag or the grid axis, not both",
                )

    def run_length(self, data: dict[str, Any]) -> dict[str, Any]:
        """The command line's run length over the file's: --precision-target replaces the
        file's fixed length (workload.requests, workload.turnovers), --requests or
        --turnovers the file's precision_target; both kinds on the command line is an error."""
        fixed = self.requests is not None or self.turnovers is not None
        if self.precision_target is None or (fixed and self.precision_target == 0):
            # 0 is the fixed length itself (QA: "--precision-target 0 --turnovers 8", which
            # its help says asks the same, was refused)
            return {**data, "precision_target": 0.0} if fixed else data
        if fixed:
            raise InputError(
                "--precision-target",
                "give a precision target or a fixed length (--requests, --turnovers), not both",
            )
        try:
            target = check_precision_target(self.precision_target)
        except ValueError as e:
            raise InputError("--precision-target", f"{e} (got {self.precision_target:g})") from None
        workload = data.get("workload")
        if isinstance(workload, dict):
            workload = {k: v for k, v in workload.items() if k not in ("requests", "turnovers")}
            data = {**data, "workload": workload}
        return {**data, "precision_target": target}

    def check_fixed_lengths(self, file: dict[str, Any]) -> None:
        """--prompt-len or --output-len alone: fixed lengths replace the dataset's prompt and
        output lengths together, so the other side must be given too, unless the file already
        has fixed lengths (``lengths_from: null``), of which the flag replaces its own side."""
        if (self.prompt_len is None) == (self.output_len is None):
            return
        workload = file.get("workload")
        if (
            isinstance(workload, dict)
            and "lengths_from" in workload
            and workload["lengths_from"] is None
        ):
            return
        given_flag, other = (
            ("--prompt-len", "--output-len")
            if self.prompt_len is not None
            else ("--output-len", "--prompt-len")
        )
        raise InputError(
            given_flag,
            f"fixed lengths replace the dataset's prompt and output lengths together: "
            f"give {other} too",
        )

    def scenario_fields(self) -> dict[str, Any]:
        """The deployment, workload and scheduler fields the flags set, as a scenario file
        would write them."""
        if self.dataset and self.dataset not in packaged_traces():
            raise InputError(
                "--dataset",
                f"unknown dataset {self.dataset!r}; choose from {', '.join(packaged_traces())}",
            )
        token_trace = self.checked_token_trace()
        if token_trace and self.dataset and token_trace != self.dataset:
            # QA: --dataset gsm8k beside --token-trace sharegpt ran sharegpt without a word
            raise InputError(
                "--token-trace",
                f"{token_trace!r} sets the dataset too (its lengths and the acceptance presets' "
                f"domain), and --dataset gives {self.dataset!r}: give one of them",
            )
        workload = given(
            requests=self.requests,
            turnovers=self.turnovers,
            lengths_from=token_trace or self.dataset or None,
        )
        for flag, side, value in (
            ("--prompt-len", "prompt", self.prompt_len),
            ("--output-len", "output", self.output_len),
        ):
            if value is None:
                continue
            if value < 1:
                raise InputError(flag, f"must be >= 1 (got {value})")
            workload["lengths_from"] = None  # fixed lengths instead of the dataset's
            workload[side] = {"dist": "fixed", "mean": value}
        spelled = one_spelling(
            {
                "--concurrencies": self.concurrencies,
                "--batch-sizes": self.batch_sizes,
                "--schedule-grid": self.schedule_grid,
            }
        )
        sizes = csv_list(spelled[1], spelled[0], int) if spelled is not None else None
        return {
            **self.serving_fields(),
            **given(
                profile=self.profile,
                seed=self.seed,
                temperature=self.temperature,
                top_p=self.top_p,
                batch_sizes=sizes,
            ),
            "workload": workload,
            "scheduler": scheduler_limits(self),
        }

    @property
    def named_methods(self) -> tuple[str, str] | None:
        """The flag (``--methods``, or its other spelling ``--method``) and the methods it
        lists; None if neither is given."""
        return one_spelling({"--methods": self.methods, "--method": self.method})

    @property
    def wants_all(self) -> bool:
        """``--methods all`` (case ignored) and no --speculative-config."""
        listed = (self.named_methods or ("", ""))[1]
        return asks_all([listed]) and not self.speculative_config

    def left_out(self, data: dict[str, Any]) -> dict[str, str]:
        """The methods ``--methods all`` leaves out, and why (for any model the sweep serves:
        its model, or every model on a grid's model axis); empty unless --methods all."""
        if not self.wants_all:
            return {}
        return scenario_methods(self.models(data), self.draft, data)[1]

    @staticmethod
    def models(data: dict[str, Any]) -> list[str]:
        """The models a sweep serves: its model, or every model on a grid's model axis."""
        grid = data.get("grid") if isinstance(data.get("grid"), dict) else {}
        models = grid.get("model") if isinstance(grid.get("model"), list) else None
        return [str(m) for m in models or [data.get("model", "llama-3.1-8b")]]
