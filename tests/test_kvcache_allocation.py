"""The allocation policies' one interface: both allocators have every member of `AllocationPolicy`
with its exact signature, and the engine and the server call nothing on a policy beyond it."""

import ast
import inspect
from pathlib import Path

import pytest

from playground.kvcache.engine.allocation import AllocationPolicy
from playground.kvcache.engine.block_manager import BlockManager
from playground.kvcache.engine.contiguous import ContiguousAllocator
from playground.kvcache.engine.policies import POLICIES, make_policy

KVCACHE = Path(__file__).resolve().parents[1] / "playground" / "kvcache"
METHODS = sorted(
    name for name, member in vars(AllocationPolicy).items() if inspect.isfunction(member) and name[0] != "_"
)
ATTRIBUTES = AllocationPolicy.__annotations__


def test_the_protocol_lists_the_interface():
    assert len(METHODS) == 21 and {"can_allocate", "allocate", "append_batch", "within_reservation"} <= set(
        METHODS
    )
    assert ATTRIBUTES == {"name": str, "paged": bool, "block_size": int, "capacity_slots": int}


@pytest.mark.parametrize("cls", [BlockManager, ContiguousAllocator])
def test_every_allocator_has_each_method_with_the_protocols_signature(cls):
    for name in METHODS:
        assert name in vars(cls), f"{cls.__name__} has no {name}"
        assert inspect.signature(getattr(cls, name)) == inspect.signature(getattr(AllocationPolicy, name)), (
            f"{cls.__name__}.{name}{inspect.signature(getattr(cls, name))} differs from the protocol's "
            f"{inspect.signature(getattr(AllocationPolicy, name))}"
        )


@pytest.mark.parametrize("name", list(POLICIES))
def test_every_policy_has_the_protocols_attributes(name):
    policy = make_policy(name, 160, block_size=16)
    for attr, kind in ATTRIBUTES.items():
        assert isinstance(getattr(policy, attr), kind), (name, attr)
    assert policy.name == name and policy.paged == (name == "paged") and policy.capacity_slots == 160


def _policy_uses(path: Path) -> set[str]:
    """Attributes read on `policy` or `self.policy` in a module (the policy's one spelling there)."""
    uses = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id == "policy") or (
                isinstance(owner, ast.Attribute) and owner.attr == "policy"
            ):
                uses.add(node.attr)
    return uses


def test_the_engine_and_the_server_call_only_the_protocol():
    modules = sorted((KVCACHE / "engine").glob("*.py")) + sorted((KVCACHE / "server").glob("*.py"))
    used = {name: _policy_uses(path) for path in modules if (name := path.name) != "allocation.py"}
    assert {"can_allocate", "append_batch", "within_reservation", "slot_list", "usage"} <= set().union(
        *used.values()
    )  # the scan sees the calls
    beyond = {name: sorted(u - set(METHODS) - set(ATTRIBUTES)) for name, u in used.items()}
    assert not any(beyond.values()), (
        f"calls beyond AllocationPolicy: { {k: v for k, v in beyond.items() if v} }"
    )
