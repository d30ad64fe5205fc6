"""The streaming scan: find the lines any rule could match, and test only those rules.

Testing ~60 regular expressions on every line of a 1 GB log would take minutes. Instead:

1. each raw chunk of bytes is lowered once (ASCII only) and every *gate* word (the rules'
   shared anchor vocabulary, ``GATES``, plus the section markers) is found with
   ``bytes.find``, which runs at memory speed;
2. a line holding a gate is kept only if it also holds one of the literal phrases some
   rule cannot match without (one prefix-tree pattern, ``literals.py``), or an exception;
3. only those lines are decoded and cleaned, and tested against the rules whose own
   phrases they hold.

Memory stays bounded: evidence keeps a few distinct lines per code, the start and end of
each document are kept for context, and the environment sections handed to the text
parsers are capped in lines and size.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ddp_doctor.diagnose.literals import phrase_pattern, required_literals
from ddp_doctor.diagnose.normalize import byte_chunks, clean, clean_line
from ddp_doctor.diagnose.rank_prefixes import SUMMARY_RANK, split_rank
from ddp_doctor.diagnose.source import Document
from ddp_doctor.redact.secrets import redact_text

MAX_EVIDENCE = 5  # distinct lines quoted per code
MEMO_LINES = 4096  # distinct lines whose rule matches are remembered
MAX_QUOTE = 300  # characters of one quoted line
SECTION_LINES = 400  # lines captured after an environment-section marker
MAX_SECTIONS = 8
SECTION_LINE_CHARS = 2000

# A Python exception line ("KeyError: 'boxes'", "torch.cuda.OutOfMemoryError: ..."): kept
# so that a log no rule explains can at least quote what failed.
_EXCEPTION = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt)\b"
                        r"(?::\s|:?$)")
_BARE_EXCEPTION = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)\s*$")
_NCCL_PREFIX = re.compile(r"^[\w.\-]+:\d+:\d+ \[\d+\] ")


class RuleLike(Protocol):
    """What the scan needs of a log rule (``ddp_doctor.logrules.Rule``): read-only, so a
    frozen dataclass satisfies it."""

    @property
    def code(self) -> Any: ...
    @property
    def pattern(self) -> re.Pattern[str]: ...
    @property
    def anchors(self) -> tuple[str, ...]: ...


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

    def wants(self, key: str) -> bool:
        """Whether a line with this key would be quoted (so worth redacting)."""
        return key not in self.seen and len(self.quotes) < MAX_EVIDENCE

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


HEAD_CHARS = 256 * 1024  # bytes: the start of each document, for context (commands, NCCL setup)
TAIL_CHARS = 64 * 1024  # its end: where a log that hangs goes silent


@dataclass
class DocumentContext:
    """The start and the end of one document, for judgements that need neighbouring lines."""

    document: str
    head: str = ""
    tail: str = ""
    tail_first_line: int = 1


@dataclass
class ScanResult:
    """What a scan found, across all documents of one input."""

    hits: dict[str, CodeHits] = field(default_factory=dict)
    sections: list[Section] = field(default_factory=list)
    exceptions: list[Quote] = field(default_factory=list)
    documents: list[str] = field(default_factory=list)
    contexts: list[DocumentContext] = field(default_factory=list)
    lines: int = 0
    blank: bool = True  # nothing but whitespace so far


class Scanner:
    """Scan documents for rule matches; one instance per diagnosis."""

    def __init__(self, rules: Sequence[RuleLike], gates: Iterable[str],
                 markers: Iterable[str] = ()) -> None:
        self._by_gate: dict[str, list[RuleLike]] = {}
        self._literals: dict[int, tuple[str, ...] | None] = {}
        for rule in rules:
            self._literals[id(rule)] = required_literals(rule.pattern)
            for anchor in rule.anchors:
                self._by_gate.setdefault(anchor, []).append(rule)
        # Per gate, one pattern of all its rules' literal phrases: most candidate lines hold
        # a gate word by chance ("cudaDev" in NCCL INFO) and are dropped by one search.
        self._gate_filter: dict[str, re.Pattern[str] | None] = {}
        for gate, gated in self._by_gate.items():
            phrases = [self._literals[id(rule)] for rule in gated]
            self._gate_filter[gate] = None if any(p is None for p in phrases) else \
                phrase_pattern([word for p in phrases for word in p or ()])
        self._markers = tuple(dict.fromkeys(m.lower() for m in markers))
        self._gates = tuple(dict.fromkeys([*(g.lower() for g in gates), *self._markers]))
        self._gate_bytes = tuple(gate.encode() for gate in self._gates)
        # One byte-level test for a whole candidate line before it is decoded: does it hold
        # any rule's phrase, a section marker, or an exception? (None: some rule has no
        # phrase, so every candidate line is read.)
        every = [self._literals[id(rule)] for rule in rules]
        self._line_filter = None if any(p is None for p in every) else re.compile(
            phrase_pattern([*(w for p in every for w in p or ()), *self._markers,
                            "error", "exception"]).pattern.encode())
        self.result = ScanResult()
        self._capture: Section | None = None
        self._capture_left = 0
        self._order = 0
        self._before = b""  # the last lines of the previous chunk, for looking upward
        self._memo: OrderedDict[str, list[tuple[RuleLike, str]]] = OrderedDict()

    def scan(self, document: Document) -> None:
        self.result.documents.append(document.name)
        context = DocumentContext(document.name)
        self.result.contexts.append(context)
        head = bytearray()
        tail, tail_first = b"", 1
        base, last = 1, b"\n"
        for chunk in byte_chunks(document.blocks, document.encoding):
            if self.result.blank and not chunk.isspace():
                self.result.blank = False
            self._chunk(document.name, chunk, base)
            if len(head) < HEAD_CHARS:
                head += chunk[: HEAD_CHARS - len(head)]
            tail, tail_first = _keep_tail(tail, tail_first, chunk, base)
            self._before = _last_lines(self._before + chunk)
            base += chunk.count(b"\n")
            last = chunk[-1:] or last
        self.result.lines += base - 1 + (last != b"\n")
        self._before = b""
        context.head = clean(bytes(head).decode("utf-8", "replace"))
        context.tail = clean(tail.decode("utf-8", "replace"))
        context.tail_first_line = tail_first
        self._capture = None

    # -- one chunk ---------------------------------------------------------------------

    def _chunk(self, name: str, chunk: bytes, base: int) -> None:
        low = chunk.lower()  # ASCII only, which is all the gates are
        starts: set[int] = set()
        for gate in self._gate_bytes:
            at = low.find(gate)
            while at != -1:
                start = low.rfind(b"\n", 0, at) + 1
                starts.add(start)
                end = low.find(b"\n", at)
                if end == -1:
                    break
                at = low.find(gate, end)
        if self._capture is not None:
            self._continue_capture(chunk)
        if not starts:
            return
        counted_to, line_no = 0, base
        line_filter = self._line_filter
        view: bytes | None = None
        for start in sorted(starts):
            end = low.find(b"\n", start)
            end = len(low) if end == -1 else end
            if line_filter is not None and line_filter.search(low, start, end) is None \
                    and low.find(b"\x1b", start, end) == -1:
                continue  # a gate word by chance ("cudaDev"): no phrase of any rule
            line_no += low.count(b"\n", counted_to, start)
            counted_to = start
            line = clean_line(chunk[start:end])
            if view is None:  # once per chunk: a look upward can cross the chunk's start
                view = self._before + chunk
            self._line(name, view, start + len(self._before), line, line.lower(), line_no)

    def _line(self, name: str, chunk: bytes, start: int, line: str, low: str,
              line_no: int) -> None:
        rank, text = split_rank(line)
        if self._markers and self._capture is None and \
                any(marker in low for marker in self._markers):
            self._start_capture(name, chunk, start, line_no)
        matched = self._matching(text, low)
        if not matched and _BARE_EXCEPTION.match(text):
            # "AssertionError" alone: the cause is the source line Python printed above it.
            above = _line_above(chunk, start)
            if above:
                source, up = split_rank(above[0])[1].strip(), above[1]
                joined = f"{text.strip()}: {source}"
                for rule, _ in self._matching(joined, joined.lower()):
                    self._record(rule, name, chunk, start, source, line_no - up, rank)
                    matched.append((rule, text))
        for rule, quoted in matched:
            self._record(rule, name, chunk, start, quoted, line_no, rank)
        if not matched and _EXCEPTION.match(text):
            quotes = self.result.exceptions
            quotes.append(Quote(name, line_no, redact_text(text.strip())[:MAX_QUOTE], rank))
            del quotes[:-3]

    def _matching(self, text: str, low: str) -> list[tuple[RuleLike, str]]:
        """The rules that match one (rank-stripped) line; repeated lines are remembered.

        Logs repeat the same warning or traceback line from every rank and every step;
        a bounded memo makes the thousandth copy as cheap as a dictionary lookup.
        """
        known = self._memo.get(text)
        if known is not None:
            self._memo.move_to_end(text)
            return list(known)
        found = self._match_rules(text, low)
        self._memo[text] = found
        if len(self._memo) > MEMO_LINES:
            self._memo.popitem(last=False)
        return list(found)

    def _match_rules(self, text: str, low: str) -> list[tuple[RuleLike, str]]:
        found: list[tuple[RuleLike, str]] = []
        tested: set[int] = set()
        for gate in self._gates:
            if gate not in low:
                continue
            gate_filter = self._gate_filter.get(gate)
            if gate_filter is not None and gate_filter.search(low) is None:
                continue
            for rule in self._by_gate.get(gate, ()):
                if id(rule) in tested:
                    continue
                tested.add(id(rule))
                literals = self._literals[id(rule)]
                if literals is not None and not any(map(low.__contains__, literals)):
                    continue
                if rule.pattern.search(text):
                    found.append((_read(rule, text), text))
        return found

    def _record(self, rule: RuleLike, name: str, chunk: bytes, start: int, text: str,
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
        if hits.wants(key):
            quoted = redact_text(quoted)  # logs carry tokens too: never quote one
            if len(quoted) > MAX_QUOTE:
                quoted = quoted[: MAX_QUOTE - 1] + "…"
        hits.add(rule, Quote(name, line_no, quoted, rank), key)

    # -- environment sections ------------------------------------------------------------

    def _start_capture(self, name: str, chunk: bytes, start: int, line_no: int) -> None:
        if len(self.result.sections) >= MAX_SECTIONS:
            return
        self._capture = Section(name, line_no)
        self._capture_left = SECTION_LINES
        self.result.sections.append(self._capture)
        self._continue_capture(chunk[start:])

    def _continue_capture(self, data: bytes) -> None:
        assert self._capture is not None
        taken = data.split(b"\n", self._capture_left)[: self._capture_left]
        if taken and taken[-1] == b"" and data.endswith(b"\n"):
            taken.pop()
        self._capture.lines.extend(clean_line(line[:SECTION_LINE_CHARS * 4])[:SECTION_LINE_CHARS]
                                   for line in taken)
        self._capture_left -= len(taken)
        if self._capture_left <= 0:
            self._capture = None


def _read(rule: RuleLike, text: str) -> RuleLike:
    """The rule as it applies to this line (``Rule.read``: the variant that fits it, which
    may carry its own code); a rule without variants is itself."""
    read = getattr(rule, "read", None)
    return rule if read is None else read(text)


def _lines_above(chunk: bytes, start: int, count: int) -> Iterator[str]:
    """Up to ``count`` cleaned lines above the line starting at ``start``, nearest first."""
    end = start - 1  # the newline that ends the line above
    for _ in range(count):
        if end < 0:
            return
        begin = chunk.rfind(b"\n", 0, end) + 1
        yield clean_line(chunk[begin:end])
        end = begin - 1


def _line_above(chunk: bytes, start: int) -> tuple[str, int] | None:
    """The nearest non-blank line above ``start`` in this chunk, and how many lines up."""
    for up, line in enumerate(_lines_above(chunk, start, 3), start=1):
        if line.strip():
            return line.strip(), up
    return None


def _last_lines(data: bytes, count: int = 4, limit: int = 8192) -> bytes:
    """The last few whole lines of ``data`` (bounded), kept for the next chunk."""
    at = len(data)
    for _ in range(count + 1):
        at = data.rfind(b"\n", 0, at - 1) if at > 0 else -1
        if at == -1:
            break
    return data[at + 1:][-limit:] if at != -1 else data[-limit:]


def _keep_tail(tail: bytes, first: int, chunk: bytes, base: int) -> tuple[bytes, int]:
    """The last TAIL_CHARS bytes of a document, cut at a line start, with its line number."""
    if len(chunk) >= TAIL_CHARS:
        cut = chunk.find(b"\n", len(chunk) - TAIL_CHARS) + 1 or len(chunk) - TAIL_CHARS
        return chunk[cut:], base + chunk.count(b"\n", 0, cut)
    data = tail + chunk
    first = first if tail else base
    if len(data) > TAIL_CHARS:
        cut = data.find(b"\n", len(data) - TAIL_CHARS) + 1 or len(data) - TAIL_CHARS
        first += data.count(b"\n", 0, cut)
        data = data[cut:]
    return data, first


def _summary_rank(chunk: bytes, start: int) -> str | None:
    """The rank torchrun's failure summary names a few lines above an exit code."""
    for line in _lines_above(chunk, start, 4):
        found = SUMMARY_RANK.match(line)
        if found:
            return f"rank {int(found.group(1))}"
    return None
