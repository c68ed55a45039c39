"""The model runner: one step of the model for every scheduled sequence at once, attention over
the pool.

A step packs each scheduled sequence's new tokens one after the other (a decode's one token, a
prefill's window) and calls `Transformer.step(tokens, positions, attention)` once. The attention
is `PoolAttention`, built for the step as vLLM builds its attention metadata: the slot each new
token's K and V go to (`policy.slot_list`), a `RunTable` of the decoding sequences for the decode
kernel, and one of the prefilling ones for the causal prefill. Per layer it first writes the new
tokens' keys and values into that layer's planes, then attends: so a prefill that shares another
one's cached prefix blocks in the same step reads them after they were written.
"""

import time
from dataclasses import dataclass

import numpy as np

from playground.kvcache.engine.allocation import AllocationPolicy
from playground.kvcache.engine.attention import decode_attention, prefill_attention, run_table
from playground.kvcache.engine.kv_pool import KVPool
from playground.kvcache.engine.scheduler import Scheduled
from playground.transformer.model import Transformer


class PoolAttention:
    """`Transformer.step`'s attend for one step (see the module doc)."""

    def __init__(self, pool: KVPool, policy: AllocationPolicy, scheduled: list[Scheduled], kernel: str):
        self.pool, self.kernel = pool, kernel
        rows = 0
        write_rows: list[int] = []  # the prefills' new tokens; the decodes' come from their run table
        write_slots: list[int] = []
        decode_rows: list[int] = []
        decode_ids: list[int] = []
        decode_lens: list[int] = []
        decode_writes: list[bool] = []  # False: a cached window's last token, computed again unwritten
        prefills: list[tuple[slice, int]] = []  # (rows, first position) of each prefill
        prefill_ids: list[int] = []
        prefill_lens: list[int] = []
        for s in scheduled:
            if s.is_decode:
                decode_rows.append(rows)
                decode_ids.append(s.seq.seq_id)
                decode_lens.append(s.length)
                decode_writes.append(s.write_from == s.first_position)
            else:
                stop = s.first_position + s.num_new
                if s.write_from < stop:
                    write_slots += policy.slot_list(s.seq.seq_id, s.write_from, stop)
                    write_rows += range(rows + s.write_from - s.first_position, rows + s.num_new)
                prefills.append((slice(rows, rows + s.num_new), s.first_position))
                prefill_ids.append(s.seq.seq_id)
                prefill_lens.append(s.length)
            rows += s.num_new
        self.decode_rows = np.asarray(decode_rows, dtype=np.int64)
        self.decode_runs = run_table(policy, decode_ids, decode_lens)
        writes = np.asarray(decode_writes, dtype=bool)
        self.write_rows = np.concatenate([self.decode_rows[writes], np.asarray(write_rows, dtype=np.int64)])
        self.write_slots = np.concatenate(
            [self.decode_runs.last_slots()[writes], np.asarray(write_slots, dtype=np.int64)]
        )
        self.prefills, self.prefill_runs = prefills, run_table(policy, prefill_ids, prefill_lens)
        self.elapsed_s = 0.0  # in __call__, over the step's layers

    @property
    def kv_tokens(self) -> int:
        """Tokens of KV the decode attention reads per layer: every decoding sequence's."""
        return int(self.decode_runs.seq_lens.sum())

    def __call__(self, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        out = self._attend(layer, q, k, v)
        self.elapsed_s += time.perf_counter() - t0
        return out

    def _attend(self, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
        keys, values = self.pool.keys(layer), self.pool.values(layer)
        keys[self.write_slots] = k[self.write_rows]
        values[self.write_slots] = v[self.write_rows]
        out = np.empty(q.shape, dtype=q.dtype)
        if len(self.decode_rows):
            out[self.decode_rows] = decode_attention(
                q[self.decode_rows], keys, values, self.decode_runs, self.kernel
            )
        for i, (rows, first) in enumerate(self.prefills):
            out[rows] = prefill_attention(q[rows], keys, values, self.prefill_runs, i, first)
        return out


@dataclass(frozen=True)
class RunTimes:
    """Where one `run` spent its time: the step's metadata (packing the tokens, slot lists, run
    tables), the model's own layers, and the attention over the pool inside them."""

    metadata_s: float
    model_s: float
    attention_s: float
    kv_tokens: int  # KV tokens the decode attention read per layer


class ModelRunner:
    def __init__(self, model: Transformer, pool: KVPool, kernel: str = "native"):
        self.model, self.pool, self.kernel = model, pool, kernel
        self.last = RunTimes(0.0, 0.0, 0.0, 0)

    def run(self, scheduled: list[Scheduled], policy: AllocationPolicy) -> np.ndarray:
        """The logits (num_tokens, vocab) of every new token, packed in the order of `scheduled`
        (a speculative sequence's last token, then its draft); `last` says where the time went."""
        t0 = time.perf_counter()
        tokens: list[int] = []
        positions: list[int] = []
        for s in scheduled:
            start = s.seq.window_start + s.first_position
            tokens += s.seq.token_ids[start : start + s.num_new - len(s.draft)]
            tokens += s.draft
            positions += range(s.first_position, s.first_position + s.num_new)
        attention = PoolAttention(self.pool, policy, scheduled, self.kernel)
        t1 = time.perf_counter()
        logits = self.model.step(np.asarray(tokens, dtype=np.int64), np.asarray(positions), attention)
        t2 = time.perf_counter()
        self.last = RunTimes(t1 - t0, t2 - t1 - attention.elapsed_s, attention.elapsed_s, attention.kv_tokens)
        return logits
