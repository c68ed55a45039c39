"""A byte-level sample as text (whole characters, invalid bytes replaced) and how lecture-like it is."""

import pytest

from playground.transformer import lecture_bytes
from playground.transformer.text import (
    LIKE_NGRAMS_FOUND,
    LIKE_VALID_UTF8,
    Likeness,
    decode_sample,
    lecture_likeness,
)

LECTURE = bytes(lecture_bytes())
PAGE = "分页".encode()  # 6 bytes: e5 88 86 e9 a1 b5


def test_a_sample_cut_mid_character_ends_at_the_last_whole_one():
    assert decode_sample(PAGE) == "分页"
    assert decode_sample(PAGE[:5]) == "分"  # the second character's first two bytes are cut
    assert decode_sample(PAGE[:4]) == "分"
    assert decode_sample(b"ab" + PAGE[:1]) == "ab"
    assert decode_sample(b"") == ""


def test_invalid_bytes_inside_become_replacement_characters():
    assert decode_sample(b"a\xffb") == "a\ufffdb"
    assert decode_sample(PAGE[1:]) == "\ufffd\ufffd页"  # two continuation bytes without their lead
    assert decode_sample(b"\x80" + PAGE[:4]) == "\ufffd分"  # replaced inside, cut at the end


def test_a_stretch_of_the_lecture_is_lecture_like():
    like = lecture_likeness(LECTURE[1000:1200], LECTURE)
    assert like.valid_utf8 >= 0.98 and like.ngrams_found >= 0.9 and like.is_lecture_like
    assert like.num_bytes <= 200


def test_random_bytes_are_not():
    import numpy as np

    noise = np.random.default_rng(0).integers(0, 256, 200, dtype=np.uint8).tobytes()
    like = lecture_likeness(noise, LECTURE)
    assert like.valid_utf8 < 0.7 and like.ngrams_found < 0.05 and not like.is_lecture_like


def test_valid_text_that_is_not_the_lectures_is_not():
    like = lecture_likeness(b"The quick brown fox jumps over the lazy dog, zebra quiz.", LECTURE)
    assert like.valid_utf8 == 1.0 and like.ngrams_found < LIKE_NGRAMS_FOUND and not like.is_lecture_like


def test_a_loop_of_one_phrase_scores_only_its_few_distinct_sequences():
    """A collapsed greedy sample repeats a short loop: each distinct sequence counts once, so a loop
    of lecture words scores little (and 200 spaces, one sequence, almost nothing)."""
    like = lecture_likeness("共享内存，".encode() * 12, LECTURE)
    assert like.valid_utf8 == 1.0 and like.ngrams_found < 0.1 and not like.is_lecture_like
    assert lecture_likeness(b" " * 200, LECTURE).ngrams_found == pytest.approx(1 / 197)


def test_the_fractions_count_bytes_and_sequences():
    sample = PAGE + b"\xff" + PAGE[:2]  # 7 bytes kept (the cut tail goes), one of them invalid
    like = lecture_likeness(sample, PAGE)
    assert like.num_bytes == 7 and like.valid_utf8 == pytest.approx(6 / 7)
    assert like.ngrams_found == pytest.approx(3 / 4)  # 4 sequences of 4 bytes, 3 of them in "分页"
    assert lecture_likeness(b"abc", LECTURE).ngrams_found == 0.0  # too short for one sequence


def test_the_verdict_needs_both_fractions():
    assert Likeness(LIKE_VALID_UTF8, LIKE_NGRAMS_FOUND, 200).is_lecture_like
    assert not Likeness(LIKE_VALID_UTF8 - 0.01, 1.0, 200).is_lecture_like
    assert not Likeness(1.0, LIKE_NGRAMS_FOUND - 0.01, 200).is_lecture_like
    assert Likeness(0.95, 0.8, 200).describe() == (
        "95% of its bytes valid UTF-8, 80% of its 4-byte sequences found in the lecture"
    )
