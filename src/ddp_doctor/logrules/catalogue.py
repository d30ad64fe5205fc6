"""Message catalogues: what upstream programs print, read from their source, as log rules.

The hand-written rules of this package were written from the logs users pasted; they are
right on the threads they were written from and miss messages nobody pasted yet. Every
message a training job can print comes from a finite set of programs whose source is
public (NCCL, the CUDA runtime, torch, the dynamic loader, NumPy, the kernel), so each of
``catalogues/*.toml`` lists one program's messages, read at a named version, with the code
each one maps to. This module turns every entry into a ``Rule`` the streaming scan runs
like any other: adding a message is adding an entry, never an engine edit.

A file names its source and holds entries::

    [source]
    name = "nccl"                                  # the catalogue's name (its file's stem)
    repository = "https://github.com/NVIDIA/nccl"
    version = "v2.23.4-1"                          # tag or commit the messages were read at
    paths = ["src/transport/p2p.cc", ...]
    prefix = "NCCL WARN "                          # optional: how a template without a gate
                                                   # word is printed (see below)
    context = ["warn"]                             # optional: the gate words read before such
                                                   # a template (default: the prefix's)
    [[entry]]
    template = "Cuda failure '%s'"                 # or templates = [...] (older wordings)
    code = "LOG003"                                # an existing LOG code, or one declared in
    category = "cuda_init_failure"                 # catalogue_codes.py; checked against it
    fix = "..."                                    # own words; command = "..." optional
    alternatives = ["nccl_p2p: ..."]               # optional, where the category is ambiguous,
    decide = "..."                                 # with what tells them apart (decide_command)
    real = [{ line = "...", url = "https://github.com/.../issues/N" }]   # optional
    near_misses = ["..."]                          # optional: lines that must not match
    unless = ["Ignoring this choice"]              # optional: phrases that, on the same line,
                                                   # make the message harmless (not read)

A *template* is the format string as printed: printf conversions (``%s``, ``%d``,
``%zu``...) and ``{...}`` fields are placeholders; ``%%`` is a percent sign. It is matched
tolerantly across versions: a placeholder matches any text on the line, blanks beside
punctuation and runs of blanks match any whitespace (a single blank between two words
stays one blank, so the words form one phrase for the scan's filter), quotes are optional
and of any kind (``'``, ``"``, backquotes, curly quotes), case is ignored, and a final full
stop is optional. A message of several sentences is also read by its first sentence alone
when that spells at least ``HEAD_CHARS`` literal characters (wrapped, truncated or quoted in
part), unless one of the entry's near misses holds that sentence.

Speed: the scan tries a rule only on lines holding one of its *anchors* (the gate words of
``rule.GATES``), and only when the line holds a literal phrase the pattern cannot match
without (``diagnose/literals.py``). The anchors of an entry are the gate words its template
spells. A template that spells none (CUDA's "an illegal memory access was encountered")
is matched only after one of the gate words of its source's ``prefix`` earlier on the line
(``RuntimeError: CUDA error: ...``, ``NCCL WARN Cuda failure '...'``), so it is gated
like every other rule; ``context`` narrows those words where the prefix's are too common
(CUDA's "operation not supported" must follow "cuda", not any "error": ``OSError: [Errno
95] Operation not supported`` is a file system's answer).

Precedence: a hand-written rule that reads a line decides it (``rule.decided``); an entry
fills the lines no hand-written rule reads, and of several entries that match one line the
most specific (the most literal characters) is the reading.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ddp_doctor.categories import Category
from ddp_doctor.logrules.rule import GATES, Explains, ReadAs, Relation, Rule, rx
from ddp_doctor.model import Code, Step

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python < 3.11 only
    import tomli as tomllib

CATALOGUE_DIR = Path(__file__).resolve().parent / "catalogues"
SOURCE_KEYS = frozenset({"name", "repository", "version", "paths", "prefix", "context", "url",
                         "notes", "bare"})
ENTRY_KEYS = frozenset({"template", "templates", "code", "category", "fix", "command",
                        "alternatives", "decide", "decide_command", "real", "near_misses",
                        "symbol", "path", "prefix", "context", "symptom_of", "explains",
                        "read_as", "unless"})

# A printf conversion (flags, width, precision, length, type) or a {...} format field.
_PLACEHOLDER = re.compile(r"%[-+ #0]*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|z|j|t|L|q)?"
                          r"[diouxXeEfgGcspn]|\{[^{}]*\}")
_QUOTES = "'\"`‘’“”"  # the curly quotes too: copied from web pages and rendered docs
_QUOTE_CLASS = "['\"`‘’“”]?"
# What a placeholder stands for in the lines made from a template (its generated example).
_SAMPLE = {"d": "3", "i": "3", "u": "3", "o": "7", "x": "1f", "X": "1F", "e": "1.5e+00",
           "E": "1.5E+00", "f": "1.50", "g": "1.5", "G": "1.5", "c": "c", "p": "0x7f3a2c",
           "n": "", "s": "sample"}


class CatalogueError(ValueError):
    """A catalogue file that cannot be used; the message names the file and the entry."""


@dataclass(frozen=True)
class Source:
    """Where one catalogue's messages were read."""

    name: str
    repository: str
    version: str
    paths: tuple[str, ...]
    prefix: str
    url: str
    context: tuple[str, ...] = ()
    # False where the prefix is what the message means (NCCL prints some of its messages as
    # WARN in one release and INFO in another): its templates are never read bare
    bare: bool = True


@dataclass(frozen=True)
class Entry:
    """One message of a catalogue, as written in the file."""

    source: Source
    templates: tuple[str, ...]
    code: Code
    fix: str
    command: str | None
    alternatives: tuple[str, ...]
    decide: str | None
    decide_command: str | None
    real: tuple[tuple[str, str], ...]  # (line, url)
    near_misses: tuple[str, ...]
    prefix: str
    symptom_of: tuple[str, ...]
    symbol: str | None
    context: tuple[str, ...] = ()
    relations: tuple[Relation, ...] = ()  # ``[[entry.explains]]``, ``[[entry.read_as]]``
    unless: tuple[str, ...] = ()  # phrases that make the same message harmless on its line


def _pieces(template: str) -> list[tuple[str, str]]:
    """The template as ("text", literal) and ("hole", spec) pieces, ``%%`` read as ``%``."""
    pieces: list[tuple[str, str]] = []
    at = 0
    for found in _PLACEHOLDER.finditer(template.replace("%%", "\0\0")):
        if found.start() > at:
            pieces.append(("text", template[at:found.start()]))
        pieces.append(("hole", found.group()))
        at = found.end()
    if at < len(template):
        pieces.append(("text", template[at:]))
    return [(kind, text.replace("%%", "%")) for kind, text in pieces]


@cache  # each template is read for its regex, gates, length and sample
def _core(template: str) -> tuple[tuple[str, str], ...]:
    """The pieces without leading or trailing holes and blanks, and without a final full
    stop (a search needs neither end), adjacent holes merged."""
    pieces = _pieces(template.strip())
    while pieces and pieces[0][0] == "hole":
        pieces.pop(0)
    if pieces and pieces[-1][0] == "text" and pieces[-1][1].rstrip().endswith("."):
        last = pieces[-1][1].rstrip()[:-1]
        pieces[-1] = ("text", last)
        if not last.strip():
            pieces.pop()
    while pieces and (pieces[-1][0] == "hole" or not pieces[-1][1].strip()):
        pieces.pop()
    merged: list[tuple[str, str]] = []
    for piece in pieces:
        if merged and piece[0] == merged[-1][0] == "hole":
            continue
        merged.append(piece)
    if merged:  # text pieces at both ends (holes were taken off): no blank to match there
        merged[0] = ("text", merged[0][1].lstrip())
        merged[-1] = ("text", merged[-1][1].rstrip())
    return tuple(merged)


def template_regex(template: str) -> str:
    """The regular expression (source, for a case-insensitive search) that reads a template
    tolerantly: holes match anything on the line, whitespace runs any whitespace, quotes
    are optional and of any kind. A template starting or ending on a word character is
    bounded there, so "Killed" does not match inside "unKilled"."""
    out: list[str] = []
    for kind, text in _core(template):
        if kind == "hole":
            out.append("[^\\n]*?")
            continue
        parts = [p for p in re.split(r"(\s+|[" + re.escape(_QUOTES) + "])", text) if p]
        for at, part in enumerate(parts):
            if part.isspace():
                # One blank between two words stays one blank: the phrase is then one literal
                # run the scan can filter on ("rm has detected an nvml/rm version mismatch",
                # not the bare word "detected"). Longer runs match any whitespace, and
                # blanks beside punctuation any or none ("signal 9: SIGKILL", "9:SIGKILL").
                after = parts[at + 1][:1] if at + 1 < len(parts) else ""
                words = parts[at - 1][-1:].isalnum() and after.isalnum() if at else False
                out.append(" " if words and part == " " else "\\s+" if words else "\\s*")
            elif part in _QUOTES:
                # a closing quote ends the quoted word: with the quote optional, "'gpus'"
                # must not read "'gpus_per_node'"
                if at and (parts[at - 1][-1:].isalnum() or parts[at - 1][-1:] == "_"):
                    out.append("(?!\\w)")
                out.append(_QUOTE_CLASS)
            else:
                out.append(re.escape(part))
    source = "".join(out)
    core = _core(template)
    if not core:
        raise ValueError(f"template {template!r} has no literal text")
    first, last = core[0][1].lstrip(), core[-1][1].rstrip()
    if first[:1].isalnum() or first[:1] == "_":
        source = "\\b" + source
    if last[-1:].isalnum() or last[-1:] == "_":
        source += "\\b"
    return source


# A message of several sentences is often shown in part: a program wraps it at 80 columns
# (nvidia-installer), an issue title truncates it, a doc quotes its first sentence. Its first
# sentence states what happened (the later ones advise), so a template also reads its first
# sentence alone when that sentence spells at least HEAD_CHARS literal characters: shorter
# ones ("Weights only load failed.") say too little without the rest.
HEAD_CHARS = 40


def template_head(template: str) -> str | None:
    """The first sentence of a template of several (up to its full stop), when it spells at
    least HEAD_CHARS literal characters and something follows it; else None."""
    for stop in re.finditer(r"[.!?](?=\s+\S)", template):
        head = template[:stop.start() + 1]
        if template[stop.start() - 1:stop.start()].isspace() or head.count("(") > \
                head.count(")"):
            continue  # " ." or inside brackets: not a sentence's end
        try:
            spelled = literal_length(head)
        except ValueError:
            return None  # a first sentence of placeholders only
        # the first sentence only: a short one ("Weights only load failed.") is not made
        # long enough by the advice after it
        return head if spelled >= HEAD_CHARS and literal_length(template) - spelled >= 10 \
            else None
    return None


def template_text(template: str) -> str:
    """The template's literal text, each hole a blank: what every line printed from it
    spells, whatever the program filled in (the fallback classifier trains on its words)."""
    return " ".join(text if kind == "text" else " " for kind, text in _pieces(template))


def literal_length(template: str) -> int:
    """How many literal characters a template spells: how specific a reading it is."""
    return sum(len(text.strip()) for kind, text in _core(template) if kind == "text")


def _spelled_gates(text: str) -> tuple[str, ...]:
    """The gate words a piece of literal text spells (lowercased, blanks made single)."""
    low = " ".join(text.lower().split())
    return tuple(gate for gate in GATES if gate in low)


def template_gates(template: str) -> tuple[str, ...]:
    """The gate words a template itself spells, each inside one literal piece and one run
    of text between quotes (the pattern makes quotes optional)."""
    found: list[str] = []
    for kind, text in _core(template):
        if kind == "text":
            for run in re.split("[" + re.escape(_QUOTES) + "]", text):
                found += _spelled_gates(run)
    return tuple(dict.fromkeys(found))


def sample_line(template: str, prefix: str = "") -> str:
    """A line as the program would print it from ``template``, holes filled with samples,
    after ``prefix`` when the template spells no gate word."""
    filled = "".join(text if kind == "text" else _SAMPLE.get(text[-1], "sample")
                     for kind, text in _pieces(template))
    filled = " ".join(filled.split())
    return filled if template_gates(template) else f"{prefix}{filled}"


def entry_rule(entry: Entry) -> Rule:
    """The log rule of one entry: its anchors, its pattern, its fix and how to decide."""
    alternatives: list[str] = []
    anchors: list[str] = []
    context = entry.context or _spelled_gates(entry.prefix)
    bodies: list[tuple[str, str]] = []  # (regex, the text whose gate words it spells)
    for template in entry.templates:
        bodies.append((template_regex(template), template))
        head = template_head(template)
        if head is None or not (template_gates(head) or context):
            continue
        head_regex = re.compile(template_regex(head), re.IGNORECASE)
        # (not when a line the entry must not read holds the first sentence: then what
        # follows it tells them apart, as TensorFlow's "... The caller indicates that this
        # is not a failure")
        if not any(head_regex.search(miss) for miss in entry.near_misses):
            bodies.append((head_regex.pattern, head))  # its first sentence alone
    for body, template in bodies:
        gates = template_gates(template)
        if gates:
            alternatives.append(body)
            anchors += gates
        elif context:
            # The template holds no gate word: read it after one of its prefix's, so the
            # scan reaches the line (and a bare phrase in prose does not match).
            words = "|".join(re.escape(gate) for gate in context)
            alternatives.append(f"(?:{words})[^\\n]*?{body}")
            anchors += context
        else:
            raise CatalogueError(f"{entry.source.name}: {template!r} spells no gate word "
                                 f"({', '.join(GATES)}) and its source has no prefix that does")
    alternatives = _unless(alternatives, entry.unless)
    steps = [Step(entry.fix, command=entry.command, url=entry.source.url)]
    decide = () if entry.decide is None else (Step(entry.decide, command=entry.decide_command),)
    bare = bare_message(entry)
    examples = tuple(dict.fromkeys([*(sample_line(t, entry.prefix) for t in entry.templates),
                                    *(line for line, _ in entry.real)]))
    return Rule(entry.code, rx(*alternatives), tuple(dict.fromkeys(anchors)),
                steps=tuple(steps), examples=examples, symptom_of=entry.symptom_of,
                alternatives=entry.alternatives, decide=decide,
                catalogue=entry.source.name,
                specificity=max(literal_length(t) for t in entry.templates),
                relations=entry.relations, bare_message=bare)


# A template that spells no gate word is read after its source's prefix ("CUDA error: ",
# "ValueError: "), so that a common phrase in prose is not read as the error. Users paste
# such messages bare too: an issue title, a sentence quoting the error, a line copied
# without its exception type. A template that spells this many literal characters says
# its cause on its own ("Invalid rank %d, rank should be in the interval [0, %d]", "peer
# access is not supported between these two devices"); shorter ones ("operation not
# supported", which a file system prints too) need their prefix. diagnose/bare_messages.py
# looks for these bare messages only in a log where no rule read an error, on lines no rule
# reads.
BARE_CHARS = 30


def bare_message(entry: Entry) -> re.Pattern[str] | None:
    """The entry's templates that spell no gate word and at least BARE_CHARS literal
    characters, as one pattern that reads them alone on a line (None: it has none, or its
    source's messages mean what they mean only after its prefix: ``Source.bare``)."""
    bodies = [template_regex(t) for t in entry.templates
              if not template_gates(t) and literal_length(t) >= BARE_CHARS]
    if not bodies or not entry.source.bare:
        return None
    return rx(*_unless(bodies, entry.unless))


def _unless(alternatives: list[str], unless: tuple[str, ...]) -> list[str]:
    """The alternatives with a line that also says one of the ``unless`` phrases excluded:
    the same message printed where it is harmless (an autotuner's rejected candidate, a list
    of skipped items)."""
    if not unless:
        return alternatives
    harmless = "|".join(template_regex(phrase) for phrase in unless)
    return [f"^(?![^\\n]*(?:{harmless}))[^\\n]*?{a}" for a in alternatives]


def _strings(value: Any, where: str, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CatalogueError(f"{where}: {key} must be a string or a list of strings")
    return tuple(value)


def _tables(value: Any, where: str, key: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    tables = [value] if isinstance(value, dict) else value
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise CatalogueError(f"{where}: {key} must be a table or a list of tables")
    return tables


def _relations(data: dict[str, Any], where: str) -> tuple[Relation, ...]:
    """An entry's relations to other codes, each with its reason (``rule.Explains``,
    ``rule.ReadAs``); the codes and environments they name are checked where the
    diagnosis loads them (``diagnose/relations.py``)."""
    found: list[Relation] = []
    for key in ("explains", "read_as"):
        for table in _tables(data.get(key), where, key):
            reason = table.get("reason")
            if not isinstance(reason, str) or not reason.strip():
                raise CatalogueError(f"{where}: each {key} needs its reason")
            if key == "explains":
                codes = _strings(table.get("codes"), where, "explains.codes")
                if not codes or set(table) - {"codes", "reason"}:
                    raise CatalogueError(f"{where}: explains takes codes and a reason")
                found.append(Explains(codes, reason))
                continue
            if set(table) - {"environment", "code", "leads", "categories", "reason"} \
                    or not isinstance(table.get("environment"), str):
                raise CatalogueError(f"{where}: read_as takes environment, code, leads, "
                                     f"categories and a reason")
            names = _strings(table.get("categories"), where, "read_as.categories")
            known = {c.value: c for c in Category}
            if set(names) - set(known):
                raise CatalogueError(f"{where}: read_as names unknown categories "
                                     f"{sorted(set(names) - set(known))}")
            found.append(ReadAs(table["environment"], reason, str(table.get("code", "")),
                                _strings(table.get("leads"), where, "read_as.leads"),
                                tuple(known[n] for n in names)))
    return tuple(found)


def _source(data: Any, where: str) -> Source:
    if not isinstance(data, dict):
        raise CatalogueError(f"{where}: no [source] table")
    unknown = set(data) - SOURCE_KEYS
    if unknown:
        raise CatalogueError(f"{where}: [source] has unknown keys {sorted(unknown)}")
    for key in ("name", "repository", "version"):
        if not isinstance(data.get(key), str) or not data[key]:
            raise CatalogueError(f"{where}: [source] needs {key}")
    paths = _strings(data.get("paths"), where, "paths")
    if not paths:
        raise CatalogueError(f"{where}: [source] needs the paths the messages were read from")
    context = _strings(data.get("context"), where, "context")
    if set(context) - set(GATES):
        raise CatalogueError(f"{where}: context {sorted(set(context) - set(GATES))} are not "
                             f"gate words")
    bare = data.get("bare", True)
    if not isinstance(bare, bool):
        raise CatalogueError(f"{where}: [source] bare is true or false")
    return Source(data["name"], data["repository"], data["version"], paths,
                  str(data.get("prefix", "")), str(data.get("url") or data["repository"]),
                  context, bare)


def _entry(source: Source, data: Any, where: str, codes: Mapping[str, Code]) -> Entry:
    if not isinstance(data, dict):
        raise CatalogueError(f"{where}: an entry must be a table")
    unknown = set(data) - ENTRY_KEYS
    if unknown:
        raise CatalogueError(f"{where}: unknown keys {sorted(unknown)}")
    templates = (*_strings(data.get("template"), where, "template"),
                 *_strings(data.get("templates"), where, "templates"))
    if not templates:
        raise CatalogueError(f"{where}: no template")
    where = f"{where} ({templates[0]!r})"
    code = codes.get(str(data.get("code")))
    if code is None:
        raise CatalogueError(f"{where}: code {data.get('code')!r} is not a declared LOG code")
    if data.get("category") != code.category.value:
        raise CatalogueError(f"{where}: category {data.get('category')!r} is not "
                             f"{code.id}'s ({code.category.value})")
    if not isinstance(data.get("fix"), str) or not data["fix"]:
        raise CatalogueError(f"{where}: no fix")
    alternatives = _strings(data.get("alternatives"), where, "alternatives")
    categories = {c.value for c in Category}
    for alternative in alternatives:
        if alternative.split(":")[0] not in categories:
            raise CatalogueError(f"{where}: alternative {alternative!r} names no category")
    if alternatives and not data.get("decide"):
        raise CatalogueError(f"{where}: alternatives without 'decide' (what tells them apart)")
    real: list[tuple[str, str]] = []
    for item in data.get("real", []):
        if not isinstance(item, dict) or not isinstance(item.get("line"), str) \
                or not str(item.get("url", "")).startswith("https://"):
            raise CatalogueError(f"{where}: each real line needs line and url (https://)")
        real.append((item["line"], item["url"]))
    symptom_of = _strings(data.get("symptom_of"), where, "symptom_of")
    # the entry's own context, else its own prefix's gates, else the source's context
    context = _strings(data.get("context"), where, "context") or (
        () if "prefix" in data else source.context)
    if set(context) - set(GATES):
        raise CatalogueError(f"{where}: context {sorted(set(context) - set(GATES))} are not "
                             f"gate words")
    return Entry(source, templates, code, data["fix"], data.get("command"), alternatives,
                 data.get("decide"), data.get("decide_command"), tuple(real),
                 _strings(data.get("near_misses"), where, "near_misses"),
                 str(data.get("prefix", source.prefix)), symptom_of, data.get("symbol"),
                 context, _relations(data, where), _strings(data.get("unless"), where, "unless"))


def read_catalogue(text: str, name: str, codes: Mapping[str, Code]) -> tuple[Source, list[Entry]]:
    """One catalogue file's source and entries; ``codes`` are the LOG codes by id."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise CatalogueError(f"{name}: {error}") from error
    source = _source(data.get("source"), name)
    entries = data.get("entry", [])
    if not isinstance(entries, list) or not entries:
        raise CatalogueError(f"{name}: no [[entry]]")
    return source, [_entry(source, item, f"{name} entry {number}", codes)
                    for number, item in enumerate(entries, start=1)]


def load_catalogues(codes: Mapping[str, Code], folder: Path = CATALOGUE_DIR
                    ) -> dict[str, tuple[Source, list[Entry]]]:
    """Every catalogue file of ``folder`` (``*.toml``, by name), read and checked."""
    found: dict[str, tuple[Source, list[Entry]]] = {}
    for path in sorted(folder.glob("*.toml")):
        source, entries = read_catalogue(path.read_text(encoding="utf-8"), path.name, codes)
        if source.name != path.stem:
            raise CatalogueError(f"{path.name}: [source] name {source.name!r} is not the "
                                 f"file's stem")
        found[source.name] = (source, entries)
    return found


def catalogue_rules(catalogues: Iterable[tuple[Source, list[Entry]]]) -> tuple[Rule, ...]:
    """The rules of every entry, catalogue by catalogue, in file order."""
    return tuple(entry_rule(entry) for _, entries in catalogues for entry in entries)
