"""A GPT-2 shaped, byte-level transformer in numpy, forward and backward by hand: the model that
the data-parallel training lab trains and the KV-cache server serves (docs/transformer.md).

config.py (ModelConfig) -> layout.py (where each parameter lives in the flat buffer) -> init.py
(GPT-2's initialisation) -> layers.py (each piece forward and backward, numpy: the reference) and
fused.py (the same, native: native/transformer.c, native/gemm.c), one chosen by kernels.py ->
model.py (Transformer:
forward, backward with gradients handed over as they are final, step with pluggable attention;
forward_stage / backward_stage of the part a plan gives it) ; plan.py (StagePlan: which blocks and
ends a rank holds, pipeline_plan; with tensor_plan.py's shards and moe/'s experts: a mixture of
experts in place of every block's MLP, docs/moe.md) ; activations.py (what a forward keeps for its backward)
-> generate.py (DenseKVCache, sampling) ; optim.py (Adam on any slice, the learning-rate
schedule) ; data.py (the lecture's bytes, the batch sampler) ; text.py (a sample as text, and how
much it looks like the lecture) ; checkpoint.py (model.npz) ; blas.py (what a training rank sets
at start: one BLAS thread; which BLAS the native products call) ; train.py (the one-process loop
every data-parallel mode must equal) ; steptime.py (a step's phases timed, a command) ; profile.py
(a step's time kernel by kernel).
"""

from playground.transformer.blas import blas_threads, pin_blas_threads
from playground.transformer.checkpoint import load_model, save_model
from playground.transformer.config import ModelConfig
from playground.transformer.data import BatchSampler, lecture_bytes
from playground.transformer.generate import DenseKVCache, cached_attention, generate, sample_token
from playground.transformer.layout import ParamLayout, ParamSpec
from playground.transformer.model import Transformer
from playground.transformer.optim import Adam, AdamConfig, LRSchedule
from playground.transformer.plan import StagePlan, pipeline_plan
from playground.transformer.text import Likeness, decode_sample, lecture_likeness
from playground.transformer.train import train_one_process

__all__ = [
    "Adam",
    "AdamConfig",
    "BatchSampler",
    "DenseKVCache",
    "LRSchedule",
    "Likeness",
    "ModelConfig",
    "ParamLayout",
    "ParamSpec",
    "StagePlan",
    "Transformer",
    "blas_threads",
    "cached_attention",
    "decode_sample",
    "generate",
    "lecture_bytes",
    "lecture_likeness",
    "load_model",
    "pipeline_plan",
    "pin_blas_threads",
    "sample_token",
    "save_model",
    "train_one_process",
]
