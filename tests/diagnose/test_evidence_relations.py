"""The evidence model: relations between findings are declared beside the knowledge, each
with its reason, and one engine (diagnose/relations.py) that names no code applies them."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from ddp_doctor.categories import Category
from ddp_doctor.codebook import declared_codes
from ddp_doctor.diagnose import context, relations
from ddp_doctor.diagnose.context import ENVIRONMENTS, RELATIONS, refine
from ddp_doctor.diagnose.relations import Declared, RelationError, Relations
from ddp_doctor.logrules import RULES
from ddp_doctor.logrules.rule import Explains, ReadAs
from ddp_doctor.model import Code, Evidence, Finding, Severity

CODE_LITERAL = re.compile(r"[A-Z]{3}\d{3}")


def _code(code_id: str, category: Category = Category.UNKNOWN) -> Code:
    return Code(code_id, category, code_id, what="w", why="y", fix="f",
                severity=Severity.ERROR)


def test_the_engine_and_refine_name_no_code() -> None:
    engine = Path(relations.__file__).read_text(encoding="utf-8")
    assert CODE_LITERAL.findall(engine) == []
    for function in (refine, context._read_in_environment, context._explained,
                     context._ungated, context._made_in_container):
        assert CODE_LITERAL.findall(inspect.getsource(function)) == [], function.__name__


def test_every_relation_has_a_reason_and_names_codes_that_exist() -> None:
    known = declared_codes()
    assert RELATIONS.declared, "no relation was declared"
    for item in RELATIONS.declared:
        relation = item.relation
        assert len(relation.reason.strip()) > 40, item
        named = relation.codes if isinstance(relation, Explains) else (relation.code,
                                                                      *relation.leads)
        for code in (item.subject, *named):
            assert code == "" or code in known, (item, code)
        if isinstance(relation, ReadAs):
            assert relation.environment in {e.name for e in ENVIRONMENTS}, item


def test_every_environment_is_read_by_some_relation() -> None:
    for environment in ENVIRONMENTS:
        assert RELATIONS.readings(environment.name), environment.name


def test_the_relations_declared_on_rules_are_all_collected() -> None:
    on_rules = {(rule.code.id, relation) for rule in RULES for relation in rule.relations}
    collected = {(item.subject, item.relation) for item in RELATIONS.declared}
    assert on_rules and on_rules <= collected


def test_a_cycle_is_an_error_when_the_relations_load() -> None:
    codes = {c: _code(c) for c in ("AAA001", "AAA002", "AAA003")}
    chain = [Declared("AAA001", Explains(("AAA002",), reason="one explains two")),
             Declared("AAA002", Explains(("AAA003",), reason="two explains three"))]
    Relations(chain, codes, ())  # a chain is fine
    looped = [*chain, Declared("AAA003", ReadAs("box", reason="three reads one in a box",
                                                leads=("AAA001",)))]
    with pytest.raises(RelationError, match="cycle: AAA00"):
        Relations(looped, codes, ("box",))


@pytest.mark.parametrize("bad, message", [
    (Declared("AAA001", Explains(("AAA009",), reason="names a code nobody declared")),
     "unknown code 'AAA009'"),
    (Declared("AAA001", Explains(("AAA002",), reason="  ")), "has no reason"),
    (Declared("AAA001", ReadAs("nowhere", reason="an environment nothing detects")),
     "unknown environment 'nowhere'"),
])
def test_an_unusable_relation_is_an_error_when_the_relations_load(bad: Declared,
                                                                  message: str) -> None:
    codes = {c: _code(c) for c in ("AAA001", "AAA002")}
    with pytest.raises(RelationError, match=message):
        Relations([bad], codes, ("box",))


def test_a_reading_applies_to_its_leads_and_categories_but_never_to_its_own_code() -> None:
    codes = {"AAA001": _code("AAA001", Category.WSL_SETUP),
             "AAA002": _code("AAA002", Category.DRIVER_MISSING),
             "AAA003": _code("AAA003", Category.GPU_NOT_VISIBLE)}
    model = Relations([Declared("AAA001", ReadAs("box", reason="r" * 50,
                                                 categories=(Category.DRIVER_MISSING,))),
                       Declared("AAA003", ReadAs("box", reason="r" * 50, code="AAA002"))],
                      codes, ("box",))

    def lead(code_id: str) -> Finding:
        return Finding(codes[code_id], code_id, evidence=(Evidence("line 1", "x"),))

    read = model.reading("box", lead("AAA002"))
    assert read is not None and read.code == "AAA001"  # declared on the reading's rule
    read = model.reading("box", lead("AAA003"))
    assert read is not None and read.code == "AAA002"  # declared on the lead's rule
    assert model.reading("box", lead("AAA001")) is None


def test_a_new_rule_relation_needs_no_engine_edit() -> None:
    """A relation declared on a rule alone is collected and applied."""
    from dataclasses import replace

    from ddp_doctor.diagnose.relations import declared_on

    rule = next(r for r in RULES if not r.relations and r.code.severity is Severity.ERROR)
    target = next(r.code for r in RULES if r.code.category is Category.WSL_SETUP)
    declared = replace(rule, relations=(ReadAs("wsl", reason="r" * 50, code=target.id),))
    model = Relations(declared_on([declared]), {c.id: c for c in (rule.code, target)},
                      ("wsl",))
    found = model.reading("wsl", Finding(rule.code, rule.code.summary))
    assert found is not None and found.code == target.id and found.leads == (rule.code.id,)


_DEMO = '''
[source]
name = "demo"
repository = "https://github.com/example/demo"
version = "v1"
paths = ["demo.c"]

[[entry]]
template = "demo error: the %s link failed"
code = "{code}"
category = "{category}"
fix = "Fix the link."
{relations}
'''


def test_a_catalogue_entry_declares_its_relations_in_its_file() -> None:
    from ddp_doctor.logrules.catalogue import CatalogueError, entry_rule, read_catalogue

    code = next(r.code for r in RULES if r.catalogue)
    codes = {code.id: code}
    relations_text = '''
[[entry.explains]]
codes = ["{other}"]
reason = "the link failing explains the other"
[[entry.read_as]]
environment = "wsl"
categories = ["gpu_not_visible"]
reason = "under WSL it is WSL's"
'''.replace("{other}", code.id)
    text = _DEMO.format(code=code.id, category=code.category.value, relations=relations_text)
    rule = entry_rule(read_catalogue(text, "demo.toml", codes)[1][0])
    assert rule.relations == (
        Explains((code.id,), "the link failing explains the other"),
        ReadAs("wsl", "under WSL it is WSL's", categories=(Category.GPU_NOT_VISIBLE,)))
    without_reason = _DEMO.format(code=code.id, category=code.category.value,
                                  relations='[[entry.explains]]\ncodes = ["X"]\n')
    with pytest.raises(CatalogueError, match="needs its reason"):
        read_catalogue(without_reason, "demo.toml", codes)


@pytest.mark.slow
def test_no_corpus_finding_is_listed_before_a_cause_declared_for_it() -> None:
    """A consequence never sits above its cause: over every corpus diagnosis, no finding
    comes before a finding of a code declared to cause it (``symptom_of``, ``Explains``,
    ``ReadAs``). Two codes declared symptoms of each other are ordered by the line seen
    first, so they are left out."""
    from tests.support.corpus import corpus_reports

    causes: dict[str, set[str]] = {}
    for rule in RULES:
        for cause in rule.symptom_of:
            if cause != "*":
                causes.setdefault(rule.code.id, set()).add(cause)
    for cause, consequence in RELATIONS.edges():
        causes.setdefault(consequence, set()).add(cause)
    misplaced = []
    for path, report in corpus_reports():
        codes = [f.code.id for f in report.results[0].findings]
        misplaced += [(path.name, early, late) for i, early in enumerate(codes)
                      for late in codes[i + 1:]
                      if late in causes.get(early, ()) and early not in causes.get(late, ())]
    assert misplaced == []


# --- findings made beside the log rules meet their declared causes ---------------------------

def test_a_consequence_folds_into_its_declared_cause_at_the_better_place() -> None:
    codes = {c: _code(c) for c in ("AAA001", "BBB001", "CCC001")}
    declared = [Declared("AAA001", Explains(("BBB001",), reason="A makes B."))]
    model = Relations(declared, codes, ())
    consequence = Finding(codes["BBB001"], "B seen", severity=Severity.ERROR)
    other = Finding(codes["CCC001"], "C seen")
    cause = Finding(codes["AAA001"], "A seen", severity=Severity.WARNING)
    folded = relations.fold_explained([consequence, other, cause], model)
    assert [f.code.id for f in folded] == ["AAA001", "CCC001"]
    assert folded[0].effective_severity is Severity.ERROR  # the more severe of the two
    assert folded[0].evidence[-1].label == "consequence, BBB001"
    # without the cause in the log, the consequence stands alone, unchanged
    assert relations.fold_explained([consequence, other], model) == [consequence, other]


def test_the_transport_and_node_findings_have_their_causes_declared() -> None:
    assert RELATIONS.explainers("DIAG020") == ("LOG044",)  # IB failed -> sockets chosen
    assert RELATIONS.explainers("DIAG023") == ("NOD001",)  # NCCL versions differ -> wrong data
