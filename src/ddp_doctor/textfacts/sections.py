"""Where each kind of section starts in a larger text, and which parser reads it.

A ticket holds a traceback, prose, and somewhere the output of a tool. A section starts at
a line that only that tool prints (the start patterns below); it runs to the next start or
to its parser's own end (each parser stops where its format stops). The streaming diagnose
engine cannot afford a regex per line of a large log, so it looks for ``SECTION_MARKERS``,
lowercase substrings, and hands over the lines after each hit; every start pattern here
matches only lines that contain one of them (tests/diagnose/test_textfacts.py checks it on every
capture).

The markers are few and specific because each line that holds one starts a capture of the
lines after it (``diagnose/scan.py``, at most eight per log); the scan finds them all in one
pass with its gate words:
- "pytorch version": collect_env's "PyTorch version: 2.1.0" (also the old "PyTorch version
  1.5.0" without a colon);
- "driver": the nvidia-smi table header ("| NVIDIA-SMI 535.104.05  Driver Version: ..."),
  the "Driver Version : ..." line where ``nvidia-smi -q`` content begins, "NVIDIA-SMI has
  failed because it couldn't communicate with the NVIDIA driver" and "Failed to initialize
  NVML: Driver/library version mismatch";
- "device handle": "Unable to determine the device handle for GPU...: Unknown Error";
- "torch-": the Ultralytics / YOLOv5 banner ("Python-3.10.9 torch-1.13.1+cu117 CUDA:0 ...");
- "reasons": ``nvidia-smi -q``'s "Clocks Event Reasons" ("Clocks Throttle Reasons" before
  R535) pasted alone, flush left as threads about a throttled GPU quote it, or with the
  report's indentation where no whole report comes before it;
- "gpu current temp": the first field of ``nvidia-smi -q``'s "Temperature" section, pasted
  alone (the heading "Temperature" is prose's word too), read from its exact field names
  where no whole report comes before it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ddp_doctor.textfacts import collect_env, nvidia_smi, nvidia_smi_q, yolo_checks
from ddp_doctor.textfacts.parsed import Parsed, normalize_line

SECTION_MARKERS: tuple[str, ...] = ("pytorch version", "driver", "device handle", "torch-",
                                     "reasons", "gpu current temp")

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
    if nvidia_smi_q.EXCERPT.match(normalized.rstrip()) \
            or nvidia_smi_q.INDENTED_EXCERPT.match(normalized.rstrip()):
        return nvidia_smi_q.parse_excerpt
    if nvidia_smi_q.TEMPERATURE.match(normalized):
        return nvidia_smi_q.parse_temperature
    text = normalized.strip()
    for pattern, parser, anywhere in _STARTS:
        if (pattern.search(text) if anywhere else pattern.match(text)) is not None:
            return parser
    return None


def find_sections(text: str) -> list[Section]:
    """Every section of TEXT that its parser could read, in order."""
    lines = text.splitlines()
    starts: list[tuple[int, Parser]] = []
    report = False  # a whole nvidia-smi -q report came before: its sections are its own
    for i, line in enumerate(lines):
        parser = _parser_for(line)
        if parser is None or (report and _inside_report(line, parser)):
            continue
        report = report or parser is nvidia_smi_q.parse
        starts.append((i, parser))
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


def _inside_report(line: str, parser: Parser) -> bool:
    """Whether a start, after a whole ``nvidia-smi -q`` report, is one of its own sections:
    an indented "Clocks Event Reasons" heading or a "GPU Current Temp" field (a flush-left
    heading is an excerpt pasted after the report, as before)."""
    if parser is nvidia_smi_q.parse_temperature:
        return True
    return parser is nvidia_smi_q.parse_excerpt \
        and not nvidia_smi_q.EXCERPT.match(normalize_line(line).rstrip())
