"""One error type per failure class, each built with its fields; the CLI maps each to an exit status.

Every error the playground raises on purpose is a `PlaygroundError`. Errors about communication
carry who (`rank`), with whom (`peer`), which way (`direction`: "from" a peer we wait for, "to" a
peer we send to), and what (`tag`, `op`), set in the constructor, so the launcher and the tests
read fields instead of parsing messages.
"""


class PlaygroundError(Exception):
    """Base of every error the playground raises on purpose."""


class ScenarioError(PlaygroundError):
    """Bad input (file, key, value). Reported as one line, exit status 2."""


class ParamError(ScenarioError):
    """A value that does not fit its field. `field` is the key's dotted path: inside `params` when
    raised while building a node's `Params` (its `__post_init__`), from the top of the scenario
    when raised by a node's `check_scenario` (e.g. "ranks", "params.sizes")."""

    def __init__(self, field: str, message: str):
        self.field, self.message = field, message
        super().__init__(f"{field}: {message}")


class EmulationError(ScenarioError):
    """The emulated cluster (`--hosts`) cannot be built here: not root, a missing tool (ip, tc) or
    kernel feature, or an `ip`/`tc` command that failed. One line, exit status 2, as bad input."""


class CommError(PlaygroundError):
    """A communication operation could not complete."""

    def __init__(
        self,
        message: str,
        *,
        rank: int | None = None,
        peer: int | None = None,
        direction: str = "",
        tag: int | None = None,
        op: str = "",
    ):
        self.rank, self.peer, self.direction, self.tag, self.op = rank, peer, direction, tag, op
        super().__init__(message)


class CommTimeout(CommError):
    """A blocking wait ran out of time; the message names what was awaited."""

    def __init__(
        self,
        rank: int,
        op: str,
        peer: int | None = None,
        tag: int | None = None,
        waited_s: float = 0.0,
        *,
        what: str = "",
        direction: str = "from",
        context: str = "",
    ):
        self.waited_s = waited_s
        what = what or (f"{op} from rank {peer} tag {tag}" if peer is not None else op)
        super().__init__(
            f"rank {rank}: timed out after {waited_s:.1f}s waiting for {what}"
            + (f" ({context})" if context else ""),
            rank=rank,
            peer=peer,
            direction=direction,
            tag=tag,
            op=op,
        )


class PeerLost(CommError):
    """Another rank died or failed, so this rank cannot go on. `peer` is the rank this one was
    waiting for (or sending to) when it found out, if it was; `context` says which collective (and
    its sequence number) was running, as NCCL's watchdog does."""

    def __init__(
        self,
        rank: int,
        reason: str,
        *,
        peer: int | None = None,
        direction: str = "from",
        tag: int | None = None,
        op: str = "",
        context: str = "",
    ):
        self.reason = reason
        where = f" ({context})" if context else ""
        if peer is None:
            text = f"rank {rank}: aborted{where}: {reason}"
        elif op:
            text = f"rank {rank}: aborted while waiting for {op} {direction} rank {peer} tag {tag}{where}: {reason}"
        else:
            text = f"rank {rank}{where}: {reason}"
        super().__init__(text, rank=rank, peer=peer, direction=direction, tag=tag, op=op)


class InvalidPeer(CommError, ValueError):
    """A destination or source that is not a rank of this run."""

    def __init__(self, rank: int, peer: int, role: str, size: int):
        super().__init__(
            f"rank {rank}: {role} {peer} is not a rank (world size {size})",
            rank=rank,
            peer=peer,
            direction="to" if role == "destination" else "from",
        )


class MessageMismatch(CommError):
    """A message arrived that does not fit what the receiver expected (kind, element count)."""


class WireError(CommError):
    """A frame that is not a well-formed message of this protocol (truncated, garbage, from a
    rank that is not in the run)."""


class FaultInjected(PlaygroundError):
    """Raised on purpose by a scenario's `fault:` section."""

    def __init__(self, rank: int, after_ops: int):
        self.rank, self.after_ops = rank, after_ops
        super().__init__(f"rank {rank}: injected fault after {after_ops} operations")
