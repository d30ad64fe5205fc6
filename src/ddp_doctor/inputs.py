"""What a file given to a command holds: a support bundle, a JSON report, a facts snapshot
or a log, told apart once, here, by its bytes (tickets rename files, so never by its name).

Every command that takes a file asks this module: ``check --facts`` (``read_facts``: a
snapshot, a bundle's facts.json, or a gzipped snapshot), ``compare`` (``read_input`` then
``facts_of``: the file is read once) and ``diagnose`` (``diagnose/source.py`` streams its
input and asks ``is_zip`` and ``json_kind`` of what it reads). The module lies above the
facts and the bundle reader, which know nothing of each other, and under the commands.
Each command words an unreadable input its own way (``UnreadableInput.why`` says which
way it failed); the messages of a bad snapshot or bundle are the facts' own
(``FactsFileError``).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddp_doctor.bundle.archive import BundleReadError, read_bundle_facts
from ddp_doctor.facts.snapshot import (
    READABLE_FACTS_FORMATS,
    Facts,
    FactsFileError,
    facts_from_bytes,
    read_facts_file,
)

ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a local file header; an empty archive's end
GZIP_MAGIC = b"\x1f\x8b"  # a .tar.gz bundle, or a gzipped snapshot


class Kind(enum.Enum):
    """What an input holds, as the messages name it."""

    BUNDLE = "support bundle"
    REPORT = "JSON report"
    FACTS = "facts snapshot"
    LOG = "log"


def is_zip(head: bytes) -> bool:
    return head.startswith(ZIP_MAGIC)


def is_archive(head: bytes) -> bool:
    """A support bundle (.zip, .tar.gz) or a gzipped snapshot, by its first bytes."""
    return is_zip(head) or head.startswith(GZIP_MAGIC)


def json_kind(value: Any) -> Kind | None:
    """REPORT for a ddp-doctor JSON report (``--json``: its findings), FACTS for a facts
    snapshot (``--save-facts``, any format name it was saved under), else None."""
    if not isinstance(value, dict):
        return None
    if value.get("tool") == "ddp-doctor" and isinstance(value.get("findings"), list):
        return Kind.REPORT
    if value.get("format") in READABLE_FACTS_FORMATS:
        return Kind.FACTS
    return None


class UnreadableInput(Exception):
    """A file that could not be read at all. ``why``: ``missing``, ``directory``,
    ``unreadable`` (``detail`` says how) or ``empty``."""

    def __init__(self, path: Path, why: str, detail: str = "") -> None:
        super().__init__(f"{path}: {why}{f' ({detail})' if detail else ''}")
        self.path, self.why, self.detail = path, why, detail


@dataclass(frozen=True)
class Input:
    """One file, read once: its bytes, what they hold, and the JSON value when they are
    JSON (``is_json``; a log may be JSON of another kind)."""

    path: Path
    raw: bytes
    kind: Kind
    data: Any = None
    is_json: bool = False


def read_bytes(path: Path) -> bytes:
    """The whole file, or UnreadableInput."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise UnreadableInput(path, "missing") from None
    except IsADirectoryError:
        raise UnreadableInput(path, "directory") from None
    except OSError as exc:
        raise UnreadableInput(path, "unreadable", str(exc.strerror or exc)) from None
    if not raw.strip():
        raise UnreadableInput(path, "empty")
    return raw


def read_input(path: Path) -> Input:
    """The file read once and told apart; UnreadableInput when it cannot be read."""
    return told_apart(path, read_bytes(path))


def told_apart(path: Path, raw: bytes) -> Input:
    """What RAW, the bytes of PATH, hold."""
    if is_archive(raw[:4]):
        return Input(path, raw, Kind.BUNDLE)
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return Input(path, raw, Kind.LOG)
    return Input(path, raw, json_kind(data) or Kind.LOG, data, is_json=True)


def facts_of(item: Input) -> Facts:
    """The facts an input holds: a snapshot's, or a bundle's facts.json (a gzipped snapshot
    too), read from the bytes already in hand; FactsFileError (one line) otherwise."""
    path = item.path
    if item.is_json:  # parsed already
        return Facts.from_dict(item.data)
    raw = item.raw
    if item.kind is Kind.BUNDLE:
        try:
            raw = read_bundle_facts(path, raw)
        except BundleReadError as exc:
            raise FactsFileError(str(exc)) from None
    return facts_from_bytes(raw, path)


def read_facts(path: Path) -> Facts:
    """``--facts``: a snapshot, a support bundle (its ``ddp-doctor-bundle/facts.json``, so a
    ticket's bundle replays as it is) or a gzipped snapshot; every way it can be unusable
    is a one-line FactsFileError."""
    return facts_of(told_apart(path, read_facts_file(path)))
