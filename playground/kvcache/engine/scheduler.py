"""The scheduler: which sequences run in the next step, and where their new tokens' KV goes.

Continuous batching as vLLM does it, one step at a time, every decision check-then-act against
the allocation policy (a refused `can_*` changes nothing):

1. Windows: a running sequence whose next token would not fit the model's context starts again
   from its last `context` tokens: it is preempted, without counting as one (sequence.py).
2. Decode: every running sequence gets one more slot, as one batch (`can_append_batch`). If the
   batch does not fit, the newest running sequence is preempted by recompute (its memory freed, it
   waits at the front of the queue and is prefilled again later from its tokens), and the check is
   repeated. The slots include copy-on-write of shared, partly filled blocks and the moves of
   contiguous runs; `Step.copies` lists them for the pool.
3. Admit: waiting sequences in order while the policy can allocate their window, at most
   `max_num_seqs` running and `max_num_batched_tokens` prefilled in one step, and only while
   `watermark` of the pool stays free once something runs, and nothing after a preemption until a
   sequence finishes: the admission rule (admission.py), which the KV-cache lab's replayer shares.

With prefix caching a new window shares the cached blocks of its leading full blocks; their KV is
already in the pool and is not computed again. If the whole window is cached, its last token is
computed once more for its logits, without writing its KV (the block is shared).
"""

from collections import deque
from dataclasses import dataclass

from playground.core.errors import InvariantViolation
from playground.kvcache.engine.admission import AdmissionRule
from playground.kvcache.engine.allocation import AllocationPolicy, Copy
from playground.kvcache.engine.config import EngineConfig
from playground.kvcache.engine.sequence import Sequence, SequenceStatus


@dataclass(frozen=True)
class Scheduled:
    """`num_new` tokens of `seq`'s window at positions first_position.. run this step; their KV
    is written from position `write_from` on (== first_position, or past the end if cached)."""

    seq: Sequence
    first_position: int
    num_new: int
    write_from: int

    @property
    def is_decode(self) -> bool:
        """One query over every token up to it: the decode kernel's shape (also a one-token
        prefill, and a cached window's recomputed last token)."""
        return self.num_new == 1


@dataclass
class Step:
    scheduled: list[Scheduled]
    copies: list[Copy]  # to do in the pool, in order, before the model writes
    num_preempted: int = 0
    num_window_restarts: int = 0

    @property
    def num_tokens(self) -> int:
        return sum(s.num_new for s in self.scheduled)


class Scheduler:
    def __init__(
        self, policy: AllocationPolicy, context: int, config: EngineConfig, prefix_caching: bool = False
    ):
        self.policy, self.context, self.config = policy, context, config
        self.prefix_caching = prefix_caching
        self.admission = AdmissionRule.with_watermark(
            config.max_num_seqs, config.watermark, policy.capacity_slots
        )
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []  # in admission order: the newest is preempted first
        self.pressure = False  # preempted since the last finish: admit nothing
        self.num_preempted = 0
        self.num_window_restarts = 0

    def __repr__(self):
        return f"Scheduler({len(self.running)} running, {len(self.waiting)} waiting)"

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def _free(self, seq: Sequence) -> None:
        if self.policy.has(seq.seq_id):
            self.policy.free(seq.seq_id)

    def preempt(self, seq: Sequence, window_full: bool = False) -> None:
        """Free the sequence's memory; it waits at the front and is recomputed later from its last
        `context` tokens. A preemption for memory counts and stops admissions until a sequence
        finishes; a full window (`window_full`) is the same move, counted as a window restart."""
        self.running.remove(seq)
        self._free(seq)
        seq.status = SequenceStatus.WAITING
        seq.restart_window(self.context)
        self.waiting.appendleft(seq)
        if window_full:
            self.num_window_restarts += 1
            return
        seq.request.num_preemptions += 1
        self.num_preempted += 1
        self.pressure = True

    def finish(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self._free(seq)
        seq.status = SequenceStatus.FINISHED
        self.pressure = False

    def abort(self, seqs: list[Sequence]) -> None:
        """Forget these sequences wherever they are and free their memory (a vanished client)."""
        gone = set(map(id, seqs))
        for seq in seqs:
            self._free(seq)
            seq.status = SequenceStatus.FINISHED
        self.running = [s for s in self.running if id(s) not in gone]
        self.waiting = deque(s for s in self.waiting if id(s) not in gone)

    def schedule(self) -> Step:
        restarts = self._restart_full_windows()
        preempted_before = self.num_preempted
        scheduled, copies = self._schedule_decodes()
        if self.admission.is_open(len(self.running), self.pressure):
            scheduled += self._admit()
        return Step(scheduled, copies, self.num_preempted - preempted_before, restarts)

    def _restart_full_windows(self) -> int:
        full = [s for s in self.running if not s.fits_context(self.context)]
        for seq in reversed(full):  # keeps their order at the front of the queue
            self.preempt(seq, window_full=True)
        return len(full)

    def _schedule_decodes(self) -> tuple[list[Scheduled], list[Copy]]:
        while self.running and not self.policy.can_append_batch({s.seq_id: 1 for s in self.running}):
            self.preempt(self.running[-1])
        if not self.running:
            return [], []
        copies = self.policy.append_batch({s.seq_id: 1 for s in self.running})
        if copies is None:
            raise InvariantViolation(
                f"{self.policy.name}: append_batch refused what can_append_batch allowed"
            )
        scheduled = [Scheduled(s, s.num_cached_tokens, 1, s.num_cached_tokens) for s in self.running]
        return scheduled, copies

    def _admit(self) -> list[Scheduled]:
        policy, prefilled = self.policy, 0
        scheduled: list[Scheduled] = []
        while self.waiting:
            seq = self.waiting[0]
            seq.restart_window(self.context)
            window = seq.window
            n = len(window)
            if scheduled and prefilled + n > self.config.max_num_batched_tokens:
                break
            keys = window if self.prefix_caching else None
            free = policy.capacity_slots - policy.allocated_slots()
            if not self.admission.admits(len(self.running), free, policy.slots_needed(n, keys)):
                break
            if not policy.can_allocate(n, keys):
                break
            self.waiting.popleft()
            cached = policy.allocate(seq.seq_id, n, keys)
            first = min(cached, n - 1)  # a window found whole in the cache recomputes its last token
            scheduled.append(Scheduled(seq, first, n - first, cached))
            prefilled += n - first
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
        return scheduled
