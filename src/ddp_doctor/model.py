"""The one data model every part of ddp-doctor speaks.

Checks produce ``Finding`` objects, the runner wraps them into ``CheckResult`` objects,
and the renderers turn a ``Report`` into text. Keeping these plain, immutable and
serialisable is what lets a report be rendered five ways from one run, saved, and
compared in golden-file tests.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Union

from ddp_doctor.categories import Category
from ddp_doctor.wording import count

REPORT_SCHEMA_VERSION = 1


class Severity(str, Enum):
    """How much a finding matters for starting a multi-GPU job."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}


class Status(str, Enum):
    """Outcome of one check, never set by a check itself: ``status_of`` derives pass, warn
    and fail from the findings; the runner sets skip and error for checks that did not run."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


class Family(str, Enum):
    """Which part of ddp-doctor reports a code; the id's letters say it.

    ``codes`` imports each family's modules to list every code, and the docs group them by
    family, so a reader sees at once whether a code comes from a check (before anything
    runs), the launch plan, the smoke job, a log, ``diagnose`` itself or the CI policy.
    """

    CHECK = "check"  # a check over gathered facts, built-in or a plugin
    PLAN = "plan"  # a check of the launch plan given with --gpus/--batch/--workers
    SMOKE = "smoke"  # the smoke-training job
    LOG = "log"  # a log rule (smoke job stderr and ``diagnose``)
    DIAGNOSE = "diagnose"  # ``diagnose`` judging a whole log
    POLICY = "policy"  # the CI policy's requirements
    RUN = "run"  # ``ddp-doctor run`` supervising the user's own job
    NODES = "nodes"  # the nodes of one job compared (``compare``, the multi-node smoke)
    HANG = "hang"  # where the ranks of a hung job wait (``forensics``: run, smoke, diagnose)

    def __str__(self) -> str:
        return self.value


FAMILY_PREFIXES: dict[str, Family] = {
    "PLN": Family.PLAN, "SMK": Family.SMOKE, "LOG": Family.LOG, "DIAG": Family.DIAGNOSE,
    "POL": Family.POLICY, "RUN": Family.RUN, "NOD": Family.NODES, "HNG": Family.HANG,
}
"""Id prefixes that name a family; every other prefix (DRV, TOR, a plugin's own) is a check's."""


def family_of(code_id: str) -> Family:
    """The family an id belongs to, read from its letters ("SMK002" -> smoke)."""
    prefix = code_id.rstrip("0123456789")
    return FAMILY_PREFIXES.get(prefix, Family.CHECK)


@dataclass(frozen=True)
class Code:
    """A stable finding code and the explanation ``ddp-doctor explain`` prints.

    The category belongs to the code, not to the finding, so the two can never drift
    apart. ``what``/``why``/``fix`` are the fixed sections of the explanation.
    """

    id: str
    category: Category
    summary: str
    what: str
    why: str
    fix: str
    severity: Severity = Severity.ERROR
    docs_url: str | None = None

    @property
    def family(self) -> Family:
        return family_of(self.id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.id,
            "family": self.family.value,
            "category": self.category.value,
            "severity": self.severity.value,
            "summary": self.summary,
            "what": self.what,
            "why": self.why,
            "fix": self.fix,
            "docs_url": self.docs_url,
        }


@dataclass(frozen=True)
class Evidence:
    """One observed fact that supports a finding, with where it was observed."""

    label: str
    value: str
    source: str = ""

    def to_dict(self) -> dict[str, str]:
        return {"label": self.label, "value": self.value, "source": self.source}


@dataclass(frozen=True)
class Step:
    """One remediation step: what to do, and the exact command where one exists."""

    text: str
    command: str | None = None
    url: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        return {"text": self.text, "command": self.command, "url": self.url}


@dataclass(frozen=True)
class Finding:
    """A problem (or notable fact) found by a check, with proof and a way out."""

    code: Code
    title: str
    evidence: tuple[Evidence, ...] = ()
    remediation: tuple[Step, ...] = ()
    severity: Severity | None = None
    affects: tuple[str, ...] = ()
    docs_url: str | None = None
    ignored: str | None = None  # the policy's reason: still shown, no longer judged

    @property
    def category(self) -> Category:
        return self.code.category

    @property
    def effective_severity(self) -> Severity:
        return self.severity or self.code.severity

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code.id,
            "category": self.category.value,
            "severity": self.effective_severity.value,
            "title": self.title,
            "evidence": [e.to_dict() for e in self.evidence],
            "remediation": [s.to_dict() for s in self.remediation],
            "affects": list(self.affects),
            "docs_url": self.docs_url or self.code.docs_url,
            **({"ignored": self.ignored} if self.ignored is not None else {}),
        }


FailOnWarnings = Union[bool, tuple[str, ...]]
"""Which warnings fail like errors: all (True), none (False), or those code ids."""


def _fails(finding: Finding, fail_on_warnings: FailOnWarnings) -> bool:
    severity = finding.effective_severity
    if severity is Severity.ERROR:
        return True
    if severity is not Severity.WARNING:
        return False
    return fail_on_warnings is True or (isinstance(fail_on_warnings, tuple)
                                        and finding.code.id in fail_on_warnings)


def status_of(findings: Iterable[Finding], fail_on_warnings: FailOnWarnings = False) -> Status:
    """The status findings earn: the one place severity turns into pass, warn or fail.

    FAIL when a judged finding is an error, or a warning that ``fail_on_warnings`` (the
    policy's ``fail-on-warnings``, or --strict) makes fail; WARN when one is a warning;
    PASS otherwise (info findings and none at all). Findings a policy ignores are shown but
    not judged. The checks, the smoke job, ``diagnose``, the policy's own requirements and
    the report's verdict all call this, so a severity cannot mean one thing in one place
    and another elsewhere. SKIP and ERROR never come from findings: the runner sets them
    for a check that did not run or crashed.
    """
    judged = [f for f in findings if f.ignored is None]
    if any(_fails(f, fail_on_warnings) for f in judged):
        return Status.FAIL
    if any(f.effective_severity is Severity.WARNING for f in judged):
        return Status.WARN
    return Status.PASS


@dataclass(frozen=True)
class CheckResult:
    """What one check concluded: its derived status, findings and timing."""

    check_id: str
    title: str
    area: str
    status: Status
    summary: str
    findings: tuple[Finding, ...] = ()
    skip_reason: str | None = None
    error: str | None = None
    duration_s: float = 0.0
    command: str | None = None  # a command to copy, from the check's Summary

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.check_id,
            "title": self.title,
            "area": self.area,
            "status": self.status.value,
            "summary": self.summary,
            "command": self.command,
            "skip_reason": self.skip_reason,
            "error": self.error,
            "duration_s": round(self.duration_s, 4),
            "findings": [f.to_dict() for f in self.findings],
        }


@dataclass(frozen=True)
class Report:
    """Everything one run concluded; the single input of every renderer."""

    tool_version: str
    created_at: str
    results: tuple[CheckResult, ...]
    facts_source: str = "live"
    environment: dict[str, Any] = field(default_factory=dict)
    probe_errors: dict[str, str] = field(default_factory=dict)
    smoke: dict[str, Any] | None = None  # the smoke-training job's results, when it ran
    nodes: dict[str, Any] | None = None  # the nodes compared (``compare``, multi-node smoke)
    # Set by a CI policy file (policy.py): where it came from, and which warnings fail the
    # run like errors do (True: all of them; a tuple: those codes).
    policy_file: str | None = None
    fail_on_warnings: FailOnWarnings = False
    # What ``run`` or ``compare`` established, in their own words, whichever way it went
    # ("the command succeeded after 0.4 s", "node1 differs in 2 fields"): neither trains
    # on this machine's GPUs, so their verdict says this rather than "ready".
    outcome: str | None = None
    # The exit status the process ends with when it is not ``exit_code`` (``run`` passes
    # on the command's own: 3 when the command exited 3, 124 at --timeout).
    exit_status: int | None = None

    @property
    def findings(self) -> list[Finding]:
        """All findings, root causes first: errors before warnings, in check order; those a
        policy ignores come last."""
        found = [f for r in self.results for f in r.findings]
        return sorted(found, key=lambda f: (f.ignored is not None, -f.effective_severity.rank))

    def count(self, status: Status) -> int:
        return sum(1 for r in self.results if r.status is status)

    def is_problem(self, finding: Finding, strict: bool = False) -> bool:
        """Whether this finding makes the run fail: an error, or a warning under --strict or
        the policy's ``fail-on-warnings``; never a finding the policy ignores."""
        return status_of([finding], True if strict else self.fail_on_warnings) is Status.FAIL

    def exit_code(self, strict: bool = False) -> int:
        """0 ready, 1 problems found, 3 the doctor itself failed (a check crashed).

        Problems outrank a crashed check: a user with a missing driver needs to hear
        about the driver first. Findings a policy ignores never count; warnings count
        under --strict or the policy's ``fail-on-warnings``.
        """
        if status_of(self.findings) is Status.FAIL:
            return 1
        if self.count(Status.ERROR):
            return 3
        if status_of(self.findings, True if strict else self.fail_on_warnings) is Status.FAIL:
            return 1
        return 0

    @property
    def cpu_fallback(self) -> bool:
        """The smoke job wanted GPUs, found none and trained on the CPU: GPU training was not
        proven, so the run can never be called ready."""
        proved = (self.smoke or {}).get("proved") or {}
        return bool(proved.get("cpu_fallback"))

    @property
    def kind(self) -> str:
        """Which command made the report, read from its source: "run", "compare", "log"
        (``diagnose``) or "checks" (``check``, ``doctor``, ``smoke``)."""
        for kind in ("run", "compare", "log"):
            if self.facts_source.startswith(f"{kind}: "):
                return kind
        return "checks"

    @property
    def gpu_training(self) -> bool:
        """The smoke job trained with DDP on GPUs: the one proof of "ready for training"."""
        return bool(((self.smoke or {}).get("proved") or {}).get("gpu_training"))

    @property
    def ignored_errors(self) -> list[str]:
        """The codes of errors a policy ignored: without the policy the run would fail."""
        return list(dict.fromkeys(f.code.id for f in self.findings if f.ignored is not None
                                  and f.effective_severity is Severity.ERROR))

    def verdict(self, strict: bool = False) -> str:
        """The verdict as a short fixed phrase (the JSON report's enum), naming what was
        established: "ready" only where the smoke job trained on the GPUs it was given or
        on the device it was asked for; a passed ``check`` trained nothing."""
        code = self.exit_code(strict)
        if code:
            return {1: "problems found", 3: "doctor error"}[code]
        if self.cpu_fallback:
            return "passed on CPU only"
        if self.kind == "run":
            return "command succeeded"
        if self.kind == "compare":
            return "nodes agree"
        if self.kind == "log":
            return "no failure cause found"
        if self.trained:  # the smoke job trained, where it was asked to, without an error
            return "ready"
        return "no problems found"

    @property
    def trained(self) -> bool:
        """The smoke job ran its training (it was not skipped); whether it passed is the
        exit code's business."""
        return self.smoke is not None and not self.smoke.get("skipped")

    def proved(self, strict: bool = False) -> str:
        """One sentence saying what the run established, for the JSON report's ``proved``
        and the verdict line: what was tried, and what was not."""
        if self.outcome is not None:
            return self.outcome
        code = self.exit_code(strict)
        if code == 3:
            return "a check crashed, so the machine was not fully examined"
        judged = [f for f in self.findings if self.is_problem(f, strict)]
        if code == 1:
            errors = sum(1 for f in judged if f.effective_severity is Severity.ERROR)
            rest = len(judged) - errors
            return (f"{count(errors, 'error')} found" if not rest else
                    f"{count(errors, 'error')} and {count(rest, 'failing warning')} found")
        if self.kind == "log":
            return "the log shows no known failure cause"
        proved = (self.smoke or {}).get("proved") or {}
        if self.cpu_fallback:
            return "the smoke job trained on the CPU only; GPU training was not proven"
        if self.trained:
            ranks = proved.get("world_size") or (self.smoke or {}).get("ranks")
            device = proved.get("device") or (self.smoke or {}).get("device")
            where = "the GPUs" if device == "cuda" else f"{device or 'its device'}, as asked"
            backend = proved.get("backend") or (self.smoke or {}).get("backend")
            return (f"the smoke job trained with DDP on {where}: "
                    f"{count(ranks, 'rank') if isinstance(ranks, int) else 'its ranks'}"
                    + (f", {backend}" if backend else ""))
        warned = sum(1 for f in self.findings if f.ignored is None
                     and f.effective_severity is Severity.WARNING)
        noted = f" ({count(warned, 'warning')})" if warned else ""
        ignored = self.ignored_errors
        if ignored:
            return (f"no problems left after the policy ignored {', '.join(ignored)}{noted}; "
                    "nothing was trained")
        checks = sum(1 for r in self.results if r.status is not Status.SKIP)
        return (f"{count(checks, 'check')} found no errors{noted}; nothing was trained"
                if warned else f"{count(checks, 'check')} found no problems; nothing was "
                "trained")

    def to_dict(self, strict: bool = False) -> dict[str, Any]:
        data = {
            "schema_version": REPORT_SCHEMA_VERSION,
            "tool": "ddp-doctor",
            "tool_version": self.tool_version,
            "created_at": self.created_at,
            "facts_source": self.facts_source,
            "verdict": self.verdict(strict),
            "proved": self.proved(strict),
            "exit_code": self.exit_code(strict),
            "counts": {s.value: self.count(s) for s in Status},
            "environment": self.environment,
            "probe_errors": self.probe_errors,
            "findings": [f.to_dict() for f in self.findings],
            "checks": [r.to_dict() for r in self.results],
        }
        if self.smoke is not None:
            data["smoke"] = self.smoke
        if self.nodes is not None:
            data["nodes"] = self.nodes
        if self.exit_status is not None:
            data["exit_status"] = self.exit_status
        if self.policy_file is not None:
            fail = self.fail_on_warnings
            data["policy"] = {"file": self.policy_file,
                              "fail_on_warnings": list(fail) if isinstance(fail, tuple) else fail}
        return data
