"""Shared fixtures: recorded facts of real machines, loaded as ``Facts``."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Keep the compiled test modules between runs, even where PYTHONDONTWRITEBYTECODE is set
# (it is on the shared development machines): pytest rewrites the asserts of each of the
# ~120 test modules before it can import them, and without the cache (__pycache__, ignored
# by git) every run repeats that, about 10 s of CPU, most of a quick loop's collection.
sys.dont_write_bytecode = False

# One intra-op thread for torch in the test process and in every job it starts (the smoke
# launcher only sets OMP_NUM_THREADS where it is unset): two xdist workers on two cores,
# each with an OpenMP pool as wide as the machine, spin against each other, and a loaded
# machine made an in-process training test take 52 s where one thread took 26 s (the dp
# smoke job's steps went from 0.5 s to 7 s). Set before anything imports torch.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from ddp_doctor.facts.snapshot import Facts, load_facts  # noqa: E402  (after the line above)

# The quick loop's budget: an unmarked test over quick_test_limit_s fails (the module says
# why and how it is timed); pytester runs it on planted tests in tests/core/test_quick_budget.py.
# tests.support.real_runs: real runs several modules' tests read (one job, not one each).
pytest_plugins = ["tests.support.quick_budget", "tests.support.real_runs", "pytester"]

FIXTURES = Path(__file__).parent / "fixtures"
FACTS_DIR = FIXTURES / "facts"


def load_fixture_facts(name: str) -> Facts:
    """A whole-machine facts snapshot from tests/fixtures/facts/NAME.json."""
    return load_facts(FACTS_DIR / f"{name}.json")


@pytest.fixture
def fixture_facts():
    return load_fixture_facts


ULTRALYTICS_GROUP = "ultralytics-venv"
# The tests that read every corpus log's diagnosis (tests.support.corpus.corpus_reports: the
# corpus and evidence tests, the wording test, the narrow terminal at each width) share one
# worker, whose process diagnoses the ~680 logs once; spread over the workers each diagnosed
# them again, about 10 s of CPU each time on a CPU-bound CI run.
CORPUS_GROUP = "corpus-reports"


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook turns the groups into work units
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist with ``--dist loadgroup`` (CONTRIBUTING.md), the tests that need the
    Ultralytics venv all go to one worker: that worker builds it once and the other worker
    keeps running the rest of the suite instead of waiting for the build. Likewise the tests
    of a module that share a module-scoped fixture (one real job asserted by several tests,
    ``torchrun_run`` in tests/smoke/test_smoke_run.py) run on one worker: split across two,
    each worker ran the job again."""
    for item in items:
        if "ultralytics_python" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(ULTRALYTICS_GROUP))
        elif _uses_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))
        elif _reads_every_corpus_report(item):
            item.add_marker(pytest.mark.xdist_group(CORPUS_GROUP))
    _heaviest_modules_first(items)


def _heaviest_modules_first(items: list[pytest.Item]) -> None:
    """Hand the long work out first, so the two workers finish together.

    xdist hands out its groups first, largest first, then the other tests in collection
    order; collected alphabetically, modules of real DDP jobs came last, and one worker ran
    them alone while the other had finished. Modules move as wholes (their tests keep their
    order, and a module-scoped fixture is set up once): the Ultralytics venv's users first,
    then by how many slow tests a module holds. The same order on every worker, as xdist
    requires: it depends on the collected items only.
    """
    key: dict[str, tuple[int, int, int]] = {}  # (-venv users, -slow tests, first index)
    for index, item in enumerate(items):
        module = item.nodeid.split("::")[0]
        venv, slow, first = key.get(module, (0, 0, index))
        venv -= "ultralytics_python" in getattr(item, "fixturenames", ())
        slow -= item.get_closest_marker("slow") is not None
        key[module] = (venv, slow, first)
    items.sort(key=lambda item: key[item.nodeid.split("::")[0]])


def _reads_every_corpus_report(item: pytest.Item) -> bool:
    if item.nodeid.startswith("tests/diagnose/test_diagnose_corpus.py::"):
        return True  # its tests read corpus_report through the module's outcomes()
    function = getattr(item, "function", None)
    return function is not None and "corpus_reports" in function.__code__.co_names


def _uses_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)  # pytest's own record of the item's fixtures
    if info is None:
        return False
    return any(definition.scope == "module" for definitions in info.name2fixturedefs.values()
               for definition in definitions)


# What the Ultralytics venv's processes import (the trainer, DDP's torch._dynamo, torchrun):
# compiled once when the venv is built (see ultralytics_python); a module left out is only
# compiled by each process that imports it.
WARM_IMPORTS = ("import torch, torchvision, torch.distributed.run, torch._dynamo, "
                "torch.nn.parallel, ultralytics, ultralytics.utils.dist, "
                "ultralytics.data.build, matplotlib.pyplot; "
                "from ultralytics.models.yolo.detect import DetectionTrainer, "
                "DetectionValidator; import os; os._exit(0)")


def _installer(python: str) -> list[str]:
    """The command that installs packages into the venv of ``python``: uv where the test
    extras installed it, pip otherwise. Both install without byte-compiling. Measured on this
    2-core machine, installing the 5 GB of torch's CUDA build, torchvision and Ultralytics
    took uv 23 s and 32 CPU-s, pip 71 s and 65 CPU-s: CI's longest setup, on its critical path
    (the Ultralytics tests' worker)."""
    try:
        from uv import find_uv_bin
    except ImportError:
        return [python, "-m", "pip", "install", "-q", "--no-compile"]
    return [find_uv_bin(), "pip", "install", "-q", "--python", python]


@pytest.fixture(scope="session")
def ultralytics_python(tmp_path_factory) -> str:
    """A venv with the registry's torch build (a CUDA build of the same torch version as this
    venv's +cpu one), torchvision and Ultralytics (5 GB, about 50 s of CPU), built once per
    session for the Ultralytics tests and the two-node smoke whose nodes differ in their torch
    build.

    Once per session means once for all pytest-xdist workers too: it is built in the folder
    the workers' temporary folders share, under a lock, and a worker that finds it built
    (the ``ready`` file, written last) uses it. The xdist group above normally keeps it to one
    worker; the lock makes a second build impossible even when it does not.

    DDP_DOCTOR_ULTRALYTICS_PYTHON names such an interpreter already built (a developer's
    quick loop); CI leaves it unset and builds a fresh one."""
    given = os.environ.get("DDP_DOCTOR_ULTRALYTICS_PYTHON")
    if given:
        return given
    base = tmp_path_factory.getbasetemp()
    # An xdist worker's base folder is <session folder>/popen-gwN; the session's is shared.
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / "ultralytics"
    folder.mkdir(exist_ok=True)
    venv = folder / "venv"
    python = str(venv / "bin" / "python")
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (folder / "ready").exists():
            shutil.rmtree(venv, ignore_errors=True)  # a build that failed half-way
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True,
                           timeout=120)
            # pip would byte-compile every module it installs, the CUDA build's included:
            # ~80 CPU-s of the build. Only the modules the tests import are compiled instead
            # (WARM_IMPORTS, ~20 CPU-s), written to __pycache__ even where
            # PYTHONDONTWRITEBYTECODE is set: it is on the shared machines, and every process
            # of the venv would otherwise compile torch afresh (18 CPU-s to import torch,
            # torchvision and ultralytics uncompiled, 6 compiled).
            wanted = ["torch===2.13.0", "torchvision", "ultralytics"]
            installer, pip = _installer(python), [python, "-m", "pip", "install", "-q",
                                                  "--no-compile"]
            try:
                subprocess.run([*installer, *wanted], check=True, timeout=1200)
            except subprocess.CalledProcessError:
                if installer == pip:
                    raise
                # uv reads no pip configuration (find-links, extra indexes, constraints): where
                # it cannot resolve what pip can, pip installs it
                subprocess.run([*pip, *wanted], check=True, timeout=1200)
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            subprocess.run([python, "-c", WARM_IMPORTS], check=True, timeout=600, env=env)
            (folder / "ready").write_text(python + "\n")
    return python
