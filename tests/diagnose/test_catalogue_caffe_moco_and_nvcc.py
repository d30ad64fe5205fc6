"""Catalogue entries for Caffe's CUDA and cuDNN checks, MoCo's DDP-only training scripts and
the CUDA compiler driver's architecture refusals (written when blind split H's studied half
was studied, docs/blind-misses.md): each reads its family of messages from the program that
prints them, leads a log that holds only that message with the cause's code, and leaves the
neighbouring line alone."""

from __future__ import annotations

import pytest

from tests.support.rules import lead, lead_reading

READINGS = [
    # Caffe 1.0 (include/caffe/util/cudnn.hpp CUDNN_CHECK, device_alternate.hpp CUDA_CHECK):
    # cudnnCreate refusing a grouped convolution's handles, and cudaMalloc of a blob
    ("F0521 14:06:36.175204 31854 cudnn_conv_layer.cpp:53] Check failed: status == "
     "CUDNN_STATUS_SUCCESS (4 vs. 0)  CUDNN_STATUS_INTERNAL_ERROR", "LOG079", "cudnn_failure"),
    ("Check failed: status == CUDNN_STATUS_SUCCESS (4 vs. 0) CUDNN_STATUS_INTERNAL_ERROR",
     "LOG079", "cudnn_failure"),
    ("F0903 14:31:26.106397 92421 syncedmem.cpp:56] Check failed: error == cudaSuccess "
     "(2 vs. 0)  out of memory", "LOG005", "gpu_out_of_memory"),
    # facebookresearch/moco main_moco.py (and the copies in repositories built on it)
    ("NotImplementedError: Only DistributedDataParallel is supported.", "LOG056",
     "ddp_usage_error"),
    # nvcc: an architecture the toolkit does not know, in the older and the newer wording
    ("nvcc fatal : Value 'sm_86' is not defined for option 'gpu-architecture'", "LOG028",
     "torch_arch_unsupported"),
    ("nvcc fatal   : Unsupported gpu architecture 'compute_86'", "LOG028",
     "torch_arch_unsupported"),
    ("nvcc fatal   : Unsupported gpu architecture 'sm_61'", "LOG028", "torch_arch_unsupported"),
]

NEAR_MISSES = [
    # nvcc refusing something other than an architecture
    "nvcc fatal   : Unknown option '-fopenmp'",
    # nvcc's deprecation warning before it builds the old architectures anyway
    "nvcc warning : The 'compute_35', 'compute_37', 'sm_35', and 'sm_37' architectures are "
    "deprecated, and may be removed in a future release",
    # the words without nvcc's prefix: a sentence, not the compiler's refusal
    "Unsupported gpu architecture 'compute_86'",
    # another NotImplementedError of a training script
    "NotImplementedError: Only DataParallel is supported for this model",
    # a cuDNN status Caffe reports for a bad layer parameter, not a handle it could not make
    "Check failed: status == CUDNN_STATUS_SUCCESS (3 vs. 0)  CUDNN_STATUS_BAD_PARAM",
]


@pytest.mark.parametrize(("line", "code", "category"), READINGS)
def test_the_message_alone_leads_with_its_cause(tmp_path, line, code, category):
    assert lead_reading(tmp_path, line) == (code, category)


@pytest.mark.parametrize("line", NEAR_MISSES)
def test_the_neighbouring_message_is_not_read_so(tmp_path, line):
    assert lead_reading(tmp_path, line)[0] not in {"LOG028", "LOG056", "LOG079"}


def test_torch_and_tensorflow_keep_the_memory_reading_of_cudnns_internal_error(tmp_path):
    """Only Caffe's own check moves to the `caffe` catalogue: torch's and TensorFlow's
    CUDNN_STATUS_INTERNAL_ERROR follow their memory pools filling the GPU (LOG037)."""
    for line in ("RuntimeError: cuDNN error: CUDNN_STATUS_INTERNAL_ERROR",
                 "E tensorflow/stream_executor/cuda/cuda_dnn.cc:329] Could not create cudnn "
                 "handle: CUDNN_STATUS_INTERNAL_ERROR"):
        assert lead_reading(tmp_path, line) == ("LOG037", "gpu_out_of_memory")


def test_the_nvcc_refusal_names_the_old_architecture_alternative(tmp_path):
    """The same refusal is printed for an architecture a newer toolkit dropped (sm_35 under
    CUDA 12): the finding says so and how to tell the two apart."""
    found = lead(tmp_path, "nvcc fatal   : Unsupported gpu architecture 'compute_35'\n")
    text = " ".join(str(e) for e in found.evidence)
    assert found.code.id == "LOG028"
    assert "package_conflict" in text
