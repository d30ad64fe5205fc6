"""Torch's Flight Recorder for a supervised job: its variables, the dumps asked for, read.

Each rank's recorder (``TORCH_FR_BUFFER_SIZE`` entries) lists the collectives it called,
each with its sequence id in its process group, the op (``gloo:all_reduce``), the sizes
and dtypes of its tensors, and whether it completed. Read side by side, the ranks' last
entries say what a stack cannot: which collective (by number) each rank reached, which
rank never called the one the others wait in, and whether they called it with different
ops or sizes.

Where the dumps come from:

- gloo (and NCCL): the rank writes ``fr-rank<R>.json`` (and the pickle
  ``fr-trace-rank<R>`` for torch's analyser, ``flight_analyser``) when asked through a
  request file (``ddp_doctor.train_smoke.flight``; the smoke worker runs it, ``run
  --flight-recorder`` loads it through ``fr_hook/sitecustomize.py``);
- NCCL: its watchdog also writes a pickle per rank on a timeout
  (``TORCH_NCCL_DUMP_ON_TIMEOUT``, to ``TORCH_FR_DUMP_TEMP_FILE`` + rank; older torch reads
  ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE``), which is what users attach to tickets.

Reading: the JSON dump with ``json``; the pickled one with an unpickler that refuses every
class, so a dump from a ticket is read as the plain dicts, lists, strings and numbers torch
writes and can run no code. Neither needs torch: ``diagnose`` reads attached dumps where
torch is absent. Torch's own analyser (``torch.distributed.flight_recorder``) reads only the
pickles, with ``pickle.load`` (unsafe on a stranger's file), needs torch, and fails on
gloo's dumps in torch 2.13; its checks that matter here (missing ranks, mismatched sizes
and types) are done on the same fields by ``flight_verdict``.

Sources: https://pytorch.org/tutorials/prototype/flight_recorder_tutorial.html (the
variables, the dump's fields and states); torch 2.13's
torch/distributed/flight_recorder/components/loader.py (the pickle format is plain data)
and libtorch_cpu's variable names (TORCH_FR_BUFFER_SIZE, TORCH_FR_DUMP_TEMP_FILE).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import pickle
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ddp_doctor.forensics.stacks import Frame
from ddp_doctor.forensics.waits import is_user_frame

REQUEST = "fr-dump-request"  # ddp_doctor.train_smoke.flight.REQUEST
DIR_VARIABLE = "DDP_DOCTOR_FR_DIR"
HOOK_VARIABLE = "DDP_DOCTOR_FR_HOOK"
NCCL_PREFIX = "nccl_trace_rank_"
BUFFER_ENTRIES = "2000"
DUMP_WAIT_S = 3.0  # ranks poll for the request every 0.2 s; a loaded machine is slower
# fr-rank3.json (ours), nccl_trace_rank_3 (NCCL's), rank3.pkl or trace_3.json (a ticket's)
_DUMP_NAME = re.compile(r"(\d+)(?:\.json|\.pkl|\.pickle)?$")


def hook_dir() -> Path:
    """The folder whose ``sitecustomize.py`` loads the hook into the job's interpreters."""
    return Path(__file__).resolve().parent / "fr_hook"


def hook_file() -> str | None:
    """ddp-doctor's in-rank hook (train_smoke/flight.py), by its path on disk."""
    spec = importlib.util.find_spec("ddp_doctor.train_smoke.flight")
    return spec.origin if spec is not None and spec.origin else None


def flight_environment(folder: str, base: Mapping[str, str]) -> dict[str, str]:
    """The variables ``run --flight-recorder`` adds to the job's environment: the recorder
    on, NCCL's dump on a timeout into ``folder``, and the hook that dumps gloo's on request.
    A size the job chose itself is kept."""
    env: dict[str, str] = {}
    if not base.get("TORCH_FR_BUFFER_SIZE") and not base.get("TORCH_NCCL_TRACE_BUFFER_SIZE"):
        env["TORCH_FR_BUFFER_SIZE"] = BUFFER_ENTRIES
    prefix = str(Path(folder) / NCCL_PREFIX)
    env.update(TORCH_NCCL_DUMP_ON_TIMEOUT="1", TORCH_FR_DUMP_TEMP_FILE=prefix,
               TORCH_NCCL_DEBUG_INFO_TEMP_FILE=prefix)
    hook = hook_file()
    if hook is not None:
        env[DIR_VARIABLE] = folder
        env[HOOK_VARIABLE] = hook
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(hook_dir()), base.get("PYTHONPATH")) if p)
    return env


@dataclass(frozen=True)
class Op:
    """One collective a rank called, as its recorder kept it."""

    seq: int  # collective_seq_id (p2p ops: p2p_seq_id), counted per process group
    group: str  # the process group's name ("default_pg") or id
    name: str  # "all_reduce", "barrier" (the backend prefix dropped)
    state: str  # scheduled | started | completed
    completed: bool
    sizes: tuple[Any, ...] = ()
    dtypes: tuple[str, ...] = ()
    p2p: bool = False
    where: str = ""  # the job's own line that called it (pickled dumps keep call sites)

    def describe(self) -> str:
        shape = "" if not self.sizes else " " + "×".join(
            str(list(s)) if isinstance(s, (list, tuple)) else str(s) for s in self.sizes)
        dtypes = f" {'/'.join(self.dtypes)}" if self.dtypes else ""
        where = f" from {self.where}" if self.where else ""
        return f"#{self.seq} {self.name}{shape}{dtypes}{where}"


@dataclass
class RankRecord:
    """One rank's Flight Recorder dump, read; ``why`` says why there is none."""

    rank: int | None
    source: str
    ops: list[Op] = field(default_factory=list)
    world: list[int] = field(default_factory=list)  # the default group's ranks
    groups: list[str] = field(default_factory=list)  # pg_config's keys, as the dump names them
    why: str | None = None
    raw: bytes = b""

    @property
    def framed(self) -> bool:
        """Its collectives carry their call sites (a pickled dump with stack traces)."""
        return any(op.where for op in self.ops)

    def in_group(self, group: str) -> list[Op]:
        return sorted((o for o in self.ops if o.group == group and not o.p2p),
                      key=lambda o: o.seq)

    def last(self, group: str, completed: bool | None = None, state: str | None = None
             ) -> Op | None:
        ops = [o for o in self.in_group(group)
               if (completed is None or o.completed == completed)
               and (state is None or o.state == state)]
        return ops[-1] if ops else None


class _PlainData(pickle.Unpickler):
    """Plain data only: a Flight Recorder pickle holds dicts, lists, strings and numbers."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"{module}.{name}: not plain data, refused")


def _loads(data: bytes) -> Any:
    head = data.lstrip()[:1]
    if head in (b"{", b"["):
        return json.loads(data.decode("utf-8"))
    return _PlainData(io.BytesIO(data)).load()


def looks_like_dump(name: str, data: bytes) -> bool:
    """A Flight Recorder dump, by its content (a pickle, or JSON with its keys)."""
    head = data[:4096]
    if head.startswith(b"\x80") and b"entries" in head and (b"version" in data[:1 << 16]):
        return True
    stripped = head.lstrip()
    return stripped.startswith(b"{") and (
        (b'"entries"' in data[:1 << 20] and b'"pg_config"' in data)
        or b'"ddp_doctor_no_dump"' in stripped)


def _rank_from_name(name: str) -> int | None:
    match = _DUMP_NAME.search(name)
    if match is None:
        return None
    return int(match.group(1))


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _op(entry: Mapping[str, Any]) -> Op | None:
    name = _text(entry.get("profiling_name") or "")
    if not name:
        return None
    group = entry.get("process_group")
    group_name = (_text(group[1]) if isinstance(group, (list, tuple)) and len(group) > 1
                  else _text(entry.get("pg_id", "")))
    p2p = bool(entry.get("is_p2p"))
    seq = entry.get("p2p_seq_id" if p2p else "collective_seq_id")
    state = _text(entry.get("state") or "")
    return Op(seq=int(seq) if isinstance(seq, (int, str)) and str(seq).isdigit() else -1,
              group=group_name, name=name.split(":", 1)[-1], state=state,
              completed=state == "completed" or bool(entry.get("retired")),
              sizes=tuple(tuple(s) if isinstance(s, list) else s
                          for s in entry.get("input_sizes") or ()),
              dtypes=tuple(_text(d) for d in entry.get("input_dtypes") or ()), p2p=p2p,
              where=_call_site(entry.get("frames")))


def _call_site(frames: Any) -> str:
    """The innermost of the job's own frames (not torch's, not a library's)."""
    if not isinstance(frames, list):
        return ""
    for raw in frames:
        if not isinstance(raw, Mapping):
            continue
        line = raw.get("line")
        frame = Frame(_text(raw.get("name", "")), _text(raw.get("filename", "")),
                      int(line) if isinstance(line, int) else None)
        if frame.function and is_user_frame(frame):
            return frame.where()
    return ""


def _world(config: Any) -> list[int]:
    if not isinstance(config, Mapping):
        return []
    for group in config.values():
        if not isinstance(group, Mapping):
            continue
        ranks = group.get("ranks")
        try:
            listed = json.loads(_text(ranks)) if isinstance(ranks, (str, bytes)) else ranks
        except ValueError:
            continue
        if isinstance(listed, list) and all(isinstance(r, int) for r in listed):
            return sorted(listed)  # the first group made: the default one
    return []


def read_dump(name: str, data: bytes) -> RankRecord:
    """One rank's dump (JSON or pickle) as a RankRecord; never raises."""
    rank = _rank_from_name(name)
    try:
        value = _loads(data)
    except (ValueError, pickle.UnpicklingError, EOFError, UnicodeDecodeError,
            IndexError, TypeError, AttributeError, ImportError) as exc:
        return RankRecord(rank, name, why=f"cannot be read: {exc}"[:200], raw=data)
    if not isinstance(value, Mapping):
        return RankRecord(rank, name, why="not a Flight Recorder dump", raw=data)
    if "ddp_doctor_no_dump" in value:
        text = str(value.get("rank", ""))
        return RankRecord(int(text) if text.isdigit() else rank, name,
                          why=_text(value["ddp_doctor_no_dump"]), raw=data)
    entries = value.get("entries") or []
    ops = [op for op in (_op(e) for e in entries if isinstance(e, Mapping)) if op is not None]
    config = value.get("pg_config")
    groups = [_text(key) for key in config] if isinstance(config, Mapping) else []
    return RankRecord(rank, name, ops, _world(config), groups=groups, raw=data)


def read_folder(folder: Path) -> list[RankRecord]:
    """Every dump in a folder (ours and NCCL's), one record per rank (ours first)."""
    dumps: list[tuple[str, bytes]] = []
    try:
        paths = sorted(p for p in folder.iterdir() if p.is_file())
    except OSError:
        return []
    for path in paths:
        if path.name == REQUEST or path.name.endswith(".tmp"):
            continue
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if looks_like_dump(path.name, data):
            dumps.append((path.name, data))
    return read_dumps(dumps)


def request_dumps(folder: Path, ranks: int, wait_s: float = DUMP_WAIT_S
                  ) -> list[RankRecord]:
    """Ask every rank to dump (the request file), wait for ``ranks`` answers or
    ``wait_s``, and read what the folder holds."""
    asked = time.time()
    try:
        (folder / REQUEST).write_text(f"{asked}\n", encoding="utf-8")
        os.utime(folder / REQUEST, (asked, asked))
    except OSError:
        return read_folder(folder)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        fresh = 0
        for path in folder.glob("fr-rank*.json"):
            try:
                fresh += path.stat().st_mtime >= asked - 0.01
            except OSError:
                continue
        if ranks and fresh >= ranks:
            break
        time.sleep(0.1)
    return read_folder(folder)


def as_json(record: RankRecord) -> str | None:
    """A dump as JSON text (a pickled NCCL dump converted), for the user and the bundle."""
    try:
        value = _loads(record.raw)
    except (ValueError, pickle.UnpicklingError, EOFError, UnicodeDecodeError, IndexError,
            TypeError, AttributeError, ImportError):
        return None
    return json.dumps(value, indent=1, default=_text) + "\n"


def keep_records(records: list[RankRecord], folder: Path) -> None:
    """Each rank's dump as ``fr-rank<R>.json`` in ``folder``, from the record read (a
    pickle, with its call sites, replaces the rank's JSON without them); the request file
    is removed."""
    for record in records:
        if record.rank is None or not record.raw:
            continue
        path = folder / f"fr-rank{record.rank}.json"
        if record.source == path.name:
            continue
        text = as_json(record)
        if text is not None:
            try:
                path.write_text(text, encoding="utf-8")
            except OSError:
                continue
    with contextlib.suppress(OSError):
        (folder / REQUEST).unlink(missing_ok=True)


def read_dumps(dumps: list[tuple[str, bytes]]) -> list[RankRecord]:
    """Dumps given by name and bytes (``diagnose``'s input), one record per rank."""
    found: dict[int | None, RankRecord] = {}
    for name, data in dumps:
        record = read_dump(name.replace("\\", "/").rsplit("/", 1)[-1], data)
        kept = found.get(record.rank)
        # One record a rank: a readable one, with call sites when a dump has them.
        if kept is None or (kept.why is not None and record.why is None) or (
                record.why is None and record.framed and not kept.framed):
            found[record.rank] = record
    return sorted(found.values(), key=lambda r: (r.rank is None, r.rank or 0))
