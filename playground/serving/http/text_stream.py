"""What one sample wrote so far, as text: bytes decoded as they come, cut at a stop string.

A byte-level model can stop in the middle of a UTF-8 character; the incremental decoder keeps
the character's first bytes until the rest arrives, so a stream's deltas are whole characters and
add up to exactly the one-shot decoding (invalid bytes as U+FFFD either way). A stop string can
arrive split over several steps: a stream holds back the last `len(longest stop) - 1` characters
until more text shows they start no stop string (vLLM does the same).
"""

import codecs


class SampleText:
    def __init__(self, stop: tuple[str, ...] = ()):
        self.stop = stop
        self.hold = max(map(len, stop), default=1) - 1
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.token_ids: list[int] = []
        self.text = ""
        self.sent = 0  # characters of `text` already handed out as deltas
        self.stopped = False  # met a stop string: `text` ends before it

    def add(self, token_ids: list[int], final: bool = False) -> None:
        """The sample's next tokens (`final`: its last ones); nothing after a stop string."""
        if self.stopped:
            return
        self.token_ids += token_ids
        start = max(0, len(self.text) - self.hold)
        self.text += self.decoder.decode(bytes(token_ids), final=final)
        found = [i for i in (self.text.find(s, start) for s in self.stop) if i >= 0]
        if found:
            self.text, self.stopped = self.text[: min(found)], True

    def delta(self, final: bool = False) -> str:
        """The text not handed out yet that can no longer turn out to start a stop string."""
        end = len(self.text) if final or self.stopped else max(self.sent, len(self.text) - self.hold)
        out, self.sent = self.text[self.sent : end], end
        return out
