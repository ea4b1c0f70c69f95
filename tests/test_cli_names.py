"""What a first-time user of the command line meets: tables that fit the
terminal, the names users already type, what `--methods all` offers, help that matches the
errors, and a sweep CSV that tells two tree budgets apart."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from simspec.catalog.hardware import gpu_ids
from simspec.catalog.models import load_model, model_ids
from simspec.cli.common import known_method, left_out_note, print_error
from simspec.cli.flags import DeploymentFlags
from simspec.cli.main import app
from simspec.cli.sweep import _print_speedups
from simspec.cli.sweep_flags import SweepFlags
from simspec.cli.tables import print_frame
from simspec.engine.speculators import SPECULATORS
from simspec.errors import InputError
from simspec.studies.capacity import PLAN_COLUMNS
from simspec.studies.sweep import COLUMNS, SweepConfig, tree_columns

runner = CliRunner()
README = Path(__file__).resolve().parents[1] / "README.md"


def _sweep_frame(methods: list[str], batch_sizes: list[int]) -> pd.DataFrame:
    rows = [
        {"method": m, "k": 0 if m == "autoregressive" else 3, "tree": "", "tree_nodes": 0}
        | {"tree_topk": 0, "batch_size": b, "speedup": 1.0 + i / 10}
        for i, m in enumerate(methods)
        for b in batch_sizes
    ]
    return pd.DataFrame(rows)


# --- tables chosen by width -------------------------------------------------------------------


def test_many_methods_at_80_columns_print_as_rows_with_whole_names(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    _print_speedups(_sweep_frame(list(SPECULATORS), [1, 16, 64]), SweepConfig())
    out = capsys.readouterr().out
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 80
    for name in SPECULATORS:
        assert re.search(rf"│ {name}( K=\d+)? +│", out), name
    assert "bs=64" in out


def test_few_methods_on_a_wide_terminal_keep_batch_sizes_as_rows(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "120")
    _print_speedups(_sweep_frame(["autoregressive", "eagle3", "ngram"], [1, 8]), SweepConfig())
    out = capsys.readouterr().out
    assert "batch size" in out and "eagle3 K=3" in out and "bs=" not in out


def test_plan_headers_are_whole_at_100_columns(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "100")
    row = ["autoregressive", 0, None, None, "", 3.25, 120.5, 110.0, 131.0, 21.0, 20.5, 21.6]
    row += [2100.0, 0.0]
    row += ["ttft"]
    row += [4, 4, 0.125, True]
    print_frame(pd.DataFrame([row, row], columns=PLAN_COLUMNS), "Capacity for 10 req/s")
    out = capsys.readouterr().out
    assert "…" not in out
    assert max(len(line) for line in out.splitlines()) <= 100
    for col in PLAN_COLUMNS:
        assert f" {col} " in out, col
    assert "(continued)" in out  # the rest follows, led again by the method


# --- names users already type -----------------------------------------------------------------


def test_hugging_face_ids_of_presets_are_the_presets():
    cfg = SweepFlags(model="meta-llama/Llama-3.1-8B-Instruct", methods="eagle3").sweep_config(None)
    assert cfg.model == "llama-3.1-8b"
    assert load_model("META-LLAMA/llama-3.1-8b-instruct").id == "llama-3.1-8b"
    plan = DeploymentFlags(model="meta-llama/Meta-Llama-3.1-8B-Instruct").deployment(None)
    assert plan.model == "llama-3.1-8b"
    for name in model_ids():  # every preset says which repo it is
        assert load_model(name).hf_ids, name


def test_a_draft_named_by_its_hugging_face_id_inside_a_speculative_config():
    spec = {"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct"}
    flags = SweepFlags(
        model="meta-llama/Llama-3.1-8B-Instruct",
        speculative_config=json.dumps({**spec, "num_speculative_tokens": 4}),
    )
    draft = flags.sweep_config(None).methods[1]
    by_preset = SweepFlags(
        speculative_config=json.dumps(
            {**spec, "model": "llama-3.2-1b", "num_speculative_tokens": 4}
        )
    )
    assert draft.draft_model == "llama-3.2-1b" and draft == by_preset.sweep_config(None).methods[1]
    by_flag = SweepFlags(methods="draft_model", draft_model="meta-llama/Llama-3.2-1B-Instruct")
    assert by_flag.sweep_config(None).methods[0].draft_model == "llama-3.2-1b"


def test_an_unknown_hugging_face_id_says_how_to_pass_its_config_json(tmp_path):
    out = tmp_path / "o.csv"
    res = runner.invoke(app, ["sweep", "--model", "meta-llama/Llama-3.1-8B", "--out", str(out)])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: model:"), res.output
    assert "config.json" in lines[0] and "--model DIR/config.json" in lines[0]
    assert not out.exists()


def test_method_names_ignore_case_and_accept_vllms_names():
    assert known_method("EAGLE3") == "eagle3"
    assert known_method("eagle") == "eagle1" and known_method("medusa") == "medusa1"
    assert known_method("deepseek_mtp") == "mtp" and known_method("Autoregressive") == (
        "autoregressive"
    )
    cfg = SweepFlags(methods="autoregressive,EAGLE3,eagle").sweep_config(None)
    assert [m.name for m in cfg.methods] == ["autoregressive", "eagle3", "eagle1"]
    with pytest.raises(InputError, match="vLLM's names"):
        known_method("eagle9")
    res = runner.invoke(app, ["methods", "EAGLE"])
    assert res.exit_code == 0 and res.output.startswith("eagle1")


# --- --methods all ----------------------------------------------------------------------------


def test_all_offers_only_what_an_engine_ships_for_the_model():
    flags = SweepFlags(methods="ALL")
    names = [m.name for m in flags.sweep_config(None).methods]
    left = flags.left_out({"model": "llama-3.1-8b"})
    assert "mtp" not in names and "num_nextn_predict_layers" in left["mtp"]
    assert {"hydra", "lookahead", "redrafter", "medusa2"} <= set(left)
    assert {"autoregressive", "eagle3", "ngram", "suffix", "draft_model"} <= set(names)
    assert set(names) | set(left) == set(SPECULATORS)
    with_mtp = [m for m in model_ids() if load_model(m).num_nextn_predict_layers > 0]
    names_mtp = [
        "deepseek-r1",
        "deepseek-v3",
        "deepseek-v3.2",
        "glm-4.5",
        "glm-4.5-air",
        "glm-4.6",
        "qwen3-next-80b-a3b",
    ]
    assert with_mtp == names_mtp
    assert ", ".join(names_mtp) in left["mtp"]
    assert "mtp" in [
        m.name for m in SweepFlags(methods="all", model="deepseek-v3").sweep_config(None).methods
    ]


def test_asking_for_mtp_on_a_model_without_mtp_layers_names_the_config_key():
    res = runner.invoke(
        app, ["sweep", "--methods", "mtp", "--batch-sizes", "1", "--requests", "2", "--quiet"]
    )
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1, res.output
    assert "methods.mtp" in lines[0] and "num_nextn_predict_layers" in lines[0]


def test_all_offers_mtp_for_a_model_that_declares_mtp_layers(tmp_path):
    shape = load_model("llama-3.1-8b").model_dump(exclude={"id", "source", "hf_ids"})
    config = tmp_path / "config.json"
    config.write_text(json.dumps({**shape, "num_nextn_predict_layers": 1}))
    flags = SweepFlags(methods="all", model=str(config))
    assert "mtp" in [m.name for m in flags.sweep_config(None).methods]
    assert "mtp" not in flags.left_out({"model": str(config)})


def test_what_all_left_out_is_listed_by_reason(capsys):
    left_out_note(SweepFlags(methods="all").left_out({"model": "llama-3.1-8b"}))
    lines = capsys.readouterr().err.splitlines()
    assert any(line.startswith("left out of --methods all: mtp:") for line in lines)
    assert any("hydra" in line and "no engine" in line for line in lines)


# --- help, citations and hints ----------------------------------------------------------------


def _option_help(option: str) -> str:
    """One option's help in ``simspec sweep --help``, its wrapped lines joined."""
    text = " ".join(runner.invoke(app, ["sweep", "--help"]).output.split())
    start = text.index(f"{option} <")
    return text[start : text.index(" --", start + len(option))]


def test_k_help_names_each_methods_own_default():
    k_help = _option_help("--k")
    assert "the method's default, see simspec methods" in k_help and "default: 3" not in k_help


def test_the_gpus_in_help_are_the_gpus_errors_offer():
    gpu_help = _option_help("--gpu")
    bad = runner.invoke(app, ["sweep", "--gpu", "h900", "--batch-sizes", "1"])
    assert bad.exit_code == 2
    assert ", ".join(gpu_ids()) in gpu_help and ", ".join(gpu_ids()) in bad.output


def test_methods_mtp_cites_the_deepseek_v3_paper():
    res = runner.invoke(app, ["methods", "mtp"], env={"COLUMNS": "300"})
    assert res.exit_code == 0
    assert "arXiv 2412.19437" in res.output and "§5.4.3" in res.output
    assert "README.md" not in res.output


def test_the_ray_hint_prints_its_extra(monkeypatch, tmp_path, capsys):
    print_error('--executor: ray is not installed: pip install -e ".[ray]"')
    assert 'pip install -e ".[ray]"' in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails
    res = runner.invoke(
        app, ["sweep", "--executor", "ray", "--batch-sizes", "1", "--requests", "2"]
    )
    assert res.exit_code == 2 and 'pip install -e ".[ray]"' in res.output, res.output


# --- the sweep CSV ----------------------------------------------------------------------------


@pytest.mark.slow
def test_two_tree_budgets_are_two_distinguishable_rows(tmp_path):
    cfg = tmp_path / "trees.yaml"
    cfg.write_text(
        "methods:\n"
        "  - {name: eagle2, k: 4, tree: dynamic, tree_nodes: 16, tree_topk: 4, "
        "acceptance: {alpha: 0.7}}\n"
        "  - {name: eagle2, k: 4, tree: dynamic, tree_nodes: 32, tree_topk: 8, "
        "acceptance: {alpha: 0.7}}\n"
    )
    out = tmp_path / "o.csv"
    res = runner.invoke(
        app,
        ["sweep", "--config", str(cfg), "--batch-sizes", "1", "--requests", "4"]
        + ["--executor", "serial", "--out", str(out)],
    )
    assert res.exit_code == 0, res.output
    frame = pd.read_csv(out, keep_default_na=False)
    assert list(frame.columns) == COLUMNS
    assert list(zip(frame.tree_nodes, frame.tree_topk, strict=True)) == [(16, 4), (32, 8)]
    assert set(frame.tree) == {"dynamic"}


def test_tree_columns_count_an_explicit_trees_nodes():
    from simspec.config import MethodConfig

    paths = MethodConfig(name="eagle3", tree="static", tree_paths=[[0], [1], [0, 0]])
    assert tree_columns(paths) == {"tree": "static", "tree_nodes": 3, "tree_topk": 0}
    assert tree_columns(MethodConfig(name="ngram")) == {"tree": "", "tree_nodes": 0, "tree_topk": 0}


def test_readme_lists_every_csv_column():
    text = README.read_text(encoding="utf-8")
    section = text[text.index("### The CSV written by `simspec sweep --out`") :]
    section = section[: section.index("\n#")]
    for col in COLUMNS:
        assert f"`{col}`" in section, col


def test_a_whole_number_in_a_float_column_prints_without_a_fraction():
    """QA: the fleet summary's requests row read 200.0."""
    from simspec.cli.tables import number

    assert (number(200.0), number(150.25), number(1234.0), number(0.123456)) == (
        "200",
        "150.2",
        "1,234",
        "0.123",
    )


def test_a_share_short_of_whole_never_reads_as_whole():
    """QA: an attainment of 0.9995 (9 of 19,366 requests missed) printed "1" and "100.0%"."""
    from simspec.cli.tables import number, share

    assert number(0.9995) == "0.9995" and number(1.0) == "1" and number(0.0004) == "0.0004"
    assert number(0.5) == "0.5" and number(12.345) == "12.3"
    assert share(0.999535) == "99.9%" and share(1.0) == "100.0%" and share(0.999) == "99.9%"


def test_a_refusal_can_name_every_flag_a_command_has():
    """command_flags (the flags a refusal may name) holds each command's options, aliases and
    all (QA: --max-num-seqs, --dp and --ep were missed, typer keeping an option's first
    spelling apart from its aliases, and refusals stopped naming them)."""
    import inspect

    from typer.main import get_command

    from simspec.cli.common import command_flags
    from simspec.cli.main import app

    root = get_command(app)
    checked = 0
    for name, sub in root.commands.items():
        for command in getattr(sub, "commands", {name: sub}).values():
            real = {
                opt
                for p in command.params
                for opt in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]
                if opt.startswith("--") and opt != "--help"
            }
            known = command_flags(inspect.unwrap(command.callback))
            assert known is not None and real <= known, (command.name, real - (known or set()))
            checked += 1
    assert checked >= 13


def test_a_deployment_field_refused_names_its_flag():
    """QA: --tp 0 read "tp: Input should be greater than or equal to 1" and named no flag."""
    from typer.testing import CliRunner

    from simspec.cli.main import app
    from tests.refusals import one_error

    sweep = CliRunner().invoke(app, ["sweep", "--tp", "0"])
    one_error(sweep, "tp: ", "(the flag --tp, or tp in a --config file)")
    models = CliRunner().invoke(app, ["models", "--tp", "0"])
    one_error(models, "tp: ", "(the flag --tp)")


def test_every_command_shows_an_example_that_its_options_parse():
    """A mature CLI's --help ends its description with an example (QA: 9 commands had none);
    each example must be a command line the command accepts (parsed by click, not run)."""
    import re
    import shlex

    from typer.main import get_command

    from simspec.cli.main import app

    root = get_command(app)
    checked = 0
    for name, sub in root.commands.items():
        commands = getattr(sub, "commands", None)
        for command in (commands or {name: sub}).values():
            doc = " ".join((command.help or "").split())
            found = re.search(r"Example: (simspec [^(]+?)(?: \(|$)", doc)
            assert found, f"{command.name}: no 'Example: simspec ...' in its help"
            words = shlex.split(found.group(1))
            path = [name] if commands is None else [name, command.name]
            assert words[1 : 1 + len(path)] == path, (command.name, words)
            ctx = command.make_context(command.name, words[1 + len(path) :])
            assert ctx.params, command.name
            checked += 1
    assert checked >= 13


def test_analytic_alpha_help_names_the_alphas_the_table_reports():
    """QA: --alpha 0.8 printed rows for α 0.5, 0.7, 0.8 and 0.9 with no word of why."""
    from typer.testing import CliRunner

    from simspec.cli.main import app
    from simspec.studies.analytic import ALPHAS, REPORTED_ALPHAS

    text = " ".join(
        CliRunner().invoke(app, ["analytic", "--help"], terminal_width=200).output.split()
    )
    assert "table's α " + ", ".join(f"{a:g}" for a in REPORTED_ALPHAS) + " (" in text
    assert f"α {ALPHAS[0]:g} to {ALPHAS[-1]:g} in steps of {ALPHAS[1] - ALPHAS[0]:.2g}" in text


def test_an_unknown_draft_is_advised_with_the_draft_flag():
    """QA: a draft not packaged was advised "--model DIR/config.json", the target's flag."""
    from simspec.catalog.models import load_model
    from simspec.errors import InputError

    with pytest.raises(InputError, match=r"--draft-model DIR/config.json") as exc:
        load_model("nonexistent/draft", "draft_model")
    assert "--model DIR" not in exc.value.message


def test_gpu_names_ignore_case_as_method_names_do():
    """QA: --gpu H100_SXM was an unknown GPU while method names ignore case."""
    from simspec.config import Deployment

    assert Deployment(gpu="H100_SXM").gpu == "h100_sxm"
    result = runner.invoke(app, ["models", "llama-3.1-8b", "--gpu", "H200"])
    assert result.exit_code == 0, result.output
    from simspec.catalog.hardware import load_gpu, load_profile

    assert load_gpu("H200").id == "h200" and load_profile("H200").gpu == "h200"


def test_an_empty_out_name_is_said_as_empty_not_as_a_dot():
    """QA: --out "" was refused as "(got '.')", a name the user never typed."""
    result = runner.invoke(app, ["sweep", "--out", ""])
    assert result.exit_code == 2 and "got an empty name" in result.output
