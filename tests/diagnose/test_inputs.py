"""What users hand ``diagnose`` and what they expect back (issue 24, point 7).

NUL-padded logs are read, an endless input is a one-line error in bounded memory, a
``.gz`` cut short of any size gives what it holds and DIAG004, and ddp-doctor's own JSON
report is read as the report it is. The real command runs on real files.
"""

from __future__ import annotations

import gzip
import io
import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from ddp_doctor.diagnose import diagnose
from ddp_doctor.diagnose.source import LONGEST_LINE, InputError, open_input
from tests.conftest import FACTS_DIR

PORT_LOG = ("[rank0]: Traceback (most recent call last):\n"
            "[rank0]: RuntimeError: The server socket has failed to listen on any local "
            "network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, "
            "message: address already in use\n")


def codes(target: str) -> list[str]:
    return [f.code.id for f in diagnose(target).report.findings]


def test_a_log_padded_with_nul_bytes_is_read(tmp_path: Path) -> None:
    """Before: "looks like a binary file" for one NUL byte at the end."""
    one = tmp_path / "one.log"
    one.write_bytes(PORT_LOG.encode() + b"\x00")
    padded = tmp_path / "nfs.log"
    padded.write_bytes(PORT_LOG.encode() + b"\x00" * 100_000)
    for path in (one, padded):
        found = codes(str(path))
        assert found[0] == "LOG001", found
    # A real binary still is one: NUL bytes among control bytes, or nothing but NULs.
    core = tmp_path / "core"
    core.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 8)
    zeros = tmp_path / "zeros"
    zeros.write_bytes(b"\x00" * 20_000)
    for path in (core, zeros):
        with pytest.raises(InputError, match="binary file"):
            open_input(str(path))


def test_a_line_that_never_ends_is_refused_not_kept() -> None:
    endless = io.BytesIO(b"a" * (LONGEST_LINE + (8 << 20)))
    with pytest.raises(InputError, match="MiB without a line break"):
        diagnose("-", stdin=endless)


@pytest.mark.spawns
def test_dev_zero_is_one_line_in_bounded_memory() -> None:
    """Before: 5 GB of memory in 12 s (zipfile.is_zipfile read the whole device)."""
    limit = 1 << 30

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit * 2, limit * 2))

    done = subprocess.run([sys.executable, "-m", "ddp_doctor", "diagnose", "/dev/zero"],
                          capture_output=True, text=True, timeout=60, preexec_fn=cap)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "ddp-doctor: error: /dev/zero: looks like a binary file, not a text log (pass the "
        "log as text, a .gz of it, or a support bundle)"]


@pytest.mark.parametrize("noise_lines", [0, 200_000])
def test_a_gz_cut_short_of_any_size_gives_what_it_holds_and_diag004(tmp_path: Path,
                                                                   noise_lines: int) -> None:
    """Before: a small .gz cut short was refused ("cannot be decompressed")."""
    data = gzip.compress((PORT_LOG + "noise line\n" * noise_lines).encode())
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(data[: max(len(data) // 2, len(data) - 12)])  # the trailer and more
    found = codes(str(cut))
    assert found[0] == "LOG001", found
    assert "DIAG004" in found


def test_two_gzip_members_are_both_read(tmp_path: Path) -> None:
    path = tmp_path / "appended.log.gz"
    path.write_bytes(gzip.compress(b"epoch 1\n") + gzip.compress(PORT_LOG.encode()))
    assert codes(str(path))[0] == "LOG001"


@pytest.mark.spawns
def test_the_tools_own_json_report_is_read_as_a_report(tmp_path: Path) -> None:
    """Before: `diagnose preflight.json` read the report as text and missed DRV001."""
    report = tmp_path / "preflight.json"
    made = subprocess.run([sys.executable, "-m", "ddp_doctor", "check", "--facts",
                           str(FACTS_DIR / "no_driver.json"), "--json", str(report), "-q"],
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 1, made.stderr
    assert codes(str(report))[0] == "DRV001"
    renamed = tmp_path / "attachment.txt"  # by its bytes, not its name
    renamed.write_bytes(report.read_bytes())
    assert codes(str(renamed))[0] == "DRV001"
    assert json.loads(report.read_text())["findings"][0]["code"] == "DRV001"


def test_a_facts_snapshot_is_checked(tmp_path: Path) -> None:
    found = codes(str(FACTS_DIR / "no_driver.json"))
    assert "DRV001" in found, found


def test_json_lines_logs_are_still_text(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"msg": "start"}\n{"msg": "RuntimeError: Address already in use"}\n')
    assert "LOG001" in codes(str(path))
