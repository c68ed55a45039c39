"""One pipeline stage's share of a step: its schedule's actions run in order over the pipeline
group, the thin I/O loop around the pure schedule (`schedules`).

    F(i): receive micro-batch i's activation from the previous stage (the first stage has its
          tokens), forward this stage's blocks (`Transformer.forward_stage`), post the output to the
          next stage (isend: the transport carries it while the stage goes on), keep the
          activations; on the last stage the forward ends in the loss.
    B(i): receive the gradient of micro-batch i's output from the next stage (the last stage starts
          from its loss), backward (`backward_stage`), post the input's gradient to the previous
          stage, drop micro-batch i's activations.

Gradients accumulate over the micro-batches: the model writes each micro-batch's gradients into its
own buffer and hands each one over as it is final (`on_grad_ready`), which adds it into the step's
accumulator (copies it, for the first micro-batch). Every rank runs the same number of the same
messages in the same order on each (peer, tag), so tags need only say what a message is:
2 i for micro-batch i's activation, 2 i + 1 for its gradient.

Every receive runs as a named operation of the communicator ("pipeline stage 2: activation of
micro-batch 3 from stage 1"), which a timeout or a lost peer quotes: a stage that died or hangs is
named, with the micro-batch its neighbour was waiting for. Each action is traced as one span
(`pipeline.forward` / `pipeline.backward`, with its stage, micro-batch, step and run): the trace the
bubble is measured from and the schedule drawn from. The activations held are counted in bytes as
they are kept and dropped (`Activations.nbytes`); the peak is the stage's activation memory.
"""

from dataclasses import dataclass

import numpy as np

from playground.training.pipeline.schedules import FORWARD, Action
from playground.transformer import Transformer
from playground.transformer.model import no_span

SPAN = {FORWARD: "pipeline.forward", "B": "pipeline.backward"}


def tag_of(kind: str, micro_batch: int) -> int:
    return 2 * micro_batch + (0 if kind == FORWARD else 1)


@dataclass
class StageResult:
    """One step of one stage: its loss share (the last stage's, else 0), the most bytes of
    activations it held at once, and how many micro-batches that was."""

    loss: float
    peak_bytes: int
    peak_micro_batches: int


class Stage:
    """Stage `plan.stage` of the pipeline group `group` (its rank is the stage), running `model`
    (built with `plan`) and accumulating its gradients into `grads` (same layout). `comm` is the
    world communicator, whose named operations errors quote."""

    def __init__(self, comm, group, model: Transformer, grads: np.ndarray, unit_span=None):
        self.comm, self.group, self.model, self.grads = comm, group, model, grads
        # around each of the model's pieces: the data-parallel strategy's work (ZeRO-3's gathers)
        self.pieces = unit_span(no_span) if unit_span is not None else no_span
        self.plan = model.plan
        self.index = self.plan.stage
        self._first_backward = True

    def _accumulate(self, index: int) -> None:
        spec = self.model.layout[index]
        part = self.model.grads[spec.offset : spec.stop]
        if self._first_backward:
            self.grads[spec.offset : spec.stop] = part
        else:
            self.grads[spec.offset : spec.stop] += part

    def _recv(self, kind: str, micro_batch: int, shape: tuple[int, ...]) -> np.ndarray:
        src = self.index - 1 if kind == FORWARD else self.index + 1
        what = "activation" if kind == FORWARD else "gradient"
        buf = np.empty(shape, dtype=self.model.config.np_dtype)
        with self.comm.collective(
            f"pipeline stage {self.index}: {what} of micro-batch {micro_batch} from stage {src}"
        ):
            return self.group.recv(src, tag_of(kind, micro_batch), out=buf)

    def run(
        self,
        actions: tuple[Action, ...],
        micro_batches: list[tuple[np.ndarray, np.ndarray]],
        loss_denominator: int,
        step: int,
        run: int,
    ) -> StageResult:
        """This stage's actions of one step over `micro_batches` (inputs, targets: each (rows, T))."""
        plan, model, tracer = self.plan, self.model, self.comm.tracer
        held: dict[int, tuple] = {}
        held_bytes = peak_bytes = peak_count = 0
        loss, sends = 0.0, []
        self._first_backward = True
        for a in actions:
            inputs, targets = micro_batches[a.micro_batch]
            shape = (*inputs.shape, model.config.d_model)
            if a.kind == FORWARD:
                x = inputs if plan.embedding else self._recv(FORWARD, a.micro_batch, shape)
                with tracer.span(
                    SPAN[a.kind], cat="compute", stage=self.index, mb=a.micro_batch, step=step, run=run
                ):
                    out, saved = model.forward_stage(
                        x, targets, loss_denominator=loss_denominator, span=self.pieces
                    )
                if plan.head:
                    loss += float(out)
                else:
                    sends.append(self.group.isend(out, self.index + 1, tag_of(FORWARD, a.micro_batch)))
                held[a.micro_batch] = (saved, saved.nbytes)  # backward consumes some of what it reads
                held_bytes += held[a.micro_batch][1]
                if held_bytes > peak_bytes:
                    peak_bytes, peak_count = held_bytes, len(held)
            else:
                dy = None if plan.head else self._recv(a.kind, a.micro_batch, shape)
                saved, nbytes = held.pop(a.micro_batch)
                with tracer.span(
                    SPAN[a.kind], cat="compute", stage=self.index, mb=a.micro_batch, step=step, run=run
                ):
                    dx = model.backward_stage(saved, dy, self._accumulate, span=self.pieces)
                self._first_backward = False
                held_bytes -= nbytes
                if not plan.embedding:
                    sends.append(self.group.isend(dx, self.index - 1, tag_of(a.kind, a.micro_batch)))
        with self.comm.collective(f"pipeline stage {self.index}: the step's sends to its neighbours"):
            for request in sends:
                request.wait(self.comm.timeout_s)
        return StageResult(loss, peak_bytes, peak_count)
