"""Torch's Flight Recorder: its variables for a job, the in-rank hook that dumps on request,
reading real dumps (JSON and pickled, tests/fixtures/flight, SOURCES.md there) and judging
them (HNG007-HNG010), in ``run`` and in ``diagnose``."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from ddp_doctor.diagnose import diagnose
from ddp_doctor.forensics.flight import (
    DIR_VARIABLE,
    HOOK_VARIABLE,
    REQUEST,
    as_json,
    flight_environment,
    hook_dir,
    read_dump,
    read_folder,
)
from ddp_doctor.forensics.flight_verdict import flight_findings

FLIGHT = Path(__file__).resolve().parents[1] / "fixtures" / "flight"


def test_json_dumps_are_read_collective_by_collective():
    rank0, rank1 = read_folder(FLIGHT / "barrier")
    assert (rank0.rank, rank1.rank, rank0.world) == (0, 1, [0, 1])
    last0, last1 = rank0.in_group("default_pg")[-1], rank1.in_group("default_pg")[-1]
    assert (last0.seq, last0.name, last0.completed, last0.sizes) == (5, "all_reduce", False,
                                                                      ((1, 4),))
    assert (last1.seq, last1.name, last1.completed) == (5, "barrier", False)
    assert rank0.last("default_pg", completed=True).seq == 4


def test_ranks_in_different_collectives_at_one_number_are_a_mismatch():
    [finding] = flight_findings(read_folder(FLIGHT / "barrier"))
    assert finding.code.id == "HNG007" and finding.category.value == "ddp_usage_error"
    assert finding.title == ("Collective #5 was called with different collectives: rank 0 "
                             "#5 all_reduce [1, 4] Float against rank 1 #5 barrier")
    assert finding.affects == ("rank:1",)
    assert finding.evidence[1].value.startswith(
        "last completed #4 all_reduce [1] Float; waits in #5 barrier (scheduled, not "
        "completed)")


def test_a_rank_that_never_reached_the_collective_is_named():
    [finding] = flight_findings(read_folder(FLIGHT / "dataloader"))
    assert finding.code.id == "HNG008" and finding.affects == ("rank:1",)
    assert finding.title == ("Rank 1 never called collective #5 all_reduce [1, 4] Float that "
                             "rank 0 waits in: its last collective is #4 all_reduce "
                             "(completed)")


def test_a_rank_with_no_dump_because_it_ended_is_named():
    rank0 = read_folder(FLIGHT / "dataloader")[0]
    [finding] = flight_findings([rank0], gone=[1])
    assert finding.code.id == "HNG008" and finding.affects == ("rank:1",)
    assert finding.title.endswith("that rank 0 waits in: its process had ended")
    assert ("rank 1", "no Flight Recorder dump: its process had ended") in [
        (e.label, e.value) for e in finding.evidence]


def test_every_rank_in_the_same_collective_called_alike():
    records = read_folder(FLIGHT / "barrier")
    records[1].ops[-1] = records[0].ops[-1]  # rank 1 calls the all_reduce rank 0 waits in
    [finding] = flight_findings(records)
    assert finding.code.id == "HNG009" and finding.category.value == "collective_timeout"
    assert finding.title.startswith("Every rank (2 ranks) waits in collective #5 all_reduce")


def test_a_different_size_at_the_same_number_is_a_mismatch():
    records = read_folder(FLIGHT / "barrier")
    same = records[0].ops[-1]
    records[1].ops[-1] = type(same)(**{**same.__dict__, "sizes": ((1, 8),)})
    [finding] = flight_findings(records)
    assert finding.code.id == "HNG007"
    assert "different sizes or dtypes" in finding.title and "[1, 8]" in finding.title


def test_pickled_dumps_are_read_as_plain_data_and_code_is_refused(tmp_path):
    data = (FLIGHT / "single-rank.pkl").read_bytes()
    record = read_dump("nccl_trace_rank_0", data)
    assert record.why is None and record.rank == 0
    assert [(o.seq, o.name, o.sizes) for o in record.ops] == [(1, "all_reduce", ((2, 3),)),
                                                               (2, "barrier", ())]
    assert json.loads(as_json(record) or "")["entries"][0]["profiling_name"] == \
        "gloo:all_reduce"
    marker = tmp_path / "ran"
    evil = pickle.dumps({"entries": [], "version": "2.10",
                         "x": _Evil(f"touch {marker}")}, protocol=2)
    refused = read_dump("fr-rank3.pkl", evil)
    assert refused.rank == 3 and "not plain data, refused" in (refused.why or "")
    assert not marker.exists()


class _Evil:
    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):  # what a hostile "dump" would hold: a call on load
        return (os.system, (self.command,))


def test_the_environment_turns_the_recorder_on_and_keeps_the_jobs_choices(tmp_path):
    env = flight_environment(str(tmp_path), {"PYTHONPATH": "/mine"})
    assert env["TORCH_FR_BUFFER_SIZE"] == "2000"
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert env["TORCH_FR_DUMP_TEMP_FILE"] == str(tmp_path / "nccl_trace_rank_")
    assert env["PYTHONPATH"] == f"{hook_dir()}{os.pathsep}/mine"
    assert env[DIR_VARIABLE] == str(tmp_path) and env[HOOK_VARIABLE].endswith("flight.py")
    assert "TORCH_FR_BUFFER_SIZE" not in flight_environment(
        str(tmp_path), {"TORCH_FR_BUFFER_SIZE": "50"})


@pytest.mark.spawns
def test_the_start_up_hook_answers_a_request_and_keeps_the_jobs_sitecustomize(tmp_path):
    """A rank started with the hook on PYTHONPATH: its own sitecustomize still runs, and a
    request is answered (here before any process group: the dump says so)."""
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import os\nos.environ['OWN_SITE'] = 'ran'\n")
    env = {**os.environ, **flight_environment(str(tmp_path), {"PYTHONPATH": str(own)}),
           "RANK": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", "import os, time; print(os.environ.get('OWN_SITE'), "
         "flush=True); time.sleep(30)"], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ran"
        (tmp_path / REQUEST).write_text("now\n")
        deadline = time.monotonic() + 10
        while not (tmp_path / "fr-rank1.json").exists():
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait()
    [record] = read_folder(tmp_path)
    assert record.rank == 1 and "had not joined a process group" in (record.why or "")
    [finding] = flight_findings([record])
    assert finding.code.id == "HNG010"


def test_diagnose_reads_a_folder_of_dumps_to_the_same_verdict(tmp_path):
    report = diagnose(str(FLIGHT / "dataloader")).report
    lead = report.results[0].findings[0]
    assert (lead.code.id, lead.affects) == ("HNG008", ("rank:1",))
    assert lead.title.startswith("Rank 1 never called collective #5 all_reduce")


def test_diagnose_reads_dumps_in_a_zip_pickled_or_json(tmp_path):
    archive = tmp_path / "dumps.zip"
    with zipfile.ZipFile(archive, "w") as out:
        for rank in (0, 1):
            out.write(FLIGHT / "barrier" / f"fr-rank{rank}.json", f"traces/fr-rank{rank}.json")
        out.writestr("traces/notes.txt", "the job hung after step 2\n")
    lead = diagnose(str(archive)).report.results[0].findings[0]
    assert (lead.code.id, lead.affects) == ("HNG007", ("rank:1",))
    single = tmp_path / "single.zip"
    with zipfile.ZipFile(single, "w") as out:
        out.write(FLIGHT / "single-rank.pkl", "nccl_trace_rank_0")
    # A pickle is read as a dump (every collective completed: nothing to blame), not
    # refused as a member that is not text.
    findings = diagnose(str(single)).report.results[0].findings
    assert [f.code.id for f in findings] == ["DIAG001"], [f.title for f in findings]


def test_pickled_and_json_dumps_of_one_hang_read_the_same():
    pickled = read_dump("fr-trace-rank1", (FLIGHT / "barrier" / "fr-trace-rank1").read_bytes())
    as_text = read_dump("fr-rank1.json", (FLIGHT / "barrier" / "fr-rank1.json").read_bytes())
    assert pickled.why is None and pickled.rank == 1
    assert [(o.seq, o.name, o.sizes, o.completed) for o in pickled.ops] == \
        [(o.seq, o.name, o.sizes, o.completed) for o in as_text.ops]
    assert pickled.groups == [""]  # gloo names no group in torch 2.13


def test_torchs_analyser_is_not_started_on_dumps_it_cannot_key(monkeypatch):
    """Torch 2.13's analyser fails on gloo's unnamed groups (SOURCES.md): no child, no
    words, and the verdict stands on ddp-doctor's own reading."""
    from ddp_doctor.forensics import flight_analyser

    def refuse(*args, **kwargs):
        raise AssertionError(f"the analyser was started: {args}")

    monkeypatch.setattr(flight_analyser.subprocess, "run", refuse)
    assert flight_analyser.torch_analysis(FLIGHT / "barrier", sys.executable) is None
    assert flight_analyser.torch_analysis(FLIGHT / "dataloader", sys.executable) is None


def test_runs_bundle_carries_the_stacks_and_dumps_redacted(tmp_path):
    """``run --bundle``: the hung ranks' stacks and Flight Recorder dumps go in under
    run/, through the same redactor as every other file (a token in a thread's command
    line, a home path with --anonymize)."""
    from datetime import datetime, timezone

    from ddp_doctor import __version__
    from ddp_doctor.bundle.write import bundle_members
    from ddp_doctor.model import Report
    from ddp_doctor.redact.redactor import Redactor

    token = "hf_" + "Q8rTzLm3VbNx7KpWc2YdHs9JfGa4UeRi6Oq1"
    (tmp_path / "stack-rank1.txt").write_text(
        f"rank 1 (pid 42): read before the job was stopped (py-spy)\nProcess 42: python "
        f"train.py --hub-token {token}\nThread 42 (idle): \"MainThread\"\n"
        "    read_sample_file (/home/alice/planted_hang.py:49)\n")
    (tmp_path / "fr-rank1.json").write_bytes((FLIGHT / "dataloader" / "fr-rank1.json")
                                             .read_bytes())
    (tmp_path / REQUEST).write_text("1\n")
    report = Report(tool_version=__version__, results=(),
                    created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    members = {m.name: m for m in bundle_members(report, None, Redactor(anonymize=True),
                                                 run_files=str(tmp_path))}
    assert {"run/stack-rank1.txt", "run/fr-rank1.json"} <= set(members), set(members)
    assert REQUEST not in " ".join(members)
    stack = members["run/stack-rank1.txt"].data.decode()
    assert token not in stack and "/home/alice" not in stack
    assert "read_sample_file" in stack
    dump = json.loads(members["run/fr-rank1.json"].data)
    assert dump["entries"][-1]["profiling_name"] == "gloo:all_reduce"
    assert "Flight Recorder dump" in members["run/fr-rank1.json"].about
