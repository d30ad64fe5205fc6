"""A test's temporary files in a directory pytest owns, not the machine's /tmp.

The smoke, run and hang tests start real jobs that leave files on purpose: a failed smoke
run or ``run`` keeps its run directory for the user (it says where), and torchrun leaves a
``torchelastic_*`` log directory in TMPDIR on every launch. The faults these tests inject
fail runs by the dozen: under the machine's /tmp they would pile up run after run. The
fixture points TMPDIR (for the doctors and jobs these tests start) and
``tempfile.tempdir`` (for runs inside the test process) at a directory of the test; each
folder's conftest.py makes it autouse there.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest


@pytest.fixture(autouse=True)
def private_tmpdir(tmp_path_factory: pytest.TempPathFactory,
                   monkeypatch: pytest.MonkeyPatch) -> Path:
    tmpdir = tmp_path_factory.mktemp("tmpdir")
    monkeypatch.setenv("TMPDIR", str(tmpdir))
    monkeypatch.setattr(tempfile, "tempdir", str(tmpdir))
    return tmpdir
