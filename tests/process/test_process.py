"""ddp_doctor.process on real processes: a tagged child and its family, stopped, none left.

Each test starts real processes (``scripts/family.py``) and proves the end through the
process table (``survivors``, ``psutil.pid_exists``), never through the code's own word.
Time bounds are generous margins over what the code enforces (the grace period), so a
loaded machine does not fail them; the order of events is proven by the files the
processes write (a signal was received before the next one was sent).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from ddp_doctor.process.group import reap_group
from ddp_doctor.process.signals import Interrupted, StopRequest
from ddp_doctor.process.tag import TAG_VARIABLE, new_tag, survivors
from ddp_doctor.process.tree import ProcessTree

SCRIPTS = Path(__file__).with_name("scripts")
FAMILY = str(SCRIPTS / "family.py")
WAIT_S = 60.0  # for a process to start on a loaded machine; never what a test measures


def wait_for(what: Callable[[], bool], timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s")
        time.sleep(0.05)


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def pids(out: Path) -> dict[str, int]:
    return {role: int(pid) for role, pid in (line.split() for line in lines(out / "pids"))}


def live(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def family(out: Path, kind: str, tag: str) -> ProcessTree:
    return ProcessTree.start([sys.executable, FAMILY, str(out), kind], tag,
                             stdin=subprocess.DEVNULL)


# -- the stop request, without processes -------------------------------------------------

def test_the_first_signal_raises_and_a_second_asks_to_hurry():
    request = StopRequest()
    with pytest.raises(Interrupted) as raised:
        request.received(signal.SIGINT)
    assert raised.value.code == 128 + signal.SIGINT and request.forward == signal.SIGINT
    assert not request.hurry.is_set()
    request.received(signal.SIGINT)  # a second Ctrl-C: no exception inside the cleanup
    assert request.hurry.is_set() and request.signum == signal.SIGINT


def test_a_signal_during_a_stop_hurries_it_instead_of_interrupting_it():
    request = StopRequest(stopping=True)
    request.received(signal.SIGTERM)
    assert request.hurry.is_set() and request.forward == signal.SIGTERM
    assert StopRequest().forward == signal.SIGTERM  # a deadline's stop: SIGTERM first


# -- real families -------------------------------------------------------------------------

@pytest.mark.spawns
@pytest.mark.slow
def test_grandchildren_in_sessions_of_their_own_are_all_ended(tmp_path):
    tag = new_tag("ddp-doctor-test")
    tree = family(tmp_path, "grandchildren", tag)
    wait_for(lambda: len(pids(tmp_path)) == 3)
    started = pids(tmp_path)
    assert len(survivors(tag)) == 3  # the tag is in every descendant's environment
    # Each grandchild leads a session of its own: the child's group does not hold them.
    assert all(os.getsid(started[g]) == started[g] for g in ("grandchild0", "grandchild1"))
    left = tree.stop(grace_s=5.0)
    assert left == [] and survivors(tag) == []
    assert not any(live(pid) for pid in started.values())
    assert tree.proc.returncode == -signal.SIGTERM


@pytest.mark.spawns
@pytest.mark.slow
def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    tag = new_tag("ddp-doctor-test")
    tree = family(tmp_path, "ignores-term", tag)
    wait_for(lambda: "child" in pids(tmp_path))
    grace = 1.0
    began = time.monotonic()
    assert tree.stop(grace_s=grace) == []
    took = time.monotonic() - began
    assert tree.proc.returncode == -signal.SIGKILL  # SIGTERM did nothing: SIGKILL did
    assert took >= grace  # the grace was given before SIGKILL
    assert survivors(tag) == []


@pytest.mark.spawns
@pytest.mark.slow
def test_a_double_forked_orphan_is_found_by_its_tag_and_ended(tmp_path):
    tag = new_tag("ddp-doctor-test")
    tree = family(tmp_path, "double-fork", tag)
    wait_for(lambda: {"orphan", "child"} <= set(pids(tmp_path)))
    tree.proc.wait(timeout=WAIT_S)  # the child is gone; its grandchild was re-parented
    orphan = pids(tmp_path)["orphan"]
    assert psutil.Process(orphan).ppid() != tree.pid
    tree.remember()
    assert orphan not in tree.known  # walking down from the child no longer reaches it
    assert [p.pid for p in survivors(tag)] == [orphan]
    assert tree.stop(grace_s=5.0) == []
    assert survivors(tag) == [] and not live(orphan)


@pytest.mark.spawns
@pytest.mark.slow
def test_reap_group_kills_a_group_that_ignores_sigterm(tmp_path):
    child = subprocess.Popen([sys.executable, FAMILY, str(tmp_path), "ignores-term"],
                             start_new_session=True, stdin=subprocess.DEVNULL)
    wait_for(lambda: "child" in pids(tmp_path))
    reap_group(child, grace_s=0.5)
    assert child.returncode == -signal.SIGKILL and not live(child.pid)


def _doctor(out: Path, kind: str, grace: float) -> subprocess.Popen[bytes]:
    doctor = subprocess.Popen([sys.executable, str(SCRIPTS / "doctor.py"), str(out), kind,
                               str(grace)], stdin=subprocess.DEVNULL)
    wait_for(lambda: lines(out / "doctor") == ["ready"] and "child" in pids(out))
    return doctor


@pytest.mark.spawns
@pytest.mark.slow
def test_ctrl_c_to_the_doctor_is_forwarded_to_the_child(tmp_path):
    doctor = _doctor(tmp_path, "records", grace=30.0)
    tag = (tmp_path / "tag").read_text()
    doctor.send_signal(signal.SIGINT)
    wait_for(lambda: lines(tmp_path / "signals") != [])
    # The child got the SIGINT the doctor got, not a SIGTERM of the doctor's choosing.
    assert lines(tmp_path / "signals") == ["child SIGINT"]
    doctor.send_signal(signal.SIGINT)  # the child went on: a second Ctrl-C ends it now
    began = time.monotonic()
    assert doctor.wait(timeout=WAIT_S) == 128 + signal.SIGINT
    assert time.monotonic() - began < 30.0 / 2  # well inside the 30 s grace: no grace left
    assert lines(tmp_path / "doctor")[-1] == "stopped, 0 left"
    assert lines(tmp_path / "signals") == ["child SIGINT"]  # then SIGKILL, not recorded
    assert survivors(tag) == []


@pytest.mark.spawns
@pytest.mark.slow
def test_sigterm_to_the_doctor_reaps_the_whole_family(tmp_path):
    doctor = _doctor(tmp_path, "grandchildren", grace=5.0)
    wait_for(lambda: len(pids(tmp_path)) == 3)
    tag = (tmp_path / "tag").read_text()
    assert len(survivors(tag)) == 3
    doctor.send_signal(signal.SIGTERM)
    assert doctor.wait(timeout=WAIT_S) == 128 + signal.SIGTERM
    assert lines(tmp_path / "doctor")[-1] == "stopped, 0 left"
    assert survivors(tag) == []
    assert not any(live(pid) for pid in pids(tmp_path).values())


@pytest.mark.spawns
def test_the_tag_goes_in_the_environment_not_the_command_line():
    tag = new_tag("ddp-doctor-test")
    show = f"import os; print(os.environ[{TAG_VARIABLE!r}])"
    tree = ProcessTree.start([sys.executable, "-c", show], tag, stdout=subprocess.PIPE)
    out, _ = tree.proc.communicate(timeout=WAIT_S)
    assert out.decode().strip() == tag and tag not in " ".join(tree.proc.args)
    assert tree.stop() == []
