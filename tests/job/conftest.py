"""The run tests' temporary files go to a directory pytest owns, not the machine's /tmp.

A failed ``run`` keeps the command's output for the user on purpose (it says where), and
torchrun, which many of these tests' commands start, leaves a ``torchelastic_*`` log
directory in TMPDIR on every launch: under the machine's /tmp they would pile up run
after run. TMPDIR (for the doctors these tests start) and
``tempfile.tempdir`` (for runs inside the test process) point at a directory of the test.
"""

from __future__ import annotations

import tempfile

import pytest


@pytest.fixture(autouse=True)
def _private_tmpdir(tmp_path_factory, monkeypatch):
    tmpdir = tmp_path_factory.mktemp("tmpdir")
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    return tmpdir
