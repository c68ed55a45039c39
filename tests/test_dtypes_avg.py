"""Every element type (float16 and bfloat16 among them) and the avg reduction, through every collective
and algorithm, over every transport and the simulator, against the closed form."""

import subprocess
import sys

import numpy as np
import pytest

from playground.collectives import ALGORITHMS, ReduceOp, allreduce, run_collective
from playground.collectives.check import count_wrong, expected_output, expected_result, input_count, pattern
from playground.collectives.ops import average_into
from playground.comm import wire
from playground.comm.registry import IN_PROCESS
from playground.comm.world import run_local
from playground.core import dtypes
from playground.models.costs import Link
from playground.sim.driver import simulate
from playground.sim.network import Machine

REDUCING = ("allreduce", "reduce_scatter", "reduce")
POINTS = [(c, a) for c, algos in ALGORITHMS.items() for a in algos if a != "hier"]


def test_bfloat16_travels_by_name_and_float16_by_its_letter():
    for name in dtypes.DTYPES:
        dtype = dtypes.resolve(name)
        header = wire.encode_header(3, -60, wire.KIND_INLINE, dtype, (5,))
        _, _, _, got, shape = wire.decode_header(header + bytes(5 * dtype.itemsize), 8)
        assert got == dtype and shape == (5,)
    assert dtypes.wire_name(dtypes.resolve("bfloat16")) == b"bfloat16"
    assert dtypes.wire_name(np.dtype("float16")) == b"<f2"


def test_ml_dtypes_is_imported_only_once_bfloat16_is_named():
    """Its import costs every process about half a second: a rank or a command that never names
    bfloat16 does not pay it, and a header naming it is read in a process that had not imported it."""
    header = wire.encode_header(1, 7, wire.KIND_INLINE, dtypes.resolve("bfloat16"), (2,)) + bytes(4)
    code = (
        "import sys; from playground.comm import wire; from playground.collectives import check, measure; "
        "from playground.cli import main; assert 'ml_dtypes' not in sys.modules, 'imported at start'; "
        f"got = wire.decode_header(bytes.fromhex('{header.hex()}'), 8)[3]; "
        "assert got.name == 'bfloat16' and 'ml_dtypes' in sys.modules, got"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_avg_divides_once_in_the_type_and_integers_toward_zero():
    x = np.array([-7, -6, 5, 7], np.int32)
    average_into(x, 3)
    assert x.tolist() == [-2, -2, 1, 2]  # C's (and NCCL's) integer division, not numpy's floor
    h = np.array([1, 2], dtypes.resolve("bfloat16"))
    average_into(h, 3)
    assert (
        h.dtype == dtypes.resolve("bfloat16") and h.tolist() == np.array([1 / 3, 2 / 3], "bfloat16").tolist()
    )
    assert expected_result(3, 2, "float16", ReduceOp.AVG).dtype == np.float16


def _every_point(n: int, large: bool):
    """fn(comm) running every collective, algorithm, dtype (and avg where it reduces): wrong elements.
    With `large`, the half types also at 64 KiB a block, past the transports' inline messages."""

    def body(comm):
        wrong = 0
        for collective, algorithm in POINTS:
            for dtype in dtypes.DTYPES:
                itemsize = dtypes.resolve(dtype).itemsize
                sizes = [(itemsize * (7 * n + 1), 16)]
                if large and dtype in dtypes.HALF:
                    sizes.append((n << 16, None))
                for op in ("sum", "avg") if collective in REDUCING else ("sum",):
                    for size, segment in sizes:
                        count = input_count(collective, size, itemsize, n)
                        x = pattern(comm.rank, count, dtype)
                        out = run_collective(comm, collective, x, op, algorithm, segment)
                        want = expected_output(collective, comm.rank, n, count, dtype, ReduceOp.parse(op))
                        wrong += count_wrong(out, want)
        return wrong

    return body


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", IN_PROCESS)
@pytest.mark.parametrize("n", [3, 4])
def test_every_collective_and_dtype_over_every_transport(kind, n, tmp_path):
    body = _every_point(n, large=kind != "local" and n == 3)  # the rings' path once per transport
    assert run_local(n, body, timeout_s=60, transport=kind, directory=str(tmp_path)) == [0] * n


@pytest.mark.parametrize("n", [3, 4])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int64"])
def test_every_collective_in_the_simulator(n, dtype):
    link = Link(5e-6, 50e9, 100e9)
    machine = Machine(1, n, link, link, link.gamma_bytes_per_s)
    for collective, algorithm in POINTS:
        for op in ("sum", "avg") if collective in REDUCING else ("sum",):
            row, _ = simulate(machine, collective, algorithm, 2 * n * 9 * 8, dtype, op, data=True)
            assert row["wrong"] == 0, (collective, algorithm, op)


def test_a_half_precision_sum_is_exact_where_the_pattern_keeps_it_small():
    """64 ranks of the pattern sum within +-144: every integer there is a bfloat16 (to 256)."""
    total = expected_result(64, 17, "int64", ReduceOp.SUM)
    assert np.abs(total).max() <= 144
    assert np.array_equal(expected_result(64, 17, "bfloat16", ReduceOp.SUM).astype(np.int64), total)

    def body(comm):
        return allreduce(comm, pattern(comm.rank, 17, "bfloat16"), "avg", "ring")

    got = run_local(6, body)
    assert all(np.array_equal(g, expected_result(6, 17, "bfloat16", ReduceOp.AVG)) for g in got)
