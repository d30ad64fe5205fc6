"""The layout installs as documented: checks/ and train_smoke/ become ddp_doctor.* packages."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import ddp_doctor.checks
import ddp_doctor.train_smoke

REPO = Path(__file__).resolve().parents[2]


def test_editable_install_maps_top_level_folders():
    assert Path(ddp_doctor.checks.__file__).resolve() == REPO / "checks" / "__init__.py"
    assert Path(ddp_doctor.train_smoke.__file__).resolve() == REPO / "train_smoke" / "__init__.py"


def test_built_wheel_contains_and_imports_every_package(tmp_path):
    # Build from a clean copy: setuptools reuses an in-tree build/ directory, whose stale
    # files would hide a package missing from pyproject.toml.
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", "build", "*.egg-info", ".venv*", "__pycache__", ".pytest_cache", ".ruff_cache"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path),
         str(source)],
        check=True, capture_output=True, timeout=300,
    )
    wheel = next(tmp_path.glob("ddp_doctor-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names if n.endswith("entry_points.txt"))
        metadata = next(zf.read(n).decode() for n in names if n.endswith("/METADATA"))
        zf.extractall(tmp_path / "site")
    expected = {f"ddp_doctor/{p.relative_to(REPO / 'src' / 'ddp_doctor')}"
                for p in (REPO / "src" / "ddp_doctor").rglob("*.py")}
    expected |= {f"ddp_doctor/checks/{p.name}" for p in (REPO / "checks").glob("*.py")}
    expected |= {f"ddp_doctor/train_smoke/{p.name}" for p in (REPO / "train_smoke").glob("*.py")}
    missing = sorted(expected - names)
    assert not missing, f"modules left out of the wheel: {missing}"
    assert "ddp-doctor = ddp_doctor.cli:main" in entry_points
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist")]
    assert not [r for r in requires if r.startswith("Requires-Dist: torch") and "extra" not in r]
    code = ("from ddp_doctor.registry import load_catalogue; import ddp_doctor.checks as c; "
            "cat = load_catalogue(entry_points=[]); assert not cat.failures, cat.failures; "
            "print(c.__file__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, check=True, env={"PYTHONPATH": str(tmp_path / "site"),
                                                     "PATH": "/usr/bin:/bin"}).stdout
    assert out.strip().startswith(str(tmp_path / "site"))
