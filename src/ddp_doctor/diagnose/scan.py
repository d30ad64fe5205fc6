"""The streaming scan: find the lines any rule could match, and test only those rules.

Testing ~60 regular expressions on every line of a 1 GB log would take minutes. Instead:

1. one pass over each chunk (``LineGate``) picks the lines whose letters hold the letters
   of a *gate* word (the rules' shared anchor vocabulary, ``GATES``, plus the section
   markers), of an NCCL marker (``NodeLines``) or of a stack dump's start: the letters of
   a long log's noise (progress bars, numbers, tables) repeat line after line, so the
   words are searched for in a chunk's few distinct lines of letters; the gates are then
   tested exactly on a picked line not met before (``_holds_gate``);
2. a line holding a gate is kept only if it also holds one of the literal phrases some
   rule cannot match without (one prefix-tree pattern, ``literals.py``), or an exception;
3. only those lines are decoded and cleaned, and tested against the rules whose own
   phrases they hold.

Logs repeat themselves, so what a line says is remembered: per raw line, and with every
digit read as 0 for the rules a line could match, the shape of an exception, and a line
that said nothing (the same warning at step 1 and at step 2). Only the exact tests of
the few rules left are run on a line's own digits (``_read_line``). A line whose every
reading is already quoted enough is, from then on, only counted (``_tallied``): the
worst case, eight ranks repeating one warning, costs a lookup and an addition a line.

Memory stays bounded: evidence keeps a few distinct lines per code, the start and end of
each document are kept for context, the environment sections handed to the text parsers
are capped in lines and size, and the memos are capped in entries and line length.
"""

from __future__ import annotations

import re
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import not_
from typing import Any, NamedTuple, Protocol

from ddp_doctor.diagnose.line_gate import LineGate
from ddp_doctor.diagnose.literals import phrase_test, required_literals
from ddp_doctor.diagnose.node_lines import MARKERS as NODE_MARKERS
from ddp_doctor.diagnose.node_lines import NCCL_TESTS_MARKER, NodeLines
from ddp_doctor.diagnose.normalize import byte_chunks, clean, clean_line
from ddp_doctor.diagnose.rank_prefixes import SUMMARY_RANK, split_rank
from ddp_doctor.diagnose.source import Document
from ddp_doctor.forensics.stacks import STACK_MARKERS, StackText
from ddp_doctor.logrules.rule import decided
from ddp_doctor.redact.secrets import redact_text

MAX_EVIDENCE = 5  # distinct lines quoted per code
MEMO_LINES = 4096  # distinct lines whose rule matches are remembered
MEMO_LINE_BYTES = 2048  # longer lines are not remembered, so the memos stay small
MAX_QUOTE = 300  # characters of one quoted line
# The rules read a very long line's first and last READ_CHARS characters, as two lines: the
# holes of the rules' patterns make a search of a very long line slow (one 256 KB line
# repeating "cannot import name a from b; " after "ImportError: " took minutes), and a
# message sits at the start of its line (an exception, a warning) or at its end (a
# traceback escaped into a JSON record, progress frames written without their CR, a
# command list before "returned non-zero exit status -9").
READ_CHARS = 4096


def read_window(line: str) -> str:
    """LINE as the rules read it: whole, or its first and last READ_CHARS characters joined
    by a newline (no pattern's hole crosses a newline)."""
    if len(line) <= 2 * READ_CHARS:
        return line
    return f"{line[:READ_CHARS]}\n{line[-READ_CHARS:]}"
SECTION_LINES = 400  # lines captured after an environment-section marker
MAX_SECTIONS = 8
SECTION_LINE_CHARS = 2000

# A Python exception line ("KeyError: 'boxes'", "torch.cuda.OutOfMemoryError: ..."): kept
# so that a log no rule explains can at least quote what failed.
_EXCEPTION = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt)\b"
                        r"(?::\s|:?$)")
_BARE_EXCEPTION = re.compile(r"^\s*(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)\s*$")
_NCCL_PREFIX = re.compile(r"^[\w.\-]+:\d+:\d+ \[\d+\] ")


def _quote_key(text: str) -> str:
    """A quote without NCCL's host:pid:tid prefix, so the same line from two processes is one
    distinct quote. (NCCL's prefix ends in "] ": without one, there is nothing to take off.)"""
    return _NCCL_PREFIX.sub("", text) if "] " in text else text


_ZERO = bytes.maketrans(b"123456789", b"000000000")


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

    def again(self, rule: Any, rank: str | None) -> None:
        """``add`` for a line that will not be quoted: counted, its rule and rank kept."""
        self.count += 1
        if rule not in self.rules:
            self.rules.append(rule)
        if rank:
            self.ranks.add(rank)


class _Line(NamedTuple):
    """What one raw line says, apart from where it is: remembered per distinct line."""

    rank: str | None
    text: str  # without the launcher's rank prefix
    marker: bool  # holds an environment-section marker
    matched: tuple[tuple[Any, str], ...]  # (rule, text) of the rules it matches
    bare: bool  # a bare "AssertionError" whose cause is the line above
    exception: str | None  # the redacted exception line to quote, if it is one
    stripped: str  # text.strip()
    key: str  # the stripped text without NCCL's host:pid:tid prefix (distinct quotes)


_UNREAD = _Line(None, "", False, (), False, None, "", "")
"""A line not met before (None is remembered too: a line that says nothing)."""


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

    def numbered_lines(self, window: bool = True) -> list[tuple[int, str]]:
        """The numbered lines of the document's start and (past it) end, each long line by
        its window (``read_window``) unless ``window`` is False."""
        shown = read_window if window else str
        numbered = [(number, shown(line))
                    for number, line in enumerate(self.head.split("\n"), start=1)]
        last = numbered[-1][0] if numbered else 0
        numbered += [(self.tail_first_line + i, shown(line))
                     for i, line in enumerate(self.tail.split("\n"))
                     if self.tail_first_line + i > last]
        return numbered


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
    nodes: NodeLines = field(default_factory=NodeLines)  # each host's NCCL, for node_mismatch
    stacks: StackText = field(default_factory=StackText)  # pasted py-spy/faulthandler dumps


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
        self._markers = tuple(dict.fromkeys(m.lower() for m in markers))
        self._gates = tuple(dict.fromkeys([*(g.lower() for g in gates), *self._markers]))
        # Each gate as bytes: the LineGate picks lines by their letters, _holds_gate decides.
        self._gate_words = tuple(gate.encode() for gate in self._gates)
        # Where each rule is tried when its anchors are in a line: (gate, gate's index, place in
        # that gate's list), in gate order. The first anchor present decides the order in which
        # the rules of one line are reported, as the gate-by-gate walk always did.
        self._places: dict[int, tuple[tuple[str, int, int], ...]] = {}
        for index, gate in enumerate(self._gates):
            for place, rule in enumerate(self._by_gate.get(gate, ())):
                known = self._places.get(id(rule), ())
                if all(g != gate for g, _, _ in known):
                    self._places[id(rule)] = (*known, (gate, index, place))
        # The same gates and phrases with every digit read as 0, for the candidate rules of a
        # line whose only difference from one met before is a number (a step, a rank, a pid).
        self._zeroed_literals: dict[int, tuple[bytes, ...] | None] = {
            key: None if phrases is None else tuple(dict.fromkeys(_zeroed(p) for p in phrases))
            for key, phrases in self._literals.items()}
        # Per gate, its rules' distinct phrases (zeroed), the rules that spell each, and the
        # rules with no phrase: a line's candidates under a gate are found by one C loop of
        # ``in`` over the phrases (most lines hold a gate word by chance, "cudaDev" in NCCL
        # INFO, and none of its phrases), not a Python step per rule and phrase.
        self._gate_phrases: dict[str, tuple[tuple[bytes, ...], tuple[tuple[RuleLike, ...], ...],
                                            tuple[RuleLike, ...]]] = {}
        for gate, gated in self._by_gate.items():
            spelt: dict[bytes, list[RuleLike]] = {}
            free: list[RuleLike] = []
            for rule in gated:
                phrases = self._zeroed_literals[id(rule)]
                if phrases is None:
                    free.append(rule)
                for phrase in phrases or ():
                    spelt.setdefault(phrase, []).append(rule)
            self._gate_phrases[gate] = (tuple(spelt), tuple(map(tuple, spelt.values())),
                                        tuple(free))
        self._zeroed_gates = tuple((gate, _zeroed(gate)) for gate in self._gates)
        # One pass per chunk picks the lines that may hold a gate, an NCCL marker or the
        # start of a stack dump (``LineGate``); the gates are then tested exactly, and only
        # on a line not met before (``_holds_gate``).
        self._line_gate = LineGate((self._gate_words,
                                    (*NODE_MARKERS, NCCL_TESTS_MARKER), STACK_MARKERS))
        self._digit_free_gates = not any(c.isdigit() for g in self._gates for c in g)
        # One byte-level test for a whole candidate line before it is decoded: does it hold
        # any rule's phrase, a section marker, or an exception? (None: some rule has no
        # phrase, so every candidate line is read.)
        # Asked of the line with its digits read as 0 (the phrases too), so that a line it
        # drops is dropped with every line equal to it but for its numbers.
        every = [self._literals[id(rule)] for rule in rules]
        self._line_filter = None if any(p is None for p in every) else phrase_test(tuple(
            dict.fromkeys(_zeroed(w).decode("utf-8", "surrogatepass") for w in (
                *(w for p in every for w in p or ()), *self._markers, "error", "exception"))))
        self.result = ScanResult()
        self._capture: Section | None = None
        self._capture_left = 0
        self._order = 0
        self._before = b""  # the last lines of the previous chunk, for looking upward
        # The previous chunk ended on torch's "Last error:": this chunk's first line is
        # NCCL's warning (``_nccl_detail``), however the file's blocks fell.
        self._detail_next = False
        # Bounded memos of pure functions of one line; a log repeats the same warning from
        # every rank and every step, and the thousandth copy costs a dictionary lookup.
        self._read: OrderedDict[bytes, _Line | None] = OrderedDict()
        self._candidates: OrderedDict[bytes, tuple[RuleLike, ...]] = OrderedDict()
        self._shapes: OrderedDict[bytes, tuple[bool, bool]] = OrderedDict()
        self._inert: OrderedDict[bytes, None] = OrderedDict()  # raw lines, digits read as 0
        # Raw lines whose every copy is only counted (``_counted`` said so once, and says
        # so for good): the findings whose count each further copy adds one to.
        self._tallied: dict[bytes, tuple[CodeHits, ...]] = {}
        self._digit_free_markers = not any(c.isdigit() for m in self._markers for c in m)

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
            newlines = self._chunk(document.name, chunk, base)
            if len(head) < HEAD_CHARS:
                head += chunk[: HEAD_CHARS - len(head)]
            tail, tail_first = _keep_tail(tail, tail_first, chunk, base, newlines)
            self._before = _last_lines(chunk if len(chunk) > _KEEP_BYTES
                                       else (self._before + chunk)[-_KEEP_BYTES:])
            base += newlines
            last = chunk[-1:] or last
        self.result.lines += base - 1 + (last != b"\n")
        self._before = b""
        self._detail_next = False
        context.head = clean(bytes(head).decode("utf-8", "replace"))
        context.tail = clean(tail.decode("utf-8", "replace"))
        context.tail_first_line = tail_first
        self._capture = None

    # -- one chunk ---------------------------------------------------------------------

    def _chunk(self, name: str, chunk: bytes, base: int) -> int:
        """Scan one chunk of whole lines; return how many newlines it holds."""
        newlines, lines, (gated, nodes, stack_lines) = self._line_gate.select(chunk)
        if self._capture is not None:
            self._continue_capture(chunk)
        stacks = self.result.stacks
        if stacks.started or stack_lines:
            stacks.feed_chunk(chunk)  # (it looks for the dump's start itself)
        if nodes:
            self.result.nodes.feed_lines(chunk, lines, nodes)
        detail_first, self._detail_next = self._detail_next, False
        if not gated and not detail_first:
            return newlines
        if not lines:  # nothing held a gate word: the line gate did not split it
            lines = chunk.split(b"\n")
        read, inert, tallied = self._read, self._inert, self._tallied
        raws = list(map(lines.__getitem__, gated))
        # torch (2.1 and later) puts NCCL's last warning on the line after "Last error:",
        # without NCCL's "WARN": that line is read as the warning it is (``_nccl_detail``),
        # whatever the memos below decide about the "Last error:" line itself.
        details = {index + 1 for index, raw in zip(gated, raws)
                   if raw.rstrip()[-11:].lower() == b"last error:" and index + 1 < len(lines)
                   } if b"ast error:" in chunk or b"AST ERROR:" in chunk else set()
        if len(lines) - 1 in details and not lines[-1]:  # "Last error:" ended the chunk
            details.discard(len(lines) - 1)
            self._detail_next = True
        if detail_first and lines[0]:
            details.add(0)
        # In C, before the loop: the copies of lines that are only counted now, and the
        # lines equal but for their numbers to one that said nothing. (The memos may grow
        # in the loop: a line it then meets is read as before, to the same effect.)
        plans = list(map(tallied.get, raws))
        if any(plans):
            for raw, copies in Counter(compress(raws, plans)).items():
                for code_hits in tallied[raw]:
                    code_hits.count += copies
            kept = list(map(not_, plans))
            gated, raws = list(compress(gated, kept)), list(compress(raws, kept))
        if inert:
            kept = list(map(not_, map(inert.__contains__,
                                      map(bytes.translate, raws, repeat(_ZERO)))))
            gated, raws = list(compress(gated, kept)), list(compress(raws, kept))
        # (a detail line that holds a gate word is read as usual)
        details = {index for index in details if not self._holds_gate(lines[index])}
        if details:
            merged = dict(zip(gated, raws))
            merged.update((index, lines[index]) for index in details)
            gated = sorted(merged)
            raws = [merged[index] for index in gated]
        done_index, done_offset = 0, 0  # a line's index and where it starts in the chunk
        for index, raw in zip(gated, raws):
            if index in details:
                detail = self._nccl_detail(raw)
                if detail is not None:
                    done_offset += sum(map(len, lines[done_index:index])) + index - done_index
                    done_index = index
                    self._line(name, chunk, done_offset, detail, base + index)
                continue
            tally = tallied.get(raw)
            if tally is not None:  # the thousandth copy of a quoted line: counted, no more
                for code_hits in tally:
                    code_hits.count += 1
                continue
            line = read.get(raw, _UNREAD)
            if line is _UNREAD:
                shape = raw.translate(_ZERO)
                if shape in inert:
                    continue  # as a line met before but for its numbers, which said nothing
                if self._holds_gate(raw):
                    line, said_nothing = self._read_line(raw)
                else:  # its letters only looked like a gate's
                    line, said_nothing = None, self._digit_free_gates
                if len(raw) <= MEMO_LINE_BYTES:
                    read[raw] = line
                    if len(read) > MEMO_LINES:
                        read.popitem(last=False)
                    if said_nothing:
                        inert[shape] = None
                        if len(inert) > MEMO_LINES:
                            inert.popitem(last=False)
            if line is None:
                continue  # a gate word by chance ("cudaDev"), or nothing any rule reads
            line_no = base + index
            if line.rank is not None and line.matched and not line.marker and not line.bare:
                counted = self._counted(line)
                if counted:
                    if len(raw) <= MEMO_LINE_BYTES and MEMO_LINES:
                        if len(tallied) >= MEMO_LINES:
                            tallied.clear()
                        tallied[raw] = counted
                    continue
            # where the line starts: the lengths of the lines since the last one, plus
            # their newlines (summed in C, and only for the few lines that go on)
            done_offset += sum(map(len, lines[done_index:index])) + index - done_index
            done_index = index
            self._line(name, chunk, done_offset, line, line_no)
        return newlines

    def _holds_gate(self, raw: bytes) -> bool:
        """Whether a raw line holds a gate word (ASCII case ignored), as the letters-only
        ``LineGate`` cannot tell."""
        low = raw.lower()
        return any(map(low.__contains__, self._gate_words))

    def _read_line(self, raw: bytes) -> tuple[_Line | None, bool]:
        """What one raw candidate line says, apart from where it is (None: nothing), and
        whether every line equal to it but for its digits says nothing too.

        That holds when no rule could match it (decided with digits read as 0), it is no
        exception and holds no section marker: cleaning, the rank prefixes and the
        exception patterns tell digits from other characters, never one digit from another.
        Such lines (a warning with its step number) then cost one lookup each.
        """
        line_filter = self._line_filter
        if line_filter is not None:
            low = raw.lower().translate(_ZERO)
            if b"error" not in low and not line_filter(low) and b"\x1b" not in raw:
                return None, True  # (digits read as 0: so says its numbered twin)
        line = read_window(clean_line(raw))
        rank, text = split_rank(line)
        low_line = line.lower()
        marker = False
        for word in self._markers:
            if word in low_line:
                marker = True
                break
        candidates = self._candidates_of(low_line)
        matched = tuple(self._exact(candidates, text, low_line))
        stripped = text.strip()
        exception_line, bare = (False, False) if matched else self._exception_shape(text)
        if not (marker or candidates or exception_line or bare):
            return None, self._digit_free_markers
        exception = redact_text(stripped)[:MAX_QUOTE] if exception_line else None
        return _Line(rank, text, marker, matched, bare, exception, stripped,
                     _quote_key(stripped)), False

    def _nccl_detail(self, raw: bytes) -> _Line | None:
        """The line after torch's "Last error:", read as the NCCL warning it is ("NCCL WARN"
        put before it for the rules, the line quoted as it was): NCCL's messages that spell
        no gate word of their own ("socketPollConnect: Connect to ... returned ...", "NET/IB :
        Got completion from peer ...") are read after NCCL's prefix only."""
        rank, text = split_rank(read_window(clean_line(raw)))
        warning = f"NCCL WARN {text}"
        low = warning.lower()
        # NCCL's own catalogue only: what NCCL prints is what it can mean here, not the
        # hand-written readings of a whole log's NCCL lines
        nccl = tuple(rule for rule in self._candidates_of(low)
                     if getattr(rule, "catalogue", "") == "nccl")
        matched = tuple((rule, text) for rule, _ in self._exact(nccl, warning, low))
        if not matched:
            return None
        stripped = text.strip()
        return _Line(rank, text, False, matched, False, None, stripped, _quote_key(stripped))

    def _exception_shape(self, text: str) -> tuple[bool, bool]:
        """(an exception line, a bare exception name), remembered with digits read as 0.

        Neither pattern tells one digit from another, so a line that differs from one met
        before only in a number has the same shape.
        """
        if "Error" not in text and "Exception" not in text and "Interrupt" not in text:
            return False, False  # each pattern spells one of these words
        key = _zeroed(text)
        shape = self._shapes.get(key)
        if shape is None:
            shape = (_EXCEPTION.match(text) is not None,
                     _BARE_EXCEPTION.match(text) is not None)
            if len(key) <= MEMO_LINE_BYTES:
                self._shapes[key] = shape
                if len(self._shapes) > MEMO_LINES:
                    self._shapes.popitem(last=False)
        return shape

    def _counted(self, line: _Line) -> tuple[CodeHits, ...]:
        """``_line`` for a line every reading of which is already a finding that quotes it
        (or quotes enough): each is counted with the line's rank, as ``_record`` would, and
        the findings counted are returned. Empty, having changed nothing, when some reading
        would quote the line or start a finding. Once not empty for a line, never empty
        again for it: a finding is never removed and only gains quotes, so the scan then
        counts the line's further copies without reading them (``_tallied``)."""
        hits = self.result.hits
        found: list[tuple[Any, CodeHits]] = []
        for rule, quoted in line.matched:
            code_hits = hits.get(rule.code.id)
            if code_hits is None or quoted != line.text or code_hits.wants(line.key):
                return ()
            found.append((rule, code_hits))
        for rule, code_hits in found:
            code_hits.again(rule, line.rank)
        return tuple(code_hits for _, code_hits in found)

    def _line(self, name: str, chunk: bytes, start: int, line: _Line, line_no: int) -> None:
        rank, text = line.rank, line.text
        if line.marker and self._capture is None:
            self._start_capture(name, chunk, start, line_no)
        matched = list(line.matched)
        if line.bare:
            # "AssertionError" alone: the cause is the source line Python printed above it.
            above = _line_above(chunk, start, self._before)
            if above:
                source, up = split_rank(above[0])[1].strip(), above[1]
                joined = f"{text.strip()}: {source}"
                for rule, _ in self._match_rules(joined, joined.lower()):
                    self._record(rule, name, chunk, start, source, line_no - up, rank)
                    matched.append((rule, text))
        for rule, quoted in matched:
            if quoted == text:
                self._record(rule, name, chunk, start, quoted, line_no, rank,
                             line.stripped, line.key)
            else:
                self._record(rule, name, chunk, start, quoted, line_no, rank)
        if not matched and line.exception is not None:
            quotes = self.result.exceptions
            quotes.append(Quote(name, line_no, line.exception, rank))
            del quotes[:-3]

    def _match_rules(self, text: str, low: str) -> list[tuple[RuleLike, str]]:
        """Every rule whose anchor and phrase are in ``low`` and whose pattern is in ``text``."""
        return self._exact(self._candidates_of(low), text, low)

    def _candidates_of(self, low: str) -> tuple[RuleLike, ...]:
        """The rules that could match a line, decided on the line with its digits read as 0
        and remembered: step 1 and step 2 of one warning ask the same rules."""
        key = _zeroed(low)
        candidates = self._candidates.get(key)
        if candidates is None:
            candidates = self._candidates_by_key(key)
            if len(key) <= MEMO_LINE_BYTES:
                self._candidates[key] = candidates
                if len(self._candidates) > MEMO_LINES:
                    self._candidates.popitem(last=False)
        return candidates

    def _exact(self, candidates: tuple[RuleLike, ...], text: str, low: str
               ) -> list[tuple[RuleLike, str]]:
        """The candidates that match, each tested exactly, in the order of a walk gate by
        gate: by the first of a rule's anchors present, then by its place among that
        gate's rules."""
        if not candidates:
            return []
        found: list[tuple[tuple[int, int], RuleLike]] = []
        for rule in candidates:
            first = next(((index, place) for gate, index, place in self._places[id(rule)]
                          if gate in low), None)
            if first is None:
                continue
            literals = self._literals[id(rule)]
            if literals is not None and not any(map(low.__contains__, literals)):
                continue
            if rule.pattern.search(text):
                found.append((first, rule))
        found.sort(key=lambda pair: pair[0])
        # a hand-written rule decides its line; a catalogue entry fills one none reads
        return [(_read(rule, text), text) for rule in decided([rule for _, rule in found])]

    def _candidates_by_key(self, key: bytes) -> tuple[RuleLike, ...]:
        """The rules a line could match, from the line with its digits read as 0.

        Reading every digit as 0 keeps every phrase of the line a phrase of the key, so no
        rule that can match is left out; a few that cannot are let through and then fail
        the exact test.
        """
        found: dict[int, RuleLike] = {}  # (the order is the exact test's to decide)
        for gate, zeroed in self._zeroed_gates:
            if zeroed not in key or gate not in self._gate_phrases:
                continue
            phrases, spelling, free = self._gate_phrases[gate]
            for rule in free:
                found.setdefault(id(rule), rule)
            for rules in compress(spelling, map(key.__contains__, phrases)):
                for rule in rules:
                    found.setdefault(id(rule), rule)
        return tuple(found.values())

    def _record(self, rule: RuleLike, name: str, chunk: bytes, start: int, text: str,
                line_no: int, rank: str | None, quoted: str | None = None,
                key: str | None = None) -> None:
        if rank is None:
            rank = _summary_rank(chunk, start, self._before)
        code_id = rule.code.id
        hits = self.result.hits.get(code_id)
        if hits is None:
            self._order += 1
            hits = self.result.hits[code_id] = CodeHits(rule.code, order=self._order)
        if quoted is None or key is None:
            quoted = text.strip()
            key = _quote_key(quoted)
        if hits.wants(key):
            quoted = redact_text(quoted)  # logs carry tokens too: never quote one
            if len(quoted) > MAX_QUOTE:
                quoted = quoted[: MAX_QUOTE - 1] + "…"
            hits.add(rule, Quote(name, line_no, quoted, rank), key)
        else:
            hits.again(rule, rank)

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


def _lines_above(chunk: bytes, start: int, count: int, before: bytes = b"") -> Iterator[str]:
    """Up to ``count`` cleaned lines above the line starting at ``start``, nearest first.

    ``before`` holds the last lines of the previous chunk: the walk goes on into them once
    it reaches the chunk's first line (joining the two only then, which is rare).
    """
    end = start - 1  # the newline that ends the line above
    for _ in range(count):
        begin = chunk.rfind(b"\n", 0, end) + 1 if end >= 0 else 0
        if begin == 0 and before:
            chunk, end, before = before + chunk, end + len(before), b""
            begin = chunk.rfind(b"\n", 0, end) + 1 if end >= 0 else 0
        if end < 0:
            return
        yield clean_line(chunk[begin:end])
        end = begin - 1


def _line_above(chunk: bytes, start: int, before: bytes = b"") -> tuple[str, int] | None:
    """The nearest non-blank line above ``start``, and how many lines up."""
    for up, line in enumerate(_lines_above(chunk, start, 3, before), start=1):
        if line.strip():
            return line.strip(), up
    return None


def _last_lines(data: bytes, count: int = 4, limit: int = 8192) -> bytes:
    """The last few whole lines of ``data`` (bounded), kept for the next chunk.

    Only the last ``limit + 1`` bytes of ``data`` decide the result (``_KEEP_BYTES``).
    """
    at = len(data)
    for _ in range(count + 1):
        at = data.rfind(b"\n", 0, at - 1) if at > 0 else -1
        if at == -1:
            break
    return data[at + 1:][-limit:] if at != -1 else data[-limit:]


_KEEP_BYTES = 8192 + 1


def _keep_tail(tail: bytes, first: int, chunk: bytes, base: int, newlines: int
               ) -> tuple[bytes, int]:
    """The last TAIL_CHARS bytes of a document, cut at a line start, with its line number.

    ``newlines`` is the chunk's count of newlines, so only its end is counted again.
    """
    if len(chunk) >= TAIL_CHARS:
        cut = chunk.find(b"\n", len(chunk) - TAIL_CHARS) + 1 or len(chunk) - TAIL_CHARS
        return chunk[cut:], base + newlines - chunk.count(b"\n", cut)
    data = tail + chunk
    first = first if tail else base
    if len(data) > TAIL_CHARS:
        cut = data.find(b"\n", len(data) - TAIL_CHARS) + 1 or len(data) - TAIL_CHARS
        first += data.count(b"\n", 0, cut)
        data = data[cut:]
    return data, first


def _summary_rank(chunk: bytes, start: int, before: bytes = b"") -> str | None:
    """The rank torchrun's failure summary names a few lines above an exit code."""
    for line in _lines_above(chunk, start, 4, before):
        found = SUMMARY_RANK.match(line)
        if found:
            return f"rank {int(found.group(1))}"
    return None


def _zeroed(text: str) -> bytes:
    """``text`` as UTF-8 with every ASCII digit read as 0.

    A per-character substitution keeps every substring a substring, so a phrase of a
    line, zeroed, is a phrase of the zeroed line.
    """
    return text.encode("utf-8", "surrogatepass").translate(_ZERO)
