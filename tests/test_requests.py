"""The request table: one column per counter, indexed by request id."""

from __future__ import annotations

import numpy as np

from simspec.engine.requests import RequestTable
from simspec.engine.workload import RequestSpecs


def make_table(prompts, outputs, trace_index=None) -> RequestTable:
    """The one place that builds a table (from int32 lengths, as a trace may hold them)."""
    n = len(prompts)
    specs = RequestSpecs(
        np.array(prompts, dtype=np.int32),
        np.array(outputs, dtype=np.int32),
        np.full(n, -1, dtype=np.int64) if trace_index is None else np.array(trace_index),
    )
    return RequestTable(specs)


def test_a_new_table_holds_the_lengths_and_nothing_has_happened_yet():
    t = make_table([10, 20, 30], [5, 6, 7], trace_index=[4, 0, 4])
    assert len(t) == 3
    assert t.prompt_len.tolist() == [10, 20, 30] and t.output_len.tolist() == [5, 6, 7]
    assert t.trace_index.tolist() == [4, 0, 4]
    for times in (t.arrival, t.first_token, t.finish):
        assert np.isnan(times).all()
    for counter in (t.generated, t.computed, t.blocks, t.preemptions, t.spec_steps, t.accepted):
        assert counter.tolist() == [0, 0, 0]
    assert not t.decoding.any() and not t.unfinishable.any()
    assert t.last_step_tokens.tolist() == [1, 1, 1]  # as if the last step yielded one token


def test_lengths_are_int64_so_token_sums_cannot_overflow():
    t = make_table([2**31 - 1, 2**31 - 1], [1, 1])
    assert t.prompt_len.dtype == np.int64 and t.output_len.dtype == np.int64
    assert int(t.prompt_len.sum()) == 2 * (2**31 - 1)


def test_a_requests_tokens_are_its_prompt_plus_what_it_generated():
    t = make_table([10, 20], [5, 5])
    t.generated[1] = 3
    assert t.num_tokens(0) == 10
    assert t.num_tokens(1) == 23
    assert t.num_tokens(np.array([1, 0])).tolist() == [23, 10]


def test_each_spec_step_counts_once_and_keeps_the_emitted_tokens_minus_the_sampled_one():
    t = make_table([1, 1, 1], [9, 9, 9])
    t.add_spec_step(np.array([0, 2]), np.array([3, 1]))  # 2 drafts kept, then none
    t.add_spec_step(np.array([2]), np.array([4]))  # 3 drafts kept
    assert t.spec_steps.tolist() == [1, 0, 2]
    assert t.accepted.tolist() == [2, 0, 3]


def test_spec_step_counters_stay_exact_over_many_steps_and_between_reads():
    t = make_table([1, 1], [9, 9])
    rids, emitted = np.array([0, 1]), np.array([2, 3])
    for step in range(2500):
        t.add_spec_step(rids, emitted)
        if step == 700:  # a read in between does not lose or double anything
            assert t.spec_steps.tolist() == [701, 701]
    assert t.spec_steps.tolist() == [2500, 2500]
    assert t.accepted.tolist() == [2500 * 1, 2500 * 2]
