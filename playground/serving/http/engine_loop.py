"""The engine in its own thread, requests crossing by id (vLLM's AsyncLLM, in one process).

    HTTP handlers (the event loop's thread)          the engine's thread
      submit(id, prompt, params, deliver) --queue-->  engine.add_request
      abort(id)                           --queue-->  engine.abort_request: its blocks freed now
                                                      engine.step()
      deliver(Output) <--call_soon_threadsafe------   each live request's new tokens, every step

The engine is touched by its thread alone; the handlers only put commands on a queue and receive
`Output`s through the `deliver` they gave (which hands them over to their event loop). The thread
sleeps on the queue while the engine has no work, so an idle server costs nothing. `cancel_all`
(Ctrl-C) aborts every request and tells its handler; `stop` ends the thread and joins it.

If a step raises, the engine is lost with what its pool held, but no accepted request is: with a
`rebuild` the thread builds a new engine (a new pool) and adds every live request to it again
from its prompt and sampling parameters; greedy and seeded sampling give the same tokens again, and
a handler receives only those past what it was already given, so its stream goes on as if nothing
happened. After `max_restarts` such restarts (or without `rebuild`), every live request gets the
error, the thread ends, and `failure` says why (/health answers 503).
"""

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from playground.kvcache.engine.llm_engine import LLMEngine
from playground.kvcache.engine.sequence import GenerateRequest, SamplingParams

IDLE_WAIT_S = 0.01  # a step that fitted nothing waits this long for a command before trying again
MAX_RESTARTS = 3  # engines rebuilt after a failed step before the loop gives up


@dataclass(frozen=True)
class Output:
    """One request's tokens since its last Output, per sample; `finished` once it has all of
    them; `error` if it ended without (the server is stopping, or the engine failed)."""

    token_ids: list[list[int]]
    finished: bool = False
    error: str = ""


Deliver = Callable[[Output], None]


@dataclass
class _Live:
    request: GenerateRequest
    deliver: Deliver
    sent: list[int] = field(default_factory=list)  # tokens delivered, per sample


class EngineLoop:
    def __init__(
        self,
        engine: LLMEngine,
        on_step: Callable[[LLMEngine], None] | None = None,
        on_finish: Callable[[GenerateRequest], None] | None = None,
        *,
        rebuild: Callable[[], LLMEngine] | None = None,
        max_restarts: int = MAX_RESTARTS,
        on_restart: Callable[[str], None] | None = None,
    ):
        self.engine = engine
        self.on_step, self.on_finish, self.on_restart = on_step, on_finish, on_restart
        self.rebuild, self.max_restarts = rebuild, max_restarts
        self.commands: queue.SimpleQueue = queue.SimpleQueue()
        self.live: dict[int, _Live] = {}  # the engine thread's alone
        self.failure = ""
        self.restarts: list[str] = []  # why each engine was rebuilt
        self.thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def submit(self, request_id: int, prompt: list[int], params: SamplingParams, deliver: Deliver) -> None:
        self.commands.put(("add", request_id, prompt, params, deliver))

    def abort(self, request_id: int) -> None:
        self.commands.put(("abort", request_id))

    def cancel_all(self, why: str = "the server is shutting down") -> None:
        self.commands.put(("cancel_all", why))

    def stop(self, timeout_s: float = 10.0) -> None:
        """Cancel what is in flight and end the thread."""
        if self.thread.is_alive():
            self.commands.put(("stop", "the server stopped"))
            self.thread.join(timeout_s)

    # -- the engine's thread ---------------------------------------------------------------
    def _run(self) -> None:
        while True:
            try:
                return self._steps()
            except Exception as e:  # noqa: BLE001 - the engine is lost; its requests must not be
                why = f"{type(e).__name__}: {e}"
                if self.rebuild is None or len(self.restarts) >= self.max_restarts:
                    after = f" (after {len(self.restarts)} restarts)" if self.restarts else ""
                    self.failure = f"the engine failed{after}: {why}"
                    self._cancel(self.failure)
                    raise
                self._restart(why)

    def _steps(self) -> None:
        while self._take_commands(block=not self.engine.has_work()):
            num_tokens = -1
            if self.engine.has_work():
                finished, num_tokens = self.engine.step()
                self._publish(finished)
            if self.on_step:  # after a step, or commands (an abort frees blocks)
                self.on_step(self.engine)
            if not num_tokens:  # nothing fitted: wait for something to change
                self._take_commands(block=True, timeout_s=IDLE_WAIT_S)

    def _restart(self, why: str) -> None:
        """A new engine, every live request added to it again from its prompt (arrived when it
        first did); what its handler was given stays counted in `sent`."""
        assert self.rebuild is not None
        self.restarts.append(why)
        self.engine = self.rebuild()
        for request_id, live in self.live.items():
            old = live.request
            live.request = self.engine.add_request(b"http", request_id, old.prompt, old.params)
            live.request.arrival_s = old.arrival_s
        if self.on_restart:
            self.on_restart(why)

    def _take_commands(self, block: bool, timeout_s: float | None = None) -> bool:
        """Do every queued command (waiting for one if `block`); False once told to stop."""
        try:
            command = self.commands.get(block=block, timeout=timeout_s)
        except queue.Empty:
            return True
        while True:
            if not self._do(command):
                return False
            try:
                command = self.commands.get_nowait()
            except queue.Empty:
                return True

    def _do(self, command: tuple) -> bool:
        kind = command[0]
        if kind == "add":
            _, request_id, prompt, params, deliver = command
            request = self.engine.add_request(b"http", request_id, prompt, params)
            self.live[request_id] = _Live(request, deliver, [0] * params.n)
        elif kind == "abort":
            live = self.live.pop(command[1], None)
            if live is not None:
                self.engine.abort_request(live.request.request_id)
        else:
            self._cancel(command[1])
            if self.on_step:
                self.on_step(self.engine)
            return kind != "stop"
        return True

    def _cancel(self, why: str) -> None:
        for live in self.live.values():
            if not self.failure:  # a failed engine's memory goes with it
                self.engine.abort_request(live.request.request_id)
            live.deliver(Output([[] for _ in live.sent], error=why))
        self.live.clear()

    def _publish(self, finished: list[GenerateRequest]) -> None:
        done = {id(r) for r in finished}
        for request_id, live in list(self.live.items()):
            request, prompt_len = live.request, len(live.request.prompt)
            new = []
            for i, seq in enumerate(request.seqs):
                new.append(seq.token_ids[prompt_len + live.sent[i] :])
                live.sent[i] += len(new[-1])
            new += [[] for _ in range(len(live.sent) - len(new))]
            is_done = id(request) in done
            if is_done:
                del self.live[request_id]
                if self.on_finish:
                    self.on_finish(request)
            if is_done or any(new):
                live.deliver(Output(new, finished=is_done))
