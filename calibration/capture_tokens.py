#!/usr/bin/env python3
"""Capture a token trace (and optionally a draft's acceptance trace) from a run of your own model.

Writes the token-trace JSONL that simspec reads (``simspec/catalog/token_traces.py``): one object
per request, ``{"id", "prompt_token_ids", "generated_token_ids"}``, gzipped when the path ends in
``.gz``. simspec replays lookup drafters (n-gram, prompt lookup, suffix trees) exactly on these
streams, so a trace of *your* model on *your* prompts says what those drafters would accept there.
Needs only the standard library, numpy and torch, plus transformers (``hf``, ``accept``) or vLLM
(``vllm``), each imported only by the sub-command that uses it: copy this one file to a CUDA
machine and run it.

    python capture_tokens.py hf --model meta-llama/Llama-3.1-8B-Instruct \\
        --prompts prompts.jsonl --max-new-tokens 512 --out mine.tokens.jsonl.gz
    python capture_tokens.py vllm --model meta-llama/Llama-3.1-8B-Instruct \\
        --prompts prompts.jsonl --max-new-tokens 512 --out mine.tokens.jsonl.gz
    python capture_tokens.py vllm --from-json saved_outputs.jsonl --out mine.tokens.jsonl.gz
    python capture_tokens.py accept --tokens mine.tokens.jsonl.gz --model TARGET \\
        --draft-model meta-llama/Llama-3.2-1B-Instruct --out mine.acceptance.jsonl

Prompt file: JSONL, one request per line, with ``prompt`` (text, tokenized with the tokenizer's
special tokens, as ``LLM.generate`` does with a string), ``messages`` (a chat list; the chat
template is rendered with the generation prompt and tokenized *without* adding special tokens,
since the template already holds BOS), or ``prompt_token_ids`` (used as given; no tokenizer
needed). ``id`` is optional (default: the line's index).

Generation is greedy (temperature 0). The generated ids end with the stop token when one ended
the request, as vLLM's ``CompletionOutput.token_ids`` does (its stop check reads the last
appended token; vllm-project/vllm, vllm/v1/core/sched/utils.py ``check_stop``, commit 6110ea29).
Stop tokens are the generation config's ``eos_token_id`` plus the tokenizer's, unless
``--ignore-eos``.

Acceptance trace (``hf --draft-model``, or ``accept`` on an existing token trace): one object per
request, ``{"id", "prompt_len", "output_len", "acc_len": {NAME: [...]}, "alpha": {NAME: [...]}}``,
the packaged format (``simspec/catalog/traces.py``; a scenario replays it with
``acceptance: {acc_len: PATH, acc_len_method: NAME}``), where for every output position t, with
context c_t = prompt + generated[:t]:

- ``acc_len[t]`` = tokens a greedy speculative step starting at t produces with a chain of
  ``--draft-len`` L draft tokens: 1 + the number of draft tokens accepted, the draft continuing
  c_t greedily and each token accepted while it equals generated[t + i]. Only the output is
  compared, so acc_len[t] <= output_len - t + 1.
- ``alpha[t]`` = sum_x min(p_t(x), q_t(x)), the probability that the exact sampling rule accepts
  the draft's first token at t (Leviathan et al. 2023, arXiv 2211.17192, section 3), with p_t and
  q_t the target's and the draft's next-token distributions at ``--temperature`` (default 1; at 0 it
  is 1 when the two argmaxes agree, else 0). When the vocabularies differ in size, x runs over the
  shared prefix of ids (mass outside it cannot overlap).

Cost, and why it is this low: while the draft's tokens keep matching, its context stays a prefix
of prompt + generated, so its i-th greedy token from c_t is its greedy token at position t + i - 1
of the *real* stream. acc_len[t] is therefore 1 + min(L, run of consecutive positions from t at
which the draft's argmax equals the generated token), read off ONE draft forward over prompt +
generated; the draft never has to continue on its own (a mismatch ends the step, whatever follows).
Per request: the target's greedy generation (prefill + one KV-cached decode step per token), then
one target forward and one draft forward over prompt + generated (both give every position's
logits, for p_t and q_t), plus O(output_len * vocab) for alpha. Batch size 1, so the ``hf``
generation is slow for many requests: capture tokens with ``vllm`` and run ``accept`` on them.

EAGLE-style draft heads (EAGLE, EAGLE-3, MTP) are NOT supported: their input is the target's
hidden states (EAGLE-3: features fused from several target layers) and, past the first draft
token, their own predicted features, so the prefix argument above does not hold (each t needs the
head's own chain) and loading one needs model-specific code for each checkpoint layout. Only a
standalone Hugging Face causal LM that shares the target's tokenizer can be the draft.

Atomic output: every file is written to a temporary file beside it and renamed only when all are
complete, so a failed run leaves no partial output. Bad arguments or input exit with status 2 and
one line ``error: <field>: <message>``.
"""

from __future__ import annotations

import argparse
import gzip
import inspect
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SCRIPT_VERSION = "1"
DTYPES = ("auto", "bfloat16", "float16", "float32")
ALPHA_CHUNK = 256  # positions per softmax chunk: bounds the float32 copies of [chunk, vocab]

EAGLE_NOTE = (
    "EAGLE-style heads (EAGLE, EAGLE-3, MTP) are not supported as --draft-model: they read the "
    "target's hidden states and their own predicted features, so every position needs the head's "
    "own draft chain and each checkpoint layout needs model-specific loading code."
)


class UsageError(Exception):
    """A bad argument or input: reported as ``error: <field>: <message>``, exit status 2."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")


@dataclass
class Request:
    """One request: its id and prompt, then the target's greedy output once generated."""

    id: str
    prompt: dict  # exactly one of prompt / messages / prompt_token_ids
    prompt_ids: list[int] | None = None
    generated: list[int] | None = None


# --------------------------------------------------------------------------------------------
# input


def _read_text(path: str, field: str) -> str:
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return f.read()
        return Path(path).read_text(encoding="utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise UsageError(field, f"cannot read {path!r}: {exc}") from None


def _jsonl(path: str, field: str) -> Iterator[tuple[str, dict]]:
    """(where, object) for each non-blank line of a JSONL(.gz) file."""
    for lineno, line in enumerate(_read_text(path, field).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path} line {lineno}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(field, f"{where}: not JSON ({exc.msg})") from None
        if not isinstance(rec, dict):
            raise UsageError(field, f"{where}: expected a JSON object")
        yield where, rec


def _token_ids(value: object, where: str, key: str, field: str) -> list[int]:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in value)
    ):
        raise UsageError(field, f"{where}: {key} must be a non-empty list of integers >= 0")
    return list(value)


def read_prompts(path: str, limit: int | None = None) -> list[Request]:
    """The prompt file's requests (``prompt``, ``messages`` or ``prompt_token_ids`` each)."""
    requests: list[Request] = []
    for where, rec in _jsonl(path, "--prompts"):
        kinds = [k for k in ("prompt", "messages", "prompt_token_ids") if k in rec]
        if len(kinds) != 1:
            raise UsageError(
                "--prompts", f"{where}: needs exactly one of prompt, messages, prompt_token_ids"
            )
        kind = kinds[0]
        value = rec[kind]
        if kind == "prompt" and not (isinstance(value, str) and value):
            raise UsageError("--prompts", f"{where}: prompt must be a non-empty string")
        if kind == "messages" and not (
            isinstance(value, list) and value and all(isinstance(m, dict) for m in value)
        ):
            raise UsageError("--prompts", f"{where}: messages must be a non-empty list of objects")
        req = Request(str(rec.get("id", len(requests))), {kind: value})
        if kind == "prompt_token_ids":
            req.prompt_ids = _token_ids(value, where, kind, "--prompts")
        requests.append(req)
        if limit is not None and len(requests) >= limit:
            break
    if not requests:
        raise UsageError("--prompts", f"{path} holds no requests")
    return requests


def read_token_trace(path: str, field: str = "--tokens") -> list[Request]:
    """Requests with their prompt and generated ids, from a token-trace JSONL(.gz)."""
    requests = []
    for where, rec in _jsonl(path, field):
        prompt = _token_ids(rec.get("prompt_token_ids"), where, "prompt_token_ids", field)
        generated = _token_ids(rec.get("generated_token_ids"), where, "generated_token_ids", field)
        requests.append(
            Request(str(rec.get("id", len(requests))), {}, prompt_ids=prompt, generated=generated)
        )
    if not requests:
        raise UsageError(field, f"{path} holds no requests")
    return requests


def tokenize(req: Request, tokenizer) -> list[int]:
    """A request's prompt token ids (see the module docstring for the rules)."""
    if req.prompt_ids is not None:
        return req.prompt_ids
    if tokenizer is None:
        raise UsageError("--prompts", f"request {req.id}: text prompts need the model's tokenizer")
    if "messages" in req.prompt:
        text = tokenizer.apply_chat_template(
            req.prompt["messages"], add_generation_prompt=True, tokenize=False
        )
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    else:
        ids = tokenizer(req.prompt["prompt"])["input_ids"]
    if not ids:
        raise UsageError("--prompts", f"request {req.id}: the prompt tokenizes to nothing")
    return [int(x) for x in ids]


def vllm_output_record(rec: dict, where: str, index: int) -> dict:
    """A token-trace record from one saved RequestOutput-like dict.

    Expects ``prompt_token_ids`` and ``outputs[0].token_ids`` (the fields of vLLM's
    ``RequestOutput`` and ``CompletionOutput``); the id is ``request_id``, else ``id``, else the
    index. Already-converted records (``generated_token_ids``) pass through.
    """
    field = "--from-json"
    prompt = _token_ids(rec.get("prompt_token_ids"), where, "prompt_token_ids", field)
    key = "generated_token_ids"
    if key in rec:
        generated = rec[key]
    else:
        key = "outputs[0].token_ids"
        outputs = rec.get("outputs")
        if not isinstance(outputs, list) or not outputs or not isinstance(outputs[0], dict):
            raise UsageError(field, f"{where}: needs outputs[0].token_ids (or generated_token_ids)")
        generated = outputs[0].get("token_ids")
    generated = _token_ids(generated, where, key, field)
    rid = rec.get("request_id", rec.get("id", index))
    return {"id": str(rid), "prompt_token_ids": prompt, "generated_token_ids": generated}


def convert_vllm_json(path: str) -> list[dict]:
    """Token-trace records from a saved JSON list (or JSONL) of vLLM RequestOutput-like dicts."""
    text = _read_text(path, "--from-json")
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        whole = None  # not one JSON document: read as JSONL
    if isinstance(whole, dict):
        whole = [whole]
    if isinstance(whole, list):
        items = [(f"{path} item {i}", r) for i, r in enumerate(whole)]
    else:
        items = list(_jsonl(path, "--from-json"))
    records = []
    for i, (where, rec) in enumerate(items):
        if not isinstance(rec, dict):
            raise UsageError("--from-json", f"{where}: expected a JSON object")
        records.append(vllm_output_record(rec, where, i))
    if not records:
        raise UsageError("--from-json", f"{path} holds no requests")
    return records


# --------------------------------------------------------------------------------------------
# output


def token_record(req: Request) -> dict:
    return {"id": req.id, "prompt_token_ids": req.prompt_ids, "generated_token_ids": req.generated}


def write_atomically(outputs: Sequence[tuple[str, Iterable[dict]]]) -> None:
    """Write each (path, records) as JSONL (gzip for ``.gz``) to a temporary file beside it, then
    rename them all; on any failure the temporary files are removed and nothing is renamed."""
    temps: list[tuple[str, str]] = []
    umask = os.umask(0)
    os.umask(umask)
    try:
        for path, records in outputs:
            target = Path(path)
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
            temps.append((tmp, path))
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes it private; give it a normal file's mode
            with os.fdopen(fd, "wb") as raw:
                # mtime=0: the same records give the same bytes
                sink = (
                    gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) if path.endswith(".gz") else raw
                )
                try:
                    for rec in records:
                        sink.write((json.dumps(rec, separators=(",", ":")) + "\n").encode())
                finally:
                    if sink is not raw:
                        sink.close()
        for tmp, path in temps:
            os.replace(tmp, path)
    except BaseException:
        for tmp, _ in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)
        raise


# --------------------------------------------------------------------------------------------
# acceptance (pure numpy: the rule, separate from the models)


def acc_len_from_argmax(
    draft_argmax: np.ndarray, generated: np.ndarray, draft_len: int
) -> np.ndarray:
    """acc_len[t] = 1 + min(draft_len, consecutive positions from t where the draft's argmax on
    the real stream equals the generated token) (why this equals the draft's own greedy chain:
    module docstring)."""
    match = np.asarray(draft_argmax) == np.asarray(generated)
    run = np.zeros(len(match) + 1, dtype=np.int64)
    for t in range(len(match) - 1, -1, -1):
        run[t] = run[t + 1] + 1 if match[t] else 0
    return 1 + np.minimum(run[:-1], draft_len)


def overlap(p_logits, q_logits, temperature: float):
    """sum_x min(p(x), q(x)) per row, p and q the softmaxes at ``temperature`` (0: argmax agree)."""
    import torch

    vocab = min(p_logits.shape[-1], q_logits.shape[-1])
    if temperature == 0:
        return (p_logits.argmax(-1) == q_logits.argmax(-1)).double()
    out = []
    for s in range(0, p_logits.shape[0], ALPHA_CHUNK):
        p = torch.softmax(p_logits[s : s + ALPHA_CHUNK].float() / temperature, dim=-1)
        q = torch.softmax(q_logits[s : s + ALPHA_CHUNK].float() / temperature, dim=-1)
        out.append(torch.minimum(p[:, :vocab], q[:, :vocab]).sum(-1).double())
    return torch.cat(out)


# --------------------------------------------------------------------------------------------
# Hugging Face models


def import_transformers():
    try:
        import transformers
    except ImportError:
        raise UsageError(
            "transformers",
            "not installed; `pip install transformers` (or use the vllm sub-command)",
        ) from None
    return transformers


def resolve_device(name: str):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError("--device", "CUDA is not available on this machine")
    try:
        return torch.device(name)
    except RuntimeError:
        raise UsageError("--device", f"not a torch device: {name!r}") from None


def resolve_dtype(name: str, device):
    import torch

    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, name)


def load_model(ref: str, dtype, device, field: str):
    """An HF causal LM in eval mode on ``device`` (``dtype=`` from transformers 4.56, before it
    ``torch_dtype=``)."""
    transformers = import_transformers()
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    key = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(ref, **{key: dtype})
    except (OSError, ValueError) as exc:
        raise UsageError(field, f"cannot load {ref!r}: {str(exc).splitlines()[0]}") from None
    return model.to(device).eval()


def load_tokenizer(ref: str, needed: bool):
    """The model's tokenizer; None when it has none and no prompt needs one."""
    transformers = import_transformers()
    try:
        return transformers.AutoTokenizer.from_pretrained(ref)
    except (OSError, ValueError, TypeError) as exc:
        if needed:
            raise UsageError("--model", f"no tokenizer for {ref!r}: {exc}") from None
        return None


def stop_ids(model, tokenizer) -> set[int]:
    """The generation config's eos ids plus the tokenizer's (vLLM stops on both)."""
    ids: set[int] = set()
    config = getattr(model, "generation_config", None)
    eos = getattr(config, "eos_token_id", None) if config is not None else None
    if eos is None:
        eos = getattr(model.config, "eos_token_id", None)
    for value in eos if isinstance(eos, (list, tuple)) else [eos]:
        if value is not None:
            ids.add(int(value))
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return ids


def _forward_params(model) -> set[str]:
    return set(inspect.signature(model.forward).parameters)


def _cache_of(out):
    """The KV cache an HF forward returned (``cache`` from transformers 5.x, ``past_key_values``
    before)."""
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def greedy_generate(model, prompt: list[int], max_new: int, stop: set[int]) -> list[int]:
    """The target's greedy output: prefill, then one KV-cached decode step per token; the stop
    token that ends it is kept."""
    import torch

    cache_key = "cache" if "cache" in _forward_params(model) else "past_key_values"
    device = next(model.parameters()).device
    ids = torch.tensor([prompt], device=device)
    out = model(input_ids=ids, use_cache=True)
    generated: list[int] = []
    while True:
        token = int(out.logits[0, -1].argmax())
        generated.append(token)
        if token in stop or len(generated) >= max_new:
            return generated
        step = torch.tensor([[token]], device=device)
        out = model(input_ids=step, use_cache=True, **{cache_key: _cache_of(out)})


def next_token_logits(model, prompt: list[int], generated: list[int]):
    """Logits that predict generated[t] from prompt + generated[:t], for every t: shape
    [len(generated), vocab], from one forward (LM head on those positions only when the model
    takes ``logits_to_keep``)."""
    import torch

    n = len(generated)
    seq = prompt + generated[:-1]
    device = next(model.parameters()).device
    params = _forward_params(model)
    kwargs = {}
    if "logits_to_keep" in params:
        kwargs["logits_to_keep"] = n
    elif "num_logits_to_keep" in params:  # transformers 4.45-4.49
        kwargs["num_logits_to_keep"] = n
    logits = model(input_ids=torch.tensor([seq], device=device), use_cache=False, **kwargs).logits
    return logits[0, -n:]


@dataclass
class Acceptance:
    acc_len: np.ndarray
    alpha: np.ndarray
    target_drift: int  # positions where the target's full-forward argmax differs from its output


def measure_acceptance(
    target, draft, prompt: list[int], generated: list[int], draft_len: int, temperature: float
) -> Acceptance:
    """acc_len and alpha of one request (definitions and cost: module docstring)."""
    p = next_token_logits(target, prompt, generated)
    q = next_token_logits(draft, prompt, generated)
    gen = np.asarray(generated)
    drift = int((p.argmax(-1).cpu().numpy() != gen).sum())
    acc = acc_len_from_argmax(q.argmax(-1).cpu().numpy(), gen, draft_len)
    alpha = overlap(p, q.to(p.device), temperature).cpu().numpy()
    return Acceptance(acc, alpha, drift)


def acceptance_record(req: Request, name: str, result: Acceptance) -> dict:
    return {
        "id": req.id,
        "prompt_len": len(req.prompt_ids),
        "output_len": len(req.generated),
        "acc_len": {name: [int(x) for x in result.acc_len]},
        "alpha": {name: [round(float(x), 6) for x in np.clip(result.alpha, 0.0, 1.0)]},
    }


def _progress(i: int, n: int, req: Request, t0: float) -> None:
    print(
        f"[{i + 1}/{n}] id={req.id} prompt={len(req.prompt_ids)} "
        f"output={len(req.generated or [])} ({time.perf_counter() - t0:.1f} s)",
        file=sys.stderr,
    )


def run_acceptance(
    args: argparse.Namespace, target, requests: list[Request], device, dtype
) -> tuple[list[dict], dict]:
    """Acceptance records of every request against ``--draft-model``, and summary numbers."""
    import torch

    draft = load_model(args.draft_model, dtype, device, "--draft-model")
    records, drift, accs, alphas = [], 0, [], []
    t0 = time.perf_counter()
    with torch.inference_mode():
        for i, req in enumerate(requests):
            result = measure_acceptance(
                target, draft, req.prompt_ids, req.generated, args.draft_len, args.temperature
            )
            records.append(acceptance_record(req, args.name, result))
            drift += result.target_drift
            accs.append(result.acc_len)
            alphas.append(result.alpha)
            if args.progress and (i + 1) % args.progress == 0:
                _progress(i, len(requests), req, t0)
    positions = sum(len(a) for a in accs)
    summary = {
        "mean_acc_len": float(np.concatenate(accs).mean()),
        "mean_alpha": float(np.concatenate(alphas).mean()),
        # bf16 full-sequence and KV-cached logits can differ on near-ties; acc_len is measured
        # against the real output regardless
        "target_argmax_drift": f"{drift}/{positions}",
    }
    return records, summary


def cmd_hf(args: argparse.Namespace) -> dict:
    import torch

    requests = read_prompts(args.prompts, args.limit)
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    model = load_model(args.model, dtype, device, "--model")
    needs_tok = any(r.prompt_ids is None for r in requests)
    tokenizer = load_tokenizer(args.tokenizer or args.model, needs_tok)
    stop = set() if args.ignore_eos else stop_ids(model, tokenizer)
    stop |= set(args.stop_token_ids or [])
    for req in requests:  # all before generating, so a bad prompt fails fast
        req.prompt_ids = tokenize(req, tokenizer)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for i, req in enumerate(requests):
            req.generated = greedy_generate(model, req.prompt_ids, args.max_new_tokens, stop)
            if args.progress and (i + 1) % args.progress == 0:
                _progress(i, len(requests), req, t0)
    outputs: list[tuple[str, Iterable[dict]]] = [(args.out, [token_record(r) for r in requests])]
    summary = {"generate_s": round(time.perf_counter() - t0, 2)}
    if args.draft_model:
        records, extra = run_acceptance(args, model, requests, device, dtype)
        outputs.append((args.acceptance_out, records))
        summary.update(extra)
    write_atomically(outputs)
    return summary | _counts(requests)


def cmd_accept(args: argparse.Namespace) -> dict:
    requests = read_token_trace(args.tokens)
    if args.limit is not None:
        requests = requests[: args.limit]
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    target = load_model(args.model, dtype, device, "--model")
    records, summary = run_acceptance(args, target, requests, device, dtype)
    write_atomically([(args.out, records)])
    return summary | _counts(requests)


# --------------------------------------------------------------------------------------------
# vLLM


def cmd_vllm(args: argparse.Namespace) -> dict:
    if args.from_json:
        records = convert_vllm_json(args.from_json)
        write_atomically([(args.out, records)])
        return {"requests": len(records)}
    requests = read_prompts(args.prompts, args.limit)
    try:
        import vllm
    except ImportError:
        raise UsageError("vllm", "not installed; `pip install vllm` (or use --from-json)") from None
    llm = vllm.LLM(
        model=args.model,
        dtype=args.dtype,
        tensor_parallel_size=args.tensor_parallel_size,
        seed=0,
        **args.llm_kwargs,
    )
    tokenizer = llm.get_tokenizer() if any(r.prompt_ids is None for r in requests) else None
    for req in requests:
        req.prompt_ids = tokenize(req, tokenizer)
    params = vllm.SamplingParams(
        temperature=0.0,
        max_tokens=args.max_new_tokens,
        ignore_eos=args.ignore_eos,
        stop_token_ids=args.stop_token_ids,
    )
    outputs = llm.generate([{"prompt_token_ids": r.prompt_ids} for r in requests], params)
    for req, out in zip(requests, outputs, strict=True):
        req.prompt_ids = list(out.prompt_token_ids)
        req.generated = list(out.outputs[0].token_ids)
    empty = [r.id for r in requests if not r.generated]
    if empty:
        raise UsageError("vllm", f"requests with no output token: {', '.join(empty[:5])}")
    write_atomically([(args.out, [token_record(r) for r in requests])])
    return _counts(requests)


def _counts(requests: list[Request]) -> dict:
    return {
        "requests": len(requests),
        "prompt_tokens": sum(len(r.prompt_ids) for r in requests),
        "generated_tokens": sum(len(r.generated) for r in requests),
    }


# --------------------------------------------------------------------------------------------
# command line


class Parser(argparse.ArgumentParser):
    """argparse whose errors are one line, ``error: <field>: <message>``, exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        field, _, rest = message.partition(": ")
        if field.startswith("argument "):
            field = field.removeprefix("argument ").split("/")[0]
        else:
            field, rest = "arguments", message
        raise UsageError(field, rest)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _id_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = [-1]
    if not values or min(values) < 0:
        raise argparse.ArgumentTypeError(f"expected token ids separated by commas, got {text!r}")
    return values


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def _generation_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="target model: local path or Hub id")
    p.add_argument(
        "--prompts", metavar="PATH", help="prompt JSONL(.gz): prompt | messages | prompt_token_ids"
    )
    p.add_argument("--out", metavar="PATH", required=True, help="token trace to write (.gz: gzip)")
    p.add_argument(
        "--max-new-tokens", type=_positive, default=512, metavar="N", help="(default: %(default)s)"
    )
    p.add_argument("--limit", type=_positive, metavar="N", help="first N requests only")
    p.add_argument("--ignore-eos", action="store_true", help="generate --max-new-tokens always")
    p.add_argument(
        "--stop-token-ids", type=_id_list, metavar="IDS", help="extra stop token ids, e.g. 128009"
    )


def _acceptance_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--draft-len",
        type=_positive,
        metavar="L",
        default=16,
        help="draft tokens per step for acc_len (default: %(default)s)",
    )
    p.add_argument(
        "--temperature",
        type=float,
        metavar="T",
        default=1.0,
        help="temperature of p and q for alpha; 0: argmax agreement (default: %(default)s)",
    )
    p.add_argument(
        "--name", default="draft", help="method key in acc_len / alpha (default: %(default)s)"
    )


def _device_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N (default: auto)")
    p.add_argument(
        "--dtype", choices=DTYPES, default="auto", help="(default: bf16 on CUDA, fp32 on the CPU)"
    )
    p.add_argument(
        "--progress", type=int, default=10, metavar="N", help="report every N requests (0: never)"
    )


def build_parser() -> Parser:
    fmt = argparse.RawDescriptionHelpFormatter
    p = Parser(
        prog="capture_tokens.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=fmt,
        epilog=(
            "examples:\n"
            "  capture_tokens.py hf --model MODEL --prompts p.jsonl --out mine.tokens.jsonl.gz\n"
            "  capture_tokens.py hf --model MODEL --prompts p.jsonl --out mine.tokens.jsonl.gz \\\n"
            "      --draft-model DRAFT --acceptance-out mine.acceptance.jsonl\n"
            "  capture_tokens.py vllm --model MODEL --prompts p.jsonl --out mine.tokens.jsonl.gz\n"
            "  capture_tokens.py vllm --from-json saved.jsonl --out mine.tokens.jsonl.gz\n"
            "  capture_tokens.py accept --tokens mine.tokens.jsonl.gz --model MODEL \\\n"
            "      --draft-model DRAFT --out mine.acceptance.jsonl\n"
            "prompt file: JSONL with prompt (text), messages (chat) or prompt_token_ids per line.\n"
            "capture_tokens.py COMMAND --help lists a command's options.\n" + EAGLE_NOTE + "\n"
            "Formats, definitions and cost: the module docstring and calibration/README.md."
        ),
    )
    p.add_argument("--version", action="version", version=f"%(prog)s {SCRIPT_VERSION}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)

    hf = sub.add_parser(
        "hf",
        help="greedy generation with Hugging Face transformers (batch 1); optional draft",
        description="Greedy generation with transformers, one request at a time. With "
        "--draft-model, also an acceptance trace: acc_len[t] (greedy, chain of --draft-len) and "
        "alpha[t] = sum_x min(p, q) at --temperature, from one target and one draft forward per "
        "request.",
        formatter_class=fmt,
        epilog=EAGLE_NOTE,
    )
    _generation_options(hf)
    hf.add_argument("--tokenizer", help="tokenizer path or id (default: --model's)")
    hf.add_argument(
        "--draft-model",
        metavar="REF",
        help="standalone HF causal LM sharing the tokenizer (not an EAGLE head)",
    )
    hf.add_argument(
        "--acceptance-out", metavar="PATH", help="acceptance JSONL (required with --draft-model)"
    )
    _acceptance_options(hf)
    _device_options(hf)

    acc = sub.add_parser(
        "accept",
        help="acceptance trace of a draft on an existing token trace (no generation)",
        description="acc_len and alpha of --draft-model against --model on the prompts and "
        "outputs of a token trace (e.g. one written by the vllm sub-command).",
        formatter_class=fmt,
        epilog=EAGLE_NOTE,
    )
    acc.add_argument("--tokens", metavar="PATH", required=True, help="token trace JSONL(.gz)")
    acc.add_argument("--model", required=True, help="target model that generated the trace")
    acc.add_argument("--draft-model", metavar="REF", required=True, help="standalone HF causal LM")
    acc.add_argument("--out", metavar="PATH", required=True, help="acceptance JSONL to write")
    acc.add_argument("--limit", type=_positive, metavar="N", help="first N requests only")
    _acceptance_options(acc)
    _device_options(acc)

    vl = sub.add_parser(
        "vllm",
        help="greedy generation with vLLM's offline LLM, or convert saved vLLM outputs",
        description="Runs vllm.LLM(model).generate(prompts, SamplingParams(temperature=0, "
        "max_tokens=N)) and writes output.prompt_token_ids and output.outputs[0].token_ids; "
        "--from-json converts a saved JSON list / JSONL of RequestOutput-like dicts "
        "({prompt_token_ids, outputs: [{token_ids}], request_id}) without importing vllm.",
        formatter_class=fmt,
    )
    vl.add_argument("--from-json", metavar="PATH", help="convert saved outputs; no model is run")
    vl.add_argument("--model", help="target model: local path or Hub id")
    vl.add_argument(
        "--prompts", metavar="PATH", help="prompt JSONL(.gz): prompt | messages | prompt_token_ids"
    )
    vl.add_argument("--out", metavar="PATH", required=True, help="token trace to write (.gz: gzip)")
    vl.add_argument(
        "--max-new-tokens", type=_positive, default=512, metavar="N", help="(default: %(default)s)"
    )
    vl.add_argument("--limit", type=_positive, metavar="N", help="first N requests only")
    vl.add_argument("--ignore-eos", action="store_true", help="generate --max-new-tokens always")
    vl.add_argument("--stop-token-ids", type=_id_list, metavar="IDS", help="extra stop token ids")
    vl.add_argument("--dtype", default="auto", help="vLLM dtype (default: auto)")
    vl.add_argument("--tensor-parallel-size", type=_positive, default=1, help="(default: 1)")
    vl.add_argument(
        "--llm-kwargs",
        type=_json_object,
        default={},
        metavar="JSON",
        help="more vllm.LLM arguments, e.g. '{\"max_model_len\": 8192}'",
    )
    return p


def check(args: argparse.Namespace) -> None:
    """Cross-argument rules argparse cannot express."""
    if args.command == "hf":
        if not args.prompts:
            raise UsageError("--prompts", "required")
        if args.draft_model and not args.acceptance_out:
            raise UsageError("--acceptance-out", "required with --draft-model")
        if args.acceptance_out and not args.draft_model:
            raise UsageError("--acceptance-out", "needs --draft-model")
    if args.command in ("hf", "accept"):
        path = args.acceptance_out if args.command == "hf" else args.out
        if path and path.endswith(".gz"):
            # simspec's acceptance-trace reader (simspec/catalog/traces.py) reads plain text
            raise UsageError("acceptance output", "write plain .jsonl; simspec reads it unzipped")
        if not args.temperature >= 0:
            raise UsageError("--temperature", f"must be >= 0, got {args.temperature}")
    if args.command == "vllm":
        if args.from_json and (args.model or args.prompts):
            raise UsageError("--from-json", "converts saved outputs; drop --model and --prompts")
        if not args.from_json and not (args.model and args.prompts):
            raise UsageError("arguments", "give --model and --prompts, or --from-json")


def main(argv: Sequence[str] | None = None) -> int:
    t0 = time.perf_counter()
    try:
        args = build_parser().parse_args(argv)
        check(args)
        command = {"hf": cmd_hf, "accept": cmd_accept, "vllm": cmd_vllm}[args.command]
        summary = command(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    summary["seconds"] = round(time.perf_counter() - t0, 2)
    wrote = [args.out] + ([args.acceptance_out] if getattr(args, "acceptance_out", None) else [])
    print(f"wrote {', '.join(wrote)}: " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
