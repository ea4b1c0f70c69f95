"""How many GPUs a case runs on when it does not say: what a user deploying the model would
pick, stated in the row's ``assumptions``.

- A serving engine (vLLM, SGLang) splits a model over GPUs by tensor parallelism, a power of
  two within a node: a row without TP runs at the smallest TP (1, 2, 4, 8) whose per-GPU memory
  holds the weights and still leaves KV for one :data:`MIN_KV_TOKENS`-token sequence, by the
  memory plan the run itself uses (:func:`simspec.engine.build.setup_replica`); on vLLM, KV
  for one sequence of the context it starts with too (it refuses to start otherwise:
  :func:`simspec.engine.build.check_context_fits`).
- The HF reference code loads with ``device_map="auto"``: the layers split in order over the
  fewest GPUs they fit on (:func:`fit_by_layer_split`).
"""

from __future__ import annotations

from collections.abc import Callable

from simspec.config import Scenario
from simspec.engine.build import setup_replica
from simspec.engine.kv_cache import MIN_KV_TOKENS
from simspec.engine.simulation import check
from simspec.errors import InputError, ScenarioError

TP_SIZES = (1, 2, 4, 8)  # one node's tensor-parallel degrees
LAYER_SPLITS = (1, 2, 4, 8)  # GPU counts tried for an HF row that does not state its own


def _holds(sc: Scenario) -> bool:
    """The model's weights fit at ``sc.tp`` with KV left for one MIN_KV_TOKENS sequence."""
    memory = setup_replica(sc).memory
    if memory.window is not None:  # its windowed layers' blocks too
        return memory.seq_tokens() >= MIN_KV_TOKENS
    return memory.num_blocks * memory.block_size >= MIN_KV_TOKENS


def fewest_gpus(
    scenario: Scenario, baseline: Scenario | None, notes: list[str]
) -> tuple[Scenario, Scenario | None]:
    """A serving row that states neither TP nor a GPU count: the smallest TP in
    :data:`TP_SIZES` that holds the model with the row's method (its draft included); the
    baseline runs on the same GPUs. Without one, the row keeps TP 1 and its run says why it
    does not fit."""
    return _smallest(
        scenario,
        baseline,
        "tp",
        TP_SIZES,
        _holds,
        lambda n: (
            f"TP not stated: tp={n}, the fewest {scenario.gpu} GPUs that hold the model "
            f"(weights + KV for one {MIN_KV_TOKENS}-token sequence; on vLLM, one of the "
            "context it starts with)"
        ),
        notes,
    )


def fit_by_layer_split(
    scenario: Scenario, baseline: Scenario | None, notes: list[str]
) -> tuple[Scenario, Scenario | None]:
    """An HF row that does not say how many GPUs it used, for a model one GPU cannot hold: the
    fewest GPUs its layers fit on when split in order (device_map='auto'), as the reference
    code loads it. The baseline runs on the same GPUs."""

    def fits(sc: Scenario) -> bool:
        check(sc)
        return True

    return _smallest(
        scenario,
        baseline,
        "pp",
        LAYER_SPLITS,
        fits,
        lambda n: f"GPU count unstated: the model fits with its layers split over {n}",
        notes,
        note_one=False,
    )


def _smallest(
    scenario: Scenario,
    baseline: Scenario | None,
    field: str,
    sizes: tuple[int, ...],
    fits: Callable[[Scenario], bool],
    say: Callable[[int], str],
    notes: list[str],
    note_one: bool = True,
) -> tuple[Scenario, Scenario | None]:
    for n in sizes:
        trial = scenario.model_copy(update={field: n})
        try:
            if not fits(trial):
                continue
        except ScenarioError:
            continue
        except InputError as exc:
            # vLLM would not start with the model's own context in this many GPUs' KV cache
            # (build.check_context_fits): more GPUs, as a deployment that sets no
            # max_model_len needs
            if exc.field == "scheduler.max_model_len" and trial.scheduler.max_model_len is None:
                continue
            return scenario, baseline  # let the run report the bad input
        if n > 1 or note_one:
            notes.append(say(n))
        if n > 1 and baseline is not None:
            baseline = baseline.model_copy(update={field: n})
        return trial, baseline
    return scenario, baseline
