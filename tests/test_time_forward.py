"""calibration/time_forward.py on the CPU: the CSV it writes, its masks, its argument errors."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # the torch harness (a model forward per test)

torch = pytest.importorskip("torch")
pd = pytest.importorskip("pandas")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "calibration" / "time_forward.py"
COLUMNS = (
    "kind op num_seqs q_per_seq context_len num_tokens tree m k n time_ms_median time_ms_p10 "
    "time_ms_p90 repeats warmup layers_timed layers_total scaled_to_all_layers tp model "
    "hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads "
    "head_dim vocab_size draft_vocab dtype device gpu_name torch_version cuda_version "
    "cuda_graphs attention_impl timer date_utc truncated script_version"
).split()
KINDS = {"gemm", "lm_head", "attention", "elementwise", "forward", "prefill", "draft_head"}
SMALL_GRID = [
    "--model",
    "tiny",
    "--device",
    "cpu",
    "--repeats",
    "2",
    "--warmup",
    "1",
    "--batch-sizes",
    "1,2",
    "--q-per-seq",
    "1,3",
    "--tree-sizes",
    "4",
    "--context-lens",
    "8,32",
    "--prefill-chunks",
    "8,16",
    "--prefill-contexts",
    "0,16",
    "--gemm-tokens",
    "1,8",
]
TINY = dict(hidden=64, inter=128, heads=4, kv_heads=2, head_dim=16, vocab=256)


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def tf():
    """The script as a module (it has no package), for its functions."""
    spec = importlib.util.spec_from_file_location("time_forward", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["time_forward"] = module  # dataclasses look their module up while defining
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> pd.DataFrame:
    out = tmp_path_factory.mktemp("tf") / "tiny.csv"
    proc = run(*SMALL_GRID, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "FAILED" not in proc.stderr
    assert not Path(str(out) + ".tmp").exists()
    return pd.read_csv(out)


def test_columns_and_kinds(smoke: pd.DataFrame) -> None:
    assert list(smoke.columns) == COLUMNS
    assert set(smoke["kind"]) == KINDS
    assert set(smoke.loc[smoke.kind == "attention", "op"]) == {"decode", "chain", "tree", "prefill"}
    assert set(smoke.loc[smoke.kind == "forward", "op"]) == {"decode", "chain", "tree"}
    assert set(smoke.loc[smoke.kind == "gemm", "op"]) == {
        "qkv_proj",
        "o_proj",
        "gate_up_proj",
        "down_proj",
    }
    assert set(smoke.loc[smoke.kind == "elementwise", "op"]) == {
        "rmsnorm",
        "silu_mul",
        "rope",
        "add",
    }
    tree = smoke[smoke.tree == 1]
    assert set(tree["kind"]) == {"attention", "forward"}
    assert (tree["op"] == "tree").all() and (tree["q_per_seq"] == 4).all()


def test_times_and_run_columns(smoke: pd.DataFrame) -> None:
    assert (smoke.time_ms_p10 > 0).all()
    assert (smoke.time_ms_p10 <= smoke.time_ms_median).all()
    assert (smoke.time_ms_median <= smoke.time_ms_p90).all()
    assert (smoke.device == "cpu").all() and (smoke.dtype == "float32").all()
    assert (smoke.timer == "perf_counter").all() and (smoke.cuda_graphs == 0).all()
    assert (smoke.repeats == 2).all() and (smoke.warmup == 1).all() and (smoke.truncated == 0).all()
    assert (smoke.tp == 1).all() and (smoke.model == "tiny").all()
    # tiny has 2 layers, all built by default: nothing is scaled
    assert (smoke.scaled_to_all_layers == 0).all()
    whole = smoke.kind.isin(["forward", "prefill"])
    assert (smoke.loc[whole, "layers_timed"] == 2).all()
    assert (smoke.loc[~whole, "layers_timed"] == 1).all()
    with_attention = smoke.kind.isin(["attention", "forward", "prefill", "draft_head"])
    assert smoke.loc[with_attention, "attention_impl"].str.startswith("torch_sdpa").all()
    assert smoke.loc[~with_attention, "attention_impl"].isna().all()


def test_token_counts_and_gemm_shapes(smoke: pd.DataFrame) -> None:
    seq = smoke[smoke.kind.isin(["attention", "forward", "prefill", "draft_head"])]
    assert (seq.num_tokens == seq.num_seqs * seq.q_per_seq).all()
    assert (smoke.loc[smoke.kind == "prefill", "num_seqs"] == 1).all()
    assert set(smoke.loc[smoke.kind == "prefill", "context_len"]) == {0, 16}
    assert (smoke.loc[smoke.kind == "draft_head", "q_per_seq"] == 1).all()
    gemm = smoke[smoke.kind.isin(["gemm", "lm_head"])]
    assert (gemm.m == gemm.num_tokens).all()
    assert set(gemm.m) == {1, 8}
    assert smoke.loc[~smoke.kind.isin(["gemm", "lm_head"]), ["m", "k", "n"]].isna().all().all()
    t = TINY
    expected = {
        "qkv_proj": (t["hidden"], (t["heads"] + 2 * t["kv_heads"]) * t["head_dim"]),
        "o_proj": (t["heads"] * t["head_dim"], t["hidden"]),
        "gate_up_proj": (t["hidden"], 2 * t["inter"]),
        "down_proj": (t["inter"], t["hidden"]),
        "lm_head": (t["hidden"], t["vocab"]),
    }
    for op, (k, n) in expected.items():
        rows = gemm[gemm.op == op]
        assert len(rows) == 2 and (rows.k == k).all() and (rows.n == n).all(), op


def test_tree_mask(tf) -> None:
    for size in (1, 2, 7, 16):
        parents = tf.tree_parents(size, seed=3)
        assert parents == tf.tree_parents(size, seed=3)  # deterministic
        assert parents[0] == -1 and all(0 <= p < i for i, p in enumerate(parents) if i)
        mask = tf.tree_mask(parents)
        for i in range(size):
            ancestors, p = {i}, parents[i]
            while p >= 0:
                ancestors.add(p)
                p = parents[p]
            assert {j for j in range(size) if mask[i, j]} == ancestors
            assert mask[i, 0]  # everyone sees the root
            siblings = [j for j in range(i + 1, size) if parents[j] == parents[i]]
            assert not any(mask[i, j] for j in siblings)
    full = tf.verify_mask(3, 5, [-1, 0, 0])
    assert full.shape == (3, 8) and full[:, :5].all()
    assert not full[1, 7] and not full[2, 6]  # siblings 1 and 2 do not see each other
    chain = tf.verify_mask(3, 2)
    assert chain.tolist() == [[True] * 3 + [False] * 2, [True] * 4 + [False], [True] * 5]
    assert tf.tree_depths([-1, 0, 1, 0]) == [0, 1, 2, 1]


def test_packed_gqa_attention_matches_repeated_kv(tf) -> None:
    s = tf.Shard(hidden=64, inter=128, heads=8, kv_heads=2, head_dim=16, vocab=256, draft_vocab=256)
    cpu = torch.device("cpu")
    for mode, q, ctx in (("decode", 1, 9), ("chain", 5, 7), ("prefill", 6, 0), ("tree", 6, 4)):
        parents = tf.tree_parents(q, 0) if mode == "tree" else None
        attend, impl = tf.make_attention(mode, q, ctx, s, cpu, parents)
        x = torch.randn(3, q, 8, 16)
        k, v = torch.randn(3, 2, ctx + q, 16), torch.randn(3, 2, ctx + q, 16)
        mask = None if mode == "decode" else tf.verify_mask(q, ctx, parents)
        ref = torch.nn.functional.scaled_dot_product_attention(
            x.transpose(1, 2), k.repeat_interleave(4, 1), v.repeat_interleave(4, 1), attn_mask=mask
        )
        got = attend(x, k, v)
        assert torch.allclose(got, ref.transpose(1, 2).reshape(3, q, -1), atol=1e-5), mode
        assert impl.startswith("torch_sdpa")


def test_tp_and_layer_scaling(tmp_path: Path) -> None:
    out = tmp_path / "tp2.csv"
    grid = ["--batch-sizes", "2", "--q-per-seq", "1,2", "--context-lens", "8", "--tree-sizes", "3"]
    proc = run(*SMALL_GRID, *grid, "--tp", "2", "--layers", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "scale the layer part by 2" in proc.stdout and "no collectives timed" in proc.stdout
    df = pd.read_csv(out)
    assert (df.tp == 2).all()
    qkv = df[df.op == "qkv_proj"]
    # 4 heads and 2 KV heads of 16 over 2 GPUs: (2 + 2 * 1) * 16 against (4 + 2 * 2) * 16 at tp 1
    assert (qkv.n == 64).all() and (qkv.k == 64).all()
    assert (df.loc[df.op == "lm_head", "n"] == 128).all()
    whole = df.kind.isin(["forward", "prefill"])
    assert (df.loc[whole, "scaled_to_all_layers"] == 1).all()
    assert (df.loc[whole, "layers_timed"] == 1).all() and (df.loc[whole, "layers_total"] == 2).all()
    assert (df.loc[~whole, "scaled_to_all_layers"] == 0).all()


def test_bad_argument_exits_2_without_output(tmp_path: Path) -> None:
    out = tmp_path / "bad.csv"
    proc = run(*SMALL_GRID, "--batch-sizes", "-1", "--out", str(out))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --batch-sizes:")
    assert not out.exists() and not Path(str(out) + ".tmp").exists()


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--model", "nope"], "--model"),
        (["--config", "/nonexistent/config.json"], "--config"),
        (["--model", "tiny", "--tp", "3"], "--tp"),
        (["--model", "tiny", "--cuda-graphs"], "--cuda-graphs"),
        (["--model", "tiny", "--repeats", "0"], "--repeats"),
        (["--model", "tiny", "--layers", "3"], "--layers"),
        (["--model", "tiny"], "--out"),
    ],
)
def test_argument_errors_in_process(tf, capsys, args: list[str], field: str) -> None:
    assert tf.main([*args, "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {field}: ") and "\n" not in err


def test_config_file_and_list(tf, tmp_path: Path, capsys) -> None:
    config = {
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 6,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "vocab_size": 512,
    }
    path = tmp_path / "my-model" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    assert tf.main(["--config", str(path), "--device", "cpu", "--list"]) == 0
    out = capsys.readouterr().out
    assert "gemm/qkv_proj tokens=1 m=1 k=128 n=192" in out  # (8 + 2 * 2) * 16
    assert out.strip().splitlines()[-1].startswith(f"{len(out.strip().splitlines()) - 1} cases")


# a dense config.json the harness builds, which the refusal tests add one key to
TINY_CONFIG = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 6,
    "num_attention_heads": 8,
    "vocab_size": 512,
}


def test_a_moe_or_mla_config_a_folder_for_out_are_refused_before_timing(
    tf, tmp_path: Path, capsys
) -> None:
    """QA: a Mixtral config was timed as a dense model under its name, and a folder given as
    --out failed only after the whole run."""
    for extra, words in (({"num_local_experts": 8}, "MoE model"), ({"kv_lora_rank": 512}, "MLA")):
        path = tmp_path / f"{words.split()[0]}.json"
        path.write_text(json.dumps(TINY_CONFIG | extra))
        assert tf.main(["--config", str(path), "--device", "cpu", "--list"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: --config: ") and (words in err or "latent" in err)
    assert tf.main(["--model", "tiny", "--device", "cpu", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: --out: ")
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"moe_num_experts": 64}, "MoE model (moe_num_experts 64)"),  # ERNIE-4.5-MoE
        ({"hybrid_override_pattern": "M-M-M*-"}, "layers other than attention"),  # Nemotron-H
        ({"mamba_d_ssm": 1024}, "layers other than attention"),  # Falcon-H1
        ({"layer_types": ["linear_attention", "full_attention"]}, "linear_attention"),
        ({"text_config": {"hidden_size": 128}}, "nests its language model's shape"),  # Llama-4
    ],
)
def test_a_config_whose_layers_the_harness_cannot_build_is_refused(
    tf, tmp_path: Path, capsys, extra: dict, words: str
) -> None:
    """QA: ERNIE-4.5-MoE, Nemotron-H and Falcon-H1 configs were timed as dense GQA models
    under their names; Llama-4's nested shape failed as 'hidden_size ... got None'."""
    cfg = {k: v for k, v in TINY_CONFIG.items() if "text_config" not in extra or k != "hidden_size"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg | extra))
    assert tf.main(["--config", str(path), "--device", "cpu", "--list"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --config: ") and words in err


def test_an_out_that_fails_at_the_end_keeps_the_rows_elsewhere(tf, tmp_path, monkeypatch, capsys):
    """QA: a failed final write (a full disk; /proc as root, which os.access passes) lost
    every row timed in a traceback; it is one error line, exit 2, the rows kept."""
    written = tf.write_csv

    def full_disk(path, rows, truncated):
        if str(path).startswith(str(tmp_path)):
            raise OSError(28, "No space left on device")
        written(path, rows, truncated)

    monkeypatch.setattr(tf, "write_csv", full_disk)
    assert tf.main([*SMALL_GRID, "--out", str(tmp_path / "t.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: --out: could not write") and "No space left" in err
    spare = Path(err.rsplit(" are in ", 1)[1])
    assert len(pd.read_csv(spare)) > 0
    spare.unlink()


def test_an_interrupted_run_says_so_and_does_not_exit_0(tf, tmp_path, monkeypatch, capsys):
    """QA: Ctrl-C was reported as the --max-seconds budget, exit status 0."""
    timed = tf.time_case

    def interrupted(c, *args, **kwargs):
        if c.kind == "forward":
            raise KeyboardInterrupt
        return timed(c, *args, **kwargs)

    monkeypatch.setattr(tf, "time_case", interrupted)
    out = tmp_path / "cut.csv"
    assert tf.main([*SMALL_GRID, "--out", str(out)]) == 130
    said = capsys.readouterr().out
    assert "interrupted)" in said and "--max-seconds" not in said
    assert pd.read_csv(out).truncated.eq(1).all()


def test_max_tokens_bounds_every_case(tf, capsys) -> None:
    assert tf.main([*SMALL_GRID, "--max-tokens", "4", "--list"]) == 0
    out = capsys.readouterr().out
    assert "gemm/qkv_proj tokens=1 " in out and "tokens=8 " not in out


def test_budget_truncates(tf, tmp_path: Path, capsys) -> None:
    out = tmp_path / "cut.csv"
    args = [*SMALL_GRID, "--max-seconds", "1e-9", "--out", str(out)]
    assert tf.main(args) == 1  # nothing timed
    assert "budget" in capsys.readouterr().out
    assert list(pd.read_csv(out).columns) == COLUMNS
    rows = [
        dict.fromkeys(COLUMNS, 1) | {"time_ms_median": 1.0, "time_ms_p10": 1.0, "time_ms_p90": 1.0}
    ]
    tf.write_csv(str(out), rows, truncated=True)
    assert pd.read_csv(out).truncated.tolist() == [1]


def test_a_case_failing_with_any_error_still_writes_the_rest(tf, tmp_path, monkeypatch, capsys):
    """QA: only RuntimeError was caught, so a TypeError after the per-operator cases lost every
    row timed before it; any failed case now leaves the CSV written and exit status 1."""
    timed = tf.time_case

    def failing(c, *args, **kwargs):
        if c.kind == "forward":
            raise TypeError("zip() takes no keyword arguments")
        return timed(c, *args, **kwargs)

    monkeypatch.setattr(tf, "time_case", failing)
    out = tmp_path / "partial.csv"
    assert tf.main([*SMALL_GRID, "--out", str(out)]) == 1
    assert "FAILED forward" in capsys.readouterr().err
    rows = pd.read_csv(out)
    assert len(rows) and "forward" not in set(rows.kind) and "gemm" in set(rows.kind)


def launch(preamble: str, *args: str) -> subprocess.CompletedProcess:
    """The script run as ``python time_forward.py ARGS`` after ``preamble``, in a fresh
    interpreter."""
    code = f"{preamble}\nimport runpy, sys\nsys.argv = [{str(SCRIPT)!r}, *{list(args)!r}]\n"
    code += f"runpy.run_path({str(SCRIPT)!r}, run_name='__main__')\n"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_runs_with_only_torch_and_numpy_importable(tmp_path):
    """The bare CUDA image has the standard library, torch and numpy: the script times and
    writes its CSV with simspec and every other third-party package simspec uses blocked."""
    blocked = "simspec pandas yaml scipy pydantic typer rich simpy plotly streamlit ray".split()
    preamble = (
        "import sys\n"
        f"BLOCKED = {set(blocked)!r}\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] in BLOCKED:\n"
        "            raise ImportError(f'{name} is not on a bare CUDA image')\n"
        "sys.meta_path.insert(0, Block())\n"
    )
    out = tmp_path / "bare.csv"
    proc = launch(preamble, *SMALL_GRID, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert out.read_text().startswith("kind,op,")


def test_an_older_python_is_refused_before_anything_runs(tmp_path):
    out = tmp_path / "old.csv"
    proc = launch("import sys\nsys.version_info = (3, 9, 18, 'final', 0)", "--out", str(out))
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: python: needs Python 3.10 or newer")
    assert not out.exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the case of a machine without CUDA")
def test_list_shows_a_gpu_runs_cases_on_a_machine_without_one(tf, capsys):
    """QA: --list --device cuda was refused ("CUDA is not available") where nothing is timed,
    so a GPU run's grid could not be looked at before the GPU was lent."""
    assert tf.main(["--model", "tiny", "--device", "cuda", "--list"]) == 0
    gpu = capsys.readouterr().out
    assert tf.main(["--model", "tiny", "--device", "cpu", "--list"]) == 0
    cpu = capsys.readouterr().out

    def count(text: str) -> int:
        return int(text.strip().splitlines()[-1].split()[0])  # "N cases (...)"

    assert count(gpu) > count(cpu)


def test_a_size_given_twice_is_timed_once(tf) -> None:
    """QA: --gemm-tokens 1,1,2 timed the 1-token rows twice."""
    assert tf.parse_list("--gemm-tokens", "1,1,2,1", 1) == [1, 2]
