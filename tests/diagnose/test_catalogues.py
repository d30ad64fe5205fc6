"""The message catalogues (logrules/catalogues/*.toml) and the loader that makes them rules.

Per entry: every template matches the line the program would print from it, every real
line quoted from a public thread matches, near misses do not; the engine then reads the
line with the entry's code unless a hand-written rule already reads it. Per catalogue:
nothing of benign output matches an error entry, and every entry has a literal phrase the
scan can filter on (no entry is tried on every line). The loader rejects what it cannot
use, templates are tolerant across versions, and a new catalogue file becomes rules the
engine runs without an engine edit.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddp_doctor.diagnose import diagnose
from ddp_doctor.diagnose.literals import required_literals
from ddp_doctor.logrules import CATALOGUES, RULES, match_text
from ddp_doctor.logrules.catalogue import (
    CatalogueError,
    Entry,
    catalogue_rules,
    entry_rule,
    load_catalogues,
    read_catalogue,
    sample_line,
    template_gates,
    template_head,
    template_regex,
)
from ddp_doctor.logrules.rule import decided
from ddp_doctor.model import Severity
from tests.conftest import FIXTURES
from tests.support.rules import diagnosed, lead, log_codes

ENTRIES: list[Entry] = [entry for _, entries in CATALOGUES.values() for entry in entries]
IDS = [f"{e.source.name}:{e.templates[0][:40]}" for e in ENTRIES]
CODES = {r.code.id: r.code for r in RULES}


def _rule(entry: Entry):
    return next(r for r in RULES if r.catalogue == entry.source.name
                and r.pattern.pattern == entry_rule(entry).pattern.pattern)


def _read_by_another(line: str, entry: Entry) -> bool:
    """Whether ``line`` is decided by another rule than the entry's: a hand-written rule
    that reads it, or (for a wrapper entry) a more specific entry (``rule.decided``)."""
    low = line.lower()
    matched = [r for r in RULES if any(a in low for a in r.anchors) and r.pattern.search(line)]
    return _rule(entry) in matched and _rule(entry) not in decided(matched)


def test_every_catalogue_names_its_source_and_has_entries():
    assert set(CATALOGUES) >= {"nccl", "cuda", "cudnn", "cublas", "nvml", "torch", "extensions",
                               "loader", "numpy", "kernel", "nvrm", "ofi"}
    for name, (source, entries) in CATALOGUES.items():
        assert source.name == name and source.repository and source.version and source.paths
        assert entries


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_each_template_matches_the_line_printed_from_it(entry, tmp_path):
    rule = _rule(entry)
    for template in entry.templates:
        line = sample_line(template, entry.prefix)
        assert rule.pattern.search(line), (template, line)
        assert any(a in line.lower() for a in rule.anchors), line
        # the engine reads the line with this entry's code, unless a hand-written rule (or,
        # for a wrapper, a more specific entry) already reads it: then that one decides
        found = {m.rule.code.id for m in match_text(line)}
        assert found and (entry.code.id in found or _read_by_another(line, entry)), (line, found)


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_no_log_printing_a_catalogued_message_gets_unknown(entry, tmp_path):
    """Issue 23: a log that prints a catalogued message alone is never read as "unknown"
    (DIAG001) nor left to the fallback's low-confidence guess (DIAG1xx): diagnose leads with
    the entry's cause, or with the rule that decides that line."""
    for template in entry.templates:
        line = sample_line(template, entry.prefix)
        found = lead(tmp_path, line + "\n")
        assert found.code.id.startswith("LOG"), (line, found.code.id)
        assert (found.code.id == entry.code.id
                or found.code.category is entry.code.category
                or _read_by_another(line, entry)), (line, found.code.id, found.code.category)


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.real],
                         ids=[i for e, i in zip(ENTRIES, IDS) if e.real])
def test_real_lines_from_public_threads_match(entry, tmp_path):
    rule = _rule(entry)
    for line, url in entry.real:
        assert url.startswith("https://github.com/")
        assert rule.pattern.search(line), (line, url)
        codes = log_codes(tmp_path, line)
        assert codes, (line, url)
        assert codes[0] == entry.code.id or _read_by_another(line, entry), (line, codes)


@pytest.mark.parametrize("entry", [e for e in ENTRIES if e.near_misses],
                         ids=[i for e, i in zip(ENTRIES, IDS) if e.near_misses])
def test_near_misses_do_not_match(entry):
    rule = _rule(entry)
    for line in entry.near_misses:
        assert not rule.pattern.search(line), line


BENIGN = (FIXTURES / "logs" / "benign.log").read_text(encoding="utf-8")


def test_benign_output_matches_no_catalogue_error_entry():
    entries = [r for r in RULES if r.catalogue and r.code.severity is Severity.ERROR]
    for line in BENIGN.splitlines():
        hits = [f"{r.catalogue}:{r.code.id}" for r in entries if r.pattern.search(line)]
        assert hits == [], (line, hits)


def test_every_entry_gives_the_scan_a_phrase_to_filter_on():
    """An entry without a required literal would be tried on every candidate line."""
    for rule in RULES:
        if rule.catalogue:
            phrases = required_literals(rule.pattern)
            assert phrases, rule.pattern.pattern
            assert all(len(p.strip()) >= 3 for p in phrases), phrases


def test_categories_agree_with_codes_and_codes_are_declared():
    for entry in ENTRIES:
        assert CODES[entry.code.id] is entry.code


# --- the example messages that gave "unknown" before the catalogues --------------------------

@pytest.mark.parametrize(("line", "code", "category"), [
    ("RuntimeError: CUDA error: peer access is not supported between these two devices",
     "LOG045", "nccl_p2p"),
    ("RuntimeError: Detected that PyTorch and torch_sparse were compiled with different CUDA "
     "versions. PyTorch has CUDA version 10.2 and torch_sparse has CUDA version 11.1. Please "
     "reinstall the torch_sparse that matches your PyTorch install.", "LOG089", "package_conflict"),
    ("/opt/anaconda3/envs/evodiff/lib/python3.12/site-packages/torch/distributed/distributed_c10d"
     ".py:633: UserWarning: Attempted to get default timeout for nccl backend, but NCCL support "
     "is not compiled", "LOG050", "nccl_unavailable"),
    ("RuntimeError: $ Torch: not enough memory: you tried to allocate 2GB. Buy new RAM! at "
     "..\\aten\\src\\TH\\THGeneral.cpp:204", "LOG006", "host_out_of_memory"),
    ("Duplicate GPU detected : rank 27 and rank 19 both on CUDA device 1a000", "LOG057",
     "ddp_usage_error"),
    ("gcn75:2336636:2336906 [0] enqueue.cc:58 NCCL WARN Cuda failure 'named symbol not found'",
     "LOG028", "torch_arch_unsupported"),
    ("undefined symbol: iJIT_NotifyEvent", "LOG022", "torch_missing"),
    ("ImportError: /opt/conda/envs/geo_deep_env/lib/python3.10/site-packages/torch/lib/"
     "libtorch_cpu.so: undefined symbol: iJIT_NotifyEvent", "LOG022", "torch_missing"),
    ("If you are a user of the module, the easiest solution will be to downgrade to 'numpy<2' or "
     "try to upgrade the affected module. We expect that some modules will need time to support "
     "NumPy 2.", "LOG026", "package_conflict"),
    ("Process finished with exit code 137 (interrupted by signal 9: SIGKILL)", "LOG007",
     "host_out_of_memory"),
    ("Process finished with exit code 137 (interrupted by signal 9:SIGKILL)", "LOG007",
     "host_out_of_memory"),
    # After blind split O: the other wordings of two new readings (NVRM on Blackwell, the
    # maintained Coqui trainer).
    ("kernel: NVRM: knvlinkDiscoverPostRxDetLinks_GB100_REV2: Getting peer17 postRxDetLinkMask "
     "failed!", "LOG017", "hardware_fault"),
    ("RuntimeError:  [!] 4 active GPUs. Define the target GPU by `CUDA_VISIBLE_DEVICES`. For "
     "multi-gpu training use `python -m trainer.distribute`.", "LOG117", "ddp_usage_error"),
    # Ray's OutOfMemoryError is the node's host memory, never the GPU's; torch's Inductor
    # raises OutOfMemoryError for shared memory, which is the GPU's generation, not its memory.
    ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
     "LOG038", "host_out_of_memory"),
    ("(raylet) Task _map_task failed due to oom. There are infinite oom retries remaining, so the "
     "task will be retried. Error: 1 worker(s) were killed due to the node running low on "
     "memory.", "LOG038", "host_out_of_memory"),
    ("torch.OutOfMemoryError: out of resource: triton_poi_fused_0 Required: 147456 Hardware "
     "limit:101376 Reducing block sizes or `num_stages` may help.",
     "LOG118", "torch_arch_unsupported"),
    ("torch.cuda.OutOfMemoryError", "LOG005", "gpu_out_of_memory"),
    ("OutOfResources: out of resource: shared memory, Required: 294912, Hardware limit: 166912.",
     "LOG118", "torch_arch_unsupported"),
    ("Could not solve for environment specs\nThe following packages are incompatible", "LOG027",
     "package_conflict"),
    ("  - nothing provides __cuda >=12 needed by pytorch-cuda-12.1-ha16c6d3_5", "LOG011",
     "driver_too_old"),
    # UCX's locked-memory hint and its wire-up failure (the fallback read "memory" as the GPU's)
    ("[1744644100.553280] [024ac696037d:188662:0]        ib_iface.c:1230 UCX  ERROR mlx5_0: "
     "ibv_create_cq(cqe=4096) failed: Cannot allocate memory : Please set max locked memory "
     "(ulimit -l) to 'unlimited' (current: 64 kbytes)", "LOG044", "nccl_network"),
    ("UCX  ERROR   no active messages transport to <no debug data>: posix/memory - Destination "
     "is unreachable", "LOG044", "nccl_network"),
    ("ValueError: Must flatten tensors with uniform dtype but got torch.bfloat16 and "
     "torch.float32", "LOG119", "ddp_usage_error"),
    ("ValueError: Must flatten tensors with uniform ``requires_grad`` when "
     "``use_orig_params=False``", "LOG119", "ddp_usage_error"),
    # After blind split P: JAX with no GPU platform, pasted with and without its RuntimeError
    ("RuntimeError: Unknown backend: 'gpu' requested, but no platforms that are instances of "
     "gpu are present. Platforms present are: cpu", "LOG121", "gpu_not_visible"),
    ("srun: error: Unable to create step for job 12345: Invalid generic resource (gres) "
     "specification", "LOG120", "gpu_not_visible"),
    ("Error: setting up CDI devices: unresolvable CDI devices nvidia.com/gpu=all", "LOG125",
     "cuda_init_failure"),
    ("ValueError: You set `devices=4` in Lightning, but the number of tasks per node configured "
     "in SLURM `--ntasks-per-node=1` does not match. HINT: Set `devices=1`.", "LOG057",
     "ddp_usage_error"),
    ("ERROR: Could not find a version that satisfies the requirement torch==1.13.1 (from "
     "versions: 2.2.0, 2.2.1, 2.2.2, 2.3.0)", "LOG021", "torch_missing"),
    ("pdsh@node1: node2: ssh exited with exit code 255", "LOG124", "rendezvous_failure"),
    ("ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. "
     "Your Tesla T4 GPU has compute capability 7.5.", "LOG098", "torch_arch_unsupported"),
    ("nvidia-container-cli: mount error: file creation failed: /var/lib/docker/overlay2/abc/"
     "merged/usr/bin/nvidia-smi: file exists: unknown", "LOG123", "cuda_init_failure"),
    # the same failure under WSL 2 (the .so.1 names it mounts) stays the hand-written LOG076
    ("nvidia-container-cli: mount error: file creation failed: /var/lib/docker/overlay2/abc/"
     "merged/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1: file exists: unknown", "LOG076",
     "wsl_setup"),
    # From the sources before split Q was read: the LLM stacks' start-up checks
    ("[rank3]: AssertionError: global batch size (80) is not divisible by micro batch size (5) "
     "times data parallel size (32)", "LOG126", "ddp_usage_error"),
    ("AssertionError: world size (6) is not divisible by tensor parallel size (4) times pipeline "
     "parallel size (1) times context parallel size (1)", "LOG126", "ddp_usage_error"),
    ("RuntimeError: world_size (12) is not divisible by 8", "LOG126", "ddp_usage_error"),
    ("(TaskRunner pid=2041) AssertionError: only support equal chunk. Got size of DataProto 2 and "
     "chunk 4.", "LOG126", "ddp_usage_error"),
    # a per-GPU size is not the GPU count: verl's check, not the YOLO batch rule (LOG058)
    ("AssertionError: normalized ppo_mini_batch_size 2 should be divisible by "
     "ppo_micro_batch_size_per_gpu 4", "LOG126", "ddp_usage_error"),
    ("AssertionError: batch-size 15 not multiple of GPU count 2", "LOG058", "ddp_usage_error"),
    ("RuntimeError: RowParallelLinear was called with gradient_accumulation_fusion set to True "
     "but the custom CUDA extension fused_weight_gradient_mlp_cuda module is not found. To use "
     "gradient_accumulation_fusion you must install APEX with --cpp_ext and --cuda_ext.",
     "LOG089", "package_conflict"),
    ("ValueError: Please launch distributed training with `llamafactory-cli` or `torchrun`.",
     "LOG117", "ddp_usage_error"),
    ("ValueError: This device does not support `pure_bf16`.", "LOG098",
     "torch_arch_unsupported"),
    ("[rank0]: ImportError: FlashAttention2 has been toggled on, but it cannot be used due to the "
     "following error: the package flash_attn seems to be not installed. Please refer to the "
     "documentation of https://huggingface.co/docs/transformers/perf_infer_gpu_one"
     "#flashattention-2 to install Flash Attention 2.", "LOG127", "package_conflict"),
    ("ValueError: FlashAttention2 has been toggled on, but it cannot be used due to the following "
     "error: Flash Attention 2 is not available on CPU. Please make sure torch can access a CUDA "
     "device.", "LOG030", "gpu_not_visible"),
    ("ValueError: DeepSpeed Zero-3 is not compatible with `low_cpu_mem_usage=True` or with "
     "passing a `device_map`.", "LOG128", "ddp_usage_error"),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling "
     "`cublasGemmStridedBatchedExFix( handle, opa, opb, m, n, k, (void*)(&falpha), a, "
     "CUDA_R_16BF, lda, stridea, b, CUDA_R_16BF, ldb, strideb, (void*)(&fbeta), c, CUDA_R_16BF, "
     "ldc, stridec, num_batches, CUDA_R_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP)`", "LOG098",
     "torch_arch_unsupported"),
    ("ModuleNotFoundError: No module named 'fused_layer_norm_cuda'", "LOG089",
     "package_conflict"),
    ("NotImplementedError: No operator found for `memory_efficient_attention_forward` with "
     "inputs:", "LOG089", "package_conflict"),
    ("torch._inductor.exc.TritonMissing: Cannot find a working triton installation. Either the "
     "package is not installed or it is too old.", "LOG129", "package_conflict"),
    ("ERROR: torch-2.1.0+cu121-cp311-cp311-linux_x86_64.whl is not a supported wheel on this "
     "platform.", "LOG021", "torch_missing"),
    ("ValueError: Some modules are dispatched on the CPU or the disk. Make sure you have enough "
     "GPU RAM to fit the quantized model.", "LOG005", "gpu_out_of_memory"),
    # flash-attn's compiled module refusing this torch: the extension's rebuild, not torchvision's
    ("ImportError: /usr/local/lib/python3.10/dist-packages/flash_attn_2_cuda.cpython-310-x86_64-"
     "linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi", "LOG089", "package_conflict"),
    ("ImportError: /usr/local/lib/python3.8/dist-packages/mmcv/_ext.cpython-38-x86_64-linux-gnu."
     "so: undefined symbol: _ZN2at5sliceERKNS_6TensorElll", "LOG025", "package_conflict"),
    ("gpu1:74737:75914 [1] transport/net_socket.cc:488 NCCL WARN NET/Socket : peer "
     "10.0.5.194<41988> message truncated : receiving 4 bytes instead of 2. If you believe your "
     "socket network is in healthy state, there may be a mismatch in collective sizes or "
     "environment settings (e.g. NCCL_PROTO, NCCL_ALGO) between ranks", "LOG051",
     "collective_timeout"),
    ("srun: error: Unable to allocate resources: Requested node configuration is not available",
     "LOG120", "gpu_not_visible"),
    ("RuntimeError: Attempting to deserialize object on CUDA device 3 but "
     "torch.cuda.device_count() is 1. Please use torch.load with map_location to map your "
     "storages to an existing device.", "LOG029", "gpu_not_visible"),
    # After blind split Q's study
    ("[   37.010658] NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:",
     "LOG130", "cuda_init_failure"),
    ("[   32.812372] IP: [<ffffffffc0740f8f>] _nv011740rm+0x1f/0x170 [nvidia]", "LOG131",
     "driver_missing"),
    ("[  101.000000] RIP: 0010:_nv012345rm+0x2a/0x1c0 [nvidia]", "LOG131", "driver_missing"),
    ("  Warning  UnexpectedAdmissionError  13s   kubelet  Allocate failed due to rpc error: code = "
     "Unknown desc = request for 'nvidia.com/gpu: 2' too large: maximum request size for shared "
     "resources is 1, which is unexpected", "LOG030", "gpu_not_visible"),
    ("Error: Unable to find a match: kernel-headers-5.14.0-570.112.1.el9_6.x86_64 "
     "kernel-devel-5.14.0-570.112.1.el9_6.x86_64", "LOG009", "driver_missing"),
    ('I0527 11:29:06.521964 3336959 nvidia_gpu.go:262] "gpu driver wasn\'t ready. will re-check '
     'in %s" 5s="(MISSING)"', "LOG009", "driver_missing"),
    ("Exiting due to exception: OOM when allocating tensor with shape[32,1,137,32] and type "
     "float on /job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc", "LOG005",
     "gpu_out_of_memory"),
    ("no socket interface found", "LOG043", "nccl_network"),
    ("OCI runtime create failed\nunsatisfied condition: cuda>=12.8", "LOG074",
     "driver_too_old"),
    ("ModuleNotFoundError: No module named 'torchvision.transforms.functional_tensor'", "LOG083",
     "package_conflict"),
    ("E0527 10:00:00.000000       1 factory.go:100] If this is a GPU node, did you set the docker "
     "default runtime to `nvidia`?", "LOG071", "cuda_init_failure"),
    ("E0527 10:00:00.000000       1 factory.go:118] Incompatible strategy detected auto",
     "LOG071", "cuda_init_failure"),
    # the driver's installation, from nvidia-installer's, DKMS's and nvidia-smi's sources
    ("ERROR: The Nouveau kernel driver is currently in use by your system.  This driver is "
     "incompatible with the NVIDIA driver, and must be disabled before proceeding.", "LOG009",
     "driver_missing"),
    ("ERROR: Unable to find the kernel source tree for the currently running kernel.  Please make "
     "sure you have installed the kernel source files for your kernel", "LOG009",
     "driver_missing"),
    ("ERROR: The kernel module failed to load. Secure boot is enabled on this system, so this is "
     "likely because it was not signed by a key that is trusted by the kernel.", "LOG009",
     "driver_missing"),
    ("Consult /var/lib/dkms/nvidia/545.29.06/build/make.log for more information.", "LOG009",
     "driver_missing"),
    ("subprocess.CalledProcessError: Command '['nvidia-smi']' returned non-zero exit status 9.",
     "LOG009", "driver_missing"),
    ("Failed to run command: nvidia-smi: exit status 15", "LOG017", "hardware_fault"),
    ("nvidia-smi: error while loading shared libraries: libnvidia-ml.so.1: cannot open shared "
     "object file: No such file or directory", "LOG009", "driver_missing"),
    ("torch.distributed.DistBackendError: [Rank 0]: Exception (either an error or timeout) "
     "detected by watchdog at work: 1, last enqueued NCCL work: 1, last completed NCCL work: -1.",
     "LOG047", "collective_timeout"),
    ("[E ProcessGroupGloo.cpp:138] Rank 1 successfully reached monitoredBarrier, but received "
     "errors while waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.",
     "LOG049", "collective_timeout"),
    # After blind split R's study
    ("ModuleNotFoundError: No module named 'numpy._core._multiarray_umath'", "LOG026",
     "package_conflict"),
    ("2024-05-01 12:00:00,000 WARNING: no GPU detected, will be using CPU", "LOG122",
     "torch_cpu_only"),
    ("SystemError: (Fatal) Blocking queue is killed because the data reader raises an exception.",
     "LOG041", "nccl_shared_memory"),
    # the wait pasted with its number elided
    ("RuntimeError: [../third_party/gloo/.../unbound_buffer.cc:81] Timed out waiting ... for recv",
     "LOG047", "collective_timeout"),
    # a module missing from the interpreter is the environment's, not torch's (the fallback read
    # every "No module named" as torch_missing); torch itself stays LOG021
    ("ModuleNotFoundError: No module named 'apex'", "LOG132", "package_conflict"),
    ("ImportError: No module named flash_attn", "LOG132", "package_conflict"),
    ("ModuleNotFoundError: No module named 'torch'", "LOG021", "torch_missing"),
    ("ModuleNotFoundError: No module named 'amp_C'", "LOG089", "package_conflict"),
    ("ImportError: libGL.so.1: cannot open shared object file: No such file or directory",
     "LOG133", "package_conflict"),
    ("KeyError: 'LOCAL_RANK'", "LOG056", "ddp_usage_error"),
    ("OSError: [Errno 24] Too many open files", "LOG110", "nccl_shared_memory"),
    ("RuntimeError: Input type (torch.cuda.FloatTensor) and weight type (torch.FloatTensor) "
     "should be the same", "LOG070", "ddp_usage_error"),
    ("RuntimeError: Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) "
     "should be the same", "LOG070", "ddp_usage_error"),
    # a compiled package's build, from torch's cpp_extension, gcc and pip
    ("OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install "
     "root.", "LOG089", "package_conflict"),
    ("RuntimeError: Ninja is required to load C++ extensions (pip install ninja to get it)",
     "LOG089", "package_conflict"),
    ("/tmp/pip-build/csrc/flash_api.cpp:5:10: fatal error: cuda_runtime.h: No such file or "
     "directory", "LOG089", "package_conflict"),
    ("ERROR: Could not build wheels for flash-attn, which is required to install "
     "pyproject.toml-based projects", "LOG089", "package_conflict"),
    # NVIDIA's Go libraries (go-nvlib, gpu-monitoring-tools) without libnvidia-ml.so.1
    ("E0312 09:20:11.123456       1 factory.go:87] Failed to initialize NVML: could not load "
     "NVML library.", "LOG071", "cuda_init_failure"),
    ("Error: Could not load NVML library", "LOG071", "cuda_init_failure"),
    # a first sentence alone: an issue title, a message wrapped by its program
    ("RuntimeError: Detected that PyTorch and torch_sparse were compiled with different CUDA "
     "versions.", "LOG089", "package_conflict"),
    ("NCCL WARN Multiple Ranks are using the same GPU/Partition.", "LOG057", "ddp_usage_error"),
    # After blind split S's study
    ("KeyError: \"Recognizer3D: 'SwinTransformer3D is not in the models registry'\"", "LOG132",
     "package_conflict"),
    ("KeyError: 'MyHead is not in the mmdet::model registry. Please check whether the value of "
     "`MyHead` is correct or it was registered as expected.'", "LOG132", "package_conflict"),
    ("RuntimeError: FlashAttention is only supported on CUDA 11.6 and above.  Note: make sure "
     "nvcc has a supported version by running nvcc -V.", "LOG089", "package_conflict"),
    ("tensorflow.python.framework.errors_impl.InternalError: Blas GEMM launch failed : "
     "a.shape=(32, 784), b.shape=(784, 512), m=32, n=512, k=784", "LOG037", "gpu_out_of_memory"),
    ("Error: cudaGetDeviceCount failed in paddle::platform::GetCUDADeviceCountImpl, error code : "
     "35, Please see detail in https://docs.nvidia.com/cuda/cuda-runtime-api/"
     "group__CUDART__TYPES.html", "LOG011", "driver_too_old"),
    ("Error: cudaGetDeviceCount failed in paddle::platform::GetCUDADeviceCountImpl, error code : "
     "100, Please see detail in https://docs.nvidia.com/cuda/", "LOG030", "gpu_not_visible"),
    ("Error: cudaGetDeviceCount failed in paddle::platform::GetCUDADeviceCountImpl, error code : "
     "30, Please see detail in https://docs.nvidia.com/cuda/", "LOG014", "cuda_init_failure"),
    ("WARNING: When using nvidia-container-cli with --contain NVIDIA_VISIBLE_DEVICES must be set "
     "or no GPUs will be available in container.", "LOG030", "gpu_not_visible"),
    ("[2025-03-13 09:41:40,475 E 1760803 1760803] gcs_rpc_client.h:179: Failed to connect to GCS "
     "within 60 seconds. GCS may have been killed. It's either GCS is terminated by `ray stop` or "
     "is killed unexpectedly.", "LOG052", "rendezvous_failure"),
    ("InternalError: Blas xGEMMBatched launch failed : a.shape=[16,64,64], b.shape=[16,64,64], "
     "m=64, n=64, k=64, batch_size=16", "LOG037", "gpu_out_of_memory"),
    ("tensorflow.python.framework.errors_impl.InternalError: Blas xGEMM launch failed : "
     "a.shape=[1,147456,64], b.shape=[1,64,64], m=147456, n=64, k=64 [Op:Einsum]", "LOG037",
     "gpu_out_of_memory"),
    ("RuntimeError: FlashAttention is only supported on CUDA 11", "LOG089", "package_conflict"),
    # the package-version family, from CPython's and transformers' sources
    ("AttributeError: module 'torch' has no attribute 'compiler'", "LOG101", "package_conflict"),
    ("AttributeError: module 'torch.amp' has no attribute 'GradScaler'", "LOG101",
     "package_conflict"),
    ("ValueError: Tokenizer class Qwen2Tokenizer does not exist or is not currently imported.",
     "LOG101", "package_conflict"),
    ("RuntimeError: Failed to import transformers.trainer because of the following error (look "
     "up to see its traceback):", "LOG101", "package_conflict"),
    # torchaudio's own library built for another torch is not torch failing to import
    ("OSError: /usr/local/lib/python3.8/dist-packages/torchaudio/lib/libtorchaudio.so: undefined "
     "symbol: _ZN2at4_ops10zeros_like4callERKNS_6TensorE", "LOG025", "package_conflict"),
    ("OSError: /usr/local/lib/python3.9/site-packages/torch_npu/lib/libtorch_npu.so: undefined "
     "symbol: _ZN2at4_ops5zeros4callEN3c108ArrayRefINS2_6SymIntEEE", "LOG025", "package_conflict"),
    ("ImportError: /opt/conda/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so: undefined "
     "symbol: ncclCommRegister", "LOG022", "torch_missing"),
    # after blind split W: cuRAND's statuses by Marian's number and by CuPy's name
    ("[2018-11-03 19:40:29] Curand error 203 - /home/u/marian-dev/src/tensors/rand.cpp:80: "
     "curandCreateGenerator(&generator_, CURAND_RNG_PSEUDO_DEFAULT)", "LOG014",
     "cuda_init_failure"),
    ("cupy_backends.cuda.libs.curand.CURANDError: CURAND_STATUS_ARCH_MISMATCH", "LOG028",
     "torch_arch_unsupported"),
    ("CURANDError: CURAND_STATUS_ALLOCATION_FAILED", "LOG005", "gpu_out_of_memory"),
    # a process pool's worker gone without an exception, with its class name or pasted alone
    ("concurrent.futures.process.BrokenProcessPool: A process in the process pool was "
     "terminated abruptly while the future was running or pending.", "LOG006",
     "host_out_of_memory"),
    ("A process in the process pool was terminated abruptly while the future was running or "
     "pending.", "LOG006", "host_out_of_memory"),
    # torch 1.5+ DataParallel replicas hold no parameters
    ("StopIteration: Caught StopIteration in replica 1 on device 1.", "LOG083",
     "package_conflict"),
    # c10d cannot resolve the store's host name (a warning: it retries)
    ("[W socket.cpp:601] [c10d] The IPv6 network addresses of (ai-server, 44927) cannot be "
     "retrieved (gai error: -2 - Name or service not known).", "LOG054", "rendezvous_failure"),
    # TensorFlow pinning an op to a GPU it does not have, with and without its reason
    ("InvalidArgumentError (see above for traceback): Cannot assign a device for operation 'a': "
     "Could not satisfy explicit device specification '/device:GPU:2' because no devices "
     "matching that specification are registered in this process; available devices: "
     "/job:localhost/replica:0/task:0/device:CPU:0", "LOG029", "gpu_not_visible"),
    ("Could not satisfy explicit device specification '/gpu:3'", "LOG029", "gpu_not_visible"),
    # FlashAttention 1's bare TORCH_CHECK of the GPU, and its backward's shared-memory check
    ("RuntimeError: Expected is_sm8x || is_sm75 to be true, but got false.", "LOG098",
     "torch_arch_unsupported"),
    ("RuntimeError: Expected is_sm80 to be true, but got false.", "LOG118",
     "torch_arch_unsupported"),
    # after blind split X: Caffe's CUDA error 30 (no /dev/nvidia-uvm), Open MPI missing, torch
    # 0.x's warning of a build older than the GPU, a library's "CUDA is not available", an
    # installer's "+cpu" requirement
    ("F0528 22:26:23.117558 13844 syncedmem.hpp:18] Check failed: error == cudaSuccess (30 vs. "
     "0) unknown error", "LOG014", "cuda_init_failure"),
    ("ImportError: libmpi.so.40: cannot open shared object file: No such file or directory",
     "LOG133", "package_conflict"),
    ("    Found GPU0 GeForce RTX 2070 which requires CUDA_VERSION >= 9000 for", "LOG137",
     "torch_arch_unsupported"),
    ("RuntimeError: cusolver error: CUSOLVER_STATUS_NOT_INITIALIZED, when calling "
     "`cusolverDnCreate(handle)`", "LOG037", "gpu_out_of_memory"),
    # a Kubernetes service's full name does not resolve: read (only the local names are not)
    ("[W socket.cpp:558] [c10d] The IPv6 network addresses of (myjob-master-0.myjob.default.svc."
     "cluster.local, 23456) cannot be retrieved (gai error: -2 - Name or service not known).",
     "LOG054", "rendezvous_failure"),
    ("ValueError: Cuda is not available on this machine", "LOG024", "torch_cpu_only"),
    ("> 'https://download.pytorch.org/whl/cpu', 'torch>=2+cpu'", "LOG112", "torch_cpu_only"),
])



def test_example_messages_get_their_cause(tmp_path, line, code, category):
    found = lead(tmp_path, line + "\n")
    assert (found.code.id, found.code.category.value) == (code, category)


@pytest.mark.parametrize("line", [
    "RuntimeError: Caught RuntimeError in replica 0 on device 0.",
    "InvalidArgumentError: Cannot assign a device for operation 'MatMul_1': Could not satisfy "
    "explicit device specification '/device:GPU:0' because no supported kernel for GPU devices "
    "is available.",
    "Curand error 2031 in a sample",
])
def test_what_the_split_w_entries_leave_to_others(tmp_path, line):
    """A replica's other exceptions, an op with no GPU kernel (the code's matter) and a status
    number that is not cuRAND's are not read by these entries."""
    assert not {"LOG083", "LOG029", "LOG014"} & set(log_codes(tmp_path, line + "\n"))


@pytest.mark.parametrize("line", [
    # a cudaError_t number that is not 35 / 3 / 30 / 38 / 100 / 999 names none of these causes
    "Error: cudaGetDeviceCount failed in paddle::platform::GetCUDADeviceCountImpl, error code"
    " : 350",
    "Error: cudaGetDeviceCount failed in paddle::platform::GetCUDADeviceCountImpl, error code : 1",
])
def test_other_cuda_error_numbers_are_not_read_as_these(tmp_path, line):
    codes = log_codes(tmp_path, line + "\n")
    assert not {"LOG011", "LOG030", "LOG014"} & set(codes), codes


def test_the_lazy_import_gives_way_to_the_error_it_wraps(tmp_path):
    """transformers' "Failed to import X because of the following error" is followed by the
    error itself: that one is the cause."""
    text = ("RuntimeError: Failed to import transformers.trainer because of the following error "
            "(look up to see its traceback):\nRuntimeError: No CUDA GPUs are available\n")
    assert lead(tmp_path, text).code.id == "LOG030"


def test_a_ray_cluster_that_came_up_late_is_no_finding(tmp_path):
    """Ray warns while it waits for its head, then runs: only its fatal timeout is read."""
    text = ("[2025-03-13 09:40:40,475 W 1760803 1760803] gcs_rpc_client.h:148: Failed to connect "
            "to GCS at address 10.0.0.1:6379 within 5 seconds.\n"
            "[2025-03-13 09:41:10,479 W 1760803 1760803] gcs_client.cc:178: Failed to get cluster "
            "ID from GCS server: TimedOut: Timed out while waiting for GCS to become available.\n"
            "Connected to Ray cluster.\nEpoch 3: loss 0.21\nTraining finished.\n")
    assert "LOG052" not in log_codes(tmp_path, text)


def test_a_registry_miss_is_read_only_as_a_keyerror():
    assert [m.rule.code.id for m in match_text(
        "ERROR: image 'x' is not in the local registry")] == []


@pytest.mark.parametrize("line", [
    "AttributeError: module 'models' has no attribute 'resnet'",
    "AttributeError: module 'torchmetrics' has no attribute 'Accuracy'",
    "AttributeError: partially initialized module 'torch' has no attribute 'Tensor' (most likely "
    "due to a circular import)",
    "ImportError: FlashAttention is only supported on CUDA devices with compute capability >= 8.0",
    "[2025-03-13 09:41:40,475 E 1 1] core_worker.cc:592: The actor died because its worker "
    "process was killed unexpectedly",
    "[rank1]: Process group watchdog thread terminated, 3 ranks killed",
])
def test_lines_these_entries_must_not_read(line):
    """A module of the user's own or another package; a file named torch.py hiding torch; the
    GPU, not the toolkit; a bracketed log line that says "killed" (not a shell's job)."""
    assert not {"LOG101", "LOG089", "LOG007"} & {m.rule.code.id for m in match_text(line)}


def test_a_failed_build_gives_way_to_the_compilers_own_error(tmp_path):
    text = ("nvcc fatal   : Unsupported gpu architecture 'compute_90'\n"
            "RuntimeError: Error compiling objects for extension\n"
            "ERROR: Could not build wheels for flash-attn, which is required to install "
            "pyproject.toml-based projects\n")
    assert lead(tmp_path, text).category.value == "torch_arch_unsupported"


def test_an_oops_inside_the_driver_after_an_xid_is_the_gpus_fault(tmp_path):
    """A soft lockup inside nvidia.ko after Xid 79 is the driver stuck on a lost GPU: the Xid
    leads (hardware_fault), not the crash of the driver."""
    found = lead(tmp_path, (
        "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.\n"
        "watchdog: BUG: soft lockup - CPU#3 stuck for 22s! [nvidia-smi:1234]\n"
        "RIP: 0010:_nv043429rm+0x1c/0x90 [nvidia]\n"))
    assert (found.code.id, found.category.value) == ("LOG017", "hardware_fault")


def test_the_device_plugins_runtime_hint_gives_way_to_the_nvml_error(tmp_path):
    found = lead(tmp_path, (
        "E0527 10:00:00.000000 1 factory.go:99] Failed to initialize NVML: Driver Not Loaded.\n"
        "E0527 10:00:00.000000 1 factory.go:100] If this is a GPU node, did you set the docker "
        "default runtime to `nvidia`?\n"))
    assert found.code.id == "LOG009"
    # the hint first, then an NVML error of its own category (cuda_init_failure): without the
    # hint's symptom_of, the earlier line would lead
    found = lead(tmp_path, (
        "E0527 10:00:00.000000 1 factory.go:100] If this is a GPU node, did you set the docker "
        "default runtime to `nvidia`?\n"
        "Failed to initialize NVML: Insufficient Permissions\n"))
    assert found.code.id == "LOG014"


def test_the_batch_rule_reads_gpu_counts_named_as_variables(tmp_path):
    for line in ("AssertionError: batch size must be divisible by num_gpus",
                 "AssertionError: batch must be a multiple of n_gpu",
                 "AssertionError: batch size 30 not divisible by num_devices 4"):
        assert lead(tmp_path, line + "\n").code.id == "LOG058", line


def test_the_watchdogs_summary_gives_way_to_the_error_it_caught(tmp_path):
    # an illegal memory access (category unknown) ranks below collective_timeout by itself:
    # only the summary's symptom_of puts it first
    text = ("RuntimeError: CUDA error: an illegal memory access was encountered\n"
            "torch.distributed.DistBackendError: [Rank 0]: Exception (either an error or timeout) "
            "detected by watchdog at work: 1, last enqueued NCCL work: 1, last completed NCCL "
            "work: -1.\n")
    assert lead(tmp_path, text).code.id == "LOG035"


def test_an_unassigned_bar_explains_the_probe_failure_after_it(tmp_path):
    """nv.c prints the BAR, then the probe failure and 'no adapters initialized': the BAR (the
    platform's PCI allocation) leads, and the probe failure is its consequence."""
    found = diagnosed(tmp_path, (
        "[  194.072261] NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:\n"
        "[  194.072263] NVRM: BAR1 is 0M @ 0x0 (PCI:0002:00.0)\n"
        "[  194.072275] nvidia: probe of 0000:02:00.0 failed with error -1\n"
        "[  194.072305] NVRM: The NVIDIA probe routine failed for 1 device(s).\n"))
    assert found[0].code.id == "LOG130"
    assert "LOG009" not in [f.code.id for f in found[1:] if f.effective_severity.value == "error"]


def test_jax_s_cpu_build_warning_explains_its_refusal_of_the_gpu(tmp_path):
    """With JAX's warning that its jaxlib is the CPU build above it, the refusal of 'gpu' is
    that build's consequence: the lead is the CPU build, an error since the job failed."""
    warning = ("WARNING:2025-06-15 17:04:55,449:jax._src.xla_bridge:791: An NVIDIA GPU may be "
               "present on this machine, but a CUDA-enabled jaxlib is not installed. Falling "
               "back to cpu.\n")
    found = lead(tmp_path, warning + "RuntimeError: Unknown backend: 'gpu' requested, but no "
                 "platforms that are instances of gpu are present. Platforms present are: cpu\n")
    assert (found.code.id, found.category.value, found.severity.value) == (
        "LOG122", "torch_cpu_only", "error")
    # torch's own "no GPU" beside a CPU-fallback warning of another framework stays torch's
    found = lead(tmp_path, warning + "RuntimeError: CUDA error: no CUDA-capable device is "
                 "detected\n")
    assert found.category.value == "gpu_not_visible"


def test_nccl_last_error_block_leads_with_the_cause(tmp_path):
    """torch prints NCCL's wrapper, its own gloss and NCCL's last WARN on separate lines
    (NVIDIA/Megatron-LM#661): the duplicate GPU is the cause, the wrappers fold into it."""
    text = ("torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/csrc/"
            "distributed/c10d/ProcessGroupNCCL.cpp:1727, invalid usage (run with NCCL_DEBUG=WARN "
            "for details), NCCL version 2.19.3\n"
            "ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\n"
            "Last error:\n"
            "Duplicate GPU detected : rank 3 and rank 0 both on CUDA device f000")
    assert log_codes(tmp_path, text)[0] == "LOG057"


@pytest.mark.parametrize("after", ["", "step 1\n" * 3, "NCCL INFO Channel 00\n"])
def test_nccl_last_error_read_across_a_block_boundary(tmp_path, monkeypatch, after):
    """The file is read in blocks: when one ends right after torch's "Last error:", NCCL's
    warning starts the next, whether or not that block holds a gate word at all; it is read
    after NCCL's prefix as when both lines share a block."""
    import ddp_doctor.diagnose.source as source

    head = ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
            "internal error - please report this issue to the NCCL developers, NCCL version "
            "2.19.3\nLast error:\n")
    detail = ("socketPollConnect: Connect to 10.0.0.2<43271> returned 113(No route to host) "
              "errno 115(Operation now in progress)\n")
    whole = lead(tmp_path, head + detail + after).code.id
    # the first block is the sniffed head, the others BLOCK long: both end after "Last error:"
    monkeypatch.setattr(source, "SNIFF", len(head.encode()))
    monkeypatch.setattr(source, "BLOCK", len(head.encode()))
    assert lead(tmp_path, head + detail + after).code.id == whole == "LOG043"


# --- precedence: hand-written rules decide their lines --------------------------------------

def test_a_hand_written_rule_decides_the_line_it_reads():
    # LOG005 (hand-written) reads "CUDA out of memory"; the CUDA catalogue's
    # CUDA_ERROR_OUT_OF_MEMORY entry would read it too and must not add a finding
    line = "RuntimeError: CUDA error: out of memory CUDA_ERROR_OUT_OF_MEMORY"
    low = line.lower()
    matched = [r for r in RULES if any(a in low for a in r.anchors) and r.pattern.search(line)]
    assert any(r.catalogue for r in matched) and any(not r.catalogue for r in matched)
    assert all(not r.catalogue for r in decided(matched))


def test_a_wrapper_does_not_hide_the_cause_an_entry_reads():
    # "unhandled cuda error" is a hand-written wrapper (symptom of any error): the CUDA
    # catalogue's reading of the quoted error stands beside it and becomes the cause
    line = ("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1269, unhandled cuda error, NCCL "
            "version 2.18.1 Cuda failure 'named symbol not found'")
    codes = [m.rule.code.id for m in match_text(line)]
    assert codes[0] == "LOG028" and "LOG003" in codes


def test_the_most_specific_entry_reads_a_line_and_wrappers_give_way():
    # (enqueue.cc: in transport/p2p.cc the nccl entry for P2P failures reads it as LOG045 too)
    line = "enqueue.cc:200 NCCL WARN Cuda failure 'peer mapping resources exhausted'"
    low = line.lower()
    entries = [r for r in RULES if r.catalogue and any(a in low for a in r.anchors)
               and r.pattern.search(line)]
    assert {r.catalogue for r in entries} >= {"nccl", "cuda"}
    assert [(r.catalogue, r.code.id) for r in decided(entries)] == [("cuda", "LOG045")]


def test_the_scan_and_match_text_agree_on_precedence(tmp_path):
    for line in ("RuntimeError: CUDA error: out of memory",
                 "NCCL WARN Cuda failure 'named symbol not found'",
                 "died with <Signals.SIGKILL: 9>."):
        assert log_codes(tmp_path, line)[0] == match_text(line)[0].rule.code.id, line


# --- templates: tolerant across versions, exact about words ----------------------------------

@pytest.mark.parametrize(("template", "line"), [
    ("Cuda failure '%s'", 'NCCL WARN Cuda failure "out of memory"'),  # other quotes
    ("Cuda failure '%s'", "NCCL WARN CUDA FAILURE out of memory"),  # case, no quotes
    ("Bootstrap : no socket interface found", "NCCL WARN Bootstrap:no socket interface found"),
    ("Cuda extensions are being compiled with a version of Cuda that does not match the version "
     "used to compile Pytorch binaries.  Pytorch binaries were compiled with Cuda {}.",
     "Cuda extensions are being compiled with a version of Cuda that does not match the version "
     "used to compile Pytorch binaries. Pytorch binaries were compiled with Cuda 11.8"),
    ("interrupted by signal %d: SIGKILL", "(interrupted by signal 9:SIGKILL)"),
    ("Failed to CUDA malloc %ld bytes", "NCCL WARN Failed to CUDA malloc 1073741824 bytes"),
    ("Detected that PyTorch and {} were compiled with different CUDA versions.",
     "Detected that PyTorch and torch_scatter were compiled with different CUDA versions"),
    ("version `GLIBCXX_%s' not found (required by %s)",
     "libstdc++.so.6: version 'GLIBCXX_3.4.30' not found (required by /x/_C.so)"),
])
def test_templates_match_other_versions_of_the_line(template, line):
    assert re.search(template_regex(template), line, re.IGNORECASE), (template, line)


@pytest.mark.parametrize(("template", "line"), [
    ("Killed process %d (%s) total-vm:%lukB", "unKilled process 12 (python) total-vm:1kB"),
    ("invalid device ordinal", "invalid device ordinals"),
    ("undefined symbol: iJIT_NotifyEvent", "undefined symbol: iJIT_NotifyEventEx"),
])
def test_templates_keep_word_boundaries(template, line):
    assert not re.search(template_regex(template), line, re.IGNORECASE), (template, line)


def test_words_of_a_template_form_one_phrase_for_the_scan_filter():
    """One blank between two words stays one blank, so the scan filters a line on the
    whole phrase, not on one common word of it ("detected", "call")."""
    pattern = re.compile(template_regex("RM has detected an NVML/RM version mismatch"), re.I)
    assert required_literals(pattern) == ("rm has detected an nvml/rm version mismatch",)


def test_template_gates_are_read_inside_literal_text_only():
    assert template_gates("Cuda failure '%s'") == ("fail", "cud")
    assert template_gates("peer access is not supported between these two devices") == ()
    assert template_gates("%s: undefined symbol: %s") == ("undefined symbol",)


# --- the loader ------------------------------------------------------------------------------

GOOD = """
[source]
name = "demo"
repository = "https://github.com/example/demo"
version = "v1.0"
paths = ["src/demo.c"]
prefix = "DEMO ERROR: "

[[entry]]
template = "frobnicator jammed on device %d"
code = "LOG045"
category = "nccl_p2p"
fix = "Unjam it."
"""


def test_a_new_catalogue_file_becomes_rules_the_engine_runs(tmp_path):
    """Adding a catalogue needs no engine edit: the file alone gives a rule that the
    streaming scan gates, filters and reads."""
    folder = tmp_path / "catalogues"
    folder.mkdir()
    (folder / "demo.toml").write_text(GOOD, encoding="utf-8")
    loaded = load_catalogues(CODES, folder)
    rules = catalogue_rules(loaded.values())
    assert [r.code.id for r in rules] == ["LOG045"] and rules[0].anchors == ("error",)
    log = tmp_path / "job.log"
    log.write_text("step 1\nDEMO ERROR: frobnicator jammed on device 3\n", encoding="utf-8")
    findings = diagnose(str(log), rules=rules).report.results[0].findings
    assert findings[0].code.id == "LOG045"
    assert findings[0].remediation[0].text == "Unjam it."
    log.write_text("frobnicator jammed on device 3\n", encoding="utf-8")  # no gate word
    assert diagnose(str(log), rules=rules).report.results[0].findings[0].code.id != "LOG045"


def test_an_entry_leaves_unread_the_lines_that_say_it_is_harmless(tmp_path):
    """``unless``: the same message printed where it is harmless (an autotuner's rejected
    candidate) is not read, on the line that says so; elsewhere it still is."""
    folder = tmp_path / "catalogues"
    folder.mkdir()
    (folder / "demo.toml").write_text(GOOD + 'unless = ["Ignoring this choice"]\n',
                                      encoding="utf-8")
    (rule,) = catalogue_rules(load_catalogues(CODES, folder).values())
    assert rule.pattern.search("DEMO ERROR: frobnicator jammed on device 3")
    assert not rule.pattern.search("DEMO ERROR: frobnicator jammed on device 3. Ignoring "
                                   "this choice.")
    assert not rule.pattern.search("ignoring this choice: DEMO ERROR: frobnicator jammed on "
                                   "device 3")


def test_consequences_give_way_to_the_cause_the_log_shows(tmp_path):
    """pdsh's exit status 255 follows any rank that dies; JAX's refusal of 'gpu' follows the
    reason its CUDA backend failed, and TensorFlow's CPU fallback does not explain it."""
    cases = {
        "LOG047": "[rank1]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 1] Watchdog caught collective "
                  "operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, Timeout(ms)=600000) "
                  "ran for 600042 milliseconds before timing out.\n"
                  "pdsh@node1: node2: ssh exited with exit code 255\n",
        "LOG032": "WARNING:jax._src.xla_bridge:CUDA backend failed to initialize: Found cuDNN "
                  "version 8600, but JAX was built against version 8904, which is newer. The "
                  "copy of cuDNN that is installed must be at least as new as the version "
                  "against which JAX was built.\nRuntimeError: Unknown backend: 'gpu' requested, "
                  "but no platforms that are instances of gpu are present. Platforms present "
                  "are: cpu\n",
        "LOG121": "W tensorflow/stream_executor/platform/default/dso_loader.cc:64] Could not load "
                  "dynamic library 'libcudart.so.11.0'; dlerror: libcudart.so.11.0: cannot open "
                  "shared object file: No such file or directory\nRuntimeError: Unknown backend: "
                  "'gpu' requested, but no platforms that are instances of gpu are present. "
                  "Platforms present are: cpu\n",
    }
    for code, text in cases.items():
        assert lead(tmp_path, text).code.id == code, code


def test_ray_s_task_wrapper_names_no_memory_of_its_own(tmp_path):
    """RayTaskError(OutOfMemoryError) wraps any OutOfMemoryError; with Ray's host-memory
    kill below it the lead is host memory, and the wrapper is no GPU finding."""
    codes = [f.code.id for f in diagnosed(
        tmp_path, "ray.exceptions.RayTaskError(OutOfMemoryError): ray::Actor.update_weights() "
        "(pid=3048142, ip=192.168.1.103)\nray.exceptions.OutOfMemoryError: Task was killed due "
        "to the node running low on memory.\n")]
    assert codes[0] == "LOG038" and "LOG005" not in codes, codes


@pytest.mark.parametrize(("change", "message"), [
    (('code = "LOG045"', 'code = "LOG999"'), "not a declared LOG code"),
    (('category = "nccl_p2p"', 'category = "nccl_network"'), "is not LOG045's"),
    (('fix = "Unjam it."', 'fix = ""'), "no fix"),
    (('prefix = "DEMO ERROR: "', 'prefix = "DEMO: "'), "spells no gate word"),
    (('fix = "Unjam it."', 'fix = "Unjam it."\nalternatives = ["nccl_network: maybe"]'),
     "alternatives without 'decide'"),
    (('fix = "Unjam it."', 'fix = "Unjam it."\ncolour = "red"'), "unknown keys"),
    (('paths = ["src/demo.c"]', 'paths = []'), "needs the paths"),
    (('prefix = "DEMO ERROR: "', 'prefix = "DEMO ERROR: "\ncontext = ["demo"]'),
     "are not gate words"),
])
def test_the_loader_rejects_what_it_cannot_use(change, message):
    text = GOOD.replace(*change)
    with pytest.raises(CatalogueError, match=re.escape(message)):
        for entry in read_catalogue(text, "demo.toml", CODES)[1]:
            entry_rule(entry)


def test_context_narrows_the_gate_words_read_before_a_template():
    """CUDA's short strings follow "cuda", not any "error": errno 95 of a file system is
    not CUDA's error 801."""
    narrowed = GOOD.replace('prefix = "DEMO ERROR: "', 'prefix = "DEMO ERROR: "\ncontext = ["cud"]')
    rule = entry_rule(read_catalogue(narrowed, "demo.toml", CODES)[1][0])
    assert rule.anchors == ("cud",)
    assert rule.pattern.search("CUDA: frobnicator jammed on device 1")
    assert not rule.pattern.search("OSError: frobnicator jammed on device 1")
    assert [m.rule.code.id for m in match_text("OSError: [Errno 95] Operation not supported")] == []


LONG = GOOD.replace('template = "frobnicator jammed on device %d"',
                   'template = "The frobnicator error jammed the device number %d at once. '
                   'Restart it with the unjam tool, then run the job again."')


def test_a_long_message_is_read_by_its_first_sentence_alone():
    """A program wraps its message at 80 columns, an issue title cuts it, a doc quotes its
    first sentence: that sentence states the event, and is read without the advice after it."""
    rule = entry_rule(read_catalogue(LONG, "demo.toml", CODES)[1][0])
    assert rule.pattern.search("The frobnicator error jammed the device number 3 at once. "
                               "Restart it with the unjam tool, then run the job again.")
    assert rule.pattern.search("ERROR: The frobnicator error jammed the device number 3 at once.")
    assert rule.pattern.search("The frobnicator error jammed the device number 3 at once.  "
                               "Restart it with")
    assert not rule.pattern.search("The frobnicator error jammed the device")  # mid-sentence
    assert template_head("The frobnicator error jammed the device number %d at once. "
                         "Go.") is None  # too little follows
    # a short first sentence says too little, and the advice after it does not lengthen it
    assert template_head("Weights only load failed. In PyTorch 2.6, we changed the default "
                         "value of the `weights_only` argument in `torch.load` from `False` to "
                         "`True`. Re-running `torch.load` with `weights_only` set to `False` "
                         "will likely succeed.") is None


def test_a_near_miss_holding_the_first_sentence_keeps_the_message_whole():
    """TensorFlow's allocator says the same first sentence where it is not a failure; what
    follows tells them apart, so that entry is read whole only."""
    missed = LONG + ('near_misses = ["The frobnicator error jammed the device number 2 at '
                     'once. This is fine."]\n')
    rule = entry_rule(read_catalogue(missed, "demo.toml", CODES)[1][0])
    assert not rule.pattern.search("The frobnicator error jammed the device number 3 at once.")
    assert rule.pattern.search("The frobnicator error jammed the device number 3 at once. "
                               "Restart it with the unjam tool, then run the job again.")


def test_nvidia_installer_wrapped_at_80_columns_is_read(tmp_path):
    """nvidia-installer prints its messages wrapped to the terminal (nvidia-installer
    format.c); the Nouveau refusal's first line is the whole first sentence."""
    text = ("ERROR: The Nouveau kernel driver is currently in use by your system.  This driver is\n"
            "       incompatible with the NVIDIA driver, and must be disabled before proceeding.\n")
    assert log_codes(tmp_path, text)[0] == "LOG009"


def test_the_file_name_must_be_the_catalogue_name(tmp_path):
    (tmp_path / "other.toml").write_text(GOOD, encoding="utf-8")
    with pytest.raises(CatalogueError, match="stem"):
        load_catalogues(CODES, tmp_path)


def test_catalogue_files_ship_with_the_package():
    import ddp_doctor.logrules.catalogue as module

    folder = Path(module.__file__).parent / "catalogues"
    assert sorted(p.stem for p in folder.glob("*.toml")) == sorted(CATALOGUES)
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert '"ddp_doctor.logrules" = ["catalogues/*.toml"]' in pyproject


def test_the_mkl_symbol_gets_the_mkl_fix_whichever_rule_reads_it(tmp_path):
    """The hand-written LOG022 reads torch/lib's undefined symbols; its line variant gives
    iJIT_NotifyEvent the fix the loader catalogue knows (pin MKL), not a reinstall."""
    for line in ("ImportError: /opt/conda/envs/geo_deep_env/lib/python3.10/site-packages/torch/"
                 "lib/libtorch_cpu.so: undefined symbol: iJIT_NotifyEvent",
                 "undefined symbol: iJIT_NotifyEvent"):
        path = tmp_path / "job.log"
        path.write_text(line + "\n", encoding="utf-8")
        found = diagnose(str(path)).report.results[0].findings[0]
        assert found.code.id == "LOG022"
        assert any("mkl" in (s.command or "") for s in found.remediation), found.remediation


def test_accelerate_debug_mode_refusals_are_read_after_their_exception(tmp_path):
    """accelerate raises DistributedOperationException (a line with "exception", no "error");
    the shape check's message comes on a line of its own after it."""
    from ddp_doctor.diagnose import diagnose

    log = tmp_path / "acc.log"
    log.write_text("accelerate.utils.operations.DistributedOperationException: One or more of "
                   "the tensors passed to accelerate.utils.operations.gather were not on the cpu "
                   "while the `Accelerator` is configured for cuda. Please move it to the cuda "
                   "before calling accelerate.utils.operations.gather.\n")
    assert diagnose(str(log)).report.results[0].findings[0].code.id == "LOG070"
    log.write_text("accelerate.utils.operations.DistributedOperationException:\n\nCannot apply "
                   "desired operation due to shape mismatches. All shapes across devices must be "
                   "valid.\n\nOperation: `accelerate.utils.operations.broadcast`\n")
    assert diagnose(str(log)).report.results[0].findings[0].code.id == "LOG051"
