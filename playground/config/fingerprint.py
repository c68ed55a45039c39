"""Do all ranks run the same scenario? A fingerprint of the resolved scenario, and what differs.

Under another launcher every process loads and resolves the scenario itself, from its own file
and `--set` overrides, maybe on another host with another checkout. Each rank sends the sha256 of
its resolved scenario (canonical JSON of `Scenario.to_dict()`) with its registration, and the
dictionary itself so that the coordinator can say which keys differ; a mismatch fails the run
before any node code runs.
"""

import hashlib
import json


def canonical_json(d: dict) -> str:
    return json.dumps(d, sort_keys=True, separators=(",", ":"), default=str)


def fingerprint(d: dict) -> str:
    """sha256 (hex) of the canonical JSON of a resolved scenario's dictionary."""
    return hashlib.sha256(canonical_json(d).encode()).hexdigest()


def flatten(d, prefix: str = "") -> dict[str, object]:
    """{'params': {'iters': 3}} -> {'params.iters': 3}; lists stay values."""
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, object] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        out.update(flatten(v, key) if isinstance(v, dict) and v else {key: v})
    return out


def differing_keys(reference: dict, other: dict) -> list[str]:
    """Dotted keys whose values differ (or exist on one side only), sorted."""
    a, b = flatten(reference), flatten(other)
    return sorted(k for k in a.keys() | b.keys() if a.get(k, _MISSING) != b.get(k, _MISSING))


_MISSING = object()


def mismatch_message(fingerprints: dict[int, str], scenarios: dict[int, dict]) -> str | None:
    """None when every rank has rank 0's fingerprint, else one line naming the ranks that differ
    from rank 0 and, for the first of them, the keys and values."""
    ref = fingerprints.get(0)
    differ = sorted(r for r, fp in fingerprints.items() if fp != ref)
    if not differ:
        return None
    first = differ[0]
    keys = differing_keys(scenarios.get(0) or {}, scenarios.get(first) or {})
    a, b = flatten(scenarios.get(0) or {}), flatten(scenarios.get(first) or {})
    shown = [
        f"{k}: rank 0 has {_show(a.get(k, _MISSING))}, rank {first} has {_show(b.get(k, _MISSING))}"
        for k in keys[:3]
    ]
    more = f" (and {len(keys) - 3} more keys)" if len(keys) > 3 else ""
    what = "; ".join(shown) + more if shown else "their scenario fingerprints differ"
    ranks = ", ".join(map(str, differ))
    return (
        f"rank{'s' if len(differ) > 1 else ''} {ranks} {'run' if len(differ) > 1 else 'runs'} another "
        f"scenario than rank 0: {what}. Every process must be given the same scenario and --set overrides"
    )


def _show(v) -> str:
    return "no such key" if v is _MISSING else json.dumps(v, default=str)
