"""The ``Redactor``: one run's secret removal and anonymisation, applied to all it writes.

``secrets.py`` and ``anonymize.py`` know the patterns; this module walks what a run
writes (free text, JSON-like values and dataclasses, a whole ``Report``, a facts
snapshot) and sends every string through them, with the key each string sits under as
context: a value under a secret-looking key is replaced whole, a dotted quad under a
``version`` key is a version, not an address. One instance serves every artifact of a
run, so the console, JSON, Markdown, JUnit and bundle agree on placeholders, and its
counts feed the bundle's MANIFEST.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from enum import Enum
from typing import Any

from ddp_doctor.model import Report
from ddp_doctor.redact.anonymize import Anonymizer
from ddp_doctor.redact.secrets import REDACTED, SECRET_VARIABLE, hides_secret, redact_secrets


def _norm_key(key: object) -> str:
    """A key as context: lower case, spaces and dashes as underscores ("Host Name")."""
    return re.sub(r"[\s-]+", "_", str(key).strip().lower()) if isinstance(key, str) else ""


class Redactor:
    """One run's redaction: every artifact of the run goes through the same instance.

    Secrets are always removed. With ``anonymize`` host and user names, home paths,
    addresses, GPU UUIDs and serials get stable placeholders; see ``for_run``.
    """

    def __init__(self, anonymize: bool = False) -> None:
        self.anonymize = anonymize
        self.counts: dict[str, int] = {}  # what was replaced, by kind, for the MANIFEST
        self._identities = Anonymizer(self._count)  # learned values and their placeholders

    # -- construction ------------------------------------------------------------------

    @classmethod
    def for_run(cls, facts: object = None, anonymize: bool = False) -> Redactor:
        """A redactor for one run, knowing the run's facts.

        ``facts`` is a ``Facts`` object, its ``to_dict()`` form, or None. With
        ``anonymize`` the host name (``os.hostname``), users (``env_vars`` HOME/USER/
        LOGNAME, home paths, process owners), GPU UUIDs and serials (``nvml``) are learned
        from it, and every value the facts hold gets its placeholder in the facts' own
        order, so the snapshot and the report of one run agree.
        """
        redactor = cls(anonymize=anonymize)
        if anonymize and facts is not None:
            data = _facts_values(facts)
            redactor.learn(data)
            redactor.value(data)  # assign placeholders in a stable order
            redactor.counts.clear()
        return redactor

    def learn(self, data: object) -> None:
        """Learn the concrete host/user names, GPU UUIDs and serials held by ``data``."""
        if not self.anonymize:
            return
        self._identities.learn(_walk_pairs(data, ""))

    # -- the interface -----------------------------------------------------------------

    def text(self, text: str, *, version_context: bool = False) -> str:
        """Free text with every secret removed (and, with ``anonymize``, identities).

        ``version_context`` says the text is a version (a "version" key or label), so a
        dotted quad in it is not an IP address.
        """
        if not text:
            return text
        text = redact_secrets(text, self._count)
        if self.anonymize:
            text = self._identities.text(text, version_context)
        return text

    def summary(self) -> dict[str, int]:
        """How many values of each kind this redactor replaced so far."""
        return dict(sorted(self.counts.items()))

    def value(self, value: object) -> object:
        """Any JSON-like value (dicts, lists, dataclasses) with every string redacted.

        Keys give context: a string under a secret-looking key (``HF_TOKEN``,
        ``password``) is replaced whole; under a ``version`` key a dotted quad stays.
        """
        if self.anonymize:
            self.learn(value)
        return self._map(value, "")

    def report(self, report: Report) -> Report:
        """The whole Report, every string in it redacted (a new Report)."""
        redacted = self.value(report)
        if not isinstance(redacted, Report):  # _map rebuilds a dataclass as its own type
            raise TypeError(f"redacting a Report gave a {type(redacted).__name__}")
        return redacted

    def facts(self, facts: object) -> dict[str, Any]:
        """A facts snapshot (``Facts`` or its dict form) as a redacted dict, for writing."""
        data = facts.to_dict() if hasattr(facts, "to_dict") else facts
        result = self.value(data)
        return result if isinstance(result, dict) else {}

    # -- internals ---------------------------------------------------------------------

    def _count(self, kind: str, n: int) -> None:
        if n:
            self.counts[kind] = self.counts.get(kind, 0) + n

    def _map(self, value: object, key: str) -> object:
        if isinstance(value, Enum):
            return value
        if isinstance(value, str):
            if key and hides_secret(key, value):
                self._count(SECRET_VARIABLE, 1)
                return REDACTED
            return self.text(value, version_context="version" in key)
        if isinstance(value, dict):
            mapped = {}
            for k, item in value.items():
                new_key = self.text(k) if self.anonymize and isinstance(k, str) else k
                mapped[new_key] = self._map(item, _norm_key(k))
            return mapped
        if isinstance(value, (list, tuple)):
            items = [self._map(item, key) for item in value]
            return tuple(items) if isinstance(value, tuple) else items
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            label = getattr(value, "label", None)
            label_key = _norm_key(label) if isinstance(label, str) else ""
            changes = {}
            for f in dataclasses.fields(value):
                if not f.init:
                    continue
                field_key = label_key if f.name == "value" and label_key else f.name
                changes[f.name] = self._map(getattr(value, f.name), field_key)
            return dataclasses.replace(value, **changes)
        return value


def _facts_values(facts: object) -> dict[str, Any]:
    """The facts as a plain dict (``Facts.to_dict()`` form), whatever was passed."""
    to_dict = getattr(facts, "to_dict", None)
    data = to_dict() if callable(to_dict) else facts
    return data if isinstance(data, dict) else {}


def _walk_pairs(value: object, key: str) -> Iterator[tuple[str, str]]:
    """Every string in ``value`` with the (normalised) key or label it sits under."""
    if isinstance(value, Enum):
        return
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, dict):
        for k, item in value.items():
            yield from _walk_pairs(item, _norm_key(k))
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _walk_pairs(item, key)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        label = getattr(value, "label", None)
        label_key = _norm_key(label) if isinstance(label, str) else ""
        for f in dataclasses.fields(value):
            field_key = label_key if f.name == "value" and label_key else f.name
            yield from _walk_pairs(getattr(value, f.name), field_key)
