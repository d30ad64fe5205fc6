"""Torch's Flight Recorder inside a rank: its buffer switched on, its dump written on request.

Torch records each rank's collectives (sequence id, op, sizes, dtypes, whether it
completed) in a ring buffer when ``TORCH_FR_BUFFER_SIZE`` is set before the first process
group is made, for NCCL and (torch 2.13, tried here) for gloo too. NCCL jobs dump it themselves
when the watchdog fires (``TORCH_NCCL_DUMP_ON_TIMEOUT``); gloo has no watchdog, and torch
2.13 offers no way to ask a rank for its dump from outside unless the job itself started
torch's worker server (``torch.distributed.elastic.control_plane.worker_main``). So this
module runs in the rank: a daemon thread polls for a request file the supervisor writes
when the job hangs and answers it with ``torch._C._distributed_c10d._dump_fr_trace_json``,
written as ``fr-rank<R>.json`` in the same folder. The rank's main thread may be blocked in
a collective: gloo's wait releases the GIL, so the thread runs.

Sources: https://pytorch.org/tutorials/prototype/flight_recorder_tutorial.html (the
variables and the dump's fields), torch/distributed/elastic/control_plane.py (the worker
server needs the job's own code), torch/distributed/flight_recorder/components/loader.py
(the analyser's reader).

Used twice: the smoke worker calls ``start`` itself; ``ddp-doctor run --flight-recorder``
loads this file in the user's ranks through a ``sitecustomize`` on PYTHONPATH
(``ddp_doctor/forensics/fr_hook``). Standard library only: torch is imported by the job.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

DIR_VARIABLE = "DDP_DOCTOR_FR_DIR"
"""The folder where the supervisor asks for dumps (``REQUEST``) and the ranks write them."""
REQUEST = "fr-dump-request"
BUFFER_ENTRIES = "2000"
POLL_S = 0.2


def enable_buffer(folder: str) -> None:
    """Switch the recorder on for this process (before ``init_process_group``), unless the
    job chose a size itself, and let NCCL's watchdog dump it into ``folder`` on a timeout
    (``nccl_trace_rank_<R>``; TORCH_NCCL_DEBUG_INFO_TEMP_FILE is the older name)."""
    if not os.environ.get("TORCH_FR_BUFFER_SIZE") and not os.environ.get(
            "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        os.environ["TORCH_FR_BUFFER_SIZE"] = BUFFER_ENTRIES
    prefix = os.path.join(folder, "nccl_trace_rank_")
    os.environ.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
    os.environ.setdefault("TORCH_FR_DUMP_TEMP_FILE", prefix)
    os.environ.setdefault("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", prefix)


def _rank() -> str:
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return str(dist.get_rank())
    except Exception:  # a half-torn-down process group: fall back
        pass
    return os.environ.get("RANK", f"pid{os.getpid()}")


def _is_rank() -> bool:
    """A rank: it joined a process group, or its launcher gave it a RANK (the launcher
    itself and other helper processes load the hook too, and are not asked)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return True
    except Exception:  # a half-torn-down process group
        pass
    return "RANK" in os.environ


def _write(path: str, data: bytes) -> bool:
    temp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(temp, "wb") as out:
            out.write(data)
        os.replace(temp, path)
    except OSError:
        return False
    return True


def dump_now(folder: str) -> str | None:
    """Write this rank's Flight Recorder dump (or why there is none) to ``folder``: the
    pickle (``fr-trace-rank<R>``, the name torch's analyser reads with ``--prefix
    fr-trace-rank``), then the JSON (``fr-rank<R>.json``), which tells the supervisor this
    rank has answered.

    Without the collectives' stack traces: in torch 2.13, ``_dump_fr_trace(True, True,
    False)`` never returns while the rank's main thread is blocked in a gloo collective
    (tried on the planted barrier hang), which is exactly when the dump is wanted."""
    rank = _rank()
    path = os.path.join(folder, f"fr-rank{rank}.json")
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            from torch._C._distributed_c10d import _dump_fr_trace

            _write(os.path.join(folder, f"fr-trace-rank{rank}"), _dump_fr_trace(True, False, False))
    except Exception:  # the JSON below still answers
        pass
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            data = json.dumps({"ddp_doctor_no_dump": "this rank had not joined a process "
                               "group (init_process_group had not returned)",
                               "rank": rank}).encode()
        else:
            from torch._C._distributed_c10d import _dump_fr_trace_json

            data = _dump_fr_trace_json(True, False)
            if isinstance(data, str):
                data = data.encode()
    except Exception as exc:  # say why, never break the job
        data = json.dumps({"ddp_doctor_no_dump": f"the dump failed: {exc}"[:300],
                           "rank": rank}).encode()
    return path if _write(path, data) else None


def _answer(folder: str) -> None:
    request = os.path.join(folder, REQUEST)
    seen: float | None = None
    while True:
        try:
            stamp = os.stat(request).st_mtime
        except OSError:
            stamp = None
        if stamp is not None and stamp != seen:
            seen = stamp
            if _is_rank():
                dump_now(folder)
        time.sleep(POLL_S)


def start(folder: str | None = None) -> bool:
    """Switch the buffer on and answer dump requests in ``folder`` (default: the variable);
    False when there is no folder to answer in."""
    folder = folder or os.environ.get(DIR_VARIABLE)
    if not folder or not os.path.isdir(folder):
        return False
    enable_buffer(folder)
    threading.Thread(target=_answer, args=(folder,), daemon=True,
                     name="ddp-doctor-flight-recorder").start()
    return True
