"""What a byte-level model wrote, as text, and how much it looks like the text it learned.

The model emits bytes, one token each; the lecture is UTF-8, where a Chinese character is three
bytes. So a sample can stop in the middle of a character (the length is counted in bytes), and
a model that has not learned UTF-8's grammar yet writes bytes that form no character at all.
`decode_sample` shows the whole characters, each invalid byte inside as U+FFFD (the replacement
character), and cuts an incomplete character at the end rather than showing it as garbage.

`lecture_likeness` puts two numbers on "recognizably the lecture's text": the share of the
sample's bytes that form valid UTF-8 characters (a model that learned the encoding writes
nearly only those), and the share of its 4-byte sequences that occur somewhere in the lecture
(a model that learned the lecture's words writes sequences it has seen; random valid UTF-8
almost never does). A model collapsed into repeating one character scores well on the first and
can score on the second, so the check reads both, and the sample is printed beside them.
"""

import codecs
from dataclasses import dataclass

NGRAM_BYTES = 4  # spans a whole Chinese character and a byte of the next, or four ASCII letters
LIKE_VALID_UTF8 = 0.9  # "lecture-like": at least this share of bytes in valid characters ...
LIKE_NGRAMS_FOUND = 0.5  # ... and at least this share of 4-byte sequences found in the lecture


def _whole(data: bytes) -> str:
    """`data` up to its last whole character, each invalid byte as a lone surrogate (U+DC80 + byte:
    Python's surrogateescape), so that invalid bytes can be counted and replaced."""
    return codecs.getincrementaldecoder("utf-8")(errors="surrogateescape").decode(bytes(data), final=False)


def _is_escaped(ch: str) -> bool:
    return "\udc80" <= ch <= "\udcff"


def decode_sample(data: bytes) -> str:
    """The sample as text: cut at its last whole character, invalid bytes inside as U+FFFD."""
    return "".join("\ufffd" if _is_escaped(ch) else ch for ch in _whole(data))


@dataclass(frozen=True)
class Likeness:
    """`valid_utf8`: share of the sample's bytes (up to its last whole character) that form valid
    characters; `ngrams_found`: share of its 4-byte sequences that occur in the reference text."""

    valid_utf8: float
    ngrams_found: float
    num_bytes: int

    @property
    def is_lecture_like(self) -> bool:
        return self.valid_utf8 >= LIKE_VALID_UTF8 and self.ngrams_found >= LIKE_NGRAMS_FOUND

    def describe(self) -> str:
        return (
            f"{100 * self.valid_utf8:.0f}% of its bytes valid UTF-8, {100 * self.ngrams_found:.0f}% of its "
            f"{NGRAM_BYTES}-byte sequences found in the lecture"
        )


def ngrams(data: bytes, n: int = NGRAM_BYTES) -> list[bytes]:
    return [data[i : i + n] for i in range(len(data) - n + 1)]


def lecture_likeness(sample: bytes, reference: bytes, n: int = NGRAM_BYTES) -> Likeness:
    """How much `sample` looks like `reference` (see the module doc); an empty sample scores 0."""
    text = _whole(sample)
    kept = text.encode("utf-8", errors="surrogateescape")
    invalid = sum(1 for ch in text if _is_escaped(ch))
    grams = ngrams(kept, n)
    found = set(grams) & set(ngrams(bytes(reference), n))
    return Likeness(
        valid_utf8=(len(kept) - invalid) / len(kept) if kept else 0.0,
        ngrams_found=len(found) / len(grams) if grams else 0.0,
        num_bytes=len(kept),
    )
