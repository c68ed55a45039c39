"""The serving lab's model of an engine step: the bytes it reads and the work it does, over rates
measured on this machine.

    step_s = weights_s(n) + kv_bytes / read_rate + seqs x per_seq_s + per_step_s

    weights_s(n) = weight_bytes / read_rate                              n = 1
                 = weight_bytes / copy_rate + 2 x matmul_params x n / gemm_rate   n > 1

A step runs its n tokens (one per decoding sequence, a prompt's window per prefill) through every
matrix once. One token is a matrix-vector product: it streams the weights once, at the machine's
read rate, and computes next to nothing. Two or more are a matrix-matrix product: the BLAS first
packs (copies) each panel of the weights into a buffer of its own, so the weights cost a copy at
the machine's copy rate, and then 2 x n multiply-adds per weight at its GEMM rate. This is the
lecture's 2.4 (a fixed cost a batch shares, a small cost per item): reading the weights is the
fixed cost, the per-token compute the item's. The decode attention reads the KV of every decoding
sequence (kv_bytes = KV tokens read x layers x 2 x heads x head_dim x 4 bytes) at the read rate.
What the engine does around them, per scheduled sequence (scheduling, slot lists, run tables,
sampling, and the attention's work per token beyond its bytes) and per step whatever its batch
(each layer's Python), is `per_seq_s` and `per_step_s`, timed on a model of the same layers and
heads whose weights and KV are too small to matter (`measure_overheads`).

The rates: `read_rate` is a matrix-vector product over as many bytes as the served model's
weights, `copy_rate` numpy's copy of them (bytes copied per second), `gemm_rate` the model's own
widest product (d x 4d) at 256 rows. They are measured in-run by `measure_rates` (well under a
second) unless a calibration file provides them (`rates_from_calibration`: the hook for the
`calibrate` command's file). Not in the model: a prefill's attention (numpy, quadratic in the
window), the copy-on-write and move copies, the server's socket loop between steps.
"""

import itertools
import time
from dataclasses import asdict, dataclass

import numpy as np

from playground.kvcache.engine.kv_pool import KV_DTYPE, KVLayout, KVPool
from playground.kvcache.engine.llm_engine import STEP_LOG_COLUMNS, LLMEngine
from playground.kvcache.engine.policies import make_policy
from playground.kvcache.engine.sequence import SamplingParams
from playground.transformer.config import ModelConfig
from playground.transformer.model import Transformer

RATE_KEYS = ("read_bytes_per_s", "pack_bytes_per_s", "copy_bytes_per_s", "gemm_flops_per_s")


@dataclass(frozen=True)
class MachineRates:
    read_bytes_per_s: float  # the weights streamed by a matrix-vector product
    pack_bytes_per_s: float  # the weights packed by a matrix-matrix product (the BLAS's copy)
    copy_bytes_per_s: float  # numpy's copy of as many bytes: bytes copied per second
    gemm_flops_per_s: float  # the model's matrix products per extra row
    per_seq_s: float  # the engine's work per scheduled sequence besides weights and KV bytes
    per_step_s: float  # the engine's work per step besides weights and KV bytes
    source: str  # where the rates come from

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        return (
            f"read {self.read_bytes_per_s / 1e9:.1f} GB/s, pack {self.pack_bytes_per_s / 1e9:.1f} GB/s "
            f"(numpy copy {self.copy_bytes_per_s / 1e9:.1f}), "
            f"GEMM {self.gemm_flops_per_s / 1e9:.0f} GFLOP/s, {self.per_seq_s * 1e6:.0f} us a sequence + "
            f"{self.per_step_s * 1e6:.0f} us a step ({self.source})"
        )


@dataclass(frozen=True)
class StepShape:
    """What one step of a model reads and computes, from its config (float32 serving)."""

    weight_bytes: int  # the matrices every step reads: the blocks' and the output layer's
    matmul_params: int  # their weights: 2 x this flops per token
    kv_bytes_per_token: int  # read by the decode attention, per token of a sequence, all layers

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def of(cls, config: ModelConfig) -> "StepShape":
        d = config.d_model
        params = config.layers * 12 * d * d + config.vocab_size * d
        return cls(params * KV_DTYPE.itemsize, params, config.layers * 2 * d * KV_DTYPE.itemsize)


def weights_s(shape: StepShape, rates: MachineRates, num_tokens: int) -> float:
    if num_tokens <= 1:
        return shape.weight_bytes / rates.read_bytes_per_s
    return (
        shape.weight_bytes / rates.pack_bytes_per_s
        + 2 * shape.matmul_params * num_tokens / rates.gemm_flops_per_s
    )


def predict_step(
    shape: StepShape, rates: MachineRates, num_tokens: int, num_seqs: int, kv_tokens: int
) -> dict:
    """The model's step (seconds), term by term: weights, kv, overhead, and their total."""
    w = weights_s(shape, rates, num_tokens)
    kv = kv_tokens * shape.kv_bytes_per_token / rates.read_bytes_per_s
    over = num_seqs * rates.per_seq_s + rates.per_step_s
    return {"weights_s": w, "kv_s": kv, "overhead_s": over, "total_s": w + kv + over}


def predict_log(shape: StepShape, rates: MachineRates, step_log: list) -> np.ndarray:
    """The model's time of every step of an engine's step log (STEP_LOG_COLUMNS)."""
    log = np.asarray(step_log, dtype=float).reshape(-1, len(STEP_LOG_COLUMNS))
    c = {k: i for i, k in enumerate(STEP_LOG_COLUMNS)}
    out = np.empty(len(log))
    for i, row in enumerate(log):
        decodes, prefill = int(row[c["decodes"]]), int(row[c["prefill_tokens"]])
        seqs = decodes + (1 if prefill else 0)  # a step's prefills, at least one sequence
        out[i] = predict_step(shape, rates, decodes + prefill, seqs, int(row[c["kv_tokens"]]))["total_s"]
    return out


# ---- measuring the rates -----------------------------------------------------------------------


def _median_s(fn, reps: int = 5) -> float:
    fn()  # pages in, warms up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def weight_matrices(model: Transformer) -> list[np.ndarray]:
    """The matrices a step multiplies its tokens by: each block's four, and the output layer."""
    names = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
    blocks = [model.p[f"h.{layer}.{name}"] for layer in range(model.config.layers) for name in names]
    return [*blocks, model.p["wte"].T]


def measure_matrix_products(model: Transformer, rows=(1, 2, 128)) -> dict[int, float]:
    """Seconds of `rows` tokens through every one of the model's matrices, alone (no attention,
    no layer norms, no Python around them), for each count of rows."""
    rng = np.random.default_rng(0)
    mats = weight_matrices(model)
    out = {}
    for n in rows:
        xs = [rng.standard_normal((n, m.shape[0]), dtype=np.float32) for m in mats]
        out[n] = _median_s(lambda xs=xs: [x @ m for x, m in zip(xs, mats, strict=True)])
    return out


def measure_copy(nbytes: int) -> float:
    """numpy's copy of `nbytes` (at least 1 MiB) of float32: bytes copied per second."""
    a = np.ones(max(nbytes, 1 << 20) // 4, dtype=np.float32)
    c = np.empty_like(a)
    return a.nbytes / _median_s(lambda: np.copyto(c, a))


def measure_overheads(layers: int, heads: int, batch: int = 32, steps: int = 40) -> tuple[float, float]:
    """(per_seq_s, per_step_s): decode steps of an engine serving a model of `layers` and `heads`
    with head_dim 2 (weights and KV of a few KiB), at batch 1 and `batch`: the medians' slope
    and intercept. What this times is what every step of any model of that shape does besides
    reading its weights and KV."""
    config = ModelConfig(layers=layers, d_model=2 * heads, heads=heads, context=64)
    model = Transformer(config, seed=0)
    medians = []
    for b in (1, batch):
        capacity = b * config.context  # whole blocks
        pool = KVPool(capacity, config.kv_width, KVLayout(layers, heads, 2))
        ids = itertools.count()
        engine = LLMEngine(
            model,
            make_policy("paged", capacity, 16),
            pool,
            new_seq_ids=lambda k, ids=ids: [next(ids) for _ in range(k)],
        )
        for i in range(b):
            engine.add_request(b"", i, list(range(8)), SamplingParams(steps, seed=i))
        while engine.has_work():
            engine.step()
        log = np.asarray(engine.step_log[2:], dtype=float)  # after the prefill and one warm step
        medians.append(float(np.median(log[:, STEP_LOG_COLUMNS.index("step_s")])))
    per_seq = max(0.0, (medians[1] - medians[0]) / (batch - 1))
    return per_seq, max(0.0, medians[0] - per_seq)


def measure_rates(model: Transformer) -> MachineRates:
    """The rates of `model`'s step on this machine, measured now (about a second for 25M
    parameters): its own matrices multiplied alone by 1, 2 and 128 rows give the read rate (1 row),
    the slope of 2 -> 128 rows the GEMM rate, and what 2 rows cost beyond their compute the rate
    at which the BLAS packs the weights; numpy's copy of as many bytes is measured beside it."""
    shape = StepShape.of(model.config)
    t = measure_matrix_products(model)
    slope_s = (t[128] - t[2]) / 126  # one more row through every matrix
    pack_s = max(t[2] - 2 * slope_s, 1e-9)
    per_seq, per_step = measure_overheads(model.config.layers, model.config.heads)
    return MachineRates(
        read_bytes_per_s=shape.weight_bytes / t[1],
        pack_bytes_per_s=shape.weight_bytes / pack_s,
        copy_bytes_per_s=measure_copy(shape.weight_bytes),
        gemm_flops_per_s=2 * shape.matmul_params / max(slope_s, 1e-12),
        per_seq_s=per_seq,
        per_step_s=per_step,
        source="measured in-run on the served model's own matrices",
    )


def rates_from_calibration(record: dict, overheads: tuple[float, float], source: str) -> MachineRates | None:
    """The hook for a calibration file (the `calibrate` command's): its memory rates, if it has
    every one of RATE_KEYS, with the engine's overheads measured here; None otherwise."""
    if not all(isinstance(record.get(k), (int, float)) and record[k] > 0 for k in RATE_KEYS):
        return None
    rates = {k: float(record[k]) for k in RATE_KEYS}
    per_seq_s, per_step_s = overheads
    return MachineRates(**rates, per_seq_s=per_seq_s, per_step_s=per_step_s, source=source)
