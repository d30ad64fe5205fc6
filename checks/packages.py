"""Package checks: do torch's companions (torchvision, torchaudio, NumPy) and the Python
version belong with the installed torch, and is there only one torch?

Sources:
- torch/torchvision/torchaudio release pairs: https://github.com/pytorch/vision#installation,
  https://docs.pytorch.org/audio/2.11.0/installation.html, and the table in
  ``ddp_doctor.knowledge.torch_pairs``.
- NumPy 2 with a torch built against NumPy 1 ("A module that was compiled using NumPy 1.x
  cannot be run in NumPy 2"): pytorch/pytorch#107302; torch 2.3.1 is the first release
  built for NumPy 2.
- Supported Python versions per torch release: https://github.com/pytorch/pytorch/blob/main/RELEASE.md
"""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.facts.view import FactsView
from ddp_doctor.knowledge.torch_pairs import (
    NUMPY2_SAFE_TORCH,
    Release,
    local_tag,
    parse,
    python_supported,
    release_for,
    torchaudio_matches,
    torchvision_matches,
)
from ddp_doctor.knowledge.wheels import INSTALL_GUIDE
from ddp_doctor.model import Evidence, Finding, Severity, Step
from ddp_doctor.registry import Summary, check

_PAIRS_URL = "https://github.com/pytorch/vision#installation"

TORCHVISION_MISMATCH = declare(
    id="PKG001",
    category=Category.PACKAGE_CONFLICT,
    summary="torchvision belongs to another torch release",
    what="Each torchvision release is built for one torch release (torch 2.x pairs with "
         "torchvision 0.(x+15)); the installed pair does not belong together.",
    why="torchvision's compiled operators fail to load ('operator torchvision::nms does not "
        "exist') or crash with undefined symbols, and detection models stop at import.",
    fix="Reinstall torch and torchvision together, in one pip command, from one index URL.",
    docs_url=_PAIRS_URL,
)
TORCHAUDIO_MISMATCH = declare(
    id="PKG002",
    category=Category.PACKAGE_CONFLICT,
    summary="torchaudio belongs to another torch release",
    what="Before 2.11 torchaudio had to match torch's minor version exactly (torch 2.x with "
         "torchaudio 2.x); from 2.11 it runs on that torch or newer.",
    why="Its compiled extension fails to load against another torch (undefined symbols).",
    fix="Reinstall torch and torchaudio together from one index URL.",
    docs_url="https://docs.pytorch.org/audio/2.11.0/installation.html",
)
CUDA_VARIANT_MISMATCH = declare(
    id="PKG003",
    category=Category.PACKAGE_CONFLICT,
    summary="torch and torchvision/torchaudio come from different CUDA variants",
    what="The local version tags differ (e.g. torch +cu121 with torchvision +cpu): the "
         "packages were installed from different wheel indexes.",
    why="torchvision refuses to run ('PyTorch and torchvision were compiled with different "
        "CUDA versions') or its CUDA operators are missing.",
    fix="Reinstall all three from the one index URL torch came from.",
    docs_url=_PAIRS_URL,
)
TORCHVISION_OPS_BROKEN = declare(
    id="PKG004",
    category=Category.PACKAGE_CONFLICT,
    summary="torchvision's compiled operators do not load",
    what="`import torchvision` or resolving `torch.ops.torchvision.nms` failed in this "
         "interpreter: its C++ library did not load against this torch.",
    why="Every detection model (YOLO, Faster R-CNN) calls torchvision.ops.nms and dies with "
        "'operator torchvision::nms does not exist'.",
    fix="Reinstall torch and torchvision as a pair from one index URL.",
    docs_url=_PAIRS_URL,
)
TWO_TORCH_INSTALLS = declare(
    id="PKG005",
    category=Category.PACKAGE_CONFLICT,
    summary="More than one torch installation is visible to this interpreter",
    what="torch is installed in more than one place on sys.path (a venv and ~/.local, or "
         "two versions in one site-packages); which one imports depends on path order.",
    why="The torch that imports may not be the one pip reports or upgrades; its CUDA "
        "libraries and its companions (torchvision) disagree.",
    fix="Uninstall every copy but the one in the training environment.",
    docs_url="https://pip.pypa.io/en/stable/cli/pip_uninstall/",
)
NUMPY2_OLD_TORCH = declare(
    id="PKG006",
    category=Category.PACKAGE_CONFLICT,
    summary="NumPy 2 with a torch built for NumPy 1",
    what="torch before 2.3.1 was compiled against NumPy 1.x; under NumPy 2 it warns 'A module "
         "that was compiled using NumPy 1.x cannot be run in NumPy 2' and cannot exchange "
         "arrays.",
    why="Every tensor<->ndarray conversion (DataLoader collation, image loading) raises "
        "'RuntimeError: Numpy is not available'.",
    fix="Install numpy<2, or upgrade torch to 2.3.1 or newer.",
    docs_url="https://github.com/pytorch/pytorch/issues/107302",
)
PYTHON_UNSUPPORTED = declare(
    id="PKG007",
    category=Category.PACKAGE_CONFLICT,
    summary="Python version outside the torch release's supported range",
    what="Each torch release publishes wheels for a range of Python versions (RELEASE.md); "
         "this interpreter is outside the range of the installed release.",
    why="pip cannot install the matching torchvision/torchaudio wheels, and such installs "
        "are source builds or leftovers that break in ways nobody tests.",
    fix="Use an interpreter inside the range, or a torch release that supports this Python.",
    docs_url="https://github.com/pytorch/pytorch/blob/main/RELEASE.md",
)


def _index_for(tag: str | None) -> str:
    return f"https://download.pytorch.org/whl/{tag or 'cpu'}"


def _pair_command(facts: FactsView, torch_version: str, packages: dict[str, str]) -> str:
    """Pin the companions to torch's release, from torch's own index."""
    pins = " ".join(f"{name}=={version}" for name, version in packages.items())
    return (f"{facts.target_pip()} install --force-reinstall torch=={parse(torch_version)} {pins} "
            f"--index-url {_index_for(local_tag(torch_version))}")


def _companion(release: Release, name: str) -> str:
    return release.torchvision if name == "torchvision" else release.torchaudio


@check(
    id="packages.torch_companions",
    title="torch companions",
    area="pytorch",
    requires=("python",),
    codes=(TORCHVISION_MISMATCH, TORCHAUDIO_MISMATCH, CUDA_VARIANT_MISMATCH),
)
def torch_companions(facts: FactsView) -> Iterator[Finding | Summary]:
    torch_version = facts.torch_version()
    if torch_version is None:
        yield Summary("torch is not installed")
        return
    release = release_for(torch_version)
    installed = {name: facts.package_versions(name)[:1]
                 for name in ("torchvision", "torchaudio")}
    found = False
    for name, code, matches in (("torchvision", TORCHVISION_MISMATCH, torchvision_matches),
                                ("torchaudio", TORCHAUDIO_MISMATCH, torchaudio_matches)):
        if not installed[name]:
            continue
        version = installed[name][0]
        if release is not None and matches(release, version) is False:
            found = True
            expected = _companion(release, name)
            yield Finding(
                code=code,
                title=f"{name} {version} does not belong to torch {torch_version} "
                      f"(it pairs with {name} {expected}.x)",
                evidence=(Evidence("torch", torch_version, "interpreter probe"),
                          Evidence(name, version, "installed packages")),
                remediation=(Step(f"Reinstall {name} {expected} with torch, from torch's "
                                  "index, so both come from one release.",
                                  command=_pair_command(facts, torch_version,
                                                       {name: f"{expected}.*"}),
                                  url=_PAIRS_URL if name == "torchvision" else
                                  TORCHAUDIO_MISMATCH.docs_url),),
            )
        tag, other = local_tag(torch_version), local_tag(version)
        if tag and other and tag != other:
            found = True
            yield Finding(
                code=CUDA_VARIANT_MISMATCH,
                title=f"torch {torch_version} is a {tag} build but {name} {version} is "
                      f"a {other} build",
                evidence=(Evidence("torch", torch_version, "interpreter probe"),
                          Evidence(name, version, "installed packages")),
                remediation=(Step(f"Reinstall {name} from torch's own index ({tag}).",
                                  command=f"{facts.target_pip()} install --force-reinstall "
                                          f"--no-deps {name}=={parse(version)} "
                                          f"--index-url {_index_for(tag)}"),),
            )
    if not found:
        have = ", ".join(f"{n} {v[0]}" for n, v in installed.items() if v)
        yield Summary(f"torch {torch_version}" + (f" with {have}" if have else ""))


@check(
    id="packages.torchvision_ops",
    title="torchvision operators",
    area="pytorch",
    requires=("torch",),
    codes=(TORCHVISION_OPS_BROKEN,),
    blocked_by=("torch.import",),
)
def torchvision_ops(facts: FactsView) -> Iterator[Finding | Summary]:
    tv = facts.torch().get("torchvision")
    if "torchvision" not in facts.torch():  # facts from a pasted report: not tried
        yield Summary("torchvision import not tested")
        return
    if not tv:
        yield Summary("torchvision not installed")
        return
    error = tv.get("import_error") or tv.get("ops_error")
    if not error:
        yield Summary(f"torchvision {tv.get('version')}: torchvision::nms loads")
        return
    torch_version = facts.torch_version() or "?"
    tv_version = tv.get("version") or next(iter(facts.package_versions("torchvision")), "?")
    release = release_for(torch_version)
    pins = {"torchvision": f"{release.torchvision}.*"} if release else {}
    command = (_pair_command(facts, torch_version, pins) if pins else
               f"{facts.target_pip()} install --force-reinstall torch=={parse(torch_version)} "
               "torchvision "
               f"--index-url {_index_for(local_tag(torch_version))}")
    where = "import torchvision" if tv.get("import_error") else "torch.ops.torchvision.nms"
    yield Finding(
        code=TORCHVISION_OPS_BROKEN,
        title=f"torchvision {tv_version}'s compiled operators do not load with torch "
              f"{torch_version}",
        evidence=(Evidence(where, error, "interpreter probe"),
                  Evidence("torch", torch_version, "interpreter probe"),
                  Evidence("torchvision", str(tv_version), "installed packages")),
        remediation=(
            Step("Reinstall torchvision for this torch, from torch's index.", command=command,
                 url=_PAIRS_URL),
            Step("Confirm the operator loads.",
                 command=f'{facts.target_python()} -c "import torch, torchvision; '
                         'print(torch.ops.torchvision.nms)"'),
        ),
    )


@check(
    id="packages.single_torch",
    title="One torch install",
    area="pytorch",
    requires=("python",),
    codes=(TWO_TORCH_INSTALLS,),
)
def single_torch(facts: FactsView) -> Iterator[Finding | Summary]:
    python = facts.python()
    locations = list(python.get("torch_locations") or [])
    entries = facts.packages("torch")
    if len(locations) <= 1 and len(entries) <= 1:
        yield Summary(locations[0] if locations else "no torch on sys.path"
                      if "torch_locations" in python else f"{len(entries)} torch listed")
        return
    evidence = [Evidence(f"torch package {n + 1}", path, "sys.path")
                for n, path in enumerate(locations)]
    evidence += [Evidence(f"torch distribution {n + 1}",
                          f"{e.get('version')} in {e.get('location')}", "installed packages")
                 for n, e in enumerate(entries)]
    imported = facts.torch_build().get("file")
    if imported:
        evidence.append(Evidence("imported", imported, "interpreter probe"))
    count = max(len(locations), len(entries))
    exe = python.get("executable") or "python"
    yield Finding(
        code=TWO_TORCH_INSTALLS,
        title=f"{count} torch installations are visible to {exe}",
        evidence=tuple(evidence),
        remediation=(
            Step("Uninstall torch until pip finds none left (each run removes one copy).",
                 command=f"{exe} -m pip uninstall -y torch && {exe} -m pip uninstall -y torch"),
            Step("Check that no copy is left, then reinstall one CUDA build.",
                 command=f"{exe} -m pip list 2>/dev/null | grep -i '^torch '; "
                         f"{exe} -c \"import torch\" || echo 'no torch left'"),
            Step("Stop user-site packages (~/.local) from shadowing the environment.",
                 command="export PYTHONNOUSERSITE=1"),
        ),
    )


@check(
    id="packages.numpy_abi",
    title="NumPy ABI",
    area="pytorch",
    requires=("python",),
    codes=(NUMPY2_OLD_TORCH,),
)
def numpy_abi(facts: FactsView) -> Iterator[Finding | Summary]:
    probe = facts.torch_numpy()
    numpy_version = probe.get("version") or next(iter(facts.package_versions("numpy")), None)
    torch_version = facts.torch_version()
    numpy_parsed, torch_parsed = parse(numpy_version), parse(torch_version)
    if numpy_parsed is None or torch_parsed is None:
        yield Summary("NumPy or torch not installed")
        return
    broken_bridge = probe.get("bridge_error")
    too_old = numpy_parsed.major >= 2 and torch_parsed < NUMPY2_SAFE_TORCH
    if not too_old and not (numpy_parsed.major >= 2 and broken_bridge):
        yield Summary(f"NumPy {numpy_version} with torch {torch_version}")
        return
    evidence = [Evidence("numpy", str(numpy_version), "interpreter probe"),
                Evidence("torch", str(torch_version), "interpreter probe")]
    if broken_bridge:
        evidence.append(Evidence("torch.from_numpy", broken_bridge, "interpreter probe"))
    for warning in probe.get("warnings") or []:
        evidence.append(Evidence("warning at import torch", warning, "interpreter probe"))
    yield Finding(
        code=NUMPY2_OLD_TORCH,
        title=f"NumPy {numpy_version} is installed but torch {torch_version} was built for "
              "NumPy 1.x",
        evidence=tuple(evidence),
        remediation=(
            Step("Install a NumPy 1.x release (the quick fix).",
                 command=f'{facts.target_pip()} install "numpy<2"'),
            Step("Or upgrade torch to 2.3.1 or newer, which works with NumPy 2.",
                 url=INSTALL_GUIDE),
        ),
    )


@check(
    id="packages.python_version",
    title="Python version",
    area="pytorch",
    requires=("python",),
    codes=(PYTHON_UNSUPPORTED,),
)
def python_version(facts: FactsView) -> Iterator[Finding | Summary]:
    torch_version = facts.torch_version()
    release = release_for(torch_version)
    py = facts.python().get("version")
    if release is None or python_supported(release, py) is not False:
        yield Summary(f"Python {py}" + (f" with torch {torch_version}" if torch_version else ""))
        return
    exe = facts.python().get("executable") or "python"
    yield Finding(
        code=PYTHON_UNSUPPORTED,
        title=f"Python {py} is outside torch {release.torch}'s supported range "
              f"({release.python_min}-{release.python_max})",
        severity=Severity.WARNING,
        evidence=(Evidence("interpreter", f"{exe} (Python {py})", "interpreter probe"),
                  Evidence("torch", str(torch_version), "interpreter probe")),
        remediation=(
            Step(f"Create the training environment with a Python from {release.python_min} "
                 f"to {release.python_max}.",
                 command=f"python{release.python_max} -m venv ~/venvs/train && "
                         ". ~/venvs/train/bin/activate"),
            Step("Install torch there from its index.",
                 command=f"~/venvs/train/bin/python -m pip install torch=={parse(torch_version)} "
                         f"--index-url {_index_for(local_tag(torch_version))}",
                 url=INSTALL_GUIDE),
        ),
    )
