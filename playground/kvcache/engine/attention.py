"""Attention over the pool: each sequence's one query against all of its keys and values, read
where its policy put them.

    out[i, h] = softmax(q[i, h] . K_i[:, h]^T / sqrt(head_dim)) V_i[:, h]      over all n_i tokens

This is a decode step's attention (and the server's `attend` op). Where sequence i's tokens are
is a `RunTable`, built from the policy: the paged policy gives each sequence's block table, and
token p lives in slot `table[p // block_size] * block_size + p % block_size`, so its keys are
read block by block, one run of `block_size x heads x head_dim` floats per block, wherever the
block is (PagedAttention's kernel); contiguous and reserve-max give one start slot, and the keys
are one run (kv_pool.py lays a layer's keys out so that this is true).

Two kernels compute it: `numpy` gathers each sequence's blocks into one array (`np.take` of the
blocks: a copy of every key and value it reads), then two batched matrix products; `native` is
`_playground_native.paged_attention` (native/attention.c), which reads each run where it lies,
with no copy, several blocks at once so that the prefetcher follows several runs, the GIL
released. What the gather costs in numpy, and what the scattered runs cost in C, is what
`attention_bench` measures.
`prefill_attention` is the causal attention of a prefill's queries: it gathers the sequence's
keys and values through the same table and calls the dense reference (`cached_attention`).
"""

import math
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np

from playground.core.errors import UsageError
from playground.core.native import load_native
from playground.kvcache.engine.allocation import AllocationPolicy
from playground.transformer.generate import cached_attention
from playground.transformer.layers import softmax

Kernel = Literal["native", "numpy"]  # the decode attention kernels: C, or numpy beside it
KERNELS: tuple[Kernel, ...] = get_args(Kernel)


@dataclass(frozen=True)
class RunTable:
    """Where each of a batch's sequences keeps its tokens. Sequence i's entries are
    `tables[starts[i]:starts[i + 1]]`: its block table if `block_size` > 0 (paged), else one
    entry, the slot of its first token (contiguous). `seq_lens[i]` tokens are attended."""

    tables: np.ndarray  # int64
    starts: np.ndarray  # int64, num_seqs + 1
    seq_lens: np.ndarray  # int64, num_seqs
    block_size: int  # 0: contiguous runs

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens)

    def table(self, i: int) -> np.ndarray:
        return self.tables[self.starts[i] : self.starts[i + 1]]

    def last_slots(self) -> np.ndarray:
        """The slot of every sequence's last token (position seq_lens[i] - 1), in one pass."""
        last = self.seq_lens - 1
        first_entry = self.starts[:-1]
        if not self.block_size:
            return self.tables[first_entry] + last
        return self.tables[first_entry + last // self.block_size] * self.block_size + last % self.block_size

    def slots(self, i: int) -> np.ndarray:
        """The slot of each of sequence i's tokens, in order."""
        n, table = int(self.seq_lens[i]), self.table(i)
        if not self.block_size:
            return table[0] + np.arange(n, dtype=np.int64)
        pos = np.arange(n, dtype=np.int64)
        return table[pos // self.block_size] * self.block_size + pos % self.block_size


def run_table(policy: AllocationPolicy, seq_ids: list[int], lengths: list[int] | None = None) -> RunTable:
    """The RunTable of `seq_ids` (in that order) at `lengths` tokens (default: their current
    lengths under `policy`; a chunk of a prefill or a sequence holding slots past its length
    reads fewer)."""
    tables = [policy.table(s) for s in seq_ids]
    starts = np.zeros(len(tables) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in tables], out=starts[1:])
    flat = np.fromiter((b for t in tables for b in t), dtype=np.int64, count=int(starts[-1]))
    if lengths is None:
        lengths = [policy.length(s) for s in seq_ids]
    lens = np.asarray(lengths, dtype=np.int64).reshape(len(tables))
    return RunTable(flat, starts, lens, policy.block_size if policy.paged else 0)


def gather_kv(keys: np.ndarray, values: np.ndarray, runs: RunTable, i: int) -> tuple[np.ndarray, np.ndarray]:
    """Sequence i's keys and values (n, heads, head_dim): its blocks gathered into new arrays
    (paged), or views of its one run (contiguous)."""
    n, table = int(runs.seq_lens[i]), runs.table(i)
    if not runs.block_size:
        return keys[table[0] : table[0] + n], values[table[0] : table[0] + n]
    bs, shape = runs.block_size, keys.shape[1:]
    blocks = table[: -(-n // bs)]
    k = np.take(keys.reshape(-1, bs, *shape), blocks, axis=0).reshape(-1, *shape)[:n]
    v = np.take(values.reshape(-1, bs, *shape), blocks, axis=0).reshape(-1, *shape)[:n]
    return k, v


def _attend_one(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """q (H, hd) over k, v (n, H, hd) -> (H, hd): per head one matrix-vector product each way."""
    scores = np.matmul(k.transpose(1, 0, 2), q[:, :, None])[:, :, 0]  # (H, n)
    scores *= scale
    return np.matmul(softmax(scores)[:, None, :], v.transpose(1, 0, 2))[:, 0, :]


def _check(q: np.ndarray, keys: np.ndarray, values: np.ndarray, runs: RunTable) -> None:
    if q.ndim != 3 or q.shape[0] != runs.num_seqs or q.shape[1:] != keys.shape[1:]:
        raise UsageError(f"q must be (num_seqs={runs.num_seqs}, {keys.shape[1:]}), got {q.shape}", field="q")
    if keys.shape != values.shape:
        raise UsageError(f"keys {keys.shape} and values {values.shape} differ")


def decode_attention(
    q: np.ndarray,
    keys: np.ndarray,
    values: np.ndarray,
    runs: RunTable,
    kernel: str = "native",
    streams: int = 0,
) -> np.ndarray:
    """q (num_seqs, heads, head_dim) float32, keys/values one layer's planes (slots, heads,
    head_dim) -> (num_seqs, heads, head_dim): each query over all of its sequence's tokens.
    `streams`: blocks the native kernel reads at once (0: its choice; native/attention.c)."""
    _check(q, keys, values, runs)
    scale = 1.0 / math.sqrt(q.shape[-1])
    if kernel == "numpy":
        out = np.empty_like(q)
        for i in range(runs.num_seqs):
            out[i] = _attend_one(q[i], *gather_kv(keys, values, runs, i), scale)
        return out
    if kernel != "native":
        raise UsageError(f"unknown kernel {kernel!r}; allowed: {', '.join(KERNELS)}", field="kernel")
    out = np.empty(q.shape, dtype=np.float32)
    load_native().paged_attention(
        np.ascontiguousarray(q, dtype=np.float32),
        keys,
        values,
        runs.tables,
        runs.starts,
        runs.seq_lens,
        runs.block_size,
        out,
        streams,
    )
    return out


def prefill_attention(
    q: np.ndarray, keys: np.ndarray, values: np.ndarray, runs: RunTable, i: int, first_position: int
) -> np.ndarray:
    """The causal attention of sequence i's new queries q (m, heads, head_dim) at positions
    first_position.. over its keys and values up to each query's position (runs.seq_lens[i] =
    first_position + m of them): `cached_attention` on what the table gathers."""
    k, v = gather_kv(keys, values, runs, i)
    return cached_attention(q, k, v, first_position)
