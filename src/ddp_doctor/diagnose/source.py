"""Open what the user gave ``diagnose``: a log file, stdin, a ``.gz``, or a support bundle.

Everything is read as a stream of byte blocks so a 1 GB log never sits in memory. The
kind of input is sniffed from its first bytes, not its name (tickets rename files):
gzip, bzip2 and xz are decompressed on the fly, zip and tar archives (the support bundle)
are opened member by member; a folder holding torch Flight Recorder dumps or stack dumps
is read file by file, the dumps as data. Whether bytes are a zip, a JSON report or a facts
snapshot is the test every command shares (``ddp_doctor.inputs``). Binary input, other
directories and missing paths are refused with one line (exit 2) instead of a traceback or
a page of mojibake.
"""

from __future__ import annotations

import bz2
import io
import json
import lzma
import sys
import tarfile
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from ddp_doctor.forensics.flight import looks_like_dump
from ddp_doctor.forensics.stacks import STACK_MARKERS
from ddp_doctor.inputs import Kind, is_zip, json_kind

BLOCK = 1 << 22  # 4 MiB: large enough to scan fast, small enough to keep memory flat
SNIFF = 8192
LONGEST_LINE = 64 << 20
"""More than this without a line break is not a log (``/dev/urandom`` through ``tr``, a
binary without NUL bytes): refused with one line instead of growing without bound."""
_RAW = 1 << 16  # compressed bytes read at a time
_DUMP_CAP = 64 << 20  # a Flight Recorder dump of 2,000 entries is well under 1 MiB
_FOLDER_FILES = 256  # files read from a folder a user attaches
_CONTROL = bytes(range(0, 9)) + bytes(range(14, 27)) + bytes(range(28, 32)) + b"\x7f"

# Files a support bundle carries that are outputs of a previous diagnosis, not evidence:
# reading them again as text would quote our own finding titles back as "log lines".
# report.json is read once more, as data: the verdict the machine itself recorded.
_DERIVED = {"report.md", "report.json", "manifest", "manifest.txt", "junit.xml"}
_RECORDED_REPORT = "report.json"


class InputError(Exception):
    """Input that cannot be diagnosed; the message is one line for the user."""


@dataclass
class Document:
    """One text stream to scan: a whole file, stdin, or one member of an archive."""

    name: str
    blocks: Iterator[bytes]
    encoding: str = "utf-8"


@dataclass
class Opened:
    """What an input turned out to hold: text documents and saved facts snapshots.

    Snapshots of a tar archive are collected while its documents are read (a tar is one
    stream), so read every document before looking at ``facts_snapshots``. ``notes`` says
    what could not be read (a member that is not text, a .gz cut short).
    """

    label: str
    documents: Iterator[Document]
    facts_snapshots: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)
    recorded_reports: list[dict[str, Any]] = field(default_factory=list)
    """JSON reports a bundle carries (its ``report.json``): what the machine itself judged."""
    flight_dumps: list[tuple[str, bytes]] = field(default_factory=list)
    """Torch Flight Recorder dumps (JSON or pickle; forensics/flight.py), by name: read as
    data, never scanned as text."""


def _blocks(stream: IO[bytes], first: bytes = b"") -> Iterator[bytes]:
    if first:
        yield first
    while True:
        block = stream.read(BLOCK)
        if not block:
            return
        yield block


def _text_blocks(blocks: Iterator[bytes], label: str) -> Iterator[bytes]:
    """Blocks of a UTF-8 text stream with NUL bytes left out, and a bound on a line.

    A log on NFS, or one whose writer crashed, is often padded with NUL bytes up to a
    block size (the file's size was extended before its data arrived): the padding is not
    text, and the lines before it are the evidence. An input that never breaks a line
    (an endless stream of one character) is refused once a line passes ``LONGEST_LINE``.
    """
    since_break = 0
    for block in blocks:
        if b"\x00" in block:
            block = block.replace(b"\x00", b"")
        cut = block.rfind(b"\n")
        since_break = len(block) - cut - 1 if cut >= 0 else since_break + len(block)
        if since_break > LONGEST_LINE:
            raise InputError(f"{label}: more than {LONGEST_LINE >> 20} MiB without a line "
                             f"break; not a text log")
        if block:
            yield block


def _encoding(head: bytes) -> str | None:
    """The text encoding of a stream from its first bytes, or None when it is binary.

    PowerShell's ``>`` writes UTF-16 with a byte-order mark, so a BOM is honoured.
    Otherwise NUL bytes alone do not make it binary (NUL-padded logs, see
    ``_text_blocks``): the bytes around them do. No text at all, or more than one control
    character in twenty of what is left (an executable, a core dump), is a binary file.
    """
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16"
    if head.startswith(b"\xef\xbb\xbf"):
        return "utf-8-sig"
    if b"\x00" in head:
        text = head.replace(b"\x00", b"")
        if not text.strip() or len(text.translate(None, _CONTROL)) < 0.95 * len(text):
            return None
    return "utf-8"


def _peek(stream: IO[bytes]) -> bytes:
    """Read the first bytes of a stream that may not be seekable (stdin, a pipe)."""
    head = b""
    while len(head) < SNIFF:
        more = stream.read(SNIFF - len(head))
        if not more:
            break
        head += more
    return head


class _Gunzip(io.RawIOBase):
    """A gzip stream decompressed as it is read, every byte before a cut kept.

    ``gzip.GzipFile`` drops what its last read decompressed when the stream ends early, so
    a small ``.gz`` cut short (an upload limit) gave nothing at all. Here each read returns
    what zlib could decompress, at most ``BLOCK`` at a time (a gzip of ``/dev/zero`` stays
    small in memory); the cut is raised as EOFError only once everything before it was
    read, and again on every later read. Members written one after another (``cat a.gz
    b.gz``, ``gzip`` of appended logs) are read in turn, as gzip(1) does.
    """

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self._failed: Exception | None = None
        self._left = b""

    def readable(self) -> bool:
        return True

    def _more(self) -> bytes:
        while True:
            if self._failed is not None:
                raise self._failed
            inflate = self._inflate
            if inflate.eof:
                rest = inflate.unused_data or self._raw.read(_RAW)
                if not rest.startswith(b"\x1f\x8b"):  # the end, or padding after it
                    return b""
                self._inflate = inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
                data = rest
            else:
                data = inflate.unconsumed_tail or self._raw.read(_RAW)
                if not data:
                    self._failed = EOFError("compressed file ended before the end-of-stream "
                                            "marker was reached")
                    continue
            try:
                out = inflate.decompress(data, BLOCK)
            except zlib.error as exc:
                self._failed = OSError(f"damaged compressed data ({exc})")
                continue
            if out:
                return out

    def read(self, size: int | None = -1) -> bytes:
        if not self._left:
            self._left = self._more()
        if size is None or size < 0:
            size = len(self._left)
        out, self._left = self._left[:size], self._left[size:]
        return out

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class _Broken(io.RawIOBase):
    """What is left of a stream whose first read failed after giving some bytes: the
    failure again, so the reader notes that the input ended early."""

    def __init__(self, error: Exception) -> None:
        self._error = error

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> bytes:
        raise self._error

    def readinto(self, buffer: Any) -> int:
        raise self._error


def _decompressor(head: bytes) -> Any:
    if head.startswith(b"\x1f\x8b"):
        return _Gunzip
    if head.startswith(b"BZh"):
        return bz2.BZ2File
    if head.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile
    return None


# What a damaged or truncated compressed stream raises while it is read.
_UNREADABLE = (OSError, EOFError, lzma.LZMAError)


def _decompressed(stream: IO[bytes], head: bytes, name: str
                  ) -> tuple[IO[bytes], bytes, str]:
    """The stream decompressed when its first bytes say so: (stream, its first bytes, the
    name without the compression suffix). Raises one of ``_UNREADABLE`` if nothing at all
    can be decompressed; a stream that fails after some text gives that text, then fails
    again (``_guarded`` turns it into a note)."""
    opener = _decompressor(head)
    if opener is None:
        return stream, head, name
    inner = opener(_Chained(head, stream))
    first = b""
    try:
        while len(first) < SNIFF:
            more = inner.read(SNIFF - len(first))
            if not more:
                break
            first += more
    except _UNREADABLE as exc:
        if not first:
            raise
        inner = cast("IO[bytes]", _Broken(exc))
    return inner, first, name.removesuffix(".gz").removesuffix(".bz2").removesuffix(".xz")


def _is_tar(head: bytes) -> bool:
    return len(head) > 262 and head[257:262] == b"ustar"


def open_input(target: str, stdin: IO[bytes] | None = None) -> Opened:
    """Open ``target`` (a path or ``-`` for stdin) for scanning, or raise InputError."""
    if target == "-":
        stream: IO[bytes] = stdin if stdin is not None else sys.stdin.buffer
        return _open_stream(stream, "stdin", "<stdin>")
    path = Path(target)
    if not path.exists():
        raise InputError(f"{target}: no such file")
    if path.is_dir():
        folder = _folder_opened(path)
        if folder is None:
            raise InputError(f"{target}: is a directory; pass a log file, a .gz, a support "
                             f"bundle (.zip / .tar.gz), or a folder of Flight Recorder or "
                             f"stack dumps")
        return folder
    if path.is_file() and is_zip(_head(path)) and zipfile.is_zipfile(path):
        # (is_zipfile reads a whole non-regular file looking for the end: /dev/zero.)
        notes: list[str] = []
        dumps: list[tuple[str, bytes]] = []
        snapshots, reports = _zip_snapshots(path, dumps)
        taken = {name for name, _ in dumps}
        return Opened(str(path), _zip_documents(path, notes, taken), snapshots, notes,
                      reports, dumps)
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise InputError(f"{target}: cannot read: {exc.strerror or exc}") from None
    return _open_stream(handle, str(path), path.name)


def _head(path: Path) -> bytes:
    try:
        with path.open("rb") as handle:
            return handle.read(4)
    except OSError:
        return b""


def _own_json(head: bytes, stream: IO[bytes], label: str) -> tuple[Opened | None, bytes]:
    """ddp-doctor's own JSON (a report from --json, a --save-facts snapshot) read as what
    it is: the report's findings lead as a bundle's do, a snapshot's facts are checked.
    Read as text, a report only quoted its own titles back. Returns (None, the bytes read
    so far) for any other input starting with ``{``, to be read on as text."""
    raw = head + stream.read(64 << 20)
    if len(raw) > (64 << 20):
        return None, raw  # larger than any report: read it as text
    try:
        value = json.loads(raw.decode("utf-8-sig"))
    except (ValueError, UnicodeDecodeError):
        return None, raw
    kind = json_kind(value)
    if kind is Kind.REPORT:
        return Opened(label, iter([]), [], recorded_reports=[value]), raw
    if kind is Kind.FACTS:
        return Opened(label, iter([]), [value]), raw
    return None, raw


def _open_stream(stream: IO[bytes], label: str, name: str) -> Opened:
    try:
        head = _peek(stream)
    except OSError as exc:
        raise InputError(f"{label}: cannot read: {exc.strerror or exc}") from None
    try:
        stream, head, name = _decompressed(stream, head, name)
    except _UNREADABLE as exc:
        raise InputError(f"{label}: looks compressed but cannot be decompressed: "
                         f"{exc}") from None
    if _is_tar(head):
        # A raw stream reads like IO[bytes], which is all tarfile's stream mode uses.
        return _tar_opened(cast("IO[bytes]", _Chained(head, stream)), label)
    encoding = _encoding(head)
    if encoding is None:
        raise InputError(f"{label}: looks like a binary file, not a text log (pass the log "
                         f"as text, a .gz of it, or a support bundle)")
    if head.lstrip().startswith(b"{"):  # by its bytes, not its name: tickets rename files
        own, head = _own_json(head, stream, label)
        if own is not None:
            return own
    notes: list[str] = []
    blocks = _guarded(_blocks(stream, head), label, notes)
    if encoding != "utf-16":
        blocks = _text_blocks(blocks, label)
    return Opened(label, iter([Document(name, blocks, encoding)]), [], notes)


def _guarded(blocks: Iterator[bytes], label: str, notes: list[str]) -> Iterator[bytes]:
    """Blocks of a stream; a .gz cut short ends the stream with a note, keeping what was read.

    A ticket's attachment is often truncated by an upload limit: the lines before the cut
    are still evidence, so they are diagnosed and the report says the input ended early.
    """
    try:
        yield from blocks
    except _UNREADABLE as exc:
        notes.append(f"{label} ends early ({exc}); what was read before it is diagnosed")


class _Chained(io.RawIOBase):
    """A stream with bytes already read put back in front (stdin cannot seek)."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self._head = head
        self._rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head:
            size = min(len(buffer), len(self._head))
            buffer[:size] = self._head[:size]
            self._head = self._head[size:]
            return size
        data = self._rest.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            return self._head + self._rest.read()
        if self._head:
            out, self._head = self._head[:size], self._head[size:]
            return out
        return self._rest.read(size)


def _member_wanted(name: str) -> bool:
    base = name.rsplit("/", 1)[-1].lower()
    return bool(base) and base not in _DERIVED and not base.startswith(".")


def _snapshot(data: bytes) -> dict[str, Any] | None:
    """A ddp-doctor facts snapshot, if this JSON member is one."""
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if json_kind(value) is Kind.FACTS else None


def _recorded_report(name: str, data: bytes) -> dict[str, Any] | None:
    """A bundle's own ``report.json`` (a ddp-doctor JSON report), if this member is one."""
    if name.rsplit("/", 1)[-1].lower() != _RECORDED_REPORT:
        return None
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if json_kind(value) is Kind.REPORT else None


def _text_member(name: str, handle: IO[bytes], notes: list[str]) -> Document | None:
    """A member as a text document (decompressing a .gz/.bz2/.xz member), or None."""
    try:
        handle, head, name = _decompressed(handle, _peek(handle), name)
    except _UNREADABLE as exc:
        notes.append(f"{name}: cannot be decompressed ({exc})")
        return None
    encoding = _encoding(head)
    if encoding is None:
        notes.append(f"{name}: skipped, not text")
        return None
    return Document(name, _guarded(_blocks(handle, head), name, notes), encoding)


def _zip_snapshots(path: Path, dumps: list[tuple[str, bytes]] | None = None
                   ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The facts snapshots and the recorded reports among a zip's JSON members (and its
    Flight Recorder dumps, JSON or pickled, into ``dumps``)."""
    found: list[dict[str, Any]] = []
    reports: list[dict[str, Any]] = []
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if dumps is not None and not info.is_dir() and info.file_size < _DUMP_CAP:
                    with archive.open(info) as handle:
                        head = handle.read(8)
                    if head[:1] in (b"{", b"\x80"):
                        data = archive.read(info)
                        if looks_like_dump(info.filename, data):
                            dumps.append((info.filename, data))
                            continue
                if info.filename.endswith(".json") and info.file_size < 64 << 20:
                    data = archive.read(info)
                    snapshot = _snapshot(data)
                    if snapshot is not None:
                        found.append(snapshot)
                    report = _recorded_report(info.filename, data)
                    if report is not None:
                        reports.append(report)
    except (zipfile.BadZipFile, OSError) as exc:
        raise InputError(f"{path}: damaged zip archive: {exc}") from None
    return found, reports


def _zip_documents(path: Path, notes: list[str], taken: frozenset[str] | set[str] = frozenset()
                   ) -> Iterator[Document]:
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            if info.is_dir() or not _member_wanted(info.filename) or info.filename in taken:
                continue
            if info.filename.endswith((".json", ".jsonl")):
                continue  # snapshots are read as facts; event files are not prose
            with archive.open(info) as handle:
                document = _text_member(info.filename, handle, notes)
                if document is not None:
                    yield document


def _tar_opened(stream: IO[bytes], label: str) -> Opened:
    """A tar archive is read in one streaming pass: snapshots are collected as met."""
    snapshots: list[dict[str, Any]] = []
    reports: list[dict[str, Any]] = []
    notes: list[str] = []
    dumps: list[tuple[str, bytes]] = []

    def documents() -> Iterator[Document]:
        try:
            with tarfile.open(fileobj=stream, mode="r|") as archive:
                for member in archive:
                    if not member.isfile():
                        continue
                    recorded = (member.name.rsplit("/", 1)[-1].lower() == _RECORDED_REPORT
                                and member.size < 64 << 20)
                    if not recorded and not _member_wanted(member.name):
                        continue
                    handle = archive.extractfile(member)
                    if handle is None:
                        continue
                    if member.size < _DUMP_CAP:
                        head = handle.peek(8)[:8] if hasattr(handle, "peek") else b""
                        if head[:1] in (b"{", b"\x80"):
                            data = handle.read()
                            if looks_like_dump(member.name, data):
                                dumps.append((member.name, data))
                                continue
                            handle = cast("IO[bytes]", io.BytesIO(data))
                    if member.name.endswith(".json"):
                        if member.size < 64 << 20:
                            data = handle.read()
                            snapshot = _snapshot(data)
                            if snapshot is not None:
                                snapshots.append(snapshot)
                            report = _recorded_report(member.name, data)
                            if report is not None:
                                reports.append(report)
                        continue
                    if member.name.endswith(".jsonl"):
                        continue
                    document = _text_member(member.name, handle, notes)
                    if document is not None:
                        yield document
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise InputError(f"{label}: damaged tar archive: {exc}") from None

    return Opened(label, documents(), snapshots, notes, reports, dumps)


def _folder_opened(folder: Path) -> Opened | None:
    """A folder a user attaches: Flight Recorder dumps (read as data) and the text files
    beside them (py-spy or faulthandler stacks, logs), in name order; None when it holds
    neither a dump nor a stack dump, so a stray directory is still refused."""
    try:
        files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()
                       and _member_wanted(p.name))[:_FOLDER_FILES]
    except OSError:
        return None
    dumps: list[tuple[str, bytes]] = []
    texts: list[Path] = []
    for file in files:
        try:
            with file.open("rb") as handle:
                head = handle.read(1 << 16)
        except OSError:
            continue
        name = str(file.relative_to(folder))
        if head[:1] in (b"{", b"\x80") and file.stat().st_size < _DUMP_CAP:
            data = file.read_bytes()
            if looks_like_dump(name, data):
                dumps.append((name, data))
                continue
        if _encoding(head) is not None:
            texts.append(file)
    stacks = [f for f in texts if any(m in f.read_bytes()[:1 << 20] for m in STACK_MARKERS)]
    if not dumps and not stacks:
        return None
    notes: list[str] = []

    def documents() -> Iterator[Document]:
        for file in texts:
            try:
                handle = file.open("rb")
            except OSError as exc:
                notes.append(f"{file.name}: cannot read: {exc.strerror or exc}")
                continue
            document = _text_member(str(file.relative_to(folder)), handle, notes)
            if document is not None:
                yield document

    return Opened(str(folder), documents(), [], notes, [], dumps)
