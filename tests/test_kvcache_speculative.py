"""Speculative decoding by prompt lookup (speculative.py): the drafter and the acceptance rule,
and an engine that drafts yields greedy decoding's tokens exactly, with and without chunked
prefill, under every policy, in a pool tight enough to preempt."""

from dataclasses import replace

import pytest
from test_kvcache_chunked_prefill import run_engine

from playground.kvcache.engine.config import EngineConfig
from playground.kvcache.engine.speculative import accept_greedy, propose_ngram

REPETITIVE = ["abcabcabcabc", "the cat and the cat and the", list(range(10)) * 3, "no repeats here?"]


def test_propose_ngram_copies_what_followed_the_latest_earlier_occurrence_longest_first():
    assert propose_ngram([1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3], 3, 2) == [7, 5]
    assert propose_ngram([1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3], 3, 9) == [7, 5, 1, 2, 3]
    assert propose_ngram([4, 1, 8, 2, 1], 3, 2) == [8, 2]  # only a 1-gram recurs
    assert propose_ngram([1, 2, 3, 4], 3, 2) == []
    assert propose_ngram([5], 3, 2) == [] and propose_ngram([1, 1], 3, 0) == []


def test_accept_greedy_keeps_the_agreeing_prefix_then_greedys_next_token():
    assert accept_greedy([7, 8, 9], [7, 8, 9, 4]) == [7, 8, 9, 4]
    assert accept_greedy([7, 8, 9], [7, 5, 9, 4]) == [7, 5]
    assert accept_greedy([7, 8, 9], [1, 8, 9, 4]) == [1]


@pytest.mark.parametrize(
    "policy,chunked", [("paged", False), ("paged", True), ("contiguous", True), ("reserve_max", False)]
)
def test_speculative_greedy_output_equals_plain_decoding(policy, chunked):
    prompts = REPETITIVE + ["x" * 90]  # the last one restarts its window while drafting
    config = EngineConfig(chunked_prefill=chunked, max_num_batched_tokens=24)
    plain, plain_engine = run_engine(config, prompts, max_new=40, policy=policy)
    spec, engine = run_engine(replace(config, num_speculative_tokens=4), prompts, max_new=40, policy=policy)
    assert spec == plain
    assert engine.num_draft_tokens > 0 and 0 < engine.num_accepted_tokens <= engine.num_draft_tokens
    assert engine.num_steps < plain_engine.num_steps


def test_speculative_decoding_in_a_tight_pool_preempts_and_still_equals_plain():
    prompts = [f"again and again {i} again and again" for i in range(6)]
    plain, _ = run_engine(EngineConfig(), prompts, max_new=30, capacity=200)
    spec, engine = run_engine(EngineConfig(num_speculative_tokens=3), prompts, max_new=30, capacity=200)
    assert spec == plain and engine.scheduler.num_preempted > 0


def test_sampled_sequences_decode_without_drafts():
    sampled, engine = run_engine(EngineConfig(num_speculative_tokens=4), REPETITIVE, temperature=0.7)
    assert engine.num_draft_tokens == 0
    assert sampled == run_engine(EngineConfig(), REPETITIVE, temperature=0.7)[0]
