"""Where one rank waits: read from its main thread's frames, innermost first.

Four kinds of wait tell hangs apart:

- ``collective``: inside a ``torch.distributed`` collective (``all_reduce``, ``barrier``,
  ``broadcast``, ...; in ``backward`` too, where DDP all-reduces the gradients);
- ``rendezvous``: inside ``init_process_group`` (or the store it waits on);
- ``data``: inside a DataLoader or a Dataset's ``__getitem__`` (the input pipeline);
- ``lock``: on a ``threading`` lock, condition, event or join;
- ``code``: anywhere else in the job's own code (a sleep, a busy loop, a blocking call);
- ``exiting``: its main function has returned and Python waits, in ``threading._shutdown``,
  for a thread that is not a daemon: the rank has left the job, but its process (and its
  connections to the other ranks) live on, so they wait for it instead of failing.

``user`` is the innermost frame of the job's own code (not torch, not the standard
library, not site-packages): the line a person would open. ``path`` is the job's own frames
from the outermost in, to find where two ranks' paths parted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ddp_doctor.forensics.stacks import Frame, RankStack, Thread

COLLECTIVES = frozenset((
    "all_reduce", "all_reduce_coalesced", "barrier", "monitored_barrier", "broadcast",
    "broadcast_object_list", "all_gather", "all_gather_into_tensor", "all_gather_object",
    "_all_gather_base", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base",
    "all_to_all", "all_to_all_single", "reduce", "gather", "gather_object", "scatter",
    "scatter_object_list", "send", "recv", "isend", "irecv", "batch_isend_irecv",
    "wait", "synchronize"))
RENDEZVOUS = frozenset(("init_process_group", "_store_based_barrier", "rendezvous",
                        "_env_rendezvous_handler", "_create_c10d_store", "_tcp_rendezvous_handler",
                        "init_device_mesh", "new_group"))
_DISTRIBUTED = re.compile(r"torch/distributed/|distributed_c10d\.py|c10d_logger\.py")
_DATA = re.compile(r"torch/utils/data/")
# Library code, not the job's own: py-spy prints a package's files relative to site-packages
# ("deepspeed/runtime/engine.py"), so the training libraries are named by their packages.
_LIBRARY = re.compile(
    r"(^|/)(torch|torchvision|torchaudio|numpy|threading|queue|selectors|socket|"
    r"multiprocessing|concurrent|asyncio|contextlib|runpy|importlib|deepspeed|accelerate|"
    r"transformers|lightning|pytorch_lightning|lightning_fabric|ultralytics|timm|apex|"
    r"megatron|fairscale|tqdm|datasets|pandas|PIL|cv2|mmcv|mmengine|detectron2|hydra|"
    r"omegaconf|wandb|tensorboard|triton|peft|trl|sentencepiece|tokenizers)(/|\.py)|"
    r"site-packages/|dist-packages/|<frozen |^<")
_LOCKS = frozenset(("acquire", "wait", "join", "_wait_for_tstate_lock", "get", "__enter__"))


@dataclass(frozen=True)
class Wait:
    """Where a rank waits: the kind, the call (``all_reduce``), and the job's own line."""

    kind: str  # collective | rendezvous | data | lock | code | exiting | unknown
    call: str  # the collective's name, "DataLoader", "Lock.acquire", or the user function
    user: Frame | None  # the innermost frame of the job's own code
    path: tuple[Frame, ...] = field(default=())  # the job's own frames, outermost first

    def describe(self) -> str:
        where = f" from {self.user.where()}" if self.user else ""
        if self.kind == "collective":
            return f"waits in {self.call}{where}"
        if self.kind == "rendezvous":
            return f"waits in init_process_group{where}"
        if self.kind == "data":
            return f"waits in its data loader{where}"
        if self.kind == "lock":
            return f"waits on a lock ({self.call}){where}"
        if self.kind == "exiting":
            return (f"has left its main function; Python waits at exit for its thread "
                    f"{self.call}" + (f" in {self.user.where()}" if self.user else ""))
        if self.kind == "code":
            at = self.user.where() if self.user else self.call
            return (f"sleeps in its own code at {at}" if self.call == "time.sleep" else
                    f"is in its own code at {at}")
        return "could not be read"


def is_user_frame(frame: Frame) -> bool:
    return not frame.native and not _LIBRARY.search(frame.file.replace("\\", "/"))


def _bare(function: str) -> str:
    """``_exception_logger.<locals>.wrapper`` -> ``wrapper``; ``Lock.acquire`` -> ``acquire``."""
    return function.split(".")[-1]


def wait_of(stack: RankStack) -> Wait:
    """Where this rank's main thread waits."""
    thread = stack.main
    if thread is None:
        return Wait("unknown", "", None)
    frames = thread.python_frames
    if frames and not any(is_user_frame(f) for f in frames) and any(
            f.function == "_shutdown" and f.file.replace("\\", "/").endswith("threading.py")
            for f in frames):
        return _exiting(stack, thread)
    user_frames = [f for f in frames if is_user_frame(f)]
    user = user_frames[0] if user_frames else None
    path = tuple(reversed(user_frames))
    # C code the Python frames hide, seen in native frames (py-spy --native) above the
    # innermost Python frame: a lock's acquire, a sleep, a c10d collective's wait.
    sleeping = False
    for frame in thread.frames:
        if not frame.native:
            break
        if "acquire_lock" in frame.function:
            return Wait("lock", "Lock.acquire", user, path)
        sleeping = sleeping or frame.function == "time_sleep"
    # once per stack, not per frame: a long pasted log can hold thousands of frames
    under_data_loader = any(_DATA.search(f.file.replace("\\", "/")) for f in frames)
    for frame in frames:
        name = _bare(frame.function)
        file = frame.file.replace("\\", "/")
        if "torch/nn/parallel/distributed.py" in file and (
                "broadcast" in name or "sync_buffers" in name or "sync_params" in name):
            return Wait("collective", "broadcast (DDP's buffer sync before forward)", user,
                        path)
        if name in RENDEZVOUS and _DISTRIBUTED.search(file):
            return Wait("rendezvous", "init_process_group", user, path)
        if name in COLLECTIVES and _DISTRIBUTED.search(file):
            return Wait("collective", name, user, path)
        if name in ("backward", "_engine_run_backward", "run_backward") and "torch/" in file:
            return Wait("collective", "backward (the gradient sync inside backward)", user,
                        path)
        if _DATA.search(file) or name == "__getitem__":
            return Wait("data", "DataLoader", user, path)
        if name in _LOCKS and re.search(r"(^|/)(threading|queue)\.py$", file):
            # The DataLoader's main side waits on its workers' result queue (a Condition's
            # wait under _try_get_data): a worker that never delivers, not a lock of the
            # job's own (bigscience tr11's evaluation hang: a worker deadlocked).
            if under_data_loader:
                return Wait("data", "DataLoader (waiting for its workers)", user, path)
            return Wait("lock", frame.function, user, path)
    # A lock acquired without a Python frame of its own (Lock.acquire is C): the user
    # line is the acquire, so the source line cannot tell; call it the job's own code.
    return Wait("code", "time.sleep" if sleeping else (
        user.function if user else (frames[0].function if frames else "")), user, path)


OWN_THREADS = "ddp-doctor-"  # the Flight Recorder hook's thread (a daemon) in a rank


def _exiting(stack: RankStack, main: Thread) -> Wait:
    """The main thread in ``threading._shutdown``: the first other thread running the
    job's own code is the one Python waits for (daemon threads are not waited for, and
    py-spy does not say which are; the job's own thread is the likely one)."""
    for thread in stack.threads:
        if thread is main or thread.name.startswith(OWN_THREADS):
            continue
        own = [f for f in thread.python_frames if is_user_frame(f)]
        if own:
            return Wait("exiting", repr(thread.name) if thread.name else "(unnamed)", own[0])
    return Wait("exiting", "(a thread that is not a daemon)", None)


def parted_at(a: Wait, b: Wait) -> tuple[Frame | None, Frame | None]:
    """The first frame, from the outermost, where two ranks' own paths differ."""
    for left, right in zip(a.path, b.path):
        if (left.function, left.file, left.line) != (right.function, right.file, right.line):
            return left, right
    return None, None
