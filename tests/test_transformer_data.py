"""The lecture's bytes as shipped in the package, and the batch sampler every rank runs alike."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from playground.core.errors import ParamError
from playground.transformer import BatchSampler, lecture_bytes

DOCS_LINK = Path(__file__).resolve().parents[1] / "docs" / "lecture-p4-computer-systems.txt"


def test_the_lecture_text_ships_in_the_package_and_docs_links_to_it():
    data = lecture_bytes()
    assert data.dtype == np.uint8 and len(data) > 30_000
    assert data.tobytes() == DOCS_LINK.read_bytes()
    data.tobytes().decode("utf-8")  # the whole text is UTF-8


def test_the_installed_package_finds_the_text_outside_the_checkout(tmp_path):
    """`python -P` from another directory imports the installed package (a wheel in CI), which must
    carry the text as package data."""
    code = "from playground.transformer import lecture_bytes; print(len(lecture_bytes()))"
    out = subprocess.run(
        [sys.executable, "-P", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == len(lecture_bytes())


def test_a_step_s_batch_is_the_same_whoever_draws_it_and_when():
    data = lecture_bytes()
    a, b = BatchSampler(data, 16, 8, seed=1), BatchSampler(data, 16, 8, seed=1)
    np.testing.assert_array_equal(a.global_batch(5), b.global_batch(5))
    assert a.global_batch(5).tolist() != a.global_batch(6).tolist()
    assert a.global_batch(5).tolist() != BatchSampler(data, 16, 8, seed=2).global_batch(5).tolist()
    windows = a.global_batch(5)
    assert windows.shape == (8, 17) and windows.dtype == np.int64
    text = data.tobytes()
    for row in windows:
        assert bytes(row.astype(np.uint8)) in text  # a window is consecutive bytes of the text


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_ranks_take_consecutive_rows_and_targets_are_the_next_bytes(ranks):
    sampler = BatchSampler(lecture_bytes(), 8, 12, seed=0)
    windows = sampler.global_batch(3)
    parts = [sampler.rank_batch(3, r, ranks) for r in range(ranks)]
    np.testing.assert_array_equal(np.concatenate([x for x, _ in parts]), windows[:, :-1])
    np.testing.assert_array_equal(np.concatenate([y for _, y in parts]), windows[:, 1:])


def test_bad_sizes_name_their_key():
    data = lecture_bytes()
    with pytest.raises(ParamError, match=f"text's length {len(data)} bytes") as e:
        BatchSampler(data, len(data), 4)
    assert e.value.field == "context"
    BatchSampler(data, len(data) - 1, 1).global_batch(0)  # the longest context that fits
    with pytest.raises(ParamError) as e:
        BatchSampler(data, 8, 0)
    assert e.value.field == "batch"
    with pytest.raises(ParamError, match="divisible by the 3 ranks") as e:
        BatchSampler(data, 8, 8).rank_batch(0, 0, 3)
    assert e.value.field == "batch"
