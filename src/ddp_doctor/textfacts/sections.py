"""Where each kind of section starts in a larger text, and which parser reads it.

A ticket holds a traceback, prose, and somewhere the output of a tool. A section starts at
a line that only that tool prints (the start patterns below); it runs to the next start or
to its parser's own end (each parser stops where its format stops). The streaming diagnose
engine cannot afford a regex per line of a large log, so it looks for ``SECTION_MARKERS``,
lowercase substrings, and hands over the lines after each hit; every start pattern here
matches only lines that contain one of them (tests/diagnose/test_textfacts.py checks it on every
capture).

Five markers, because each is one pass over the log:
- "pytorch version": collect_env's "PyTorch version: 2.1.0" (also the old "PyTorch version
  1.5.0" without a colon);
- "driver": the nvidia-smi table header ("| NVIDIA-SMI 535.104.05  Driver Version: ..."),
  the "Driver Version : ..." line where ``nvidia-smi -q`` content begins, "NVIDIA-SMI has
  failed because it couldn't communicate with the NVIDIA driver" and "Failed to initialize
  NVML: Driver/library version mismatch";
- "device handle": "Unable to determine the device handle for GPU...: Unknown Error";
- "torch-": the Ultralytics / YOLOv5 banner ("Python-3.10.9 torch-1.13.1+cu117 CUDA:0 ...");
- "reasons": ``nvidia-smi -q``'s "Clocks Event Reasons" ("Clocks Throttle Reasons" before
  R535) pasted alone, flush left, as threads about a throttled GPU quote it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ddp_doctor.textfacts import collect_env, nvidia_smi, nvidia_smi_q, yolo_checks
from ddp_doctor.textfacts.parsed import Parsed, normalize_line

SECTION_MARKERS: tuple[str, ...] = ("pytorch version", "driver", "device handle", "torch-",
                                     "reasons")

Parser = Callable[[Sequence[str]], "Parsed | None"]

# (pattern, parser, whether the pattern may match anywhere in the line or only at its start)
_STARTS: tuple[tuple[re.Pattern[str], Parser, bool], ...] = (
    (re.compile(r"^\s*PyTorch version\b", re.IGNORECASE), collect_env.parse, False),
    (re.compile(r"^\s*\|?\s*NVIDIA-SMI\s+\S+\s+Driver Version:", re.IGNORECASE),
     nvidia_smi.parse, False),
    (nvidia_smi.NO_DRIVER, nvidia_smi.parse, True),
    (nvidia_smi.MISMATCH, nvidia_smi.parse, True),
    (nvidia_smi.LOST, nvidia_smi.parse, True),
    (nvidia_smi_q.START, nvidia_smi_q.parse, False),
    (yolo_checks.BANNER, yolo_checks.parse, False),
)


@dataclass(frozen=True)
class Section:
    """One recognised section: its 0-based first line, and what its parser read."""

    start: int
    parsed: Parsed


def _parser_for(line: str) -> Parser | None:
    low = line.lower()
    if not any(marker in low for marker in SECTION_MARKERS):
        return None
    normalized = normalize_line(line)
    if nvidia_smi_q.EXCERPT.match(normalized.rstrip()):  # flush left only: the same
        return nvidia_smi_q.parse_excerpt  # heading indented is inside a whole report
    text = normalized.strip()
    for pattern, parser, anywhere in _STARTS:
        if (pattern.search(text) if anywhere else pattern.match(text)) is not None:
            return parser
    return None


def find_sections(text: str) -> list[Section]:
    """Every section of TEXT that its parser could read, in order."""
    lines = text.splitlines()
    starts = [(i, p) for i, p in ((i, _parser_for(line)) for i, line in enumerate(lines))
              if p is not None]
    found: list[Section] = []
    for n, (start, parser) in enumerate(starts):
        end = starts[n + 1][0] if n + 1 < len(starts) else len(lines)
        try:
            parsed = parser(lines[start:end])
        except Exception:  # a parser bug must not cost the other sections
            parsed = None
        if parsed is not None:
            found.append(Section(start, parsed))
    return found
