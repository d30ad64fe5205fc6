"""GPU hardware faults that NVML reports: uncorrectable ECC errors, memory pages or rows
waiting for a reset to be retired or remapped, a failed remap, and a GPU that is lost.

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
"""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.facts.shapes import NvmlGpu
from ddp_doctor.facts.view import FactsView
from ddp_doctor.model import Evidence, Finding, Severity, Step
from ddp_doctor.registry import Summary, check
from ddp_doctor.wording import count

XID_CATALOG = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
PAGE_RETIREMENT = "https://docs.nvidia.com/deploy/dynamic-page-retirement/index.html"

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
