"""Hangs read from the last things each rank did, and causes chosen by what the log shows
about the machine (WSL, containers, the installed wheels).

The NCCL lines follow the format of Lightning-AI/pytorch-lightning#19425 (P2P/IPC), of the
corpus' SHM logs ("via SHM/direct/direct") and NCCL's NET transport; the Ctrl-C tracebacks
are torch 2.13's (torch/distributed/c10d_logger.py, distributed_c10d.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.rules import lead

P2P_SETUP = (
    "host:34364:35141 [0] NCCL INFO Channel 00 : 0[1b000] -> 1[1c000] via P2P/IPC\n"
    "host:34310:35145 [1] NCCL INFO Channel 00 : 1[1c000] -> 0[1b000] via P2P/IPC\n"
    "host:34364:35141 [0] NCCL INFO Connected all rings\n"
    "host:34310:35145 [1] NCCL INFO comm 0x55d4c8a0 rank 1 nranks 2 cudaDev 1 busId 1c000 - "
    "Init COMPLETE\n")
SHM_SETUP = (
    "ins-7df6:3018451:3024010 [0] NCCL INFO Channel 00 : 0[1020] -> 1[1030] via SHM/direct/direct\n"
    "ins-7df6:3018452:3024012 [1] NCCL INFO Channel 00 : 1[1030] -> 0[1020] via SHM/direct/direct\n"
    "ins-7df6:3018451:3024010 [0] NCCL INFO Connected all rings\n")
NET_SETUP = (
    "$ torchrun --nnodes=2 --node_rank=0 --nproc_per_node=1 --master_addr=10.0.0.1 train.py\n"
    "node1:2331:2666 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0\n"
    "node1:2331:2666 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0\n"
    "node1:2331:2666 [0] NCCL INFO Connected all rings\n")
# Printed by rank 0's DataLoader (torch/utils/data/dataloader.py) after NCCL's setup.
LOADER_WARNING = (
    "[rank0]:/venv/lib/python3.10/site-packages/torch/utils/data/dataloader.py:557: UserWarning: "
    "This DataLoader will create 8 worker processes in total. Our suggested max number of "
    "worker in current system is 4, which is smaller than what this DataLoader is going to "
    "create.\n"
    "[rank0]:   warnings.warn(_create_warning_msg(\n"
    "Epoch 0:   0%|          | 0/938 [00:00<?, ?it/s]\n")


def ctrl_c_in_barrier(rank: int) -> str:
    return "".join(f"[rank{rank}]: {line}\n" for line in (
        "Traceback (most recent call last):",
        "  File \"/tmp/job.py\", line 5, in <module>",
        "    dist.barrier()",
        "  File \"/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py\", line 83, "
        "in wrapper",
        "    return func(*args, **kwargs)",
        "  File \"/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py\", "
        "line 5356, in barrier",
        "    work.wait()",
        "KeyboardInterrupt"))


TORCHRUN_SIGINT = (
    "W1125 18:12:57.349000 16856 torch/distributed/elastic/agent/server/api.py:753] Received 2 "
    "death signal, shutting down workers\n"
    "torch.distributed.elastic.multiprocessing.api.SignalException: Process 16856 got signal: 2\n")


def test_a_warning_after_the_setup_does_not_hide_the_hang(tmp_path: Path) -> None:
    """Rank 0 warned and drew an idle progress bar after NCCL's setup: still a hang."""
    finding = lead(tmp_path, P2P_SETUP + LOADER_WARNING)
    assert (finding.code.id, finding.code.category.value) == ("DIAG002", "nccl_p2p")
    assert "Init COMPLETE" in finding.evidence[0].value
    assert any("via P2P/IPC" in e.value for e in finding.evidence)


def test_a_rank_that_trained_on_is_not_waiting(tmp_path: Path) -> None:
    log = (P2P_SETUP + "[rank0]: step 20/1000 loss=0.53\n"
           "host:34310:35145 [1] NCCL INFO Connected all rings\n")
    assert lead(tmp_path, log).code.id == "DIAG001"


def test_a_log_that_ends_inside_a_collective_is_a_hang(tmp_path: Path) -> None:
    log = (P2P_SETUP + "host:34364:34364 [0] NCCL INFO AllReduce: opCount 0 sendbuff "
           "0x7f3b2a000000 recvbuff 0x7f3b2a000000 count 1 datatype 7 op 0 root 0 comm "
           "0x55d4c8a0 [nranks=2] stream 0x55d4c7f0\n")
    finding = lead(tmp_path, log)
    assert finding.code.id == "DIAG002"
    assert finding.evidence[0].label == "last line, line 5"


def test_ctrl_c_with_every_rank_in_barrier_is_a_hang(tmp_path: Path) -> None:
    log = P2P_SETUP + ctrl_c_in_barrier(1) + ctrl_c_in_barrier(0) + TORCHRUN_SIGINT
    finding = lead(tmp_path, log)
    assert finding.code.id == "DIAG002"
    assert "in barrier" in finding.evidence[0].value


def test_ctrl_c_with_a_rank_busy_elsewhere_is_not_called_p2p(tmp_path: Path) -> None:
    """torch 2.13, gloo: rank 1 was in time.sleep, rank 0 in barrier; Ctrl-C on torchrun."""
    log = (P2P_SETUP
           + "[rank1]: Traceback (most recent call last):\n"
             "[rank1]:   File \"/tmp/rules_job/hang.py\", line 4, in <module>\n"
             "[rank1]:     time.sleep(600)\n[rank1]: KeyboardInterrupt\n"
           + "[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
             "pair.cc:553] Connection closed by peer [127.0.0.1]:31151. This is typically caused "
             "by a remote worker crashing.\n" + TORCHRUN_SIGINT)
    assert lead(tmp_path, log).code.category.value == "collective_timeout"


def test_a_hang_without_peer_to_peer_transport_is_a_collective_timeout(tmp_path: Path) -> None:
    finding = lead(tmp_path, SHM_SETUP)
    assert (finding.code.id, finding.code.category.value) == ("DIAG007", "collective_timeout")
    assert all(not e.value.startswith("collective_timeout") for e in finding.evidence
               if e.label == "other possible cause")


def test_a_hang_across_nodes_is_the_network_first(tmp_path: Path) -> None:
    finding = lead(tmp_path, NET_SETUP)
    assert finding.code.category.value == "nccl_network"
    assert any("via NET/IB" in e.value for e in finding.evidence)
    assert finding.remediation[0].command.startswith("NCCL_SOCKET_IFNAME=")


def test_when_the_watchdog_reports_it_is_a_collective_timeout(tmp_path: Path) -> None:
    log = (P2P_SETUP + "[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught "
           "collective operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=1, "
           "NumelOut=1, Timeout(ms)=600000) ran for 600031 milliseconds before timing out.\n")
    assert lead(tmp_path, log).code.category.value == "collective_timeout"


# -- the machine the log comes from ---------------------------------------------------------

BLOCKED = "Failed to initialize NVML: GPU access blocked by the operating system\n"


def test_gpu_blocked_inside_a_container_is_the_containers_setup(tmp_path: Path) -> None:
    """microsoft/WSL#9962: nvidia-smi works in WSL 2, not in its Docker container."""
    log = ("- Docker version 23.0.3, build 3e7cbfd\n- NVIDIA Container Runtime version 1.13.0\n"
           + BLOCKED)
    finding = lead(tmp_path, log)
    assert (finding.code.id, finding.code.category.value) == ("DIAG005", "cuda_init_failure")
    assert finding.evidence[0].source == "container marker"
    assert any("no-cgroups" in (s.command or "") for s in finding.remediation)


def test_gpu_blocked_without_a_container_stays_wsl(tmp_path: Path) -> None:
    assert lead(tmp_path, BLOCKED).code.category.value == "wsl_setup"


NO_DEVICE = ("numba.cuda.cudadrv.error.CudaSupportError: Error at driver init: Call to cuInit "
             "results in CUDA_ERROR_NO_DEVICE (100)\n")


def test_windows_drives_under_mnt_show_wsl(tmp_path: Path) -> None:
    """NVIDIA/cuml#6218: a traceback through /mnt/c/Users/... in WSL 2."""
    log = ("  File \"/mnt/c/Users/Hongb/Documents/Git/.venv/lib/python3.12/site-packages/"
           "numba_cuda/numba/cuda/cudadrv/driver.py\", line 258, in ensure_initialized\n"
           + NO_DEVICE)
    finding = lead(tmp_path, log)
    assert (finding.code.id, finding.code.category.value) == ("DIAG003", "wsl_setup")


def test_the_wsl_gpu_device_in_dmesg_shows_wsl(tmp_path: Path) -> None:
    log = ("[    2.513771] misc dxg: dxgk: dxgkio_query_adapter_info: Ioctl failed: -22\n"
           + NO_DEVICE)
    assert lead(tmp_path, log).code.category.value == "wsl_setup"


def test_the_same_error_on_a_linux_host_is_not_wsl(tmp_path: Path) -> None:
    log = "  File \"/home/user/venv/lib/python3.12/site-packages/x.py\", line 1\n" + NO_DEVICE
    assert lead(tmp_path, log).code.category.value == "gpu_not_visible"


UNDEFINED_NCCL = (
    "ImportError: /home/runner/.local/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so: "
    "undefined symbol: ncclMemFree\n")


def test_two_cuda_builds_of_one_wheel_explain_a_broken_torch_import(tmp_path: Path) -> None:
    """rwth-i6/returnn#1802: nvidia-nccl-cu11 next to nvidia-nccl-cu12 (collect_env)."""
    log = UNDEFINED_NCCL + "[pip3] nvidia-nccl-cu11==2.14.3\n[pip3] nvidia-nccl-cu12==2.27.3\n"
    finding = lead(tmp_path, log)
    assert (finding.code.id, finding.code.category.value) == ("DIAG006", "package_conflict")
    assert [e.value for e in finding.evidence[:2]] == ["[pip3] nvidia-nccl-cu11==2.14.3",
                                                       "[pip3] nvidia-nccl-cu12==2.27.3"]
    assert any(e.value.startswith("torch_missing") for e in finding.evidence
               if e.label == "other possible cause")


def test_one_cuda_build_per_wheel_leaves_the_import_failure(tmp_path: Path) -> None:
    log = UNDEFINED_NCCL + "[pip3] nvidia-nccl-cu12==2.27.3\n[pip3] nvidia-cudnn-cu12==9.1.0\n"
    assert lead(tmp_path, log).code.id == "LOG022"


# -- NCCL's error trace ----------------------------------------------------------------------

TRACE = ("node1:2330:2658 [2] NCCL INFO misc/socket.cc:567 -> 2\n"
         "node1:2330:2658 [2] NCCL INFO misc/socket.cc:618 -> 2\n"
         "node1:2330:2658 [2] NCCL INFO bootstrap.cc:270 -> 2\n")


def test_a_trace_from_the_socket_code_names_the_network(tmp_path: Path) -> None:
    """NVIDIA/nccl#1000: the trace began in socket.cc/bootstrap.cc; torch wrapped it."""
    log = TRACE + ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/"
                   "c10d/NCCLUtils.hpp:219, unhandled system error (run with NCCL_DEBUG=INFO "
                   "for details), NCCL version 2.14.3\n")
    finding = lead(tmp_path, log)
    assert (finding.code.id, finding.code.category.value) == ("LOG073", "nccl_network")
    assert any(e.label.startswith("consequence") and "unhandled system error" in e.value
               for e in finding.evidence)


def test_the_same_trace_after_a_watchdog_timeout_is_the_teardown(tmp_path: Path) -> None:
    log = ("[rank2]:[E ProcessGroupNCCL.cpp:563] [Rank 2] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=4211, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
           "Timeout(ms)=600000) ran for 600083 milliseconds before timing out.\n" + TRACE)
    assert lead(tmp_path, log).code.id == "LOG047"


# -- the torch build ------------------------------------------------------------------------

NO_GPUS = "RuntimeError: No CUDA GPUs are available\n"


def test_a_cpu_torch_build_explains_no_gpu(tmp_path: Path) -> None:
    finding = lead(tmp_path, NO_GPUS + "$ pip list | grep torch\ntorch              2.1.0+cpu\n")
    assert (finding.code.id, finding.code.category.value) == ("LOG023", "torch_cpu_only")
    assert finding.evidence[0].source == "torch build"
    assert any(e.value.startswith("gpu_not_visible") for e in finding.evidence
               if e.label == "other possible cause")


def test_a_cuda_torch_build_leaves_the_gpu_finding(tmp_path: Path) -> None:
    log = NO_GPUS + "torch              2.1.0+cu118\n"
    assert lead(tmp_path, log).code.category.value == "gpu_not_visible"


# -- torch's heartbeat monitor, and a rank 0 still preparing the data ------------------------

# torch 2.4+'s heartbeat monitor (ProcessGroupNCCL.cpp), as warpem/miss-alignment#105 shows it.
STUCK = (
    "[rank1]:[E513 12:38:14.493976596 ProcessGroupNCCL.cpp:1870] [PG ID 0 PG GUID "
    "0(default_pg) Rank 1] ProcessGroupNCCL's watchdog got stuck for 480 seconds without making "
    "progress in monitoring enqueued collectives. This typically indicates a NCCL/CUDA API "
    "(e.g., CudaEventDestroy) hang blocking the watchdog, and could be triggered by another "
    "thread holding the GIL inside a CUDA api (for example, CudaEventDestroy), or other "
    "deadlock-prone behaviors.\n"
    "[rank1]:[E513 12:38:14.494343247 ProcessGroupNCCL.cpp:1589] [PG ID 0 PG GUID "
    "0(default_pg) Rank 1] ProcessGroupNCCL preparing to dump debug info. Include stack "
    "trace: 1\n")


def test_a_stuck_watchdog_is_a_hang_in_the_gpu_layer(tmp_path: Path) -> None:
    finding = lead(tmp_path, STUCK)
    assert (finding.code.id, finding.code.category.value) == ("DIAG002", "nccl_p2p")
    assert "watchdog got stuck" in finding.evidence[0].value
    assert finding.remediation[0].command.startswith("NCCL_P2P_DISABLE=1")


def test_the_heartbeat_monitor_before_torch_2_4_is_the_same_hang(tmp_path: Path) -> None:
    log = ("[rank0]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 0] Heartbeat monitor timed out! "
           "Process will be terminated after dumping debug info. workMetaList_.size()=1\n")
    assert lead(tmp_path, log).code.id == "DIAG002"


def test_a_stuck_watchdog_beside_a_collective_timeout_is_the_timeout(tmp_path: Path) -> None:
    log = STUCK + ("[rank1]:[E ProcessGroupNCCL.cpp:563] [Rank 1] Watchdog caught collective "
                   "operation timeout: WorkNCCL(SeqNum=812, OpType=ALLREDUCE, NumelIn=1, "
                   "NumelOut=1, Timeout(ms)=600000) ran for 600031 milliseconds before timing "
                   "out.\n")
    assert lead(tmp_path, log).code.id == "LOG047"


# ultralytics/yolov5#9163: rank 0 scans the labels while the others wait in the barrier.
FIRST_TIMEOUT = (
    "terminate called after throwing an instance of 'std::runtime_error'\n"
    "  what():  [Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, "
    "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1806530 milliseconds before timing out.\n")


# The same line at the group's very first collective (SeqNum=1: DDP's parameter check).
VERY_FIRST_TIMEOUT = FIRST_TIMEOUT.replace("SeqNum=2,", "SeqNum=1,")


def test_the_very_first_collective_timing_out_alone_points_at_p2p(tmp_path: Path) -> None:
    assert lead(tmp_path, VERY_FIRST_TIMEOUT).code.id == "LOG046"


@pytest.mark.parametrize("seq", [2, 3])
def test_a_timeout_after_a_collective_completed_is_the_watchdogs(tmp_path: Path, seq: int) -> None:
    """From SeqNum 2 a collective already went through every rank: the transport worked."""
    finding = lead(tmp_path, FIRST_TIMEOUT.replace("SeqNum=2,", f"SeqNum={seq},"))
    assert (finding.code.id, finding.code.category.value) == ("LOG047", "collective_timeout")


@pytest.mark.parametrize("progress", [
    "train: Scanning '/data/o365/labels/train' images and labels...113162 found, 0 missing, "
    "0 empty, 0 corrupt:   6%|▋ ",
    "train: Scanning /data/coco/labels/train2017... 48213 images, 312 backgrounds, 0 corrupt:  "
    "41%|████      | 48525/118287",
    "train: Caching images (12.4GB ram):  35%|███▌      | 41402/118287",
])
def test_rank_zero_still_preparing_the_dataset_is_the_watchdogs_timeout(
        tmp_path: Path, progress: str) -> None:
    finding = lead(tmp_path, progress + "\n" + VERY_FIRST_TIMEOUT)
    assert (finding.code.id, finding.code.category.value) == ("LOG047", "collective_timeout")
    assert finding.evidence[0].source == "rank 0 still preparing the dataset"
    assert any("nccl_p2p" in e.value for e in finding.evidence
               if e.label == "other possible cause")


# docker/for-win#10379: the runtime's driver query fails in a WSL 2 shell.
DRIVER_QUERY = ("docker: Error response from daemon: OCI runtime create failed: Running hook #0:: "
                "error running hook: exit status 1, stdout: , stderr: nvidia-container-cli: "
                "initialization error: driver error: failed to process request: unknown.\n")


@pytest.mark.parametrize(("prompt", "category"), [
    ("root@DESKTOP-5A67SBM:/home/anurag# docker run --rm --gpus all nvidia/cuda nvidia-smi",
     "wsl_setup"),
    ("anna@LAPTOP-K3J9QH2T:~$ docker run --rm --gpus all nvidia/cuda nvidia-smi", "wsl_setup"),
    # host names a person chose are not Windows' made-up ones
    ("anna@laptop-thinkpad:~$ docker run --rm --gpus all nvidia/cuda nvidia-smi",
     "cuda_init_failure"),
    ("root@gpu-node-07:~# docker run --rm --gpus all nvidia/cuda nvidia-smi", "cuda_init_failure"),
])
def test_a_windows_made_host_name_in_the_prompt_shows_wsl(tmp_path: Path, prompt: str,
                                                          category: str) -> None:
    assert lead(tmp_path, prompt + "\n" + DRIVER_QUERY).code.category.value == category


@pytest.mark.parametrize("said", [
    "NCCL might hang with P2P enabled.",  # dmlc/xgboost#11242
    "NCCL 2.30.4 hangs on this box",  # local-inference-lab/rtx6kpro#15
    "Training with 4 GPUs gets stuck right after the model is loaded",
])
def test_a_hang_stated_beside_nccl_p2p_or_the_gpu_count_is_the_silent_hang(
        tmp_path: Path, said: str) -> None:
    assert lead(tmp_path, said + "\n").code.id == "DIAG002"


@pytest.mark.parametrize("said", [
    "The progress bar is stuck at 0% while the dataset downloads",
    "The data loader hangs while reading from NFS",
    # fine-tuning freezes layers: not a hang, whatever the GPU count beside it
    "I fine-tune on 8 GPUs and freeze the first 10 layers of the encoder, but the loss is NaN",
])
def test_a_hang_without_the_gpus_or_nccl_beside_it_is_not_read_so(
        tmp_path: Path, said: str) -> None:
    assert lead(tmp_path, said + "\n").code.id != "DIAG002"


@pytest.mark.parametrize("said", [
    'os.environ["NCCL_P2P_DISABLE"] = "1" solved the hang',  # a script sets it
    'After export NCCL_P2P_DISABLE="1" the training works',
    "NCCL_P2P_DISABLE=1 fixed it",
])
def test_the_users_p2p_experiment_is_read_however_the_variable_is_set(
        tmp_path: Path, said: str) -> None:
    assert lead(tmp_path, said + "\n").code.id == "DIAG002"


def test_p2p_left_on_is_no_such_experiment(tmp_path: Path) -> None:
    assert lead(tmp_path, "NCCL_P2P_DISABLE=0 works\n").code.id != "DIAG002"


def test_an_nccl_channel_line_is_no_stated_hang() -> None:
    """NCCL INFO lines say "via P2P" by the thousand: P2P counts only after a hang's verb."""
    from ddp_doctor.diagnose.context import HANG_TEXT

    assert HANG_TEXT.search("NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read") is None

