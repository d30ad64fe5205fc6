"""GPU visibility: which GPUs a training process will actually get, and in what order.

Sources:
- CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER rules (indices or GPU-/MIG- UUIDs, parsing stops
  at the first invalid entry, "" or -1 hides every GPU; FASTEST_FIRST is the default order,
  PCI_BUS_ID matches nvidia-smi):
  https://docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/environment-variables.html
- MIG: a CUDA process sees one MIG device; no P2P or CUDA IPC between MIG instances, so
  NCCL/DDP cannot span them: https://docs.nvidia.com/datacenter/tesla/mig-user-guide/index.html
- Who holds a GPU: `nvidia-smi --query-compute-apps` (https://docs.nvidia.com/deploy/nvidia-smi/);
  memory others hold is missing for the job, which then fails with "CUDA out of memory".
- DDP steps in lock-step: every all-reduce waits for the slowest rank, so mixed GPU models
  run at the slowest one's pace (https://docs.pytorch.org/docs/stable/notes/ddp.html).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.facts.shapes import GpuProcess, NvmlGpu
from ddp_doctor.facts.view import FactsView, mig_on
from ddp_doctor.model import Evidence, Finding, Severity, Step
from ddp_doctor.registry import Summary, check

from ._util import GIB, cuda_init_cut_short, human_bytes

CUDA_ENV_DOCS = ("https://docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/"
                 "environment-variables.html")
MIG_DOCS = "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/index.html"
# A GPU counts as busy when others hold this much of its memory (or run compute on it):
# 1 GiB or 10 % of the card, above what a display server or a stray context takes.
BUSY_MIN_BYTES = 1 * GIB
BUSY_MIN_FRACTION = 0.10
SMI_APPS = "nvidia-smi --query-compute-apps=gpu_bus_id,pid,process_name,used_memory --format=csv"

ALL_HIDDEN = declare(
    id="VIS001",
    category=Category.GPU_NOT_VISIBLE,
    summary="CUDA_VISIBLE_DEVICES hides every GPU",
    what="CUDA_VISIBLE_DEVICES is empty, -1, or starts with an entry that names no GPU.",
    why=("CUDA then reports no device at all: torch.cuda.is_available() is False and a "
         "multi-GPU job fails or silently trains on the CPU."),
    fix="Unset CUDA_VISIBLE_DEVICES, or list the GPU indices or UUIDs the job should use.",
    docs_url=CUDA_ENV_DOCS,
)
LIST_CUT_SHORT = declare(
    id="VIS002",
    category=Category.GPU_NOT_VISIBLE,
    summary="CUDA_VISIBLE_DEVICES stops at an invalid entry",
    what=("CUDA reads CUDA_VISIBLE_DEVICES left to right and stops at the first entry that "
          "is not a GPU on this machine (an index too high, a typo, an unknown UUID)."),
    why=("The job gets fewer GPUs than the list suggests; with one process per GPU the extra "
         "ranks fail with 'invalid device ordinal'."),
    fix="Correct the list so that every entry is a valid index (0..N-1) or GPU UUID.",
    severity=Severity.WARNING,
    docs_url=CUDA_ENV_DOCS,
)
TORCH_SEES_FEWER = declare(
    id="VIS003",
    category=Category.GPU_NOT_VISIBLE,
    summary="PyTorch sees fewer GPUs than the driver",
    what="torch.cuda.device_count() is smaller than the number of GPUs NVML lists and "
         "CUDA_VISIBLE_DEVICES allows.",
    why="torchrun --nproc_per_node with the nvidia-smi count starts ranks that have no GPU.",
    fix="Look for a container or cgroup limit on /dev/nvidia* devices, or GPUs that fail "
        "CUDA initialisation; launch with the count torch reports.",
    severity=Severity.WARNING,
    docs_url=CUDA_ENV_DOCS,
)
ORDER_DIFFERS = declare(
    id="VIS004",
    category=Category.GPU_NOT_VISIBLE,
    summary="CUDA device numbers may differ from nvidia-smi's",
    what=("With different GPU models and CUDA_DEVICE_ORDER not set to PCI_BUS_ID, CUDA "
          "numbers the fastest GPU 0, while nvidia-smi numbers GPUs by PCI bus."),
    why=("cuda:0 may not be nvidia-smi GPU 0, so CUDA_VISIBLE_DEVICES=1 or --device 1 picks "
         "a different card than the one you looked at."),
    fix="export CUDA_DEVICE_ORDER=PCI_BUS_ID so both tools use the same numbers.",
    severity=Severity.WARNING,
    docs_url=CUDA_ENV_DOCS,
)
MIG_ENABLED = declare(
    id="VIS005",
    category=Category.GPU_NOT_VISIBLE,
    summary="MIG is enabled: one process sees one MIG slice, DDP cannot span slices",
    what="Multi-Instance GPU mode splits the GPU into isolated instances.",
    why=("A CUDA process sees at most one MIG instance, and MIG instances have no P2P or "
         "CUDA IPC, so NCCL cannot build a multi-GPU communicator across them: DDP over "
         "MIG slices does not work."),
    fix=("Disable MIG on GPUs meant for multi-GPU training (`sudo nvidia-smi -i N -mig 0`, "
         "then reset the GPU), or train single-process on one MIG instance."),
    docs_url=MIG_DOCS,
)
GPU_BUSY = declare(
    id="VIS006",
    category=Category.GPU_OUT_OF_MEMORY,
    summary="GPUs are already in use by other processes",
    what="Other processes hold memory or run compute on GPUs this job would use.",
    why=("The job gets only the memory left over and fails with 'CUDA out of memory', or "
         "runs slower sharing the GPU."),
    fix=("Wait for or stop those processes, or pick idle GPUs with CUDA_VISIBLE_DEVICES."),
    severity=Severity.WARNING,
    docs_url="https://docs.nvidia.com/deploy/nvidia-smi/index.html",
)
MIXED_MODELS = declare(
    id="VIS007",
    # Every GPU is visible and works; the cost is speed (the slowest card sets the pace)
    # and the smallest card's memory.
    category=Category.PERFORMANCE_DEGRADED,
    summary="The visible GPUs are different models",
    what="The GPUs one job would use are not all the same model.",
    why=("DDP waits for every rank at each all-reduce, so the slowest GPU sets the pace and "
         "the smallest one's memory bounds the batch size."),
    fix="Give the job identical GPUs with CUDA_VISIBLE_DEVICES.",
    severity=Severity.WARNING,
    docs_url="https://docs.pytorch.org/docs/stable/notes/ddp.html",
)


@dataclass(frozen=True)
class Selection:
    """What CUDA makes of CUDA_VISIBLE_DEVICES on this machine."""

    gpus: list[int]  # NVML indices, in CUDA order
    mig: list[str]  # MIG-... entries (each gives a process one MIG instance)
    stopped_at: str | None  # the first invalid entry, where CUDA stops reading
    unresolved: bool  # a GPU- UUID could not be matched (NVML gave no UUIDs)


def parse_visible_devices(value: str, nvml_gpus: list[NvmlGpu]) -> Selection:
    """Apply CUDA's rules to VALUE: indices or UUIDs, stopping at the first invalid entry.

    A MIG- UUID names a device only when some GPU runs in MIG mode; with MIG off
    everywhere it is as invalid as a typo.
    """
    mig_anywhere = any(mig_on(g) for g in nvml_gpus)
    gpus: list[int] = []
    mig: list[str] = []
    count = len(nvml_gpus)
    for raw in value.split(","):
        entry = raw.strip()
        if entry.lstrip("-").isdigit():
            index = int(entry)
            if not 0 <= index < count or index in gpus:
                return Selection(gpus, mig, entry, False)
            gpus.append(index)
        elif entry.startswith("MIG-"):
            if not mig_anywhere:
                return Selection(gpus, mig, entry, False)
            mig.append(entry)
        elif entry.startswith("GPU-"):
            matches = [g["index"] for g in nvml_gpus
                       if (g.get("uuid") or "").lower().startswith(entry.lower())]
            if not any(g.get("uuid") for g in nvml_gpus):
                return Selection(gpus, mig, None, True)
            if len(matches) != 1:
                return Selection(gpus, mig, entry, False)
            gpus.append(matches[0])
        else:
            return Selection(gpus, mig, entry, False)
    return Selection(gpus, mig, None, False)


def _gpus(facts: FactsView) -> list[NvmlGpu]:
    return facts.reachable_gpus() if facts.nvml().get("initialized") else []


def _cvd(facts: FactsView) -> str | None:
    return facts.env_var("CUDA_VISIBLE_DEVICES")


def _visible(facts: FactsView) -> list[NvmlGpu]:
    """The NVML GPUs the job would use (all of them when CUDA_VISIBLE_DEVICES is unset)."""
    gpus = _gpus(facts)
    cvd = _cvd(facts)
    if cvd is None:
        return gpus
    sel = parse_visible_devices(cvd, gpus)
    if sel.unresolved:
        return gpus
    by_index = {g["index"]: g for g in gpus}
    return [by_index[i] for i in sel.gpus if i in by_index]


def _bus_number(bus_id: str | None) -> int | None:
    """'00000000:1B:00.0' -> 0x1b, the number torch reports as a device's pci_bus_id."""
    try:
        return int((bus_id or "").split(":")[-2], 16)
    except (IndexError, ValueError):
        return None


def _cuda_order(facts: FactsView, gpus: list[NvmlGpu], fallback: list[int]) -> list[int]:
    """NVML index of cuda:0, cuda:1, ...: matched by PCI bus through the torch probe."""
    devices = facts.cuda_devices()
    by_bus = {_bus_number(g.get("pci_bus_id")): g["index"] for g in gpus}
    if len(devices) == len(fallback) and len(by_bus) == len(gpus) and None not in by_bus:
        order = [by_bus.get(d.get("pci_bus_id")) for d in devices]
        if None not in order:
            return [i for i in order if i is not None]
    return fallback


def _mapping_table(facts: FactsView, gpus: list[NvmlGpu], fallback: list[int]) -> Evidence:
    cuda_order = _cuda_order(facts, gpus, fallback)
    rows = ["nvidia-smi  cuda  uuid  pci_bus_id  name"]
    position = {nvml_index: n for n, nvml_index in enumerate(cuda_order)}
    for g in gpus:
        cuda = position.get(g["index"])
        rows.append(f"{g['index']}  {'-' if cuda is None else f'cuda:{cuda}'}  "
                    f"{g.get('uuid') or '?'}  {g.get('pci_bus_id') or '?'}  {g.get('name')}")
    return Evidence("GPU table", "\n".join(rows), "NVML, CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER")


def _cvd_evidence(cvd: str | None) -> Evidence:
    return Evidence("CUDA_VISIBLE_DEVICES", "(unset)" if cvd is None else repr(cvd),
                    "environment")


@check(
    id="visibility.devices",
    title="GPUs visible to CUDA",
    area="visibility",
    requires=("nvml", "env_vars"),
    codes=(ALL_HIDDEN, LIST_CUT_SHORT, TORCH_SEES_FEWER),
    blocked_by=("driver.present",),
)
def visible_devices(facts: FactsView) -> Iterator[Finding | Summary]:
    gpus = _gpus(facts)
    if not gpus:
        yield Summary("no GPU listed by NVML")
        return
    cvd = _cvd(facts)
    sel = parse_visible_devices(cvd, gpus) if cvd is not None else None
    order = [g["index"] for g in gpus] if sel is None or sel.unresolved else sel.gpus
    table = _mapping_table(facts, gpus, order)
    n = len(gpus)
    listing = "nvidia-smi -L   # then e.g.: export CUDA_VISIBLE_DEVICES=0,1"
    unset = Step("Let the job see every GPU.", command="unset CUDA_VISIBLE_DEVICES")
    pick = Step(f"Or name the GPUs to use by index (0-{n - 1}) or UUID.", command=listing)
    stopped = (sel.stopped_at or "") if sel is not None else ""
    names_nothing = ("is a MIG instance UUID, but no GPU here has MIG enabled"
                     if stopped.startswith("MIG-") else "names no GPU here")
    if sel is not None and cvd is not None and not sel.gpus and not sel.mig \
            and not sel.unresolved:
        why = "is empty" if not cvd.strip() else (
            "is -1" if cvd.strip() == "-1" else f"starts with '{stopped}', which "
            f"{names_nothing}")
        yield Finding(
            code=ALL_HIDDEN,
            title=f"CUDA_VISIBLE_DEVICES={cvd!r} hides all {n} GPU{'s' if n > 1 else ''} "
                  f"from CUDA (it {why})",
            evidence=(_cvd_evidence(cvd), table),
            remediation=(unset, pick),
            affects=tuple(f"gpu:{g['index']}" for g in gpus),
        )
        return
    if sel is not None and sel.stopped_at is not None:
        kept = ",".join(str(i) for i in sel.gpus) or "none"
        yield Finding(
            code=LIST_CUT_SHORT,
            title=f"CUDA_VISIBLE_DEVICES={cvd!r} stops at '{sel.stopped_at}' (this machine has "
                  f"GPUs 0-{n - 1}"
                  + ("; none in MIG mode" if stopped.startswith("MIG-") else "")
                  + f"): CUDA sees only GPU{'s' if len(sel.gpus) != 1 else ''} {kept}",
            evidence=(_cvd_evidence(cvd), table),
            remediation=(
                Step(f"List only GPUs that exist here, by index (0-{n - 1}) or UUID.",
                     command=listing),
                Step("Or let the job see every GPU.", command="unset CUDA_VISIBLE_DEVICES"),
            ),
        )
    expected = len(gpus) if sel is None or sel.unresolved else len(sel.gpus) + min(
        len(sel.mig), 1)
    cuda = facts.torch_cuda()
    seen = cuda.get("device_count")
    # A probe stopped inside CUDA's start never learnt the count: cuda.init says so.
    if cuda.get("available") and isinstance(seen, int) and seen < expected \
            and cuda_init_cut_short(facts) is None:
        yield Finding(
            code=TORCH_SEES_FEWER,
            title=f"PyTorch sees {seen} CUDA device{'s' if seen != 1 else ''} but the driver "
                  f"lists {expected} usable GPU{'s' if expected != 1 else ''}",
            evidence=(Evidence("torch.cuda.device_count()", str(seen), "torch probe"),
                      _cvd_evidence(cvd), table),
            remediation=(
                Step("Compare what the driver and CUDA see.",
                     command=f"nvidia-smi -L; {facts.target_python()} -c \"import torch; "
                             f"print(torch.cuda.device_count())\""),
                Step("In a container, pass every GPU in.", command="docker run --gpus all ..."),
            ),
        )
    yield Summary(f"{expected} of {n} GPU{'s' if n != 1 else ''} visible"
                  + (f" (CUDA_VISIBLE_DEVICES={cvd})" if cvd is not None else ""))


@check(
    id="visibility.mig",
    title="MIG mode",
    area="visibility",
    requires=("nvml",),
    codes=(MIG_ENABLED,),
    blocked_by=("driver.present",),
)
def mig_mode(facts: FactsView) -> Iterator[Finding | Summary]:
    gpus = _gpus(facts)
    on = [g for g in gpus if mig_on(g)]
    if not on:
        yield Summary("off" if gpus else "no GPU")
        return
    indices = ",".join(str(g["index"]) for g in on)
    multi = len(gpus) > 1
    yield Finding(
        code=MIG_ENABLED,
        title=(f"MIG is enabled on GPU{'s' if len(on) > 1 else ''} {indices} "
               f"({on[0].get('name')}): a process sees one MIG slice and NCCL/DDP cannot span "
               f"slices"),
        severity=Severity.ERROR if multi else Severity.WARNING,
        evidence=tuple(Evidence(f"GPU {g['index']} MIG mode", "Enabled",
                                "nvmlDeviceGetMigMode") for g in on),
        remediation=(
            Step("List the MIG instances and their UUIDs.", command="nvidia-smi -L"),
            Step("For multi-GPU training, turn MIG off (needs no running processes; the GPU "
                 "resets).", command=f"sudo nvidia-smi -i {indices} -mig 0",
                 url=MIG_DOCS),
            Step("Or run single-process training on one MIG instance.",
                 command="export CUDA_VISIBLE_DEVICES=MIG-<uuid from nvidia-smi -L>"),
        ),
        affects=tuple(f"gpu:{g['index']}" for g in on),
    )


def _busy(g: NvmlGpu) -> bool:
    used, total = g.get("memory_used") or 0, g.get("memory_total") or 0
    if g.get("processes"):
        return True
    return used >= BUSY_MIN_BYTES and total > 0 and used >= BUSY_MIN_FRACTION * total


def _who(p: GpuProcess, with_memory: bool) -> str:
    parts = [f"pid {p.get('pid')}"]
    if p.get("name"):
        parts.append(str(p["name"]))
    if p.get("username"):
        parts.append(f"user {p['username']}")
    if with_memory and p.get("used_memory") is not None:
        parts.append(human_bytes(p["used_memory"]))
    return " ".join(parts)


@check(
    id="visibility.busy",
    title="GPUs already in use",
    area="visibility",
    # env_vars only narrows the GPUs to CUDA_VISIBLE_DEVICES; without it (a pasted
    # nvidia-smi table) every GPU counts.
    requires=("nvml",),
    codes=(GPU_BUSY,),
    blocked_by=("driver.present",),
)
def busy_gpus(facts: FactsView) -> Iterator[Finding | Summary]:
    visible = _visible(facts)
    busy = [g for g in visible if _busy(g)]
    if not busy:
        yield Summary(f"{len(visible)} GPU{'s' if len(visible) != 1 else ''} idle")
        return
    idle = [g["index"] for g in _gpus(facts) if not _busy(g)]
    evidence = []
    for g in busy:
        listed = g.get("processes") or []
        # One process: its memory is the "used" figure already shown; several: say whose.
        procs = "; ".join(_who(p, len(listed) > 1) for p in listed) or "no process visible " \
            "(another container or user)"
        evidence.append(Evidence(
            f"GPU {g['index']} ({g.get('name')})",
            f"{human_bytes(g.get('memory_used'))} of {human_bytes(g.get('memory_total'))} used; "
            f"{procs}", "NVML memory info and compute processes"))
    steps = [Step("See who holds the GPUs.", command=SMI_APPS)]
    if idle:
        # nvidia-smi numbers GPUs by PCI bus; CUDA does too only with CUDA_DEVICE_ORDER set.
        steps.append(Step("Run on the idle GPUs only (numbered as nvidia-smi numbers them).",
                          command="export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES="
                                  + ",".join(map(str, idle)), url=CUDA_ENV_DOCS))
    steps.append(Step("Or stop a process you own that holds a GPU (check the pid first).",
                      command="kill <pid>"))
    indices = ", ".join(str(g["index"]) for g in busy)
    yield Finding(
        code=GPU_BUSY,
        title=f"GPU{'s' if len(busy) > 1 else ''} {indices} already in use by other "
              f"processes ({len(busy)} of {len(visible)} this job would use)",
        evidence=tuple(evidence),
        remediation=tuple(steps),
        affects=tuple(f"gpu:{g['index']}" for g in busy),
    )


@check(
    id="visibility.models",
    title="GPU models and numbering",
    area="visibility",
    requires=("nvml", "env_vars"),
    codes=(MIXED_MODELS, ORDER_DIFFERS),
    blocked_by=("driver.present",),
)
def gpu_models(facts: FactsView) -> Iterator[Finding | Summary]:
    visible = _visible(facts)
    names = sorted({g.get("name") or "?" for g in visible})
    if len(names) <= 1:
        yield Summary(f"{len(visible)}x {names[0]}" if names else "no GPU visible")
        return
    by_name = {n: [g["index"] for g in visible if (g.get("name") or "?") == n] for n in names}
    largest = max(by_name.values(), key=len)
    counts = ", ".join(f"{len(v)}x {n} (GPU {','.join(map(str, v))})"
                       for n, v in by_name.items())
    yield Finding(
        code=MIXED_MODELS,
        title=f"This job would mix GPU models: {counts}; the slowest sets the pace of DDP",
        evidence=tuple(Evidence(f"GPU {g['index']}", f"{g.get('name')}, "
                                f"{human_bytes(g.get('memory_total'))}", "NVML")
                       for g in visible),
        remediation=(Step("Train on identical GPUs only.",
                          command="export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES="
                          + ",".join(map(str, largest))),),
    )
    order = facts.env_var("CUDA_DEVICE_ORDER")
    if order != "PCI_BUS_ID":
        gpus = _gpus(facts)
        yield Finding(
            code=ORDER_DIFFERS,
            title=f"CUDA_DEVICE_ORDER is {order or 'unset (FASTEST_FIRST)'} on a machine with "
                  f"different GPU models: cuda:N may not be nvidia-smi GPU N",
            evidence=(Evidence("CUDA_DEVICE_ORDER", order or "(unset)", "environment"),
                      _mapping_table(facts, gpus, [g["index"] for g in gpus])),
            remediation=(Step("Number CUDA devices like nvidia-smi does (add it to your "
                              "shell profile or job script).",
                              command="export CUDA_DEVICE_ORDER=PCI_BUS_ID", url=CUDA_ENV_DOCS),),
        )
