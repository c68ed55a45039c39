"""The server's Prometheus metrics (prometheus-client), in vLLM's terms and ours.

Gauges are set from the engine's thread after every step (and after a cancel): KV blocks used and
in all, running and waiting requests. Counters follow the engine's own counts (prefix-cache hits in
blocks, preemptions, prompt and generated tokens, speculative drafts and acceptances). Histograms
are observed once a request finishes, from the engine's timestamps: time to first token, time per
output token after the first (each sequence's mean gap), end-to-end latency. An engine rebuilt
after a failed step (engine_loop.py) is counted, and the counters follow the new engine's counts
from zero on. One registry per server, so that several servers in one process (tests) do not share
their series.
"""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4 as CONTENT_TYPE

from playground.kvcache.engine.llm_engine import LLMEngine
from playground.kvcache.engine.sequence import GenerateRequest, SequenceStatus

PREFIX = "playground_"
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
TPOT_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
E2E_BUCKETS_S = (0.01, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)

# engine counter -> (metric name, help); the counters follow these totals
COUNTED = {
    "preempted": ("num_preemptions", "Sequences preempted (their KV freed, recomputed later)"),
    "prefill_tokens": ("prompt_tokens", "Prompt tokens prefilled (prefix-cache hits not counted)"),
    "generated_tokens": ("generation_tokens", "Tokens generated"),
    "draft_tokens": ("spec_decode_num_draft_tokens", "Speculative tokens drafted by prompt lookup"),
    "accepted_tokens": ("spec_decode_num_accepted_tokens", "Speculative tokens accepted"),
}


class ServingMetrics:
    def __init__(self, block_size: int, num_blocks: int):
        self.registry = r = CollectorRegistry()
        self.block_size = block_size
        self.kv_blocks_used = Gauge(PREFIX + "kv_blocks_used", "KV-cache blocks allocated", registry=r)
        Gauge(PREFIX + "kv_blocks_total", "KV-cache blocks in the pool", registry=r).set(num_blocks)
        self.running = Gauge(
            PREFIX + "num_requests_running", "Requests with a sequence in the batch", registry=r
        )
        self.waiting = Gauge(PREFIX + "num_requests_waiting", "Requests waiting for the batch", registry=r)
        self.cache_hits = Counter(
            PREFIX + "prefix_cache_hits", "Prompt blocks found in the prefix cache", registry=r
        )
        self.counters = {k: Counter(PREFIX + name, text, registry=r) for k, (name, text) in COUNTED.items()}
        self.ttft = Histogram(
            PREFIX + "time_to_first_token_seconds", "Time to first token", buckets=TTFT_BUCKETS_S, registry=r
        )
        self.tpot = Histogram(
            PREFIX + "time_per_output_token_seconds",
            "Time per output token after the first",
            buckets=TPOT_BUCKETS_S,
            registry=r,
        )
        self.e2e = Histogram(
            PREFIX + "e2e_request_latency_seconds",
            "End-to-end request latency",
            buckets=E2E_BUCKETS_S,
            registry=r,
        )
        self.restarts = Counter(
            PREFIX + "engine_restarts",
            "Engines rebuilt after a failed step, their requests run again",
            registry=r,
        )
        self.seen = dict.fromkeys([*COUNTED, "cache_hit_blocks"], 0)

    def on_restart(self, why: str) -> None:
        self.restarts.inc()
        self.seen = dict.fromkeys(self.seen, 0)

    def on_step(self, engine: LLMEngine) -> None:
        """The gauges and counters from the engine's state (its thread calls this)."""
        policy = engine.policy
        self.kv_blocks_used.set(-(-policy.allocated_slots() // self.block_size))
        running = {id(s.request) for s in engine.scheduler.running}
        self.running.set(len(running))
        self.waiting.set(len(engine.requests) - len(running))
        totals = {**engine.stats(), "cache_hit_blocks": policy.stats()["cache_hit_blocks"]}
        for key, seen in self.seen.items():
            counter = self.cache_hits if key == "cache_hit_blocks" else self.counters[key]
            if totals[key] > seen:
                counter.inc(totals[key] - seen)
                self.seen[key] = totals[key]

    def on_finish(self, request: GenerateRequest) -> None:
        if request.first_token_s is not None:
            self.ttft.observe(request.first_token_s - request.arrival_s)
        if request.finished_s is not None:
            self.e2e.observe(request.finished_s - request.arrival_s)
        for seq in request.seqs:
            times = seq.token_times_s
            if seq.status is SequenceStatus.FINISHED and len(times) > 1:
                self.tpot.observe((times[-1] - times[0]) / (len(times) - 1))

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


__all__ = ["CONTENT_TYPE", "ServingMetrics"]
