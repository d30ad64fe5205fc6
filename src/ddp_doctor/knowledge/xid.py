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
  ``GSP_RPC_TIMEOUT (119)``, ... The rows whose ``confirmed`` holds "name" have the name
  that header gives; the others (109 and the newer Xids) take the mnemonic of NVIDIA's
  mapping below.
- The catalogue's immediate action ("resolution bucket": RESTART_APP, RESET_GPU, RESTART_BM,
  IGNORE, ...) and whether the Xid is fatal, from NVIDIA's machine-readable copy of it that
  ships with NVSentinel, NVIDIA's GPU health monitor (``NVSENTINEL_MAPPING`` below). It
  also names Xid 109 (``ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR``) and the Xids added for newer
  GPUs (136, 144-150, 155, 158). ``BUCKETS`` is checked row by row against that file.
- The driver's own examples of Xid 94/95 lines (``kern_gpu_error_cont_ga100.c`` there):
  "RST: Yes" on an uncontained error means the GPU needs a reset.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

XID_CATALOG = "https://docs.nvidia.com/deploy/xid-errors/"
XID_CATALOG_TABLE = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
NVSENTINEL_MAPPING = ("https://github.com/NVIDIA/NVSentinel/blob/"
                      "6f8b0fcfa8e502bdda78fabf96facef729a9285b/distros/kubernetes/nvsentinel/"
                      "charts/gpu-health-monitor/xiderrorsmapping.csv")
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
    # What was checked here: "name" (the number's name in nverror.h), "bucket" (the
    # catalogue's immediate action and fatality, from NVIDIA's NVSentinel mapping). The
    # meaning and action texts are written from the catalogue, not copied.
    confirmed: tuple[str, ...] = ("name",)
    bucket: str | None = None  # the catalogue's immediate action: RESET_GPU, RESTART_APP...
    fatal: bool | None = None  # the catalogue's FATAL/NONFATAL

    @property
    def gpu_still_works(self) -> bool:
        """The catalogue calls it non-fatal: the GPU keeps working for now (a warning, not an
        error, when the Xid points at the hardware)."""
        return self.fatal is False


# The catalogue's (immediate action, fatal) per Xid, as NVIDIA's NVSentinel mapping lists it.
BUCKETS: dict[int, tuple[str, bool]] = {
    8: ("RESTART_APP", False), 13: ("RESTART_APP", False), 31: ("RESTART_APP", False),
    32: ("RESTART_APP", False), 43: ("IGNORE", False), 45: ("WORKFLOW_XID_45", False),
    46: ("RESET_GPU", True), 48: ("WORKFLOW_XID_48", True),
    61: ("UNEXPECTED_ERR_REPORT_ISSUE", True), 62: ("RESET_GPU", True), 63: ("IGNORE", False),
    64: ("RESET_GPU", True), 68: ("RESTART_APP", False), 69: ("RESTART_APP", False),
    74: ("WORKFLOW_NVLINK_ERR", True), 79: ("RESTART_BM", True), 92: ("IGNORE", False),
    94: ("RESTART_APP", False), 95: ("RESET_GPU", True), 109: ("RESET_GPU", True),
    119: ("RESET_GPU", True), 120: ("RESET_GPU", True), 136: ("RESET_GPU", True),
    140: ("RESET_GPU", True), 143: ("RESET_GPU", True),
    **{nvlink5: ("WORKFLOW_NVLINK5_ERR", True) for nvlink5 in range(144, 151)},
    154: ("FOLLOW_THE_OTHER_XID", False), 155: ("RESET_GPU", True), 158: ("RESET_GPU", True),
}


def _x(xid: int, driver_name: str | None, meaning: str, action: str, blame: Blame,
       confirmed: tuple[str, ...] = ("name",)) -> tuple[int, XidInfo]:
    bucket, fatal = BUCKETS[xid]
    return xid, XidInfo(xid, driver_name, meaning, action, blame, (*confirmed, "bucket"),
                        bucket, fatal)


_NVLINK5 = ("NVLINK_SAW_ERROR", "NVLINK_RLW_ERROR", "NVLINK_TLW_ERROR", "NVLINK_TREX_ERROR",
            "NVLINK_NVLPW_CTRL_ERROR", "NVLINK_NETIR_ERROR", "NVLINK_MSE_ERROR")


XIDS: dict[int, XidInfo] = dict((
    _x(8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing: a channel went "
       "idle past its timeout (usually a hung or very long kernel)",
       "Restart the program; look for a kernel that never finishes.", Blame.APPLICATION,
       confirmed=()),
    _x(13, "ROBUST_CHANNEL_GR_EXCEPTION", "Graphics engine exception: a kernel faulted "
       "(an out-of-range access or illegal instruction in the program, rarely the hardware)",
       "Run the program under compute-sanitizer; if it recurs with other programs on the same "
       "GPU, run the GPU's field diagnostics.", Blame.APPLICATION),
    _x(31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault: a kernel touched "
       "memory it does not own (usually the program's illegal address)",
       "Debug the program (CUDA_LAUNCH_BLOCKING=1, compute-sanitizer); suspect the GPU only "
       "if it follows this GPU across programs.", Blame.APPLICATION),
    _x(32, "ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream: the "
       "command stream sent to the GPU was bad (the program, the driver, or a flaky PCIe "
       "link)", "Restart the program; if it recurs across programs, check the PCIe link "
       "(nvidia-smi --query-gpu=pcie.link.gen.current,pcie.link.width.current "
       "--format=csv) and update the driver.", Blame.APPLICATION, confirmed=()),
    _x(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing: the program's "
       "channel hit a software-induced fault and was reset; the GPU stays healthy",
       "Look at the program that was running (its own error comes first); no GPU action.",
       Blame.APPLICATION),
    _x(45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "Preemptive cleanup: the driver tore down a "
       "program's channels, after an earlier error or because the program was killed",
       "Read the Xid logged just before it: that one is the cause.", Blame.APPLICATION),
    _x(46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing: the GPU timed out "
       "and no longer makes progress", "Reset the GPU (or reboot); update the driver if it "
       "recurs.", Blame.DRIVER, confirmed=()),
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
    _x(109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context-switch timeout: the GPU did not "
       "switch between programs in time",
       "Look for a hung kernel in the program; reset the GPU; update the driver if it recurs.",
       Blame.DRIVER, confirmed=()),  # the name is NVSentinel's: nverror.h has none
    _x(119, "GSP_RPC_TIMEOUT", "GSP firmware timeout: the GPU System Processor did not answer "
       "the driver",
       "Reset the GPU or reboot; update the driver; if it recurs, collect nvidia-bug-report.sh "
       "for NVIDIA.", Blame.DRIVER),
    _x(120, "GSP_ERROR", "GSP firmware error: the GPU System Processor reported a fault",
       "Reset the GPU or reboot; update the driver; if it recurs, collect nvidia-bug-report.sh "
       "for NVIDIA.", Blame.DRIVER),
    _x(136, "ALI_TRAINING_FAIL", "NVLink training failure: a link did not come up when the "
       "GPU started", "Reset the GPU; if the same link fails again, reseat or RMA.",
       Blame.HARDWARE, confirmed=()),
    _x(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "Unrecovered ECC error: an uncorrectable error "
       "escaped containment",
       "Drain the node and reset the GPU or reboot; RMA if it recurs.", Blame.HARDWARE),
    _x(143, "GPU_INIT_ERROR", "GPU initialisation failure: the GPU's firmware did not start",
       "Reboot; update the driver and the GPU firmware; RMA if it persists.", Blame.HARDWARE),
    *(_x(nvlink5, name, "NVLink error (fifth-generation NVLink): a link between GPUs or "
         "to an NVSwitch reported a fault", "Read the link counters (nvidia-smi nvlink -e), "
         "drain and reset the GPU; reseat or RMA if the same link keeps failing.",
         Blame.HARDWARE, confirmed=()) for nvlink5, name in zip(range(144, 151), _NVLINK5)),
    _x(154, "GPU_RECOVERY_ACTION_CHANGED", "GPU recovery action changed: the driver says what "
       "the GPU now needs (a reset, a node reboot, a drain)",
       "Do what nvidia-smi -q shows under 'GPU Recovery Action'.", Blame.HARDWARE),
    _x(155, "NVLINK_SW_DEFINED_ERROR", "NVLink error reported by the driver's software checks",
       "Reset the GPU; read the link counters (nvidia-smi nvlink -e) if it recurs.",
       Blame.HARDWARE, confirmed=()),
    _x(158, "GPU_FATAL_TIMEOUT", "GPU fatal timeout: the GPU stopped answering the driver",
       "Drain the node and reset the GPU or reboot; collect nvidia-bug-report.sh if it recurs.",
       Blame.HARDWARE, confirmed=()),
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
