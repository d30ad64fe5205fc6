"""Catalogued messages pasted without the words that gate them (``diagnose/bare_messages``).

A template that spells no gate word is read after its source's prefix; pasted bare (an issue
title, a quoted sentence) it is read only where nothing else was, and only when it spells
``catalogue.BARE_CHARS`` literal characters or more.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_doctor.diagnose.bare_messages import _BARE, MAX_LINE_CHARS
from ddp_doctor.logrules import CATALOGUES
from ddp_doctor.logrules.catalogue import (
    BARE_CHARS,
    entry_rule,
    literal_length,
    sample_line,
    template_gates,
)
from tests.support.rules import diagnosed, lead


def test_a_catalogued_message_without_its_exception_type_is_read(tmp_path: Path) -> None:
    # torch/utils/data/distributed.py raises it as a ValueError; the title holds no gate word
    found = lead(tmp_path, "Invalid rank 4, rank should be in the interval [0, 3]\n")
    assert found.code.id == "LOG057"
    assert found.evidence[0].source == "the message without the words that mark it"
    assert found.evidence[0].value == "Invalid rank 4, rank should be in the interval [0, 3]"


def test_a_bare_message_at_the_end_of_a_long_log_is_read(tmp_path: Path) -> None:
    """Past the 256 KB of a document's start the scan keeps, its last 64 KB are searched too:
    the message a job ends with follows its progress output."""
    noise = "step 1234 loss 0.5 lr 0.001 throughput 812 samples per second\n" * 6000  # 372 KB
    found = lead(tmp_path, noise + "Invalid rank 4, rank should be in the interval [0, 3]\n")
    assert found.code.id == "LOG057"
    assert found.evidence[0].label == "line 6001"


def test_a_bare_message_in_a_sentence_is_read(tmp_path: Path) -> None:
    found = lead(tmp_path, "Training stops: peer access is not supported between these two "
                           "devices, on a pair of RTX 4090s\n")
    assert found.code.id == "LOG045"
    assert found.evidence[0].source == "the message without the words that mark it"


def test_a_short_template_is_not_read_bare(tmp_path: Path) -> None:
    # CUDA's "operation not supported" (801) needs its "CUDA error: ": a file system's
    # EOPNOTSUPP says the same words
    found = lead(tmp_path, "OSError: [Errno 95] Operation not supported\n")
    assert found.code.category.value == "unknown"


@pytest.mark.parametrize("prefix", ["", "[1,0]<stderr>:", "0: ", "[default0]:"])
def test_a_log_whose_lines_a_rule_read_is_not_read_again_bare(tmp_path: Path,
                                                             prefix: str) -> None:
    # TensorFlow's dso_loader warning (LOG109, a warning) holds the loader's "libcublas.so.11:
    # cannot open shared object file", whose bare reading (LOG022, an error) must not replace
    # it, whatever launcher prefix the line carries
    found = lead(tmp_path, prefix + "W tensorflow/stream_executor/platform/default/"
                           "dso_loader.cc:64] Could not load dynamic library 'libcublas.so.11'; "
                           "dlerror: libcublas.so.11: cannot open shared object file: No such "
                           "file or directory\n")
    assert found.code.id == "LOG109"


def test_a_bare_message_leads_beside_a_warning_the_scan_read(tmp_path: Path) -> None:
    # a harmless warning the scan reads (DDP's grad-strides note, LOG092) does not hide the
    # error pasted without its exception type; each stays what it is
    found = diagnosed(tmp_path, "Invalid rank 4, rank should be in the interval [0, 3]\n"
                                "[rank0]:[W reducer.cpp:1300] Warning: Grad strides do not match "
                                "bucket view strides.\n")
    assert found[0].code.id == "LOG057"
    assert [f.code.id for f in found].count("LOG092") == 1


def test_the_sixth_of_many_warnings_a_rule_read_is_not_read_bare(tmp_path: Path) -> None:
    # the scan quotes five lines per code; every further copy is still that rule's line
    lines = [f"W dso_loader.cc:64] Could not load dynamic library '{lib}.so.11'; dlerror: "
             f"{lib}.so.11: cannot open shared object file: No such file or directory"
             for lib in ("libcudart", "libcublas", "libcublasLt", "libcufft", "libcurand",
                         "libcusolver", "libcusparse")]
    assert lead(tmp_path, "\n".join(lines) + "\n").code.id == "LOG109"


def test_a_bare_message_does_not_outrank_what_the_scan_read(tmp_path: Path) -> None:
    found = lead(tmp_path, "Invalid rank 4, rank should be in the interval [0, 3]\n"
                           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                           "2.00 GiB\n")
    assert found.code.id == "LOG005"


def test_the_most_specific_message_on_a_line_leads(tmp_path: Path) -> None:
    # Python's "[Errno 24] Too many open files" (30 literal characters, LOG110) and CUDA's
    # peer-access string (54, LOG045) on one line: the longer one names more
    found = lead(tmp_path, "[Errno 24] Too many open files; peer access is not supported between "
                           "these two devices\n")
    assert found.code.id == "LOG045"


def test_a_message_far_along_a_very_long_line_is_not_searched(tmp_path: Path) -> None:
    # the search of a line stops at bare_messages.MAX_LINE_CHARS (a 256 KB line took minutes)
    message = "Invalid rank 4, rank should be in the interval [0, 3]"
    assert lead(tmp_path, "x" * 100 + " " + message + "\n").code.id == "LOG057"
    assert lead(tmp_path, "x" * MAX_LINE_CHARS + " " + message + "\n").code.id != "LOG057"


def test_only_long_templates_without_a_gate_word_are_read_bare() -> None:
    read = skipped = 0
    for _, entries in CATALOGUES.values():
        for entry in entries:
            long_ungated = [t for t in entry.templates
                            if not template_gates(t) and literal_length(t) >= BARE_CHARS]
            pattern = entry_rule(entry).bare_message
            if long_ungated and entry.source.bare:
                read += 1
                assert pattern is not None
                for template in long_ungated:
                    assert pattern.search(sample_line(template)), template
            else:
                skipped += 1
                assert pattern is None, entry.templates
    assert read and skipped
    assert len(_BARE) == read


@pytest.mark.parametrize("line", [
    "world size (8) is not divisible by tensor model parallel size (3)",
    "peer access is not supported between these two devices",
    "Only DistributedDataParallel is supported.",
])
def test_every_bare_reading_names_its_cause(tmp_path: Path, line: str) -> None:
    found = lead(tmp_path, line + "\n")
    assert found.code.id.startswith("LOG")
    assert found.remediation
