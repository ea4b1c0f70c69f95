"""calibration/capture_tokens.py on the CPU with tiny random Llama models: the token trace simspec
loads, the acceptance trace (acc_len against a brute-force draft chain, alpha against the
definition), vLLM output conversion, argument errors and atomic writes."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simspec.catalog.token_traces import load_token_trace
from simspec.catalog.traces import load_trace

pytestmark = pytest.mark.slow  # the torch harness (a model forward per test)

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "calibration" / "capture_tokens.py"
_spec = importlib.util.spec_from_file_location("capture_tokens", SCRIPT)
ct = importlib.util.module_from_spec(_spec)
sys.modules["capture_tokens"] = ct  # dataclasses look their module up there
_spec.loader.exec_module(ct)

VOCAB = 64
PROMPTS = [[1, 5, 9, 14, 3], [1, 7, 7, 30, 41, 12, 8], [1, 60]]
NEW = 14
DRAFT_LEN = 4


def _write_jsonl(path: Path, records: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """A tiny random Llama (with a word-level tokenizer and a chat template) and a draft that is
    the same model with noise added, so it agrees on some positions and not on others."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    root = tmp_path_factory.mktemp("models")
    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    target = transformers.LlamaForCausalLM(config).eval()
    target.save_pretrained(root / "target")
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"w{i}": i for i in range(3, VOCAB)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    tok.chat_template = (
        "{{ bos_token }} {% for m in messages %}{{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}w9{% endif %}"
    )
    tok.save_pretrained(root / "target")
    draft = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for (_, d), (_, t) in zip(draft.named_parameters(), target.named_parameters(), strict=True):
            d.copy_(t + 0.2 * t.std() * torch.randn_like(t))
    draft.save_pretrained(root / "draft")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the models are tiny: threads only add contention on a busy machine
    yield {"target": str(root / "target"), "draft": str(root / "draft"), "hf": target, "d": draft}
    torch.set_num_threads(threads)


@pytest.fixture
def prompts(tmp_path) -> str:
    return _write_jsonl(
        tmp_path / "prompts.jsonl",
        [{"id": f"r{i}", "prompt_token_ids": p} for i, p in enumerate(PROMPTS)],
    )


def _hf(model: str, prompts: str, out: str, *extra: str) -> list[str]:
    return [
        "hf", "--model", model, "--prompts", prompts, "--out", out,
        "--max-new-tokens", str(NEW), "--device", "cpu", "--progress", "0", *extra,
    ]  # fmt: skip


def _last_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -1]


def _brute_acc_len(draft, prompt: list[int], gen: list[int], t: int, draft_len: int) -> int:
    """The definition: the draft continues prompt + gen[:t] on its own, token by token."""
    ctx, accepted = prompt + gen[:t], 0
    for i in range(draft_len):
        token = int(_last_logits(draft, ctx).argmax())
        if t + i >= len(gen) or token != gen[t + i]:
            break
        accepted += 1
        ctx.append(token)
    return accepted + 1


def test_acc_len_is_one_plus_the_run_of_matches_capped_at_the_draft_length():
    argmax = np.array([1, 2, 9, 4, 5])
    generated = np.array([1, 2, 3, 4, 5])
    assert ct.acc_len_from_argmax(argmax, generated, 16).tolist() == [3, 2, 1, 3, 2]
    assert ct.acc_len_from_argmax(argmax, generated, 1).tolist() == [2, 2, 1, 2, 2]


def test_alpha_is_the_overlap_of_the_softmaxes_over_the_shared_ids():
    p = torch.tensor([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0]])
    q = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 2.0, 0.0, 0.0]])  # one id the target lacks
    alpha = ct.overlap(p, q, 1.0).numpy()
    assert alpha[0] == pytest.approx(3 * 0.25)  # min(1/3, 1/4) on the three shared ids
    e = np.exp(2.0)
    assert alpha[1] == pytest.approx(2 / (e + 3) + 1 / (e + 2))  # p and q peak apart
    assert ct.overlap(p, q, 0.0).tolist() == [1.0, 0.0]  # T = 0: do the argmaxes agree


def test_hf_writes_a_token_trace_that_simspec_loads(models, prompts, tmp_path):
    out = str(tmp_path / "mine.tokens.jsonl.gz")
    assert ct.main(_hf(models["target"], prompts, out, "--ignore-eos")) == 0
    trace = load_token_trace(out)
    assert trace.ids == ("r0", "r1", "r2")
    assert [p.tolist() for p in trace.prompts] == PROMPTS
    assert trace.output_len.tolist() == [NEW] * len(PROMPTS)
    # greedy: every generated token is the target's argmax on what came before
    prompt, gen = PROMPTS[1], trace.outputs[1].tolist()
    for t in (0, 5, NEW - 1):
        assert int(_last_logits(models["hf"], prompt + gen[:t]).argmax()) == gen[t]
    # a stop token ends the request and is kept, as in vLLM's token_ids
    stop = gen[4]
    first = gen.index(stop)
    out2 = str(tmp_path / "stopped.jsonl")
    assert ct.main(_hf(models["target"], prompts, out2, "--stop-token-ids", str(stop))) == 0
    assert load_token_trace(out2).outputs[1].tolist() == gen[: first + 1]


def test_text_and_chat_prompts_are_tokenized_once_with_bos(models, tmp_path):
    prompts = _write_jsonl(
        tmp_path / "p.jsonl",
        [{"prompt": "w5 w6"}, {"messages": [{"role": "user", "content": "w5 w6"}]}],
    )
    out = str(tmp_path / "t.jsonl")
    assert ct.main(_hf(models["target"], prompts, out, "--max-new-tokens", "2")) == 0
    trace = load_token_trace(out)
    assert trace.prompts[0].tolist()[-2:] == [5, 6]
    assert trace.prompts[1].tolist() == [1, 5, 6, 9]  # the template's BOS, not a second one


def test_cli_with_the_target_as_its_own_draft_accepts_every_draft_token(models, prompts, tmp_path):
    out, acc = tmp_path / "t.jsonl", tmp_path / "acc.jsonl"
    args = _hf(models["target"], prompts, str(out), "--ignore-eos", "--draft-len", "5")
    args += ["--draft-model", models["target"], "--acceptance-out", str(acc), "--name", "self"]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ | {"OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("wrote ")
    trace = load_trace(str(acc), "self")
    assert trace.num_requests == len(PROMPTS)
    assert trace.prompt_len.tolist() == [len(p) for p in PROMPTS]
    for i in range(trace.num_requests):
        n = NEW
        expected = 1 + np.minimum(5, n - np.arange(n))  # capped only by the output's end
        assert trace.request(i).tolist() == expected.tolist()
    for line in acc.read_text().splitlines():
        assert np.allclose(json.loads(line)["alpha"]["self"], 1.0, atol=1e-5)


def test_a_different_draft_matches_the_brute_force_chain_and_the_alpha_definition(
    models, prompts, tmp_path
):
    out, acc = str(tmp_path / "t.jsonl"), str(tmp_path / "acc.jsonl")
    args = _hf(models["target"], prompts, out, "--ignore-eos", "--draft-len", str(DRAFT_LEN))
    args += ["--draft-model", models["draft"], "--acceptance-out", acc, "--temperature", "0.7"]
    assert ct.main(args) == 0
    tokens = load_token_trace(out)
    trace = load_trace(acc, "draft")
    records = [json.loads(line) for line in Path(acc).read_text().splitlines()]
    values = trace.acc
    assert values.min() >= 1 and values.max() <= DRAFT_LEN + 1
    # the draft is neither perfect nor useless: some steps reject at once, some take the whole chain
    assert (values == 1).any() and (values == DRAFT_LEN + 1).any()
    for i, rec in enumerate(records):
        prompt, gen = tokens.prompts[i].tolist(), tokens.outputs[i].tolist()
        alpha = np.array(rec["alpha"]["draft"])
        assert len(alpha) == len(gen) and ((alpha >= 0) & (alpha <= 1)).all()
        for t in range(len(gen)):
            assert trace.request(i)[t] == _brute_acc_len(models["d"], prompt, gen, t, DRAFT_LEN)
        for t in (0, len(gen) // 2):
            p = torch.softmax(_last_logits(models["hf"], prompt + gen[:t]) / 0.7, -1)
            q = torch.softmax(_last_logits(models["d"], prompt + gen[:t]) / 0.7, -1)
            assert alpha[t] == pytest.approx(float(torch.minimum(p, q).sum()), abs=1e-5)
    # the accept sub-command on the same token trace writes the same acceptance trace
    again = str(tmp_path / "again.jsonl")
    accept = ["accept", "--tokens", out, "--model", models["target"], "--draft-model"]
    accept += [models["draft"], "--out", again, "--draft-len", str(DRAFT_LEN)]
    assert ct.main([*accept, "--temperature", "0.7", "--device", "cpu", "--progress", "0"]) == 0
    assert Path(again).read_text() == Path(acc).read_text()


def test_saved_vllm_outputs_convert_without_vllm(tmp_path):
    outputs = [
        {"request_id": "a", "prompt_token_ids": [1, 2, 3], "outputs": [{"token_ids": [4, 5]}]},
        {"request_id": "b", "prompt_token_ids": [1, 9], "outputs": [{"token_ids": [7], "x": 0}]},
    ]
    as_list = tmp_path / "saved.json"
    as_list.write_text(json.dumps(outputs))
    as_lines = _write_jsonl(tmp_path / "saved.jsonl", outputs)
    for i, src in enumerate((str(as_list), as_lines)):
        out = str(tmp_path / f"out{i}.tokens.jsonl.gz")
        assert ct.main(["vllm", "--from-json", src, "--out", out]) == 0
        trace = load_token_trace(out)
        assert trace.ids == ("a", "b")
        assert [o.tolist() for o in trace.outputs] == [[4, 5], [7]]
        gzip.decompress(Path(out).read_bytes())  # really gzipped


def test_vllm_run_writes_the_prompt_and_output_token_ids_it_returns(monkeypatch, prompts, tmp_path):
    """The wiring, against a stand-in for vllm (the real one needs a GPU)."""
    seen = {}

    class Completion:
        def __init__(self, ids):
            self.token_ids = ids

    class Output:
        def __init__(self, prompt):
            self.prompt_token_ids = prompt
            self.outputs = [Completion([prompt[-1] + 1, 2])]

    class LLM:
        def __init__(self, **kwargs):
            seen["llm"] = kwargs

        def generate(self, inputs, params):
            seen["params"] = params
            return [Output(i["prompt_token_ids"]) for i in inputs]

    fake = type(sys)("vllm")
    fake.LLM, fake.SamplingParams = LLM, lambda **kw: kw
    monkeypatch.setitem(sys.modules, "vllm", fake)
    out = str(tmp_path / "v.jsonl")
    args = ["vllm", "--model", "m", "--prompts", prompts, "--out", out, "--max-new-tokens", "7"]
    assert ct.main([*args, "--llm-kwargs", '{"max_model_len": 256}']) == 0
    assert seen["params"]["temperature"] == 0.0 and seen["params"]["max_tokens"] == 7
    assert seen["llm"]["model"] == "m" and seen["llm"]["max_model_len"] == 256
    trace = load_token_trace(out)
    assert [p.tolist() for p in trace.prompts] == PROMPTS
    assert [o.tolist() for o in trace.outputs] == [[p[-1] + 1, 2] for p in PROMPTS]


def test_missing_libraries_and_bad_input_fail_in_one_line_and_write_nothing(
    monkeypatch, prompts, tmp_path, capsys
):
    out = tmp_path / "never.jsonl"
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError
    vllm_run = ["vllm", "--model", "m", "--prompts", prompts, "--out", str(out)]
    assert ct.main(vllm_run) == 2
    monkeypatch.setitem(sys.modules, "transformers", None)
    assert ct.main(_hf("m", prompts, str(out))) == 2
    bad = _write_jsonl(tmp_path / "bad.jsonl", [{"prompt_token_ids": [1, -2]}])
    assert ct.main(_hf("m", bad, str(out))) == 2
    assert ct.main(["hf", "--model", "m", "--prompts", prompts, "--out", str(out),
                    "--draft-model", "d"]) == 2  # fmt: skip
    errors = capsys.readouterr().err.strip().splitlines()
    assert errors == [
        "error: vllm: not installed; `pip install vllm` (or use --from-json)",
        "error: transformers: not installed; `pip install transformers` (or use the vllm "
        "sub-command)",
        f"error: --prompts: {bad} line 1: prompt_token_ids must be a non-empty list of "
        "integers >= 0",
        "error: --acceptance-out: required with --draft-model",
    ]
    assert not out.exists()


def test_a_failure_while_writing_leaves_no_file_behind(tmp_path):
    def records():
        yield {"id": "0", "prompt_token_ids": [1], "generated_token_ids": [2]}
        raise RuntimeError("model crashed")

    good = [{"id": "0", "prompt_token_ids": [1], "generated_token_ids": [2]}]
    with pytest.raises(RuntimeError):
        ct.write_atomically(
            [(str(tmp_path / "a.jsonl.gz"), good), (str(tmp_path / "b"), records())]
        )
    assert list(tmp_path.iterdir()) == []
