"""The scheduler without a model: admission, decode reservations, preemption of the newest,
the step's token budget, the watermark, window restarts; every decision against the policy."""

from playground.kvcache.engine.block_manager import BlockManager
from playground.kvcache.engine.config import EngineConfig
from playground.kvcache.engine.scheduler import Scheduler
from playground.kvcache.engine.sequence import GenerateRequest, SamplingParams, Sequence, SequenceStatus


def seqs(lengths, max_new=100):
    out = []
    for i, n in enumerate(lengths):
        request = GenerateRequest(i, b"c", i, list(range(n)), SamplingParams(max_new), 0.0)
        out.append(Sequence(i, request, 0, request.prompt))
    return out


def scheduler(num_blocks=8, block_size=4, context=64, **config):
    config = {"watermark": 0.0, **config}
    return Scheduler(BlockManager(num_blocks, block_size), context, EngineConfig(**config))


def finish_step(step):
    """What the engine does after the model ran: the new tokens' KV is cached, one more sampled."""
    for s in step.scheduled:
        s.seq.num_cached_tokens = s.first_position + s.num_new
        s.seq.token_ids.append(7)


def test_admits_in_order_while_blocks_are_free_then_decodes_everyone_in_one_batch():
    sched = scheduler(num_blocks=4)
    a, b, c = seqs([5, 6, 3])
    for s in (a, b, c):
        sched.add(s)
    step = sched.schedule()
    assert [(s.seq.seq_id, s.first_position, s.num_new) for s in step.scheduled] == [(0, 0, 5), (1, 0, 6)]
    assert list(sched.waiting) == [c] and sched.policy.num_free_blocks == 0
    finish_step(step)
    step = sched.schedule()  # a at 6 tokens, b at 7: both fit their last block, c still waits
    assert [(s.seq.seq_id, s.first_position, s.num_new) for s in step.scheduled] == [(0, 5, 1), (1, 6, 1)]
    assert all(s.is_decode for s in step.scheduled) and step.copies == []


def test_a_decode_that_does_not_fit_preempts_the_newest_and_admits_nothing_until_a_finish():
    sched = scheduler(num_blocks=4)
    a, b = seqs([8, 8])
    sched.add(a)
    sched.add(b)
    finish_step(sched.schedule())  # both prefilled: 2 blocks each, pool full
    step = sched.schedule()  # each needs a new block: b (newest) goes, a gets one
    assert step.num_preempted == 1 and [s.seq for s in step.scheduled] == [a]
    assert b.status is SequenceStatus.WAITING and b.num_cached_tokens == 0 and list(sched.waiting) == [b]
    assert b.request.num_preemptions == 1 and sched.pressure
    finish_step(step)
    step = sched.schedule()  # room for b now, but not admitted under pressure while a runs
    assert [s.seq for s in step.scheduled] == [a]
    sched.finish(a)
    step = sched.schedule()  # b is recomputed from all its tokens (9: prompt and one sampled)
    assert [(s.seq, s.first_position, s.num_new) for s in step.scheduled] == [(b, 0, 9)]


def test_the_token_budget_and_the_running_limit_bound_admission():
    sched = scheduler(num_blocks=100, max_num_batched_tokens=10, max_num_seqs=3)
    for s in seqs([6, 6, 12, 1, 1]):
        sched.add(s)
    step = sched.schedule()
    assert [s.num_new for s in step.scheduled] == [6]  # 6 + 6 > 10
    finish_step(step)
    step = sched.schedule()
    assert [s.num_new for s in step.scheduled] == [1, 6]  # a decode, and the next prompt
    finish_step(step)
    step = sched.schedule()  # a window longer than the budget runs when it is the first prefill
    assert [s.num_new for s in step.scheduled] == [1, 1, 12] and len(sched.running) == 3
    finish_step(step)
    assert [s.num_new for s in sched.schedule().scheduled] == [1, 1, 1]  # three running at most


def test_the_watermark_keeps_room_for_running_sequences_to_grow():
    sched = scheduler(num_blocks=10, watermark=0.35)  # keep 14 of 40 slots free once something runs
    for s in seqs([16, 12, 4]):
        sched.add(s)
    step = sched.schedule()
    assert [s.seq.seq_id for s in step.scheduled] == [0]  # the second would leave 12 slots < 14


def test_a_full_window_restarts_from_the_last_context_tokens():
    sched = scheduler(num_blocks=16, context=8)
    (a,) = seqs([8])
    sched.add(a)
    finish_step(sched.schedule())  # 8 tokens cached, 9 in all: the next one does not fit
    step = sched.schedule()
    assert step.num_window_restarts == 1
    assert [(s.first_position, s.num_new) for s in step.scheduled] == [(0, 8)] and a.window_start == 1
    assert sched.policy.length(a.seq_id) == 8
    # the same move as a preemption, but not one: counted apart, and admissions go on
    assert step.num_preempted == 0 and a.request.num_preemptions == 0 and not sched.pressure


def test_abort_frees_waiting_and_running_alike():
    sched = scheduler(num_blocks=2)
    a, b = seqs([8, 3])
    sched.add(a)
    sched.add(b)
    sched.schedule()
    assert sched.running == [a] and list(sched.waiting) == [b]
    sched.abort([a, b])
    assert not sched.has_work() and sched.policy.num_free_blocks == 2
    sched.policy.check_invariants()
