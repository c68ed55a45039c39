"""The admission rule, vLLM's, in one place: the engine's scheduler applies it to the policy in its
hands (scheduler.py), the KV-cache lab's replayer to the server it sends requests to
(playground/kvlab/replay.py).

- Waiting sequences are admitted in arrival order: a head that is refused blocks the queue.
- At most `max_num_seqs` run at once.
- After a preemption nothing is admitted while anything runs, until a sequence finishes: the
  memory just freed would be refilled at once and the same step refused again (a livelock that
  first-fit shows).
- Once something runs, a sequence is admitted only while `reserve_slots` (vLLM's watermark, a
  share of the pool) stay free after it: room for the running sequences to grow.
- Whether it fits at all is the policy's check-then-act `can_allocate` / `allocate` (through the
  server: its `create`, refused with out_of_memory, nothing changed).
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class AdmissionRule:
    max_num_seqs: int
    reserve_slots: int  # the watermark, in slots

    @classmethod
    def with_watermark(cls, max_num_seqs: int, watermark: float, capacity_slots: int) -> "AdmissionRule":
        """`watermark` a share of `capacity_slots`."""
        return cls(max_num_seqs, int(watermark * capacity_slots))

    def is_open(self, num_running: int, pressure: bool) -> bool:
        """Whether this step admits anything; `pressure`: preempted since the last finish."""
        return not (pressure and num_running)

    def admits(self, num_running: int, free_slots: int, slots_needed: int) -> bool:
        """Whether the queue's head may start beside `num_running` sequences, if the policy can
        allocate it: it needs `slots_needed` of the `free_slots`."""
        if num_running >= self.max_num_seqs:
            return False
        return not num_running or free_slots - slots_needed >= self.reserve_slots
