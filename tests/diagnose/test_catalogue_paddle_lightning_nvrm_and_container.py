"""Catalogue entries for PaddlePaddle, Lightning, the NVRM kernel module and container
runtimes (written when blind split G was studied, docs/blind-misses.md): each reads its family
of messages from the program that prints them, leads a log that holds only that message with
the cause's code, and leaves the neighbouring line alone."""

from __future__ import annotations

import pytest

from tests.support.rules import lead, lead_reading

READINGS = [
    # PaddlePaddle (paddle/fluid/pybind/place.cc, phi/backends/gpu/cuda/cuda_info.cc,
    # memory/allocation/cuda_allocator.cc at v2.6.0)
    ("E0714 16:34:40.972663 31948 pybind.cc:1277] Cannot use GPU because you have installed "
     "CPU version PaddlePaddle.", "LOG023", "torch_cpu_only"),
    ("Invalid CUDAPlace(3), must inside [0, 1), because GPU number on your machine is 1",
     "LOG029", "gpu_not_visible"),
    ("InvalidArgumentError: Device id must be less than GPU count, but received id is: 3. "
     "GPU count is: 1.", "LOG029", "gpu_not_visible"),
    ("ResourceExhaustedError: Out of memory error on GPU 0. Cannot allocate 2.5GB memory on "
     "GPU 0, 21.2GB memory has been allocated and available memory is only 1.1GB.",
     "LOG005", "gpu_out_of_memory"),
    ("Out of memory error on GPU 0. Cannot allocate 6.933594GB memory on GPU 0, available "
     "memory is only 726.750000MB.", "LOG005", "gpu_out_of_memory"),
    # Lightning 1.x and 2.x: the Trainer asked for GPUs torch cannot see
    ("pytorch_lightning.utilities.exceptions.MisconfigurationException: GPUs requested but "
     "none are available.", "LOG024", "torch_cpu_only"),
    ("lightning_fabric.utilities.exceptions.MisconfigurationException: `CUDAAccelerator` can "
     "not run on your system since the accelerator is not available. The following "
     "accelerator(s) is available and can be passed into `accelerator` argument of "
     "`Trainer`: ['cpu'].", "LOG024", "torch_cpu_only"),
    ("MisconfigurationException: GPUAccelerator can not run on your system since the "
     "accelerator is not available.", "LOG024", "torch_cpu_only"),
    # NVRM (kernel-open/nvidia/nv.c): a GPU the loaded module does not support
    ("[   87.358035] NVRM: nvidia.ko because it does not include the required GPU",
     "LOG009", "driver_missing"),
    ("NVRM: installed in this system is not supported by the NVIDIA 545.29.06 driver release.",
     "LOG009", "driver_missing"),
    # moby before v23.0
    ("docker: Error response from daemon: Unknown runtime specified nvidia.",
     "LOG071", "cuda_init_failure"),
]

NEAR_MISSES = [
    # Lightning's MPS accelerator on a machine that is not a Mac says nothing of CUDA
    "MisconfigurationException: `MPSAccelerator` can not run on your system since the "
    "accelerator is not available.",
    # another container runtime that Docker does not know
    "docker: Error response from daemon: Unknown runtime specified runsc.",
    # Paddle's host-memory allocator
    "Cannot allocate 2.5GB memory on CPU",
]


@pytest.mark.parametrize(("line", "code", "category"), READINGS)
def test_the_message_alone_leads_with_its_cause(tmp_path, line, code, category):
    assert lead_reading(tmp_path, line) == (code, category)


@pytest.mark.parametrize("line", NEAR_MISSES)
def test_the_neighbouring_message_is_not_read_so(tmp_path, line):
    assert lead_reading(tmp_path, line)[0] not in {"LOG024", "LOG071", "LOG005"}


def test_the_open_modules_refusal_explains_the_rminitadapter_failure(tmp_path):
    """The GSP refusal is the cause; the RmInitAdapter failure after it (hardware_fault on
    its own) is its consequence (zzzhouuu/truenas-nvidia-drivers#20)."""
    found = lead(tmp_path,
                 "[   87.358035] NVRM: The NVIDIA GPU 0000:03:00.0 (PCI ID: 10de:1bb3)\n"
                 "               NVRM: installed in this system is not supported by open\n"
                 "               NVRM: nvidia.ko because it does not include the required GPU\n"
                 "               NVRM: System Processor (GSP).\n"
                 "[  988.289884] NVRM: GPU 0000:03:00.0: RmInitAdapter failed! "
                 "(0x24:0x72:1603)\n")
    assert (found.code.id, found.code.category.value) == ("LOG009", "driver_missing")
