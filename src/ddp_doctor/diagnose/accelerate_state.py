"""accelerate's state block: every rank of the job on one GPU.

``print(accelerator.state)`` (or ``logger.info(accelerator.state, main_process_only=False)``,
as the diffusers and transformers example scripts log it) prints, per process, accelerate's
``PartialState.__repr__`` (accelerate/state.py at v1.1.0,
https://github.com/huggingface/accelerate/blob/v1.1.0/src/accelerate/state.py):

    Distributed environment: MULTI_GPU  Backend: nccl
    Num processes: 4
    Process index: 1
    Local process index: 1
    Device: cuda:1

A multi-GPU launch gives each process the device of its local index
(``torch.device("cuda", local_process_index)``). When several processes of one job name the
same device, every rank computes on that one GPU: the node shows the job fewer GPUs than it
launched ranks, or the ranks were not given their local rank (each one thinks it is the
first on its node), and NCCL then refuses the communicator ("Duplicate GPU detected") or the
GPU runs out of memory. A job that spans nodes legitimately has one rank per node on
``cuda:0``, so a log that shows more than one node is not read this way.

The processes print their blocks at the same moment, so their lines interleave: the reading
is of the values, not of whole blocks. It needs the job's size (one "Num processes" above
1), at least two different process indices, and every "Device" line naming one device.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.diagnose.relations import Declared
from ddp_doctor.logrules.rule import Explains

SAME_DEVICE = declare(
    "DIAG025", Category.GPU_NOT_VISIBLE,
    "Every rank of the accelerate job is on the same GPU",
    what="accelerate's state lines show several processes of one multi-process job (its "
         "'Num processes' above 1, different 'Process index' values) and every one of them "
         "on the same 'Device': the ranks share one GPU instead of one GPU each.",
    why="NCCL refuses a communicator whose ranks share a GPU ('Duplicate GPU detected'), "
        "and where it does not, the ranks compete for one GPU's memory and time.",
    fix="Give each process its own GPU: make the node's GPUs visible to the job "
        "(CUDA_VISIBLE_DEVICES listing as many GPUs as processes, --gpus all in a "
        "container), launch with accelerate launch or torchrun so each process gets its "
        "LOCAL_RANK, and set --num_processes to the GPUs the node has.",
    docs_url="https://huggingface.co/docs/accelerate/basic_tutorials/launch")

CAUSES: tuple[Declared, ...] = (
    Declared(SAME_DEVICE.id, Explains(
        ("LOG057",),
        reason="NCCL refuses a communicator two of whose ranks are on one GPU and says so as "
               "'Duplicate GPU detected' (NVIDIA/nccl src/init.cc); accelerate's state lines "
               "showing every process on one device are that situation's cause.")),
)
"""The codes ranks sharing one GPU explains when the same log shows both (``Explains``)."""

# The fields of PartialState.__repr__, each on its own line (after a logging prefix on the
# first, "11/28/2026 10:00:00 - INFO - __main__ - Distributed environment: ...").
NUM_PROCESSES = re.compile(r"(?:^|\s)Num processes: (\d+)\s*$")
PROCESS_INDEX = re.compile(r"(?:^|\s)Process index: (\d+)\s*$")
DEVICE = re.compile(r"(?:^|\s)Device: (cuda:\d+)\s*$")


def ranks_on_one_device(numbered_lines: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """(where, line) of the state lines that show every process of a multi-process job on
    one device: the job's size and two of the device lines; empty otherwise.
    ``numbered_lines`` is (where, line) for the lines of the log that were kept."""
    sizes: dict[int, tuple[str, str]] = {}
    indices: set[int] = set()
    devices: dict[str, list[tuple[str, str]]] = {}
    for where, line in numbered_lines:
        stripped = line.rstrip()
        size = NUM_PROCESSES.search(stripped)
        if size is not None:
            sizes.setdefault(int(size.group(1)), (where, stripped.strip()))
            continue
        index = PROCESS_INDEX.search(stripped)
        if index is not None and "Local process index" not in stripped:
            indices.add(int(index.group(1)))
            continue
        device = DEVICE.search(stripped)
        if device is not None:
            devices.setdefault(device.group(1), []).append((where, stripped.strip()))
    if len(sizes) != 1 or len(devices) != 1:
        return []
    ((processes, size_line),) = sizes.items()
    (shared,) = devices.values()
    if processes < 2 or len(indices) < 2 or len(shared) < 2:
        return []
    return [size_line, *shared[:2]]
