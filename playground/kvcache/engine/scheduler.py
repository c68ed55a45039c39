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

Chunked prefill (`config.chunked_prefill`, Sarathi-Serve's stall-free batching): a step holds at
most `max_num_batched_tokens` tokens in all. Decodes go first (a token each); then the prompts
already admitted and partly prefilled go on, then new ones are admitted, each taking a chunk of
what is left of the budget. A long prompt so runs over several steps beside the decodes instead of
stalling them for one long step: the time between two tokens of a running sequence stays near a
decode step. Admission allocates the whole window at once (check-then-act as before); a partly
prefilled sequence runs with `num_cached_tokens < len(window) - 1` and samples nothing until its
last chunk. It is not combined with prefix caching: a cached block's KV would be found by
another prompt before its chunk has written it.

Speculative decoding (`config.num_speculative_tokens` = k > 0, speculative.py): a running greedy
sequence decodes its last token and up to k drafted tokens in one step; its slots are appended for
all of them (if the batch does not fit with the drafts, the step decodes without them). Slots of
rejected drafts stay allocated past the sequence's length and are overwritten later, so a
sequence may hold more slots than tokens: `Scheduled.length` is what attention reads.
"""

from collections import deque
from dataclasses import dataclass

from playground.core.errors import InvariantViolation, UsageError
from playground.kvcache.engine.admission import AdmissionRule
from playground.kvcache.engine.allocation import AllocationPolicy, Copy
from playground.kvcache.engine.config import EngineConfig
from playground.kvcache.engine.sequence import Sequence, SequenceStatus
from playground.kvcache.engine.speculative import propose_ngram


@dataclass(frozen=True)
class Scheduled:
    """`num_new` tokens of `seq`'s window at positions first_position.. run this step; their KV
    is written from position `write_from` on (== first_position, or past the end if cached)."""

    seq: Sequence
    first_position: int
    num_new: int
    write_from: int
    draft: tuple[int, ...] = ()  # speculative tokens after the last one (num_new = 1 + len(draft))

    @property
    def is_decode(self) -> bool:
        """One query over every token up to it: the decode kernel's shape (also a one-token
        prefill, and a cached window's recomputed last token)."""
        return self.num_new == 1

    @property
    def length(self) -> int:
        """Tokens attention reads after this step: the sequence's KV up to its last new token."""
        return self.first_position + self.num_new

    @property
    def completes_window(self) -> bool:
        """Whether this step reaches the window's last token (false: a chunk of a longer prefill)."""
        return self.draft != () or self.length >= len(self.seq.window)


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
        if prefix_caching and config.chunked_prefill:
            raise UsageError(
                "chunked prefill and prefix caching do not combine here: a prompt's cached blocks "
                "would be found before its chunks have written them",
                field="chunked_prefill",
            )
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
        budget = self.config.max_num_batched_tokens
        if self.config.chunked_prefill:
            budget -= sum(s.num_new for s in scheduled)
            chunks = self._continue_prefills(budget)
            budget -= sum(s.num_new for s in chunks)
            scheduled += chunks
        if self.admission.is_open(len(self.running), self.pressure):
            scheduled += self._admit(budget)
        return Step(scheduled, copies, self.num_preempted - preempted_before, restarts)

    def _restart_full_windows(self) -> int:
        full = [s for s in self.running if not s.fits_context(self.context)]
        for seq in reversed(full):  # keeps their order at the front of the queue
            self.preempt(seq, window_full=True)
        return len(full)

    def is_prefilling(self, seq: Sequence) -> bool:
        """A running sequence whose window is not all in the pool yet (chunked prefill)."""
        return seq.num_cached_tokens < len(seq.window) - 1

    def _drafts(self, decoding: list[Sequence]) -> dict[int, list[int]]:
        """Each greedy sequence's prompt-lookup draft, cut to its window and its max_new_tokens."""
        k, drafts = self.config.num_speculative_tokens, {}
        for seq in decoding if k else []:
            params = seq.request.params
            room = min(k, self.context - len(seq.window), params.max_new_tokens - seq.num_generated - 1)
            if params.temperature == 0 and room > 0:
                draft = propose_ngram(seq.token_ids, self.config.prompt_lookup_max, room)
                if draft:
                    drafts[seq.seq_id] = draft
        return drafts

    def _appends(self, decoding: list[Sequence], drafts: dict[int, list[int]]) -> dict[int, int]:
        """Slots each decoding sequence needs beyond those it holds (drafts' slots may be held)."""
        return {
            s.seq_id: max(
                0, s.num_cached_tokens + 1 + len(drafts.get(s.seq_id, ())) - self.policy.length(s.seq_id)
            )
            for s in decoding
        }

    def _schedule_decodes(self) -> tuple[list[Scheduled], list[Copy]]:
        def decoding() -> list[Sequence]:
            return [s for s in self.running if not self.is_prefilling(s)]

        drafts = self._drafts(decoding())
        if drafts and not self.policy.can_append_batch(self._appends(decoding(), drafts)):
            drafts = {}  # no room for the drafts: plain decoding this step
        while self.running and not self.policy.can_append_batch(self._appends(decoding(), drafts)):
            self.preempt(self.running[-1])
        seqs = decoding()
        if not seqs:
            return [], []
        copies = self.policy.append_batch(self._appends(seqs, drafts))
        if copies is None:
            raise InvariantViolation(
                f"{self.policy.name}: append_batch refused what can_append_batch allowed"
            )
        scheduled = []
        for s in seqs:
            draft = tuple(drafts.get(s.seq_id, ()))
            scheduled.append(Scheduled(s, s.num_cached_tokens, 1 + len(draft), s.num_cached_tokens, draft))
        return scheduled, copies

    def _continue_prefills(self, budget: int) -> list[Scheduled]:
        """The next chunk of each partly prefilled sequence, in admission order, within `budget`."""
        scheduled = []
        for seq in self.running:
            if budget <= 0:
                break
            if self.is_prefilling(seq):
                n = min(len(seq.window) - seq.num_cached_tokens, budget)
                scheduled.append(Scheduled(seq, seq.num_cached_tokens, n, seq.num_cached_tokens))
                budget -= n
        return scheduled

    def _admit(self, budget: int) -> list[Scheduled]:
        """Admissions in order; prefill-first: whole windows while they fit `budget` (a longer
        one runs alone); chunked: each takes a chunk of what is left of it."""
        policy, prefilled, chunked = self.policy, 0, self.config.chunked_prefill
        scheduled: list[Scheduled] = []
        while self.waiting:
            seq = self.waiting[0]
            seq.restart_window(self.context)
            window = seq.window
            n = len(window)
            if chunked and prefilled >= budget:
                break
            if not chunked and scheduled and prefilled + n > budget:
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
            num_new = min(n - first, budget - prefilled) if chunked else n - first
            scheduled.append(Scheduled(seq, first, num_new, cached))
            prefilled += num_new
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
        return scheduled
