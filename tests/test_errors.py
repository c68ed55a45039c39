"""The error hierarchy (playground/core/errors.py): every class is a PlaygroundError, is built with its
fields and says them, stays catchable as the builtin it replaced, and a real raise site of each
raises it."""

import inspect
import sys

import pytest
import zmq

from playground.collectives.bucketing import plan_buckets
from playground.core import errors
from playground.core.errors import (
    CommError,
    CommTimeout,
    FaultInjected,
    InvalidPeer,
    InvariantViolation,
    LabError,
    MessageMismatch,
    OutOfSpace,
    ParamError,
    PeerLost,
    PlaygroundError,
    ScenarioError,
    ToolMissing,
    UsageError,
    WaitTimeout,
    WireError,
)
from playground.core.native import load_native
from playground.core.sizes import parse_size
from playground.kvcache.engine.block_manager import BlockManager
from playground.kvcache.engine.contiguous import ContiguousAllocator as KVContiguous
from playground.kvcache.server import protocol as P
from playground.kvcache.server.client import KVClient, KVServerError
from playground.kvcache.server.kv_ops import KVServer
from playground.kvcache.server.local_client import LocalClient
from playground.launcher.procs import BaselineError
from playground.lecture.figures import NotMeasured
from playground.memlab import lmbench
from playground.memlab.translation import PageFault, PageTable
from playground.models.allocation import ContiguousAllocator, PagedAllocator
from playground.models.costs import Link
from playground.sim.engine import SimDeadlock

ERRORS_PY = [c for _, c in inspect.getmembers(errors, inspect.isclass) if c.__module__ == errors.__name__]
ELSEWHERE = [P.ProtocolError, KVServerError, BaselineError, PageFault, NotMeasured, SimDeadlock]


# -- the hierarchy ---------------------------------------------------------------------------
@pytest.mark.parametrize("cls", ERRORS_PY + ELSEWHERE, ids=lambda c: c.__name__)
def test_every_error_is_a_playground_error(cls):
    assert issubclass(cls, PlaygroundError)


def test_errors_py_holds_the_classes_we_document():
    assert {c.__name__ for c in ERRORS_PY} == {
        "PlaygroundError",
        "ScenarioError",
        "ParamError",
        "EmulationError",
        "ScenarioMismatch",
        "ResultMismatch",
        "CommError",
        "CommTimeout",
        "PeerLost",
        "InvalidPeer",
        "MessageMismatch",
        "CollectiveMismatch",
        "WireError",
        "FaultInjected",
        "RunFailed",
        "UsageError",
        "RequestError",
        "InvariantViolation",
        "OutOfSpace",
        "ToolMissing",
        "LabError",
        "WaitTimeout",
        "CheckpointRefused",
        "StateLost",
    }


@pytest.mark.parametrize(
    "cls, builtins",
    [
        (UsageError, (ValueError,)),
        (InvalidPeer, (ValueError,)),
        (WireError, (ValueError,)),
        (InvariantViolation, (AssertionError,)),
        (OutOfSpace, (MemoryError, ValueError)),
        (ToolMissing, (RuntimeError,)),
        (LabError, (RuntimeError,)),
        (WaitTimeout, (TimeoutError,)),
        (PageFault, (LookupError,)),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else "",
)
def test_each_stays_catchable_as_the_builtin_it_replaced(cls, builtins):
    """Callers and tests that catch the builtin (sizes -> ParamError, allocators' MemoryError) keep working."""
    assert all(issubclass(cls, b) for b in builtins)


def test_only_scenario_errors_are_bad_input():
    """The CLI answers ScenarioError with one line and exit 2; the others are failures or bugs."""
    assert issubclass(ParamError, ScenarioError)
    for cls in (UsageError, InvariantViolation, OutOfSpace, ToolMissing, LabError, WaitTimeout, CommError):
        assert not issubclass(cls, ScenarioError), cls


# -- built with their fields; the message says them -------------------------------------------
def test_param_error():
    e = ParamError("params.sizes", "expected a list, got 3")
    assert (e.field, e.message) == ("params.sizes", "expected a list, got 3")
    assert str(e) == "params.sizes: expected a list, got 3"


def test_comm_errors():
    e = CommTimeout(2, "recv", 1, 7, 3.0)
    assert (e.rank, e.op, e.peer, e.tag, e.waited_s, e.direction) == (2, "recv", 1, 7, 3.0, "from")
    assert str(e) == "rank 2: timed out after 3.0s waiting for recv from rank 1 tag 7"
    e = PeerLost(0, "rank 3 died", peer=3, tag=5, op="recv")
    assert (e.rank, e.peer, e.tag, e.op, e.reason) == (0, 3, 5, "recv", "rank 3 died")
    assert str(e) == "rank 0: aborted while waiting for recv from rank 3 tag 5: rank 3 died"
    e = InvalidPeer(1, 9, "destination", 4)
    assert (e.rank, e.peer, e.direction) == (1, 9, "to")
    assert str(e) == "rank 1: destination 9 is not a rank (world size 4)"
    e = MessageMismatch(
        "rank 0: expected 4 elements from rank 1 tag 2, got 3", rank=0, peer=1, tag=2, op="recv"
    )
    assert (e.rank, e.peer, e.tag, e.op) == (0, 1, 2, "recv")
    e = WireError("header too short: 3 bytes", rank=1)
    assert e.rank == 1 and str(e) == "header too short: 3 bytes"


def test_fault_injected():
    e = FaultInjected(3, 10)
    assert (e.rank, e.after_ops) == (3, 10)
    assert str(e) == "rank 3: injected fault after 10 operations"


def test_usage_error():
    e = UsageError("must be >= 0, got -1", field="cap_bytes")
    assert (e.field, e.message) == ("cap_bytes", "must be >= 0, got -1")
    assert str(e) == "cap_bytes: must be >= 0, got -1"
    e = UsageError("unknown collective 'x'")
    assert e.field == "" and str(e) == "unknown collective 'x'"


def test_invariant_violation():
    assert str(InvariantViolation("a block is on the free list twice")) == "a block is on the free list twice"


def test_out_of_space():
    e = OutOfSpace("sequence 4: no room for 3 more tokens", need=3, unit="tokens", seq_id=4)
    assert (e.need, e.unit, e.seq_id) == (3, "tokens", 4)
    assert "sequence 4" in str(e) and "3 more tokens" in str(e)


def test_tool_missing_lab_error_wait_timeout():
    e = ToolMissing("lat_mem_rd not found (apt-get install lmbench)", tool="lat_mem_rd")
    assert e.tool == "lat_mem_rd" and e.tool in str(e)
    e = LabError("reply receiver failed: boom", step="reply receiver")
    assert e.step == "reply receiver" and str(e).startswith(e.step)
    e = WaitTimeout("server: no request for 5s (served 0)", what="a request", waited_s=5.0)
    assert (e.what, e.waited_s) == ("a request", 5.0) and "5s" in str(e)


def test_kv_server_error():
    header = {"ok": False, "id": 3, "error": P.BAD_REQUEST, "message": "create: field 'num_tokens' ..."}
    e = KVServerError(header)
    assert (e.code, e.header, e.op) == (P.BAD_REQUEST, header, "")
    assert str(e) == "bad_request: create: field 'num_tokens' ..."
    assert str(KVServerError(header, op="create")) == "create refused: create: field 'num_tokens' ..."


def test_page_fault():
    e = PageFault(3, 0xC123)
    assert (e.vpn, e.virtual_address) == (3, 0xC123)
    assert str(e) == "virtual page 3 (address 0xc123) is not mapped"


def test_protocol_error_codes_are_named():
    assert P.INTERNAL_ERROR == "internal_error" and P.INTERNAL_ERROR in P.ERROR_CODES
    assert len(set(P.ERROR_CODES)) == len(P.ERROR_CODES)


# -- a real raise site of each class ----------------------------------------------------------
def test_usage_error_from_the_libraries():
    with pytest.raises(UsageError, match="^expected a byte count") as e:
        parse_size("12 parsecs")
    assert e.value.field == ""
    with pytest.raises(UsageError, match="^cap_bytes: must be >= 0, got -1$") as e:
        plan_buckets([8, 8], cap_bytes=-1)
    assert e.value.field == "cap_bytes"
    with pytest.raises(UsageError) as e:
        Link(alpha_s=-1.0, beta_bytes_per_s=1e9)
    assert e.value.field == "alpha_s"


def test_invariant_violation_from_check_invariants():
    bm = BlockManager(num_blocks=4, block_size=4)
    bm.allocate(0, 5)
    bm.num_used_slots += 1  # corrupt the counter the model keeps as it goes
    with pytest.raises(InvariantViolation, match="used-slot counter 6 is off"):
        bm.check_invariants()
    a = ContiguousAllocator(100)
    a.allocate(1, 10)
    a._used = 3
    with pytest.raises(InvariantViolation, match="used units out of step"):
        a.check_invariants()


def test_out_of_space_from_the_allocators():
    with pytest.raises(OutOfSpace, match=r"^need 3 blocks, 2 free$") as e:
        BlockManager(num_blocks=2, block_size=4).allocate(0, 9)
    assert (e.value.need, e.value.unit, e.value.seq_id) == (3, "blocks", None)
    kv = KVContiguous(20, reserve_max=True, max_new_tokens=2)
    kv.allocate(7, 4)
    with pytest.raises(OutOfSpace, match=r"^sequence 7: no room for 5 more tokens$") as e:
        kv.append(7, 5)
    assert (e.value.need, e.value.unit, e.value.seq_id) == (5, "tokens", 7)
    a = ContiguousAllocator(100)
    for i in range(5):
        a.allocate(i, 20)
    a.free(1)
    a.free(3)
    with pytest.raises(OutOfSpace, match=r"^no hole of 30 units \(largest 20\)$") as e:
        a.allocate(9, 30)
    assert (e.value.need, e.value.unit) == (30, "units")
    with pytest.raises(OutOfSpace, match="pages needed") as e:
        PagedAllocator(100, 10).allocate(0, 101)
    assert (e.value.need, e.value.unit) == (11, "pages")


def test_tool_missing_from_lmbench_and_the_native_module(monkeypatch):
    monkeypatch.setattr(lmbench, "find_lat_mem_rd", lambda: None)
    with pytest.raises(ToolMissing, match="^lat_mem_rd not found") as e:
        lmbench.run_lat_mem_rd(1)
    assert e.value.tool == "lat_mem_rd"
    monkeypatch.setitem(sys.modules, "_playground_native", None)  # as if it was never built
    with pytest.raises(ToolMissing, match="is not built: run `pip install .`") as e:
        load_native()
    assert e.value.tool == "_playground_native"


def test_lab_error_from_a_failing_tool(monkeypatch):
    monkeypatch.setattr(lmbench, "find_lat_mem_rd", lambda: "false")  # exits 1, says nothing
    with pytest.raises(LabError, match=r"^false -t -N 3 1 64 exited 1: $") as e:
        lmbench.run_lat_mem_rd(1)
    assert e.value.step == "lat_mem_rd"


def test_kv_server_error_from_the_client():
    client = LocalClient(KVServer("paged", capacity_tokens=64, block_size=16, width=2))
    with pytest.raises(KVServerError, match="^unknown_sequence: read: no sequence 5") as e:
        client.check("read", seq_id=5)
    assert e.value.code == P.UNKNOWN_SEQUENCE


@pytest.mark.timeout(30)
def test_wait_timeout_from_a_kv_server_that_never_answers():
    ctx = zmq.Context()
    silent = ctx.socket(zmq.ROUTER)
    silent.linger = 0
    client = None
    try:
        silent.bind("tcp://127.0.0.1:*")
        address = silent.getsockopt_string(zmq.LAST_ENDPOINT)
        client = KVClient(address, timeout_s=0.05, ctx=ctx)
        with pytest.raises(WaitTimeout, match=r"^kvcache client: no reply to 'ping' from .* in 0\.1s$") as e:
            client.ping()
        assert e.value.waited_s == 0.05 and address in e.value.what
    finally:
        if client is not None:
            client.close()
        silent.close(0)
        ctx.term()


def test_page_fault_from_translate():
    with pytest.raises(PageFault) as e:
        PageTable(4096, {0: 7}).translate(0x5123)
    assert (e.value.vpn, e.value.virtual_address) == (5, 0x5123)
