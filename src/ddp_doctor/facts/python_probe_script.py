"""Standalone probe run *inside* the Python interpreter being diagnosed.

It is executed as ``[python, -c, <this file's text>]`` so it sees exactly what the
user's training script would see: the same ``sys.path``, environment and working
directory. It imports nothing but the standard library (and torch, when asked), and
must run on old interpreters too (Python 3.6+), so no newer syntax.

Output: lines ``@@ddp-doctor@@ {json}`` on stdout, each either ``{"stage": name}``
(announced *before* a step that may hang or crash, so the parent can say where it
stopped) or ``{"key": k, "value": v}`` (a result, sent as soon as it is known, so
partial results survive a hang or a segfault).

GPU work (a functional matmul test and a cuDNN convolution per GPU, the peer-to-peer
matrix, NVML read while each GPU is busy, a copy between every pair of GPUs) runs in a
daemon thread joined with a deadline, so one hung device is named (``timed_out``) and the
probe goes on to the next; a thread still stuck at the end is left behind with
``os._exit``. The functions take ``torch`` as an argument so tests can drive them
in-process with a stand-in.

Why NVML is read here too: an idle GPU drops its PCIe link to a lower generation to save
power, so the link generation and the clock-event ("throttle") reasons mean something only
while the GPU works. The probe queues matrix products and reads NVML (pynvml, when the
diagnosed interpreter has it) before they finish. Without pynvml the reading says so, and
only the link width, which idling does not change, is judged from the NVML probe.

The P2P data test copies a patterned buffer from every GPU to every other one, checks every
word arrived, and times the copies: ``can_device_access_peer`` only says a path is allowed,
not that data crosses it intact and at speed (an IOMMU that redirects P2P through the CPU
lets the query say True and the copy crawl or hang).

Three slow parts run beside the torch and CUDA start instead of after it (``Beside``): the
package listing beside ``import torch``, and torchvision's import and NVML's start
(``nvmlInit``, for the readings under load) beside CUDA's initialisation and the GPU tests.
Threads, not a second child: torchvision needs this interpreter's torch (a second child
would import torch again, the very cost being hidden), the listing and NVML must see this
interpreter's sys.path and driver, and what the parts wait on (reading files, loading
shared libraries, CUDA and NVML calls) lets the other thread run. Only the main thread
announces stages: it joins each part under the part's own stage ("packages", "import
torchvision") before "done", so a part that hangs is still named as where the probe
stopped. The listing's result is sent as soon as it is known, so a crash in import torch
(the listing takes a fraction of its time) still leaves it to the parent.
"""

import json
import os
import sys
import threading
import time
import traceback
import warnings

MARK = "@@ddp-doctor@@ "
GPU_DEADLINE_S = 15.0  # functional test + cuDNN test of one GPU (context creation included)
P2P_DEADLINE_S = 10.0  # every can_device_access_peer query together
MATMUL_N = 1024  # 1024x1024 float32: 4 MiB per operand
LOAD_DEADLINE_S = 3.0  # queueing the load and reading NVML, per GPU
LOAD_MATMUL_N = 4096  # 64 MiB per operand; 20 products keep a GPU busy 50 ms (H100) to 0.4 s
LOAD_ROUNDS = 20
LOAD_READS = 5  # NVML readings while the work is pending, LOAD_POLL_S apart
LOAD_POLL_S = 0.02
P2P_COPY_BYTES = 64 * 1024 * 1024
P2P_COPY_REPEATS = 5  # timed copies per pair, after one untimed warm-up copy
P2P_COPY_BUDGET_S = 20.0  # every pair together, a hung pair's wait included
_EMIT_LOCK = threading.Lock()
PACKAGE_PREFIXES = ("nvidia-", "nvidia_")
PACKAGES = (
    "torch", "torchvision", "torchaudio", "numpy", "ultralytics", "yolov5", "yolox",
    "lightning", "pytorch-lightning", "accelerate", "deepspeed", "triton", "nvidia-ml-py",
    "pynvml", "opencv-python", "opencv-python-headless", "pillow", "setuptools",
)


def emit(obj):
    with _EMIT_LOCK:  # GPU threads and the parts run beside send too: one line at a time
        text = MARK + json.dumps(obj, default=str) + "\n"
        sys.stdout.write(text)
        sys.stdout.flush()


def stage(name):
    emit({"stage": name})


def put(key, value):
    emit({"key": key, "value": value})


EXCEPTIONS = []
# Where the probe's time went, in seconds, each part sent as soon as it ends (so a probe
# stopped by its deadline still says how long the parts before took): the parent adds the
# interpreter's start-up as the rest of its own measured duration.
TIMINGS = {}
PART_KEYS = ("packages_s", "import_torch_s", "torch_facts_s", "torchvision_s", "cuda_init_s",
             "gpu_tests_s", "p2p_query_s", "under_load_s", "p2p_copy_s", "total_s")


def timed(part, fn, *args):
    """Call ``fn(*args)`` and record its wall time as ``part`` of TIMINGS (also when it
    raises: the time up to the failure is the part's time)."""
    start = time.monotonic()
    try:
        return fn(*args)
    finally:
        TIMINGS[part] = round(time.monotonic() - start, 4)
        put("timings", TIMINGS)


def record_exception(where, exc):
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    EXCEPTIONS.append({
        "stage": where,
        "type": type(exc).__name__,
        "message": str(exc)[:4000],
        "traceback": "".join(tb)[-4000:],
    })
    put("exceptions", EXCEPTIONS)


def attempt(where, fn, default=None):
    try:
        return fn()
    except BaseException as exc:  # SystemExit from a broken import counts too
        record_exception(where, exc)
        return default


def norm(name):
    return name.lower().replace("_", "-")


def python_facts():
    info = {
        "executable": sys.executable,
        "version": "%d.%d.%d" % sys.version_info[:3],
        "implementation": sys.implementation.name,
        "prefix": sys.prefix,
        "base_prefix": getattr(sys, "base_prefix", sys.prefix),
        "platform": sys.platform,
        "cwd": os.getcwd(),
    }
    info["in_venv"] = info["prefix"] != info["base_prefix"]
    return info


def of_interest(key):
    return key in PACKAGES or key.startswith(PACKAGE_PREFIXES)


def name_in_directory(dist):
    """The project name a distribution's directory is named after (``torch-2.5.1.dist-info``,
    ``opencv_python-4.10.0.egg-info``, ``ultralytics.egg-info``), or None when it has none.

    Reading it costs nothing, where ``dist.metadata`` parses the whole METADATA file (the
    long description included): the listing parses only the distributions whose directory
    names one of interest, and those whose directory says nothing, which made it several
    times faster in a venv of 80 distributions. Both formats write the name with "-"
    replaced by "_", so the part before the first "-" is the whole name.
    """
    path = getattr(dist, "_path", None)
    base = os.path.basename(str(path).rstrip("/\\")) if path is not None else ""
    for suffix in (".dist-info", ".egg-info"):
        if base.endswith(suffix):
            return base[:-len(suffix)].split("-", 1)[0] or None
    return None


def package_facts():
    """Installed distributions of interest, with every location (duplicates matter)."""
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8
        return {"error": "importlib.metadata unavailable (Python < 3.8)"}
    found = {}
    for dist in metadata.distributions():
        hint = name_in_directory(dist)
        if hint is not None and not of_interest(norm(hint)):
            continue
        name = dist.metadata.get("Name") or ""
        key = norm(name)
        if of_interest(key):
            location = str(getattr(dist, "_path", "") or "")
            found.setdefault(key, []).append({
                "version": dist.version,
                "location": os.path.dirname(location) if location else None,
            })
    return found


def torch_locations():
    """Every sys.path entry that holds a torch package: more than one is trouble."""
    seen = []
    for entry in sys.path:
        base = entry or os.getcwd()
        candidate = os.path.join(base, "torch", "__init__.py")
        if os.path.isfile(candidate) and os.path.dirname(candidate) not in seen:
            seen.append(os.path.dirname(candidate))
    return seen


def torch_build(torch):
    version = getattr(torch, "version", None)
    build = {
        "version": getattr(torch, "__version__", None),
        "cuda": getattr(version, "cuda", None),
        "hip": getattr(version, "hip", None),
        "git_version": getattr(version, "git_version", None),
        "debug": getattr(version, "debug", None),
        "file": getattr(torch, "__file__", None),
        "cxx11_abi": attempt("cxx11 abi", lambda: bool(torch._C._GLIBCXX_USE_CXX11_ABI)),
    }
    return build


def arch_list(torch):
    """torch.cuda.get_arch_list(): asked after CUDA's initialisation, as some releases
    (2.11 among them) call is_available() in it, which initialises the driver (cuInit):
    asked before, it took CUDA's start-up time and a hang there into "torch build"."""
    return attempt("cuda arch list", lambda: list(torch.cuda.get_arch_list()), [])


def cudnn_compile_version(torch):
    """The cuDNN torch was built against, "9.1.0" (``torch._C._cudnn``, CUDA builds only)."""
    module = getattr(torch._C, "_cudnn", None)
    if module is None or not hasattr(module, "getCompileVersion"):
        return None
    return ".".join(str(part) for part in module.getCompileVersion())


def nccl_version_text(value):
    """torch.cuda.nccl.version() as "2.7.8": a tuple in newer torch, NCCL_VERSION_CODE before.

    The code is major*1000 + minor*100 + patch up to NCCL 2.8 and major*10000 + minor*100 +
    patch from 2.9 on (NVIDIA/nccl src/nccl.h.in; torch's c10d getNcclVersion decodes it
    the same way).
    """
    if isinstance(value, (tuple, list)):
        return ".".join(str(v) for v in value)
    if isinstance(value, int) and value > 0:
        div = 10000 if value >= 10000 else 1000
        return "%d.%d.%d" % (value // div, value % div // 100, value % 100)
    return str(value)


def torch_libraries(torch):
    libs = {"cudnn_available": None, "cudnn_version": None, "cudnn_compile_version": None,
            "nccl_version": None}
    libs["cudnn_available"] = attempt(
        "cudnn available", lambda: bool(torch.backends.cudnn.is_available())
    )
    if libs["cudnn_available"]:
        libs["cudnn_version"] = attempt("cudnn version", torch.backends.cudnn.version)
    libs["cudnn_compile_version"] = attempt("cudnn compile version",
                                            lambda: cudnn_compile_version(torch))
    if getattr(torch.version, "cuda", None):
        def nccl():
            return nccl_version_text(torch.cuda.nccl.version())
        libs["nccl_version"] = attempt("nccl version", nccl)
    return libs


def distributed_facts(torch):
    dist = attempt("import torch.distributed", lambda: __import__("torch.distributed").distributed)
    if dist is None:
        return {"available": False}
    available = bool(attempt("distributed available", dist.is_available, False))
    facts = {"available": available}
    if available:
        facts["nccl_available"] = attempt("nccl available", dist.is_nccl_available, False)
        facts["gloo_available"] = attempt("gloo available", dist.is_gloo_available, False)
    return facts


def device_facts(torch, index):
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    return {
        "index": index,
        "name": props.name,
        "capability": "%d.%d" % (props.major, props.minor),
        "total_memory": props.total_memory,
        "multi_processor_count": props.multi_processor_count,
        "uuid": str(uuid) if uuid is not None else None,
        "pci_bus_id": getattr(props, "pci_bus_id", None),
    }


def error_text(exc):
    return ("%s: %s" % (type(exc).__name__, exc))[:2000]


class Beside(object):
    """``fn()`` started now in a daemon thread, beside what the main thread does next;
    ``result()`` joins it. The thread announces no stage (only the main thread does, so the
    last stage stays where the main thread is) and a part still running at exit does not
    hold the interpreter up."""

    def __init__(self, name, fn):
        self.box = {}

        def target():
            try:
                self.box["value"] = fn()
            except BaseException as exc:  # handed to whoever asks for the result
                self.box["error"] = exc

        self.thread = threading.Thread(target=target, name="ddp-doctor-" + name)
        self.thread.daemon = True
        self.thread.start()

    def result(self, timeout=None):
        self.thread.join(timeout)
        if self.thread.is_alive():
            raise RuntimeError("still running after %gs" % timeout)
        if "error" in self.box:
            raise self.box["error"]
        return self.box.get("value")


def run_with_deadline(fn, timeout):
    """Run ``fn()`` in a daemon thread: ``(finished, value, error_text, thread)``."""
    box = {}

    def target():
        try:
            box["value"] = fn()
        except BaseException as exc:  # a CUDA error is a RuntimeError; keep anything
            box["error"] = error_text(exc)

    thread = threading.Thread(target=target, name="ddp-doctor-probe")
    thread.daemon = True
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return False, None, None, thread
    return True, box.get("value"), box.get("error"), thread


def functional_test(torch, index, n=MATMUL_N):
    """Allocate on GPU ``index``, multiply two n x n matrices, synchronise, compare to the CPU.

    ``is_available()`` can be True while the first kernel fails (no kernel image, an
    illegal memory access, a wedged device): only running one proves the GPU works.
    Returns None when the result matches, else what differed.
    """
    device = "cuda:%d" % index
    generator = torch.Generator().manual_seed(0)
    a = torch.rand(n, n, generator=generator)
    b = torch.rand(n, n, generator=generator)
    expected = torch.matmul(a, b)
    got = torch.matmul(a.to(device), b.to(device))
    torch.cuda.synchronize(device)
    got = got.cpu()
    # TF32 (allowed on Ampere+ when a user enables it) stays far inside 1e-2 relative.
    if not torch.allclose(got, expected, rtol=1e-2, atol=1e-2):
        diff = float((got - expected).abs().max().item())
        return "result differs from the CPU: max abs difference %.4g" % diff
    return None


def cudnn_test(torch, index):
    """A small Conv2d forward and backward on GPU ``index`` with cuDNN enabled."""
    device = "cuda:%d" % index
    torch.backends.cudnn.enabled = True
    generator = torch.Generator().manual_seed(0)
    conv = torch.nn.Conv2d(3, 8, kernel_size=3, padding=1).to(device)
    x = torch.rand(2, 3, 32, 32, generator=generator).to(device).requires_grad_()
    out = conv(x)
    out.sum().backward()
    torch.cuda.synchronize(device)
    if not bool(torch.isfinite(x.grad).all().item()):
        return "the convolution's gradient holds NaN or Inf"
    return None


def gpu_result(index, ok, error, duration, timed_out=False):
    return {"index": index, "ok": ok, "timed_out": timed_out, "error": error,
            "duration_s": round(duration, 3)}


def test_gpus(torch, count, deadline=GPU_DEADLINE_S, report=None):
    """Functional and cuDNN test of every GPU, each GPU under its own deadline.

    Returns ``(functional, cudnn, stuck)``: two lists of per-GPU results and whether a
    thread is still stuck in a GPU call (the caller then leaves with ``os._exit``).
    """
    functional, cudnn, stuck = [], [], False
    for index in range(count):
        done = {}
        abandoned = []

        def work(i=index, done=done, abandoned=abandoned):
            for name, fn in (("functional", functional_test), ("cudnn_test", cudnn_test)):
                if abandoned:
                    return
                stage("cuda.%s:%d" % (name, i))
                start = time.monotonic()
                try:
                    problem = fn(torch, i)
                    done[name] = gpu_result(i, problem is None, problem,
                                            time.monotonic() - start)
                except BaseException as exc:
                    done[name] = gpu_result(i, False, error_text(exc), time.monotonic() - start)

        start = time.monotonic()
        finished, _, error, _ = run_with_deadline(work, deadline)
        elapsed = time.monotonic() - start
        if not finished:
            abandoned.append(True)
            stuck = True
        for name, results in (("functional", functional), ("cudnn_test", cudnn)):
            if name in done:
                results.append(done[name])
            elif not finished:
                results.append(gpu_result(index, False, "no answer within %gs" % deadline,
                                          elapsed, timed_out=True))
            else:
                results.append(gpu_result(index, False, error or "not run", 0.0))
        if report is not None:
            report(functional, cudnn)
    return functional, cudnn, stuck


def p2p_matrix(torch, count, deadline=P2P_DEADLINE_S):
    """``can_device_access_peer`` for every ordered pair, all under one deadline."""
    matrix = [[None] * count for _ in range(count)]
    errors = []

    def work():
        for i in range(count):
            for j in range(count):
                if i == j:
                    continue
                try:
                    matrix[i][j] = bool(torch.cuda.can_device_access_peer(i, j))
                except BaseException as exc:
                    errors.append("GPU %d -> GPU %d: %s" % (i, j, error_text(exc)))

    finished, _, error, _ = run_with_deadline(work, deadline)
    if error:
        errors.append(error)
    p2p = {"matrix": [list(row) for row in matrix], "error": "; ".join(errors) or None,
           "timed_out": not finished}
    if not finished:
        p2p["error"] = "no answer within %gs" % deadline + ("; " + p2p["error"]
                                                           if p2p["error"] else "")
    return p2p, not finished


# ----------------------------------------------------------------- NVML under load


def load_nvml():
    """``(pynvml, None)`` initialised, or ``(None, why not)``: pynvml is optional here."""
    try:
        import pynvml
    except BaseException as exc:
        return None, "pynvml is not importable in this interpreter (%s)" % error_text(exc)
    try:
        pynvml.nvmlInit()
    except BaseException as exc:
        return None, "nvmlInit failed: %s" % error_text(exc)
    return pynvml, None


# NVML's start begun beside CUDA's (probe_steps), when there is one: the readings under
# load take its answer instead of starting NVML after the GPU tests.
EARLY_NVML = []


def started_nvml():
    """``load_nvml()``'s answer, from the start begun beside CUDA's when there is one."""
    if EARLY_NVML:
        return EARLY_NVML[0].result()
    return load_nvml()


def nvml_read(fn):
    try:
        return int(fn())
    except BaseException:
        return None


def nvml_handle(nvml, torch, index):
    """The NVML handle of CUDA device ``index``: by UUID, else by PCI address (the CUDA
    order and NVML's differ when CUDA_DEVICE_ORDER or CUDA_VISIBLE_DEVICES reorder them)."""
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    if uuid is not None:
        text = str(uuid)
        text = text if text.startswith(("GPU-", "MIG-")) else "GPU-" + text
        try:
            return nvml.nvmlDeviceGetHandleByUUID(text), text
        except BaseException:
            pass
    bus = "%08X:%02X:%02X.0" % (getattr(props, "pci_domain_id", 0) or 0,
                                getattr(props, "pci_bus_id", 0) or 0,
                                getattr(props, "pci_device_id", 0) or 0)
    return nvml.nvmlDeviceGetHandleByPciBusId(bus), (str(uuid) if uuid is not None else None)


def nvml_state(nvml, handle):
    """Link, clock-event reasons and temperature of one GPU now (the same queries as the
    NVML probe, facts/nvml.py, which this interpreter cannot import)."""
    reasons = None
    for name in ("nvmlDeviceGetCurrentClocksEventReasons",
                 "nvmlDeviceGetCurrentClocksThrottleReasons"):
        query = getattr(nvml, name, None)
        if query is not None and reasons is None:
            reasons = nvml_read(lambda q=query: q(handle))
    return {
        "pcie": {
            "gen_current": nvml_read(lambda: nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
            "gen_max": nvml_read(lambda: nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
            "width_current": nvml_read(lambda: nvml.nvmlDeviceGetCurrPcieLinkWidth(handle)),
            "width_max": nvml_read(lambda: nvml.nvmlDeviceGetMaxPcieLinkWidth(handle)),
            "replay_counter": nvml_read(lambda: nvml.nvmlDeviceGetPcieReplayCounter(handle)),
        },
        "clock_event_reasons": reasons,
        "temperature": nvml_read(lambda: nvml.nvmlDeviceGetTemperature(handle, 0)),
    }


def merge_readings(readings):
    """Several readings during one burst of work: the highest link generation and width
    seen (the link ramps up as the GPU wakes) and every clock-event reason seen."""
    merged = readings[0]
    for reading in readings[1:]:
        for key in ("gen_current", "width_current"):
            values = [v for v in (merged["pcie"][key], reading["pcie"][key]) if v is not None]
            merged["pcie"][key] = max(values) if values else None
        if reading["clock_event_reasons"] is not None:
            merged["clock_event_reasons"] = ((merged["clock_event_reasons"] or 0)
                                             | reading["clock_event_reasons"])
        values = [v for v in (merged["temperature"], reading["temperature"]) if v is not None]
        merged["temperature"] = max(values) if values else None
    return merged


def under_load(torch, index, nvml, n=LOAD_MATMUL_N, rounds=LOAD_ROUNDS, reads=LOAD_READS,
               poll=LOAD_POLL_S):
    """Queue ``rounds`` matrix products on GPU ``index`` and read NVML while they run."""
    handle, uuid = nvml_handle(nvml, torch, index)
    device = "cuda:%d" % index
    a = torch.rand(n, n, device=device)
    b = None
    for _ in range(rounds):
        b = torch.matmul(a, a)
    done = torch.cuda.Event()
    done.record()
    readings = []
    for _ in range(reads):
        time.sleep(poll)
        readings.append(nvml_state(nvml, handle))
        if done.query():  # the work is over: a later reading would be of an idle GPU
            break
    torch.cuda.synchronize(device)
    del a, b
    reading = merge_readings(readings)
    reading.update({"index": index, "uuid": uuid, "error": None})
    return reading


def readings_under_load(torch, indices, deadline=LOAD_DEADLINE_S, nvml_loader=started_nvml,
                        **load):
    """NVML under load for each GPU in ``indices``; ``(readings, stuck)``. ``load`` goes to
    ``under_load`` (the work's size)."""
    nvml, why = nvml_loader()
    readings, stuck = [], False
    for index in indices:
        if nvml is None:
            readings.append({"index": index, "uuid": None, "pcie": None,
                             "clock_event_reasons": None, "temperature": None, "error": why})
            continue
        stage("cuda.under_load:%d" % index)
        finished, value, error, _ = run_with_deadline(
            lambda i=index: under_load(torch, i, nvml, **load), deadline)
        if not finished:
            stuck = True
            error = "no answer within %gs" % deadline
        readings.append(value if value is not None else {
            "index": index, "uuid": None, "pcie": None, "clock_event_reasons": None,
            "temperature": None, "error": error or "not read"})
        if stuck:
            break
    return readings, stuck


# ----------------------------------------------------------------- P2P data test


def plan_pairs(indices):
    """Every ordered pair of distinct GPUs: a copy each way, since a path can fail one way."""
    return [[i, j] for i in indices for j in indices if i != j]


def pattern(torch, n, seed, device):
    """n int32 words that differ from word to word and from pair to pair."""
    return torch.arange(n, dtype=torch.int32, device=device) * 7 + seed


def copy_pair(torch, src, dst, nbytes=P2P_COPY_BYTES, repeats=P2P_COPY_REPEATS,
              clock=time.monotonic):
    """Copy a patterned buffer GPU src -> GPU dst, check it, time ``repeats`` more copies.

    Returns ``(seconds, problem)``: problem is None when every word arrived both after the
    warm-up copy and after the timed ones (the target is cleared in between, so a copy that
    silently does nothing is caught too).
    """
    n = nbytes // 4
    seed = src * 1000 + dst + 1
    source = pattern(torch, n, seed, "cuda:%d" % src)
    expected = pattern(torch, n, seed, "cuda:%d" % dst)
    target = torch.empty(n, dtype=torch.int32, device="cuda:%d" % dst)
    for phase in ("the first copy", "the timed copies"):
        target.fill_(-1)
        torch.cuda.synchronize("cuda:%d" % dst)
        start = clock()
        for _ in range(1 if phase == "the first copy" else repeats):
            target.copy_(source)
        torch.cuda.synchronize("cuda:%d" % dst)
        torch.cuda.synchronize("cuda:%d" % src)
        seconds = clock() - start
        if not bool(torch.equal(target, expected)):
            wrong = int((target != expected).sum().item())
            return seconds, "%d of %d words differ after %s" % (wrong, n, phase)
    return seconds, None


def p2p_copy_test(torch, indices, matrix=None, deadline=GPU_DEADLINE_S,
                  budget=P2P_COPY_BUDGET_S, nbytes=P2P_COPY_BYTES, repeats=P2P_COPY_REPEATS):
    """Copy between every ordered pair of ``indices``; ``(result, stuck)``.

    Each pair runs under ``deadline`` (never past what is left of ``budget``). A hung copy
    usually leaves the device wedged, so the test stops there and lists the pairs it did not
    run; so does running out of budget.
    """
    pairs, not_run, stopped, stuck = [], [], None, False
    start = time.monotonic()
    plan = plan_pairs(indices)
    for position, (src, dst) in enumerate(plan):
        left = budget - (time.monotonic() - start)
        if left < 1.0:
            stopped = "the test's %gs budget ran out" % budget
            not_run = plan[position:]
            break
        peer = None
        if matrix and src < len(matrix) and dst < len(matrix[src]):
            peer = matrix[src][dst]
        stage("cuda.p2p_copy:%d>%d" % (src, dst))
        wait = min(deadline, left)
        began = time.monotonic()
        finished, value, error, _ = run_with_deadline(
            lambda s=src, d=dst: copy_pair(torch, s, d, nbytes, repeats), wait)
        entry = {"src": src, "dst": dst, "peer_access": peer, "ok": False, "timed_out": False,
                 "corrupt": False, "error": error, "seconds": None, "gbps": None}
        if not finished:
            entry["timed_out"] = True
            entry["error"] = "copy hung after %.0f s" % (time.monotonic() - began)
            pairs.append(entry)
            stuck = True
            stopped = "GPU %d -> GPU %d hung" % (src, dst)
            not_run = plan[position + 1:]
            break
        if value is not None:
            seconds, problem = value
            entry["seconds"] = round(seconds, 6)
            entry["gbps"] = round(nbytes * repeats / seconds / 1e9, 3) if seconds > 0 else None
            entry["corrupt"] = problem is not None
            entry["error"] = problem
            entry["ok"] = problem is None
        pairs.append(entry)
    return {"bytes": nbytes, "repeats": repeats, "pairs": pairs, "not_run": not_run,
            "stopped": stopped}, stuck


def cuda_facts(torch, build):
    """CUDA initialisation, the devices, the build's arch list and libraries, then each
    GPU's tests; each part's time goes to TIMINGS (``cuda_init_s`` from ``is_available``,
    where the driver starts, to the last device's properties)."""
    cuda = {"available": False, "device_count": 0, "init_error": None, "devices": [],
            "functional": [], "cudnn_test": [], "p2p": None}
    init_started = time.monotonic()

    def init_done():
        TIMINGS["cuda_init_s"] = round(time.monotonic() - init_started, 4)
        put("timings", TIMINGS)
        # The CUDA-side build facts, whatever CUDA's answer: a failed start still leaves
        # the libraries the build carries worth reporting.
        stage("cuda.arch_list")
        build["arch_list"] = arch_list(torch)
        put("build", build)
        stage("cuda.libraries")
        put("libraries", torch_libraries(torch))

    stage("cuda.is_available")
    cuda["available"] = bool(attempt("cuda.is_available", torch.cuda.is_available, False))
    put("cuda", cuda)
    if not getattr(torch.version, "cuda", None) and not getattr(torch.version, "hip", None):
        init_done()
        return cuda, False
    stage("cuda.init")
    try:
        torch.cuda.init()  # raises the real reason when is_available() is quietly False
    except BaseException as exc:
        cuda["init_error"] = "%s: %s" % (type(exc).__name__, exc)
        record_exception("cuda.init", exc)
        put("cuda", cuda)
        init_done()
        return cuda, False
    stage("cuda.device_count")
    cuda["device_count"] = attempt("cuda.device_count", torch.cuda.device_count, 0)
    put("cuda", cuda)
    for index in range(cuda["device_count"] or 0):
        stage("cuda.device_properties:%d" % index)
        dev = attempt("cuda.device_properties:%d" % index,
                      lambda i=index: device_facts(torch, i))
        if dev is not None:
            cuda["devices"].append(dev)
            put("cuda", cuda)
    init_done()
    stuck = False
    count = cuda["device_count"] or 0
    if cuda["available"] and count:
        def report(functional, cudnn):
            cuda["functional"], cuda["cudnn_test"] = functional, cudnn
            put("cuda", cuda)

        _, _, stuck = timed("gpu_tests_s", lambda: test_gpus(torch, count, report=report))
        if count >= 2:
            stage("cuda.p2p")
            cuda["p2p"], p2p_stuck = timed("p2p_query_s", p2p_matrix, torch, count)
            stuck = stuck or p2p_stuck
            put("cuda", cuda)
        working = [r["index"] for r in cuda["functional"] if r.get("ok")]
        if not stuck and working:
            cuda["under_load"], load_stuck = timed("under_load_s", readings_under_load, torch,
                                                   working)
            stuck = stuck or load_stuck
            put("cuda", cuda)
        if not stuck and len(working) >= 2:
            matrix = (cuda["p2p"] or {}).get("matrix")
            cuda["p2p_copy"], copy_stuck = timed("p2p_copy_s", p2p_copy_test, torch, working,
                                                 matrix)
            stuck = stuck or copy_stuck
            put("cuda", cuda)
    return cuda, stuck


def cuda_version_text(value):
    """torchvision.version.cuda as "13.0": torchvision sets it to its operators' CUDA as
    an int, major*1000 + minor*10 (13000 seen with torchvision 0.26 on an H200), where
    torch.version.cuda is a string."""
    if isinstance(value, int) and not isinstance(value, bool):
        return "%d.%d" % (value // 1000, value % 1000 // 10) if value > 0 else None
    return value


def torchvision_facts():
    """Does torchvision import, and do its compiled operators load?

    A torchvision built for another torch fails here with "operator torchvision::nms
    does not exist" (pytorch/vision#8985); older releases said "No such operator".
    """
    import importlib
    try:
        import importlib.util
        if importlib.util.find_spec("torchvision") is None:
            return None
    except (ImportError, ValueError):
        return None
    facts = {"version": None, "cuda": None, "import_error": None, "ops_error": None}
    try:
        tv = importlib.import_module("torchvision")
    except BaseException as exc:
        facts["import_error"] = error_text(exc)
        return facts
    facts["version"] = getattr(tv, "__version__", None)
    facts["cuda"] = attempt("torchvision cuda",
                            lambda: cuda_version_text(getattr(tv.version, "cuda", None)))
    try:
        import torch
        _ = torch.ops.torchvision.nms  # resolving the op loads it, or says why not
    except BaseException as exc:
        facts["ops_error"] = error_text(exc)
    return facts


def numpy_facts(torch, caught):
    """The NumPy this interpreter imports, and whether torch can exchange arrays with it.

    A torch built against NumPy 1 on NumPy 2 warns at import ("Failed to initialize
    NumPy: _ARRAY_API not found") and later raises "Numpy is not available".
    """
    facts = {"version": None, "import_error": None, "bridge_error": None,
             "warnings": [w for w in caught if "numpy" in w.lower()][:5]}
    try:
        import numpy
    except BaseException as exc:
        facts["import_error"] = error_text(exc)
        return facts
    facts["version"] = getattr(numpy, "__version__", None)
    try:
        torch.from_numpy(numpy.zeros(2, dtype="float32")).numpy()
    except BaseException as exc:
        facts["bridge_error"] = error_text(exc)
    return facts


def import_torch():
    """``import torch``, keeping the warnings it raises (and showing them as usual)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import torch
    for w in caught:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return torch, [str(w.message)[:1000] for w in caught]


def main():
    started = time.monotonic()
    try:
        probe_steps(started)
    finally:
        TIMINGS["total_s"] = round(time.monotonic() - started, 4)
        put("timings", TIMINGS)
    # Everything is sent: leave without the interpreter's teardown, which with torch loaded
    # took 0.7 s here (`python -c "import torch"`: 3.25 s; with os._exit(0) at the end:
    # 2.55 s), a fifth of `check`. Nothing after this needs running; the driver frees a CUDA
    # context when its process ends. Only the script run as a program does this: the tests
    # drive probe_steps in their own process.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def torch_side_facts(torch, caught):
    """The build, torch.distributed and NumPy: what needs no CUDA. (The arch list and the
    libraries come after CUDA's initialisation: ``cuda_facts``; torchvision beside it.)"""
    stage("torch build")
    build = torch_build(torch)
    put("build", build)
    stage("torch.distributed")
    put("distributed", distributed_facts(torch))
    stage("numpy")
    put("numpy", attempt("numpy", lambda: numpy_facts(torch, caught)))
    return build


def list_packages():
    """The package listing, sent as soon as it is done (``Beside`` runs it)."""
    put("packages", timed("packages_s", attempt, "packages", package_facts, {}))


def import_torchvision():
    """torchvision's facts, sent as soon as they are known (``Beside`` runs it)."""
    put("torchvision", timed("torchvision_s", attempt, "torchvision", torchvision_facts))


def collect(part, where, timeout=None):
    """Wait for a part run beside under its own stage, so a part that hangs is named."""
    stage(where)
    attempt(where, lambda: part.result(timeout))


def probe_steps(started):
    stage("python")
    put("python", python_facts())
    packages = Beside("packages", list_packages)
    put("torch_locations", attempt("torch locations", torch_locations, []))
    stage("import torch")
    try:
        torch, caught = timed("import_torch_s", import_torch)
    except BaseException as exc:  # ImportError, OSError (a missing .so), SystemExit
        put("import_error", {"type": type(exc).__name__, "message": str(exc)[:4000]})
        record_exception("import torch", exc)
        collect(packages, "packages")
        stage("done")
        return
    put("import_error", None)
    build = timed("torch_facts_s", torch_side_facts, torch, caught)
    torchvision = Beside("torchvision", import_torchvision)
    if getattr(torch.version, "cuda", None):  # NVML is read only under a CUDA build's load
        EARLY_NVML.append(Beside("nvml", load_nvml))
    _, stuck = cuda_facts(torch, build)
    # After a GPU hung, a part waiting on the same device could wait for ever: bounded.
    collect(torchvision, "import torchvision", GPU_DEADLINE_S if stuck else None)
    collect(packages, "packages")
    TIMINGS["total_s"] = round(time.monotonic() - started, 4)
    put("timings", TIMINGS)
    stage("done")
    if stuck:  # a GPU thread never came back: do not wait for it at interpreter exit
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
