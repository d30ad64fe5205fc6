"""Messages pasted without an ``Error:`` or exception prefix are read by their own words.

The scan reads only lines holding a gate word (``logrules/rule.GATES``); these messages spell
none of the older gates, so before the gates "process group", "command not found",
"ncclmaxsharedmem", "incompatible", "oom-kill" and "gpu count" they were never read and the log got
"unknown". A prose sentence that only mentions the phrase must still read as nothing.
"""

from __future__ import annotations

import pytest

from ddp_doctor.diagnose.fallback import LEAD_CODES
from tests.support.rules import lead_reading


@pytest.mark.parametrize(("line", "code", "category"), [
    # torch/distributed/distributed_c10d.py _get_default_group, pasted without "ValueError: "
    ("Default process group has not been initialized, please make sure to call "
     "init_process_group.", "LOG056", "ddp_usage_error"),
    # bash execute_cmd.c and zsh Src/exec.c
    ("bash: torchrun: command not found", "LOG021", "torch_missing"),
    ("scripts/train.sh: line 12: torchrun: command not found", "LOG021", "torch_missing"),
    ("zsh: command not found: torchrun", "LOG021", "torch_missing"),
    ("bash: nvidia-smi: command not found", "LOG009", "driver_missing"),
    # NCCL 2.25.1 src/enqueue.cc, an INFO line (NVIDIA/nccl#1637)
    ("test:259034:259124 [0] NCCL INFO ncclMaxSharedMem 82240 exceeds device/fn maxSharedMem "
     "79856", "LOG028", "torch_arch_unsupported"),
    # accelerate state.py: several RTX 40xx under a driver before 550.40.07 (QwenLM/Qwen-VL#447)
    ("Using RTX 4000 series doesn't support faster communication broadband via P2P or IB.",
     "LOG045", "nccl_p2p"),
    ("Using RTX 3090 or 4000 series doesn't support faster communication broadband via P2P or "
     "IB. Please set `NCCL_P2P_DISABLE=\"1\"`", "LOG045", "nccl_p2p"),
    # torch's message copied from its source, the literals' quotes kept (lora-scripts#308)
    ('Distributed package doesn\'t have NCCL " "built in', "LOG050", "nccl_unavailable"),
    # Python 3.6's failed from-import names no module; only torch._six had container_abcs
    ("ImportError: cannot import name 'container_abcs'", "LOG083", "package_conflict"),
    # DeepSpeed's launcher, the rank's code alone on the line a wrapped command list leaves
    ("] exits with return code = -9", "LOG007", "host_out_of_memory"),
    # pip/_internal/commands/install.py _warn_about_conflicts
    ("torchvision 0.17.2 requires torch==2.2.2, but you have torch 2.5.1 which is "
     "incompatible.", "LOG027", "package_conflict"),
    # paddle/phi/backends/gpu/cuda/cuda_info.cc, pasted without "InvalidArgumentError: "
    ("Device id must be less than GPU count, but received id is: 3. GPU count is: 1",
     "LOG029", "gpu_not_visible"),
    # mm/oom_kill.c dump_header and dump_oom_summary
    ("[Tue Mar  5 10:12:01 2024] python invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_"
     "MOVABLE|__GFP_COMP), order=0, oom_score_adj=0", "LOG038", "host_out_of_memory"),
    ("[  812.334] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=docker-1a2b,"
     "mems_allowed=0-1", "LOG038", "host_out_of_memory"),
])
def test_a_message_without_its_prefix_is_read(tmp_path, line, code, category):
    assert lead_reading(tmp_path, line) == (code, category)


@pytest.mark.parametrize("line", [
    "I ran torchrun but the shell says command not found",
    "Is the default process group created by init_process_group on every rank?",
    "The checkpoint format is incompatible with the new loader",
    "Initialized default process group with backend nccl",
])
def test_prose_that_mentions_the_phrase_is_not_read_as_the_message(tmp_path, line):
    """No rule reads the sentence; the fallback may (a low-confidence lead, since it learned
    the catalogue's words: "command not found" is torchrun missing)."""
    code, _ = lead_reading(tmp_path, line)
    leads = {lead.id for lead in LEAD_CODES.values()}
    assert code == "DIAG001" or code in leads, (line, code)
