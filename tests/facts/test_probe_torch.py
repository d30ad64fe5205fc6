"""Interpreter probe: parsing its stream, surviving hangs and crashes, and real runs here."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import platform
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ddp_doctor.facts import python_probe_script as probe_script
from ddp_doctor.facts.interpreter import InterpreterError, validate_interpreter
from ddp_doctor.facts.seam import CommandResult, RealEnv
from ddp_doctor.facts.torch_probe import (
    MARK,
    interpret_probe,
    parse_probe_output,
    probe_python,
    probe_script_source,
)
from tests.support.fakes import FakeEnv

PY = "/opt/venv/bin/python"
ARGV = (PY, "-c", "<probe script>")


def line(obj: dict) -> str:
    return MARK + json.dumps(obj)


def stage(name: str) -> str:
    return line({"stage": name})


def put(key: str, value) -> str:
    return line({"key": key, "value": value})


def out(*lines: str) -> str:
    return "\n".join(lines) + "\n"


PYTHON = {
    "executable": PY, "version": "3.11.9", "implementation": "cpython", "prefix": "/opt/venv",
    "base_prefix": "/usr", "platform": "linux", "cwd": "/home/ml/train", "in_venv": True,
}
PACKAGES = {
    "torch": [{"version": "2.4.1+cu124", "location": "/opt/venv/lib/python3.11/site-packages"}],
    "nvidia-nccl-cu12": [{"version": "2.20.5",
                          "location": "/opt/venv/lib/python3.11/site-packages"}],
}
TORCH_LOCATIONS = ["/opt/venv/lib/python3.11/site-packages/torch"]
BUILD = {
    "version": "2.4.1+cu124", "cuda": "12.4", "hip": None,
    "git_version": "ee1b6804381c57161c477caa380a840a84167676", "debug": False,
    "file": "/opt/venv/lib/python3.11/site-packages/torch/__init__.py", "cxx11_abi": False,
    "arch_list": ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"],
}
LIBRARIES = {"cudnn_available": True, "cudnn_version": 90100, "cudnn_compile_version": "9.1.0",
             "nccl_version": "2.20.5"}
DISTRIBUTED = {"available": True, "nccl_available": True, "gloo_available": True}
H100 = {"name": "NVIDIA H100 80GB HBM3", "capability": "9.0", "total_memory": 85045870592,
        "multi_processor_count": 132}
DEVICES = [
    {"index": 0, **H100, "uuid": "a4b1c2d3-0f2e-4c5b-9a8d-7e6f5a4b3c2d", "pci_bus_id": None},
    {"index": 1, **H100, "uuid": "b5c2d3e4-1a3f-4d6c-8b9e-8f7a6b5c4d3e", "pci_bus_id": None},
]
CUDA_BEFORE_INIT = {"available": True, "device_count": 0, "init_error": None, "devices": []}
CUDA_DONE = {"available": True, "device_count": 2, "init_error": None, "devices": DEVICES}

# A recording made before the probe timed its parts: every part unknown.
UNTIMED = {key: None for key in (*probe_script.PART_KEYS, "startup_s")}

# Everything the probe prints up to the moment it announces "import torch".
BEFORE_IMPORT = [
    stage("python"), put("python", PYTHON),
    stage("packages"), put("packages", PACKAGES), put("torch_locations", TORCH_LOCATIONS),
    stage("import torch"),
]
# ... and from a successful import up to announcing cuda.init.
AFTER_IMPORT = [
    put("import_error", None),
    stage("torch build"), put("build", BUILD),
    stage("torch libraries"), put("libraries", LIBRARIES),
    stage("torch.distributed"), put("distributed", DISTRIBUTED),
    stage("cuda.is_available"), put("cuda", CUDA_BEFORE_INIT),
    stage("cuda.init"),
]
HEALTHY = out(
    *BEFORE_IMPORT, *AFTER_IMPORT,
    stage("cuda.device_count"), put("cuda", CUDA_BEFORE_INIT | {"device_count": 2}),
    stage("cuda.device_properties:0"),
    put("cuda", CUDA_DONE | {"devices": DEVICES[:1]}),
    stage("cuda.device_properties:1"), put("cuda", CUDA_DONE),
    stage("done"),
)


def _facts(result: CommandResult) -> tuple:
    python, torch = interpret_probe(result, PY)
    assert (python.name, torch.name) == ("python", "torch")
    return python, torch


# ---------------------------------------------------------------- parsing


def test_parse_probe_output_merges_values_and_lists_stages():
    values, stages = parse_probe_output(HEALTHY)
    assert stages == [
        "python", "packages", "import torch", "torch build", "torch libraries",
        "torch.distributed", "cuda.is_available", "cuda.init", "cuda.device_count",
        "cuda.device_properties:0", "cuda.device_properties:1", "done",
    ]
    assert values["cuda"] == CUDA_DONE  # the last report of a key wins
    assert values["build"]["cuda"] == "12.4"
    assert set(values) == {"python", "packages", "torch_locations", "import_error", "build",
                           "libraries", "distributed", "cuda"}


def test_parse_ignores_foreign_and_cut_lines():
    stdout = (
        "sitecustomize: loading company hooks\n"  # the user's own output
        + stage("python") + "\n" + put("python", PYTHON) + "\n"
        + "  " + put("packages", PACKAGES) + "\n"  # not at line start: not ours
        + stage("import torch") + "\n"
        + MARK + '{"key": "build", "value": {"version": "2.4'  # cut by a crash mid-write
    )
    values, stages = parse_probe_output(stdout)
    assert values == {"python": PYTHON}
    assert stages == ["python", "import torch"]


# ---------------------------------------------------------------- interpret_probe


def test_healthy_cuda_run_two_gpus():
    python, torch = _facts(CommandResult(ARGV, 0, HEALTHY, "", duration_s=4.2))
    assert python.ok and torch.ok
    assert python.value == PYTHON | {"packages": PACKAGES, "torch_locations": TORCH_LOCATIONS}
    assert torch.value == {
        "probe": {"completed": True, "last_stage": "done", "timed_out": False, "returncode": 0,
                  "failure": None, "stderr_tail": None, "duration_s": 4.2,
                  "timings": UNTIMED},
        "import_error": None,
        "importable": True,
        "build": BUILD,
        "libraries": LIBRARIES,
        "distributed": DISTRIBUTED,
        "cuda": CUDA_DONE,
        "numpy": None,
        "torchvision": None,
        "exceptions": [],
    }
    assert python.duration_s == torch.duration_s == 4.2


def test_hang_in_cuda_init_keeps_everything_before_it():
    stdout = out(*BEFORE_IMPORT, *AFTER_IMPORT)
    result = CommandResult(ARGV, -15, stdout, "", timed_out=True, duration_s=90.0)
    python, torch = _facts(result)
    assert python.ok and torch.ok  # the probe hung, but it told us a lot first
    assert python.value["version"] == "3.11.9"
    assert python.value["packages"] == PACKAGES
    assert torch.value["build"] == BUILD
    assert torch.value["importable"] is True
    assert torch.value["import_error"] is None
    assert torch.value["cuda"] == CUDA_BEFORE_INIT
    assert torch.value["probe"] == {
        "completed": False, "last_stage": "cuda.init", "timed_out": True, "returncode": -15,
        "failure": f"{PY}: no answer within 90s, killed", "stderr_tail": None,
        "duration_s": 90.0, "timings": UNTIMED,
    }


def test_the_parts_the_probe_timed_are_kept_and_the_startup_is_the_rest():
    """The last timings line wins; a part never reached stays None; start-up is the
    parent's measured duration less the script's own total."""
    parts = {"packages_s": 0.05, "import_torch_s": 1.8, "torch_facts_s": 0.3,
             "cuda_init_s": 0.9}
    stdout = out(*BEFORE_IMPORT, put("timings", {"packages_s": 0.05}), *AFTER_IMPORT,
                 put("timings", parts), stage("done"),
                 put("timings", parts | {"gpu_tests_s": 0.6, "total_s": 3.7}))
    _, torch = _facts(CommandResult(ARGV, 0, stdout, "", duration_s=4.2))
    assert torch.value["probe"]["timings"] == UNTIMED | parts | {
        "gpu_tests_s": 0.6, "total_s": 3.7, "startup_s": 0.5}


def test_a_probe_killed_before_its_total_has_parts_but_no_startup():
    stdout = out(*BEFORE_IMPORT, put("timings", {"packages_s": 0.05, "import_torch_s": "x"}))
    result = CommandResult(ARGV, -15, stdout, "", timed_out=True, duration_s=90.0)
    _, torch = _facts(result)
    assert torch.value["probe"]["timings"] == UNTIMED | {"packages_s": 0.05}


def test_segfault_inside_import_torch():
    stderr = ("Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f3a (most recent "
              "call first):\n  File \"<frozen importlib._bootstrap>\", line 241 in "
              "_call_with_frames_removed\n")
    result = CommandResult(ARGV, -11, out(*BEFORE_IMPORT), stderr, duration_s=1.3)
    python, torch = _facts(result)
    assert python.ok and torch.ok
    assert python.value["packages"] == PACKAGES
    assert torch.value["importable"] is False
    assert torch.value["import_error"] == {
        "type": "ProbeFailure",
        "message": f"import torch did not finish: {PY}: killed by SIGSEGV (exit code -11)",
    }
    assert torch.value["build"] is None
    assert torch.value["probe"]["last_stage"] == "import torch"
    assert torch.value["probe"]["failure"] == f"{PY}: killed by SIGSEGV (exit code -11)"
    assert torch.value["probe"]["stderr_tail"].startswith("Fatal Python error: Segmentation fault")


def test_torch_not_installed():
    exc = {"stage": "import torch", "type": "ModuleNotFoundError",
           "message": "No module named 'torch'",
           "traceback": "Traceback (most recent call last):\n  File \"<string>\", line 203, in "
                        "main\nModuleNotFoundError: No module named 'torch'\n"}
    stdout = out(
        *BEFORE_IMPORT[:3], put("packages", {}), put("torch_locations", []),
        stage("import torch"),
        put("import_error", {"type": "ModuleNotFoundError", "message": "No module named 'torch'"}),
        put("exceptions", [exc]),
        stage("done"),
    )
    python, torch = _facts(CommandResult(ARGV, 0, stdout, "", duration_s=0.2))
    assert python.value["packages"] == {}
    assert python.value["torch_locations"] == []
    assert torch.value["importable"] is False
    assert torch.value["import_error"] == {"type": "ModuleNotFoundError",
                                           "message": "No module named 'torch'"}
    assert torch.value["exceptions"] == [exc]
    assert torch.value["probe"]["completed"] is True
    assert torch.value["probe"]["failure"] is None


def test_interpreter_that_cannot_run_at_all():
    result = CommandResult((
        "/opt/gone/bin/python", "-c", "..."), None, "",
        "[Errno 2] No such file or directory: '/opt/gone/bin/python'", not_found=True)
    python, torch = interpret_probe(result, "/opt/gone/bin/python")
    for record in (python, torch):
        assert record.ok is False
        assert record.value is None
        assert record.error == ("could not run the probe in /opt/gone/bin/python: "
                                "/opt/gone/bin/python: not found")


def test_interpreter_that_prints_nothing():
    python, torch = _facts(CommandResult(ARGV, 127, "", "python: error while loading shared "
                                         "libraries: libpython3.11.so.1.0: cannot open shared "
                                         "object file: No such file or directory\n"))
    assert not python.ok and not torch.ok
    assert python.error.endswith("exit code 127: python: error while loading shared libraries: "
                                 "libpython3.11.so.1.0: cannot open shared object file: "
                                 "No such file or directory")


def test_secrets_in_stderr_are_redacted():
    hf = "hf_" + "Q8rTzLm3VbNx7KpWc2YdHs9JfGa4UeRi6Oq1"
    stderr = f"warning: HF_TOKEN={hf} is deprecated\n"
    _, torch = _facts(CommandResult(ARGV, 0, HEALTHY, stderr))
    assert torch.value["probe"]["stderr_tail"] == "warning: HF_TOKEN=<redacted> is deprecated"


def test_private_key_cut_by_the_stderr_tail_is_still_redacted():
    body = [f"MIIEowIBAAKCAQEAvG1cQ8Zk2mJ3pQ9xKEYLINE{i:02d}" for i in range(18)]
    # 30 lines: the last 20 hold the END line and most of the key, not the BEGIN line.
    stderr = "\n".join(
        [f"noise {i}" for i in range(5)]
        + ["-----BEGIN RSA PRIVATE KEY-----", *body, "-----END RSA PRIVATE KEY-----"]
        + [f"after {i}" for i in range(5)]
    )
    _, torch = _facts(CommandResult(ARGV, 1, HEALTHY, stderr))
    tail = torch.value["probe"]["stderr_tail"]
    last_20 = stderr.splitlines()[-20:]
    assert "-----BEGIN RSA PRIVATE KEY-----" not in last_20  # the cut falls inside the key
    assert "after 4" in tail
    assert not any(b in tail for b in body)


def test_hang_before_import_torch_is_not_blamed_on_torch():
    stdout = out(stage("python"), put("python", PYTHON), stage("packages"))
    result = CommandResult(ARGV, -15, stdout, "", timed_out=True, duration_s=90.0)
    _, torch = _facts(result)
    assert torch.value["probe"]["last_stage"] == "packages"
    message = torch.value["import_error"]["message"]
    assert "import torch did not finish" not in message
    assert "packages" in message


def test_probe_python_runs_the_script_in_the_given_interpreter():
    env = FakeEnv(commands=[((PY, "-c"), CommandResult(ARGV, 0, HEALTHY, "", duration_s=3.0))])
    python, torch = probe_python(env, PY, timeout=30)
    assert env.calls == [(PY, "-c", probe_script_source())]
    assert python.value["executable"] == PY
    assert torch.value["cuda"]["device_count"] == 2


# ---------------------------------------------------------------- real runs on this machine


def _torch_dir() -> str:
    spec = importlib.util.find_spec("torch")  # locates without importing
    assert spec and spec.submodule_search_locations
    return os.path.realpath(next(iter(spec.submodule_search_locations)))


@pytest.mark.slow
@pytest.mark.spawns
def test_real_probe_in_the_dev_interpreter():
    python, torch = probe_python(RealEnv(), sys.executable)
    assert python.ok and torch.ok, (python.error, torch.error)
    version = importlib.metadata.version("torch")  # 2.13.0+cpu in the dev venv
    assert python.value["executable"] == sys.executable
    assert python.value["version"] == platform.python_version()
    assert python.value["in_venv"] is (sys.prefix != sys.base_prefix)
    assert python.value["packages"]["torch"][0]["version"] == version
    assert [os.path.realpath(p) for p in python.value["torch_locations"]] == [_torch_dir()]
    assert torch.value["importable"] is True
    assert torch.value["import_error"] is None
    assert torch.value["build"]["version"] == version
    assert torch.value["probe"]["completed"] is True
    assert torch.value["probe"]["returncode"] == 0
    assert torch.value["distributed"]["available"] is True
    assert torch.value["distributed"]["gloo_available"] is True
    timings = torch.value["probe"]["timings"]
    assert timings["import_torch_s"] > 0.05 and timings["cuda_init_s"] is not None
    assert timings["startup_s"] is not None and timings["startup_s"] >= 0
    assert 0 < timings["total_s"] <= torch.value["probe"]["duration_s"]
    assert timings["import_torch_s"] + timings["cuda_init_s"] <= timings["total_s"]
    if version.endswith("+cpu"):
        assert timings["gpu_tests_s"] is None  # no GPU to test
        assert torch.value["build"]["cuda"] is None
        assert torch.value["libraries"] == {"cudnn_available": False, "cudnn_version": None,
                                            "cudnn_compile_version": None,
                                            "nccl_version": None}
        assert torch.value["cuda"] == {"available": False, "device_count": 0,
                                       "init_error": None, "devices": [], "functional": [],
                                       "cudnn_test": [], "p2p": None}
    numpy = torch.value["numpy"]
    try:
        assert numpy["version"] == importlib.metadata.version("numpy")
        assert numpy["bridge_error"] is None
    except importlib.metadata.PackageNotFoundError:  # the dev venv has no numpy
        assert numpy["import_error"] == "ModuleNotFoundError: No module named 'numpy'"


@pytest.fixture(scope="module")
def bare_venv(tmp_path_factory) -> Path:
    """A virtual environment with nothing installed (not even pip)."""
    path = tmp_path_factory.mktemp("venv") / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True,
                   timeout=60)
    return path


@pytest.mark.spawns
def test_real_probe_in_a_venv_without_torch(bare_venv):
    interpreter = str(bare_venv / "bin" / "python")
    python, torch = probe_python(RealEnv(), interpreter, timeout=60)
    assert python.ok and torch.ok
    assert python.value["prefix"] == str(bare_venv)
    assert python.value["in_venv"] is True
    assert "torch" not in python.value["packages"]
    assert python.value["torch_locations"] == []
    assert torch.value["importable"] is False
    assert torch.value["import_error"] == {"type": "ModuleNotFoundError",
                                           "message": "No module named 'torch'"}
    assert torch.value["probe"]["completed"] is True
    assert [e["stage"] for e in torch.value["exceptions"]] == ["import torch"]


def _script(path: Path, text: str) -> str:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.mark.spawns
def test_real_probe_of_a_hanging_interpreter_is_killed_at_the_deadline(tmp_path):
    hanging = _script(tmp_path / "python", "#!/bin/sh\nsleep 30\n")
    start = time.monotonic()
    python, torch = probe_python(RealEnv(), hanging, timeout=2)
    # The interpreter sleeps 30 s: ending well before that proves the kill at the deadline
    # (before: "< 10 s", a time a loaded machine's start-up could exceed).
    assert time.monotonic() - start < 25
    for record in (python, torch):
        assert record.ok is False
        assert record.error == (f"could not run the probe in {hanging}: "
                                f"{hanging}: no answer within 2s, killed")


# A stand-in torch package, so the probe's CUDA path runs for real on a CPU-only machine.
FAKE_TORCH = '''
import os, signal, time
MODE = os.environ.get("FAKE_TORCH_MODE", "healthy")
if MODE == "segv_on_import":
    os.kill(os.getpid(), signal.SIGSEGV)
__version__ = "2.4.1+cu124"

class version:
    cuda = "12.4"
    hip = None
    git_version = "ee1b6804381c57161c477caa380a840a84167676"
    debug = False

class _C:
    _GLIBCXX_USE_CXX11_ABI = False

    class _cudnn:
        @staticmethod
        def getCompileVersion():
            return (9, 1, 0)


class Generator:
    def manual_seed(self, seed):
        return self


class Tensor:
    def __init__(self, value, device="cpu"):
        self.value, self.device = value, device

    def to(self, device):
        return Tensor(self.value, device)

    def cpu(self):
        return Tensor(self.value)


def rand(*shape, **kwargs):
    return Tensor(0.5)


def matmul(a, b):
    if MODE == "hang_in_matmul_gpu1" and a.device == "cuda:1":
        time.sleep(60)
    return Tensor(a.value * b.value, a.device)


def allclose(a, b, rtol, atol):
    return a.value == b.value

class _Props:
    def __init__(self, index):
        self.name = "NVIDIA H100 80GB HBM3"
        self.major, self.minor = 9, 0
        self.total_memory = 85045870592
        self.multi_processor_count = 132
        self.uuid = "a4b1c2d3-0f2e-4c5b-9a8d-7e6f5a4b3c2%d" % index

class cuda:
    class nccl:
        @staticmethod
        def version():
            return (2, 20, 5)

    @staticmethod
    def is_available():
        return True

    @staticmethod
    def init():
        if MODE == "hang_in_cuda_init":
            time.sleep(60)

    @staticmethod
    def device_count():
        return 2

    @staticmethod
    def get_device_properties(index):
        return _Props(index)

    @staticmethod
    def get_arch_list():
        return ["sm_80", "sm_90"]

    @staticmethod
    def synchronize(device):
        pass

    @staticmethod
    def can_device_access_peer(i, j):
        return True

class backends:
    class cudnn:
        @staticmethod
        def is_available():
            return True

        @staticmethod
        def version():
            return 90100
'''
FAKE_DISTRIBUTED = '''
def is_available():
    return True

def is_nccl_available():
    return True

def is_gloo_available():
    return True
'''


@pytest.fixture
def fake_torch_path(tmp_path, monkeypatch):
    root = tmp_path / "fake_site"
    (root / "torch" / "distributed").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text(textwrap.dedent(FAKE_TORCH))
    (root / "torch" / "distributed" / "__init__.py").write_text(FAKE_DISTRIBUTED)
    monkeypatch.setenv("PYTHONPATH", str(root))  # RealEnv children inherit the environment
    return root


@pytest.mark.spawns
def test_real_probe_cuda_path_with_a_stand_in_torch(bare_venv, fake_torch_path):
    interpreter = str(bare_venv / "bin" / "python")
    python, torch = probe_python(RealEnv(), interpreter, timeout=60)
    assert python.value["torch_locations"] == [str(fake_torch_path / "torch")]
    assert torch.value["probe"]["completed"] is True
    assert torch.value["build"]["cuda"] == "12.4"
    assert torch.value["libraries"] == LIBRARIES
    assert torch.value["distributed"] == DISTRIBUTED
    cuda = torch.value["cuda"]
    assert (cuda["available"], cuda["device_count"], cuda["init_error"]) == (True, 2, None)
    assert [(d["index"], d["name"], d["capability"], d["uuid"]) for d in cuda["devices"]] == [
        (0, "NVIDIA H100 80GB HBM3", "9.0", "a4b1c2d3-0f2e-4c5b-9a8d-7e6f5a4b3c20"),
        (1, "NVIDIA H100 80GB HBM3", "9.0", "a4b1c2d3-0f2e-4c5b-9a8d-7e6f5a4b3c21"),
    ]
    assert [(r["index"], r["ok"]) for r in cuda["functional"]] == [(0, True), (1, True)]
    # The stand-in has no torch.nn: the cuDNN test fails on both, and says so.
    assert [(r["ok"], r["error"]) for r in cuda["cudnn_test"]] == [
        (False, "AttributeError: module 'torch' has no attribute 'nn'")] * 2
    assert cuda["p2p"] == {"matrix": [[None, True], [True, None]], "error": None,
                           "timed_out": False}
    assert torch.value["exceptions"] == []


@pytest.mark.spawns
def test_real_probe_gpu_hung_in_matmul_is_named_and_the_probe_finishes(
        bare_venv, fake_torch_path, monkeypatch):
    """GPU 1's matmul never returns: its deadline names it, the report still completes,
    and the child leaves its stuck thread behind instead of waiting on it."""
    monkeypatch.setenv("FAKE_TORCH_MODE", "hang_in_matmul_gpu1")
    source = probe_script_source().replace(
        f"GPU_DEADLINE_S = {probe_script.GPU_DEADLINE_S}", "GPU_DEADLINE_S = 0.5")
    assert source != probe_script_source()
    interpreter = str(bare_venv / "bin" / "python")
    start = time.monotonic()
    result = RealEnv().run([interpreter, "-c", source], timeout=30)
    assert time.monotonic() - start < 20
    _, torch = interpret_probe(result, interpreter)
    assert torch.value["probe"]["completed"] is True
    assert torch.value["probe"]["returncode"] == 0
    functional = torch.value["cuda"]["functional"]
    assert [(r["index"], r["ok"], r["timed_out"]) for r in functional] == [
        (0, True, False), (1, False, True)]
    assert functional[1]["error"] == "no answer within 0.5s"


@pytest.mark.slow
@pytest.mark.spawns
def test_real_probe_hang_in_cuda_init_keeps_partial_results(bare_venv, fake_torch_path,
                                                            monkeypatch):
    monkeypatch.setenv("FAKE_TORCH_MODE", "hang_in_cuda_init")
    interpreter = str(bare_venv / "bin" / "python")
    start = time.monotonic()
    python, torch = probe_python(RealEnv(), interpreter, timeout=3)
    # The fake CUDA init hangs 30 s: ending well before that proves the deadline (before:
    # "< 12 s").
    assert time.monotonic() - start < 25
    assert python.ok and torch.ok
    assert python.value["executable"] == interpreter
    assert torch.value["build"]["version"] == "2.4.1+cu124"
    assert torch.value["importable"] is True
    probe = torch.value["probe"]
    assert (probe["completed"], probe["last_stage"], probe["timed_out"]) == (
        False, "cuda.init", True)
    assert probe["failure"] == f"{interpreter}: no answer within 3s, killed"


@pytest.mark.spawns
def test_real_probe_segfault_on_import(bare_venv, fake_torch_path, monkeypatch):
    monkeypatch.setenv("FAKE_TORCH_MODE", "segv_on_import")
    interpreter = str(bare_venv / "bin" / "python")
    python, torch = probe_python(RealEnv(), interpreter, timeout=60)
    assert python.ok and torch.ok
    assert torch.value["probe"]["returncode"] == -11
    assert torch.value["probe"]["last_stage"] == "import torch"
    assert torch.value["import_error"] == {
        "type": "ProbeFailure",
        "message": f"import torch did not finish: {interpreter}: killed by SIGSEGV "
                   "(exit code -11)",
    }


# ---------------------------------------------------------------- validate_interpreter


def test_validate_interpreter_accepts_the_dev_python():
    assert validate_interpreter(RealEnv(), sys.executable) == sys.executable


def test_validate_interpreter_resolves_a_bare_name_on_path(monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))
    name = os.path.basename(sys.executable)
    assert validate_interpreter(RealEnv(), name) == sys.executable


def test_validate_interpreter_rejects_a_directory(bare_venv):
    with pytest.raises(InterpreterError) as info:
        validate_interpreter(RealEnv(), str(bare_venv))
    assert str(info.value) == (f"--python {bare_venv}: is a directory; give the interpreter, "
                               f"e.g. {bare_venv}/bin/python")


def test_validate_interpreter_rejects_a_missing_path(tmp_path):
    missing = str(tmp_path / "nope" / "python3")
    with pytest.raises(InterpreterError, match=r": no such file$"):
        validate_interpreter(RealEnv(), missing)


def test_validate_interpreter_rejects_a_non_executable_file(tmp_path):
    plain = tmp_path / "python"
    plain.write_text("#!/bin/sh\n")
    with pytest.raises(InterpreterError, match=r": not executable$"):
        validate_interpreter(RealEnv(), str(plain))


@pytest.mark.parametrize("body", ["#!/bin/sh\nexit 0\n", "#!/bin/sh\necho Python 3.11.7\n",
                                  "#!/bin/sh\necho 'usage: tool [-c]' >&2\nexit 2\n"])
def test_validate_interpreter_rejects_programs_that_are_not_python(tmp_path, body):
    fake = _script(tmp_path / "python3", body)
    with pytest.raises(InterpreterError, match="not a Python interpreter"):
        validate_interpreter(RealEnv(), fake)


def test_validate_interpreter_rejects_bin_true():
    with pytest.raises(InterpreterError) as info:
        validate_interpreter(RealEnv(), "/bin/true")
    assert str(info.value) == "--python /bin/true: not a Python interpreter (no answer)"


def test_validate_interpreter_rejects_python2(tmp_path):
    py2 = _script(tmp_path / "python2", "#!/bin/sh\necho ddp-doctor-python-ok 2\n")
    with pytest.raises(InterpreterError, match="Python 2 cannot run PyTorch"):
        validate_interpreter(RealEnv(), py2)


@pytest.mark.parametrize(("value", "text"), [
    ((2, 20, 5), "2.20.5"),  # torch >= 1.9ish: a tuple
    (2708, "2.7.8"),  # torch 1.7: NCCL_VERSION_CODE, major*1000 + minor*100 + patch
    (21003, "2.10.3"),  # NCCL >= 2.9 encodes major*10000 + minor*100 + patch
    (22805, "2.28.5"),
])
def test_nccl_version_is_decoded_in_the_probe(value, text):
    assert probe_script.nccl_version_text(value) == text


@pytest.mark.parametrize(("value", "text"), [
    (13000, "13.0"),  # torchvision 0.26.0+cu130 on the live H200
    (12010, "12.1"),
    (11080, "11.8"),
    (-1, None),  # torchvision's "no CUDA operators"
    ("12.4", "12.4"),  # a string is kept as it is
    (None, None),
])
def test_torchvisions_int_cuda_version_is_written_as_torch_writes_its_own(value, text):
    assert probe_script.cuda_version_text(value) == text


@pytest.mark.spawns
def test_the_probe_leaves_without_the_interpreters_teardown(bare_venv, fake_torch_path,
                                                            tmp_path, monkeypatch):
    """Once everything is sent, the child exits at once: torch's teardown at interpreter exit
    (0.7 s of `check`'s 3.9 s on the development machine) never runs, and nothing is lost."""
    marker = tmp_path / "torn-down"
    init = fake_torch_path / "torch" / "__init__.py"
    init.write_text(init.read_text() + "\nimport atexit\natexit.register(lambda: open("
                    "os.environ['TEARDOWN_MARKER'], 'w').close())\n")
    monkeypatch.setenv("TEARDOWN_MARKER", str(marker))
    python, torch = probe_python(RealEnv(), str(bare_venv / "bin" / "python"), timeout=60)
    assert python.ok and torch.ok, (python.error, torch.error)
    assert torch.value["probe"]["completed"] is True
    assert torch.value["cuda"]["device_count"] == 2  # the results all arrived
    assert not marker.exists()  # the atexit handlers, torch's teardown among them, never ran
