"""Facts from pasted text: the environment a support ticket shows, for the checks to judge.

A ticket rarely comes with a ``--save-facts`` file, but it often holds the output of
``python -m torch.utils.collect_env``, ``yolo checks`` or a YOLO banner, ``nvidia-smi`` or
``nvidia-smi -q``. ``facts_from_text`` finds those sections (``sections``), parses each
(one module per format) and merges them into one ``Facts`` (``build``) with the shapes the
live probes produce, so the same checks say, from the ticket alone, "driver 410.104 is older
than the CUDA 10.1 your torch was built for". Only what the text shows is filled in; the
rest is unavailable ("not in the pasted text") and the checks needing it are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddp_doctor.facts.snapshot import Facts
from ddp_doctor.textfacts.build import build_facts
from ddp_doctor.textfacts.parsed import SECTION_TITLES
from ddp_doctor.textfacts.sections import SECTION_MARKERS, find_sections

__all__ = ["SECTION_MARKERS", "ParsedSection", "TextFacts", "facts_from_text"]


@dataclass(frozen=True)
class ParsedSection:
    """One section that was read: its kind, 1-based first line in the text, and a summary."""

    kind: str  # "collect_env" | "yolo_checks" | "yolov5_banner" | "nvidia_smi" | "nvidia_smi_q"
    first_line: int
    summary: str

    @property
    def title(self) -> str:
        """What a person calls this section ("the nvidia-smi table")."""
        return SECTION_TITLES.get(self.kind, self.kind)


@dataclass(frozen=True)
class TextFacts:
    facts: Facts
    sections: tuple[ParsedSection, ...]


def facts_from_text(text: str) -> TextFacts | None:
    """The facts TEXT shows, or None when it holds no section this package reads.

    Never raises on odd input: a section its parser cannot read is left out.
    """
    if not isinstance(text, str) or not text:
        return None
    found = find_sections(text)
    if not found:
        return None
    sections = tuple(ParsedSection(s.parsed.kind, s.start + 1, s.parsed.summary)
                     for s in found)
    return TextFacts(build_facts(s.parsed for s in found), sections)
