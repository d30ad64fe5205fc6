"""docs/report.schema.json describes the JSON report exactly as the code writes it.

Real reports are validated: the one of this sandbox's recorded facts, one per facts
fixture, and one with a crashed check and a plugin that failed to load. Reports that
break the contract must be rejected.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from ddp_doctor.categories import Category
from ddp_doctor.checklist import load_catalogue
from ddp_doctor.facts.snapshot import FactRecord, Facts, load_facts
from ddp_doctor.model import Code, Evidence, Finding, Severity, Status, Step
from ddp_doctor.registry import Catalogue, CheckSpec, PluginFailure, Summary
from ddp_doctor.report.json import render_json
from ddp_doctor.runner import build_report
from tests.conftest import FACTS_DIR

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "docs" / "report.schema.json").read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
FIXTURES = sorted(FACTS_DIR.glob("*.json"))


def assert_valid(report_dict: dict) -> None:
    errors = sorted(VALIDATOR.iter_errors(report_dict), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(
        f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors
    )


def as_written(report, strict: bool = False) -> dict:
    """The report as a reader gets it: through the JSON renderer, then parsed."""
    return json.loads(render_json(report, strict=strict))


def test_schema_is_a_valid_draft_2020_12_schema():
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_schema_category_enum_is_the_category_enum():
    enum = SCHEMA["$defs"]["finding"]["properties"]["category"]["enum"]
    assert enum == [c.value for c in Category]


def test_schema_status_and_severity_enums_follow_the_model():
    assert SCHEMA["$defs"]["check"]["properties"]["status"]["enum"] == [s.value for s in Status]
    assert SCHEMA["$defs"]["finding"]["properties"]["severity"]["enum"] == [
        s.value for s in Severity
    ]
    assert SCHEMA["properties"]["counts"]["required"] == [s.value for s in Status]


def test_sandbox_report_is_valid():
    facts = load_facts(FACTS_DIR / "sandbox_cpu_container.json")
    report = build_report(load_catalogue(), facts,
                          facts_source="tests/fixtures/facts/sandbox_cpu_container.json")
    data = as_written(report)
    assert_valid(data)
    assert data["findings"], "the sandbox has no GPU: it must report something"
    assert_valid(as_written(report, strict=True))
    assert_valid(report.to_dict())  # the dict itself, before any JSON round trip


def test_there_are_facts_fixtures():
    assert FACTS_DIR / "sandbox_cpu_container.json" in FIXTURES


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_every_facts_fixture_gives_a_valid_report(path):
    report = build_report(load_catalogue(), load_facts(path), facts_source=str(path))
    assert_valid(as_written(report))
    assert_valid(as_written(report, strict=True))


# A catalogue built by hand: every kind of result the runner can produce.
ERR = Code("TST101", Category.DRIVER_MISSING, "err", "w", "w", "w",
           docs_url="https://example.org/TST101")
WARN = Code("TST102", Category.NCCL_SHARED_MEMORY, "warn", "w", "w", "w",
            severity=Severity.WARNING)
INFO = Code("TST103", Category.UNKNOWN, "info", "w", "w", "w", severity=Severity.INFO)


def _failing(facts):
    yield Finding(ERR, "no driver", evidence=(Evidence("nvidia-smi", "not found", "PATH"),),
                  remediation=(Step("Install the driver.", command="sudo apt install x",
                                    url="https://example.org/driver"), Step("Reboot.")),
                  affects=("gpu:0", "gpu:1"))


def _warning(facts):
    yield Finding(WARN, "small /dev/shm", evidence=(Evidence("/dev/shm", "64 MiB"),))
    yield Finding(INFO, "just so you know", severity=Severity.INFO)
    yield Summary("shm is small")


def _crashing(facts):
    raise RuntimeError("boom inside a check")
    yield  # pragma: no cover


def _blocked(facts):
    yield Summary("never runs")  # pragma: no cover


def _needs_absent(facts):
    yield Summary("never runs")  # pragma: no cover


def _passing(facts):
    yield Summary("all good")


def hand_built_catalogue() -> Catalogue:
    def spec(id, func, codes=(), **kw):
        return CheckSpec(id=id, title=id.title(), area="test", func=func, codes=codes, **kw)

    return Catalogue(
        specs=[
            spec("t.fail", _failing, (ERR,)),
            spec("t.warn", _warning, (WARN, INFO)),
            spec("t.crash", _crashing),
            spec("t.blocked", _blocked, blocked_by=("t.fail",)),
            spec("t.needs", _needs_absent, requires=("absent",)),
            spec("t.pass", _passing),
        ],
        failures=[
            PluginFailure(
                "acme (acme_gpu_checks.swap)",
                'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
                "ModuleNotFoundError: No module named 'acme_gpu_checks'\n",
            )
        ],
    )


def hand_built_report():
    facts = Facts()
    facts.add(FactRecord("present", ok=True, value={}))
    facts.add(FactRecord("absent", ok=False, error="probe timed out after 90 s"))
    return build_report(hand_built_catalogue(), facts, facts_source="/tmp/customer facts.json")


def test_report_with_crashed_check_and_failed_plugin_is_valid():
    data = as_written(hand_built_report())
    assert_valid(data)
    statuses = {c["id"]: c["status"] for c in data["checks"]}
    assert statuses == {
        "plugin:acme (acme_gpu_checks.swap)": "error",
        "t.fail": "fail",
        "t.warn": "warn",
        "t.crash": "error",
        "t.blocked": "skip",
        "t.needs": "skip",
        "t.pass": "pass",
    }
    assert data["counts"] == {"pass": 1, "warn": 1, "fail": 1, "skip": 2, "error": 2}
    assert data["probe_errors"] == {"absent": "probe timed out after 90 s"}
    assert [f["severity"] for f in data["findings"]] == ["error", "warning", "info"]
    assert data["exit_code"] == 1


def test_report_where_only_the_doctor_failed_is_valid():
    catalogue = hand_built_catalogue()
    catalogue.specs = [s for s in catalogue.specs if s.id in ("t.crash", "t.pass")]
    data = as_written(build_report(catalogue, Facts()))
    assert_valid(data)
    assert (data["verdict"], data["exit_code"]) == ("doctor error", 3)


# Reports that break the contract.

@pytest.fixture(scope="module")
def valid_report() -> dict:
    data = as_written(hand_built_report())
    assert_valid(data)
    return data


def _mutated(report: dict, mutate) -> dict:
    data = copy.deepcopy(report)
    mutate(data)
    return data


def _set(path, value):
    def mutate(data):
        *parents, last = path
        target = data
        for key in parents:
            target = target[key]
        target[last] = value
    return mutate


def _delete(path):
    def mutate(data):
        *parents, last = path
        target = data
        for key in parents:
            target = target[key]
        del target[last]
    return mutate


INVALID = {
    "unknown category": _set(["findings", 0, "category"], "cosmic_rays"),
    "unknown category in a check": _set(["checks", 1, "findings", 0, "category"], "cosmic_rays"),
    "missing remediation": _delete(["findings", 0, "remediation"]),
    "missing remediation in a check": _delete(["checks", 1, "findings", 0, "remediation"]),
    "lower-case code": _set(["findings", 0, "code"], "tst101"),
    "code without digits": _set(["findings", 0, "code"], "TST"),
    "unknown severity": _set(["findings", 0, "severity"], "fatal"),
    "unknown status": _set(["checks", 0, "status"], "crashed"),
    "step without command key": _delete(["findings", 0, "remediation", 0, "command"]),
    "numeric url": _set(["findings", 0, "remediation", 0, "url"], 3),
    "extra finding key": _set(["findings", 0, "colour"], "red"),
    "extra top-level key": _set(["extra"], 1),
    "evidence without source": _delete(["findings", 0, "evidence", 0, "source"]),
    "affects not strings": _set(["findings", 0, "affects"], [1]),
    "unknown verdict": _set(["verdict"], "fine"),
    "exit code 2": _set(["exit_code"], 2),
    "schema version 2": _set(["schema_version"], 2),
    "count not an integer": _set(["counts", "pass"], 1.5),
    "missing count": _delete(["counts", "skip"]),
    "probe error not a string": _set(["probe_errors", "absent"], None),
    "negative duration": _set(["checks", 0, "duration_s"], -1),
    "missing checks": _delete(["checks"]),
}


@pytest.mark.parametrize("mutate", INVALID.values(), ids=INVALID.keys())
def test_report_breaking_the_contract_is_rejected(valid_report, mutate):
    broken = _mutated(valid_report, mutate)
    assert not VALIDATOR.is_valid(broken)


def test_unknown_category_and_missing_remediation_are_named_in_the_error(valid_report):
    broken = _mutated(valid_report, _set(["findings", 0, "category"], "cosmic_rays"))
    with pytest.raises(jsonschema.ValidationError, match="cosmic_rays"):
        VALIDATOR.validate(broken)
    broken = _mutated(valid_report, _delete(["findings", 0, "remediation"]))
    with pytest.raises(jsonschema.ValidationError, match="'remediation' is a required property"):
        VALIDATOR.validate(broken)


def test_golden_full_report_is_valid():
    """The hand-built report of the golden tests, which has every kind of element."""
    from tests.report.test_render_golden import full_report

    assert_valid(as_written(full_report()))
