"""GPU hardware faults that NVML reports: uncorrectable ECC errors, memory pages or rows
waiting for a reset to be retired or remapped, a failed remap, and a GPU that is lost; the
Xid and SXid errors of this boot's kernel log; and what slows a healthy GPU down: a PCIe
link narrower or slower than it should be, clocks held down by heat or power, and a GPU at
its maximum operating temperature.

Names: the checks are ``gpu.*``, shown in the ``driver`` area (the driver reports these
faults), and their codes are ``HWF`` (hardware fault); the names predate one word per
module and stay, as users' reports and policies hold them (CONTRIBUTING.md maps every
module's names, and a test holds the map).

PCIe generation is judged only from NVML read while the interpreter probe kept the GPU busy:
an idle GPU lowers its link generation to save power, so an idle Gen1 link is normal. The
width does not change at idle and is judged from the NVML probe. Without pynvml in the
diagnosed interpreter there is no busy reading, and the summary says the generation was not
judged.

Sources:
- ECC, dynamic page retirement and its "pending" state (takes effect after a GPU reset or
  reboot): https://docs.nvidia.com/deploy/dynamic-page-retirement/index.html
- Row remapping on Ampere and newer HBM GPUs (Pending -> reset; Remapping Failure Occurred
  -> RMA candidate), and the workflow of draining and resetting a node:
  https://github.com/stas00/ml-engineering/blob/master/compute/accelerator/nvidia/debug.md
  (its A100 capture after an Xid 63 is tests/fixtures/captures/
  nvidia-smi-q-mlengineering-rowremap.txt)
- Xid 48 (double-bit ECC), 63/64 (remap event/failure), 79 ("GPU has fallen off the bus",
  NVML "GPU is lost"): https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html
- Every Xid's meaning and action: NVIDIA's Xid catalogue, https://docs.nvidia.com/deploy/xid-errors/
  (the table in knowledge/xid.py, which says what of it could be confirmed)
- SXid (NVSwitch) errors and the Fabric Manager: FABRIC_MANAGER_GUIDE below
- PCIe link queries (Curr/Max link generation and width: the Max queries answer for the GPU
  and its slot together) and clock-event reasons: https://docs.nvidia.com/deploy/nvml-api/
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.facts.shapes import GpuUnderLoad, NvmlGpu, XidEvent
from ddp_doctor.facts.view import FactsView
from ddp_doctor.knowledge.links import NVML_CLOCK_REASONS, active_reasons, board_lanes
from ddp_doctor.knowledge.xid import XID_CATALOG_TABLE, Blame, describe
from ddp_doctor.model import Code, Evidence, Finding, Severity, Step
from ddp_doctor.registry import Summary, check
from ddp_doctor.wording import count

XID_CATALOG = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
PAGE_RETIREMENT = "https://docs.nvidia.com/deploy/dynamic-page-retirement/index.html"
FABRIC_MANAGER_GUIDE = ("https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/"
                        "index.html")

UNCORRECTABLE_ECC = declare(
    id="HWF001",
    category=Category.HARDWARE_FAULT,
    summary="A GPU has uncorrectable ECC memory errors",
    what=(
        "The GPU's memory reported errors that ECC could detect but not correct (double-bit "
        "errors, Xid 48). The volatile count is since the last driver load or GPU reset; the "
        "aggregate count is for the GPU's lifetime."
    ),
    why=(
        "A process that touches the bad memory dies with 'CUDA error: uncorrectable ECC "
        "error encountered', taking the whole distributed job down; a GPU that keeps "
        "producing them is failing."
    ),
    fix=(
        "Drain the node, reset the GPU (or reboot) so the bad memory is retired or remapped, "
        "and RMA the GPU if the errors come back."
    ),
    docs_url=PAGE_RETIREMENT,
)

PAGES_PENDING = declare(
    id="HWF002",
    category=Category.HARDWARE_FAULT,
    summary="GPU memory pages are waiting for a reset to be retired",
    what=(
        "The driver has marked memory pages with ECC errors for retirement (pre-Ampere GPUs "
        "such as V100), but the retirement takes effect only after a GPU reset or reboot."
    ),
    why="Until then the bad pages can still be handed out and fail again.",
    fix="Reset the GPU when it is idle, or reboot the node.",
    severity=Severity.WARNING,
    docs_url=PAGE_RETIREMENT,
)

REMAP_PENDING = declare(
    id="HWF003",
    category=Category.HARDWARE_FAULT,
    summary="GPU memory rows are waiting for a reset to be remapped",
    what=(
        "An Ampere-or-newer GPU marked a memory row for remapping after an ECC error (Xid 63 "
        "'Row Remapper: New row marked for remapping, reset gpu to activate'); the spare row "
        "is used only after a GPU reset."
    ),
    why="Until the reset the faulty row stays in use and can raise more ECC errors.",
    fix="Reset the GPU when it is idle, or reboot the node.",
    severity=Severity.WARNING,
    docs_url=XID_CATALOG,
)

REMAP_FAILED = declare(
    id="HWF004",
    category=Category.HARDWARE_FAULT,
    summary="GPU memory row remapping failed",
    what=(
        "The GPU could not remap a faulty memory row (Xid 64, 'Remapping Failure Occurred: "
        "Yes'): its spare rows for that bank are used up."
    ),
    why="The faulty memory stays in service; NVIDIA treats this GPU as a candidate for RMA.",
    fix="Take the GPU out of service, collect nvidia-bug-report.sh output, and RMA it.",
    docs_url=XID_CATALOG,
)

GPU_LOST = declare(
    id="HWF005",
    category=Category.HARDWARE_FAULT,
    summary="A GPU does not answer the driver",
    what=(
        "NVML lists the GPU but cannot reach it ('GPU is lost', 'Unable to determine the "
        "device handle'): it fell off the PCIe bus (Xid 79), is wedged, or lost power."
    ),
    why="CUDA cannot use it, and every rank placed on it fails or hangs the job.",
    fix=(
        "Look for Xid errors in the kernel log, drain the node and reboot it; check power, "
        "cooling and PCIe seating if it happens again."
    ),
    docs_url=XID_CATALOG,
)

_XID_LOG = Step("Look for Xid errors in the kernel log (48: double-bit ECC, 63/64: row remap, "
                "79: fallen off the bus).", command="sudo dmesg -T | grep -i xid",
                url=XID_CATALOG)


def _name(gpu: NvmlGpu) -> str:
    return f"GPU {gpu.get('index')} ({gpu.get('name') or 'unknown model'})"


def _where(gpu: NvmlGpu) -> str:
    return f"nvidia-smi -q -i {gpu.get('index')}"


def _reset_steps(gpu: NvmlGpu) -> list[Step]:
    index = gpu.get("index")
    return [
        Step("Drain the node (stop scheduling jobs on it) and stop the processes on this GPU.",
             command=f"nvidia-smi --query-compute-apps=pid,process_name --format=csv -i {index}"),
        Step("Reset the idle GPU (or reboot the node) so the retirement or remap takes effect.",
             command=f"sudo nvidia-smi -r -i {index}"),
    ]


def _ecc_finding(gpu: NvmlGpu) -> Finding | None:
    ecc = gpu.get("ecc") or {}
    volatile = ecc.get("volatile_uncorrected") or 0
    aggregate = ecc.get("aggregate_uncorrected") or 0
    if not volatile and not aggregate:
        return None
    evidence = (
        Evidence("uncorrectable ECC errors since the last reset", str(volatile), _where(gpu)),
        Evidence("uncorrectable ECC errors, lifetime", str(aggregate)
                 if ecc.get("aggregate_uncorrected") is not None else "unknown", _where(gpu)),
    )
    if volatile:
        title = (f"{_name(gpu)} has {count(volatile, 'uncorrectable ECC error')} since the "
                 "last reset")
        severity = Severity.ERROR
    else:
        title = (f"{_name(gpu)} has recorded {count(aggregate, 'uncorrectable ECC error')} in its "
                 "lifetime")
        severity = Severity.WARNING
    steps = [_XID_LOG, *_reset_steps(gpu),
             Step("If uncorrectable errors come back after the reset, take the GPU out of "
                  "service and RMA it (attach the output of nvidia-bug-report.sh).",
                  command="sudo nvidia-bug-report.sh")]
    return Finding(code=UNCORRECTABLE_ECC, title=title, severity=severity, evidence=evidence,
                   remediation=tuple(steps), affects=(f"gpu:{gpu.get('index')}",))


def _gpu_findings(gpu: NvmlGpu) -> Iterator[Finding]:
    index = gpu.get("index")
    if gpu.get("error"):
        yield Finding(
            code=GPU_LOST,
            title=f"GPU {index} does not answer the driver: {gpu['error']}",
            evidence=(Evidence("NVML", f"{gpu.get('error_type') or 'error'}: {gpu['error']}",
                               f"nvmlDeviceGetHandleByIndex({index})"),),
            remediation=(
                _XID_LOG,
                Step("Drain the node and reboot it; a GPU that fell off the bus usually comes back "
                     "only with a reboot (the Xid catalog's action for Xid 79).",
                     command="sudo reboot"),
                Step("If it happens again: check power and cooling, reseat the GPU, and RMA "
                     "it if it persists.", command="sudo nvidia-bug-report.sh"),
            ),
            affects=(f"gpu:{index}",),
        )
        return
    ecc = _ecc_finding(gpu)
    if ecc:
        yield ecc
    if gpu.get("retired_pages_pending"):
        yield Finding(
            code=PAGES_PENDING,
            title=f"{_name(gpu)} has memory pages waiting for a reset to be retired",
            evidence=(Evidence("Pending Page Blacklist", "Yes", _where(gpu)),),
            remediation=(_XID_LOG, *_reset_steps(gpu)),
            affects=(f"gpu:{index}",),
        )
    rows = gpu.get("remapped_rows") or {}
    rows_evidence = (
        Evidence("remapped rows (correctable / uncorrectable error)",
                 f"{rows.get('correctable')} / {rows.get('uncorrectable')}", _where(gpu)),
        Evidence("remap pending / failure occurred",
                 f"{'Yes' if rows.get('pending') else 'No'} / "
                 f"{'Yes' if rows.get('failure') else 'No'}", _where(gpu)),
    )
    if rows.get("failure"):
        yield Finding(
            code=REMAP_FAILED,
            title=f"{_name(gpu)}: memory row remapping failed; the GPU is an RMA candidate",
            evidence=rows_evidence,
            remediation=(
                _XID_LOG,
                Step("Take the GPU out of service: drain the node, or hide the GPU from jobs.",
                     command=f"nvidia-smi -i {index} --query-gpu=uuid --format=csv,noheader"),
                Step("Collect a bug report and open an RMA with the vendor.",
                     command="sudo nvidia-bug-report.sh"),
            ),
            affects=(f"gpu:{index}",),
        )
    elif rows.get("pending"):
        yield Finding(
            code=REMAP_PENDING,
            title=f"{_name(gpu)} has memory rows waiting for a reset to be remapped",
            evidence=rows_evidence,
            remediation=(_XID_LOG, *_reset_steps(gpu)),
            affects=(f"gpu:{index}",),
        )


@check(
    id="gpu.health",
    title="GPU health",
    area="driver",
    requires=("nvml",),
    codes=(UNCORRECTABLE_ECC, PAGES_PENDING, REMAP_PENDING, REMAP_FAILED, GPU_LOST),
    blocked_by=("driver.present",),
)
def gpu_health(facts: FactsView) -> Iterator[Finding | Summary]:
    gpus = facts.nvml_gpus()
    found = [f for gpu in gpus for f in _gpu_findings(gpu)]
    yield from found
    if not found:
        ecc_on = sum(1 for g in gpus if (g.get("ecc") or {}).get("enabled"))
        yield Summary(f"{count(len(gpus), 'GPU')}: no uncorrectable ECC errors, nothing pending a "
                      f"reset (ECC enabled on {ecc_on} of {len(gpus)})")


# ---------------------------------------------------------------- Xid / SXid in the kernel log

XID_HARDWARE = declare(
    id="HWF006",
    category=Category.HARDWARE_FAULT,
    summary="The kernel log shows GPU hardware or driver Xid errors this boot",
    what=(
        "The NVIDIA driver logged Xid events for a GPU since the last boot that NVIDIA's Xid "
        "catalogue puts on the GPU, its memory, its links or its firmware: 48 (double-bit "
        "ECC), 63/64 (row remap), 74 (NVLink), 79 (fallen off the bus), 94/95 (contained / "
        "uncontained ECC), 119/120 (GSP firmware), among others."
    ),
    why=(
        "Jobs on that GPU crash, hang or compute on faulty memory until it is reset; the same "
        "Xid coming back on the same GPU means it needs replacing."
    ),
    fix=(
        "Do what the catalogue says for each Xid (the finding lists it): usually drain the "
        "node, reset the GPU or reboot, and RMA the GPU if it recurs."
    ),
    docs_url=XID_CATALOG,
)
XID_APPLICATION = declare(
    id="HWF007",
    # Usually the program's own fault, so no hardware category; it matters when it follows
    # one GPU across programs.
    category=Category.UNKNOWN,
    summary="The kernel log shows application-class Xid errors this boot",
    what=(
        "The driver logged Xid events that NVIDIA's catalogue mostly puts on the program: 13 "
        "(graphics engine exception), 31 (memory page fault), 43 (stopped processing), 45 "
        "(preemptive cleanup), 68/69."
    ),
    why=(
        "They are the kernel's side of a CUDA error such as an illegal memory access: the "
        "program that ran then has a bug, unless the same Xid keeps following one GPU."
    ),
    fix=(
        "Debug the program (CUDA_LAUNCH_BLOCKING=1, compute-sanitizer); suspect the GPU if "
        "the Xid recurs on it with other programs."
    ),
    severity=Severity.WARNING,
    docs_url=XID_CATALOG,
)
SXID = declare(
    id="HWF008",
    category=Category.HARDWARE_FAULT,
    summary="The kernel log shows NVSwitch SXid errors this boot",
    what=(
        "The NVSwitch driver logged SXid events: errors of the switches that join the GPUs "
        "of an HGX/DGX board (a link, a port, the switch's memory)."
    ),
    why=(
        "A fatal SXid takes the switch's links down and every NCCL job on the board hangs or "
        "fails; non-fatal ones can be the first sign of a failing link."
    ),
    fix=(
        "Read the SXid lines (fatal or non-fatal), check the Fabric Manager's log, and reset "
        "the GPUs and switches or reboot the node; open a case with the vendor if they recur."
    ),
    severity=Severity.WARNING,
    docs_url=FABRIC_MANAGER_GUIDE,
)
KERNEL_LOG_UNREADABLE = declare(
    id="HWF009",
    category=Category.UNKNOWN,
    summary="The kernel log could not be read, so Xid errors were not checked",
    what=(
        "Neither journalctl -k nor dmesg could read this boot's kernel log: a container "
        "without the host's journal, kernel.dmesg_restrict=1 for an unprivileged user, or no "
        "permission to read the system journal."
    ),
    why="GPU Xid errors are recorded only there: a failing GPU can look healthy without it.",
    fix="Run the command the finding gives on the host (with sudo), or run ddp-doctor as root.",
    severity=Severity.INFO,
    docs_url=XID_CATALOG,
)


def _gpu_label(event: XidEvent, gpu: NvmlGpu | None) -> str:
    if gpu is None:
        return f"the GPU at PCI {event.get('pci_bus_id')} (not listed by NVML now)"
    return f"{_name(gpu)} at PCI {event.get('pci_bus_id')}"


def _when(events: list[XidEvent]) -> str:
    times = [e.get("time") for e in events if e.get("time")]
    if not times:
        return "time not shown"
    return f"at {times[0]}" if len(times) == 1 else f"first at {times[0]}, last at {times[-1]}"


def _group(events: list[tuple[XidEvent, NvmlGpu | None]]) -> dict[
        str, tuple[NvmlGpu | None, dict[int, list[XidEvent]]]]:
    """Events by device (PCI address) and then by Xid number, in the log's order."""
    groups: dict[str, tuple[NvmlGpu | None, dict[int, list[XidEvent]]]] = {}
    for event, gpu in events:
        key = str(event.get("pci_bus_id"))
        _, by_xid = groups.setdefault(key, (gpu, {}))
        by_xid.setdefault(int(event.get("xid") or 0), []).append(event)
    return groups


def _causes(events: list[XidEvent]) -> list[int]:
    """The earlier Xids the driver names as the cause of these events, in order."""
    found = (e.get("caused_by") for e in events)
    return list(dict.fromkeys(cause for cause in found if cause is not None))


def _blames_hardware(xid: int, events: list[XidEvent]) -> bool:
    """An Xid that points at the GPU, or a program-level one (a channel torn down, Xid 45)
    that the driver says an earlier hardware Xid caused."""
    return describe(xid).blame is not Blame.APPLICATION or any(
        describe(cause).blame is not Blame.APPLICATION for cause in _causes(events))


def _still_works(xid: int, events: list[XidEvent]) -> bool:
    """Non-fatal by NVIDIA's catalogue, or every line of it says "Nonfatal" itself."""
    return describe(xid).gpu_still_works or all(e.get("fatal") is False for e in events)


def _xid_finding(code: Code, label: str, gpu: NvmlGpu | None,
                 by_xid: dict[int, list[XidEvent]], source: str) -> Finding:
    causes = [c for events in by_xid.values() for c in _causes(events) if c not in by_xid]
    infos = [describe(x) for x in [*by_xid, *dict.fromkeys(causes)]]
    parts = [f"Xid {x} ({describe(x).meaning.split(':')[0]}"
             f"{''.join(f', after Xid {c}' for c in _causes(events))}) x{len(events)}"
             for x, events in by_xid.items()]
    evidence = [Evidence(f"Xid {x}: {describe(x).meaning}",
                         f"{count(len(events), 'event')} this boot, {_when(events)}; last: "
                         f"{events[-1].get('message') or ''}"[:400], source)
                for x, events in by_xid.items()]
    if gpu is not None:
        evidence.append(Evidence("GPU", f"index {gpu.get('index')}, UUID "
                                 f"{gpu.get('uuid') or 'unknown'}", "NVML, by PCI address"))
    codes = sorted({str(e.get("log_code")) for events in by_xid.values() for e in events
                    if e.get("log_code")})
    if codes:
        evidence.append(Evidence("what `ddp-doctor diagnose` makes of these lines",
                                 ", ".join(codes), "logrules"))
    steps = [Step(f"Xid {info.xid}: {info.action}", url=XID_CATALOG_TABLE) for info in infos]
    steps.append(Step("Read the lines around them in this boot's kernel log.",
                      command="sudo journalctl -k -b | grep -i -E 'xid|nvrm'"))
    index = gpu.get("index") if gpu else None
    if code is XID_HARDWARE and index is not None:
        steps.append(Step("Check the memory error counters and the recovery action nvidia-smi "
                          "reports.", command=f"nvidia-smi -q -i {index} -d "
                          "ECC,ROW_REMAPPER,PAGE_RETIREMENT"))
    severity = None
    if code is XID_HARDWARE and not causes and all(_still_works(x, events)
                                                   for x, events in by_xid.items()):
        severity = Severity.WARNING
    return Finding(code=code, title=f"{label} logged {', '.join(parts)} this boot",
                   severity=severity, evidence=tuple(evidence), remediation=tuple(steps),
                   affects=(f"gpu:{index}",) if index is not None else ())


def _unreadable_finding(facts: FactsView) -> Finding:
    log = facts.kernel_log()
    container = facts.in_container()
    where = ("this runs in a container, which usually cannot see the host's kernel log"
             if container else
             "kernel.dmesg_restrict=1 lets only root read the kernel log"
             if log.get("dmesg_restrict") else "no command could read it")
    return Finding(
        code=KERNEL_LOG_UNREADABLE,
        title=f"The kernel log could not be read ({where}): GPU Xid errors were not checked",
        evidence=tuple(Evidence("tried", attempt, "kernel log")
                       for attempt in log.get("attempts") or []),
        remediation=(
            Step("On the host (not in the container), list this boot's Xid and SXid errors.",
                 command="sudo journalctl -k -b --no-pager | grep -E 'S?Xid'"),
            Step("Where there is no journal, read the kernel ring buffer instead.",
                 command="sudo dmesg -T | grep -E 'S?Xid'"),
        ),
    )


@check(
    id="gpu.xid",
    title="Xid errors in the kernel log",
    area="driver",
    requires=("kernel_log",),
    codes=(XID_HARDWARE, XID_APPLICATION, SXID, KERNEL_LOG_UNREADABLE),
)
def gpu_xid(facts: FactsView) -> Iterator[Finding | Summary]:
    log = facts.kernel_log()
    if not log.get("readable"):
        yield _unreadable_finding(facts)
        return
    source = str(log.get("source") or "kernel log")
    events = facts.xid_events()
    xids = [(e, g) for e, g in events if e.get("kind") == "Xid"]
    sxids = [(e, g) for e, g in events if e.get("kind") == "SXid"]
    for _, (gpu, by_xid) in _group(xids).items():
        first = next(iter(by_xid.values()))[0]
        label = _gpu_label(first, gpu)
        hardware: dict[int, list[XidEvent]] = {}
        application: dict[int, list[XidEvent]] = {}
        for xid, events_of in by_xid.items():
            (hardware if _blames_hardware(xid, events_of) else application)[xid] = events_of
        if hardware:
            yield _xid_finding(XID_HARDWARE, label, gpu, hardware, source)
        if application:
            yield _xid_finding(XID_APPLICATION, label, gpu, application, source)
    for pci, (_, by_sxid) in _group(sxids).items():
        parts = [f"SXid {x} x{len(e)}" for x, e in by_sxid.items()]
        yield Finding(
            code=SXID,
            title=f"The NVSwitch at PCI {pci} logged {', '.join(parts)} this boot",
            evidence=tuple(Evidence(f"SXid {x}", f"{count(len(e), 'event')}, {_when(e)}; "
                                    f"last: {e[-1].get('message') or ''}"[:400], source)
                           for x, e in by_sxid.items()),
            remediation=(
                Step("Read the SXid lines: 'Fatal' ones take links down.",
                     command="sudo journalctl -k -b | grep SXid"),
                Step("Read the Fabric Manager's log.",
                     command="sudo tail -n 200 /var/log/fabricmanager.log",
                     url=FABRIC_MANAGER_GUIDE),
                Step("Reset the GPUs and switches, or reboot the node.",
                     command="sudo reboot"),
            ),
        )
    dropped = int(log.get("events_dropped") or 0)
    if not events:
        yield Summary(f"read with {source}: no Xid or SXid errors this boot")
    elif dropped:
        yield Summary(f"read with {source}: {count(len(events) + dropped, 'event')} "
                      f"({dropped} beyond the first and latest not kept)")


# ---------------------------------------------------------------- PCIe link and throttling

PCIE_NARROW = declare(
    id="HWF010",
    category=Category.PERFORMANCE_DEGRADED,
    summary="A GPU's PCIe link runs with fewer lanes than it should",
    what=(
        "NVML reports the GPU's PCIe link narrower than the most the GPU and its slot allow "
        "(x8 or x4 where x16 is possible). Unlike the generation, the width does not drop "
        "when the GPU idles, so a narrow link is read at any time."
    ),
    why=(
        "Every host-to-GPU copy and every PCIe transfer between GPUs gets that much less "
        "bandwidth: data loading and NCCL traffic over PCIe slow down, and one slow GPU sets "
        "the pace of the whole DDP job. The usual causes are a badly seated card or riser, a "
        "dirty connector, or a slot wired for fewer lanes."
    ),
    fix=(
        "Compare with `sudo lspci -vv` (LnkSta against LnkCap); reseat the GPU or riser, or "
        "move it to a full-width slot."
    ),
    severity=Severity.WARNING,
    docs_url="https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html",
)
PCIE_SLOW_GEN = declare(
    id="HWF011",
    category=Category.PERFORMANCE_DEGRADED,
    summary="A GPU's PCIe link stays below its generation while the GPU works",
    what=(
        "While the probe kept the GPU busy, NVML reported its PCIe link at a lower "
        "generation than the GPU and slot support. An idle GPU lowers the generation to save "
        "power, which is normal; under load it should run at its maximum. The reading needs "
        "pynvml in the diagnosed interpreter: without it the generation is not judged, and "
        "the check's summary says so."
    ),
    why=(
        "Each generation step halves the link's bandwidth: host-to-GPU copies and PCIe "
        "traffic between GPUs slow down."
    ),
    fix=(
        "Check the BIOS's PCIe speed setting for the slot, risers and retimers, and the "
        "link in `sudo lspci -vv` (LnkSta against LnkCap) while a job runs."
    ),
    severity=Severity.WARNING,
    docs_url="https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html",
)
THROTTLED = declare(
    id="HWF012",
    category=Category.PERFORMANCE_DEGRADED,
    summary="A GPU is being slowed down by heat or by a hardware power signal",
    what=(
        "NVML reports an active clock-event reason that holds the GPU below its clocks: HW "
        "Slowdown, HW Thermal Slowdown, HW Power Brake Slowdown or SW Thermal Slowdown. Idle, "
        "application-clock and power-cap reasons are normal and not reported."
    ),
    why=(
        "The GPU runs at a fraction of its speed and, in DDP, every other rank waits for it at "
        "each all-reduce: the whole job slows to the throttled GPU's pace."
    ),
    fix=(
        "Check cooling (fans, airflow, inlet temperature, dust) and the power supply; watch "
        "`nvidia-smi -q -d PERFORMANCE,TEMPERATURE` during a job."
    ),
    severity=Severity.WARNING,
    docs_url=NVML_CLOCK_REASONS,
)

NVML_THRESHOLDS = "https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html"
AT_MAX_TEMPERATURE = declare(
    id="HWF013",
    category=Category.PERFORMANCE_DEGRADED,
    summary="A GPU is at its maximum operating temperature",
    what=(
        "The GPU's temperature has reached its \"GPU Max Operating Temp\" (NVML's "
        "NVML_TEMPERATURE_THRESHOLD_GPU_MAX): the limit its own thermal control holds it "
        "under by lowering the clocks, below the slowdown and shutdown temperatures."
    ),
    why=(
        "At that limit the GPU trades clock speed for temperature, so it computes slower than "
        "its peers; in DDP every rank then waits for it at each all-reduce."
    ),
    fix=(
        "Improve cooling (fans, airflow, inlet temperature, dust); if the limit itself is set "
        "unusually low, find what lowered it (a vendor or OS thermal tool)."
    ),
    severity=Severity.WARNING,
    docs_url=NVML_THRESHOLDS,
)


# The clock-event reasons heat explains: the thermal ones, and HW Slowdown, which NVML sets
# for any hardware slowdown including a thermal one (nvmlClocksEventReasons, NVML API),
# unless the power brake, an external power signal and a cause of its own, is what set it.
THERMAL_SLOWDOWNS = frozenset({"SW Thermal Slowdown", "HW Thermal Slowdown"})


def _heat_explains(names: set[str]) -> bool:
    """Whether heat accounts for these active slowing reasons of a GPU at its limit."""
    return bool(names & THERMAL_SLOWDOWNS) or (
        "HW Slowdown" in names and "HW Power Brake Slowdown" not in names)


def _hot_finding(gpu: NvmlGpu) -> Finding | None:
    """The GPU at or over its max operating temperature (one snapshot's reading)."""
    margin = gpu.get("temperature_margin")
    if margin is None or margin > 0:
        return None
    index = gpu.get("index")
    temp, limit = gpu.get("temperature"), gpu.get("temperature_max_operating")
    reading = (f"{temp} C / {limit} C" if temp is not None and limit else
               f"{margin} C left below the limit (T.Limit)")
    return Finding(
        code=AT_MAX_TEMPERATURE,
        title=f"{_name(gpu)} is at its maximum operating temperature ({reading})",
        evidence=(Evidence("temperature (current / max operating)", reading,
                           "nvmlDeviceGetTemperature / GetTemperatureThreshold (GPU_MAX)"),
                  Evidence("slowdown temperature",
                           f"{gpu.get('temperature_slowdown') or 'unknown'} C",
                           "nvmlDeviceGetTemperatureThreshold (SLOWDOWN)")),
        remediation=(
            Step("Watch temperature, clocks and their event reasons while a job runs.",
                 command=f"nvidia-smi -q -i {index} -d TEMPERATURE,PERFORMANCE"),
            Step("Check fans, airflow, inlet temperature and dust; on a laptop or "
                 "workstation, check what sets the GPU's temperature limit."),
        ),
        affects=(f"gpu:{index}",),
    )


def _reading_for(facts: FactsView, gpu: NvmlGpu) -> GpuUnderLoad | None:
    """The torch probe's under-load reading of this NVML GPU (matched by UUID)."""
    for reading in facts.torch_cuda().get("under_load") or []:
        if reading.get("pcie") is None and reading.get("clock_event_reasons") is None:
            continue
        if facts.gpu_by_uuid(reading.get("uuid")) is gpu:
            return reading
    return None


def _load_note(facts: FactsView) -> str | None:
    """Why no under-load reading exists, from the torch probe's own words."""
    readings = facts.torch_cuda().get("under_load") or []
    errors = sorted({str(r.get("error")) for r in readings if r.get("error")})
    if errors:
        return errors[0]
    if not readings:
        return "the interpreter probe did not read NVML under load"
    return None


@check(
    id="gpu.pcie_link",
    title="GPU PCIe links",
    area="driver",
    requires=("nvml",),
    codes=(PCIE_NARROW, PCIE_SLOW_GEN),
    blocked_by=("driver.present",),
)
def gpu_pcie_link(facts: FactsView) -> Iterator[Finding | Summary]:
    """Width is judged from NVML at idle; generation only from a reading taken while the
    torch probe kept the GPU busy, since an idle GPU lowers its generation to save power."""
    gpus = [g for g in facts.reachable_gpus() if g.get("pcie")]
    if not gpus:
        yield Summary("NVML reports no PCIe link (a VM, WSL, or older snapshot)")
        return
    judged_gen = 0
    for gpu in gpus:
        link = gpu.get("pcie") or {}
        index = gpu.get("index")
        lspci = f"sudo lspci -vv -s {gpu.get('pci_bus_id') or ''} | grep -E 'LnkCap|LnkSta'"
        width, width_max = link.get("width_current"), link.get("width_max")
        wired = board_lanes(gpu.get("name"))  # an x8 card reports its chip's x16 as max
        if wired and width_max:
            width_max = min(width_max, wired)
        if width and width_max and width < width_max:
            yield Finding(
                code=PCIE_NARROW,
                title=f"{_name(gpu)}: PCIe link x{width}, where x{width_max} is possible",
                evidence=(Evidence("link width (current / max)", f"x{width} / x{width_max}",
                                   "nvmlDeviceGetCurrPcieLinkWidth / GetMaxPcieLinkWidth"),
                          Evidence("replays since reset", str(link.get("replay_counter")),
                                   "nvmlDeviceGetPcieReplayCounter")),
                remediation=(
                    Step("Confirm what the slot negotiated (LnkSta) against what both ends "
                         "can do (LnkCap).", command=lspci),
                    Step("Power down, reseat the GPU (and its riser), clean the connector, or "
                         "move it to a slot wired x16."),
                ),
                affects=(f"gpu:{index}",),
            )
        reading = _reading_for(facts, gpu)
        loaded = (reading or {}).get("pcie") or {}
        gen, gen_max = loaded.get("gen_current"), loaded.get("gen_max")
        if gen and gen_max:
            judged_gen += 1
            if gen < gen_max:
                yield Finding(
                    code=PCIE_SLOW_GEN,
                    title=f"{_name(gpu)}: PCIe Gen{gen} while busy, where Gen{gen_max} is "
                          f"possible",
                    evidence=(Evidence("link generation under load (current / max)",
                                       f"Gen{gen} / Gen{gen_max}",
                                       "NVML during the interpreter probe's GPU work"),
                              Evidence("at idle", f"Gen{link.get('gen_current')}",
                                       "NVML probe")),
                    remediation=(
                        Step("Watch the link while a job runs.", command=lspci),
                        Step("Check the BIOS's PCIe link speed for this slot (Auto, not a "
                             "fixed Gen), and any riser or retimer between slot and GPU."),
                    ),
                    affects=(f"gpu:{index}",),
                )
    shapes = sorted({f"Gen{(g.get('pcie') or {}).get('gen_max')} "
                     f"x{(g.get('pcie') or {}).get('width_max')}" for g in gpus})
    note = (f"generation judged under load on {judged_gen}" if judged_gen else
            f"generation not judged (it drops at idle, and {_load_note(facts)})")
    yield Summary(f"{count(len(gpus), 'GPU')}, links up to {', '.join(shapes)}; width judged "
                  f"at idle, {note}")


@check(
    id="gpu.throttle",
    title="GPU clocks and temperature",
    area="driver",
    requires=("nvml",),
    codes=(THROTTLED, AT_MAX_TEMPERATURE),
    blocked_by=("driver.present",),
)
def gpu_throttle(facts: FactsView) -> Iterator[Finding | Summary]:
    gpus = facts.reachable_gpus()
    seen = 0
    temps: list[str] = []
    for gpu in gpus:
        reading = _reading_for(facts, gpu)
        sources = []
        if reading and reading.get("clock_event_reasons") is not None:
            sources.append(("during GPU work", reading.get("clock_event_reasons"),
                            reading.get("temperature")))
        if gpu.get("clock_event_reasons") is not None:
            sources.append(("NVML query", gpu.get("clock_event_reasons"), gpu.get("temperature")))
        if gpu.get("temperature") is not None:
            temps.append(f"{gpu['temperature']} C")
        hot = _hot_finding(gpu)
        if sources:
            seen += 1
        slowing = [(when, r, temp) for when, mask, temp in sources
                   for r in active_reasons(mask) if r.slows]
        evidence = [Evidence(f"{r.name} ({when})", f"Active: {r.meaning}",
                             "nvmlDeviceGetCurrentClocksEventReasons")
                    for when, r, _ in slowing]
        if hot is not None and _heat_explains({r.name for _, r, _ in slowing}):
            # One cause, one finding: a GPU at its max operating temperature whose clocks a
            # thermal (or unattributed HW) slowdown holds down is slowed by that heat; the
            # reasons are quoted as its consequence (HWF012 inside HWF013).
            yield replace(hot, evidence=(*hot.evidence, *(
                Evidence(f"consequence, {THROTTLED.id}: {e.label}", e.value, e.source)
                for e in evidence)))
            continue
        if hot is not None:
            yield hot
        if not slowing:
            continue
        names = sorted({r.name for _, r, _ in slowing}, key=lambda n: n)
        hottest = max((t for _, _, t in slowing if t is not None), default=None)
        if hottest is not None:
            evidence.append(Evidence("temperature", f"{hottest} C (slowdown at "
                                     f"{gpu.get('temperature_slowdown') or 'unknown'} C)",
                                     "nvmlDeviceGetTemperature"))
        index = gpu.get("index")
        yield Finding(
            code=THROTTLED,
            title=f"{_name(gpu)} is slowed down: {', '.join(names)}",
            evidence=tuple(evidence),
            remediation=(
                Step("Watch the reasons, clocks and temperature while a job runs.",
                     command=f"nvidia-smi -q -i {index} -d PERFORMANCE,TEMPERATURE,POWER"),
                Step("Thermal: check fans, airflow, inlet temperature and dust; keep the "
                     "GPU below its slowdown temperature."),
                Step("HW Slowdown / Power Brake without heat: check the power supply and its "
                     "cables; the chassis or BMC can assert the brake (read its event log).",
                     command="sudo ipmitool sel list | tail -n 20"),
            ),
            affects=(f"gpu:{index}",),
        )
        continue
    if not seen:
        yield Summary("NVML reports no clock-event reasons (a VM, WSL, or older snapshot)")
        return
    yield Summary(f"{count(seen, 'GPU')}: no heat or power slowdown"
                  + (f" (temperatures {', '.join(temps)})" if temps else ""))
