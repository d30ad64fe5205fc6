"""What the log rules read in one line and what ``diagnose`` makes of a whole text: the
helpers every rule test uses, so each test file states only its lines and expectations."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ddp_doctor.diagnose import diagnose
from ddp_doctor.logrules import match_text
from ddp_doctor.model import Code, Finding
from tests.support.corpus import LOGS


@dataclass(frozen=True)
class FakeRule:
    """A rule with only what the scanner reads, for engine tests with rules of their own."""

    code: Code
    pattern: re.Pattern[str]
    anchors: tuple[str, ...]
    steps: tuple = ()
    symptom_of: tuple[str, ...] = ()
    alternatives: tuple[str, ...] = ()
    decide: tuple = ()


def first_code(text: str) -> str | None:
    """The code of the rule ``match_text`` ranks first for ``text``; None when none matches."""
    matches = match_text(text)
    return matches[0].rule.code.id if matches else None


def matched_codes(text: str) -> set[str]:
    """Every rule code ``match_text`` finds in ``text``."""
    return {m.rule.code.id for m in match_text(text)}


def diagnosed(tmp_path: Path, text: str) -> list[Finding]:
    """The log diagnosis's findings for ``text`` written to a file, lead first."""
    path = tmp_path / "job.log"
    path.write_text(text, encoding="utf-8")
    return list(diagnose(str(path)).report.results[0].findings)


def lead(tmp_path: Path, text: str) -> Finding:
    """The lead finding of the log diagnosis of ``text``."""
    return diagnosed(tmp_path, text)[0]


def lead_reading(tmp_path: Path, text: str) -> tuple[str, str]:
    """The lead's code and category for ``text``: one line, or a whole log ending in a newline
    (the final newline is added when missing)."""
    found = lead(tmp_path, text if text.endswith("\n") else text + "\n")
    return found.code.id, found.code.category.value


def assert_leads_on_its_own_line(tmp_path: Path, line: str, code: str) -> None:
    """``code`` is the first rule ``match_text`` reads in ``line``, and the engine's lead."""
    assert match_text(line)[0].rule.code.id == code
    assert log_codes(tmp_path, line)[0] == code


def assert_not_read_so(tmp_path: Path, line: str, code: str) -> None:
    """Neither ``match_text`` nor the engine reads ``code`` in ``line`` (a near miss)."""
    assert code not in [m.rule.code.id for m in match_text(line)]
    assert code not in log_codes(tmp_path, line)


def log_codes(tmp_path: Path, text: str) -> list[str]:
    """The log-rule codes the streaming engine finds in ``text`` as a one-line file, lead
    first (not the similar-thread and summary findings diagnose adds)."""
    path = tmp_path / "job.log"
    path.write_text(text + "\n", encoding="utf-8")
    return [f.code.id for r in diagnose(str(path)).report.results for f in r.findings
            if f.code.id.startswith("LOG")]


def corpus_lead(name: str) -> Finding:
    """The lead finding of a corpus log (tests/data/logs)."""
    return diagnose(str(LOGS / name)).report.results[0].findings[0]
