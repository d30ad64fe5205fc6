"""gather(): every probe once, side by side, none able to sink the others; and deadlines."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from ddp_doctor import __version__
from ddp_doctor.facts.gather import GatherOptions, gather
from ddp_doctor.facts.nvml import collect_nvml
from ddp_doctor.facts.seam import CommandResult, run_with_deadline
from tests.facts.test_probe_torch import HEALTHY
from tests.support.fakes import FakeEnv, FakePsutil
from tests.support.smi_captures import capture, nvml_from_smi_table, parse_smi_q

PY = "/opt/venv/bin/python"
NVML_ARGV = (sys.executable, "-m", "ddp_doctor.facts.nvml")
GIB = 1024**3
MIB = 1024**2
ALL_FACTS = {"python", "torch", "nvml", "os", "host", "driver", "env_vars", "interconnect",
             "wsl", "kernel_log"}
JOURNAL_ARGV = ("journalctl", "-k", "-b", "--no-pager", "-o", "short-iso")
HEALTHY_JOURNAL = (Path(__file__).parents[1] / "fixtures" / "kernel_log"
                   / "kernel-log-journal-healthy.txt").read_text(encoding="utf-8")

V100_NVML = collect_nvml(nvml_from_smi_table(
    "nvidia-smi-bsyonline-8xv100.txt", full_name="Tesla V100-PCIE-32GB",
    details={1: parse_smi_q(capture("nvidia-smi-q-bsyonline-v100.txt")).gpus[0]}))
DRIVER_VERSION_470 = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  470.129.06  Thu May 12 22:52:02 UTC 2022\n"
    "GCC version:  gcc version 9.4.0 (Ubuntu 9.4.0-1ubuntu1~20.04.1) \n"
)
BUS_IDS = ["0000:1b:00.0", "0000:1c:00.0", "0000:1d:00.0", "0000:1e:00.0",
           "0000:3d:00.0", "0000:3f:00.0", "0000:40:00.0", "0000:41:00.0"]


def v100_server(**overrides) -> FakeEnv:
    """The 8x V100 server of the bsyonline captures, every source the probes read filled in."""
    files = {
        "/proc/version": "Linux version 5.4.0-150-generic (buildd@lcy02-amd64-010) (gcc version "
                         "9.4.0 (Ubuntu 9.4.0-1ubuntu1~20.04.1)) #167-Ubuntu SMP",
        "/proc/driver/nvidia/version": DRIVER_VERSION_470,
        "/proc/modules": "nvidia_uvm 1048576 2 - Live 0x0000000000000000 (POE)\n"
                         "nvidia 35282944 122 nvidia_uvm, Live 0x0000000000000000 (POE)\n",
        "/proc/1/cgroup": "12:pids:/init.scope\n0::/init.scope\n",
        "/sys/fs/cgroup/memory.max": "max\n",
        "/usr/bin/nvidia-smi": "",
        "/dev/nvidiactl": "", "/dev/nvidia-uvm": "",
        **{f"/dev/nvidia{i}": "" for i in range(8)},
    }
    links = {}
    for address in BUS_IDS:
        base = f"/sys/bus/pci/devices/{address}"
        files |= {f"{base}/vendor": "0x10de\n", f"{base}/class": "0x030200\n",
                  f"{base}/device": "0x1db6\n"}
        links[f"{base}/driver"] = "../../../bus/pci/drivers/nvidia"
    env = FakeEnv(
        files=files, links=links, dirs={"/dev/shm"},
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "0,1",
             "NCCL_DEBUG": "INFO", "HF_TOKEN": "hf_" + "Q8rTzLm3VbNx7KpWc2YdHs9JfGa4UeRi6Oq1"},
        plat={"system": "Linux", "release": "5.4.0-150-generic", "version": "#167-Ubuntu SMP",
              "machine": "x86_64", "node": "gpu-v100", "python": "3.11.9"},
        release={"id": "ubuntu", "name": "Ubuntu", "version": "20.04",
                 "pretty": "Ubuntu 20.04.6 LTS"},
        fake_psutil=FakePsutil(memory_total=376 * GIB, memory_available=350 * GIB,
                               cpu_logical=96, cpu_physical=48,
                               disks={"/dev/shm": (188 * GIB, 188 * GIB), "/": (1800 * GIB,
                                                                              900 * GIB)}),
        commands=[
            ((PY, "-c"), CommandResult((PY, "-c", "..."), 0, HEALTHY, "", duration_s=4.0)),
            (NVML_ARGV, CommandResult(NVML_ARGV, 0, json.dumps(V100_NVML) + "\n", "",
                                      duration_s=0.4)),
            (JOURNAL_ARGV, CommandResult(JOURNAL_ARGV, 0, HEALTHY_JOURNAL, "", duration_s=0.1)),
        ],
    )
    for name, value in overrides.items():
        setattr(env, name, value)
    return env


def test_gather_collects_all_eight_facts():
    env = v100_server()
    facts = gather(env, GatherOptions(python=PY, torch_timeout_s=30, nvml_timeout_s=10))
    assert set(facts.records) == ALL_FACTS
    assert facts.errors() == {}
    assert facts["python"]["executable"] == PY
    assert facts["torch"]["build"]["cuda"] == "12.4"
    assert facts["torch"]["probe"]["completed"] is True
    assert facts["nvml"]["driver_version"] == "470.129.06"
    assert len(facts["nvml"]["gpus"]) == 8
    assert facts["os"]["kernel"] == "5.4.0-150-generic"
    assert facts["os"]["wsl"]["is_wsl"] is False
    assert facts["wsl"] == {"is_wsl": False}
    assert facts["host"]["rendezvous_port"]["in_use"] is False
    assert facts["host"]["shm"]["total"] == 188 * GIB
    assert facts["host"]["cpu_logical"] == 96
    assert facts["driver"]["module_version"] == "470.129.06"
    assert [g["address"] for g in facts["driver"]["pci_gpus"]] == BUS_IDS
    assert facts["env_vars"] == {"CUDA_VISIBLE_DEVICES": "0,1", "HF_TOKEN": "<redacted>",
                                 "NCCL_DEBUG": "INFO",
                                 "PATH": "/usr/local/bin:/usr/bin:/bin"}
    assert facts.meta["target_python"] == PY
    assert facts.meta["tool_version"] == __version__
    assert facts["kernel_log"]["source"] == " ".join(JOURNAL_ARGV)
    assert facts["kernel_log"]["events"] == []
    # One interpreter probe, one NVML child, one journalctl; nothing else runs.
    assert len(env.calls) == 3
    assert NVML_ARGV in env.calls and JOURNAL_ARGV in env.calls
    assert any(call[:2] == (PY, "-c") for call in env.calls)
    # The snapshot is plain JSON all the way down.
    assert json.loads(json.dumps(facts.to_dict()))["facts"]["nvml"]["ok"] is True


def test_a_probe_that_raises_is_an_unavailable_fact_and_the_rest_survive():
    class NoMeminfo(FakePsutil):
        def virtual_memory(self):
            raise FileNotFoundError(2, "No such file or directory", "/proc/meminfo")

    env = v100_server(fake_psutil=NoMeminfo())
    facts = gather(env, GatherOptions(python=PY))
    assert set(facts.records) == ALL_FACTS
    host = facts.records["host"]
    assert host.ok is False
    assert host.value is None
    assert host.error.startswith(
        "FileNotFoundError: [Errno 2] No such file or directory: '/proc/meminfo'")
    assert facts.errors().keys() == {"host"}
    assert facts.why_unavailable("host").startswith("fact 'host' could not be gathered: ")
    for name in ALL_FACTS - {"host"}:
        assert facts.available(name), name


class HungCwd(FakePsutil):
    """statvfs of the working directory never returns, as on a hung NFS/Lustre mount."""

    def __init__(self, release: threading.Event, **kw):
        super().__init__(**kw)
        self.release = release

    def disk_usage(self, path):
        if path != "/dev/shm":
            self.release.wait(60)
        return super().disk_usage(path)


def test_an_in_process_probe_past_its_deadline_is_a_failed_fact_not_a_hang():
    release = threading.Event()
    env = v100_server(fake_psutil=HungCwd(release, memory_total=376 * GIB,
                                          disks={"/dev/shm": (188 * GIB, 188 * GIB)}))
    start = time.monotonic()
    try:
        facts = gather(env, GatherOptions(python=PY, in_process_timeout_s=0.3))
    finally:
        release.set()
    # The probe hangs 60 s: ending well before that proves the 0.3 s deadline (a margin of
    # 100x for a loaded machine; before: "< 5 s").
    assert time.monotonic() - start < 30
    host = facts.records["host"]
    assert host.ok is False
    assert host.error == "the host probe did not finish within 0.3 s (a hung mount?)"
    assert set(facts.records) == ALL_FACTS
    for name in ALL_FACTS - {"host"}:
        assert facts.available(name), name


HUNG_FOREVER = """
import sys, threading
sys.path.insert(0, {root!r})
from tests.support.fakes import FakePsutil
from tests.facts.test_gather import PY, v100_server
from ddp_doctor.facts.gather import GatherOptions, gather

class Forever(FakePsutil):
    def disk_usage(self, path):
        if path != "/dev/shm":
            threading.Event().wait()  # never returns
        return super().disk_usage(path)

facts = gather(v100_server(fake_psutil=Forever()), GatherOptions(python=PY,
                                                                 in_process_timeout_s=0.2))
print(facts.records["host"].error)
"""


@pytest.mark.spawns
def test_a_probe_stuck_for_good_does_not_keep_the_doctor_from_exiting():
    """The stuck thread is a daemon: the interpreter exits without joining it."""
    import subprocess
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-c", HUNG_FOREVER.format(root=root)],
                          capture_output=True, text=True, timeout=60, cwd=root)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "the host probe did not finish within 0.2 s (a hung mount?)"


def test_a_child_probe_whose_parent_side_raises_still_yields_records():
    env = v100_server()
    env.commands = [c for c in env.commands if c[0] != NVML_ARGV]  # FakeEnv will raise
    facts = gather(env, GatherOptions(python=PY))
    nvml = facts.records["nvml"]
    assert nvml.ok is False
    assert nvml.error.startswith("UnexpectedCommand: FakeEnv was not told about command")
    assert facts.available("torch") and facts.available("driver")


def test_a_hung_torch_probe_is_an_observation_not_a_lost_fact():
    hung = CommandResult((PY, "-c", "..."), -15, "", "", timed_out=True, duration_s=90.0)
    env = v100_server()
    env.commands[0] = ((PY, "-c"), hung)
    facts = gather(env, GatherOptions(python=PY))
    assert facts.records["python"].ok is False
    assert facts.records["torch"].error == (
        f"could not run the probe in {PY}: {PY}: no answer within 90s, killed")
    assert facts.available("nvml")


def test_the_in_process_probes_start_once_the_torch_probe_is_starting(monkeypatch):
    """The torch probe's thread gets its child going before the in-process probes are
    imported and started (their imports would hold the GIL it needs): with its script slow
    to read, the in-process probes still come after it, and the caller's event is set by
    the time the child is run."""
    from ddp_doctor.facts import torch_probe

    order: list[str] = []
    starting = threading.Event()
    source = torch_probe.probe_script_source()

    def slow_source() -> str:
        time.sleep(0.3)  # far longer than starting every other probe takes
        return source

    class Recording(FakeEnv):
        def run(self, argv, timeout, env=None, input_text=None):
            if tuple(argv[:2]) == (PY, "-c"):
                order.append(f"torch probe run, starting set: {starting.is_set()}")
            return super().run(argv, timeout, env, input_text)

        def platform(self):
            order.append("in-process probe")
            return super().platform()

    monkeypatch.setattr(torch_probe, "probe_script_source", slow_source)
    env = v100_server()
    env.__class__ = Recording
    facts = gather(env, GatherOptions(python=PY, probe_starting=starting))
    assert facts.errors() == {}
    assert order[0] == "torch probe run, starting set: True"
    assert "in-process probe" in order


def test_a_torch_probe_that_cannot_start_still_lets_the_rest_go_on(monkeypatch):
    from ddp_doctor.facts import torch_probe

    def unreadable() -> str:
        raise OSError("the probe script is gone")

    monkeypatch.setattr(torch_probe, "probe_script_source", unreadable)
    starting = threading.Event()
    facts = gather(v100_server(), GatherOptions(python=PY, probe_starting=starting))
    assert starting.is_set()
    assert facts.records["torch"].ok is False
    assert "the probe script is gone" in facts.records["torch"].error
    assert facts.available("nvml") and facts.available("host")


# ---------------------------------------------------------------- run_with_deadline


def _our_sleepers(since: float, args: list[str]) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "create_time", "status"]):
        info = proc.info
        if (info["cmdline"] == args and info["create_time"] >= since - 1
                and info["status"] != psutil.STATUS_ZOMBIE):
            found.append(proc)
    return found


@pytest.mark.spawns
def test_run_with_deadline_kills_the_whole_process_group():
    began = time.time()
    start = time.monotonic()
    # A duration of this process's own, so that the search below finds only these sleeps,
    # not those of a test running beside this one (pytest-xdist), which it would kill.
    duration = f"60.{os.getpid()}"
    result = run_with_deadline(["bash", "-c", f"sleep {duration} & sleep {duration}"],
                               timeout=1)
    elapsed = time.monotonic() - start
    assert elapsed < 30  # not the sleeps' minute; a generous margin for a loaded machine
    assert result.timed_out is True
    assert result.ok is False
    assert result.returncode is not None and result.returncode < 0  # killed by a signal
    assert result.describe_failure() == f"bash: no answer within {result.duration_s:.0f}s, killed"
    survivors = _our_sleepers(began, ["sleep", duration])
    for _ in range(20):  # a killed child may take a moment to be reaped by init
        if not survivors:
            break
        time.sleep(0.1)
        survivors = _our_sleepers(began, ["sleep", duration])
    for proc in survivors:  # clean up before failing
        proc.kill()
    assert survivors == []


@pytest.mark.spawns
def test_run_with_deadline_keeps_output_written_before_the_deadline():
    result = run_with_deadline(["bash", "-c", "echo started; echo warn >&2; sleep 60"],
                               timeout=1)
    assert result.timed_out is True
    assert result.stdout == "started\n"
    assert result.stderr == "warn\n"


def test_run_with_deadline_normal_exit_input_and_missing_program():
    done = run_with_deadline(["bash", "-c", "read x; echo out:$x; echo err >&2; exit 3"],
                             timeout=10, input_text="hello\n")
    assert (done.returncode, done.stdout, done.stderr, done.timed_out) == (
        3, "out:hello\n", "err\n", False)
    assert done.describe_failure() == "bash: exit code 3: err"

    env_run = run_with_deadline(["bash", "-c", "echo $ONLY_THIS"], timeout=10,
                                env={"ONLY_THIS": "set", "PATH": "/usr/bin:/bin"})
    assert env_run.ok and env_run.stdout == "set\n"

    missing = run_with_deadline(["/nonexistent/bin/nvidia-smi"], timeout=10)
    assert missing.not_found is True
    assert missing.ok is False
    assert missing.describe_failure() == "/nonexistent/bin/nvidia-smi: not found"


@pytest.mark.spawns
def test_deadline_holds_when_a_process_outside_the_group_keeps_the_pipes():
    marker = "31.4159"  # an unusual duration, to find exactly our escaped child
    returned = threading.Event()

    woken_by_return = []

    def reaper() -> None:  # stands in for the process finally dying, much later
        woken_by_return.append(returned.wait(30))
        for proc in psutil.process_iter(["cmdline"]):
            if proc.info["cmdline"] == ["sleep", marker]:
                proc.kill()

    thread = threading.Thread(target=reaper)
    thread.start()
    start = time.monotonic()
    try:
        result = run_with_deadline(["bash", "-c", f"setsid sleep {marker} & echo started"],
                                   timeout=1)
    finally:
        elapsed = time.monotonic() - start
        returned.set()
        thread.join()
    assert result.timed_out is True
    assert result.stdout == "started\n"
    # It returned while the escaped child still held the pipes: the reaper was woken by the
    # return, not by its own 30 s, whatever the load (a fixed 3.5 s bound was not).
    assert woken_by_return == [True], elapsed
