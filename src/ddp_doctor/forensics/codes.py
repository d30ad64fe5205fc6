"""HNG codes: where the ranks of a hung job wait, and which rank holds the others up.

Sources for what each pattern means:
- every rank must call the same collectives in the same order; a rank that does not
  (another collective, or none) leaves the others waiting until the process group's
  timeout (https://pytorch.org/docs/stable/distributed.html, "Collective functions";
  TORCH_NCCL_ASYNC_ERROR_HANDLING and the watchdog:
  https://pytorch.org/docs/stable/torch_nccl_environment_variables.html);
- a rank inside its DataLoader is still producing its batch: the others wait for it in
  their next collective (https://pytorch.org/docs/stable/data.html, "Multi-process data
  loading": worker timeouts and hangs);
- ``init_process_group`` returns only when every rank of the world size has joined the
  store (https://pytorch.org/docs/stable/distributed.html#initialization);
- py-spy reads a process's stack from outside with ptrace, which containers forbid unless
  given CAP_SYS_PTRACE (https://github.com/benfred/py-spy#how-do-i-run-py-spy-in-docker).
"""

from __future__ import annotations

from ddp_doctor.categories import Category
from ddp_doctor.codes import declare
from ddp_doctor.model import Severity

DIST_DOCS = "https://pytorch.org/docs/stable/distributed.html"
PY_SPY_DOCKER = "https://github.com/benfred/py-spy#how-do-i-run-py-spy-in-docker"

RANK_HOLDS_UP = declare(
    "HNG001", Category.COLLECTIVE_TIMEOUT, "One rank holds the job up outside the collective",
    what="The other ranks wait inside a collective (all_reduce, barrier, ...), and this rank "
         "is not in any: it waits in its data loader, on a lock, or in its own code.",
    why="A collective completes only when every rank has called it; the others wait for this "
        "rank until the process group's timeout (10 or 30 minutes) kills the job.",
    fix="Open the line the finding names on that rank: a data loader stuck on a file or a "
        "worker, a lock, a blocking call or a loop that only this rank runs.",
    docs_url=DIST_DOCS)
RANKS_DIVERGED = declare(
    "HNG002", Category.DDP_USAGE_ERROR, "The ranks wait in different collectives",
    what="Some ranks wait in one collective and others in another (a barrier on one rank, "
         "an all_reduce on another), or in the same one called from different lines.",
    why="Every rank must call the same collectives in the same order; control flow that "
        "depends on the rank (a collective under `if rank == 0`, an early `break`, a data "
        "set that gives ranks different numbers of batches) parts them for ever.",
    fix="Make every rank run the same collectives: move the collective out of the "
        "rank-dependent branch, give every rank the same number of batches "
        "(DistributedSampler(drop_last=True)), or use DDP's join() for uneven inputs.",
    docs_url=DIST_DOCS)
ALL_IN_COLLECTIVE = declare(
    "HNG003", Category.COLLECTIVE_TIMEOUT, "Every rank waits in the same collective",
    what="All ranks reached the same collective from the same line, and it does not "
         "complete: no rank holds the others up.",
    why="The collective itself cannot finish: the transport between the ranks is broken or "
        "blocked (P2P between GPUs, the network between nodes, a GPU that stopped), or "
        "ranks are missing from the group.",
    fix="Rerun with NCCL_DEBUG=INFO to see the transport NCCL picked; try NCCL_P2P_DISABLE=1 "
        "(GPUs on one node) or NCCL_SOCKET_IFNAME/NCCL_IB_DISABLE (between nodes); check "
        "`dmesg` for Xid errors on the GPUs.",
    docs_url="https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html")
RANK_GONE = declare(
    "HNG004", Category.DDP_USAGE_ERROR, "A rank left while the others wait for it",
    what="A rank's process ended (it returned or exited early) while the other ranks still "
         "wait in a collective it never joined.",
    why="The survivors wait for it until the process group's timeout; a training loop that "
        "ends early on one rank (fewer batches, an exception caught and swallowed, an early "
        "return) is the usual cause.",
    fix="Give every rank the same number of steps (DistributedSampler(drop_last=True)), "
        "or use DDP's join() context for uneven inputs; check the rank's own output for "
        "why it ended.",
    docs_url=DIST_DOCS)
STUCK_IN_RENDEZVOUS = declare(
    "HNG005", Category.RENDEZVOUS_FAILURE, "Ranks wait in init_process_group for a rank",
    what="Some ranks wait inside init_process_group, and not every rank of the world size "
         "has joined.",
    why="init_process_group returns only when every rank has joined the store; a rank that "
        "never calls it (stuck before it, started late, or never started) holds every "
        "other rank there.",
    fix="See where the missing rank is (the finding names it when its stack was read); "
        "check that the world size matches the processes started.",
    docs_url=f"{DIST_DOCS}#initialization")
STACKS_UNREADABLE = declare(
    "HNG006", Category.UNKNOWN, "The ranks' stacks could not be read",
    what="The stacks of the hung ranks could not be taken: py-spy is missing, or the "
         "system forbids reading another process (no ptrace permission in a container).",
    why="Without them the report says which ranks stopped and when, but not on which line.",
    fix="Install py-spy next to ddp-doctor (`pip install py-spy`), and in a container run "
        "with `--cap-add SYS_PTRACE`; or dump the stacks yourself with `py-spy dump --pid "
        "PID` while the job hangs and give the output to `ddp-doctor diagnose`.",
    severity=Severity.INFO, docs_url=PY_SPY_DOCKER)

# Flight Recorder (forensics/flight.py, flight_verdict.py): each rank's own record of the
# collectives it called (https://pytorch.org/tutorials/prototype/
# flight_recorder_tutorial.html: sequence ids, states, sizes; its analyser's checks are
# missing ranks and mismatched sizes and types).
FR_DOCS = "https://pytorch.org/tutorials/prototype/flight_recorder_tutorial.html"
FR_MISMATCH = declare(
    "HNG007", Category.DDP_USAGE_ERROR, "The ranks called different collectives at one step",
    what="The Flight Recorder dumps show, at the same sequence number of the same process "
         "group, different ops (a barrier against an all_reduce) or the same op on tensors "
         "of different sizes or dtypes.",
    why="A collective matches across ranks by its order alone: ranks that call different "
        "ops, or one op on different shapes, wait for each other for ever (gloo) or until "
        "the watchdog (NCCL), or exchange garbage.",
    fix="Make every rank call the same collectives, in the same order, on tensors of the "
        "same shape and dtype: look for a collective under a rank-dependent branch, or a "
        "tensor whose size depends on the rank's data.",
    docs_url=FR_DOCS)
FR_MISSING = declare(
    "HNG008", Category.COLLECTIVE_TIMEOUT, "A rank never called the collective the others "
    "wait in",
    what="The Flight Recorder dumps show some ranks waiting in collective #N of a process "
         "group, and a rank whose last collective is earlier (or with no dump at all: it "
         "ended, or never joined the group).",
    why="That rank is elsewhere: in its data loader, on a lock, in its own code, or gone; "
        "the collective cannot complete without it.",
    fix="Look at where the named rank is (its stack, when it was read, names the line), or "
        "at why it ended (its own output).",
    docs_url=FR_DOCS)
FR_ALL_WAITING = declare(
    "HNG009", Category.COLLECTIVE_TIMEOUT, "Every rank waits in the same collective",
    what="The Flight Recorder dumps show every rank at the same collective, with the same "
         "op, sizes and dtypes, and none of them completed it.",
    why="No rank is missing and the calls agree: the collective itself does not complete "
        "(the transport between the ranks, a GPU that stopped, a network between nodes).",
    fix="Rerun with NCCL_DEBUG=INFO (`ddp-doctor run --nccl-debug`); check `dmesg` for Xid "
        "errors; try NCCL_P2P_DISABLE=1 on one node or NCCL_SOCKET_IFNAME between nodes.",
    docs_url=FR_DOCS)
FR_UNAVAILABLE = declare(
    "HNG010", Category.UNKNOWN, "The Flight Recorder dumps are missing or unreadable",
    what="Some ranks wrote no Flight Recorder dump, or one could not be read.",
    why="Without a rank's dump its last collective is unknown; the rest of the verdict "
        "stands on the dumps and stacks that were read.",
    fix="The job must run with TORCH_FR_BUFFER_SIZE set before init_process_group "
        "(`ddp-doctor run --flight-recorder` sets it); NCCL jobs also dump on the watchdog's "
        "timeout with TORCH_NCCL_DUMP_ON_TIMEOUT=1 into TORCH_FR_DUMP_TEMP_FILE.",
    severity=Severity.INFO, docs_url=FR_DOCS)
