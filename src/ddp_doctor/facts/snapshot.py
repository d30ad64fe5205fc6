"""The facts snapshot: what the probes gathered, as plain JSON-able data.

Facts are kept as plain dictionaries so that a snapshot can be saved with
``--save-facts`` on a customer's machine and replayed with ``--facts`` anywhere: the
checks then run on exactly what the probes saw, without touching the machine.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddp_doctor.files import is_special_file

FACTS_FORMAT = "ddp-doctor-facts"
FACTS_SCHEMA_VERSION = 1
# The "format" string of snapshots saved before the tool took its current name. Their
# schema (version 1) is the same, so ``--facts`` replays them as they are.
LEGACY_FACTS_FORMAT = "gpu-doctor-facts"
READABLE_FACTS_FORMATS = (FACTS_FORMAT, LEGACY_FACTS_FORMAT)


class FactsFileError(Exception):
    """A ``--facts`` file that cannot be used; the message is one line for the user."""


@dataclass(frozen=True)
class FactRecord:
    """One named fact: its value, or why it could not be gathered.

    ``ok`` is False only when the probe itself failed (crashed, hung, raised). A probe
    that ran and saw "no driver" is ok, with that observation in ``value``.
    """

    name: str
    ok: bool
    value: Any = None
    error: str | None = None
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "value": self.value,
            "error": self.error,
            "duration_s": round(self.duration_s, 4),
        }


@dataclass
class Facts:
    """All facts of one run, by name, plus where they came from."""

    records: dict[str, FactRecord] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def add(self, record: FactRecord) -> None:
        self.records[record.name] = record

    def available(self, name: str) -> bool:
        record = self.records.get(name)
        return record is not None and record.ok

    def __getitem__(self, name: str) -> Any:
        """The value of an available fact; checks only ask for facts they declared."""
        record = self.records.get(name)
        if record is None or not record.ok:
            raise KeyError(f"fact {name!r} is not available")
        return record.value

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if self.available(name) else default

    def why_unavailable(self, name: str) -> str:
        record = self.records.get(name)
        if record is None:
            return f"fact {name!r} was not gathered"
        return f"fact {name!r} could not be gathered: {record.error}"

    def errors(self) -> dict[str, str]:
        return {n: r.error or "" for n, r in self.records.items() if not r.ok}

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FACTS_FORMAT,
            "schema_version": FACTS_SCHEMA_VERSION,
            "meta": self.meta,
            "facts": {name: r.to_dict() for name, r in sorted(self.records.items())},
        }

    @classmethod
    def from_dict(cls, data: Any) -> Facts:
        if not isinstance(data, dict) or data.get("format") not in READABLE_FACTS_FORMATS:
            raise FactsFileError(
                f"not a ddp-doctor facts file (no \"format\": \"{FACTS_FORMAT}\")"
            )
        version = data.get("schema_version")
        if version != FACTS_SCHEMA_VERSION:
            raise FactsFileError(
                f"facts schema version {version!r} is not supported "
                f"(this ddp-doctor reads version {FACTS_SCHEMA_VERSION})"
            )
        raw = data.get("facts")
        if not isinstance(raw, dict):
            raise FactsFileError("facts file has no \"facts\" object")
        meta = data.get("meta")
        facts = cls(meta=meta if isinstance(meta, dict) else {})
        for name, rec in raw.items():
            if not isinstance(rec, dict) or not isinstance(rec.get("ok"), bool):
                raise FactsFileError(f"fact {name!r} is malformed (expected an object with \"ok\")")
            facts.add(
                FactRecord(
                    name=name,
                    ok=rec["ok"],
                    value=rec.get("value"),
                    error=rec.get("error"),
                    duration_s=float(rec.get("duration_s") or 0.0),
                )
            )
        return facts


def save_facts(facts: Facts, path: Path, redactor: Any = None) -> None:
    """Write the snapshot atomically, so an interrupted save never leaves half a file.

    The snapshot is an artifact like any report: it goes through the run's redactor
    (``ddp_doctor.redact.redactor.Redactor``; a secrets-only one when none is given), so a
    token in a probe's stderr or a path never reaches the file.
    """
    from ddp_doctor.redact.redactor import Redactor

    data = (redactor or Redactor()).facts(facts)
    text = json.dumps(data, indent=2, sort_keys=False, default=str) + "\n"
    write_text_atomic(path, text)


def write_text_atomic(path: Path, text: str) -> None:
    """Write a whole file, or nothing: a temporary file renamed over the target. A device or
    FIFO (``--json /dev/null``) is written into directly."""
    if is_special_file(path):
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load_facts(path: Path) -> Facts:
    """Read a snapshot, turning every way it can be unusable into a FactsFileError.

    A snapshot only: a file given on the command line, which may also be a support bundle,
    is read through ``ddp_doctor.inputs.read_facts`` (one floor up, beside the bundle
    reader), which uses the two halves below.
    """
    return facts_from_bytes(read_facts_file(path), path)


def read_facts_file(path: Path) -> bytes:
    """The bytes of a ``--facts`` file; a FactsFileError when there are none to read."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise FactsFileError(f"facts file not found: {path}") from None
    except IsADirectoryError:
        raise FactsFileError(f"facts path is a directory, not a file: {path}") from None
    except OSError as exc:
        raise FactsFileError(f"cannot read facts file {path}: {exc.strerror or exc}") from None
    if not raw.strip():
        raise FactsFileError(f"facts file is empty: {path}")
    return raw


def facts_from_bytes(raw: bytes, path: Path) -> Facts:
    """A snapshot's bytes as Facts (PATH names the file in the messages)."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise FactsFileError(f"facts file is not UTF-8 text: {path}") from None
    except json.JSONDecodeError as exc:
        raise FactsFileError(
            f"facts file is not valid JSON (truncated?): {path}: {exc.msg} at line {exc.lineno}"
        ) from None
    return Facts.from_dict(data)
