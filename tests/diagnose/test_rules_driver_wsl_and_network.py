"""Rules for what drivers, WSL, NCCL's topology and Gloo's address say, each on its real line
and on a near miss it must leave alone.

Each rule states what its error means (the CUDA error number, NCCL's lookup, torch's own
warning), so the thread's line is matched and so is the same core in another library's
words; a line that only looks alike (an OS errno with the same text, another device type)
is not. The WSL and Gloo readings depend on the rest of the log, so they are run through
``diagnose`` on whole texts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_doctor.logrules import RULES
from ddp_doctor.model import Severity
from tests.support.rules import corpus_lead, diagnosed, first_code, matched_codes


@pytest.mark.parametrize("code", ["LOG009", "LOG018", "LOG080", "LOG081", "LOG082"])
def test_each_rules_examples_are_read_as_its_code(code: str) -> None:
    rule = next(r for r in RULES if r.code.id == code)
    for example in rule.examples:
        assert code in matched_codes(example), example


# -- the thread's own log is read as its cause ------------------------------------------------

@pytest.mark.parametrize(("name", "code", "category"), [
    ("pop-os-690.log", "LOG009", "driver_missing"),  # nvidia-settings: driver not loaded
    ("bitsandbytes-52.log", "LOG018", "wsl_setup"),  # bitsandbytes: libcuda.so not found
    ("cudf-11382.log", "LOG080", "wsl_setup"),  # 801 cudaErrorNotSupported
    ("nemo-speech-13996.log", "LOG081", "nccl_network"),  # NCCL: Could not find NET
    ("aws-do-eks-50.log", "LOG082", "nccl_network"),  # Gloo on 127.0.0.1, peers refused
    ("wsl-6098.log", "DIAG003", "wsl_setup"),  # a Windows build beside a CUDA error
])
def test_the_threads_log_names_its_cause(name: str, code: str, category: str) -> None:
    found = corpus_lead(name)
    assert (found.code.id, found.code.category.value) == (code, category)
    assert found.effective_severity is Severity.ERROR


# -- the same core in other words, and the near misses ------------------------------------------

@pytest.mark.parametrize(("line", "code"), [
    ("ERROR: NVIDIA driver is not loaded", "LOG009"),
    # nvidia-settings' other line says only that it found nothing to query
    ("ERROR: Unable to load info from any available system", None),
    ("NVIDIA driver is loaded and nvidia-smi works", None),
])
def test_nvidia_settings_driver_not_loaded(line: str, code: str | None) -> None:
    assert first_code(line) == code


@pytest.mark.parametrize(("line", "code"), [
    ("RuntimeError: libcuda.so cannot found!", "LOG018"),
    ("CUDA SETUP: WARNING! libcuda.so not found! Do you have a CUDA driver installed?",
     "LOG018"),
    # the versioned library is the driver's own: its absence is no driver, not WSL's path
    ("OSError: libcuda.so.1: cannot open shared object file: No such file or directory",
     "LOG009"),
    ("CUDA SETUP: libcuda.so.1 not found in /usr/lib64", None),
    ("CUDA SETUP: CUDA runtime path found: /usr/local/cuda/lib64/libcudart.so", None),
])
def test_unversioned_libcuda_not_found(line: str, code: str | None) -> None:
    assert first_code(line) == code


@pytest.mark.parametrize(("line", "code"), [
    ("RuntimeError: CUDA error: operation not supported\nCUDA kernel errors might be "
     "asynchronously reported at some other API call", "LOG080"),
    ("numba.cuda.cudadrv.driver.CudaAPIError: [801] Call to cuMemHostRegister results in "
     "CUDA_ERROR_NOT_SUPPORTED", "LOG080"),
    # the same words from the operating system (errno 95 on a filesystem) are not CUDA's
    ("OSError: [Errno 95] Operation not supported: '/mnt/share/ckpt.lock'", None),
    # cuDNN's own NOT_SUPPORTED is an unsupported convolution configuration
    ("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you "
     "passed in a non-contiguous input.", "LOG034"),
])
def test_cuda_operation_not_supported(line: str, code: str | None) -> None:
    assert first_code(line) == code


def test_operation_not_supported_names_the_native_alternative() -> None:
    rule = next(r for r in RULES if r.code.id == "LOG080")
    assert any(a.startswith("cuda_init_failure:") for a in rule.alternatives)
    assert any(s.command == "uname -r" for s in rule.decide)


@pytest.mark.parametrize(("line", "code"), [
    ("node7:2201:2260 [3] graph/topo.h:230 NCCL WARN Could not find NIC with id 2", "LOG081"),
    # a GPU missing from the topology is not a network device
    ("graph/topo.h:230 NCCL WARN Could not find GPU with id 1", None),
    # NCCL probing for an external net plugin, found none: it uses its own
    ("NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
     None),
])
def test_nccl_topology_without_the_network_device(line: str, code: str | None) -> None:
    assert first_code(line) == code


def test_nccl_topology_warning_explains_the_internal_error_after_it() -> None:
    text = ("graph/topo.h:230 NCCL WARN Could not find NET with id 0\n"
            "RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
            "1275, internal error, NCCL version 2.21.5\n")
    assert first_code(text) == "LOG081"


# -- Gloo's loopback fallback: a warning alone, the cause of a refused connection ------------

LOOPBACK = ("[W ProcessGroupGloo.cpp:694] Warning: Unable to resolve hostname to a (local) "
            "address. Using the loopback address as fallback. Manually set the network "
            "interface to bind to with GLOO_SOCKET_IFNAME. (function operator())\n")
REFUSED = ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect "
           "[127.0.0.1]:31863: Connection refused\n")


def test_loopback_fallback_explains_the_refused_connection(tmp_path: Path) -> None:
    found = diagnosed(tmp_path, LOOPBACK + REFUSED)
    assert found[0].code.id == "LOG082"
    assert found[0].effective_severity is Severity.ERROR
    assert any(e.label.startswith("consequence, line 2") and "LOG053" in e.value
               for e in found[0].evidence)
    assert "LOG053" not in {f.code.id for f in found}  # folded in, not a second cause


def test_loopback_fallback_alone_is_a_warning(tmp_path: Path) -> None:
    # One machine alone works over 127.0.0.1: nothing failed, nothing to blame.
    found = diagnosed(tmp_path, LOOPBACK + "epoch 1: loss 0.731\n")
    assert found[0].code.id == "LOG082"
    assert found[0].effective_severity is Severity.WARNING


def test_loopback_fallback_does_not_explain_other_failures(tmp_path: Path) -> None:
    found = diagnosed(tmp_path, LOOPBACK + "torch.OutOfMemoryError: CUDA out of memory. Tried "
                                          "to allocate 2.00 GiB\n")
    assert found[0].code.id == "LOG005"


def test_refused_connection_without_the_fallback_stays_a_rendezvous_failure(
        tmp_path: Path) -> None:
    assert diagnosed(tmp_path, REFUSED)[0].code.id == "LOG053"


def test_the_hostname_warning_in_other_words_is_not_the_fallback() -> None:
    # name resolution failing for the rendezvous host is the rendezvous' own error
    assert first_code("torch.distributed.DistNetworkError: The client socket has failed to "
                 "connect to the TCPStore: Name or service not known (gai error: -2)") \
        == "LOG052"
    assert "LOG082" not in matched_codes("Warning: Unable to resolve hostname node-3 (DNS)")


# -- a Windows build stated beside a Linux CUDA error: WSL ----------------------------------

BUSY = "RuntimeError: CUDA error: all CUDA-capable devices are busy or unavailable\n"


@pytest.mark.parametrize("stated", [
    "Windows build number: 10.0.19045.0",
    "Windows version: 10.0.22631.3447",
    "Microsoft Windows [Version 10.0.20231.1005]",
])
def test_a_stated_windows_build_reads_cuda_failures_as_wsl(tmp_path: Path,
                                                            stated: str) -> None:
    found = diagnosed(tmp_path, f"{stated}\n>>> torch.zeros(1).cuda()\n{BUSY}")
    assert found[0].code.id == "DIAG003"
    assert any(e.value == stated for e in found[0].evidence)


def test_windows_paths_make_it_a_native_windows_log(tmp_path: Path) -> None:
    text = ("Windows build number: 10.0.19045.0\n"
            'File "C:\\Users\\me\\train.py", line 3, in <module>\n' + BUSY)
    assert diagnosed(tmp_path, text)[0].code.id == "LOG014"


def test_windows_without_a_build_number_is_no_marker(tmp_path: Path) -> None:
    assert diagnosed(tmp_path, "Runtime error on Windows:\n" + BUSY)[0].code.id == "LOG014"


# -- Secure Boot refusing the driver's module ---------------------------------------------------

@pytest.mark.parametrize("line", [
    "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service",
    "modprobe: ERROR: could not insert 'nvidia_uvm': Required key not available",
    "insmod: ERROR: could not insert module nvidia.ko: Key was rejected by service",
])
def test_secure_boot_refusing_the_module_is_no_driver_with_its_own_steps(
        tmp_path: Path, line: str) -> None:
    found = diagnosed(tmp_path, line + "\n")[0]
    assert found.code.id == "LOG009"
    assert found.remediation[0].command.startswith("mokutil --sb-state")


def test_another_modules_rejected_key_is_not_the_gpu_driver() -> None:
    assert "LOG009" not in matched_codes(
        "modprobe: ERROR: could not insert 'px1800kbd': Key was rejected by service")


def test_the_run_installers_load_failure_is_no_driver(tmp_path: Path) -> None:
    found = diagnosed(tmp_path, "ERROR: Unable to load the kernel module 'nvidia.ko'.  This "
                                "happens most frequently when this kernel module was built "
                                "against the wrong or improperly configured kernel sources\n")[0]
    assert (found.code.id, found.remediation[0].command) == (
        "LOG009", "lsmod | grep -E 'nvidia|nouveau'; dkms status; uname -r")
