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


class RunFailed(PlaygroundError):
    """A run that did not succeed, raised by the Python API (`playground.api`) where the command
    line exits with status 1: a rank raised, died or hung, or a result or check was wrong. The
    message is the root cause as the command line prints it after "FAILED root cause:" (or its
    first failure line when no rank failed). `rank`, `kind` ("error", "signal", "exit", "hang",
    ...) and `error_type` (the exception's class name, for kind "error") are the root cause's, None
    and "" when no rank failed; `traceback` is the failing rank's; `result` is the run's result.json
    (the API's `Result`, a mapping of it: its run_dir, failures, tables)."""

    def __init__(
        self,
        message: str,
        *,
        result,
        rank: int | None = None,
        kind: str = "",
        error_type: str = "",
        traceback: str = "",
    ):
        self.result, self.rank, self.kind = result, rank, kind
        self.error_type, self.traceback = error_type, traceback
        super().__init__(message)


class EmulationError(ScenarioError):
    """The emulated cluster (`--hosts`) cannot be built here: not root, a missing tool (ip, tc) or
    kernel feature, or an `ip`/`tc` command that failed. One line, exit status 2, as bad input."""


class CheckpointRefused(ScenarioError):
    """A checkpoint that may not be loaded: not whole (no manifest, a part missing or torn), a part
    whose SHA-256 differs from its manifest's, or one of another run (model, world size, mode...).
    `path` is the checkpoint, `what` the first thing that differs (a part's file, or an identity key
    such as `world_size` or `model.d_model`), `found` and `expected` its two values. Bad input when
    a user names the checkpoint (`run --resume`): one line, exit status 2."""

    def __init__(self, path, what: str, message: str, found=None, expected=None):
        self.path, self.what, self.found, self.expected = path, what, found, expected
        super().__init__(f"{path}: {message}")


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
    its sequence number) was running, as NCCL's watchdog does. `final`: the launcher will not
    recover the group live (a survivor re-forming must not try the next generation)."""

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
        final: bool = False,
    ):
        self.reason, self.final = reason, final
        where = f" ({context})" if context else ""
        if peer is None:
            text = f"rank {rank}: aborted{where}: {reason}"
        elif op:
            tagged = "" if tag is None else f" tag {tag}"
            text = f"rank {rank}: aborted while waiting for {op} {direction} rank {peer}{tagged}{where}: {reason}"
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


class CollectiveMismatch(MessageMismatch):
    """Two ranks called different collectives at the same point: another collective or algorithm,
    op, dtype or size (comm/desync.py finds it where their messages meet). `mine` and `theirs` say
    what each called (name, algorithm, op, dtype, nbytes, seq, group_seq: `describe_call`); `theirs`
    is None when the peer did not say within the wait (it was not waiting any more)."""

    def __init__(self, rank: int, peer: int, mine: dict | None, theirs: dict | None):
        self.mine, self.theirs = mine, theirs
        said = describe_call(theirs) if theirs else "a different collective (it did not say which)"
        super().__init__(
            f"rank {rank}: collective mismatch with rank {peer}: rank {rank} called {describe_call(mine)}, "
            f"rank {peer} called {said}",
            rank=rank,
            peer=peer,
            direction="from",
            op=(mine or {}).get("name", ""),
        )


def describe_call(call: dict | None) -> str:
    """ "allreduce ring (sum, float32, 32 bytes) as its collective #3": one side of a mismatch."""
    if not call:
        return "no collective"
    what = [call[k] for k in ("op", "dtype") if call.get(k) and (k == "op" or call.get("nbytes"))]
    if call.get("nbytes", -1) > 0:
        what.append(f"{call['nbytes']} bytes")
    algorithm = f" {call['algorithm']}" if call.get("algorithm") else ""
    details = f" ({', '.join(what)})" if what else ""
    return f"{call.get('name', '?')}{algorithm}{details} as its collective #{call.get('seq', '?')}"


class WireError(CommError, ValueError):
    """A frame that is not a well-formed message of this protocol (truncated, garbage, from a
    rank that is not in the run). A ValueError too, as the header decoder's errors always were."""


class ResultMismatch(PlaygroundError):
    """Data came back other than it was sent, where the run cannot go on (a ping-pong's echo):
    `rank` saw it, `what` says what was wrong and where first."""

    def __init__(self, rank: int, what: str):
        self.rank, self.what = rank, what
        super().__init__(f"rank {rank}: {what}")


class ScenarioMismatch(PlaygroundError):
    """The ranks of one run resolved different scenarios (under another launcher each process loads
    its own); the coordinator finds it at rendezvous and tells every rank."""

    def __init__(self, rank: int, reason: str):
        self.rank, self.reason = rank, reason
        super().__init__(f"rank {rank}: {reason}")


class StateLost(PlaygroundError):
    """A live recovery (`recovery.way: peer`) found no rank holding the training's state: every
    survivor died before a replacement had copied it. Only a checkpoint has it now, so the launcher
    stops the group and restarts it from the newest whole one (if restarts are left)."""

    def __init__(self, rank: int, generation: int):
        self.rank, self.generation = rank, generation
        super().__init__(
            f"rank {rank}: no rank of generation {generation} holds the training's state (every "
            f"survivor failed before a replacement copied it)"
        )


class FaultInjected(PlaygroundError):
    """Raised on purpose by a scenario's `fault:` section."""

    def __init__(self, rank: int, after_ops: int):
        self.rank, self.after_ops = rank, after_ops
        super().__init__(f"rank {rank}: injected fault after {after_ops} operations")


class UsageError(PlaygroundError, ValueError):
    """A library function was given a value it does not take (an unknown name, a negative size,
    lists of different lengths). Escaping a run it is a bug of the caller: input a user types is
    checked first and reported as a ScenarioError or ParamError naming its key, often by catching
    this one (a ValueError too, as these were before). `field` is the argument the message is
    about, when it is about one; the message then starts with it."""

    def __init__(self, message: str, *, field: str = ""):
        self.field, self.message = field, message
        super().__init__(f"{field}: {message}" if field else message)


class RequestError(PlaygroundError, ValueError):
    """A request a server refuses (an HTTP 4xx): `status`, the field it is about (`param`, "" for
    the whole body) and a machine-readable `code`, as OpenAI's error bodies carry them."""

    def __init__(self, message: str, *, param: str = "", status: int = 400, code: str = ""):
        self.message, self.param, self.status, self.code = message, param, status, code
        super().__init__(f"{param}: {message}" if param else message)


class InvariantViolation(PlaygroundError, AssertionError):
    """A model's `check_invariants` found its own state inconsistent: a bug in the model, never
    bad input. An AssertionError too, so a test that checks invariants fails as on an assert."""


class OutOfSpace(PlaygroundError, MemoryError, ValueError):
    """An allocator model (KV-cache policies, the memory lab's allocators) has no room for a
    request; nothing changed. The models are check-then-act, so this means a caller skipped
    `can_*`. `need` is what was asked in `unit`s (blocks, slots, tokens, copies, units, pages),
    `seq_id` the sequence that asked, if one did. A MemoryError (the KV-cache policies raised it)
    and a ValueError (the memory lab's allocators did) too."""

    def __init__(self, message: str, *, need: int, unit: str, seq_id: int | None = None):
        self.need, self.unit, self.seq_id = need, unit, seq_id
        super().__init__(message)


class ToolMissing(PlaygroundError, RuntimeError):
    """A program or compiled module a lab needs is not there (lmbench's lat_mem_rd, the native
    module); the message says how to get it. `tool` names it. A RuntimeError too: callers that
    make the tool optional catch that."""

    def __init__(self, message: str, *, tool: str):
        self.tool = tool
        super().__init__(message)


class LabError(PlaygroundError, RuntimeError):
    """A step of a lab failed: a process, thread or tool it started did not do its job (exited
    non-zero, raised, reported an error). `step` names what failed. A RuntimeError too, as
    these were before."""

    def __init__(self, message: str, *, step: str):
        self.step = step
        super().__init__(message)


class WaitTimeout(PlaygroundError, TimeoutError):
    """A wait for something that is not a rank's message ran out of time: a KV server's reply, a
    child process, a helper thread, the next request of an idle server. `what` names what was
    awaited and `waited_s` how long. Not a CommTimeout: that one is a rank's communication
    operation, carries the peer rank the launcher reads to find the root cause, and says
    "rank R: timed out ... waiting for"; here there is no peer rank. A TimeoutError too."""

    def __init__(self, message: str, *, what: str, waited_s: float):
        self.what, self.waited_s = what, waited_s
        super().__init__(message)
