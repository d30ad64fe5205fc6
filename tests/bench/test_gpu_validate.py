"""bench/gpu_validate.sh on this CPU machine: the dry run does the whole set-up for real
(a venv over the given python's packages, ddp-doctor installed offline from a wheelhouse,
torch compared before and after) and skips the GPU steps, saying so; a wheelhouse that
would make pip replace torch fails the run loudly. The GPU steps themselves run on a GPU
machine only (tests/gpu)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "gpu_validate.sh"
# What setuptools needs to build ddp-doctor's wheel (pyproject.toml's package-dir, readme).
BUILD_INPUTS = ("pyproject.toml", "README.md", "MANIFEST.in", "LICENSE", "src", "checks",
                "train_smoke")
GPU_STEPS = ("nvidia-smi", "nvidia-smi -q", "nvidia-smi topo -m",
             "GPU suite (pytest tests/gpu -m gpu, the planted faults included)",
             "ddp-doctor --json (doctor)", "ddp-doctor check --save-facts",
             "ddp-doctor smoke --device cuda --scaling",
             "ddp-doctor smoke --nproc 2 --backend gloo (2 ranks sharing a GPU)",
             "ddp-doctor smoke --trainer ultralytics")


def this_torch() -> dict[str, str | None]:
    """torch_identity of this interpreter, read from the torch this test process imported
    (what a child of it reports before the run, without a 2 CPU-s import); after the run a
    child is still asked, since only a fresh import sees what the run did to the install."""
    import torch

    return {"version": torch.__version__, "file": torch.__file__, "cuda": torch.version.cuda}


def torch_identity(python: str) -> dict[str, str | None]:
    out = subprocess.run([python, "-c", "import json, torch; print(json.dumps({'version': "
                          "torch.__version__, 'file': torch.__file__, 'cuda': "
                          "torch.version.cuda}))"], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def test_the_script_parses_and_refuses_a_run_without_a_wheelhouse():
    assert subprocess.run(["bash", "-n", str(SCRIPT)], check=False).returncode == 0
    proc = subprocess.run(["bash", str(SCRIPT), "--dry-run"], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("gpu_validate: error: --wheelhouse DIR is needed (make it "
                                   "with --prepare-wheelhouse)")


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    """ddp-doctor's wheel built offline from a copy of the tree (no build isolation: the
    test venv's setuptools), as --prepare-wheelhouse builds it; the dependencies are the
    test venv's own, which the validation venv sees through the given python."""
    tmp = tmp_path_factory.mktemp("wheelhouse")
    source = tmp / "source"
    source.mkdir()
    for name in BUILD_INPUTS:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        elif path.exists():
            shutil.copy2(path, source / name)
    house = tmp / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-index",
                    "--no-build-isolation", "-w", str(house), str(source)], check=True,
                   capture_output=True, timeout=300)
    assert len(list(house.glob("ddp_doctor-*.whl"))) == 1
    return house


def run_script(wheelhouse: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), "--python", sys.executable, "--wheelhouse",
                           str(wheelhouse), "--out", str(out), "--dry-run"],
                          capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.slow
@pytest.mark.spawns
def test_the_dry_run_sets_up_for_real_and_skips_each_gpu_step(wheelhouse, tmp_path):
    before = this_torch()
    out = tmp_path / "validate"
    proc = run_script(wheelhouse, out)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = (out / "summary.md").read_text(encoding="utf-8")
    assert "Result: **passed**" in summary and "**Dry run**" in summary
    assert "| install (venv, offline pip, torch untouched) | 0 |" in summary
    for name in GPU_STEPS:
        assert f"- {name} (dry run: GPU step not run)" in summary
        assert f"| {name} | skipped |" in summary
    # torch: the same build, the same file, before, after and inside the new venv.
    identity = json.loads((out / "torch-identity.json").read_text(encoding="utf-8"))
    assert identity == {"before": before, "after": before, "venv": before}
    assert torch_identity(sys.executable) == before
    assert f"- torch: {before['version']}" in summary
    # ddp-doctor imports in the new venv, from the venv itself (the wheel), not the checkout.
    venv_python = out / "venv" / "bin" / "python"
    where = subprocess.run([str(venv_python), "-c", "import ddp_doctor.cli, ddp_doctor; "
                            "print(ddp_doctor.__file__)"], capture_output=True, text=True,
                           check=True, timeout=120).stdout.strip()
    assert Path(where).is_relative_to(out / "venv"), where
    version = subprocess.run([str(out / "venv" / "bin" / "ddp-doctor"), "--version"],
                             capture_output=True, text=True, check=True, timeout=120)
    assert version.stdout.startswith("ddp-doctor ")
    # Installed from the wheelhouse alone: pip's configured find-links were not read.
    pip_log = (out / "pip-install.log").read_text(encoding="utf-8")
    (wheel,) = wheelhouse.glob("ddp_doctor-*.whl")
    assert f"Processing {wheel}" in pip_log
    links = {line for line in pip_log.splitlines() if line.startswith("Looking in links:")}
    assert links == {f"Looking in links: {wheelhouse}"}


def write_wheel(folder: Path, name: str, version: str, files: dict[str, str],
                requires: tuple[str, ...] = ()) -> Path:
    """A minimal pure-Python wheel: METADATA, WHEEL, RECORD and FILES."""
    dist_info = f"{name}-{version}.dist-info"
    metadata = (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                + "".join(f"Requires-Dist: {r}\n" for r in requires))
    contents = {**files, f"{dist_info}/METADATA": metadata,
                f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\n"
                                      "Root-Is-Purelib: true\nTag: py3-none-any\n"}
    contents[f"{dist_info}/RECORD"] = "".join(f"{path},,\n" for path in contents) + \
        f"{dist_info}/RECORD,,\n"
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in contents.items():
            zf.writestr(path, text)
    return wheel


@pytest.mark.slow
@pytest.mark.spawns
def test_a_wheelhouse_that_would_replace_torch_fails_the_run_loudly(tmp_path):
    """A ddp-doctor wheel that asks for another torch, and that torch in the wheelhouse:
    pip installs it into the venv, the run says so and stops before any GPU step."""
    house = tmp_path / "wheels"
    house.mkdir()
    write_wheel(house, "ddp_doctor", "99.0", {"ddp_doctor/__init__.py": "__version__ = '99.0'\n"},
                requires=("torch==99.0",))
    write_wheel(house, "torch", "99.0", {
        "torch/__init__.py": "__version__ = '99.0'\n\n\nclass version:\n    cuda = None\n"})
    before = this_torch()
    out = tmp_path / "validate"
    proc = run_script(house, out)
    assert proc.returncode == 1
    assert "PIP TOUCHED TORCH" in proc.stderr and "TORCH CHANGED" in proc.stderr
    summary = (out / "summary.md").read_text(encoding="utf-8")
    assert "Result: **FAILED**" in summary
    assert "| install (venv, offline pip, torch untouched) | 1 |" in summary
    assert "GPU suite" not in summary.split("## GPU suite")[0]  # stopped before the GPU steps
    identity = json.loads((out / "torch-identity.json").read_text(encoding="utf-8"))
    assert identity["before"] == identity["after"] == before
    assert identity["venv"]["version"] == "99.0"  # what pip did, inside the venv only
    assert torch_identity(sys.executable) == before
