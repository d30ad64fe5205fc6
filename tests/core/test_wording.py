"""Counts read as a person writes them: one noun form for one, the plural otherwise."""

from __future__ import annotations

import pytest

from ddp_doctor.wording import count, human_bytes


@pytest.mark.parametrize(("n", "noun", "expected"), [
    (1, "GPU", "1 GPU"), (2, "GPU", "2 GPUs"), (0, "GPU", "0 GPUs"),
    (1, "GPU process", "1 GPU process"), (8, "GPU process", "8 GPU processes"),
    (3, "uncorrectable ECC error", "3 uncorrectable ECC errors"),
    (2, "DataLoader worker", "2 DataLoader workers"), (2, "patch", "2 patches"),
])
def test_count(n, noun, expected):
    assert count(n, noun) == expected


def test_human_bytes():
    assert [human_bytes(v) for v in (None, 512, 64 << 20, 3 << 29)] == [
        "unknown", "512 B", "64.0 MiB", "1.5 GiB"]
