"""One error type per failure class; the CLI maps each to an exit status."""


class PlaygroundError(Exception):
    """Base of every error the playground raises on purpose."""


class ScenarioError(PlaygroundError):
    """Bad input (file, key, value). Reported as one line, exit status 2."""


class CommError(PlaygroundError):
    """A communication operation could not complete."""


class CommTimeout(CommError):
    """A blocking wait ran out of time; the message names what was awaited."""

    def __init__(self, rank: int, op: str, peer: int | None, tag: int | None, waited_s: float):
        self.rank, self.op, self.peer, self.tag, self.waited_s = rank, op, peer, tag, waited_s
        what = f"{op} from rank {peer} tag {tag}" if peer is not None else op
        super().__init__(f"rank {rank}: timed out after {waited_s:.1f}s waiting for {what}")


class PeerLost(CommError):
    """Another rank died or failed, so this rank cannot go on."""

    peer: int | None = None  # the rank this one was waiting for, when it was waiting


class ResultMismatch(PlaygroundError):
    """A correctness check found a wrong result."""


class FaultInjected(PlaygroundError):
    """Raised on purpose by a scenario's `fault:` section."""
