"""The launch plan: can this machine run the job the user is about to start, and how.

``--gpus N`` and ``--global-batch B`` describe the job. The check compares N with the GPUs a
process here can use (CUDA_VISIBLE_DEVICES included), checks that B splits evenly over
N processes, and prints the exact launch command: one process per GPU with
``torch.distributed.run`` (DDP), not ``nn.DataParallel``.

Sources:
- https://docs.pytorch.org/docs/stable/generated/torch.nn.DataParallel.html ("It is
  recommended to use DistributedDataParallel, instead of this class, to do multi-GPU
  training, even if there is only a single node"), and
  https://docs.pytorch.org/docs/stable/notes/cuda.html#cuda-nn-ddp-instead (DataParallel is
  single-process, multi-threaded and slower because of the GIL)
- https://docs.pytorch.org/docs/stable/elastic/run.html (``--nproc_per_node``,
  ``--standalone``)
- Ultralytics ``select_device`` (ultralytics/utils/torch_utils.py): the total batch must
  be a multiple of the GPU count; it names the nearest valid sizes; ``--device 0,1`` sets
  CUDA_VISIBLE_DEVICES itself, so the list must name the physical GPUs
- CUDA_VISIBLE_DEVICES: https://docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/environment-variables.html
"""

from __future__ import annotations

from collections.abc import Iterator

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.facts.shapes import NvmlGpu
from ddp_doctor.facts.sizing import FULL_GPU_SHARE, visible_device_ids
from ddp_doctor.facts.view import FactsView
from ddp_doctor.model import Evidence, Finding, Severity, Step
from ddp_doctor.registry import Summary, check
from ddp_doctor.wording import count, plural

from ._util import human_bytes

DDP_DOCS = "https://docs.pytorch.org/docs/stable/generated/torch.nn.DataParallel.html"
TORCHRUN_DOCS = "https://docs.pytorch.org/docs/stable/elastic/run.html"
CVD_DOCS = ("https://docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/"
            "environment-variables.html")

TOO_FEW_GPUS = declare(
    id="PLN001",
    category=Category.GPU_NOT_VISIBLE,
    summary="The planned job asks for more GPUs than a process here can use",
    what="--gpus is larger than the number of GPUs visible to a process on this machine.",
    why="torchrun starts one process per GPU; the extra ranks fail with 'invalid device "
        "ordinal' or all pile onto the same GPU.",
    fix="Lower --gpus/--nproc_per_node to the usable count, or make the hidden GPUs visible "
        "(CUDA_VISIBLE_DEVICES, the container's --gpus, the Slurm allocation).",
    docs_url=CVD_DOCS,
)
BATCH_NOT_DIVISIBLE = declare(
    id="PLN002",
    category=Category.DDP_USAGE_ERROR,
    summary="The batch size does not divide by the number of GPUs",
    what="The total batch B is split over N DDP processes, and B is not a multiple of N.",
    why="Trainers such as Ultralytics refuse to start ('batch must be a multiple of GPU "
        "count'); hand-written DDP code silently drops or uneven-splits samples.",
    fix="Use the nearest multiple of the GPU count as the batch size.",
    docs_url=TORCHRUN_DOCS,
)


def _is_full(entry: str, full: list[NvmlGpu]) -> bool:
    return any(entry == str(g.get("index")) or (entry.startswith("GPU-") and (
        g.get("uuid") or "").lower().startswith(entry.lower())) for g in full)


def _device_list(facts: FactsView, count: int) -> str:
    """The --device value naming COUNT physical GPUs, leaving out full ones when it can."""
    nvml_count = len(facts.nvml_gpus())
    visible = visible_device_ids(facts.env_vars(), max(nvml_count, count), facts.mig_enabled())
    candidates = visible or [str(i) for i in range(max(nvml_count, count))]
    full = facts.full_gpus()
    free = [e for e in candidates if not _is_full(e, full)]
    return ",".join((free if len(free) >= count else candidates)[:count])


def launch_command(facts: FactsView, gpus: int, batch: int | None) -> str:
    """The exact command for this machine: torchrun for several GPUs, plain python for one."""
    script = facts.plan().get("script") or "train.py"
    python = facts.target_python()
    args = f"{script}" + (f" --batch {batch}" if batch else "") + \
        f" --device {_device_list(facts, gpus)}"
    if gpus == 1:
        return f"{python} {args}"
    port = facts.host().get("rendezvous_port") or {}
    standalone = "--standalone " if port.get("in_use") else ""
    return f"{python} -m torch.distributed.run {standalone}--nproc_per_node {gpus} {args}"


def _nearest(batch: int, gpus: int) -> tuple[int, int]:
    below = (batch // gpus) * gpus
    if below == 0:  # smaller than the GPU count: the two smallest valid sizes
        return gpus, 2 * gpus
    return below, below + gpus


def _fitted(batch: int | None, gpus: int) -> int | None:
    """The user's batch when it splits over GPUS, else the nearest smaller size that does."""
    if batch is None or gpus <= 0 or batch % gpus == 0:
        return batch
    return _nearest(batch, gpus)[0]


@check(id="launch.plan", title="Launch plan", area="launch",
       requires=("plan",), codes=(TOO_FEW_GPUS, BATCH_NOT_DIVISIBLE))
def launch_plan(facts: FactsView) -> Iterator[Finding | Summary]:
    plan = facts.plan()
    gpus, batch = plan.get("gpus"), plan.get("batch")
    if gpus is None and batch is None:
        yield Summary("nothing planned: add --gpus N --global-batch B to check a job and get "
                      "its launch command")
        return
    usable, source = facts.usable_gpus()
    full = facts.full_gpus()
    wanted = gpus or usable
    # The batch is judged on the GPUs the job can run on. Full GPUs only warn (their memory
    # may be free by launch time), so they do not change that count; their step fits the batch.
    runs_on = min(wanted, usable)
    # With no GPU usable here the batch is judged on the planned count, so each problem
    # of the plan is reported on its own, whatever this machine has.
    divisor = runs_on or (gpus or 0)
    problems = False
    if wanted == 0 or wanted > usable:
        problems = True
        yield _too_few(facts, gpus, usable, source, batch)
    elif full and wanted > usable - len(full):
        problems = True
        yield _full(facts, wanted, usable, full, batch)
    if batch is not None and divisor and batch % divisor:
        problems = True
        below, above = _nearest(batch, divisor)
        on = f"the {divisor} GPUs it can use" if divisor < wanted else f"{divisor} GPUs"
        yield Finding(
            code=BATCH_NOT_DIVISIBLE,
            title=f"--global-batch {batch} on {on}: {batch} is not a multiple of {divisor}; "
                  f"use {below} or {above}",
            evidence=(Evidence("batch", str(batch), "--global-batch"),
                      Evidence("GPUs", str(divisor),
                               "--gpus" if gpus and divisor == gpus else source),
                      Evidence("per GPU", f"{batch / divisor:.2f}", "batch / GPUs")),
            remediation=(
                Step(f"Use a batch size that splits evenly: {below} ({below // divisor} per "
                     f"GPU) or {above} ({above // divisor} per GPU).",
                     command=launch_command(facts, divisor, below)),
            ),
        )
    if problems:
        return
    command = launch_command(facts, wanted, batch)
    if wanted == 1:
        yield Summary("1 GPU, no DDP needed; launch with:", command=command)
        return
    per_gpu = f", {batch // wanted} images per GPU" if batch else ""
    yield Summary(f"{wanted} GPUs{per_gpu}, one DDP process each (not nn.DataParallel); "
                  "launch with:", command=command)


def _full(facts: FactsView, wanted: int, usable: int, full: list[NvmlGpu],
          batch: int | None) -> Finding:
    """Some GPUs the job would use are already full of other processes' memory."""
    room = usable - len(full)
    names = ", ".join(str(g["index"]) for g in full)
    steps = []
    if room:
        steps.append(Step(f"Launch on the {count(room, 'GPU')} with memory free.",
                          command=launch_command(facts, room, _fitted(batch, room))))
    steps.append(Step("Or free the full GPUs first: see who holds them (VIS006), then wait "
                      "for or stop those processes.",
                      command="nvidia-smi --query-compute-apps=gpu_bus_id,pid,process_name,"
                              "used_memory --format=csv"))
    return Finding(
        code=TOO_FEW_GPUS,
        title=f"{'--gpus ' + str(wanted) if facts.plan().get('gpus') else f'{wanted} GPUs'} "
              f"but GPU{'s' if len(full) > 1 else ''} {names} "
              f"{'are' if len(full) > 1 else 'is'} already full: only {room} of the {usable} "
              f"usable GPUs have memory for a rank",
        # The GPUs exist and CUDA sees them; their memory may free up before the launch.
        severity=Severity.WARNING,
        evidence=tuple(Evidence(f"GPU {g['index']} ({g.get('name')})",
                                f"{human_bytes(g.get('memory_used'))} of "
                                f"{human_bytes(g.get('memory_total'))} used",
                                f"NVML; full at {FULL_GPU_SHARE:.0%} used")
                       for g in full),
        remediation=tuple(steps),
        affects=tuple(f"gpu:{g['index']}" for g in full),
    )


def _too_few(facts: FactsView, planned: int | None, usable: int, source: str,
             batch: int | None) -> Finding:
    wanted = planned or 1
    nvml_count = len(facts.nvml_gpus())
    cvd = facts.env_var("CUDA_VISIBLE_DEVICES")
    slurm = facts.os().get("scheduler") or {}
    evidence = [Evidence("GPUs planned", str(planned or "all"), "--gpus"),
                Evidence("GPUs usable", str(usable), source),
                Evidence("GPUs on the machine", str(nvml_count), "NVML")]
    steps = []
    if usable:
        steps.append(Step(f"Plan for the {count(usable, 'usable GPU')}.",
                          command=launch_command(facts, usable, _fitted(batch, usable))))
    if cvd is not None:
        evidence.append(Evidence("CUDA_VISIBLE_DEVICES", repr(cvd), "environment"))
        if nvml_count >= wanted:
            steps.append(Step(f"CUDA_VISIBLE_DEVICES hides GPUs: expose {wanted} of the "
                              f"{nvml_count}.",
                              command="export CUDA_VISIBLE_DEVICES="
                                      + ",".join(str(i) for i in range(wanted)),
                              url=CVD_DOCS))
    if slurm.get("slurm"):
        evidence.append(Evidence("Slurm GPUs on this node",
                                 str(slurm.get("slurm_gpus_on_node") or "not set"),
                                 "SLURM_GPUS_ON_NODE"))
        steps.append(Step(f"Ask Slurm for {wanted} GPUs on the node.",
                          command=f"srun --nodes=1 --gpus-per-node={wanted} --pty bash"))
    elif nvml_count < wanted:
        steps.append(Step(f"This machine has {count(nvml_count, 'GPU')}; in a container, pass them "
                          f"all in.", command="docker run --gpus all ..."))
    return Finding(
        code=TOO_FEW_GPUS,
        title=("No GPU is usable here for the planned job" if not planned else
                f"--gpus {planned} but no GPU is usable here" if not usable else
                f"--gpus {planned} but only {count(usable, 'GPU')} {plural('is', usable)} "
                "usable here"),
        evidence=tuple(evidence),
        remediation=tuple(steps),
    )
