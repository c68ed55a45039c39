"""What a client rank of the KV-cache lab runs: the lecture's requests replayed against the
KV-cache server as an inference engine would send them, the fork workloads of the lecture, and a
throughput benchmark.

The replay takes its decisions where the engine takes them. Admission is the engine's rule
(`AdmissionRule`, playground/kvcache/engine/admission.py: in order, at most `max_running`, the
watermark, nothing after a preemption until a finish), and the check-then-act is the server's:
its `create` is the policy's `can_allocate` then `allocate`, its batched `append` the policy's
all-or-nothing `append_batch`, and a refusal (out_of_memory) changes nothing. A refused create
waits (one that can never fit, or waits longer than `max_wait_s`, fails). Each step appends
`decode_tokens_per_step` tokens to every running sequence in one request; if the server refuses
it, the newest sequences are preempted (freed, recreated later from prompt and generated tokens:
vLLM's recompute). The engine asks its policy again after each preemption; a client cannot ask
without acting, so it preempts, newest first, until what they free covers the step's tokens. A
finished sequence is read back, checked against the KV it was given, and freed.
"""

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from playground.kvcache.engine.admission import AdmissionRule
from playground.kvcache.server import protocol as P
from playground.kvcache.server.client import KVClient, KVServerError
from playground.kvcache.workloads import (
    EXERCISE10,
    SECTION45,
    ForkSpec,
    RequestSpec,
    kv_for,
    kv_for_batch,
    section46_requests,
)


@dataclass
class _Job:
    spec: RequestSpec
    generated: int = 0
    waited: bool = False
    first_refused_s: float = 0.0  # when it was first refused or last preempted (once `waited`)

    @property
    def length(self) -> int:
        return self.spec.prompt_len + self.generated


@dataclass
class ReplayStats:
    completed: int = 0
    waited: int = 0
    failed: int = 0
    preempted: int = 0
    read_mismatches: int = 0
    errors: list[str] = field(default_factory=list)


def _verify(client: KVClient, seq_id: int, key: int, length: int, width: int) -> bool:
    header, kv = client.check("read", seq_id=seq_id)
    return header["num_tokens"] == length and _same(kv, kv_for(key, 0, length, width))


def _same(got: np.ndarray | None, want: np.ndarray) -> bool:
    """A read's KV equals `want` (a reply without KV does not)."""
    return got is not None and np.array_equal(got, want)


def replay(
    client: KVClient,
    requests: list[RequestSpec],
    width: int,
    max_running: int = 256,
    decode_tokens_per_step: int = 1,
    max_wait_s: float = 10.0,
    admit_watermark_slots: int = 0,
    verify_every: int = 1,
    on_done=lambda n: None,
) -> ReplayStats:
    """Replay `requests` to the end (module doc): admit, then one decode step of every running
    sequence, preempting when the server refuses it; `on_done(n)` after each finished or failed."""
    r = _Replay(client, width, AdmissionRule(max_running, admit_watermark_slots), max_wait_s, on_done)
    r.waiting.extend(_Job(spec) for spec in requests)
    while r.waiting or r.running:
        r.admit()
        if not r.running:
            time.sleep(0.002)  # the pool is full of other clients' sequences: back off, retry
            continue
        r.decode_step(decode_tokens_per_step, verify_every)
    return r.stats


class _Replay:
    """`replay`'s state: the waiting jobs, the running ones by sequence id in admission order, what
    the server's last reply said of its free slots, and whether a preemption happened since the last
    finish (the admission rule's pressure)."""

    def __init__(self, client: KVClient, width: int, rule: AdmissionRule, max_wait_s: float, on_done):
        self.client, self.width, self.rule, self.max_wait_s, self.on_done = (
            client,
            width,
            rule,
            max_wait_s,
            on_done,
        )
        self.stats = ReplayStats()
        self.waiting: deque[_Job] = deque()
        self.running: dict[int, _Job] = {}  # seq_id -> job, in admission order
        self.free_slots = 0  # what the server's last reply said (read only once something runs)
        self.pressure = False  # preempted since the last finish

    def admit(self) -> None:
        """Create the waiting jobs, in order, while the rule admits them and the server has room;
        a refused one waits, or fails when it can never fit or has waited `max_wait_s`."""
        if not self.rule.is_open(len(self.running), self.pressure):
            return
        while self.waiting:
            job = self.waiting[0]
            if not self.rule.admits(len(self.running), self.free_slots, job.length):  # tokens, not blocks
                return
            kv = kv_for(job.spec.req_id, 0, job.length, self.width)
            header, _ = self.client.call("create", kv, num_tokens=job.length)
            if header["ok"]:
                self.running[header["seq_id"]] = self.waiting.popleft()
                self.free_slots = header["free_slots"]
                continue
            if header["error"] != P.OUT_OF_MEMORY:
                raise KVServerError(header, op="create")
            now = time.monotonic()
            if not job.waited:
                job.waited, job.first_refused_s = True, now
                self.stats.waited += 1
            if not header.get("fits_when_empty", True) or now - job.first_refused_s > self.max_wait_s:
                self.waiting.popleft()
                self.stats.failed += 1
                self.stats.errors.append(f"request {job.spec.req_id} failed: {header['message']}")
                self.on_done(self.stats.completed + self.stats.failed)
                continue
            return

    def decode_step(self, tokens_per_step: int, verify_every: int) -> None:
        """Append the next tokens of every running sequence in one request; refused, preempt."""
        running = self.running
        steps = {s: min(tokens_per_step, j.spec.output_len - j.generated) for s, j in running.items()}
        jobs = [running[s] for s in steps]
        kv = kv_for_batch(
            [j.spec.req_id for j in jobs], [j.length for j in jobs], list(steps.values()), self.width
        )
        header, _ = self.client.call("append", kv, seq_ids=list(steps), num_tokens=list(steps.values()))
        if not header["ok"]:
            if header["error"] != P.OUT_OF_MEMORY:
                raise KVServerError(header, op="append")
            self.preempt(sum(steps.values()))
            return
        self.free_slots = header["free_slots"]
        for s, n in steps.items():
            running[s].generated += n
        self.finish([s for s in steps if running[s].generated >= running[s].spec.output_len], verify_every)

    def preempt(self, tokens: int) -> None:
        """Free the newest sequences until what they free covers `tokens`; they wait first in line."""
        victims, room = [], 0
        for victim in reversed(self.running):
            victims.append(victim)
            room += self.running[victim].length
            if room >= tokens:
                break
        self.free_slots = self.client.check("free", seq_ids=victims)[0]["free_slots"]
        for victim in victims:
            job = self.running.pop(victim)
            if not job.waited:
                job.waited = True
                self.stats.waited += 1
            job.first_refused_s = time.monotonic()
            self.waiting.appendleft(job)
        self.stats.preempted += len(victims)
        self.pressure = True

    def finish(self, finished: list[int], verify_every: int) -> None:
        """Read back (every `verify_every`-th request), count and free the finished sequences."""
        for s in finished:
            job = self.running.pop(s)
            if verify_every and job.spec.req_id % verify_every == 0:
                if not _verify(self.client, s, job.spec.req_id, job.length, self.width):
                    self.stats.read_mismatches += 1
            self.stats.completed += 1
        if finished:
            self.pressure = False
            self.free_slots = self.client.check("free", seq_ids=finished)[0]["free_slots"]
            self.on_done(self.stats.completed + self.stats.failed)


def run_fork_workload(client: KVClient, spec: ForkSpec, width: int, prefix_caching: bool) -> list[dict]:
    """Each way of holding N samples of one prompt, measured by the server's own counters."""
    rows = []
    prompt_kv = kv_for(1_000_000, 0, spec.prompt_len, width)
    modes = ["unshared", "fork"] + (["prefix_cache"] if prefix_caching else [])
    for mode in modes:
        base = client.check("stats")[0]
        children, parent = _samples(client, spec, mode, prompt_kv)
        branch_kv = [
            kv_for(2_000_000 + b, spec.prompt_len, spec.branch_tokens, width)
            for b in range(spec.num_branches)
        ]
        client.check(
            "append",
            np.concatenate(branch_kv),
            seq_ids=children,
            num_tokens=[spec.branch_tokens] * spec.num_branches,
        )
        if parent is not None:
            client.check("free", seq_ids=[parent])
        st = client.check("stats")[0]
        ok = all(
            _same(client.check("read", seq_id=c)[1], np.concatenate([prompt_kv, branch_kv[b]]))
            for b, c in enumerate(children)
        )
        client.check("free", seq_ids=children)
        after = client.check("stats")[0]
        block = st["block_size"]
        rows.append(
            {
                "mode": mode,
                "policy": st["policy"],
                "pages": st["used_blocks"]
                if st["used_blocks"] is not None
                else -(-st["allocated_slots"] // block),
                "allocated_slots": st["allocated_slots"],
                "used_slots": st["used_slots"],
                "shared_blocks": st["shared_blocks"],
                "cow_copies": st["cow_copies"] - base["cow_copies"],
                "reads_exact": ok,
                "leaked_slots": after["allocated_slots"],
            }
        )
    return rows


def _samples(
    client: KVClient, spec: ForkSpec, mode: str, prompt_kv: np.ndarray
) -> tuple[list[int], int | None]:
    """The N samples' sequences, held `mode`'s way: forked from one parent (returned, to free once
    the children wrote), created apart, or created apart with the prompt's tokens for the prefix
    cache to share."""
    if mode == "fork":
        parent = client.check(
            "create", prompt_kv, num_tokens=spec.prompt_len, max_new_tokens=spec.branch_tokens
        )[0]["seq_id"]
        return client.check("fork", seq_id=parent, num_children=spec.num_branches)[0]["child_ids"], parent
    extra = {"tokens": list(range(spec.prompt_len))} if mode == "prefix_cache" else {}
    children = [
        client.check(
            "create", prompt_kv, num_tokens=spec.prompt_len, max_new_tokens=spec.branch_tokens, **extra
        )[0]["seq_id"]
        for _ in range(spec.num_branches)
    ]
    return children, None


def run_bench(
    client: KVClient,
    width: int,
    duration_s: float,
    num_seqs: int,
    prompt_len: int,
    max_len: int,
    key_base: int,
) -> dict:
    """A closed loop: one batched append per step to `num_seqs` sequences; a sequence that
    reaches `max_len` is read back (checked), freed and replaced. Returns counts; latencies
    stay in client.latencies_us."""
    lengths: dict[int, tuple[int, int]] = {}  # seq_id -> (key, length)
    key, mismatches, ops = key_base, 0, 0

    def new_seq():
        nonlocal key, ops
        key += 1
        seq_id = client.check("create", kv_for(key, 0, prompt_len, width), num_tokens=prompt_len)[0]["seq_id"]
        ops += 1
        lengths[seq_id] = (key, prompt_len)

    for _ in range(num_seqs):
        new_seq()
    t_end = time.monotonic() + duration_s
    tokens = 0
    while time.monotonic() < t_end:
        kv = kv_for_batch(
            [k for k, _ in lengths.values()], [n for _, n in lengths.values()], [1] * len(lengths), width
        )
        client.check("append", kv, seq_ids=list(lengths), num_tokens=[1] * len(lengths))
        ops += 1
        tokens += len(lengths)
        for s, (k, n) in list(lengths.items()):
            lengths[s] = (k, n + 1)
            if n + 1 >= max_len:
                mismatches += not _verify(client, s, k, n + 1, width)
                client.check("free", seq_ids=[s])
                ops += 2
                del lengths[s]
                new_seq()
    client.check("free", seq_ids=list(lengths))
    return {"ops": ops + 1, "tokens_appended": tokens, "read_mismatches": mismatches}


def run_workload(comm, client: KVClient, p) -> dict:
    """This client rank's part of workload `p.workload` (the node's Params): its share of the
    section 4.6 requests, the closed-loop benchmark, or (rank 1 only) a fork workload."""
    if p.workload == "section46":
        reqs = section46_requests(
            p.num_requests, p.prompt_min, p.prompt_max, p.output_mean, p.output_cap, p.seed
        )
        mine = reqs[comm.rank - 1 :: comm.size - 1]
        watermark = int(p.admit_watermark * p.capacity_tokens)
        st = replay(
            client,
            mine,
            p.width,
            p.max_running,
            p.decode_tokens_per_step,
            p.max_wait_s,
            watermark,
            p.verify_every,
        )
        return {
            "requests": len(mine),
            "completed": st.completed,
            "waited": st.waited,
            "failed": st.failed,
            "preempted": st.preempted,
            "read_mismatches": st.read_mismatches,
            "errors": st.errors[:5],
        }
    if p.workload == "bench":
        return run_bench(
            client,
            p.width,
            p.bench_duration_s,
            p.bench_seqs,
            p.bench_prompt_tokens,
            p.bench_max_len,
            key_base=comm.rank * 10_000_000,
        )
    if comm.rank != 1:
        return {"idle": True}
    return {
        "fork_rows": run_fork_workload(
            client, SECTION45 if p.workload == "prefix" else EXERCISE10, p.width, p.prefix_caching
        )
    }
