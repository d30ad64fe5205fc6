"""The torch probe's slow parts run beside torch's and CUDA's start (issue 25): the package
listing beside ``import torch``, torchvision's import and NVML's start beside CUDA's
initialisation. Driven in-process with stand-ins that each wait for the other side to have
started, so a probe that ran them one after the other fails here instead of passing slowly.
"""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from ddp_doctor.facts import python_probe_script as script

WAIT_S = 5.0  # far longer than either side needs; reached only when they run in turn


@pytest.fixture
def probe(monkeypatch):
    """The probe's module state fresh, its lines collected instead of printed, and every
    step that needs a real torch replaced by a quick stand-in."""
    lines: list[dict] = []
    monkeypatch.setattr(script, "emit", lines.append)
    monkeypatch.setattr(script, "TIMINGS", {})
    monkeypatch.setattr(script, "EXCEPTIONS", [])
    monkeypatch.setattr(script, "EARLY_NVML", [])
    monkeypatch.setattr(script, "package_facts", lambda: {"torch": []})
    monkeypatch.setattr(script, "import_torch", lambda: (cpu_torch(), []))
    monkeypatch.setattr(script, "torch_side_facts", lambda torch, caught: {})
    monkeypatch.setattr(script, "cuda_facts", lambda torch, build: ({}, False))
    monkeypatch.setattr(script, "torchvision_facts", lambda: {"version": "0.0"})
    return lines


def cpu_torch(cuda=None):
    return SimpleNamespace(version=SimpleNamespace(cuda=cuda))


def values(lines, key):
    return [line["value"] for line in lines if line.get("key") == key]


def stages(lines):
    return [line["stage"] for line in lines if "stage" in line]


def meet(mine: threading.Event, theirs: threading.Event) -> bool:
    """Say this side started, then wait for the other: True when they ran together."""
    mine.set()
    return theirs.wait(WAIT_S)


def test_the_package_listing_runs_beside_import_torch(probe, monkeypatch):
    listing, importing = threading.Event(), threading.Event()
    met = []

    def package_facts():
        met.append(meet(listing, importing))
        return {"torch": [{"version": "2.13.0", "location": "/site"}]}

    def import_torch():
        met.append(meet(importing, listing))
        return cpu_torch(), []

    monkeypatch.setattr(script, "package_facts", package_facts)
    monkeypatch.setattr(script, "import_torch", import_torch)
    script.probe_steps(time.monotonic())
    assert met == [True, True]
    assert values(probe, "packages") == [{"torch": [{"version": "2.13.0", "location": "/site"}]}]
    # The main thread alone announces stages: it waits for the listing under its own.
    assert stages(probe)[-3:] == ["import torchvision", "packages", "done"]
    assert "packages_s" in script.TIMINGS and "import_torch_s" in script.TIMINGS


def test_the_listing_is_still_collected_when_torch_does_not_import(probe, monkeypatch):
    def import_torch():
        raise ImportError("libtorch_cpu.so: cannot open shared object file")

    monkeypatch.setattr(script, "import_torch", import_torch)
    script.probe_steps(time.monotonic())
    assert values(probe, "packages") == [{"torch": []}]
    assert values(probe, "import_error")[0]["type"] == "ImportError"
    assert stages(probe)[-2:] == ["packages", "done"]


def test_torchvision_imports_beside_cuda_start(probe, monkeypatch):
    vision, cuda = threading.Event(), threading.Event()
    met = []

    def torchvision_facts():
        met.append(meet(vision, cuda))
        return {"version": "0.28.0", "cuda": None, "import_error": None, "ops_error": None}

    def cuda_facts(torch, build):
        met.append(meet(cuda, vision))
        return {}, False

    monkeypatch.setattr(script, "torchvision_facts", torchvision_facts)
    monkeypatch.setattr(script, "cuda_facts", cuda_facts)
    script.probe_steps(time.monotonic())
    assert met == [True, True]
    assert values(probe, "torchvision")[0]["version"] == "0.28.0"
    assert isinstance(script.TIMINGS["torchvision_s"], float)


def test_a_hung_torchvision_import_is_where_the_probe_stopped(probe, monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(script, "torchvision_facts", lambda: release.wait(WAIT_S) and None)
    runner = threading.Thread(target=script.probe_steps, args=(time.monotonic(),), daemon=True)
    runner.start()
    try:
        deadline = time.monotonic() + WAIT_S
        while "import torchvision" not in stages(probe) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)  # a probe that went on would announce its next stage by now
        assert stages(probe)[-1] == "import torchvision"  # what the parent reports
    finally:
        release.set()
        runner.join(WAIT_S)
    assert stages(probe)[-1] == "done"


def test_nvml_starts_beside_cuda_on_a_cuda_build(probe, monkeypatch):
    started = threading.Event()
    answer = (SimpleNamespace(name="pynvml"), None)

    def load_nvml():
        started.set()
        return answer

    seen = []

    def cuda_facts(torch, build):
        seen.append(started.wait(WAIT_S))  # begun before CUDA's own start returns
        seen.append(script.started_nvml())  # the readings under load take that answer
        return {}, False

    monkeypatch.setattr(script, "load_nvml", load_nvml)
    monkeypatch.setattr(script, "import_torch", lambda: (cpu_torch(cuda="13.0"), []))
    monkeypatch.setattr(script, "cuda_facts", cuda_facts)
    script.probe_steps(time.monotonic())
    assert seen == [True, answer]


def test_a_cpu_build_does_not_start_nvml(probe, monkeypatch):
    calls = []
    monkeypatch.setattr(script, "load_nvml", lambda: calls.append(1) or (None, "no"))
    script.probe_steps(time.monotonic())
    assert calls == [] and script.EARLY_NVML == []


class Dist:
    """A distribution as importlib.metadata gives it; reading its METADATA is recorded."""

    def __init__(self, directory, name, version="1.0", parsed=None):
        self._path = directory
        self._name, self.version = name, version
        self.parsed = parsed if parsed is not None else []

    @property
    def metadata(self):
        self.parsed.append(self._name)
        return {"Name": self._name}


def test_the_listing_parses_only_the_distributions_of_interest(monkeypatch):
    from importlib import metadata

    parsed: list[str] = []
    dists = [
        Dist("/site/torch-2.13.0.dist-info", "torch", "2.13.0", parsed),
        Dist("/site/nvidia_cublas_cu12-12.8.dist-info", "nvidia-cublas-cu12", "12.8", parsed),
        Dist("/site/opencv_python-4.10.0.egg-info", "opencv-python", "4.10.0", parsed),
        Dist("/site/PyTorch_Lightning-2.4.0.dist-info", "PyTorch-Lightning", "2.4.0", parsed),
        Dist("/site/ultralytics.egg-info", "ultralytics", "8.3.0", parsed),
        Dist("/site/requests-2.32.dist-info", "requests", "2.32", parsed),
        Dist("/site/rich-14.0.dist-info", "rich", "14.0", parsed),
        Dist(None, "pillow", "11.0", parsed),  # no directory to read: its METADATA is read
    ]
    monkeypatch.setattr(metadata, "distributions", lambda: iter(dists))
    found = script.package_facts()
    assert sorted(found) == ["nvidia-cublas-cu12", "opencv-python", "pillow",
                             "pytorch-lightning", "torch", "ultralytics"]
    assert found["torch"] == [{"version": "2.13.0", "location": "/site"}]
    assert "requests" not in parsed and "rich" not in parsed
