"""What a release ships: the sdist and wheel ``python -m build`` makes, and the wheel installed.

checks/ and train_smoke/ are top-level folders installed as ddp_doctor.checks and
ddp_doctor.train_smoke (setuptools package-dir), so a package left out of pyproject.toml
or a document left out of the sdist would only show after a release; these tests build
both from a clean copy of the tree and look inside. The last one installs the wheel into
a fresh venv, with its dependencies from the configured package index, and runs the
command from there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

import pytest
from packaging.requirements import Requirement

import ddp_doctor
from ddp_doctor import checks, train_smoke

REPO = Path(__file__).resolve().parents[2]
# Where each import package lives in the tree (pyproject.toml's package-dir).
PACKAGE_ROOTS = {
    "ddp_doctor": REPO / "src" / "ddp_doctor",
    "ddp_doctor.checks": REPO / "checks",
    "ddp_doctor.train_smoke": REPO / "train_smoke",
}


def tree_packages() -> set[str]:
    """Every folder with an __init__.py under the three roots, as an import name."""
    found = set()
    for package, root in PACKAGE_ROOTS.items():
        for init in root.rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            rel = init.parent.relative_to(root).parts
            found.add(".".join((package, *rel)))
    return found


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The sdist and the wheel, built by ``python -m build`` from a clean copy of the tree.

    A clean copy, because setuptools reuses an in-tree build/ directory, whose stale files
    would hide a package missing from pyproject.toml. ``build`` makes the sdist first and
    the wheel from the unpacked sdist, so the wheel also proves the sdist is complete.
    """
    tmp = tmp_path_factory.mktemp("dist")
    source = tmp / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", ".venv*", "__pycache__", ".pytest_cache",
        ".ruff_cache", ".mypy_cache"))
    out = tmp / "out"
    proc = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), str(source)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sdist,) = out.glob("ddp_doctor-*.tar.gz")
    (wheel,) = out.glob("ddp_doctor-*-py3-none-any.whl")
    return {"sdist": sdist, "wheel": wheel, "tmp": tmp}


def test_editable_install_maps_top_level_folders():
    assert Path(checks.__file__).resolve() == REPO / "checks" / "__init__.py"
    assert Path(train_smoke.__file__).resolve() == REPO / "train_smoke" / "__init__.py"


def test_tree_packages_are_found_where_pyproject_maps_them():
    packages = tree_packages()
    assert {"ddp_doctor", "ddp_doctor.facts", "ddp_doctor.checks",
            "ddp_doctor.train_smoke"} <= packages
    assert not any(".src" in p or p.endswith(".tests") for p in packages)


@pytest.mark.slow
@pytest.mark.spawns
def test_built_wheel_contains_and_imports_every_package(dist):
    tmp, wheel = dist["tmp"], dist["wheel"]
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(zf.read(n).decode() for n in names if n.endswith("entry_points.txt"))
        metadata = next(zf.read(n).decode() for n in names if n.endswith("/METADATA"))
        zf.extractall(tmp / "site")
    in_wheel = {str(PurePosixPath(n).parent).replace("/", ".") for n in names
                if n.endswith("/__init__.py")}
    assert in_wheel == tree_packages()
    expected = {f"ddp_doctor/{p.relative_to(REPO / 'src' / 'ddp_doctor').as_posix()}"
                for p in (REPO / "src" / "ddp_doctor").rglob("*.py")}
    expected |= {f"ddp_doctor/checks/{p.name}" for p in (REPO / "checks").glob("*.py")}
    expected |= {f"ddp_doctor/train_smoke/{p.name}" for p in (REPO / "train_smoke").glob("*.py")}
    expected.add("ddp_doctor/py.typed")  # PEP 561: the package's hints reach its users
    expected.add("ddp_doctor/knowledge/solved_threads.json")  # diagnose's similar threads
    expected |= {f"ddp_doctor/logrules/catalogues/{p.name}"  # the log rules' message catalogues
                 for p in (REPO / "src" / "ddp_doctor" / "logrules" / "catalogues").glob("*.toml")}
    missing = sorted(expected - names)
    assert not missing, f"files left out of the wheel: {missing}"
    assert not [n for n in names if n.startswith(("tests/", "bench/", "docs/"))]
    assert "ddp-doctor = ddp_doctor.cli:main" in entry_points
    assert "Name: ddp-doctor\n" in metadata
    assert f"Version: {ddp_doctor.__version__}\n" in metadata
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist")]
    assert not [r for r in requires if r.startswith("Requires-Dist: torch") and "extra" not in r]
    code = ("from ddp_doctor.checklist import load_catalogue; import ddp_doctor.checks as c; "
            "cat = load_catalogue(entry_points=[]); assert not cat.failures, cat.failures; "
            "from ddp_doctor.diagnose.similar import load_index; "
            "assert len(load_index()) > 100, len(load_index()); "
            "print(c.__file__)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True,
                         text=True, check=True, env={"PYTHONPATH": str(tmp / "site"),
                                                     "PATH": "/usr/bin:/bin"}).stdout
    assert out.strip().startswith(str(tmp / "site"))


@pytest.mark.slow
@pytest.mark.spawns
def test_sdist_carries_the_sources_the_docs_and_the_readme(dist):
    with tarfile.open(dist["sdist"]) as tar:
        names = {PurePosixPath(*PurePosixPath(n).parts[1:]).as_posix()
                 for n in tar.getnames() if len(PurePosixPath(n).parts) > 1}
    wanted = {"README.md", "pyproject.toml", "PKG-INFO"}
    for folder in ("checks", "train_smoke", "src/ddp_doctor"):
        wanted |= {p.relative_to(REPO).as_posix() for p in (REPO / folder).rglob("*.py")}
    # Every document the README links to, and the rest of docs/.
    wanted |= {p.relative_to(REPO).as_posix() for p in (REPO / "docs").iterdir()
               if p.suffix in (".md", ".json")}
    missing = sorted(wanted - names)
    assert not missing, f"left out of the sdist: {missing}"
    assert not [n for n in names if n.startswith((".venv", ".git/", "build/"))]


@pytest.mark.slow
@pytest.mark.spawns
def test_twine_check_passes_on_the_sdist_and_the_wheel(dist):
    proc = subprocess.run([sys.executable, "-m", "twine", "check", "--strict",
                           str(dist["sdist"]), str(dist["wheel"])],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("PASSED") == 2, proc.stdout


@pytest.mark.slow
@pytest.mark.spawns
def test_wheel_installed_in_a_fresh_venv_runs_the_command(dist):
    """The wheel and the dependencies it declares are all a user needs: no source tree,
    no test extras. ``pip check`` then confirms the declared set is complete."""
    tmp, wheel = dist["tmp"], dist["wheel"]
    venv = tmp / "venv"
    # No pip inside the venv: this interpreter's pip installs into it (--python), which
    # saves the ensurepip step.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    with zipfile.ZipFile(wheel) as zf:
        metadata = next(zf.read(n).decode() for n in zf.namelist() if n.endswith("/METADATA"))
    requirements = [Requirement(line.split(":", 1)[1].strip())
                    for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    runtime = [str(r) for r in requirements
               if r.marker is None or r.marker.evaluate({"extra": ""})]
    assert runtime and not any(r.startswith("torch") for r in runtime)
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
           "--disable-pip-version-check"]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    for args in (runtime, ["--no-deps", str(wheel)]):
        proc = subprocess.run([*pip, *args], capture_output=True, text=True, timeout=300,
                              env=env, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    check = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "check"],
                           capture_output=True, text=True, timeout=120, env=env, check=False)
    assert check.returncode == 0, check.stdout + check.stderr

    command = venv / "bin" / "ddp-doctor"
    run_env = {**env, "PATH": f"{venv / 'bin'}{os.pathsep}/usr/bin:/bin", "COLUMNS": "100"}
    version = subprocess.run([str(command), "--version"], cwd=tmp, capture_output=True,
                             text=True, timeout=120, env=run_env, check=False)
    assert version.returncode == 0, version.stderr
    assert ddp_doctor.__version__ in version.stdout
    explain = subprocess.run([str(command), "explain", "DRV001"], cwd=tmp, capture_output=True,
                             text=True, timeout=120, env=run_env, check=False)
    assert explain.returncode == 0, explain.stderr
    assert explain.stdout.startswith("DRV001: ")
    assert "What it means" in explain.stdout
    # The command ran the installed copy, not this checkout.
    where = subprocess.run([str(python), "-c", "import ddp_doctor; print(ddp_doctor.__file__)"],
                           cwd=tmp, capture_output=True, text=True, env=run_env, check=True)
    assert Path(where.stdout.strip()).is_relative_to(venv)
