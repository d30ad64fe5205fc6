"""Catalogue entries for the stacks other than torch (issue 23 point 1: message catalogues from
the sources that print the errors): TensorFlow's, XLA's and JAX's GPU memory, cuDNN and
CPU-fallback messages, MXNet's, Open MPI's launcher reports and Horovod's stall and shutdown
statuses. Each message, as users paste it with its usual prefix, leads a log that holds only
it with the cause's code and category; the neighbouring lines are not read so; and a whole
log of each source leads with its cause."""

from __future__ import annotations

import pytest

from tests.support.rules import diagnosed, lead, lead_reading

READINGS = [
    # TensorFlow: the BFC allocator's out-of-memory (bfc_allocator.cc), 2.4 and 1.x wordings
    ("2021-01-18 10:01:02.123456: W tensorflow/core/common_runtime/bfc_allocator.cc:433] "
     "Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.12GiB (rounded to "
     "1207959552)requested by op Conv2D", "LOG005", "gpu_out_of_memory"),
    ("2019-03-19 10:58:16.787022: W tensorflow/core/common_runtime/bfc_allocator.cc:267] "
     "Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.12GiB.  Current allocation "
     "summary follows.", "LOG005", "gpu_out_of_memory"),
    # TensorFlow and XLA (JAX): the cuDNN loaded is older than the build's (cuda_dnn.cc)
    ("2019-02-25 13:05:27.437929: E tensorflow/stream_executor/cuda/cuda_dnn.cc:363] Loaded "
     "runtime CuDNN library: 7.1.4 but source was compiled with: 7.2.1.  CuDNN library major "
     "and minor version needs to match or have higher minor version in case of CuDNN 7.0 or "
     "later version.", "LOG032", "cudnn_failure"),
    ("E0107 08:24:25.870501 external/xla/xla/stream_executor/cuda/cuda_dnn.cc:421] Loaded "
     "runtime CuDNN library: 8.1.0 but source was compiled with: 8.2.4.  CuDNN library needs "
     "to have matching major version and equal or higher minor version.", "LOG032",
     "cudnn_failure"),
    ("E tensorflow/stream_executor/cuda/cuda_dnn.cc:298] Loaded cudnn library: 4007 but source "
     "was compiled against 5004.", "LOG032", "cudnn_failure"),
    # JAX's own version check (xla_bridge.py)
    ("CUDA backend failed to initialize: Found cuDNN version 8700, but JAX was built against "
     "version 8904, which is newer. The copy of cuDNN that is installed must be at least as new "
     "as the version against which JAX was built. (Set TF_CPP_MIN_LOG_LEVEL=0 and rerun for "
     "more info.)", "LOG032", "cudnn_failure"),
    ("RuntimeError: Unable to use CUDA because of the following issues with CUDA components: "
     "Outdated cuDNN installation found.", "LOG032", "cudnn_failure"),
    # TensorFlow's convolution when cuDNN did not start (conv_ops.cc): memory growth
    ("tensorflow.python.framework.errors_impl.UnknownError: Failed to get convolution "
     "algorithm. This is probably because cuDNN failed to initialize, so try looking to see "
     "if a warning log message was printed above.", "LOG037", "gpu_out_of_memory"),
    ("2018-06-01 10:00:00.000000: F tensorflow/core/kernels/conv_ops.cc:713] Check failed: "
     "stream->parent()->GetConvolveAlgorithms( "
     "conv_parameters.ShouldIncludeWinogradNonfusedAlgo<T>(), &algorithms)", "LOG037",
     "gpu_out_of_memory"),
    # TensorFlow without its CUDA libraries (gpu_device.cc): runs on the CPU
    ("2021-03-03 12:00:00.000000: W tensorflow/core/common_runtime/gpu/gpu_device.cc:1766] "
     "Cannot dlopen some GPU libraries. Please make sure the missing libraries mentioned above "
     "are installed properly if you would like to use GPU. Follow the guide at "
     "https://www.tensorflow.org/install/gpu for how to download and setup the required "
     "libraries for your platform.", "LOG109", "torch_cpu_only"),
    # XLA without DNN support (stream_executor_util.cc)
    ("jaxlib.xla_extension.XlaRuntimeError: FAILED_PRECONDITION: DNN library initialization "
     "failed. Look at the errors above for more details.", "LOG079", "cudnn_failure"),
    # JAX's CPU-only jaxlib on a GPU machine (xla_bridge.py; its own LOG122 since split P)
    ("WARNING:2025-06-15 17:04:55,449:jax._src.xla_bridge:791: An NVIDIA GPU may be present on "
     "this machine, but a CUDA-enabled jaxlib is not installed. Falling back to cpu.", "LOG122",
     "torch_cpu_only"),
    # MXNet (pooled_storage_manager.h, cuda_utils.h, libinfo.h, base.cc, threaded_engine.cc)
    ("mxnet.base.MXNetError: [11:18:15] src/storage/./pooled_storage_manager.h:157: cudaMalloc "
     "failed: out of memory", "LOG005", "gpu_out_of_memory"),
    ("terminate called after throwing an instance of 'dmlc::Error'  what():  [10:44:35] "
     "src/storage/./pooled_storage_manager.h:161: cudaMalloc retry failed: out of memory",
     "LOG005", "gpu_out_of_memory"),
    ("mxnet.base.MXNetError: [16:52:49] src/storage/./gpu_device_storage.h:39: Check failed: "
     "e == cudaSuccess || e == cudaErrorCudartUnloading CUDA: out of memory", "LOG005",
     "gpu_out_of_memory"),
    ("mxnet.base.MXNetError: [16:33:57] src/ndarray/ndarray.cc:296: GPU is not enabled",
     "LOG023", "torch_cpu_only"),
    ("mxnet.base.MXNetError: [16:53:11] src/storage/storage.cc:43: Please compile with CUDA "
     "enabled", "LOG023", "torch_cpu_only"),
    ("[10:00:01] src/base.cc:46: Please install cuda driver for GPU use.  No cuda driver "
     "detected.", "LOG009", "driver_missing"),
    ("mxnet.base.MXNetError: [10:00:01] src/engine/threaded_engine.cc:330: Check failed: "
     "device_count_ > 0 (-1 vs. 0) : GPU usage requires at least 1 GPU", "LOG030",
     "gpu_not_visible"),
    ("mxnet.base.MXNetError: [10:00:01] src/engine/threaded_engine.cc:333: Check failed: "
     "exec_ctx.dev_id < device_count_ (2 vs. 1) : Invalid GPU Id: 2, Valid device id should be "
     "less than device_count: 1", "LOG029", "gpu_not_visible"),
    # Open MPI's launcher (help-orterun.txt, help-errmgr-base.txt, oob_tcp_connection.c)
    ("mpirun noticed that process rank 7 with PID 0 on node HOSTNAME exited on signal 9 "
     "(Killed).", "LOG007", "host_out_of_memory"),
    ("mpirun noticed that process rank 1 with PID 4242 on node node1 exited on signal 7 "
     "(Bus error).", "LOG008", "nccl_shared_memory"),
    ("mpirun noticed that process rank 0 with PID 3141 on node node1 exited on signal 11 "
     "(Segmentation fault).", "LOG090", "unknown"),
    ("ORTE was unable to reliably start one or more daemons.", "LOG052", "rendezvous_failure"),
    ("A process or daemon was unable to complete a TCP connection", "LOG053",
     "rendezvous_failure"),
    # Horovod (stall_inspector.cc, common.h)
    ("[1,0]<stderr>:[2020-04-20 20:29:29.089665: W horovod/common/stall_inspector.cc:105] One "
     "or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks "
     "and are waiting for remainder of ranks for more than 60 seconds. This may indicate that "
     "different ranks are trying to submit different tensors or that only subset of ranks is "
     "submitting tensors, which will cause deadlock.", "LOG051", "collective_timeout"),
    ("horovod.common.exceptions.HorovodInternalError: Horovod has been shut down. This was "
     "caused by an exception on one of the ranks or an attempt to allreduce, allgather or "
     "broadcast a tensor after one of the ranks finished execution.", "LOG049",
     "collective_timeout"),
]

NEAR_MISSES = [
    # MXNet warns of any cuDNN difference, a newer compatible one included, and trains on
    ("[21:59:18] src/base.cc:80: cuDNN lib mismatch: linked-against version 8201 != "
     "compiled-against version 8100.  Set MXNET_CUDNN_LIB_CHECKING=0 to quiet this warning.",
     {"LOG032"}),
    # TensorFlow's BFC allocator declining an optional scratch allocation: the run goes on
    ("2020-09-24 21:35:23.363348: W tensorflow/core/common_runtime/bfc_allocator.cc:246] "
     "Allocator (GPU_0_bfc) ran out of memory trying to allocate 1.02GiB with freed_by_count=0. "
     "The caller indicates that this is not a failure, but may mean that there could be "
     "performance gains if more memory were available.", {"LOG005"}),
    # TensorRT is optional: TensorFlow trains on the GPU without it
    ("2021-03-03 12:00:00.000000: W tensorflow/stream_executor/platform/default/dso_loader.cc:60]"
     " Could not load dynamic library 'libnvinfer.so.7'; dlerror: libnvinfer.so.7: cannot open "
     "shared object file: No such file or directory", None),
    ("2021-03-03 12:00:00.000000: W tensorflow/compiler/tf2tensorrt/utils/py_utils.cc:38] "
     "TF-TRT Warning: Cannot dlopen some TensorRT libraries. If you would like to use Nvidia "
     "GPU with TensorRT, please make sure the missing libraries mentioned above are installed "
     "properly.", None),
    # TensorFlow's healthy cuDNN lines
    ("I0000 00:00:1721 cuda_dnn.cc:529] Loaded cuDNN version 8907", {"LOG032", "LOG079"}),
    # ROCm's build of the same convolution message
    ("Failed to get convolution algorithm. This is probably because MIOpen failed to "
     "initialize, so try looking to see if a warning log message was printed above.",
     {"LOG037"}),
    # a TPU, not a GPU, without its jaxlib
    ("A Google TPU may be present on this machine, but either a TPU-enabled jaxlib or libtpu "
     "is not installed. Falling back to cpu.", {"LOG023", "LOG109", "LOG122"}),
    # JAX's check of another CUDA library than cuDNN
    ("Found CUDA version 12010, but JAX was built against version 12020, which is newer.",
     {"LOG032"}),
    # MXNet's CPU allocator, and a notebook's own hint
    ("src/storage/cpu_device_storage.h:74: Failed to allocate CPU Memory", {"LOG005"}),
    ("GPU is not enabled in this notebook: Runtime > Change runtime type", {"LOG023"}),
    # a rank ended by SIGTERM (the scheduler), and MPI's other banners
    ("mpirun noticed that process rank 0 with PID 0 on node node1 exited on signal 15 "
     "(Terminated).", {"LOG007", "LOG090"}),
    ("ORTE has lost communication with a remote daemon.", {"LOG052"}),
    # Horovod not initialised is a script bug, not a rank's failure
    ("ValueError: Horovod has not been initialized; use hvd.init().", {"LOG049"}),
]


@pytest.mark.parametrize(("line", "code", "category"), READINGS)
def test_the_message_alone_leads_with_its_cause(tmp_path, line, code, category):
    assert lead_reading(tmp_path, line) == (code, category)


@pytest.mark.parametrize(("line", "codes"), NEAR_MISSES)
def test_the_neighbouring_message_is_not_read_so(tmp_path, line, codes):
    """None means the line is read as no error at all (a DIAG lead); otherwise the codes the
    neighbouring message must not lead with."""
    found = lead_reading(tmp_path, line)[0]
    if codes is None:
        assert not found.startswith("LOG"), found
    else:
        assert found not in codes


def _codes(tmp_path, text: str) -> list[str]:
    return [f.code.id for f in diagnosed(tmp_path, text)]


def test_a_tensorflow_log_without_its_cuda_libraries_leads_with_the_cpu_fallback(tmp_path):
    """TensorFlow names each library it could not dlopen, then skips the GPUs: the loader's
    libcudart line is that same missing install (not a broken torch), so the fallback leads;
    TensorRT's optional library adds nothing."""
    text = (
        "2021-03-03 12:00:00.000001: W tensorflow/stream_executor/platform/default/"
        "dso_loader.cc:60] Could not load dynamic library 'libcudart.so.11.0'; dlerror: "
        "libcudart.so.11.0: cannot "
        "open shared object file: No such file or directory\n"
        "2021-03-03 12:00:00.000002: W tensorflow/stream_executor/platform/default/"
        "dso_loader.cc:60] Could not load dynamic library 'libnvinfer.so.7'; dlerror: "
        "libnvinfer.so.7: cannot open "
        "shared object file: No such file or directory\n"
        "2021-03-03 12:00:00.000003: W tensorflow/core/common_runtime/gpu/gpu_device.cc:1766] "
        "Cannot dlopen some GPU libraries. Please make sure the missing libraries mentioned "
        "above are installed properly if you would like to use GPU. Follow the guide at "
        "https://www.tensorflow.org/install/gpu for how to download and setup the required "
        "libraries for your platform.\n"
        "Skipping registering GPU devices...\n"
        "Epoch 1/10\n")
    found = lead(tmp_path, text)
    assert (found.code.id, found.code.category.value) == ("LOG109", "torch_cpu_only")
    assert found.effective_severity.value == "warning"


@pytest.mark.parametrize(("failure", "category"), [
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
     "NCCLUtils.hpp:317, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL "
     "version 2.19.3", "nccl_shared_memory"),
    ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
     "gpu_out_of_memory"),
])
def test_a_torch_job_importing_tensorflow_in_passing_is_read_by_its_own_error(
        tmp_path, failure, category):
    """transformers or tensorboard import TensorFlow, which prints its CPU fallback; the torch
    job trains on the GPU regardless, so its own failure leads, not the fallback."""
    text = ("2021-03-03 12:00:00.000001: W tensorflow/stream_executor/platform/default/"
            "dso_loader.cc:60] Could not load dynamic library 'libcudart.so.11.0'; dlerror: "
            "libcudart.so.11.0: cannot open shared object file: No such file or directory\n"
            "2021-03-03 12:00:00.000003: W tensorflow/core/common_runtime/gpu/gpu_device.cc:1766] "
            "Cannot dlopen some GPU libraries. Please make sure the missing libraries mentioned "
            "above are installed properly if you would like to use GPU.\n" + failure + "\n")
    assert lead(tmp_path, text).code.category.value == category


def test_a_tensorflow_log_missing_only_cudnn_leads_with_cudnn(tmp_path):
    text = (
        "2020-08-24 11:08:28.568827: W tensorflow/stream_executor/platform/default/"
        "dso_loader.cc:59] Could not load dynamic library 'libcudnn.so.7'; dlerror: "
        "libcudnn.so.7: cannot open "
        "shared object file: No such file or directory\n"
        "2020-08-24 11:08:28.568905: W tensorflow/core/common_runtime/gpu/gpu_device.cc:1753] "
        "Cannot dlopen some GPU libraries. Please make sure the missing libraries mentioned "
        "above are installed properly if you would like to use GPU.\n")
    assert lead(tmp_path, text).code.category.value == "cudnn_failure"


def test_a_tensorflow_convolution_failure_after_the_version_check_is_the_version(tmp_path):
    """"Failed to get convolution algorithm" is memory unless the cuDNN version check printed
    above says otherwise: then the version leads and the wrapper folds into it."""
    text = (
        "2019-02-25 13:05:27.437929: E tensorflow/stream_executor/cuda/cuda_dnn.cc:363] Loaded "
        "runtime CuDNN library: 7.1.4 but source was compiled with: 7.2.1.  CuDNN library major "
        "and minor version needs to match or have higher minor version in case of CuDNN 7.0 or "
        "later version.\n"
        "tensorflow.python.framework.errors_impl.UnknownError: Failed to get convolution "
        "algorithm. This is probably because cuDNN failed to initialize, so try looking to see "
        "if a warning log message was printed above.\n")
    assert _codes(tmp_path, text)[0] == "LOG032"
    alone = lead(tmp_path, text.splitlines()[1] + "\n")
    text_of = " ".join(str(e) for e in alone.evidence)
    assert alone.code.id == "LOG037" and "cudnn_failure" in text_of


def test_a_jax_log_leads_with_the_cudnn_version_not_the_wrapper(tmp_path):
    text = (
        "E0731 10:00:00.000000 1234 cuda_dnn.cc:421] Loaded runtime CuDNN library: 8.5.0 but "
        "source was compiled with: 8.6.0.  CuDNN library needs to have matching major version "
        "and equal or higher minor version.\n"
        "Traceback (most recent call last):\n"
        "  File \"train.py\", line 12, in <module>\n"
        "    key = jax.random.PRNGKey(0)\n"
        "jaxlib.xla_extension.XlaRuntimeError: FAILED_PRECONDITION: DNN library initialization "
        "failed. Look at the errors above for more details.\n")
    assert lead_reading(tmp_path, text) == ("LOG032", "cudnn_failure")


def test_an_mxnet_log_leads_with_gpu_memory(tmp_path):
    text = (
        "INFO:root:Start training with [gpu(0), gpu(1)]\n"
        "[17:36:51] src/operator/././cudnn_algoreg-inl.h:112: Running performance tests to find "
        "the best convolution algorithm, this can take a while... (setting env variable "
        "MXNET_CUDNN_AUTOTUNE_DEFAULT to 0 to disable)\n"
        "Traceback (most recent call last):\n"
        "  File \"train.py\", line 90, in <module>\n"
        "    mod.fit(train_data, num_epoch=10)\n"
        "mxnet.base.MXNetError: [17:36:58] src/storage/./pooled_storage_manager.h:111: "
        "cudaMalloc failed: out of memory\n"
        "Stack trace returned 10 entries:\n"
        "[bt] (0) /usr/local/lib/libmxnet.so(_ZN4dmlc15LogMessageFatalD1Ev+0x3c) "
        "[0x7fd3561641fc]\n")
    assert lead_reading(tmp_path, text) == ("LOG005", "gpu_out_of_memory")


def test_an_mpi_log_leads_with_the_killed_rank(tmp_path):
    """Horovod under mpirun: the rank killed by the OOM killer is the cause; Horovod's
    shutdown status on the surviving ranks and MPI's banners are its consequences."""
    text = (
        "[1,0]<stdout>:Epoch 1/10\n"
        "[1,1]<stderr>:horovod.common.exceptions.HorovodInternalError: Horovod has been shut "
        "down. This was caused by an exception on one of the ranks or an attempt to allreduce, "
        "allgather or broadcast a tensor after one of the ranks finished execution. If the "
        "shutdown was caused by an exception, you should see the exception in the log before "
        "the first shutdown message.\n"
        "--------------------------------------------------------------------------\n"
        "Primary job  terminated normally, but 1 process returned\n"
        "a non-zero exit code. Per user-direction, the job has been aborted.\n"
        "--------------------------------------------------------------------------\n"
        "--------------------------------------------------------------------------\n"
        "mpirun noticed that process rank 0 with PID 0 on node gpu01 exited on signal 9 "
        "(Killed).\n"
        "--------------------------------------------------------------------------\n")
    assert lead_reading(tmp_path, text) == ("LOG007", "host_out_of_memory")


def test_an_mpi_launch_that_never_started_leads_with_the_daemons(tmp_path):
    text = (
        "--------------------------------------------------------------------------\n"
        "ORTE was unable to reliably start one or more daemons.\n"
        "This usually is caused by:\n"
        "\n"
        "* not finding the required libraries and/or binaries on\n"
        "  one or more nodes. Please check your PATH and LD_LIBRARY_PATH\n"
        "  settings, or configure OMPI with --enable-orterun-prefix-by-default\n"
        "--------------------------------------------------------------------------\n")
    assert lead_reading(tmp_path, text) == ("LOG052", "rendezvous_failure")


def test_a_horovod_stall_leads_with_the_ranks_out_of_step(tmp_path):
    text = (
        "[1,0]<stdout>:Train Epoch     #1:   0%|          | 0/626 [00:00<?, ?it/s]\n"
        "[1,0]<stderr>:[2020-04-20 20:29:29.089665: W horovod/common/stall_inspector.cc:105] One "
        "or more tensors were submitted to be reduced, gathered or broadcasted by subset of "
        "ranks and are waiting for remainder of ranks for more than 60 seconds. This may "
        "indicate that different ranks are trying to submit different tensors or that only "
        "subset of ranks is submitting tensors, which will cause deadlock.\n"
        "[1,0]<stderr>:Missing ranks:\n"
        "[1,0]<stderr>:1: [allreduce.conv1.weight, allreduce.bn1.weight]\n"
        "[1,1]<stderr>:horovod.common.exceptions.HorovodInternalError: Horovod has been shut "
        "down. This was caused by an exception on one of the ranks or an attempt to allreduce, "
        "allgather or broadcast a tensor after one of the ranks finished execution.\n")
    assert lead_reading(tmp_path, text) == ("LOG051", "collective_timeout")


def test_a_broken_torch_import_beside_tensorflows_fallback_is_the_torch_import(tmp_path):
    """TensorFlow's fallback is a warning: a traceback through torch's own import that ends
    in a missing libcudart is still torch's broken install."""
    text = ("2021-03-03 12:00:00.000003: W tensorflow/core/common_runtime/gpu/gpu_device.cc:1766] "
            "Cannot dlopen some GPU libraries. Please make sure the missing libraries mentioned "
            "above are installed properly if you would like to use GPU.\n"
            "Traceback (most recent call last):\n"
            '  File "train.py", line 1, in <module>\n'
            "    import torch\n"
            '  File "/usr/lib/python3/dist-packages/torch/__init__.py", line 189, in <module>\n'
            "    from torch._C import *\n"
            "ImportError: libcudart.so.11.0: cannot open shared object file: No such file or "
            "directory\n")
    assert lead(tmp_path, text).code.id == "LOG022"

