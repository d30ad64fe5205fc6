"""Solved threads whose errors look like this log's: "this looks like #1234", with the link.

The rules say what an error means; a reader also wants to see where someone met the same
error and what fixed it. The corpus of real logs (tests/data/logs) is shipped as a compact
index, ``knowledge/solved_threads.json``: for each solved thread its link, title, category,
root cause, the fix that worked and its *normalised error lines* (numbers, hex addresses,
paths, hosts and rank prefixes removed, so that two users' copies of one error read the
same). Retrieval is lexical: TF-IDF cosine over the words of those lines, which also gives
a bounded similarity (0 to 1) that a threshold can be set on, unlike a raw BM25 score.

Which lines count as errors: every line of the start and the end of each document that the
scan kept for context (``scan.DocumentContext``, the whole of a short log) holding an error
word (``_ERROR_PHRASES``), plus the lines the rules matched and the exception lines that fall
outside those parts of a long log. Lines inside them are taken from the text alone, so the
index of the (short) corpus logs does not change when a rule does.

The index is read on first use only (``load_index``), so ``diagnose`` on a log pays nothing
for it before the end, and a query costs well under a millisecond over a few hundred
threads (bench/similar_precision.py measures both).

``similar_build.py`` makes the index from the corpus (and a test checks the shipped one is
a fresh build); nothing here reads the repository's tests/ at run time.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.diagnose.literals import phrase_pattern
from ddp_doctor.diagnose.rank_prefixes import split_rank
from ddp_doctor.diagnose.scan import ScanResult
from ddp_doctor.model import Evidence, Family, Finding, Severity, Step

INDEX_PACKAGE, INDEX_FILE = "ddp_doctor.knowledge", "solved_threads.json"
INDEX_FORMAT = 1
TOP = 3  # threads listed per diagnosis
# Below this, the nearest thread of a corpus log (leave-one-out) shared its category in 2
# of 10 cases, against 139 of 198 above: such a thread is noise, not context.
MIN_SIMILARITY = 0.15
MAX_LINES = 40  # distinct normalised error lines kept per log
MAX_LINE_CHARS = 240
MAX_TITLE_CHARS = 120

SIMILAR_THREADS = declare(
    "DIAG008", Category.UNKNOWN, "Solved threads with similar errors",
    what="The public threads of the shipped corpus whose error lines are most like this "
         "log's (lexical similarity, 0 to 1), each with its category, link and the fix that "
         "worked there.",
    why="Context, not a cause: a thread with the same error shows how it was established "
        "and what fixed it, but two logs can share words and differ in cause.",
    fix="Read the most similar thread; apply its fix only where the finding above it (the "
        "log's own diagnosis) agrees.",
    severity=Severity.INFO)

SUGGESTED_CATEGORY = declare(
    "DIAG009", Category.UNKNOWN,
    "Low confidence: no rule matched, but the most similar solved threads agree on a category",
    what="No log rule matched (DIAG001), and the solved threads whose error lines are most "
         "like this log's share one root-cause category. That category is a lead to check, "
         "not a diagnosis.",
    why="Similar words are weaker evidence than a rule: two logs can share an error message "
        "and differ in cause, which is why it is made only when the closest threads agree.",
    fix="Read the threads listed with DIAG008 and test the suggested category's usual cause "
        "(`ddp-doctor explain` on a code of that category) before acting on it.",
    severity=Severity.INFO)

# The suggestion is made only when the closest thread is this similar and at least this
# many of the top threads share its category. Picked on the training cases that end as
# DIAG001, leave-one-out, as the pair with the most right minus wrong suggestions (a wrong
# one misleads as much as a right one helps), ties to the stricter threshold
# (bench/similar_precision.py); never on the blind split.
SUGGEST_MIN_SIMILARITY = 0.4
SUGGEST_AGREEING = 3

# Lines worth comparing: what the engine treats as errors (rule phrases, exception lines)
# and the words that announce a failure in the text of any tool.
_ERROR_PHRASES = (
    "error", "exception", "fail", "fatal", "abort", "warn", "denied", "refused", "timeout",
    "timed out", "time out", "times out", "cannot", "can't", "could not", "couldn't",
    "unable", "not found", "no such", "no space", "invalid", "illegal", "unhandled",
    "unavailable", "killed", "signal", "segmentation", "core dumped", "mismatch",
    "incompatible", "not supported", "unsupported", "no module", "out of memory", "assert",
    "undefined symbol", "not available")
# ... plus whole words only, and NCCL's error return chain ("misc/socket.cc:567 -> 2")
_GATE_BYTES = tuple(g.encode() for g in (*_ERROR_PHRASES, "oom", "nan", " -> "))
_ERROR_TEXT = re.compile(phrase_pattern(list(_ERROR_PHRASES)).pattern
                         + r"|\b(?:oom|nan)\b|\.cc?:\d+ -> \d+")

# -- normalisation ----------------------------------------------------------------------

NCCL_PREFIX = re.compile(r"^[\w.\-]+:\d+:\d+ \[\d+\] ")
# syslog's "Jan 10 12:00:01 host " (journalctl output pasted from a service's log)
_SYSLOG_PREFIX = re.compile(r"^[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d \S+ ")
_URL = re.compile(r"\b[a-z][\w+.-]*://\S+", re.IGNORECASE)
_USER_HOST = re.compile(r"\b[\w.-]+@[\w.-]+")
_DOMAIN = re.compile(r"\b(?:[\w-]+\.)+(?:com|net|org|io|edu|local|internal|lan|cluster)\b",
                     re.IGNORECASE)
# a machine's name after "host"/"node": "to host slinky-0:29400", "hostname=gpu-a12"
# (only a name with a digit or a hyphen, so "host memory" keeps its word)
_NAMED_HOST = re.compile(r"\b(host(?:name)?|node)([ =:]+)(?=[\w.-]*[\d-])[A-Za-z][\w.-]*",
                         re.IGNORECASE)
_IP = re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b")
_HEX = re.compile(r"\b0x[0-9a-f]+\b|\b(?=[0-9a-f-]*\d)(?=[0-9a-f-]*[a-f])[0-9a-f]{8,}"
                  r"(?:-[0-9a-f]{4,})*\b", re.IGNORECASE)
# A path of two or more parts (POSIX or Windows); system places keep their name.
_PATH = re.compile(r"(?:\b[A-Za-z]:)?(?:[\\/][^\s\\/:'\"()\[\]{},;]+){2,}[\\/]?")
_SYSTEM_PATH = re.compile(r"^/(?:dev|proc|sys|etc)/")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_SPACE = re.compile(r"\s+")
_PLACEHOLDER = re.compile(r"<(?:n|hex|ip|url|host|path)>")
_WORD = re.compile(r"[a-z][a-z0-9_]*")
_STOP = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "do", "for", "from",
    "has", "have", "if", "in", "into", "is", "it", "its", "no", "not", "of", "on", "or", "so",
    "than", "that", "the", "their", "then", "there", "these", "this", "to", "was", "were",
    "will", "with", "you", "your", "please", "see", "more", "set", "use", "using"})


def _path(found: re.Match[str]) -> str:
    text = found.group(0)
    if _SYSTEM_PATH.match(text):
        return text
    base = re.split(r"[\\/]", text.rstrip("\\/"))[-1]
    return f"<path>/{base}"


def normalize_line(line: str) -> str:
    """One log line reduced to what two users' copies of the same error share.

    Rank, NCCL and syslog prefixes go first, then links, host names, IP addresses, hex
    numbers and hashes, paths (their last part stays: ``socket.cc``, ``libcuda.so`` say
    something), and every other number.
    """
    text = split_rank(line.strip())[1].strip()
    text = _SYSLOG_PREFIX.sub("", NCCL_PREFIX.sub("", text))
    text = _URL.sub("<url>", text)
    text = _USER_HOST.sub("<host>", text)
    text = _DOMAIN.sub("<host>", text)
    text = _NAMED_HOST.sub(r"\1\2<host>", text)
    text = _IP.sub("<ip>", text)
    text = _HEX.sub("<hex>", text)
    text = _PATH.sub(_path, text)
    text = _NUMBER.sub("<n>", text)
    return _SPACE.sub(" ", text).strip()[:MAX_LINE_CHARS]


def terms(lines: Iterable[str]) -> Counter[str]:
    """The words of normalised lines, lowered (placeholders and common words dropped).

    Single words: adding adjacent word pairs ranked no better on the corpus (leave-one-out,
    bench/similar_precision.py), and the words of an error message are specific enough.
    """
    found: Counter[str] = Counter()
    for line in lines:
        found.update(w for w in _WORD.findall(_PLACEHOLDER.sub(" ", line.lower()))
                     if len(w) > 1 and w not in _STOP)
    return found


# A report's reading of zero, "Uncorrectable Error : 0" or "Remapping Failure Occurred : No"
# in nvidia-smi -q, and its section titles ("ECC Errors"): error words that say no error.
# A healthy H200's nvidia-smi -q, diagnosed, found three ECC threads through these lines
# and suggested hardware_fault.
_ZERO_READING = re.compile(
    r"^\s*[A-Za-z][\w ./()-]*?\s:\s*(?:0|no|none|n/a|not active|disabled|false)\s*$",
    re.IGNORECASE)
_SECTION_TITLE = re.compile(r"^\s*(?:[A-Z][\w-]* ){0,3}Errors\s*$")


def is_error_line(line: str) -> bool:
    """Whether a raw log line holds an error word (``_ERROR_TEXT``) that reports an error:
    a report's zero reading of an error counter does not (``_ZERO_READING``)."""
    return (_ERROR_TEXT.search(line.lower()) is not None
            and not _ZERO_READING.match(line) and not _SECTION_TITLE.match(line))


def _text_lines(text: str, errors_only: bool, skip: int = 0) -> list[str]:
    """The lines of ``text`` after its first ``skip``: those with an error word, or all.

    As in the scan, each gate word is found in the whole text with ``bytes.find`` on its
    ASCII-lowered UTF-8 (memory speed) and only the lines holding one are decoded and tested
    with ``is_error_line``: a regular expression, or ``str.find``, over the 320 KB a long
    log keeps costs tens of milliseconds.
    """
    at = 0
    for _ in range(skip):
        at = text.find("\n", at) + 1
        if at == 0:
            return []
    if not errors_only:
        return text[at:].split("\n")
    data = text[at:].encode("utf-8", "replace")
    low = data.lower()  # ASCII only, which is all the gates are
    starts: set[int] = set()
    for gate in _GATE_BYTES:
        at = low.find(gate)
        while at != -1:
            starts.add(low.rfind(b"\n", 0, at) + 1)
            end = low.find(b"\n", at)
            at = -1 if end == -1 else low.find(gate, end)
    found: list[str] = []
    for start in sorted(starts):
        end = data.find(b"\n", start)
        line = (data[start:] if end == -1 else data[start:end]).decode("utf-8", "replace")
        if is_error_line(line):
            found.append(line)
    return found


def _capped(lines: list[str]) -> list[str]:
    """Distinct lines; a long list keeps its start and its end, where causes are."""
    distinct = list(dict.fromkeys(line for line in lines if line))
    if len(distinct) <= MAX_LINES:
        return distinct
    half = MAX_LINES // 2
    return distinct[:half] + distinct[-half:]


# torchrun's summary of failed ranks: the same lines under every failure it reports, so they
# say nothing about which failure it was (and made summary-only logs find each other).
# A traceback's frame lines say where, not what ("File .../elastic/.../errors/__init__.py"
# holds an error word in its path), and a launcher terminated by a signal (torchrun's
# SignalException, raised when the job is stopped from outside) says only that it was
# stopped: a hung job's traceback drew host-OOM and WSL threads through them.
_BOILERPLATE = re.compile(
    r"(?:failures:|error_file:|traceback\s*: to enable traceback|failures=result\.failures|"
    r"\S+ failed$|torch\.distributed\.elastic\.multiprocessing\.errors\.childfailederror:?$|"
    r"root cause \(first observed failure\):|file \"|"
    r"(?:torch\.distributed\.elastic\.multiprocessing\.api\.)?signalexception: process "
    r"<n> got signal: <n>|raise signalexception|"
    # ...and torchrun shutting its workers down because it was told to (the lines and the
    # code lines of that path, which carry "signal" and "timeout" in their names).
    r".*received <n> death signal, shutting down workers|"
    r".*sending process <n> closing signal sig\w+|"
    r"during handling of the above exception, another exception occurred|"
    r".*\b(?:death_sig|sigval|_shutdown_timeout)\b)", re.IGNORECASE)


def error_lines(scan: ScanResult, every_line_if_none: bool = False) -> list[str]:
    """The normalised error lines of a scanned input, in the order the input shows them.

    ``every_line_if_none`` is for the index: a corpus log with no error word at all
    (``torch.cuda.is_available()`` printing ``False``, a job that hangs after NCCL's setup
    lines) is described by all of its lines, as they are all its thread showed. A query
    never is: the lines of a package list or a healthy run would find threads by chance.
    """
    found = _capped([n for n in _normalized(_raw_lines(scan, errors_only=True))
                     if not _BOILERPLATE.match(n)])
    if found or not every_line_if_none:
        return found
    return _capped(_normalized(_raw_lines(scan, errors_only=False)))


def _normalized(lines: list[str]) -> list[str]:
    """``normalize_line`` of each line, each distinct line normalised once: a log's start
    repeats the same warning from every rank, and ten substitutions a line add up."""
    done: dict[str, str] = {}
    return [done[line] if line in done else done.setdefault(line, normalize_line(line))
            for line in lines]


def _raw_lines(scan: ScanResult, errors_only: bool) -> list[str]:
    raw: list[str] = []
    quotes = [q for hits in scan.hits.values() for q in hits.quotes] + scan.exceptions
    for context in scan.contexts:
        raw += _text_lines(context.head, errors_only)
        covered = context.head.count("\n") + 1
        raw += [q.text for q in sorted(quotes, key=lambda q: q.line)
                if q.document == context.document and covered < q.line < context.tail_first_line]
        skip = max(0, covered - context.tail_first_line + 1)  # the tail overlaps the head
        raw += _text_lines(context.tail, errors_only, skip)
    return raw


# -- the index --------------------------------------------------------------------------


@dataclass(frozen=True)
class SolvedThread:
    """One case of the corpus as the index ships it."""

    url: str
    title: str
    title_source: str  # "thread": its own title; "log": a line of its log (no title recorded)
    category: str
    root_cause: str
    fix: str
    lines: tuple[str, ...]
    # False where the log has no error line of its own and ``lines`` are all its lines
    # (``error_lines(..., every_line_if_none=True)``): diagnose would find no error line in
    # it, so the fallback's calibration does not count it as a query
    has_error_lines: bool = True

    @property
    def label(self) -> str:
        """How a reader sees it: the title, or the quoted log line marked as such."""
        return self.title if self.title_source == "thread" else f'"{self.title}" (from its log)'

    def to_dict(self) -> dict[str, Any]:
        """As shipped; ``fix`` is left out where it is the root cause (no fix recorded)."""
        fix = {} if self.fix == self.root_cause else {"fix": self.fix}
        return {"url": self.url, "title": self.title, "title_source": self.title_source,
                "category": self.category, "root_cause": self.root_cause, **fix,
                "lines": list(self.lines),
                **({} if self.has_error_lines else {"has_error_lines": False})}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SolvedThread:
        return cls(url=data["url"], title=data["title"], title_source=data["title_source"],
                   category=data["category"], root_cause=data["root_cause"],
                   fix=data.get("fix") or data["root_cause"], lines=tuple(data["lines"]),
                   has_error_lines=data.get("has_error_lines", True) is not False)


@dataclass(frozen=True)
class Match:
    """A thread and how similar its error lines are to the query's (cosine, 0 to 1)."""

    thread: SolvedThread
    score: float


class SimilarIndex:
    """TF-IDF vectors of the threads' error lines, searched through an inverted index."""

    def __init__(self, threads: Sequence[SolvedThread]) -> None:
        self.threads = tuple(threads)
        counts = [terms(t.lines) for t in self.threads]
        df: Counter[str] = Counter()
        for count in counts:
            df.update(count.keys())
        n = len(self.threads)
        self._idf = {term: math.log(1 + n / d) for term, d in df.items()}
        self._postings: dict[str, list[tuple[int, float]]] = {}
        for i, count in enumerate(counts):
            for term, weight in self._unit(count).items():
                self._postings.setdefault(term, []).append((i, weight))

    def __len__(self) -> int:
        return len(self.threads)

    def _unit(self, count: Counter[str]) -> dict[str, float]:
        """Sub-linear TF times IDF, scaled to length 1 (terms the index lacks weigh 0)."""
        weights = {t: (1 + math.log(c)) * self._idf[t] for t, c in count.items()
                   if t in self._idf}
        norm = math.sqrt(sum(w * w for w in weights.values()))
        return {t: w / norm for t, w in weights.items()} if norm else {}

    def query(self, lines: Sequence[str], top: int = TOP, exclude: str | None = None,
              minimum: float = MIN_SIMILARITY) -> list[Match]:
        """The ``top`` threads most like these normalised lines, best first.

        ``exclude`` leaves out the thread with that URL (a corpus log's own thread, for
        leave-one-out measurement). Ties keep the index's order, so results are stable.
        """
        scores: dict[int, float] = {}
        for term, weight in self._unit(terms(lines)).items():
            for i, doc_weight in self._postings.get(term, ()):
                scores[i] = scores.get(i, 0.0) + weight * doc_weight
        ranked = sorted((i for i, s in scores.items() if s >= minimum
                         and self.threads[i].url != exclude), key=lambda i: (-scores[i], i))
        return [Match(self.threads[i], round(scores[i], 4)) for i in ranked[:top]]


@lru_cache(maxsize=1)
def load_index() -> SimilarIndex:
    """The shipped index, read once (package data; never the repository's tests/)."""
    from importlib.resources import files

    data = json.loads(files(INDEX_PACKAGE).joinpath(INDEX_FILE).read_text(encoding="utf-8"))
    return SimilarIndex([SolvedThread.from_dict(t) for t in data["threads"]])


# -- the finding ------------------------------------------------------------------------


def similar_finding(matches: Sequence[Match]) -> Finding | None:
    """The INFO finding listing the matches (title - category - URL), fixes as steps."""
    if not matches:
        return None
    evidence = tuple(Evidence(f"similar thread ({m.score:.2f})",
                              f"{m.thread.label} - {m.thread.category} - {m.thread.url}")
                     for m in matches)
    steps = tuple(Step(f"What fixed it there ({m.thread.category}): {m.thread.fix}",
                       url=m.thread.url) for m in matches)
    many = "s" if len(matches) != 1 else ""
    title = (f"{len(matches)} solved thread{many} with similar errors (context, not a "
             f"cause); the closest was {matches[0].thread.category}")
    return Finding(SIMILAR_THREADS, title, evidence=evidence, remediation=steps)


def suggested_category(matches: Sequence[Match]) -> str | None:
    """The category the closest threads agree on, when they agree enough to say it."""
    if not matches or matches[0].score < SUGGEST_MIN_SIMILARITY:
        return None
    category = matches[0].thread.category
    agreeing = sum(1 for m in matches if m.thread.category == category)
    if category == Category.UNKNOWN.value or agreeing < SUGGEST_AGREEING:
        return None
    return category


def suggestion_finding(matches: Sequence[Match]) -> Finding | None:
    """The LOW-CONFIDENCE finding for a log no rule explained, or None."""
    category = suggested_category(matches)
    if category is None:
        return None
    agreeing = [m for m in matches if m.thread.category == category]
    evidence = tuple(Evidence("similar thread", f"{m.thread.url} ({m.score:.2f}): "
                                                f"{m.thread.root_cause}") for m in agreeing)
    return Finding(SUGGESTED_CATEGORY,
                   f"LOW CONFIDENCE: no rule matched; the most similar solved threads were "
                   f"{category} ({len(agreeing)} of {len(matches)})",
                   evidence=evidence,
                   remediation=(Step(f"Check whether this is {category}: see "
                                     f"docs/categories.md and the threads' fixes under "
                                     f"{SIMILAR_THREADS.id}."),))


def similar_threads(scan: ScanResult, index: SimilarIndex | None = None) -> list[Match]:
    """The threads most like a scanned input's error lines (none when it shows no error)."""
    lines = error_lines(scan)
    if not lines:
        return []
    return (index or load_index()).query(lines)


def similar_findings(scan: ScanResult, findings: Sequence[Finding],
                     index: SimilarIndex | None = None) -> list[Finding]:
    """What a diagnosis appends after its own findings: never first, so never the lead.

    Only for a diagnosis of a failing log: some finding came from the log (a ``LOG`` or
    ``DIAG`` code, DIAG001 included) or the text holds a Python exception. Not for a
    bundle whose findings all come from its facts, where the only text is ddp-doctor's own
    listing of the environment. Nothing either when the input shows no error line, or when
    the shipped index cannot be read (a broken install must not break the diagnosis).
    """
    from_log = any(f.code.family in (Family.LOG, Family.DIAGNOSE) for f in findings)
    if not findings or not (from_log or scan.exceptions):
        return []
    try:
        matches = similar_threads(scan, index)
    except (OSError, ValueError, KeyError):
        return []
    out: list[Finding] = []
    if findings[0].code.id == "DIAG001":
        out += [f for f in (suggestion_finding(matches),) if f is not None]
    out += [f for f in (similar_finding(matches),) if f is not None]
    return out
