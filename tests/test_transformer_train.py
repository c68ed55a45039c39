"""The model learns the lecture's text; each rank's BLAS can be pinned after a fork."""

import multiprocessing
import subprocess
import sys

import numpy as np
import pytest

from playground.transformer import (
    AdamConfig,
    BatchSampler,
    ModelConfig,
    blas_threads,
    lecture_bytes,
    pin_blas_threads,
)
from playground.transformer.train import train_one_process


def test_150_steps_on_the_lecture_make_the_loss_fall_by_a_clear_margin():
    """Measured (float32, this config and seed): 5.547 at step 0 (ln 256 = 5.545: uniform), the
    mean of the last 10 steps 2.81 (the first 10: 4.84). Asserted with 0.3 of margin."""
    config = ModelConfig(layers=1, d_model=32, heads=2, context=32, dtype="float32")
    sampler = BatchSampler(lecture_bytes(), config.context, batch=16, seed=0)
    with pin_blas_threads(1):  # 1.3 s; 10 s with two BLAS threads fighting other tests for 2 cores
        _, losses = train_one_process(config, sampler, 150, adam=AdamConfig(lr=1e-2), seed=0)
    assert losses[0] == pytest.approx(np.log(256), abs=0.05)
    assert np.mean(losses[-10:]) < 3.1
    assert all(np.isfinite(losses))


def test_training_is_deterministic():
    config = ModelConfig(layers=1, d_model=16, heads=2, context=16, dtype="float64")
    sampler = BatchSampler(lecture_bytes(), config.context, batch=4, seed=1)
    a, la = train_one_process(config, sampler, 5, seed=2)
    b, lb = train_one_process(config, sampler, 5, seed=2)
    assert la == lb and a.params.tobytes() == b.params.tobytes()


def _child_pins(queue):
    pin_blas_threads(2)
    two = blas_threads()
    pin_blas_threads(1)
    a = np.ones((256, 256))
    a @ a  # the BLAS still works, on one thread
    queue.put((two, blas_threads()))


@pytest.mark.timeout(60)
def test_a_forked_child_pins_its_blas_to_one_thread():
    """A rank is forked from a launcher that imported numpy already: the environment variable
    is too late there, threadpoolctl's setter is not."""
    before = blas_threads()
    with pin_blas_threads(1):
        assert blas_threads() == 1
    assert blas_threads() == before
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_child_pins, args=(queue,))
    child.start()
    assert queue.get(timeout=30) == (2, 1)
    child.join(timeout=30)
    assert child.exitcode == 0


FAULTS_AFTER_FREEING = """
import resource, sys
import numpy as np
from playground.core.machine import keep_freed_memory
applied = keep_freed_memory() if sys.argv[1] == "keep" else True
for _ in range(3):  # the first round faults the heap in; the next ones must reuse it
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    arrays = [np.ones(1 << 18) for _ in range(20)]  # 2 MiB each, alive together, as a step's activations
    del arrays
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults_in_a_new_process(mode: str) -> tuple[bool, int]:
    """A new interpreter, not a fork: a forked child would inherit the test process's malloc state."""
    out = subprocess.run(
        [sys.executable, "-P", "-c", FAULTS_AFTER_FREEING, mode], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    applied, faults = out.stdout.split()
    return applied == "True", int(faults)


@pytest.mark.timeout(60)
def test_a_rank_that_keeps_freed_memory_does_not_fault_its_arrays_in_again():
    """Measured: glibc's malloc unmaps or trims the 40 MiB once freed, and the next round faults
    10,200 pages in again; with keep_freed_memory, 0."""
    applied, faults = faults_in_a_new_process("keep")
    if not applied:
        pytest.skip("this C library has no mallopt")
    assert faults < 100
    assert faults_in_a_new_process("default")[1] > 5000  # what it saves (glibc's default behaviour)


@pytest.mark.timeout(60)
def test_steptime_prints_each_phase():
    """In a child process: it pins the BLAS and keeps freed memory, as a rank does."""
    args = [
        "--layers",
        "1",
        "--d-model",
        "8",
        "--heads",
        "2",
        "--context",
        "8",
        "--batch",
        "2",
        "--repeats",
        "2",
    ]
    out = subprocess.run(
        [sys.executable, "-P", "-m", "playground.transformer.steptime", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(
        f"{ModelConfig(layers=1, d_model=8, heads=2, context=8).num_params:,} parameters"
    )
    for phase in ("forward", "backward", "adam", "step"):
        assert f"  {phase} " in out.stdout
