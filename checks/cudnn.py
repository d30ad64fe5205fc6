"""cuDNN checks: is cuDNN there, is it the one torch was built for, does a convolution run?

Sources:
- Version integers (8.9.7 -> 8907, 9.1.0 -> 90100) and torch's own compile/runtime
  comparison, whose error says "cuDNN version incompatibility: PyTorch was compiled
  against ... but found runtime version ...": pytorch/pytorch
  ``torch/backends/cudnn/__init__.py``.
- A system cuDNN on LD_LIBRARY_PATH shadowing the nvidia-cudnn-cu* wheel torch depends on:
  pytorch/pytorch#122924 and the same ``__init__.py`` ("Looks like your LD_LIBRARY_PATH
  contains incompatible version of cudnn").
- CUDNN_STATUS_NOT_INITIALIZED / CUDNN_STATUS_INTERNAL_ERROR at the first convolution,
  often an almost-full GPU: pytorch/pytorch#81620;
  https://docs.nvidia.com/deeplearning/cudnn/latest/reference/troubleshooting.html
"""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.facts.view import FactsView
from ddp_doctor.knowledge import torch_pairs
from ddp_doctor.model import Evidence, Finding, Step
from ddp_doctor.registry import Summary, check
from ddp_doctor.wording import count

from ._util import cuda_device_label, gpu_test_results

TROUBLESHOOTING = "https://docs.nvidia.com/deeplearning/cudnn/latest/reference/troubleshooting.html"

CUDNN_UNAVAILABLE = declare(
    id="DNN001",
    category=Category.CUDNN_FAILURE,
    summary="cuDNN is not available to a CUDA build of torch",
    what="torch.backends.cudnn.is_available() is False although torch was built with CUDA: "
         "its cuDNN library (the nvidia-cudnn-cu* wheel) is missing or does not load.",
    why="Convolutions fall back to slow kernels or fail; most vision training breaks.",
    fix="Reinstall torch so its nvidia-cudnn wheel comes with it, and keep other cuDNN "
        "copies off LD_LIBRARY_PATH.",
    docs_url=TROUBLESHOOTING,
)
CUDNN_VERSION_MISMATCH = declare(
    id="DNN002",
    category=Category.CUDNN_FAILURE,
    summary="torch loads a cuDNN other than the one it was built against",
    what="The cuDNN torch loads at run time has another major version (or an older minor) "
         "than the one it was compiled against: usually a system cuDNN on LD_LIBRARY_PATH "
         "shadows the nvidia-cudnn-cu* wheel.",
    why="torch refuses to use it ('cuDNN version incompatibility'), or convolutions crash.",
    fix="Remove the other cuDNN from LD_LIBRARY_PATH so torch loads its own wheel's copy.",
    docs_url=TROUBLESHOOTING,
)
CUDNN_CONV_FAILED = declare(
    id="DNN003",
    category=Category.CUDNN_FAILURE,
    summary="A cuDNN convolution fails on a GPU",
    what="The torch probe ran a small Conv2d forward and backward with cuDNN on the GPU; it "
         "failed or did not finish.",
    why="Every convolutional model fails on this GPU at its first layer.",
    fix="Check the GPU's free memory and the cuDNN library that loads; reinstall torch in a "
        "clean environment if the library is mixed.",
    docs_url=TROUBLESHOOTING,
)


def decode(version: int | None) -> str | None:
    """torch.backends.cudnn.version() -> "9.1.0" (cuDNN 9 uses x10000, 8 and older x1000)."""
    if not version:
        return None
    if version >= 10000:
        return f"{version // 10000}.{(version % 10000) // 100}.{version % 100}"
    return f"{version // 1000}.{(version % 1000) // 100}.{version % 100}"


def _parts(text: str | None) -> tuple[int, ...] | None:
    try:
        return tuple(int(p) for p in str(text).split(".")[:2])
    except ValueError:
        return None


def _reinstall_same_torch(facts: FactsView) -> str:
    """Reinstall the installed torch release from its own index (its cuDNN wheel comes back
    with it), never a newer torch from PyPI that would break the torchvision pairing."""
    version = facts.torch_build().get("version")
    parsed = torch_pairs.parse(version)
    if parsed is None:
        return f"{facts.target_pip()} install --force-reinstall --no-deps torch"
    tag = torch_pairs.local_tag(version)
    index = f" --index-url https://download.pytorch.org/whl/{tag}" if tag else ""
    return f"{facts.target_pip()} install --force-reinstall torch=={parsed}{index}"


def _ld_steps(facts: FactsView) -> list[Step]:
    python = facts.target_python()
    return [
        Step("See which cuDNN copies the library path brings in.",
             command="echo $LD_LIBRARY_PATH | tr ':' '\\n'; ldconfig -p | grep libcudnn"),
        Step("Take system CUDA/cuDNN directories off LD_LIBRARY_PATH for training (remove "
             "them from ~/.bashrc too), so torch loads the cuDNN wheel it was installed with.",
             command="unset LD_LIBRARY_PATH"),
        Step("Reinstall torch's own cuDNN wheel alongside it.",
             command=_reinstall_same_torch(facts)),
        Step("Confirm the loaded version.",
             command=f"{python} -c \"import torch; print(torch.backends.cudnn.version())\""),
    ]


@check(
    id="cudnn.version",
    title="cuDNN library",
    area="cudnn",
    requires=("torch",),
    codes=(CUDNN_UNAVAILABLE, CUDNN_VERSION_MISMATCH),
    blocked_by=("torch.import", "torch.cuda_build"),
)
def cudnn_version(facts: FactsView) -> Iterator[Finding | Summary]:
    build = facts.torch_build()
    libs = facts.torch_libraries()
    if not build.get("cuda"):
        yield Summary("not a CUDA build")
        return
    env_ld = facts.env_var("LD_LIBRARY_PATH")
    ld_evidence = Evidence("LD_LIBRARY_PATH", env_ld or "not set", "environment")
    if libs.get("cudnn_available") is False:
        yield Finding(
            code=CUDNN_UNAVAILABLE,
            title=f"cuDNN is not available to torch {build.get('version')} (a CUDA "
                  f"{build.get('cuda')} build)",
            evidence=(Evidence("torch.backends.cudnn.is_available()", "False",
                               "interpreter probe"), ld_evidence),
            remediation=tuple(_ld_steps(facts)))
        return
    loaded = decode(libs.get("cudnn_version"))
    compiled = libs.get("cudnn_compile_version")
    if not loaded:
        yield Summary("cuDNN version not reported")
        return
    lp, cp = _parts(loaded), _parts(compiled)
    if cp is None or lp is None or (lp[0] == cp[0] and lp >= cp):
        yield Summary(f"cuDNN {loaded}" + (f" (built against {compiled})" if compiled else ""))
        return
    yield Finding(
        code=CUDNN_VERSION_MISMATCH,
        title=f"torch {build.get('version')} was built against cuDNN {compiled} but loads "
              f"cuDNN {loaded}",
        evidence=(Evidence("torch.backends.cudnn.version()", f"{libs.get('cudnn_version')} "
                           f"({loaded})", "interpreter probe"),
                  Evidence("torch._C._cudnn.getCompileVersion()", str(compiled),
                           "interpreter probe"),
                  ld_evidence),
        remediation=tuple(_ld_steps(facts)))


@check(
    id="cudnn.conv",
    title="cuDNN convolution test",
    area="cudnn",
    requires=("torch",),
    codes=(CUDNN_CONV_FAILED,),
    blocked_by=("torch.import", "torch.cuda_build", "cudnn.version", "cuda.functional"),
)
def cudnn_conv(facts: FactsView) -> Iterator[Finding | Summary]:
    results, none_ran = gpu_test_results(facts, "cudnn_test", "cuDNN test")
    if none_ran is not None:
        yield none_ran
        return
    bad = [r for r in results if not r.get("ok")]
    if not bad:
        yield Summary(f"Conv2d forward+backward ok on {count(len(results), 'GPU')}")
        return
    for r in bad:
        index = r.get("index")
        label = cuda_device_label(facts, index)
        error = r.get("error") or "failed"
        what = "did not finish" if r.get("timed_out") else "fails"
        steps = [Step("See the GPU's free memory and the processes holding it (cuDNN needs "
                      "workspace memory at its first call).",
                      command=f"nvidia-smi -i {index} --query-gpu=memory.used,memory.total "
                              f"--format=csv && nvidia-smi -i {index} "
                              "--query-compute-apps=pid,used_memory --format=csv"),
                 Step("Rerun the failing convolution with cuDNN's own log.",
                      command="CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr "
                              f"{facts.target_python()} -c "
                              f"\"import torch; c = torch.nn.Conv2d(3, 8, 3).to('cuda:{index}'); "
                              f"c(torch.rand(2, 3, 32, 32, device='cuda:{index}')).sum()"
                              ".backward(); print('ok')\"",
                      url=TROUBLESHOOTING)]
        steps += _ld_steps(facts)[:2]
        yield Finding(
            code=CUDNN_CONV_FAILED,
            title=f"A cuDNN convolution {what} on {label}: {error}",
            evidence=(Evidence(label, error, "torch probe: Conv2d forward+backward"),
                      Evidence("cuDNN", decode(facts.torch_libraries().get("cudnn_version")) or
                               "unknown", "interpreter probe")),
            remediation=tuple(steps),
            affects=(f"gpu:{index}",))
