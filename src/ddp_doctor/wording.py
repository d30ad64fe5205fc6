"""Counts and lists in the words a person would write: "1 GPU", "2 GPUs", never "GPU(s)".

Every message the doctor prints is read by someone at the worst moment of their day; a
template filled in blindly ("needs 0 GPU(s)", "at most 0 workers") reads like the tool did
not understand the machine it is looking at.
"""

from __future__ import annotations

_IRREGULAR = {"process": "processes", "is": "are", "has": "have", "was": "were"}


def plural(noun: str, n: int) -> str:
    """NOUN as it goes after the number N: ``plural("GPU", 2)`` is "GPUs", and the last word
    of a longer noun takes the plural ("GPU process" -> "GPU processes")."""
    if n == 1:
        return noun
    head, _, last = noun.rpartition(" ")
    if last in _IRREGULAR:
        last = _IRREGULAR[last]
    elif last.endswith(("s", "sh", "ch", "x")):
        last += "es"
    else:
        last += "s"
    return f"{head} {last}" if head else last


def count(n: int, noun: str) -> str:
    """"1 GPU", "2 GPUs", "0 GPUs"."""
    return f"{n} {plural(noun, n)}"


def human_bytes(n: int | float | None) -> str:
    """1.5 GiB / 64 MiB / 512 B: the units `df -h` users recognise."""
    if n is None:
        return "unknown"
    for unit, size in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            value = n / size
            return f"{value:.1f} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{int(n)} B"
