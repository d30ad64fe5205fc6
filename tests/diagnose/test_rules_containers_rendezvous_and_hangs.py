"""Drivers, WSL, NCCL and the distributed runtime: what each new reading means, on the
thread's own log, on the same core in other words, and on a near miss it must leave alone.

The line rules (LOG084 libuv, LOG085 a container without GPUs, LOG086 the NCCL id wait,
the dlopen of libcuda) are checked with ``match_text``; the readings that need the rest of
the log (a bare message without its exception type, a ``docker run`` with no GPU request,
a progress bar that ran for the whole timeout, where a silent job stopped) go through
``diagnose`` on whole texts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_doctor.diagnose import diagnose
from ddp_doctor.logrules import RULES
from ddp_doctor.model import Severity
from tests.support.rules import corpus_lead, first_code, lead, lead_reading, matched_codes


@pytest.mark.parametrize("code", ["LOG009", "LOG018", "LOG084", "LOG085", "LOG086"])
def test_each_rules_examples_are_read_as_its_code(code: str) -> None:
    rule = next(r for r in RULES if r.code.id == code)
    for example in rule.examples:
        assert code in matched_codes(example), example


# -- the thread's own log is read as its cause ------------------------------------------------

@pytest.mark.parametrize(("name", "code", "category"), [
    ("minimind-115.log", "LOG084", "rendezvous_failure"),  # Windows torch without libuv
    ("cuda-python-17.log", "LOG018", "wsl_setup"),  # cuda-python: dlopen libcuda.so
    ("chatglm-efficient-tuning-137.log", "LOG086", "collective_timeout"),  # NCCL id wait
    ("floydhub-dockerfiles-3.log", "LOG085", "driver_missing"),  # docker run, no --gpus
    ("pytorch-distributed-15.log", "LOG050", "nccl_unavailable"),  # the bare message
    ("sd-scripts-971.log", "LOG047", "collective_timeout"),  # 30 min caching bar
    ("rccl-1129.log", "DIAG002", "nccl_p2p"),  # rccl-tests stop at the results header
    ("sit-7.log", "DIAG002", "nccl_p2p"),  # DeiT-style init, then silence
])
def test_the_threads_log_names_its_cause(name: str, code: str, category: str) -> None:
    found = corpus_lead(name)
    assert (found.code.id, found.code.category.value) == (code, category)
    assert found.effective_severity is Severity.ERROR


# -- LOG084: the TCPStore asked for libuv ------------------------------------------------------

@pytest.mark.parametrize(("line", "code"), [
    ("RuntimeError: use_libuv was requested but PyTorch was build without libuv support",
     "LOG084"),
    ("Error: RuntimeError: use_libuv was requested but PyTorch was built without libuv "
     "support", "LOG084"),
    # torch saying it uses libuv is no failure
    ("[W socket.cpp:697] [c10d] using libuv backend for TCPStore: use_libuv=1", None),
])
def test_libuv_missing_from_the_build(line: str, code: str | None) -> None:
    assert first_code(line) == code


# -- LOG086: the NCCL id wait is not the rendezvous --------------------------------------------

def test_the_nccl_id_wait_is_ranks_out_of_step_not_the_rendezvous() -> None:
    line = ("torch.distributed.DistBackendError: [3] is setting up NCCL communicator and "
            "retrieving ncclUniqueId from [0] via c10d key-value store by key '1', but "
            "store->get('1') got error: Socket Timeout")
    assert matched_codes(line) == {"LOG086"}


def test_a_store_get_failure_outside_nccl_setup_is_still_the_rendezvous() -> None:
    line = ("RuntimeError: Timed out: store->get('rank_0') got error: Socket Timeout while "
            "waiting for the other ranks")
    assert "LOG052" in matched_codes(line)
    assert "LOG086" not in matched_codes(line)


def test_a_rank_that_died_first_explains_the_nccl_id_wait(tmp_path: Path) -> None:
    found = lead(tmp_path, (
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
        "[rank1]: RuntimeError: [1] is setting up NCCL communicator and retrieving "
        "ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got "
        "error: Connection reset by peer\n"))
    assert found.code.category.value == "gpu_out_of_memory"


# -- LOG018 / LOG009: cuda-python's dlopen of libcuda -------------------------------------------

@pytest.mark.parametrize(("line", "code"), [
    ("RuntimeError: Failed to dlopen libcuda.so", "LOG018"),  # the unversioned name: WSL
    ("RuntimeError: Failed to dlopen libcuda.so.1", "LOG009"),  # the driver's soname: none
    ("RuntimeError: Failed to dlopen libcudart.so.12", None),  # the runtime, not the driver
])
def test_cuda_pythons_dlopen_of_libcuda(line: str, code: str | None) -> None:
    assert first_code(line) == code


# -- LOG085: a container without GPUs -----------------------------------------------------------

@pytest.mark.parametrize(("line", "code"), [
    ("WARNING: The NVIDIA Driver was not detected.  GPU functionality will not be available.",
     "LOG085"),
    ("   Use the NVIDIA Container Toolkit to start this container with GPU support; see",
     "LOG085"),
    # the NVIDIA runtime's own note in a container that has GPUs
    ("NOTE: The SHMEM allocation limit is set to the default of 64MB.  This may be "
     "insufficient for PyTorch.  NVIDIA recommends the use of the following flags:", None),
])
def test_nvidia_images_say_they_got_no_gpus(line: str, code: str | None) -> None:
    assert first_code(line) == code


def test_docker_run_without_gpus_and_no_cuda_is_the_container(tmp_path: Path) -> None:
    found = lead(tmp_path, (
        "$ docker run --rm -it pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime python\n"
        ">>> import torch\n>>> torch.cuda.is_available()\nFalse\n"))
    assert found.code.id == "LOG085"
    assert any("docker run" in e.value for e in found.evidence)


def test_docker_run_without_gpus_explains_found_no_driver(tmp_path: Path) -> None:
    found = lead(tmp_path, (
        "$ docker run --rm -it myimage python train.py\n"
        "AssertionError: Found no NVIDIA driver on your system. Please check that you have an "
        "NVIDIA GPU and installed a driver from http://www.nvidia.com/Download/index.aspx\n"))
    assert found.code.id == "LOG085"


@pytest.mark.parametrize("command", [
    "$ docker run --gpus all --rm -it pytorch/pytorch python",
    "$ nvidia-docker run --rm -it pytorch/pytorch python",
    "$ docker run --runtime=nvidia --rm -it pytorch/pytorch python",
])
def test_a_container_given_gpus_is_not_blamed(tmp_path: Path, command: str) -> None:
    found = lead(tmp_path, f"{command}\n>>> torch.cuda.is_available()\nFalse\n")
    assert found.code.id != "LOG085"


def test_cuda_available_in_a_plain_container_is_no_finding(tmp_path: Path) -> None:
    found = lead(tmp_path, "$ docker run --rm -it myimage python\n"
                           ">>> torch.cuda.is_available()\nTrue\n")
    assert found.code.id == "DIAG001"


# -- a bare torch message without its exception type --------------------------------------------

def test_a_bare_message_is_read_when_nothing_else_was(tmp_path: Path) -> None:
    found = lead(tmp_path, "Windows: Distributed package doesn't have NCCL built in\n")
    assert found.code.id == "LOG050"
    found = lead(tmp_path, "use_libuv was requested but PyTorch was build without libuv "
                           "support\n")
    assert found.code.id == "LOG084"


def test_a_bare_message_does_not_outrank_an_error_that_was_read(tmp_path: Path) -> None:
    found = lead(tmp_path, (
        "Distributed package doesn't have NCCL built in (I read that this can happen)\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"))
    assert found.code.category.value == "gpu_out_of_memory"


def test_a_message_that_only_mentions_nccl_is_not_read(tmp_path: Path) -> None:
    found = lead(tmp_path, "Distributed package has NCCL built in and all ranks started\n")
    assert found.code.id == "DIAG001"


# -- the first collective's timeout beside a progress bar -----------------------------------------

TIMEOUT = ("[E ProcessGroupNCCL.cpp:828] [Rank 1] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)={ms}) ran for {ms} "
           "milliseconds before timing out.\n")


def test_a_bar_that_ran_the_whole_timeout_is_one_rank_busy(tmp_path: Path) -> None:
    found = lead(tmp_path, "tokenising: 40%|####   | 400/1000 [10:05<15:00,  1.5s/it]\n"
                           + TIMEOUT.format(ms=600000))
    assert (found.code.id, found.code.category.value) == ("LOG047", "collective_timeout")


def test_a_short_bar_leaves_the_first_collective_to_p2p(tmp_path: Path) -> None:
    # two minutes of work cannot explain a ten-minute wait
    found = lead(tmp_path, "tokenising: 40%|####   | 400/1000 [02:05<03:00,  1.5s/it]\n"
                           + TIMEOUT.format(ms=600000))
    assert found.code.id == "LOG046"


def test_without_a_stated_timeout_the_default_thirty_minutes_counts(tmp_path: Path) -> None:
    timeout = ("[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, "
               "OpType=BROADCAST) ran for 1800512 milliseconds before timing out.\n")
    assert lead(tmp_path, "caching: 90%|#### | 9/10 [31:10<03:00, 200s/it]\n"
                + timeout).code.id == "LOG047"
    assert lead(tmp_path, "caching: 90%|#### | 9/10 [12:10<03:00, 80s/it]\n"
                + timeout).code.id == "LOG046"


# -- where a silent job stopped -------------------------------------------------------------------

NCCL_TESTS_HEAD = (
    "# nThread 1 nGpus 2 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5\n"
    "#  Rank  0 Group  0 Pid  1234 on host device  0 [0x17] NVIDIA GeForce RTX 3090\n"
    "#  Rank  1 Group  0 Pid  1234 on host device  1 [0x65] NVIDIA GeForce RTX 3090\n"
    "#                                                              out-of-place"
    "                       in-place\n"
    "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    "     time   algbw   busbw #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
    "            (us)  (GB/s)  (GB/s)\n")


def test_nccl_tests_that_stop_at_the_header_hang_in_the_first_all_reduce(
        tmp_path: Path) -> None:
    found = lead(tmp_path, NCCL_TESTS_HEAD)
    assert (found.code.id, found.code.category.value) == ("DIAG002", "nccl_p2p")


def test_nccl_tests_that_printed_rows_did_not_hang(tmp_path: Path) -> None:
    rows = ("           8             2     float     sum      -1    20.11    0.00    0.00      0"
            "    19.87    0.00    0.00      0\n"
            "# Avg bus bandwidth    : 9.87654\n")
    assert lead(tmp_path, NCCL_TESTS_HEAD + rows).code.id == "DIAG001"


def test_a_deit_style_init_as_the_last_words_is_a_hang(tmp_path: Path) -> None:
    found = lead(tmp_path, "| distributed init (rank 0): env://\n"
                           "| distributed init (rank 1): env://\n")
    assert found.code.id == "DIAG002"


def test_a_deit_style_init_followed_by_training_is_no_hang(tmp_path: Path) -> None:
    found = lead(tmp_path, "| distributed init (rank 0): env://\n"
                           "| distributed init (rank 1): env://\n"
                           "Epoch: [0]  [  10/1000]  eta: 0:10:00  lr: 0.000100  loss: 6.9\n")
    assert found.code.id == "DIAG001"


# -- LOG087: ranks still meeting in init_process_group ---------------------------------------------

DEEPSPEED_INIT = (
    "[2024-06-11 00:23:36,254] [INFO] [comm.py:637:init_distributed] cdb=None\n"
    "[2024-06-11 00:23:36,254] [INFO] [comm.py:668:init_distributed] Initializing "
    "TorchBackend in DeepSpeed with backend nccl\n"
    "[2024-06-11 00:23:36,296] [INFO] [comm.py:637:init_distributed] cdb=None\n")


def test_the_thread_that_hung_in_deepspeeds_init_is_the_rendezvous() -> None:
    found = corpus_lead("online-rlhf-11.log")
    assert (found.code.id, found.code.category.value) == ("LOG087", "rendezvous_failure")
    assert found.effective_severity is Severity.ERROR


@pytest.mark.parametrize(("line", "code"), [
    ("INFO:torch.distributed.distributed_c10d:Waiting in store based barrier to initialize "
     "process group for rank: 1, key: store_based_barrier_key:1 (world_size=4, "
     "worker_count=3, timeout=0:30:00)", "LOG087"),
    # the barrier's final failure is the rendezvous timeout itself
    ("RuntimeError: Timed out initializing process group in store based barrier on rank: 1, "
     "for key: store_based_barrier_key:1 (world_size=4, worker_count=3, timeout=0:30:00)",
     "LOG052"),
    ("INFO:torch.distributed.distributed_c10d:Rank 1: Completed store-based barrier for key:"
     "store_based_barrier_key:1 with 4 nodes.", None),
])
def test_the_store_based_barrier_still_waiting(line: str, code: str | None) -> None:
    assert first_code(line) == code


def test_the_barrier_waiting_alone_is_a_warning_until_the_log_ends_there(tmp_path: Path) -> None:
    waiting = ("INFO:torch.distributed.distributed_c10d:Waiting in store based barrier to "
               "initialize process group for rank: 0, key: store_based_barrier_key:1 "
               "(world_size=2, worker_count=1, timeout=0:30:00)\n")
    found = lead(tmp_path, waiting)
    assert (found.code.id, found.effective_severity) == ("LOG087", Severity.ERROR)
    path = tmp_path / "job.log"  # the line the rule read is the hang's evidence, not a second
    every = diagnose(str(path)).report.results[0].findings
    assert [f.code.id for f in every].count("LOG087") == 1
    found = lead(tmp_path, waiting + "Epoch 1/10: loss 2.31\nEpoch 2/10: loss 1.95\n")
    assert found.effective_severity is not Severity.ERROR


def test_deepspeed_init_followed_by_nccl_setup_is_past_the_rendezvous(tmp_path: Path) -> None:
    setup = ("host:1234:1300 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
             "host:1234:1300 [0] NCCL INFO Connected all rings\n")
    found = lead(tmp_path, DEEPSPEED_INIT + setup)
    assert (found.code.id, found.code.category.value) == ("DIAG002", "nccl_p2p")


def test_deepspeed_init_followed_by_training_is_no_hang(tmp_path: Path) -> None:
    found = lead(tmp_path, DEEPSPEED_INIT + "{'loss': 1.234, 'learning_rate': 1e-05, "
                                            "'epoch': 0.01}\n  1%|          | 10/1000 [00:30<"
                                            "49:30,  3.00s/it]\n")
    assert found.code.id == "DIAG001"


def test_a_refusal_inside_the_dataloaders_handoff_is_shared_memory(tmp_path: Path) -> None:
    """Connection refused in rebuild_storage_fd is a worker passing a batch's shared memory,
    not the rendezvous (SunnyCat2013's write-up: /dev/shm was 64M)."""
    traceback = (
        '  File "/usr/local/lib/python3.8/dist-packages/torch/multiprocessing/reductions.py", '
        "line 282, in rebuild_storage_fd\n"
        "    fd = df.detach()\n"
        '  File "/usr/lib/python3.8/multiprocessing/resource_sharer.py", line 57, in detach\n'
        "    with _resource_sharer.get_connection(self._id) as conn:\n"
        "ConnectionRefusedError: [Errno 111] Connection refused\n")
    finding = lead(tmp_path, traceback)
    assert (finding.code.id, finding.category.value) == ("LOG040", "nccl_shared_memory")
    # the same refusal anywhere else is still the rendezvous's
    assert lead(tmp_path, "ConnectionRefusedError: [Errno 111] Connection refused\n"
                ).code.id == "LOG053"



# -- the port taken, said in words --------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "hi, I used with multiple machines, but meet master_port is already used, do you meet "
    "this questions?",  # ViTAE-Transformer/ViTDet#16 (the studied half of split L)
    "Address already in use",
    "the port 29500 is already in use",
])
def test_the_port_taken_said_alone_is_the_port_in_use(tmp_path, text) -> None:
    assert lead_reading(tmp_path, text) == ("LOG001", "rendezvous_port_in_use")


@pytest.mark.parametrize("text", [
    "this address is already in our database", "the transport is already used",
    # another server's port, which it then moves off
    "[I 10:00:00.000 NotebookApp] The port 8888 is already in use, trying another port.",
    "TensorBoard could not bind to port 6006, it was already in use",
    "WARNING: Port 7860 is already in use, launching on 7861",
    "Email address is already taken",
    "The same address was already used for this experiment name",
])
def test_other_things_already_used_are_not(tmp_path, text) -> None:
    assert lead_reading(tmp_path, text)[0] != "LOG001"
