"""The support bundle: contents, MANIFEST, atomic writes, and reading it back.

Round trip: a bundle written by `check --facts FIXTURE --bundle` replays with
`check --facts BUNDLE` to the same findings, and `diagnose BUNDLE` names the same causes
for the facts-based findings.
"""

from __future__ import annotations

import errno
import gzip
import io
import json
import os
import re
import tarfile
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from ddp_doctor.bundle import archive as bundle_archive
from ddp_doctor.bundle.archive import TOP
from ddp_doctor.bundle.write import BundleError, write_bundle
from ddp_doctor.checklist import load_catalogue
from ddp_doctor.diagnose import scan_input
from ddp_doctor.facts.snapshot import FactRecord, Facts, FactsFileError, load_facts
from ddp_doctor.inputs import read_facts
from ddp_doctor.redact.redactor import Redactor
from ddp_doctor.runner import build_report
from ddp_doctor.smoke.launch import SmokeOptions
from ddp_doctor.smoke.run import _base_data
from tests.conftest import FACTS_DIR
from tests.support.cli import invoke
from tests.support.real_runs import GROUP as REAL_RUN_GROUP
from tests.support.smi_captures import capture

SHM = FACTS_DIR / "container_64mb_shm.json"
FIXTURES = sorted(p.stem for p in FACTS_DIR.glob("*.json"))
# Pieces of a Hugging Face token shape, joined only at run time: no secret is committed.
HF_TOKEN = "hf_" + "Q8rTzLm3VbNx7KpWc2YdHs9JfGa4UeRi6Oq1"
FACT_MEMBERS = ["MANIFEST", "report.md", "report.json", "facts.json", "packages.txt",
                "environment.txt"]


def members(path: Path) -> dict[str, bytes]:
    """Every member of a .zip or .tar.gz bundle, in archive order, top folder stripped."""
    found: dict[str, bytes] = {}
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                found[info.filename] = archive.read(info)
    else:
        with tarfile.open(path, "r:gz") as archive:
            for member in archive.getmembers():
                handle = archive.extractfile(member)
                assert handle is not None
                found[member.name] = handle.read()
    assert all(name.startswith(f"{TOP}/") for name in found), list(found)
    return {name[len(TOP) + 1:]: data for name, data in found.items()}


def codes(report: dict) -> list[str]:
    return sorted(f["code"] for f in report["findings"])


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddp-doctor: error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


@pytest.mark.parametrize("name", ["b.zip", "b.tar.gz", "b.tgz"])
def test_bundle_of_a_replayed_fixture(tmp_path, name):
    bundle = tmp_path / name
    result = invoke("check", "--facts", str(SHM), "--bundle", str(bundle),
                    "--json", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "r.md"))
    assert result.exit_code == 1, result.output
    files = members(bundle)
    assert list(files) == FACT_MEMBERS
    # The same Report as the run's own --json and --markdown: nothing re-gathered.
    assert files["report.json"] == (tmp_path / "r.json").read_bytes()
    assert files["report.md"] == (tmp_path / "r.md").read_bytes()
    snapshot = Facts.from_dict(json.loads(files["facts.json"]))
    assert snapshot["host"] == load_facts(SHM)["host"]
    assert files["packages.txt"].decode().splitlines()[2:] == [
        "numpy==1.20.3  /usr/local/lib/python3.8/dist-packages",
        "setuptools==45.2.0  /usr/lib/python3/dist-packages",
        "torch==1.8.1+cu111  /usr/local/lib/python3.8/dist-packages"]
    env_lines = files["environment.txt"].decode().splitlines()
    assert "NVIDIA_VISIBLE_DEVICES=all" in env_lines
    assert "LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64" in env_lines
    assert leftovers(tmp_path) == []


def test_manifest_lists_every_file_with_its_size_and_what_is_missing(tmp_path):
    bundle = tmp_path / "b.zip"
    assert invoke("check", "--facts", str(SHM), "--bundle", str(bundle)).exit_code == 1
    files = members(bundle)
    manifest = files["MANIFEST"].decode()
    listed = manifest.split("\nFiles\n")[1].split("\n\n")[0].splitlines()
    assert [line.split()[0] for line in listed] == FACT_MEMBERS
    for line in listed[1:]:
        name, size, unit = line.split()[:3]
        assert (int(size), unit) == (len(files[name]), "B")
    missing = dict(line.split(None, 1) for line in
                   manifest.split("\nNot included\n")[1].split("\n\n")[0].splitlines())
    assert set(missing) == {"nvidia-smi-q.txt", "nvidia-smi-topo.txt", "smoke/"}
    assert "no nvidia-smi output" in missing["nvidia-smi-q.txt"]
    assert missing["smoke/"] == "the smoke job was not run by this command"
    assert manifest.endswith("  Nothing needed redaction\n")
    assert "--anonymize: off" in manifest


def facts_with(**records: object) -> Facts:
    facts = load_facts(SHM)
    for name, value in records.items():
        facts.add(FactRecord(name, ok=True, value=value))
    return facts


def write(tmp_path: Path, facts: Facts | None, report=None, name: str = "b.zip",
          **kwargs) -> dict[str, bytes]:
    report = report if report is not None else build_report(load_catalogue(), facts)
    redactor = Redactor.for_run(facts)
    write_bundle(tmp_path / name, redactor.report(report), facts, redactor, **kwargs)
    return members(tmp_path / name)


def test_nvidia_smi_text_gathered_for_the_bundle_becomes_two_files(tmp_path):
    smi_q, topo = capture("nvidia-smi-q-bsyonline-v100.txt"), capture("topo-bsyonline-8xv100.txt")
    facts = facts_with(nvidia_smi_text={"command": "nvidia-smi", "q": smi_q, "topo": topo,
                                        "errors": {"q": None, "topo": None}})
    files = write(tmp_path, facts)
    assert files["nvidia-smi-q.txt"].decode() == smi_q
    assert files["nvidia-smi-topo.txt"].decode() == topo
    not_included = files["MANIFEST"].decode().split("\nNot included\n")[1].split("\n\n")[0]
    assert [line.split()[0] for line in not_included.splitlines()] == ["smoke/"]


def test_without_nvidia_smi_the_manifest_says_why(tmp_path):
    facts = facts_with(nvidia_smi_text={
        "command": "nvidia-smi", "q": None, "topo": None,
        "errors": {"q": "nvidia-smi: not found",
                   "topo": "not tried: nvidia-smi -q failed (not found)"}})
    files = write(tmp_path, facts)
    assert "nvidia-smi-q.txt" not in files
    manifest = files["MANIFEST"].decode()
    assert re.search(r"\n  nvidia-smi-q\.txt +nvidia-smi: not found\n", manifest)
    assert re.search(r"\n  nvidia-smi-topo\.txt +not tried: nvidia-smi -q failed \(not found\)\n",
                     manifest)


def test_secrets_in_hand_made_facts_never_reach_the_bundle(tmp_path):
    facts = facts_with(env_vars={"HF_TOKEN": HF_TOKEN, "NCCL_DEBUG": "INFO",
                                 "TORCH_HOME": f"https://alice:{HF_TOKEN[3:15]}@cache.example"})
    files = write(tmp_path, facts)
    everything = b"".join(files.values()).decode()
    assert HF_TOKEN not in everything and HF_TOKEN[3:15] not in everything
    assert "HF_TOKEN=<redacted>" in files["environment.txt"].decode()
    assert json.loads(files["facts.json"])["facts"]["env_vars"]["value"]["HF_TOKEN"] == \
        "<redacted>"
    manifest = files["MANIFEST"].decode()
    assert "Values withheld when the facts were gathered: HF_TOKEN" in manifest
    assert "\n  Secrets removed: " in manifest  # the URL credential
    assert facts["env_vars"]["HF_TOKEN"] == HF_TOKEN  # the run's own facts are untouched


def smoke_report(facts: Facts, run_dir: Path | None, ok: bool = False):
    data = _base_data(SmokeOptions(device="cpu"), "cpu", 2, 2)
    data.update(ok=ok, run_dir=str(run_dir) if run_dir else None, exit_code=1, wall_s=12.0)
    return replace(build_report(load_catalogue(), facts), smoke=data)


def fake_run_dir(tmp_path: Path) -> Path:
    run_dir = tmp_path / "ddp-doctor-smoke-x"
    (run_dir / "pkg" / "ddp_doctor").mkdir(parents=True)  # the import shim: not evidence
    (run_dir / "local0.jsonl").write_text('{"event": "phase_start", "phase": "train"}\n')
    (run_dir / "local1.jsonl").write_text('{"event": "step", "step": 1}\n')
    (run_dir / "local0.stderr").write_text(f"login with {HF_TOKEN}\n")
    (run_dir / "local1.stderr").write_text(
        "step 1\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.\n")
    (run_dir / "launcher.stderr").write_text("E0101 torch.distributed.elastic: failed\n")
    (run_dir / "launcher.stdout").write_text("")
    return run_dir


def test_smoke_files_are_bundled_redacted_and_diagnosed(tmp_path):
    facts = load_facts(SHM)
    run_dir = fake_run_dir(tmp_path)
    files = write(tmp_path, facts, smoke_report(facts, run_dir))
    smoke = [name for name in files if name.startswith("smoke/")]
    assert smoke == ["smoke/launcher.stderr", "smoke/launcher.stdout", "smoke/local0.jsonl",
                     "smoke/local0.stderr", "smoke/local1.jsonl", "smoke/local1.stderr"]
    assert HF_TOKEN not in files["smoke/local0.stderr"].decode()
    assert files["smoke/local1.jsonl"] == b'{"event": "step", "step": 1}\n'
    manifest = files["MANIFEST"].decode()
    assert "the smoke job's event file of this node's rank 1 (JSON lines" in manifest
    assert "the smoke job's stderr of this node's rank 0" in manifest
    assert "\n  Secrets removed: " in manifest  # the token in rank 0's stderr
    result = invoke("diagnose", str(tmp_path / "b.zip"), "--json", "-")
    found = codes(json.loads(result.stdout))
    assert "LOG005" in found and "HST001" in found  # the rank's OOM and the facts' /dev/shm
    # What diagnose reads as text: logs and text files, never our own report.* or MANIFEST;
    # facts.json is its facts, event files are not prose.
    scan, snapshots = scan_input(str(tmp_path / "b.zip"))[:2]
    assert scan.documents == [f"{TOP}/{name}" for name in (
        "packages.txt", "environment.txt", "smoke/launcher.stderr", "smoke/launcher.stdout",
        "smoke/local0.stderr", "smoke/local1.stderr")]
    assert [Facts.from_dict(s)["host"] for s in snapshots] == [facts["host"]]


def test_smoke_dir_given_apart_from_the_report_wins(tmp_path):
    """--anonymize may rewrite the path in the Report; the CLI passes the real one."""
    facts = load_facts(SHM)
    run_dir = fake_run_dir(tmp_path)
    report = smoke_report(facts, Path("/home/user-1/elsewhere"))
    files = write(tmp_path, facts, report, smoke_dir=str(run_dir))
    assert "smoke/local1.stderr" in files


@pytest.mark.parametrize(("smoke", "why"), [
    ({"ok": None, "skipped": "blocked by TOR001: torch cannot be imported"},
     "the smoke job was skipped: blocked by TOR001: torch cannot be imported"),
    (None, "the smoke job was not run by this command"),
])
def test_a_smoke_job_that_did_not_run_is_explained(tmp_path, smoke, why):
    facts = load_facts(SHM)
    report = replace(build_report(load_catalogue(), facts), smoke=smoke)
    manifest = write(tmp_path, facts, report)["MANIFEST"].decode()
    assert re.search(rf"\n  smoke/ +{re.escape(why)}\n", manifest)


def test_a_smoke_command_bundle_has_no_facts_and_says_so(tmp_path):
    run_dir = fake_run_dir(tmp_path)
    report = replace(smoke_report(load_facts(SHM), run_dir), results=())
    files = write(tmp_path, None, report, name="s.tar.gz")
    assert [n for n in files if not n.startswith("smoke/")] == ["MANIFEST", "report.md",
                                                                "report.json"]
    assert re.search(r"\n  facts\.json +`ddp-doctor smoke` gathers no machine facts",
                     files["MANIFEST"].decode())


def test_a_compare_bundle_names_compare_and_offers_no_replay(tmp_path):
    """Before: "`ddp-doctor smoke` gathers no machine facts" and a `check --facts` replay
    that fails on a bundle without facts.json."""
    path = tmp_path / "nodes.zip"
    done = invoke("compare", str(SHM), str(FACTS_DIR / "healthy_8x_h100_nvlink.json"),
                  "--bundle", str(path), "-q")
    assert done.exit_code == 1, done.output
    manifest = zipfile.ZipFile(path).read(f"{TOP}/MANIFEST").decode()
    assert re.search(r"\n  facts\.json +`ddp-doctor compare` gathers no facts of its own",
                     manifest)
    assert "smoke` gathers" not in manifest
    assert "check --facts <bundle>`;" not in manifest
    assert "(it holds no facts.json to replay with `check --facts`)" in manifest
    replay = invoke("check", "--facts", str(path))
    assert replay.exit_code == 2  # what the MANIFEST no longer suggests


def test_an_oversized_log_keeps_its_end(tmp_path, monkeypatch):
    monkeypatch.setattr("ddp_doctor.bundle.write.MAX_LOG_BYTES", 64)
    facts = load_facts(SHM)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "local0.stderr").write_text("".join(f"line {i:03d}\n" for i in range(100)))
    files = write(tmp_path, facts, smoke_report(facts, run_dir))
    kept = files["smoke/local0.stderr"].decode().splitlines()
    assert kept[-1] == "line 099" and kept[0].startswith("line 09") and len(kept) < 10
    assert "(last 0 MiB of 900 B)" in files["MANIFEST"].decode()


# --- never overwrite without --force; never a partial file -------------------------------

def test_an_existing_bundle_is_refused_without_force_and_left_untouched(tmp_path):
    bundle = tmp_path / "b.zip"
    bundle.write_bytes(b"the customer's earlier bundle")
    line = one_line_error(invoke("check", "--facts", str(SHM), "--bundle", str(bundle)))
    assert "already exists (add --force to overwrite it)" in line
    assert bundle.read_bytes() == b"the customer's earlier bundle"


def test_force_overwrites(tmp_path):
    bundle = tmp_path / "b.zip"
    bundle.write_bytes(b"old")
    result = invoke("check", "--facts", str(SHM), "--bundle", str(bundle), "--force")
    assert result.exit_code == 1, result.output
    assert list(members(bundle)) == FACT_MEMBERS
    assert leftovers(tmp_path) == []


def test_a_file_that_appears_during_the_run_is_not_overwritten(tmp_path, monkeypatch):
    """The CLI checked before the run; a run takes minutes; the write checks again."""
    bundle = tmp_path / "b.zip"
    real = bundle_archive._write_zip

    def racing(handle, members_, now):
        bundle.write_bytes(b"written by someone else meanwhile")
        real(handle, members_, now)

    monkeypatch.setattr(bundle_archive, "_write_zip", racing)
    line = one_line_error(invoke("check", "--facts", str(SHM), "--bundle", str(bundle)))
    assert line == f"ddp-doctor: error: --bundle {bundle}: already exists (add --force to " \
                   f"overwrite it)"
    assert bundle.read_bytes() == b"written by someone else meanwhile"
    assert leftovers(tmp_path) == []


def test_write_time_check_without_the_cli(tmp_path):
    bundle = tmp_path / "b.tgz"
    bundle.write_bytes(b"keep")
    facts = load_facts(SHM)
    with pytest.raises(BundleError, match="already exists"):
        write(tmp_path, facts, name="b.tgz")
    assert bundle.read_bytes() == b"keep"


@pytest.mark.parametrize("name", ["b.zip", "b.tar.gz"])
def test_a_full_disk_leaves_no_partial_file(tmp_path, monkeypatch, name):
    calls = []

    def full(*args, **kwargs):
        calls.append(1)
        if len(calls) > 2:  # a few members in: the archive is half written
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(*args, **kwargs)

    if name.endswith(".zip"):
        real = zipfile.ZipFile.writestr
        monkeypatch.setattr(zipfile.ZipFile, "writestr", full)
    else:
        real = tarfile.TarFile.addfile
        monkeypatch.setattr(tarfile.TarFile, "addfile", full)
    bundle = tmp_path / name
    line = one_line_error(invoke("check", "--facts", str(SHM), "--bundle", str(bundle)))
    assert line == f"ddp-doctor: error: --bundle {bundle}: cannot write: No space left on device"
    assert list(tmp_path.iterdir()) == []


def test_a_bundle_that_fails_to_write_leaves_no_report_claiming_the_run(tmp_path, monkeypatch):
    """The bundle is written before the reports: when it fails (a full disk), no --json or
    --junit file is left saying the run finished, and the exit code is 2."""
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(zipfile.ZipFile, "writestr", full)
    report, junit = tmp_path / "report.json", tmp_path / "junit.xml"
    line = one_line_error(invoke("check", "--facts", str(SHM), "--json", str(report),
                                 "--junit", str(junit), "--bundle", str(tmp_path / "b.zip")))
    assert line.endswith("cannot write: No space left on device")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("bad", "message"), [
    (("--bundle", "{tmp}/missing/b.zip"), "--bundle {tmp}/missing/b.zip: directory "
                                          "{tmp}/missing does not exist"),
    (("--bundle", "{tmp}/b.txt"), "--bundle {tmp}/b.txt: name a .zip or .tar.gz file"),
    (("--save-facts", "{tmp}/missing/f.json"), "--save-facts {tmp}/missing/f.json: directory "
                                               "{tmp}/missing does not exist"),
    (("--markdown", "{tmp}"), "--markdown {tmp}: is a directory"),
])
def test_every_output_is_checked_before_any_work(tmp_path, monkeypatch, bad, message):
    """A bad --bundle, --save-facts or report path is refused before facts are gathered,
    and the good outputs named with it are not written."""
    from ddp_doctor.app import examine

    def no_gather(*args, **kwargs):
        raise AssertionError("facts were gathered before the outputs were checked")

    monkeypatch.setattr(examine, "gather_facts", no_gather)
    good = tmp_path / "report.json"
    args = [a.format(tmp=tmp_path) for a in bad]
    line = one_line_error(invoke("check", "--json", str(good), *args))
    assert line == f"ddp-doctor: error: {message.format(tmp=tmp_path)}"
    assert not good.exists()


def test_smoke_checks_its_bundle_before_training(tmp_path, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("the smoke job started before --bundle was checked")

    monkeypatch.setattr("ddp_doctor.smoke.run.run_smoke", never)
    line = one_line_error(invoke("smoke", "--json", str(tmp_path / "r.json"), "--bundle",
                                 str(tmp_path / "b.rar")))
    assert line.endswith("name a .zip or .tar.gz file")
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_write_leaves_nothing(tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(zipfile.ZipFile, "writestr", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write(tmp_path, load_facts(SHM))
    assert list(tmp_path.iterdir()) == []


def test_a_directory_that_refuses_new_files_is_one_line(tmp_path, monkeypatch):
    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(bundle_archive.tempfile, "mkstemp", denied)
    line = one_line_error(invoke("check", "--facts", str(SHM), "--bundle",
                                 str(tmp_path / "b.zip")))
    assert line.endswith(f"cannot write in {tmp_path}: Permission denied")


def test_the_bundle_is_private_to_its_owner(tmp_path):
    write(tmp_path, load_facts(SHM))
    assert (tmp_path / "b.zip").stat().st_mode & 0o777 == 0o600


# --- reading a bundle back ---------------------------------------------------------------

def healthy_codes(report: dict) -> list[str]:
    """Codes of the findings a diagnosis of the bundle shows: those of failed and warned
    checks, which it re-derives from the facts, and every finding the recorded report
    lists, an info of a passing check too (the live H200's HST004 note)."""
    return sorted({f["code"] for c in report["checks"] if c["status"] in ("fail", "warn")
                   for f in c["findings"]} | {f["code"] for f in report["findings"]})


@pytest.mark.parametrize("fixture", FIXTURES)
def test_round_trip_check_and_diagnose(tmp_path, fixture):
    source = FACTS_DIR / f"{fixture}.json"
    bundle = tmp_path / "b.zip"
    first = invoke("check", "--facts", str(source), "--bundle", str(bundle), "--json",
                   str(tmp_path / "first.json"))
    again = invoke("check", "--facts", str(bundle), "--json", "-")
    original = json.loads((tmp_path / "first.json").read_text())
    replayed = json.loads(again.stdout)
    assert again.exit_code == first.exit_code
    assert codes(replayed) == codes(original)
    assert [(c["id"], c["status"]) for c in replayed["checks"]] == \
        [(c["id"], c["status"]) for c in original["checks"]]

    diagnosed = json.loads(invoke("diagnose", str(bundle), "--json", "-").stdout)
    assert sorted(set(codes(diagnosed)) - {"DIAG001"}) == sorted(set(healthy_codes(original)))
    assert "the bundle's facts snapshot" in diagnosed["checks"][0]["summary"]


def test_round_trip_through_tar_gz(tmp_path):
    bundle = tmp_path / "b.tar.gz"
    invoke("check", "--facts", str(SHM), "--bundle", str(bundle))
    replayed = json.loads(invoke("check", "--facts", str(bundle), "--json", "-").stdout)
    assert codes(replayed) == ["HST001"]
    assert replayed["facts_source"] == str(bundle)
    diagnosed = json.loads(invoke("diagnose", str(bundle), "--json", "-").stdout)
    assert codes(diagnosed) == ["HST001"]


def test_a_gzipped_snapshot_is_facts_too(tmp_path):
    packed = tmp_path / "facts.json.gz"
    packed.write_bytes(gzip.compress(SHM.read_bytes()))
    assert read_facts(packed)["host"] == load_facts(SHM)["host"]


@pytest.mark.parametrize(("content", "message"), [
    (lambda: _zip({"ddp-doctor-bundle/report.json": b"{}"}),
     "this archive has no ddp-doctor-bundle/facts.json"),
    (lambda: b"PK\x03\x04" + b"\x00" * 40, "cannot read the bundle"),
    (lambda: gzip.compress(b"not json"), "not valid JSON"),
])
def test_an_unusable_bundle_as_facts_is_one_line(tmp_path, content, message):
    path = tmp_path / "b.zip"
    path.write_bytes(content())
    with pytest.raises(FactsFileError, match=message):
        read_facts(path)
    line = one_line_error(invoke("check", "--facts", str(path)))
    assert message in line


def _zip(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


# --- a real smoke run: a passed run's directory is bundled, then removed ----------------

@pytest.mark.slow
@pytest.mark.spawns
@pytest.mark.xdist_group(REAL_RUN_GROUP)
def test_smoke_bundle_of_a_real_cpu_run_keeps_nothing_behind(cli_smoke_run):
    report, temp = cli_smoke_run.report, cli_smoke_run.tmpdir
    assert report["smoke"]["ok"] is True, cli_smoke_run.proc.stderr
    assert report["smoke"]["run_dir"] is None  # a passed run keeps no directory...
    assert list(temp.glob("ddp-doctor-smoke-*")) == []  # ...and the bundle's copy is gone
    files = members(cli_smoke_run.bundle)
    for rank in (0, 1):
        events = [json.loads(line) for line in files[f"smoke/local{rank}.jsonl"].splitlines()]
        assert events and all(isinstance(e, dict) for e in events)
        assert f"smoke/local{rank}.stderr" in files
    assert "facts.json" not in files and "smoke/launcher.stderr" in files
    # Diagnosed later from a ticket, the bundle says what the machine measured: ready. The
    # ranks' harmless warnings (torch without NumPy prints one) do not turn it into a fault.
    diagnosed = invoke("diagnose", str(cli_smoke_run.bundle), "--json", "-")
    assert diagnosed.exit_code == 0, diagnosed.output
    assert [f for f in json.loads(diagnosed.stdout)["findings"]
            if f["severity"] == "error"] == []


def test_the_smoke_files_of_a_hang_are_described_in_the_manifest():
    from ddp_doctor.bundle.write import _smoke_about

    assert _smoke_about("stack-rank3.txt").startswith("where rank 3 waited when the job hung")
    assert _smoke_about("local1.stacks") == \
        "the stacks this node's rank 1 dumped on SIGUSR1 (faulthandler)"
    assert _smoke_about("local0.jsonl").startswith("the smoke job's event file of this node's")
