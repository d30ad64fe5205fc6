"""Secret removal for everything gpu-doctor writes.

Reports and facts end up in support tickets, so secrets are removed when data is
gathered, not when it is printed: variables whose names look secret lose their value,
credentials inside URLs are cut out, and well-known token shapes are replaced
wherever they appear.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"

_SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSW|PASSWD|CREDENTIAL|AUTH|API_?KEY|ACCESS_?KEY|PRIVATE|_KEY$|^KEY$|COOKIE|SESSION",
    re.IGNORECASE,
)

# Token shapes (public formats): Hugging Face "hf_", GitHub "ghp_/gho_/ghu_/ghs_/ghr_"
# and fine-grained "github_pat_", AWS access key ids "AKIA/ASIA", Slack "xox?-",
# OpenAI-style "sk-", and PEM private-key blocks.
_TOKEN_PATTERNS = (
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
    re.compile(r"\bhf_[A-Za-z0-9]{30,}\b"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}\b"),
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{40,}\b"),
    re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{20,}\b"),
)
# scheme://user:password@host -> scheme://<redacted>@host
_URL_CREDENTIALS = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@")


def is_secret_name(name: str) -> bool:
    """True for environment-variable names whose values must never be shown."""
    return bool(_SECRET_NAME.search(name))


def redact_text(text: str) -> str:
    """Remove URL credentials and known token shapes from free text."""
    if not text:
        return text
    text = _URL_CREDENTIALS.sub(lambda m: f"{m.group('scheme')}{REDACTED}@", text)
    for pattern in _TOKEN_PATTERNS:
        text = pattern.sub(REDACTED, text)
    return text


class Redactor:
    """One run's redaction: every artifact of the run goes through the same instance.

    Secrets (URL credentials, token shapes) are always removed. ``anonymize`` is the
    stronger mode for tickets that leave the organisation; see ``for_run``.
    """

    def __init__(self, anonymize: bool = False) -> None:
        self.anonymize = anonymize
        self.counts: dict[str, int] = {}  # what was removed, by kind, for the MANIFEST

    @classmethod
    def for_run(cls, facts: object = None, anonymize: bool = False) -> Redactor:
        """A redactor for one run, knowing the run's facts (host and user names...)."""
        return cls(anonymize=anonymize)

    def text(self, text: str) -> str:
        """Free text with every secret removed."""
        cleaned = redact_text(text)
        if cleaned != text:
            found = cleaned.count(REDACTED) - text.count(REDACTED)
            self.counts["secret"] = self.counts.get("secret", 0) + max(found, 1)
        return cleaned

    def summary(self) -> dict[str, int]:
        """How many values of each kind this redactor replaced so far."""
        return dict(self.counts)

    def value(self, value: object) -> object:
        """Any JSON-like value (dicts, lists, dataclasses) with every string redacted."""
        return _map_strings(value, self.text)

    def report(self, report: object) -> object:
        """The whole Report, every string in it redacted (a new Report)."""
        return _map_strings(report, self.text)


def _map_strings(value: object, fn: object) -> object:
    import dataclasses
    from enum import Enum

    if isinstance(value, Enum):
        return value
    if isinstance(value, str):
        return fn(value)  # type: ignore[operator]
    if isinstance(value, dict):
        return {key: _map_strings(item, fn) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        mapped = [_map_strings(item, fn) for item in value]
        return tuple(mapped) if isinstance(value, tuple) else mapped
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: _map_strings(getattr(value, f.name), fn)
                   for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    return value
