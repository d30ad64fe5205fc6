"""Where a job that says nothing stopped: the last things each rank did.

A job that hangs prints no error. What its log shows is where each rank stopped: NCCL set
up its communicator (channel lines, "Connected all rings", "Init COMPLETE") and then nothing
came, or a rank launched a collective (NCCL_DEBUG_SUBSYS=COLL's "AllReduce: opCount ...")
and never printed again, or the user pressed Ctrl-C and every rank's traceback ends inside
``barrier``/``all_reduce``/``broadcast``. The ranks' output is interleaved, so the end of the
log is read from the last line upward, passing over what every process prints without
moving on (warnings, an idle progress bar, other ranks' NCCL chatter); the first line that
says something decides. Two programs say where they wait in their own words: nccl-tests
print their results header before the first all-reduce, and DeiT-style training scripts
announce "| distributed init (rank N)" just before the first barrier. A job whose ranks
stop while still meeting (torch's store-based barrier waiting, DeepSpeed entering
init_process_group) hangs in the rendezvous instead. Then each rank's own
last words are checked: a rank whose last line shows training progress, a finished run or a
failure was not waiting in a collective.

Sources: NCCL's INFO output (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/
env.html#nccl-debug), torch.distributed's collectives (torch/distributed/distributed_c10d.py),
DDP's constructor (torch/nn/parallel/distributed.py ``_verify_param_shape_across_processes``,
``_sync_module_states``), and the hangs of Lightning-AI/pytorch-lightning#19425 and
NVIDIA/nccl#2079.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ddp_doctor.diagnose.compose import line_label
from ddp_doctor.diagnose.rank_prefixes import split_rank
from ddp_doctor.diagnose.scan import DocumentContext
from ddp_doctor.logrules import is_fatal_line, is_warning_line
from ddp_doctor.redact.secrets import redact_text

WINDOW = 400  # lines read upward from the end of a document

NCCL_INFO = re.compile(r"\bNCCL INFO\b")
# NCCL setting up a communicator: transport per channel, ring and tree order, completion.
NCCL_SETUP = re.compile(
    r"NCCL INFO (?:Channel \d+(?:/\d+)?\s*:.*\bvia\b|Channel \d+/\d+ :(?:\s+\d+)+\s*$"
    r"|Connected all (?:rings|trees)|Connected NVLS|.*\bInit COMPLETE\b|Init timings"
    r"|threadThresholds|\d+ coll channels|P2P Chunksize|Trees \[|CC Off|Setting affinity)",
    re.IGNORECASE)
# A rank inside a collective: NCCL's COLL debug line for a launched operation, a frame of
# torch.distributed's collectives (a traceback after Ctrl-C, a py-spy dump), DDP's
# constructor broadcasting the model.
IN_COLLECTIVE = re.compile(
    r"NCCL INFO (?:AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|Send|Recv)\s*: opCount"
    r"|distributed_c10d\.py\"?,? (?:line \d+, )?in (?:all_reduce\w*|all_gather\w*|broadcast\w*"
    r"|barrier|monitored_barrier|reduce_scatter\w*|all_to_all\w*|send|recv)\b"
    r"|\b(?:all_reduce|all_gather\w*|broadcast\w*|barrier|reduce_scatter\w*)\s+\(\S*"
    r"distributed_c10d\.py:\d+\)"
    r"|\bin (?:_verify_param_shape_across_processes|_sync_module_states|_sync_params_and_"
    r"buffers)\b"
    # nccl-tests/rccl-tests print their results table's header, then one row per message
    # size as each all-reduce completes: a log that ends at the header never finished the
    # first (smallest) collective (ROCm/rccl#1129: fixed by iommu=pt)
    r"|^\s*#\s+size\s+count\s+type\s+redop\b|^\s*#\s+\(B\)\s+\(elements\)"
    # the init_distributed_mode() of DeiT and the many repositories built on its utils
    # (MAE, DINO, ConvNeXt, BEiT, ...) prints this, then calls init_process_group and at
    # once torch.distributed.barrier(), the first NCCL collective; nothing is printed
    # before the barrier returns (Sara-Ahmed/SiT#7: fixed with NCCL_P2P_LEVEL=NVL)
    r"|^\|\s*distributed init \(rank \d+\)")
# Ranks inside init_process_group, still meeting: torch's store-based barrier waiting for
# the others (distributed_c10d.py _store_based_barrier), and DeepSpeed's init_distributed
# (deepspeed/comm/comm.py), whose "cdb=None" and "Initializing TorchBackend in DeepSpeed"
# come just before it calls init_process_group and nothing else.
AT_RENDEZVOUS = re.compile(
    r"Waiting in store based barrier to initialize process group"
    r"|\binit_distributed\]\s+(?:cdb=None\s*$|Initializing TorchBackend in DeepSpeed\b)")
# Ctrl-C (or torchrun passing SIGINT/SIGTERM on): the tracebacks that follow are where the
# ranks were, not failures.
INTERRUPT = re.compile(r"^\s*KeyboardInterrupt\s*$|got signal: (?:2|15)\b|Signals\.SIG(?:INT|TERM)"
                       r"|^\s*\^C\s*$")
_INTERRUPT_SCAFFOLD = re.compile(
    r"^\s*(?:Traceback \(most recent call last\):|File \"|\^+\s*$|During handling of|"
    r"The above exception|KeyboardInterrupt|[\w.]*(?:SignalException|ChildFailedError)\b"
    r"|={10,}|-{10,}|\[\d+\]:|Failures:|Root Cause|\w+\s*: )")
# Training went on, or the run ended: not waiting in the first collective.
PROGRESS = re.compile(
    r"\b[1-9]\d*%\||\b[1-9]\d*/\d+\b[^\n]*(?:it/s|s/it|loss|eta)|\bloss\b\s*[=:]?\s*\d"
    r"|\b(?:step|iter(?:ation)?|epoch)\s*[=:]?\s*[1-9]\d*\s*/|Destroy COMPLETE"
    r"|\b(?:finished|completed|saving|saved)\b", re.IGNORECASE)
FAILURE_WORD = re.compile(r"error|fail|exception|traceback|killed|abort|timed out|timeout",
                          re.IGNORECASE)
_NCCL_TEARDOWN = re.compile(r"destroy|abort|finaliz|connection closed|\.cc:\d+ -> \d",
                            re.IGNORECASE)
_IDLE_BAR = re.compile(r"(?:^|\s)0%\||\s0/\d+\s")
_GLOG_INFO = re.compile(r"^\s*\[?I\d{4} \d\d:\d\d")
_INDENTED = re.compile(r"^\s{2,}\S")


@dataclass(frozen=True)
class Stop:
    """A line that shows where a rank stopped."""

    where: str
    text: str
    in_collective: bool
    at_rendezvous: bool = False


def _kind(text: str, interrupted: bool) -> str:
    """'setup', 'collective', 'rendezvous', 'quiet' (says nothing about progress) or
    'other'."""
    if IN_COLLECTIVE.search(text):
        return "collective"
    if AT_RENDEZVOUS.search(text):
        return "rendezvous"
    if NCCL_INFO.search(text):
        if _NCCL_TEARDOWN.search(text):
            return "other"
        return "setup" if NCCL_SETUP.search(text) else "quiet"
    stripped = text.strip()
    if not stripped or _IDLE_BAR.search(text) or _GLOG_INFO.match(text):
        return "quiet"
    if is_warning_line(text):
        return "quiet"
    if interrupted and (INTERRUPT.search(text) or _INTERRUPT_SCAFFOLD.match(text)):
        return "quiet"
    if _INDENTED.match(text) and not is_fatal_line(text) and not PROGRESS.search(text) \
            and not FAILURE_WORD.search(text):
        return "quiet"  # the source line under a warning, a wrapped continuation
    return "other"


def where_ranks_stopped(context: DocumentContext, many: bool) -> list[Stop]:
    """The lines that show the ranks waiting after NCCL's setup or inside a collective, the
    deciding one first; empty when the end of the document says anything else."""
    lines = context.tail.split("\n")
    first = max(0, len(lines) - WINDOW)
    numbered = [(context.tail_first_line + i, lines[i]) for i in range(first, len(lines))]
    interrupted = any(INTERRUPT.search(split_rank(line)[1]) for _, line in numbered[-80:])
    read = [(number, *split_rank(line)) for number, line in numbered]
    kinds = [_kind(text, interrupted) for _, _, text in read]
    last_number = max((n for n, line in numbered if line.strip()), default=0)
    found: list[Stop] = []
    for (number, who, text), kind in zip(reversed(read), reversed(kinds)):
        if kind == "quiet":
            continue
        if kind == "other":
            if not found:
                return []  # the last thing said is not a wait: no hang here
            break
        if len(found) < 3 and all(stop.text != text.strip() for stop in found):
            label = line_label(context.document, number, many)
            if number == last_number:
                label = f"last line, {label}"
            elif who is not None:
                label = f"last of {who}, {label}"
            found.append(Stop(label, redact_text(text.strip())[:300], kind == "collective",
                              kind == "rendezvous"))
    if not found:
        return []
    # Each rank's own last words since the setup began: one that trained on, finished or
    # failed was not waiting.
    start = next(i for i, kind in enumerate(kinds)
                 if kind in ("setup", "collective", "rendezvous"))
    last_words: dict[str | None, str] = {}
    for (_, who, text), kind in zip(read[start:], kinds[start:]):
        if kind == "other":
            last_words[who] = text
        elif kind != "quiet":
            last_words.pop(who, None)
    for text in last_words.values():
        if PROGRESS.search(text) or is_fatal_line(text) or FAILURE_WORD.search(text):
            return []
    return found
