"""``ddp-doctor diagnose`` as a user runs it: files, stdin, reports, exit codes, bad input."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

pytestmark = pytest.mark.spawns

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "docs" / "report.schema.json").read_text())

OOM_LOG = (
    "Epoch 3/100  GPU_mem 23.1G  box_loss 0.0412\n"
    "[rank1]: Traceback (most recent call last):\n"
    "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB. GPU 1 "
    "has a total capacity of 23.64 GiB of which 512.00 MiB is free.\n"
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB. GPU 0 "
    "has a total capacity of 23.64 GiB of which 498.00 MiB is free.\n"
    "[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation "
    "timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE) ran for 600031 milliseconds before "
    "timing out.\n"
)


def run(*args: str, stdin: bytes | None = None, cwd: Path | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ddp_doctor", "diagnose", *args],
                          input=stdin.decode() if stdin is not None else None,
                          capture_output=True, text=True, timeout=120, cwd=cwd)


@pytest.mark.slow
def test_a_log_file_gives_the_cause_with_lines_ranks_and_exit_1(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(OOM_LOG)
    done = run(str(log), "--json", "-")
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    jsonschema.validate(data, SCHEMA)
    assert data["facts_source"] == f"log: {log}"
    lead = data["findings"][0]
    assert lead["category"] == "gpu_out_of_memory"
    assert lead["affects"] == ["ranks 0, 1"]
    labels = [e["label"] for e in lead["evidence"]]
    assert labels[0] == "line 3"
    assert any(label.startswith("consequence, line 5") for label in labels), labels
    assert [f["category"] for f in data["findings"]].count("collective_timeout") == 0


@pytest.mark.slow
def test_stdin_and_gz_give_the_same_findings(tmp_path: Path) -> None:
    packed = tmp_path / "attachment.bin"
    packed.write_bytes(gzip.compress(OOM_LOG.encode()))
    from_file = json.loads(run(str(packed), "--json", "-").stdout)
    from_stdin = json.loads(run("-", "--json", "-", stdin=OOM_LOG.encode()).stdout)
    assert [f["code"] for f in from_file["findings"]] == \
        [f["code"] for f in from_stdin["findings"]]
    assert from_stdin["facts_source"] == "log: stdin"


@pytest.mark.slow
def test_console_and_markdown_reports(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text(OOM_LOG)
    console = run(str(log))
    assert console.returncode == 1
    assert "CUDA out of memory" in console.stdout
    assert "ranks 0, 1" in console.stdout
    markdown = run(str(log), "--markdown", "-").stdout
    assert markdown.startswith("#")
    assert "line 3" in markdown


@pytest.mark.slow
def test_nothing_recognised_is_unknown_with_what_to_attach(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("Traceback (most recent call last):\n  File \"ds.py\", line 9\n"
                   "KeyError: 'boxes'\n")
    done = run(str(log), "--json", "-")
    assert done.returncode == 0
    data = json.loads(done.stdout)
    lead = data["findings"][0]
    assert (lead["code"], lead["category"], lead["severity"]) == \
        ("DIAG001", "unknown", "warning")
    assert {"label": "line 3", "value": "KeyError: 'boxes'"}.items() <= \
        lead["evidence"][1].items()
    assert run(str(log), "--strict").returncode == 1


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: str(p / "nope.log"), "no such file"),
    (lambda p: str(p), "is a directory"),
    (lambda p: (p / "core").write_bytes(b"\x7fELF\x00\x00" * 100) and str(p / "core"),
     "binary file"),
    (lambda p: (p / "empty.log").write_text("\n  \n") and str(p / "empty.log"),
     "empty input"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, make, message: str) -> None:
    done = run(make(tmp_path))
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddp-doctor: error: "), done.stderr
    assert message in lines[0]


def test_empty_stdin_is_one_line_and_exit_2() -> None:
    done = run("-", stdin=b"")
    assert done.returncode == 2
    assert "stdin: empty input" in done.stderr


def test_help_explains_the_command() -> None:
    done = subprocess.run([sys.executable, "-m", "ddp_doctor", "diagnose", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    assert "PATH|-" in done.stdout and "collect_env" in done.stdout


@pytest.mark.slow
def test_tokens_in_a_log_are_never_quoted(tmp_path: Path) -> None:
    token = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"
    log = tmp_path / "train.log"
    log.write_text(f"$ HF_TOKEN={token} torchrun --nnodes=2 train.py\n"
                   f"RuntimeError: CUDA out of memory (while pushing to https://user:{token}"
                   f"@huggingface.co)\n")
    for option in ("--json", "--markdown"):
        done = run(str(log), option, "-")
        assert done.returncode == 1
        assert token not in done.stdout
    assert token not in run(str(log)).stdout


@pytest.mark.slow
def test_warnings_only_is_said_as_such_and_exits_0(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("[W socket.cpp:601] [c10d] The client socket has failed to connect to "
                   "[node1]:29500 (errno: 111 - Connection refused).\nEpoch 1/10 done\n")
    done = run(str(log))
    assert done.returncode == 0
    assert "Warnings only, no failure cause found (exit code 0)" in done.stdout
    data = json.loads(run(str(log), "--json", "-").stdout)
    assert data["checks"][0]["summary"].startswith("no failure cause found; warnings: LOG054")
