"""Which rank printed a line: the prefixes launchers put in front of each rank's output.

When eight ranks fail together a log holds eight copies of one traceback, interleaved.
Knowing the rank of each line lets the diagnosis report one finding that affects ranks
0-7 instead of eight findings. Prefixes recognised (each from the launcher's docs):

- ``[rank3]:`` — PyTorch's own prefix on tracebacks of distributed ranks (torch >= 2.2);
- ``[default3]:`` — ``torchrun --tee 3`` / ``--local-ranks-filter`` prefixes lines with
  the role and local rank (https://pytorch.org/docs/stable/elastic/run.html);
- ``3: `` — ``srun --label`` (https://slurm.schedmd.com/srun.html#OPT_label);
- ``[1,3]<stderr>:`` — Open MPI ``mpirun --tag-output``;
- ``host:pid:tid [3] NCCL WARN`` — NCCL's own debug prefix names the CUDA device;
- ``[Rank 5]`` inside ProcessGroupNCCL's messages (no prefix, but the rank is named);
- around them, the prefixes of the program that collected the output:
  ``(RayTrainWorker pid=2345, ip=10.0.0.2)`` — Ray forwarding a worker's output to the driver
  (https://docs.ray.io/en/latest/ray-observability/user-guides/configure-logging.html),
  ``[pod/train-worker-0/pytorch]`` — ``kubectl logs --prefix``, ``trainer-1  |`` —
  ``docker compose logs``. Without taking them off, an exception line would not start with
  its exception, and the rules and the exception shapes that read a line from its start
  would not see it.
"""

from __future__ import annotations

import re

_PREFIXES = (
    re.compile(r"^\[(?:rank|default|trainer|worker)(\d{1,5})\]:\s?"),
    re.compile(r"^\[rank: ?(\d{1,5})\]\s?"),  # Lightning's rank_zero / rank prefix
    re.compile(r"^\[\d{1,5},(\d{1,5})\]<std(?:out|err)>:\s?"),
    re.compile(r"^\s{0,3}(\d{1,5}): "),
)
# The prefixes as one pattern, tried in the same order (one match per prefix, not four).
_PREFIX = re.compile("|".join(f"(?:{prefix.pattern})" for prefix in _PREFIXES))
_NCCL = re.compile(r"^([\w.\-]+):\d+:\d+ \[(\d{1,3})\] NCCL ")
# ProcessGroupNCCL's own messages: "[E ProcessGroupNCCL.cpp:563] [Rank 5] Watchdog caught ..."
_PG_RANK = re.compile(r"\[Rank (\d{1,5})\]")
# torchrun's failure summary: "rank      : 1 (local_rank: 1)" above "exitcode  : -9"
SUMMARY_RANK = re.compile(r"^\s*rank\s*:\s*(\d{1,5})\b")


# Who collected the output, around a rank prefix or alone: Ray's "(Actor pid=N, ip=A)" (the
# actor name optional, "[repeated 3x across cluster]" at the line's end left as it is),
# kubectl's "[pod/NAME/CONTAINER]", docker compose's "SERVICE-N  |" (older: "SERVICE_N  |").
# One is taken off, once: a line of "a-1 | " cells must not recurse. Compose's form is also a
# table row's first cell ("epoch_10 | loss 0.3 | acc 0.9", "GPU-0 | NVIDIA A100"), so it is
# taken only where no other " | " follows on the line.
_COLLECTOR = re.compile(r"^\((?:[A-Za-z_][\w.]* )?pid=(?P<pid>\d+)(?:, ip=[\w.:]+)?\)\s?"
                        r"|^\[pod/(?P<pod>[^/\]\s]+)/[^\]\s]+\]\s?"
                        r"|^(?P<service>[A-Za-z][\w.-]*[-_]\d+) +\| (?!.* \| )")

# pdsh / DeepSpeed's multi-node launcher and `kubectl logs --prefix`: "worker-3: ..."
_HOST_LABEL = re.compile(r"^((?:[A-Za-z]\w*[-.][\w.-]*|(?:node|worker|host|gpu)\w*)\d):\s")
# torch.distributed.elastic's failure line: "failed (exitcode: -9) local_rank: 0 (pid: 12)"
_LOCAL_RANK = re.compile(r"\blocal_rank: ?(\d{1,5})\b")


def split_rank(line: str) -> tuple[str | None, str]:
    """(who printed it, the line without the launchers' prefixes).

    Prefixes nest: ``torchrun --tee`` on torch >= 2.2 prints ``[default3]:[rank3]: ...``,
    so they are removed until none is left.
    """
    collector = _COLLECTOR.match(line)
    if collector:
        pid, pod, service = collector.group("pid", "pod", "service")
        inner, rest = _split_launcher(line[collector.end():])
        return inner or (f"pid {pid}" if pid else pod or service), rest
    return _split_launcher(line)


def _split_launcher(line: str) -> tuple[str | None, str]:
    """``split_rank`` inside a collector's prefix: the launchers' and NCCL's own."""
    who: str | None = None
    found = _PREFIX.match(line)
    while found:
        if who is None:
            who = f"rank {int(found.group(found.lastindex or 1))}"  # each prefix has one group
        line = line[found.end():]
        found = _PREFIX.match(line)
    if who is not None:
        return who, line
    host = _HOST_LABEL.match(line)
    if host and not line[host.end():].lstrip().startswith(("//", "/")):
        return host.group(1), line[host.end():]
    nccl = _NCCL.match(line)
    if nccl:
        return f"{nccl.group(1)} GPU {nccl.group(2)}", line
    named = _PG_RANK.search(line) or _LOCAL_RANK.search(line)
    if named:
        return f"rank {int(named.group(1))}", line
    return None, line


def group_label(ranks: list[str]) -> list[str]:
    """Ranks as a short list: ["ranks 0-3, 6"] rather than eight entries."""
    numbered = sorted({int(r.split()[1]) for r in ranks if r.startswith("rank ")})
    others = sorted({r for r in ranks if not r.startswith("rank ")})
    if not numbered:
        return others
    spans: list[str] = []
    start = prev = numbered[0]
    for value in [*numbered[1:], None]:
        if value is not None and value == prev + 1:
            prev = value
            continue
        if start == prev:
            spans.append(str(start))
        elif prev == start + 1:
            spans += [str(start), str(prev)]
        else:
            spans.append(f"{start}-{prev}")
        if value is not None:
            start = prev = value
    word = "rank" if len(numbered) == 1 else "ranks"
    return [f"{word} {', '.join(spans)}", *others]
