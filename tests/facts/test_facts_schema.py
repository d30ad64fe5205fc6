"""docs/facts.schema.json describes the facts snapshot as the tool writes it and reads it.

Every recorded fixture, a live gather on a fake machine and the facts read from every pasted
text capture are validated; a snapshot with a misspelt key or a wrong type is rejected; the
schema's object shapes have exactly the keys of the TypedDicts in ``facts/shapes.py``; and a
snapshot saved before the rename still replays with ``--facts``.
"""

from __future__ import annotations

import copy
import json
import typing
from pathlib import Path

import jsonschema
import pytest

from ddp_doctor.facts import shapes
from ddp_doctor.facts.gather import GatherOptions, gather
from ddp_doctor.facts.snapshot import (
    FACTS_FORMAT,
    FACTS_SCHEMA_VERSION,
    LEGACY_FACTS_FORMAT,
    FactsFileError,
    load_facts,
    save_facts,
)
from ddp_doctor.textfacts import facts_from_text
from tests.conftest import FACTS_DIR, FIXTURES, load_fixture_facts
from tests.facts.test_gather import PY, v100_server
from tests.support.cli import invoke

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "docs" / "facts.schema.json").read_text(encoding="utf-8"))
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
FIXTURE_FILES = sorted(FACTS_DIR.glob("*.json"))
TEXT_CAPTURES = sorted((FIXTURES / "text").glob("*.txt"))
LEGACY = FACTS_DIR / "legacy" / "healthy_8x_v100_pcie.v1.json"
CURRENT = FACTS_DIR / "healthy_8x_v100_pcie.json"


def _leaves(error: jsonschema.ValidationError) -> list[jsonschema.ValidationError]:
    """The errors inside an anyOf (a fact's value is its shape or null), not the anyOf."""
    if not error.context:
        return [error]
    inner = [leaf for e in error.context for leaf in _leaves(e)]
    return [e for e in inner if e.validator != "type" or e.validator_value != "null"]


def errors(snapshot: dict) -> list[str]:
    found = [leaf for e in VALIDATOR.iter_errors(snapshot) for leaf in _leaves(e)]
    return sorted(f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
                  for e in found)


def test_schema_is_a_valid_draft_2020_12_schema_naming_the_tool_and_the_format():
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert "ddp-doctor" in SCHEMA["$id"]
    assert SCHEMA["properties"]["format"]["const"] == FACTS_FORMAT
    assert SCHEMA["properties"]["schema_version"]["const"] == FACTS_SCHEMA_VERSION


@pytest.mark.parametrize("path", FIXTURE_FILES, ids=lambda p: p.stem)
def test_every_fixture_matches_the_schema(path):
    assert errors(json.loads(path.read_text(encoding="utf-8"))) == []


def test_a_snapshot_saved_by_the_tool_matches_the_schema(tmp_path):
    target = tmp_path / "facts.json"
    save_facts(load_fixture_facts("wsl2_rtx4070"), target)
    assert errors(json.loads(target.read_text(encoding="utf-8"))) == []


def test_a_live_gather_matches_the_schema():
    """Every probe's real output (on a fake 8x V100 server) has the declared shapes."""
    facts = gather(v100_server(), GatherOptions(python=PY, torch_timeout_s=30, nvml_timeout_s=10))
    assert facts.errors() == {}
    assert errors(json.loads(json.dumps(facts.to_dict()))) == []


@pytest.mark.parametrize("path", TEXT_CAPTURES, ids=lambda p: p.stem)
def test_facts_read_from_pasted_text_match_the_schema(path):
    result = facts_from_text(path.read_text(encoding="utf-8"))
    assert result is not None
    assert errors(json.loads(json.dumps(result.facts.to_dict()))) == []


@pytest.mark.parametrize(("where", "change", "expected"), [
    (("nvml", "gpus", 0), {"memroy_total": 1}, "Additional properties are not allowed"),
    (("torch", "cuda"), {"device_count": "8"}, "is not of type 'integer', 'null'"),
    (("host", "shm"), {"total": None}, "is not of type 'integer'"),
    (("os", "wsl"), {"is_wsl": "no"}, "is not of type 'boolean'"),
])
def test_the_schema_rejects_a_misspelt_key_or_a_wrong_type(where, change, expected):
    snapshot = json.loads(CURRENT.read_text(encoding="utf-8"))
    broken = copy.deepcopy(snapshot)
    fact, *path = where
    target = broken["facts"][fact]["value"]
    for key in path:
        target = target[key]
    target.update(change)
    found = errors(broken)
    assert len(found) == 1 and expected in found[0], found


def test_the_schema_rejects_another_format_and_a_malformed_record():
    snapshot = json.loads(CURRENT.read_text(encoding="utf-8"))
    assert errors({**snapshot, "format": "some-other-tool"})
    snapshot["facts"]["nvml"].pop("ok")
    assert errors(snapshot)


def _typed_dicts() -> dict[str, type]:
    return {name: value for name, value in vars(shapes).items()
            if isinstance(value, type) and issubclass(value, dict)
            and hasattr(value, "__total__")}


def test_every_declared_shape_is_in_the_schema_with_exactly_its_keys():
    defs = SCHEMA["$defs"]
    for name, shape in _typed_dicts().items():
        if name in ("FactRecordData", "FactsFile"):  # the file itself, not a $def
            continue
        assert name in defs, name
        assert list(defs[name]["properties"]) == list(typing.get_type_hints(shape)), name
        assert defs[name].get("additionalProperties") is False, name
        assert shape.__total__ is False, f"{name}: any key can be absent"
    record = defs["record"]["properties"]
    assert set(record) == set(typing.get_type_hints(shapes.FactRecordData))
    assert set(SCHEMA["properties"]) == set(typing.get_type_hints(shapes.FactsFile))


def test_every_fact_shape_is_the_schema_of_that_facts_value():
    facts = SCHEMA["properties"]["facts"]["properties"]
    assert set(facts) == set(shapes.FACT_SHAPES)
    for name, shape in shapes.FACT_SHAPES.items():
        value = facts[name]["properties"]["value"]["anyOf"]
        assert {"type": "null"} in value, name
        if isinstance(shape, type) and issubclass(shape, dict) and hasattr(shape, "__total__"):
            assert {"$ref": f"#/$defs/{shape.__name__}"} in value, name
        else:  # env_vars: name -> value
            assert {"type": "object", "additionalProperties": {"type": "string"}} in value


# ---------------------------------------------------------------- the pre-rename format


def test_the_legacy_fixture_is_the_current_machine_in_the_old_format():
    legacy = json.loads(LEGACY.read_text(encoding="utf-8"))
    current = json.loads(CURRENT.read_text(encoding="utf-8"))
    assert legacy["format"] == LEGACY_FACTS_FORMAT != FACTS_FORMAT
    assert {**legacy, "format": FACTS_FORMAT} == current


def test_a_legacy_snapshot_loads_with_the_same_facts():
    legacy, current = load_facts(LEGACY), load_facts(CURRENT)
    assert legacy.to_dict() == current.to_dict()  # saved again, it is a current snapshot


def _codes_and_statuses(path: Path) -> tuple[list[str], dict[str, str]]:
    result = invoke("check", "--facts", str(path), "--json", "-")
    assert result.exit_code in (0, 1), result.output
    report = json.loads(result.stdout)
    return ([f["code"] for f in report["findings"]],
            {c["id"]: c["status"] for c in report["checks"]})


def test_check_on_a_legacy_snapshot_gives_the_codes_of_the_current_one():
    legacy = _codes_and_statuses(LEGACY)
    assert legacy == _codes_and_statuses(CURRENT)
    assert legacy[0]  # the fixture's machine has findings (GPUs held by other jobs)


def test_a_format_string_of_neither_kind_is_still_refused(tmp_path):
    snapshot = json.loads(LEGACY.read_text(encoding="utf-8"))
    path = tmp_path / "other.json"
    path.write_text(json.dumps({**snapshot, "format": "other-doctor-facts"}), encoding="utf-8")
    with pytest.raises(FactsFileError, match="not a ddp-doctor facts file"):
        load_facts(path)
