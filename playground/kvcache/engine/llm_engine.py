"""The engine: requests in, one step at a time, finished requests out (vLLM's LLMEngine).

    step():  schedule (scheduler.py: decodes, preemptions, admissions)
             -> the pool's copies (copy-on-write, moves)
             -> one model step for every scheduled sequence (model_runner.py)
             -> sample each sequence's next token; fork the n samples of a just-prefilled prompt;
                finish the sequences that have max_new_tokens, free their memory
                (a chunk of a longer prefill samples nothing; a speculative step keeps the drafts
                greedy decoding agrees with, and greedy's next token: scheduler.py, speculative.py)

The n samples of a request share the prompt: it is prefilled once, as one sequence, and forked
into n after its first step (`policy.fork`: the paged policy shares every block and copies the
partly filled last one on its first write; the contiguous policies copy the run). A child that
cannot be forked (no room for its copy) waits and is recomputed later, as a preempted one is.
With `share_prompt` false the n samples are n sequences from the start, each prefilled with its
own copy of the prompt (exercise 10's "unshared"; with prefix caching they still share its full
blocks, as vLLM v1 runs n > 1).
The engine lives in the server (server/generate.py); `step` is called between two polls of its
socket.
"""

import time

import numpy as np

from playground.kvcache.engine.allocation import AllocationPolicy
from playground.kvcache.engine.config import DEFAULT_ENGINE, EngineConfig
from playground.kvcache.engine.kv_pool import KVPool
from playground.kvcache.engine.model_runner import ModelRunner
from playground.kvcache.engine.scheduler import Scheduled, Scheduler
from playground.kvcache.engine.sequence import GenerateRequest, SamplingParams, Sequence, SequenceStatus
from playground.kvcache.engine.speculative import accept_greedy
from playground.transformer.generate import sample_token
from playground.transformer.model import Transformer

# The engine's step log, one tuple a step: when it started (s since the engine was made), the
# sequences it decoded, the prompt tokens it prefilled, running and waiting after it, its time
# (the engine's clock), the slots allocated, the KV tokens the decode attention read per layer, and
# where the time went (time.perf_counter): the model's layers, the attention over the pool inside
# them, and the bookkeeping around them (scheduling, the step's metadata, sampling, finishing).
STEP_LOG_COLUMNS = (
    "t_s",
    "decodes",
    "prefill_tokens",
    "running",
    "waiting",
    "step_s",
    "allocated_slots",
    "kv_tokens",
    "model_s",
    "attention_s",
    "bookkeeping_s",
)


class LLMEngine:
    def __init__(
        self,
        model: Transformer,
        policy: AllocationPolicy,
        pool: KVPool,
        config: EngineConfig = DEFAULT_ENGINE,
        *,
        new_seq_ids,
        prefix_caching: bool = False,
        clock=time.monotonic,
    ):
        """`new_seq_ids(k)` hands out k sequence ids no one else uses (the server's counter:
        the policy's tables hold the engine's sequences beside the clients' own)."""
        self.model, self.policy, self.pool, self.config = model, policy, pool, config
        self.scheduler = Scheduler(policy, model.config.context, config, prefix_caching)
        self.runner = ModelRunner(model, pool, config.kernel)
        self.new_seq_ids, self.clock = new_seq_ids, clock
        self.requests: dict[int, GenerateRequest] = {}
        self.next_request_id = 0
        self.num_steps = 0
        self.num_generated_tokens = 0
        self.num_prefill_tokens = 0
        self.num_finished_requests = 0
        self.num_draft_tokens = 0  # speculative decoding: drafted, and accepted by verification
        self.num_accepted_tokens = 0
        self.peak_running = 0
        self.peak_allocated_slots = 0
        self.peak_used_slots = 0
        self.step_log: list[tuple] = []  # one row a step, STEP_LOG_COLUMNS
        model.logits(np.zeros((1, 1), dtype=np.int64))  # warm the BLAS and the allocator up before timing
        self.start_s = clock()

    def __repr__(self):
        return f"LLMEngine({len(self.requests)} requests, {self.scheduler!r})"

    def add_request(
        self, client: bytes, reply_id, prompt: list[int], params: SamplingParams
    ) -> GenerateRequest:
        request = GenerateRequest(self.next_request_id, client, reply_id, list(prompt), params, self.clock())
        self.next_request_id += 1
        shared = params.share_prompt or params.n == 1
        for sample, seq_id in enumerate(self.new_seq_ids(1 if shared else params.n)):
            request.seqs.append(Sequence(seq_id, request, sample, request.prompt))
            self.scheduler.add(request.seqs[-1])
        self.requests[request.request_id] = request
        return request

    def has_work(self) -> bool:
        return self.scheduler.has_work()

    def running(self) -> int:
        """Sequences holding memory in the pool (the admitted ones)."""
        return len(self.scheduler.running)

    def step(self) -> tuple[list[GenerateRequest], int]:
        """One step; returns (the requests it finished, the tokens it ran: 0 if nothing fitted)."""
        t0, wall0 = self.clock(), time.perf_counter()
        step = self.scheduler.schedule()
        if not step.scheduled:
            return [], 0
        self.pool.copy(step.copies)
        for s in step.scheduled:
            if s.seq.request.admitted_s is None:
                s.seq.request.admitted_s = t0
                s.seq.request.num_cached_prompt_tokens = s.write_from  # found in the prefix cache
        self._track_peaks()
        logits = self.runner.run(step.scheduled, self.policy)
        now = self.clock()
        greedy = np.argmax(logits, axis=1).tolist()  # every row's greedy token, in one call
        finished = []
        row = 0
        for s in step.scheduled:
            row += s.num_new
            if not s.completes_window:  # a chunk of a prefill: its KV is in, nothing to sample
                s.seq.num_cached_tokens = s.length
            elif s.draft:
                finished += self._verify(s, greedy[row - s.num_new : row], now)
            else:
                finished += self._postprocess(s, logits[row - 1], greedy[row - 1], now)
        self.num_steps += 1
        decodes = sum(1 for s in step.scheduled if s.is_decode or s.draft)  # sequences decoding
        verified = sum(len(s.draft) for s in step.scheduled)  # their drafts: not prefill either
        self.num_prefill_tokens += step.num_tokens - decodes - verified
        times = self.runner.last
        self.step_log.append(
            (
                t0 - self.start_s,
                decodes,
                step.num_tokens - decodes - verified,
                len(self.scheduler.running),
                len(self.scheduler.waiting),
                now - t0,
                self.policy.allocated_slots(),
                times.kv_tokens,
                times.model_s,
                times.attention_s,
                time.perf_counter() - wall0 - times.model_s - times.attention_s,
            )
        )
        return finished, step.num_tokens

    def _track_peaks(self) -> None:
        used, allocated, _ = self.policy.usage()
        self.peak_running = max(self.peak_running, len(self.scheduler.running))
        self.peak_allocated_slots = max(self.peak_allocated_slots, allocated)
        self.peak_used_slots = max(self.peak_used_slots, used)

    def _postprocess(
        self, s: Scheduled, logits: np.ndarray, greedy: int, now: float
    ) -> list[GenerateRequest]:
        """`greedy`: the row's first largest logit, the token at temperature 0 (sample_token's)."""
        seq, request = s.seq, s.seq.request
        seq.num_cached_tokens = s.first_position + s.num_new
        params = request.params
        samples = [seq]
        if len(request.seqs) < params.n:  # the prompt's first step: fork the other samples
            samples += self._fork(seq, params.n - 1)
        done = False
        for sample in samples:
            token = (
                greedy if params.temperature == 0 else sample_token(logits, params.temperature, sample.rng)
            )
            sample.token_ids.append(token)
            sample.token_times_s.append(now)
            self.num_generated_tokens += 1
            if sample.is_done:
                if sample.status is SequenceStatus.RUNNING:
                    self.scheduler.finish(sample)
                sample.status = SequenceStatus.FINISHED
                done = True
        if request.first_token_s is None:
            request.first_token_s = now
        if done and request.is_finished:
            request.finished_s = now
            del self.requests[request.request_id]
            self.num_finished_requests += 1
            return [request]
        return []

    def _verify(self, s: Scheduled, greedy: list[int], now: float) -> list[GenerateRequest]:
        """A speculative step's tokens (speculative.py): the accepted drafts, then greedy's next."""
        seq, request = s.seq, s.seq.request
        tokens = accept_greedy(list(s.draft), greedy)
        self.num_draft_tokens += len(s.draft)
        self.num_accepted_tokens += len(tokens) - 1
        seq.num_cached_tokens = s.first_position + len(tokens)  # the last token and the accepted drafts
        seq.token_ids += tokens
        seq.token_times_s += [now] * len(tokens)
        self.num_generated_tokens += len(tokens)
        if not seq.is_done:
            return []
        self.scheduler.finish(seq)
        if request.is_finished:
            request.finished_s = now
            del self.requests[request.request_id]
            self.num_finished_requests += 1
            return [request]
        return []

    def _fork(self, parent: Sequence, k: int) -> list[Sequence]:
        """k children of `parent` (before its first token is appended), sharing its KV if they
        are to run; if the policy cannot hold them now, they wait and are recomputed later."""
        ids = self.new_seq_ids(k)
        children = [parent.fork(seq_id, parent.sample + 1 + i) for i, seq_id in enumerate(ids)]
        parent.request.seqs += children
        if parent.request.params.max_new_tokens == 1:
            return children  # each is done with the token it is about to get: no KV needed
        sched = self.scheduler
        if len(sched.running) + k <= self.config.max_num_seqs and self.policy.can_fork(parent.seq_id, k):
            self.pool.copy(self.policy.fork(parent.seq_id, ids))
            for child in children:
                child.status = SequenceStatus.RUNNING
                sched.running.append(child)
        else:
            for child in reversed(children):
                child.restart_window(self.model.config.context)
                sched.waiting.appendleft(child)
        return children

    def abort_request(self, request_id: int) -> int:
        """Drop one request wherever it is and free its sequences' memory now (its client went
        away, or it met a stop string); returns how many of its sequences were live."""
        request = self.requests.pop(request_id, None)
        if request is None:
            return 0
        seqs = [s for s in request.seqs if s.status is not SequenceStatus.FINISHED]
        self.scheduler.abort(seqs)
        return len(seqs)

    def abort(self, client: bytes | None = None) -> tuple[list[GenerateRequest], int]:
        """Drop every request of `client` (of every client if None) and free its sequences'
        memory; returns the requests and how many of their sequences were live."""
        gone = [r for r in self.requests.values() if client is None or r.client == client]
        seqs = [s for r in gone for s in r.seqs if s.status is not SequenceStatus.FINISHED]
        self.scheduler.abort(seqs)
        for r in gone:
            del self.requests[r.request_id]
        return gone, len(seqs)

    def stats(self) -> dict:
        return {
            "requests": len(self.requests),
            "finished_requests": self.num_finished_requests,
            "running": len(self.scheduler.running),
            "waiting": len(self.scheduler.waiting),
            "peak_running": self.peak_running,
            "peak_allocated_slots": self.peak_allocated_slots,
            "peak_used_slots": self.peak_used_slots,
            "steps": self.num_steps,
            "generated_tokens": self.num_generated_tokens,
            "prefill_tokens": self.num_prefill_tokens,
            "preempted": self.scheduler.num_preempted,
            "window_restarts": self.scheduler.num_window_restarts,
            "draft_tokens": self.num_draft_tokens,
            "accepted_tokens": self.num_accepted_tokens,
        }

    def reset_peaks(self) -> None:
        """Peaks from now on (they start at what is held now)."""
        self.peak_running = self.peak_allocated_slots = self.peak_used_slots = 0
        self._track_peaks()
