"""A tensor-parallel training step's predicted time: compute divided by t, the all-reduces from the
alpha-beta model (`collectives.tensor_allreduce.allreduce_time_s`).

    step(t) = compute(t0) x (rows_t / rows_t0) x (t0 / t)          forward + backward, without comm
              + optimizer(t0) x params_t / params_t0                 Adam over the shard's parameters
              + 4 L x allreduce(rows_t x T x d x itemsize, t)        f and g, forward and backward
              + data(t)                                              the mode's collectives over the
                                                                     data group, of the shard's gradients

t0 is the smallest t the run measured (normally 1: plain data parallelism), whose compute is the
calibration: the model assumes that a shard's products run as fast per FLOP as the whole model's,
which small shards do not (a numpy call costs microseconds whatever its size), and that the tensor
all-reduces cost what the link's alpha and beta say, which on one host's cores is their software
and their copies.
"""

from playground.collectives.tensor_allreduce import allreduce_time_s
from playground.models.costs import Link
from playground.training.modes import Mode
from playground.training.steptime_model import comm_time_s
from playground.transformer import ModelConfig


def tensor_comm_s(config: ModelConfig, rows: int, t: int, link: Link, algorithm: str = "auto") -> float:
    """The step's tensor all-reduces: four per block (two forward, two backward) of the activation."""
    nbytes = rows * config.context * config.d_model * config.np_dtype.itemsize
    return 4 * config.layers * allreduce_time_s(nbytes, t, link, algorithm)


def predict_step_s(
    config: ModelConfig,
    calibration: dict,
    run: dict,
    mode: Mode,
    link: Link,
    data_algorithm: str,
    tensor_algorithm: str = "auto",
) -> dict:
    """{"compute_s", "optimizer_s", "tensor_s", "data_s", "step_s"} of `run` (its "tensor", "data",
    "rows", "params_bytes", "bucket_bytes") from `calibration` (the t0 run's medians: "tensor",
    "rows", "compute_s", "optimizer_s", "params_bytes")."""
    t, t0 = run["tensor"], calibration["tensor"]
    compute = calibration["compute_s"] * (run["rows"] / calibration["rows"]) * (t0 / t)
    optimizer = calibration["optimizer_s"] * run["params_bytes"] / calibration["params_bytes"]
    tensor = tensor_comm_s(config, run["rows"], t, link, tensor_algorithm)
    data = comm_time_s(mode, run["bucket_bytes"], run["params_bytes"], run["data"], link, data_algorithm)
    return {
        "compute_s": compute,
        "optimizer_s": optimizer,
        "tensor_s": tensor,
        "data_s": data,
        "step_s": compute + optimizer + tensor + data,
    }
