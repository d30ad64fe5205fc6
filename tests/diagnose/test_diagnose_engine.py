"""The diagnose engine on its own: reading, cleaning, rank prefixes, scanning, folding.

These tests use small stand-in rules so that they pin the engine's behaviour, not the
rule table (tests/test_logrules*.py and tests/diagnose/test_diagnose_corpus.py cover the rules).
"""

from __future__ import annotations

import bz2
import gzip
import io
import lzma
import re
import tarfile
import zipfile
from pathlib import Path

import pytest

from ddp_doctor.categories import Category
from ddp_doctor.diagnose import normalize, source
from ddp_doctor.diagnose.compose import compose, nothing_matched
from ddp_doctor.diagnose.normalize import clean, text_chunks
from ddp_doctor.diagnose.rank_prefixes import group_label, split_rank
from ddp_doctor.diagnose.scan import Scanner
from ddp_doctor.diagnose.source import InputError, open_input
from ddp_doctor.model import Code, Severity
from tests.support.rules import FakeRule


def _code(code_id: str, category: Category, severity: Severity = Severity.ERROR) -> Code:
    return Code(code_id, category, f"summary of {code_id}", "what", "why", "fix",
                severity=severity)


OOM = FakeRule(_code("TST001", Category.GPU_OUT_OF_MEMORY), re.compile("CUDA out of memory",
                                                                         re.I), ("memory",))
KILLED = FakeRule(_code("TST002", Category.HOST_OUT_OF_MEMORY),
                  re.compile(r"exitcode\s*:\s*-9\b", re.I), ("exitcode",))
WATCHDOG = FakeRule(_code("TST003", Category.COLLECTIVE_TIMEOUT),
                    re.compile("Watchdog caught collective operation timeout", re.I),
                    ("timeout",), symptom_of=("*",))
CUDNN = FakeRule(_code("TST004", Category.CUDNN_FAILURE),
                 re.compile("CUDNN_STATUS_INTERNAL_ERROR", re.I), ("cudnn",),
                 symptom_of=("TST001",))
SYSTEM = FakeRule(_code("TST005", Category.NCCL_SHARED_MEMORY),
                  re.compile("unhandled system error", re.I), ("error",),
                  alternatives=("nccl_network: no usable interface",))
RULES = (OOM, KILLED, WATCHDOG, CUDNN, SYSTEM)
GATES = ("memory", "exitcode", "timeout", "cudnn", "error")


def scan_text(tmp_path: Path, data: bytes | str, name: str = "job.log", rules=RULES,
              markers=("pytorch version",)):
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    scanner = Scanner(rules, GATES, markers)
    opened = open_input(str(path))
    for document in opened.documents:
        scanner.scan(document)
    return scanner.result


# -- cleaning ------------------------------------------------------------------------------

def test_clean_keeps_what_the_terminal_showed() -> None:
    assert clean("\x1b[1;31mRuntimeError\x1b[0m: boom\n") == "RuntimeError: boom\n"
    assert clean("a\r\nb\r\n") == "a\nb\n"
    assert clean(" 10%|#    \r 50%|###  \r100%|#####|\n") == "100%|#####|\n"
    assert clean("title\x1b]0;window\x07 here\n") == "title here\n"
    assert clean("ends with cr\r\r\n") == "ends with cr\n"


def test_chunks_split_only_at_line_ends_and_decode_across_blocks() -> None:
    text = "é" * 10 + "\nsecond line\nthird"
    data = text.encode()
    blocks = [data[i:i + 3] for i in range(0, len(data), 3)]  # splits every é in half
    chunks = list(text_chunks(iter(blocks)))
    assert "".join(chunks) == text
    assert all(c.endswith("\n") for c in chunks[:-1])


def test_an_endless_progress_line_is_cut_not_held(monkeypatch) -> None:
    monkeypatch.setattr(normalize, "MAX_LINE", 1000)
    frames = "".join(f"{i:6d}%|####\r" for i in range(5000))  # 60 kB, never a newline
    blocks = [frames[i:i + 512].encode() for i in range(0, len(frames), 512)] + [b"\ndone\n"]
    chunks = list(text_chunks(iter(blocks)))
    assert max(len(c) for c in chunks) < 3000
    assert "".join(chunks).endswith("done\n")


def test_non_utf8_bytes_are_replaced_not_fatal(tmp_path: Path) -> None:
    result = scan_text(tmp_path, b"caf\xe9 \xff\xfe\nRuntimeError: CUDA out of memory.\n")
    assert result.hits["TST001"].quotes[0].line == 2


def test_utf16_with_bom_as_powershell_writes_it(tmp_path: Path) -> None:
    data = "step 1\r\nRuntimeError: CUDA out of memory.\r\n".encode("utf-16")
    result = scan_text(tmp_path, data)
    assert result.hits["TST001"].quotes[0].line == 2


# -- ranks ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("line", "rank", "rest"), [
    ("[rank3]: RuntimeError: x", "rank 3", "RuntimeError: x"),
    ("[default12]:RuntimeError: x", "rank 12", "RuntimeError: x"),
    ("0: Traceback (most recent call last):", "rank 0", "Traceback (most recent call last):"),
    ("[1,5]<stderr>:RuntimeError: x", "rank 5", "RuntimeError: x"),
    # nested prefixes are all taken off; the outermost names the rank
    ("[default1]:[rank3]: RuntimeError: x", "rank 1", "RuntimeError: x"),
    ("[rank: 2] 2: [worker4]:x", "rank 2", "x"),
    ("RuntimeError: x", None, "RuntimeError: x"),
    # the collector's prefix around them: Ray, kubectl logs --prefix, docker compose logs
    ("(RayTrainWorker pid=2345, ip=10.0.0.2) RuntimeError: x", "pid 2345", "RuntimeError: x"),
    ("(pid=77) [rank1]: RuntimeError: x", "rank 1", "RuntimeError: x"),
    ("[pod/train-worker-0/pytorch] RuntimeError: x", "train-worker-0", "RuntimeError: x"),
    ("trainer-1  | RuntimeError: x", "trainer-1", "RuntimeError: x"),
    ("| Memory | Fail - GPU: 0 |", None, "| Memory | Fail - GPU: 0 |"),
    # a table row's first cell is no compose service (another " | " follows)
    ("epoch_10 | loss 0.3 | acc 0.9", None, "epoch_10 | loss 0.3 | acc 0.9"),
    ("GPU-0 | NVIDIA A100 | 80GB", None, "GPU-0 | NVIDIA A100 | 80GB"),
])
def test_rank_prefixes(line: str, rank: str | None, rest: str) -> None:
    assert split_rank(line) == (rank, rest)


def test_nccl_prefix_names_host_and_device() -> None:
    rank, rest = split_rank("gpu-node7:1234:1290 [3] NCCL WARN Error while creating shm")
    assert rank == "gpu-node7 GPU 3"
    assert rest.startswith("gpu-node7:1234")


def test_group_label_compacts_rank_lists() -> None:
    assert group_label(["rank 0", "rank 1", "rank 2", "rank 5", "rank 7", "rank 6"]) == \
        ["ranks 0-2, 5-7"]
    assert group_label(["rank 4"]) == ["rank 4"]


# -- scanning -------------------------------------------------------------------------------

def test_eight_ranks_one_traceback_is_one_finding_with_affects(tmp_path: Path) -> None:
    log = "".join(f"[rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to "
                  f"allocate 2.00 GiB\n" for r in range(8))
    findings = compose(scan_text(tmp_path, "epoch 1\n" * 3 + log))
    assert len(findings) == 1
    finding = findings[0][0]
    assert finding.affects == ("ranks 0-7",)
    assert finding.evidence[0].label == "line 4"
    assert any(e.value == "8 in all" for e in finding.evidence)


def test_torchrun_summary_rank_is_attached_to_the_exit_code(tmp_path: Path) -> None:
    log = ("Root Cause (first observed failure):\n[0]:\n  time      : 2024-01-01_00:00:00\n"
           "  host      : node1\n  rank      : 3 (local_rank: 3)\n"
           "  exitcode  : -9 (pid: 4242)\n")
    finding = compose(scan_text(tmp_path, log))[0][0]
    assert finding.code.id == "TST002"
    assert finding.affects == ("rank 3",)
    assert finding.evidence[0].label == "line 6"


def test_watchdog_after_a_death_is_folded_into_the_death(tmp_path: Path) -> None:
    log = ("[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective "
           "operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600000 ms\n"
           "  exitcode  : -9 (pid: 4242)\n")
    findings = compose(scan_text(tmp_path, log))
    assert [f.code.id for f, _ in findings] == ["TST002"]
    folded = findings[0][0].evidence[-1]
    assert folded.label == "consequence, line 1" and "TST003" in folded.value


def test_watchdog_alone_stays_a_finding(tmp_path: Path) -> None:
    log = "[E ProcessGroupNCCL.cpp:563] Watchdog caught collective operation timeout\n"
    assert [f.code.id for f, _ in compose(scan_text(tmp_path, log))] == ["TST003"]


def test_cudnn_error_after_oom_is_the_oom(tmp_path: Path) -> None:
    log = ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB\n"
           "RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR\n")
    assert [f.code.id for f, _ in compose(scan_text(tmp_path, log))] == ["TST001"]
    alone = "RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR\n"
    assert [f.code.id for f, _ in compose(scan_text(tmp_path, alone))] == ["TST004"]


def test_alternatives_travel_with_the_finding(tmp_path: Path) -> None:
    finding = compose(scan_text(tmp_path, "NCCL error: unhandled system error\n"))[0][0]
    assert ("other possible cause", "nccl_network: no usable interface") in \
        [(e.label, e.value) for e in finding.evidence]


def test_nothing_matched_quotes_the_last_exception(tmp_path: Path) -> None:
    result = scan_text(tmp_path, "Traceback (most recent call last):\n  File x\n"
                                 "KeyError: 'boxes'\n")
    assert compose(result) == []
    finding = nothing_matched(result)
    assert finding.code.category is Category.UNKNOWN
    assert ("line 3", "KeyError: 'boxes'") in [(e.label, e.value) for e in finding.evidence]
    assert any(s.command and "ddp-doctor diagnose" in s.command for s in finding.remediation)


def test_lines_and_sections_survive_block_boundaries(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(source, "BLOCK", 64)
    log = ("noise line\n" * 50 + "PyTorch version: 2.1.0+cu121\n" + "Is debug build: False\n"
           + "key: value\n" * 20 + "RuntimeError: CUDA out of memory.\n")
    result = scan_text(tmp_path, log)
    assert result.hits["TST001"].quotes[0].line == 73
    assert result.lines == 73
    section = result.sections[0]
    assert section.first_line == 51
    assert section.lines[:2] == ["PyTorch version: 2.1.0+cu121", "Is debug build: False"]
    assert len(section.lines) == 23


# -- inputs ---------------------------------------------------------------------------------

LOG = "step 1\nRuntimeError: CUDA out of memory.\n"


@pytest.mark.parametrize("pack", [gzip.compress, bz2.compress, lzma.compress])
def test_compressed_logs_are_read_by_their_magic_not_their_name(tmp_path: Path, pack) -> None:
    result = scan_text(tmp_path, pack(LOG.encode()), name="ticket-attachment")
    assert result.hits["TST001"].quotes[0].line == 2


def test_zip_bundle_members_are_scanned_and_derived_reports_skipped(tmp_path: Path) -> None:
    path = tmp_path / "bundle.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("ddp-doctor/report.md", "CUDA out of memory (quoted by a report)\n")
        archive.writestr("ddp-doctor/smoke/rank1.log", LOG)
        archive.writestr("ddp-doctor/facts.json", '{"format": "ddp-doctor-facts"}')
        archive.writestr("ddp-doctor/core.bin", b"\x00\x01\x02")
    opened = open_input(str(path))
    scanner = Scanner(RULES, GATES)
    for document in opened.documents:
        scanner.scan(document)
    quote = scanner.result.hits["TST001"].quotes[0]
    assert (quote.document, quote.line) == ("ddp-doctor/smoke/rank1.log", 2)
    assert scanner.result.documents == ["ddp-doctor/smoke/rank1.log"]
    assert opened.facts_snapshots == [{"format": "ddp-doctor-facts"}]


def test_tar_gz_bundle(tmp_path: Path) -> None:
    path = tmp_path / "bundle.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        data = LOG.encode()
        info = tarfile.TarInfo("b/train.log")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    opened = open_input(str(path))
    scanner = Scanner(RULES, GATES)
    for document in opened.documents:
        scanner.scan(document)
    assert scanner.result.hits["TST001"].quotes[0].document == "b/train.log"


def test_stdin_is_sniffed_too() -> None:
    opened = open_input("-", stdin=io.BytesIO(gzip.compress(LOG.encode())))
    scanner = Scanner(RULES, GATES)
    for document in opened.documents:
        scanner.scan(document)
    assert "TST001" in scanner.result.hits


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: p / "missing.log", "no such file"),
    (lambda p: p, "is a directory"),
])
def test_unusable_paths_are_one_line_errors(tmp_path: Path, make, message: str) -> None:
    with pytest.raises(InputError, match=message):
        open_input(str(make(tmp_path)))


def test_binary_input_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "core"
    path.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8)
    with pytest.raises(InputError, match="binary file"):
        open_input(str(path))


def test_a_truncated_gzip_keeps_what_was_read_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "cut.log.gz"
    data = gzip.compress((LOG + "noise line\n" * 200000).encode())
    path.write_bytes(data[: len(data) // 3])
    opened = open_input(str(path))
    scanner = Scanner(RULES, GATES)
    for document in opened.documents:
        scanner.scan(document)
    assert scanner.result.hits["TST001"].quotes[0].line == 2
    assert len(opened.notes) == 1 and "ends early" in opened.notes[0]


def test_compressed_members_of_a_bundle_are_read(tmp_path: Path) -> None:
    path = tmp_path / "bundle.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("logs/rank0.log.gz", gzip.compress(LOG.encode()))
        archive.writestr("logs/core.bin", b"\x00\x01")
    opened = open_input(str(path))
    scanner = Scanner(RULES, GATES)
    for document in opened.documents:
        scanner.scan(document)
    assert scanner.result.hits["TST001"].quotes[0].document == "logs/rank0.log"
    assert opened.notes == ["logs/core.bin: skipped, not text"]


def test_a_line_longer_than_the_cap_does_not_shift_line_numbers(tmp_path: Path,
                                                                 monkeypatch) -> None:
    monkeypatch.setattr(normalize, "MAX_LINE", 4096)
    monkeypatch.setattr(source, "BLOCK", 1024)
    log = ("first\n" + "x" * 50_000 + "\n" + "frame\r" * 5000
           + "\nRuntimeError: CUDA out of memory.\n")
    result = scan_text(tmp_path, log)
    assert result.hits["TST001"].quotes[0].line == 4
    assert result.lines == 4


def test_a_bare_exception_reads_the_line_above_across_a_block_boundary(tmp_path: Path,
                                                                        monkeypatch) -> None:
    assert_rule = FakeRule(_code("TST006", Category.DDP_USAGE_ERROR),
                           re.compile(r"AssertionError: assert .*batch", re.I), ("error",))
    monkeypatch.setattr(source, "BLOCK", 64)
    head = "n\n" * (source.SNIFF // 2)  # the sniffed first block, then 64-byte blocks
    for pad in range(0, 70, 7):  # the pair falls on every side of a block boundary
        log = head + "n" * pad + "\n" + "    assert opt.batch % world == 0\nAssertionError\n"
        result = scan_text(tmp_path, log, rules=(assert_rule,))
        first = source.SNIFF // 2 + 2
        assert [q.line for q in result.hits["TST006"].quotes] == [first, first + 1], pad


def test_a_ray_workers_lines_are_read_as_that_workers(tmp_path: Path) -> None:
    """Ray forwards each worker's output to the driver behind "(Actor pid=N, ip=A)": the
    exception is read from after it, and each worker is one of the affected."""
    log = "".join(f"(RayTrainWorker pid={pid}, ip=10.0.0.{pid % 10}) RuntimeError: CUDA out of "
                  f"memory. Tried to allocate 2.00 GiB\n" for pid in (2345, 2346))
    findings = compose(scan_text(tmp_path, log))
    assert findings[0][0].affects == ("pid 2345", "pid 2346")


def test_a_line_of_many_prefix_like_cells_does_not_recurse() -> None:
    line = "a-1 | " * 3000 + "RuntimeError: boom"
    assert split_rank(line)[1].endswith("RuntimeError: boom")
    assert split_rank("(pid=1) " * 2000 + "x")[0] == "pid 1"
