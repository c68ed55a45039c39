"""The admission rule, alone and shared: the engine's scheduler (a policy in its hands) and the
KV-cache lab's replayer (a server at the other end of a client) admit the same requests."""

import pytest

from playground.kvcache.engine.admission import AdmissionRule
from playground.kvcache.engine.config import EngineConfig
from playground.kvcache.engine.policies import make_policy
from playground.kvcache.engine.scheduler import Scheduler
from playground.kvcache.engine.sequence import GenerateRequest, SamplingParams, Sequence
from playground.kvcache.server.kv_ops import KVServer
from playground.kvcache.server.local_client import LocalClient
from playground.kvcache.workloads import section46_requests
from playground.kvlab.replay import replay


def test_at_most_max_num_seqs_run():
    rule = AdmissionRule(max_num_seqs=2, reserve_slots=0)
    assert rule.admits(1, 100, 10) and not rule.admits(2, 100, 10)


def test_the_watermark_binds_only_once_something_runs():
    rule = AdmissionRule.with_watermark(max_num_seqs=10, watermark=0.25, capacity_slots=400)
    assert rule.reserve_slots == 100
    assert rule.admits(0, 50, 50)  # nothing runs: the first may take the last slot
    assert rule.admits(1, 150, 50) and not rule.admits(1, 149, 50)


def test_after_a_preemption_nothing_is_admitted_while_anything_runs():
    rule = AdmissionRule(max_num_seqs=10, reserve_slots=0)
    assert rule.is_open(3, pressure=False) and rule.is_open(0, pressure=True)
    assert not rule.is_open(1, pressure=True)


class _FirstStep(LocalClient):
    """Counts the sequences the replay had admitted when it sent its first decode step."""

    admitted = None

    def call(self, op, kv=None, **fields):
        if op == "append" and self.admitted is None:
            self.admitted = len(self.server.owner)
        return super().call(op, kv, **fields)


@pytest.mark.parametrize(
    "capacity, watermark, max_num_seqs",
    [(4000, 0.0, 256), (20_000, 0.5, 256), (100_000, 0.0, 5)],
    ids=["the pool binds", "the watermark binds", "max_num_seqs binds"],
)
def test_the_replay_admits_what_the_scheduler_admits(capacity, watermark, max_num_seqs):
    """First fit needs exactly the tokens, as a client counts them; both start on an empty pool."""
    specs = section46_requests(40, 50, 499, 200.0, 2048, seed=0)
    config = EngineConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=10**9, watermark=watermark)
    scheduler = Scheduler(make_policy("contiguous", capacity), 10**6, config)
    for spec in specs:
        request = GenerateRequest(spec.req_id, b"c", None, [0] * spec.prompt_len, SamplingParams(1), 0.0)
        scheduler.add(Sequence(spec.req_id, request, 0, request.prompt))
    admitted = len(scheduler.schedule().scheduled)

    client = _FirstStep(KVServer("contiguous", capacity, width=2))
    stats = replay(client, specs, 2, max_num_seqs, admit_watermark_slots=int(watermark * capacity))
    assert stats.completed == len(specs) and stats.read_mismatches == 0
    assert 0 < client.admitted == admitted < len(specs)
