"""Shared helpers for the smoke-job and run tests: leftover-process checks, and a short
temporary folder for the runs that fail on purpose."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil

from ddp_doctor.process.tag import survivors


def run_tag(command: str | None) -> str:
    match = re.search(r"--tag (\S+)", command or "")
    assert match, f"no run tag in {command!r}"
    return match.group(1)


def leftovers(tag: str) -> list[str]:
    """Processes still alive that this test started: descendants, or the run's tag (on a
    command line, or in the environment: ``ddp_doctor.process.tag.survivors``)."""
    found = [f"{p.pid} tagged in its environment" for p in survivors(tag)]
    me = psutil.Process(os.getpid())
    for child in me.children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                found.append(f"{child.pid} {' '.join(child.cmdline())[:120]}")
        except psutil.Error:
            pass
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if tag in " ".join(proc.info["cmdline"] or ()) and proc.pid != os.getpid():
                found.append(f"{proc.pid} tagged")
        except psutil.Error:
            pass
    return found


def marked_processes(marker: str) -> list[str]:
    """Command lines of live (not zombie) processes that carry ``marker``: what a run's
    supervisor left behind, whoever's child it now is."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            line = " ".join(proc.info["cmdline"] or ())
            if marker in line and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(line)
        except psutil.Error:
            continue
    return found


def assert_nothing_left(tag: str) -> None:
    # The supervisor returns only after its sweep; allow the kernel a moment to reap.
    for _ in range(20):
        if not leftovers(tag):
            return
        time.sleep(0.1)
    raise AssertionError(f"processes left behind: {leftovers(tag)}")


@contextmanager
def short_tmpdir(prefix: str) -> Iterator[str]:
    """A folder for a run's TMPDIR, removed afterwards. A smoke run that fails keeps its
    folder (ddp-doctor-smoke-*) for the user by design, so a test whose run fails on purpose
    gives it a TMPDIR of its own, or the suite leaves a folder in /tmp per run. Short, in
    the system's temporary folder: under pytest's deep tmp_path, the DataLoader workers'
    socket paths (TMPDIR/pymp-*/listener-*) pass AF_UNIX's 108 bytes."""
    folder = tempfile.mkdtemp(prefix=prefix)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
