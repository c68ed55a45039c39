"""Moving tokens to their experts and back, two ways: each a pair of classes, the sender's side
(`*Route`: a token's assignments out to the ranks that hold their experts, the results back and
weighted into the token's output) and the receiver's (`*Experts`: the rows that arrived, grouped by
the expert they are for), each step a pure forward with its backward.

Both are the lecture's indexed read (§1.6: an indexed read is fast only when the accesses can be made
contiguous), done in two orders:

- `sorted` (Megatron-LM's and MegaBlocks' permute): the kept assignments are sorted by expert once,
  the token rows gathered in that order into one buffer, so the all-to-all's block for each rank and
  each expert's rows are contiguous slices; the receiver, whose rows arrive source by source, sorts
  them by expert once more (from the counts alone); the results go back the same way and each lands
  in its assignment's slot, the slots summed with the gates.
- `gathered` (the per-expert loop of Hugging Face's Mixtral): nothing is sorted; the sender scans the
  routing once per destination rank and gathers that rank's rows in token order, the rows travel
  with their expert's index, and the receiver scans them once per expert, gathers the expert's rows
  where they lie and writes its results back in place; the sender adds each result into its token's
  output with a scatter-add (`np.add.at`).

The same rows go over the wire either way; `gathered` also sends each row's expert index (an int64
per row), `sorted` only the counts per expert. The results are equal to rounding (the products run
over differently ordered rows), which the tests check.

Wire format: a `Route` says how many rows go to each rank (`send_rows`); `receiver(exchange)` does
the small exchanges the receiver needs first (`exchange.counts`, `exchange.rows`: layer.Exchange)
and returns its `*Experts`.
"""

from collections.abc import Callable
from typing import Protocol

import numpy as np


class ExpertRows(Protocol):
    """The receiver's side: the rows that arrived (`recv_rows` from each rank), by expert."""

    recv_rows: np.ndarray
    rows_per_expert: np.ndarray

    def group(self, rows: np.ndarray) -> list[np.ndarray]: ...
    def ungroup(self, per_expert: list[np.ndarray], width: int, dtype) -> np.ndarray: ...


class Route(Protocol):
    """The sender's side: which rows go to which rank (`send_rows`), and back into the tokens."""

    send_rows: np.ndarray

    def receiver(self, exchange) -> ExpertRows: ...
    def pack(self, x2: np.ndarray) -> np.ndarray: ...
    def pack_backward(self, drows: np.ndarray) -> np.ndarray: ...
    def combine(self, rows: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...
    def combine_backward(
        self, dout: np.ndarray, weights: np.ndarray, combined: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]: ...


class SortedRoute:
    """The sender's side of `sorted`: `order` (the kept assignments, flat t k + j, sorted by expert and
    so by rank) and `counts` (P, E/P): what goes to each rank, expert by expert."""

    def __init__(self, choice: np.ndarray, keep: np.ndarray, experts: int, ranks: int):
        n, self.k = choice.shape
        kept = np.flatnonzero(keep)
        expert = choice.ravel()[kept]
        self.order = kept[np.argsort(expert, kind="stable")]
        self.counts = np.bincount(expert, minlength=experts).reshape(ranks, experts // ranks)
        self.send_rows = self.counts.sum(axis=1)
        self.slots = n * self.k

    def receiver(self, exchange) -> "SortedExperts":
        return SortedExperts(exchange.counts(self.counts))

    def pack(self, x2: np.ndarray) -> np.ndarray:
        """The permutation: token rows (n, d) -> the rows to send, in `order` (m, d)."""
        return x2[self.order // self.k]

    def pack_backward(self, drows: np.ndarray) -> np.ndarray:
        """(m, d) -> the tokens' gradient (n, d): each slot's row, the k slots of a token summed."""
        slots = np.zeros((self.slots, drows.shape[-1]), dtype=drows.dtype)
        slots[self.order] = drows
        return slots.reshape(-1, self.k, drows.shape[-1]).sum(axis=1)

    def combine(self, rows: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The un-permutation: the results (m, d) in `order` -> each in its slot (n, k, d), the output
        (n, d) = sum_j weights[:, j] slot[:, j]; returns (output, slots) (backward needs the slots)."""
        slots = np.zeros((self.slots, rows.shape[-1]), dtype=rows.dtype)
        slots[self.order] = rows
        slots = slots.reshape(-1, self.k, rows.shape[-1])
        return np.einsum("nk,nkd->nd", weights, slots), slots

    def combine_backward(
        self, dout: np.ndarray, weights: np.ndarray, combined: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """dout (n, d) -> (the results' gradient (m, d) in `order`, the weights' gradient (n, k))."""
        dweights = np.einsum("nd,nkd->nk", dout, combined)  # combined: the slots
        drows = (weights[..., None] * dout[:, None, :]).reshape(self.slots, -1)[self.order]
        return drows, dweights


class SortedExperts:
    """The receiver's side of `sorted`: rows from each source rank in turn, each source's sorted by
    expert; `order` sorts them by expert (None: one source, already sorted)."""

    def __init__(self, recv_counts: np.ndarray):
        ranks, local = recv_counts.shape
        self.recv_rows = recv_counts.sum(axis=1)
        self.rows_per_expert = recv_counts.sum(axis=0)
        self.bounds = np.concatenate([[0], np.cumsum(self.rows_per_expert)])
        self.order = None
        if ranks > 1:
            expert_of_row = np.repeat(np.tile(np.arange(local), ranks), recv_counts.ravel())
            self.order = np.argsort(expert_of_row, kind="stable")

    def group(self, rows: np.ndarray) -> list[np.ndarray]:
        """The rows that arrived (R, w) -> each expert's, contiguous (views of one sorted buffer)."""
        ordered = rows if self.order is None else rows[self.order]
        return [ordered[a:b] for a, b in zip(self.bounds[:-1], self.bounds[1:], strict=True)]

    def ungroup(self, per_expert: list[np.ndarray], width: int, dtype) -> np.ndarray:
        """`group`'s inverse: each expert's rows back where they arrived, (R, w)."""
        ordered = np.concatenate(per_expert) if per_expert else np.empty((0, width), dtype=dtype)
        if self.order is None:
            return ordered
        out = np.empty_like(ordered)
        out[self.order] = ordered
        return out


class GatheredRoute:
    """The sender's side of `gathered`: `ids[r]` the kept assignments (flat t k + j) for rank r, in
    token order, found by a scan of the routing per rank; `local_expert`: each row's expert on its
    rank, which travels with the rows."""

    def __init__(self, choice: np.ndarray, keep: np.ndarray, experts: int, ranks: int):
        n, self.k = choice.shape
        self.local = local = experts // ranks
        owner = choice // local
        self.ids = [np.flatnonzero(keep & (owner == r)) for r in range(ranks)]
        self.send_rows = np.array([len(i) for i in self.ids], dtype=np.int64)
        self.all_ids = np.concatenate(self.ids)
        self.local_expert = choice.ravel()[self.all_ids] % local
        self.tokens = n

    def receiver(self, exchange) -> "GatheredExperts":
        recv_rows = exchange.counts(self.send_rows[:, None])[:, 0]
        expert = exchange.rows(self.local_expert[:, None], self.send_rows, recv_rows)[:, 0]
        return GatheredExperts(expert, recv_rows, self.local)

    def pack(self, x2: np.ndarray) -> np.ndarray:
        """Each rank's rows gathered from where the tokens lie, rank after rank (m, d)."""
        return np.concatenate([x2[ids // self.k] for ids in self.ids])

    def pack_backward(self, drows: np.ndarray) -> np.ndarray:
        dx = np.zeros((self.tokens, drows.shape[-1]), dtype=drows.dtype)
        np.add.at(dx, self.all_ids // self.k, drows)
        return dx

    def combine(self, rows: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each result weighted and added into its token's output in place (a scatter-add)."""
        out = np.zeros((self.tokens, rows.shape[-1]), dtype=rows.dtype)
        np.add.at(out, self.all_ids // self.k, weights.ravel()[self.all_ids, None] * rows)
        return out, rows

    def combine_backward(
        self, dout: np.ndarray, weights: np.ndarray, combined: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        dout_rows = dout[self.all_ids // self.k]
        dweights = np.zeros(weights.size, dtype=dout.dtype)
        dweights[self.all_ids] = np.einsum("md,md->m", dout_rows, combined)  # combined: the rows back
        drows = weights.ravel()[self.all_ids, None] * dout_rows
        return drows, dweights.reshape(weights.shape)


class GatheredExperts:
    """The receiver's side of `gathered`: `rows[e]`, the rows that arrived for expert e, found by a
    scan of the arrived experts' indices per expert."""

    def __init__(self, expert_of_row: np.ndarray, recv_rows: np.ndarray, local_experts: int):
        self.recv_rows = recv_rows
        self.rows = [np.flatnonzero(expert_of_row == e) for e in range(local_experts)]
        self.rows_per_expert = np.array([len(r) for r in self.rows], dtype=np.int64)
        self.total = int(recv_rows.sum())

    def group(self, rows: np.ndarray) -> list[np.ndarray]:
        """Each expert's rows gathered from where they arrived."""
        return [rows[idx] for idx in self.rows]

    def ungroup(self, per_expert: list[np.ndarray], width: int, dtype) -> np.ndarray:
        """Each expert's results written back in place, (R, w)."""
        out = np.empty((self.total, width), dtype=dtype)
        for idx, y in zip(self.rows, per_expert, strict=True):
            out[idx] = y
        return out


# the two orders (module doc): (choice, keep, experts, ranks) -> the sender's Route
PERMUTATIONS: dict[str, Callable[[np.ndarray, np.ndarray, int, int], Route]] = {
    "sorted": SortedRoute,
    "gathered": GatheredRoute,
}
