"""The control messages ranks send the coordinator: what each must carry, checked before use.

The coordinator's ROUTER delivers [identity, body]; `parse_control` returns the body as a dict, or
raises MalformedControl saying why it is not one of ours: several frames, not JSON (or nested deeper
than the parser recurses), not an object, an unknown type, a missing or mistyped field, or a rank's
message from another socket than that rank's control socket (`comm.control.control_identity`; a
heartbeat from its heartbeat socket, `comm.control.heartbeat_identity`). The
message types themselves are listed in playground/rendezvous/join.py.
"""

import json

from playground.comm.control import control_identity, heartbeat_identity


class MalformedControl(ValueError):
    """A control message that is not one of ours (the coordinator ignores and counts it)."""


# The fields each message type must carry (name -> allowed types), checked before it is used. A
# message type that is not here is ignored: a new one must be added.
Types = tuple[type, ...]
_INT: Types = (int,)
_STR: Types = (str,)
_NUM: Types = (int, float)
_REQUIRED: dict[str, dict[str, Types]] = {
    "register": {"rank": _INT, "endpoint": _STR},
    "clock": {"rank": _INT, "seq": _INT, "t_us": _NUM},
    "progress": {},
    "done": {"rank": _INT},
    "error": {"rank": _INT},
    "heartbeat": {"rank": _INT},  # emulated hosts: from the rank's heartbeat socket
    "fault": {"rank": _INT, "action": _STR},  # a host drill's request, from the counting rank
    "resumed": {"rank": _INT, "step": _INT},  # a restarted rank went on from a checkpoint or a peer: how
}
_OPTIONAL: dict[str, Types] = {
    "host": _STR,
    "local_endpoint": _STR,
    "pid": _INT,
    "scenario_hash": _STR,
    "scenario": (dict, type(None)),
    "result": (dict,),
    "error_type": _STR,
    "message": _STR,
    "traceback": _STR,
    "waiting_for": (int, type(None)),
    "secondary": (bool,),
    "done": _NUM,
    "total": _NUM + (type(None),),
    "label": _STR,
    "generation": _INT,  # the rendezvous generation the sender belongs to (absent: 0)
    "load_s": _NUM,
    "loaded_at": _NUM,
    "first_step_at": _NUM,
    "first_step_s": _NUM,
    "usual_step_s": _NUM + (type(None),),
    "way": _STR,  # resumed: how the rank came back (peer: from a survivor, not a checkpoint)
    "steps_redone": _INT,
    "source_rank": _INT,
    "reform_s": _NUM,
}


def parse_control(parts: list[bytes]) -> dict:
    """The message of a ROUTER delivery [identity, JSON body]; MalformedControl if it is not ours."""
    if len(parts) != 2:
        raise MalformedControl(f"{len(parts) - 1} frames instead of 1")
    try:
        msg = json.loads(parts[1])
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise MalformedControl(f"not JSON: {parts[1][:40]!r}") from None
    if not isinstance(msg, dict):
        raise MalformedControl(f"not a JSON object: {parts[1][:40]!r}")
    kind = msg.get("type")
    if kind not in _REQUIRED:
        raise MalformedControl(f"unknown type {str(kind)[:40]!r}")
    missing = [name for name in _REQUIRED[kind] if name not in msg]
    if missing:
        raise MalformedControl(f"{kind} without {missing[0]!r}")
    for name, value in msg.items():
        types = _REQUIRED[kind].get(name) or _OPTIONAL.get(name)
        if types is not None and (
            not isinstance(value, types) or (isinstance(value, bool) and bool not in types)
        ):
            raise MalformedControl(f"{kind} with {name} = {str(value)[:40]!r}")
    rank = msg.get("rank")
    expected = heartbeat_identity if kind == "heartbeat" else control_identity
    generation = msg.get("generation", 0)
    if kind != "progress" and isinstance(rank, int) and parts[0] != expected(rank, generation):
        raise MalformedControl(f"{kind} for rank {rank} from a socket that is not rank {rank}'s")
    return msg
