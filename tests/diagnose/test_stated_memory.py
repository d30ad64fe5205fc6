"""Host memory running out, stated in words: the low-confidence lead of a log no message
explains (diagnose/stated_memory.py, DIAG151)."""

from __future__ import annotations

import pytest

from ddp_doctor.diagnose.fallback import LEAD_CODES
from ddp_doctor.diagnose.stated_memory import states_host_memory
from tests.support.rules import diagnosed, lead

STATED = [
    "When I run train.py the process got killed after loading the dataset",
    "The training process was killed during the first epoch, no error message",
    "the script dies without an error message on lines 449 - 450",
    "Ram memory still cost to 16G then computer crashed",
    "RAM usage keeps increasing every epoch",
    "We ran out of host memory while building the feature maps",
    "使用2个V100进行单机多卡微调的时候出现了进程被杀",
    "单机多卡微调 进程被killed",
    "进行chatglm2 ptuning时，sh train.sh超内存",
    "加载数据时内存不足",
    "my RAM is full after loading the dataset",
    # split X's studied half
    "after the first epoch, used memory starts rapidly increasing and eventually surpasses "
    "available RAM.",
    "My the scripts start to train the Model, every time the system kills the process.",
]
NOT_STATED = [
    "Killed",  # the shell's own report (LOG007 reads it)
    "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "GPU memory is full after the first step",
    "显存不足，batch size 调小后可以运行",  # the GPU's memory
    "I killed the process with Ctrl-C and restarted it",
    "The ram disk is mounted at /dev/shm",
    # a review's lines: RAM named beside other words, a clean exit, kills with another reason,
    # the GPU's or the shared memory in other words
    "We have 256GB of RAM and not enough GPUs, so we use 2 nodes.",
    "Machine: 8x A100, RAM 1TB, full log attached below.",
    "The program exits without any error but the checkpoint is not saved.",
    "The job was killed by me with Ctrl+C",
    "My job was killed after 24 hours by the scheduler (time limit).",
    "The training process is killed by torchrun because another rank failed with NCCL timeout",
    "训练时显卡内存不足",
    "CUDA内存溢出了",
    "使用A100 显卡，GPU内存不足",
    "The GPU's RAM is full",
    "the GPU-RAM runs out",
    "DataLoader 报共享内存不足",
    # a second review's lines: denied, supposed, about the data, the GPU's memory named otherwise
    "My dataset is 500GB and exceeds the RAM, so I stream it from a NFS share.",
    "Make sure the batch does not exceed the available RAM.",
    "I checked that the system memory is not leaking.",
    "There is no RAM leak, usage is flat at 20GB.",
    "Host memory is not exhausted (20 of 256 GB), but the job hangs",
    "On Linux the OS kills the process if it uses too much memory, but here nothing happens",
    "The GPU’s RAM is full",
    "both GPUs' RAM is full",
    "GPU 0 RAM is full",
    "the graphics card RAM is full",
    "the RAM of the GPU is full",
]


@pytest.mark.parametrize("line", STATED)
def test_statements_of_a_killed_process_or_full_ram_are_read(line):
    assert states_host_memory(line), line


@pytest.mark.parametrize("line", NOT_STATED)
def test_the_gpus_memory_and_a_users_own_kill_are_not(line):
    assert not states_host_memory(line), line


@pytest.mark.parametrize("line", STATED[:3] + STATED[-2:])
def test_a_statement_alone_is_a_low_confidence_host_memory_lead(tmp_path, line):
    """Read by DIAG151, or first by the fallback where the sentence spells an error word it
    knows ("killed"): either way a low-confidence host-memory lead."""
    found = lead(tmp_path, line + "\n")
    assert found.code.category.value == "host_out_of_memory"
    assert found.code.id in ("DIAG151", LEAD_CODES["host_out_of_memory"].id)
    assert found.title.startswith("LOW CONFIDENCE")
    if found.code.id == "DIAG151":
        assert any(e.value == line for e in found.evidence)


def test_the_statement_is_read_where_the_fallback_does_not_speak(tmp_path):
    found = lead(tmp_path, "进程被killed\n")
    assert found.code.id == "DIAG151"


def test_a_message_outranks_the_statement(tmp_path):
    text = ("The training process was killed during the first epoch\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has "
            "a total capacity of 23.68 GiB of which 1.2 GiB is free.\n")
    findings = diagnosed(tmp_path, text)
    assert findings[0].code.category.value == "gpu_out_of_memory"
    assert "DIAG151" not in {f.code.id for f in findings}


def test_the_fallbacks_reading_of_an_unread_error_line_outranks_the_statement(tmp_path):
    """An error line no rule reads still says more than a sentence: the fallback's reading of
    it leads (aws-ofi-nccl's registration failure, read as nccl_network)."""
    line = ("register_rail_mr_buffer:1015 NCCL WARN NET/OFI Unable to register memory (type = "
            "2) for device 4. RC: -22, Error: Invalid argument\n")
    alone = lead(tmp_path, line)
    assert alone.code.id.startswith("DIAG1") and alone.code.id != "DIAG151"
    # a statement that spells no error word the fallback reads ("the process was killed")
    found = lead(tmp_path, line + "单机多卡微调 进程被杀\n")
    assert found.code.id == alone.code.id


def test_program_output_is_not_a_statement(tmp_path):
    """A logger's line that happens to spell it is the program's, not the user's."""
    text = "2024-01-01 12:00:00,123 - INFO - worker.py:88: process was killed by the pool\n"
    assert lead(tmp_path, text).code.id != "DIAG151"
