"""The streaming scan: find the lines any rule could match, and test only those rules.

Testing ~100 regular expressions on every line of a 1 GB log would take minutes. Each
rule instead names its *anchors*, words from a small shared vocabulary (``GATES``) that
every line it can match contains. A chunk is lowered once, each gate is found with
``str.find`` (C speed), and only lines holding a gate are split off and tested, and only
against the rules indexed under the gates they hold. Memory stays bounded: evidence keeps
a few distinct lines per code, and the environment sections handed to the text parsers
are capped in lines and size.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpu_doctor.diagnose.normalize import text_chunks
from gpu_doctor.diagnose.ranks import SUMMARY_RANK, split_rank
from gpu_doctor.diagnose.source import Document

MAX_EVIDENCE = 5  # distinct lines quoted per code
MAX_QUOTE = 300  # characters of one quoted line
SECTION_LINES = 400  # lines captured after an environment-section marker
MAX_SECTIONS = 8
SECTION_LINE_CHARS = 2000

# A Python exception line ("KeyError: 'boxes'", "torch.cuda.OutOfMemoryError: ..."): kept
# so that a log no rule explains can at least quote what failed.
_EXCEPTION = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt)\b"
                        r"(?::\s|:?$)")
_NCCL_PREFIX = re.compile(r"^[\w.\-]+:\d+:\d+ \[\d+\] ")


class RuleLike(Protocol):
    """What the scan needs of a log rule (``gpu_doctor.logrules.Rule``)."""

    code: Any
    pattern: re.Pattern[str]
    anchors: tuple[str, ...]


@dataclass(frozen=True)
class Quote:
    """One matched line: where it is and what it says."""

    document: str
    line: int
    text: str
    rank: str | None


@dataclass
class CodeHits:
    """Everything one code matched: the first distinct lines, every rank, a count."""

    code: Any
    rules: list[Any] = field(default_factory=list)
    quotes: list[Quote] = field(default_factory=list)
    ranks: set[str] = field(default_factory=set)
    count: int = 0
    seen: set[str] = field(default_factory=set)
    order: int = 0  # when the code was first met, across documents

    def add(self, rule: Any, quote: Quote, key: str) -> None:
        self.count += 1
        if rule not in self.rules:
            self.rules.append(rule)
        if quote.rank:
            self.ranks.add(quote.rank)
        if key not in self.seen and len(self.quotes) < MAX_EVIDENCE:
            self.seen.add(key)
            self.quotes.append(quote)


@dataclass
class Section:
    """Lines captured after a marker, for the environment parsers."""

    document: str
    first_line: int
    lines: list[str] = field(default_factory=list)


@dataclass
class ScanResult:
    """What a scan found, across all documents of one input."""

    hits: dict[str, CodeHits] = field(default_factory=dict)
    sections: list[Section] = field(default_factory=list)
    exceptions: list[Quote] = field(default_factory=list)
    documents: list[str] = field(default_factory=list)
    lines: int = 0
    bytes_text: int = 0
    blank: bool = True  # nothing but whitespace so far


class Scanner:
    """Scan documents for rule matches; one instance per diagnosis."""

    def __init__(self, rules: Sequence[RuleLike], gates: Iterable[str],
                 markers: Iterable[str] = ()) -> None:
        self._by_gate: dict[str, list[RuleLike]] = {}
        for rule in rules:
            for anchor in rule.anchors:
                self._by_gate.setdefault(anchor, []).append(rule)
        self._markers = tuple(dict.fromkeys(m.lower() for m in markers))
        self._gates = tuple(dict.fromkeys([*(g.lower() for g in gates), *self._markers]))
        self.result = ScanResult()
        self._capture: Section | None = None
        self._capture_left = 0
        self._order = 0

    def scan(self, document: Document) -> None:
        self.result.documents.append(document.name)
        base, last = 1, "\n"
        for chunk in text_chunks(document.blocks, document.encoding):
            self.result.bytes_text += len(chunk)
            if self.result.blank and not chunk.isspace():
                self.result.blank = False
            self._chunk(document.name, chunk, base)
            base += chunk.count("\n")
            last = chunk[-1:] or last
        self.result.lines += base - 1 + (last != "\n")
        self._capture = None

    # -- one chunk ---------------------------------------------------------------------

    def _chunk(self, name: str, chunk: str, base: int) -> None:
        low = chunk.lower()
        aligned = len(low) == len(chunk)
        lines_of = None if aligned else chunk.split("\n")
        starts: set[int] = set()
        for gate in self._gates:
            at = low.find(gate)
            while at != -1:
                start = low.rfind("\n", 0, at) + 1
                starts.add(start)
                end = low.find("\n", at)
                if end == -1:
                    break
                at = low.find(gate, end)
        if self._capture is not None:
            self._continue_capture(chunk)
        if not starts:
            return
        counted_to, line_no = 0, base
        for start in sorted(starts):
            line_no += low.count("\n", counted_to, start)
            counted_to = start
            end = low.find("\n", start)
            end = len(low) if end == -1 else end
            if aligned:
                line = chunk[start:end]
            else:
                assert lines_of is not None
                line = lines_of[line_no - base]
            self._line(name, chunk, start, line, low[start:end], line_no)

    def _line(self, name: str, chunk: str, start: int, line: str, low: str,
              line_no: int) -> None:
        rank, text = split_rank(line)
        present = [gate for gate in self._gates if gate in low]
        if self._markers and self._capture is None and \
                any(marker in low for marker in self._markers):
            self._start_capture(name, chunk, start, line_no)
        tested: set[int] = set()
        matched = False
        for gate in present:
            for rule in self._by_gate.get(gate, ()):
                if id(rule) in tested:
                    continue
                tested.add(id(rule))
                if rule.pattern.search(text):
                    matched = True
                    self._record(rule, name, chunk, start, text, line_no, rank)
        if not matched and _EXCEPTION.match(text):
            quotes = self.result.exceptions
            quotes.append(Quote(name, line_no, text.strip()[:MAX_QUOTE], rank))
            del quotes[:-3]

    def _record(self, rule: RuleLike, name: str, chunk: str, start: int, text: str,
                line_no: int, rank: str | None) -> None:
        if rank is None:
            rank = _summary_rank(chunk, start)
        code_id = rule.code.id
        hits = self.result.hits.get(code_id)
        if hits is None:
            self._order += 1
            hits = self.result.hits[code_id] = CodeHits(rule.code, order=self._order)
        quoted = text.strip()
        key = _NCCL_PREFIX.sub("", quoted)
        hits.add(rule, Quote(name, line_no, quoted[:MAX_QUOTE], rank), key)

    # -- environment sections ------------------------------------------------------------

    def _start_capture(self, name: str, chunk: str, start: int, line_no: int) -> None:
        if len(self.result.sections) >= MAX_SECTIONS:
            return
        self._capture = Section(name, line_no)
        self._capture_left = SECTION_LINES
        self.result.sections.append(self._capture)
        self._continue_capture(chunk[start:])

    def _continue_capture(self, text: str) -> None:
        assert self._capture is not None
        taken = text.split("\n", self._capture_left)[: self._capture_left]
        if taken and taken[-1] == "" and text.endswith("\n"):
            taken.pop()
        self._capture.lines.extend(line[:SECTION_LINE_CHARS] for line in taken)
        self._capture_left -= len(taken)
        if self._capture_left <= 0:
            self._capture = None


def _summary_rank(chunk: str, start: int) -> str | None:
    """The rank torchrun's failure summary names a few lines above an exit code."""
    at = start
    for _ in range(4):
        if at <= 0:
            return None
        at = chunk.rfind("\n", 0, at - 1) + 1
        end = chunk.find("\n", at)
        found = SUMMARY_RANK.match(chunk[at:end if end != -1 else None])
        if found:
            return f"rank {int(found.group(1))}"
    return None
