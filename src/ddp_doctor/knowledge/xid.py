"""The common GPU Xid errors: what each means and what to do about it.

An Xid is the NVIDIA kernel driver's error report, one line in the kernel log
(``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.``). The check
``gpu.xid`` names each event it finds in this boot's log with the row below, so a reader
sees at once whether the GPU, the driver or the program is to blame.

Sources:
- NVIDIA's Xid catalogue, https://docs.nvidia.com/deploy/xid-errors/ (the per-Xid table
  of causes and actions: https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html).
  The page itself is not on this machine: the meanings and actions below are that catalogue's
  as known when this table was written, and ``confirmed`` says what could be checked here.
- The Xid numbers' names in the driver's own header, ``src/common/sdk/nvidia/inc/nverror.h``
  of https://github.com/NVIDIA/open-gpu-kernel-modules (``NVERROR_H`` below, at commit
  df1c9a3de2be4b130f4fc7680f7198193d8ac6ad):
  ``ROBUST_CHANNEL_GR_EXCEPTION (13)``, ``ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS (79)``,
  ``GSP_RPC_TIMEOUT (119)``, ... Every number here except 109 is defined there with the
  name in ``driver_name``; 109 (context-switch timeout) is not in that header.
- The driver's own examples of Xid 94/95 lines (``kern_gpu_error_cont_ga100.c`` there):
  "RST: Yes" on an uncontained error means the GPU needs a reset.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

XID_CATALOG = "https://docs.nvidia.com/deploy/xid-errors/"
XID_CATALOG_TABLE = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
NVERROR_H = ("https://github.com/NVIDIA/open-gpu-kernel-modules/blob/"
             "df1c9a3de2be4b130f4fc7680f7198193d8ac6ad/src/common/sdk/nvidia/inc/nverror.h")


class Blame(str, Enum):
    """Where the catalogue points first for an Xid."""

    HARDWARE = "hardware"  # the GPU, its memory or its links: reset, drain, RMA if it recurs
    DRIVER = "driver"  # the driver or GPU firmware: reset, update the driver
    APPLICATION = "application"  # usually the program's own fault; hardware if it follows a GPU

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class XidInfo:
    """One Xid: its name in the driver, its meaning, the catalogue's action, whom it blames."""

    xid: int
    driver_name: str | None  # the #define in nverror.h; None where the header has none
    meaning: str
    action: str
    blame: Blame
    # What was checked on this machine: "name" (the number's name in nverror.h). Meaning and
    # action come from the catalogue as known, not re-read here.
    confirmed: tuple[str, ...] = ("name",)


def _x(xid: int, driver_name: str | None, meaning: str, action: str, blame: Blame,
       confirmed: tuple[str, ...] = ("name",)) -> tuple[int, XidInfo]:
    return xid, XidInfo(xid, driver_name, meaning, action, blame, confirmed)


XIDS: dict[int, XidInfo] = dict((
    _x(13, "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics engine exception: a kernel faulted "
       "(an out-of-range access or illegal instruction in the program, rarely the hardware)",
       "Run the program under compute-sanitizer; if it recurs with other programs on the same "
       "GPU, run the GPU's field diagnostics.", Blame.APPLICATION),
    _x(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault: a kernel touched "
       "memory it does not own (usually the program's illegal address)",
       "Debug the program (CUDA_LAUNCH_BLOCKING=1, compute-sanitizer); suspect the GPU only "
       "if it follows this GPU across programs.", Blame.APPLICATION),
    _x(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing: the program's "
       "channel hit a software-induced fault and was reset; the GPU stays healthy",
       "Look at the program that was running (its own error comes first); no GPU action.",
       Blame.APPLICATION),
    _x(45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup: the driver tore down a "
       "program's channels, after an earlier error or because the program was killed",
       "Read the Xid logged just before it: that one is the cause.", Blame.APPLICATION),
    _x(48, "ROBUST_CHANNEL_GPU_ECC_DBE", "Double-bit (uncorrectable) ECC error in GPU memory",
       "Drain the node, reset the GPU or reboot so the page is retired or the row remapped; "
       "RMA the GPU if it recurs.", Blame.HARDWARE),
    _x(61, "PMU_BREAKPOINT", "Internal micro-controller breakpoint or warning (PMU)",
       "Reset the GPU or reboot; update the driver; report to NVIDIA if it recurs.",
       Blame.DRIVER),
    _x(62, "PMU_HALT_ERROR", "Internal micro-controller halted (PMU)",
       "Reset the GPU or reboot; if it recurs, collect nvidia-bug-report.sh and RMA.",
       Blame.HARDWARE),
    _x(63, "INFOROM_PAGE_RETIREMENT_EVENT", "ECC page retirement or row-remapping recorded: "
       "the GPU marked faulty memory to be replaced",
       "Reset the GPU when it is idle (or reboot) so the retirement or remap takes effect.",
       Blame.HARDWARE),
    _x(64, "INFOROM_PAGE_RETIREMENT_FAILURE", "ECC page retirement or row-remapping failed: "
       "the faulty memory could not be replaced",
       "Drain the node, reset the GPU; if it recurs the GPU is an RMA candidate.",
       Blame.HARDWARE),
    _x(68, "ROBUST_CHANNEL_NVDEC0_ERROR", "Video decoder (NVDEC) exception",
       "Look at the program using the video decoder (DALI, torchvision.io, ffmpeg); update "
       "the driver if it recurs.", Blame.APPLICATION),
    _x(69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics engine class error: the engine was "
       "given a command it rejects",
       "Look at the program that was running; update the driver if it recurs.",
       Blame.APPLICATION),
    _x(74, "NVLINK_ERROR", "NVLink error: a link between GPUs (or to an NVSwitch) reported a "
       "fault",
       "Read the link counters (nvidia-smi nvlink -e), reset the GPUs or reboot; reseat or "
       "RMA if the same link keeps failing.", Blame.HARDWARE),
    _x(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus: the "
       "driver can no longer reach it over PCIe",
       "Drain the node and reboot; check power, cooling and PCIe seating; RMA if it recurs.",
       Blame.HARDWARE),
    _x(92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate",
       "Watch the ECC counters (nvidia-smi -q -d ECC); reset the GPU; RMA if the rate stays "
       "high.", Blame.HARDWARE),
    _x(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained ECC error: only the program that "
       "touched the memory was stopped",
       "Restart that program; reset the GPU when convenient so the row remap takes effect.",
       Blame.HARDWARE),
    _x(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained ECC error: every program on the "
       "GPU is affected",
       "Stop the GPU's programs and reset the GPU now (the driver says 'RST: Yes'); RMA if it "
       "recurs.", Blame.HARDWARE),
    _x(109, None, "Context-switch timeout: the GPU did not switch between programs in time",
       "Look for a hung kernel in the program; reset the GPU; update the driver if it recurs.",
       Blame.DRIVER, confirmed=()),
    _x(119, "GSP_RPC_TIMEOUT", "GSP firmware timeout: the GPU System Processor did not answer "
       "the driver",
       "Reset the GPU or reboot; update the driver; if it recurs, collect nvidia-bug-report.sh "
       "for NVIDIA.", Blame.DRIVER),
    _x(120, "GSP_ERROR", "GSP firmware error: the GPU System Processor reported a fault",
       "Reset the GPU or reboot; update the driver; if it recurs, collect nvidia-bug-report.sh "
       "for NVIDIA.", Blame.DRIVER),
    _x(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "Unrecovered ECC error: an uncorrectable error "
       "escaped containment",
       "Drain the node and reset the GPU or reboot; RMA if it recurs.", Blame.HARDWARE),
    _x(143, "GPU_INIT_ERROR", "GPU initialisation failure: the GPU's firmware did not start",
       "Reboot; update the driver and the GPU firmware; RMA if it persists.", Blame.HARDWARE),
    _x(154, "GPU_RECOVERY_ACTION_CHANGED", "GPU recovery action changed: the driver says what "
       "the GPU now needs (a reset, a node reboot, a drain)",
       "Do what nvidia-smi -q shows under 'GPU Recovery Action'.", Blame.HARDWARE),
))
"""The common Xids, by number."""


def describe(xid: int) -> XidInfo:
    """The row for ``xid``; an Xid not in the table gets a row that sends the reader to the
    catalogue, blamed on the hardware (the safe side: it is looked at, not ignored)."""
    known = XIDS.get(xid)
    if known is not None:
        return known
    return XidInfo(xid, None, f"Xid {xid} (not in ddp-doctor's table)",
                   f"Look up Xid {xid} in NVIDIA's Xid catalogue: {XID_CATALOG_TABLE}",
                   Blame.HARDWARE, confirmed=())
