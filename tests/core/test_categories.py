"""The failure-category contract: the enum and docs/categories.md agree."""

from __future__ import annotations

import re
from pathlib import Path

from ddp_doctor.categories import Category

REPO = Path(__file__).resolve().parents[2]
CATEGORIES_DOC = REPO / "docs" / "categories.md"

# The released contract. Adding an id is a deliberate change of this list; renaming or
# removing one breaks every pipeline keyed on it, so it must never happen.
CONTRACT = [
    "driver_missing",
    "driver_too_old",
    "driver_library_mismatch",
    "torch_missing",
    "torch_cpu_only",
    "torch_arch_unsupported",
    "cuda_init_failure",
    "gpu_not_visible",
    "cudnn_failure",
    "gpu_out_of_memory",
    "nccl_shared_memory",
    "nccl_p2p",
    "nccl_network",
    "collective_timeout",
    "nccl_unavailable",
    "rendezvous_port_in_use",
    "rendezvous_failure",
    "ddp_usage_error",
    "host_out_of_memory",
    "wsl_setup",
    "hardware_fault",
    "package_conflict",
    "node_mismatch",
    "performance_degraded",
    "command_failed",  # issue 24: RUN001 was "unknown" while its log named the cause
    "requirement_unchecked",  # issue 24: POL006 was "unknown"
    "unknown",
]

_ROW = re.compile(r"^\|\s*`(?P<id>[^`]+)`\s*\|(?P<text>.*)\|\s*$")


def documented_categories() -> list[tuple[str, str]]:
    """(id, description) for every row of the table in docs/categories.md, in order."""
    rows = []
    in_table = False
    for line in CATEGORIES_DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("|"):
            if re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", line.strip()):
                in_table = True
                continue
            match = _ROW.match(line)
            if in_table:
                assert match, f"table row without a `category` id: {line!r}"
                rows.append((match["id"], match["text"].strip()))
        else:
            in_table = False
    return rows


def test_enum_is_exactly_the_contract():
    assert [c.value for c in Category] == CONTRACT
    assert len(CONTRACT) == 27 == len(set(CONTRACT))


def test_ids_are_lower_snake_case_and_render_as_themselves():
    for category in Category:
        assert re.fullmatch(r"[a-z]+(_[a-z0-9]+)*", category.value)
        assert str(category) == category.value


def test_doc_table_documents_every_category_once():
    rows = documented_categories()
    ids = [i for i, _ in rows]
    assert len(ids) == len(set(ids)), "a category is documented twice"
    assert set(ids) == {c.value for c in Category}


def test_doc_table_is_in_enum_order_with_a_description_each():
    rows = documented_categories()
    assert [i for i, _ in rows] == [c.value for c in Category]
    for category_id, text in rows:
        assert len(text) > 20, f"{category_id} has no real description"


def test_doc_stands_alone():
    text = CATEGORIES_DOC.read_text(encoding="utf-8")
    assert "shared/" not in text and "failure-categories.md" not in text



def test_every_category_describes_itself_as_the_doc_table_does():
    """``explain CATEGORY`` prints Category.description: it is the table's text, word for word."""
    documented = dict(documented_categories())
    for category in Category:
        assert category.description == documented[category.value], category.value
    assert len({c.description for c in Category}) == len(Category), "two categories share text"


def test_what_the_tool_knows_is_not_tagged_unknown():
    """Issue 24: a failed command, an unchecked requirement and a job past its deadline
    have categories of their own, not the one that says the cause is not known."""
    from ddp_doctor.checklist import load_catalogue
    from ddp_doctor.codebook import all_codes

    codes = all_codes(load_catalogue())
    assert codes["RUN001"].category is Category.COMMAND_FAILED
    assert codes["POL006"].category is Category.REQUIREMENT_UNCHECKED
    assert codes["SMK003"].category is Category.PERFORMANCE_DEGRADED
    assert codes["RUN003"].category is Category.PERFORMANCE_DEGRADED
    assert "above" not in Category.UNKNOWN.description  # explain prints it on its own
