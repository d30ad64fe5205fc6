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
matrix) runs in a daemon thread joined with a deadline, so one hung device is named
(``timed_out``) and the probe goes on to the next; a thread still stuck at the end is
left behind with ``os._exit``. The functions take ``torch`` as an argument so tests can
drive them in-process with a stand-in.
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
_EMIT_LOCK = threading.Lock()
PACKAGE_PREFIXES = ("nvidia-", "nvidia_")
PACKAGES = (
    "torch", "torchvision", "torchaudio", "numpy", "ultralytics", "yolov5", "yolox",
    "lightning", "pytorch-lightning", "accelerate", "deepspeed", "triton", "nvidia-ml-py",
    "pynvml", "opencv-python", "opencv-python-headless", "pillow", "setuptools",
)


def emit(obj):
    text = MARK + json.dumps(obj, default=str) + "\n"
    with _EMIT_LOCK:  # GPU threads announce stages too: one line at a time
        sys.stdout.write(text)
        sys.stdout.flush()


def stage(name):
    emit({"stage": name})


def put(key, value):
    emit({"key": key, "value": value})


EXCEPTIONS = []


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


def package_facts():
    """Installed distributions of interest, with every location (duplicates matter)."""
    try:
        from importlib import metadata
    except ImportError:  # Python < 3.8
        return {"error": "importlib.metadata unavailable (Python < 3.8)"}
    found = {}
    for dist in metadata.distributions():
        name = dist.metadata.get("Name") or ""
        key = norm(name)
        if key in PACKAGES or key.startswith(PACKAGE_PREFIXES):
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
    build["arch_list"] = attempt("cuda arch list", lambda: list(torch.cuda.get_arch_list()), [])
    return build


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


def cuda_facts(torch):
    cuda = {"available": False, "device_count": 0, "init_error": None, "devices": [],
            "functional": [], "cudnn_test": [], "p2p": None}
    stage("cuda.is_available")
    cuda["available"] = bool(attempt("cuda.is_available", torch.cuda.is_available, False))
    put("cuda", cuda)
    if not getattr(torch.version, "cuda", None) and not getattr(torch.version, "hip", None):
        return cuda, False
    stage("cuda.init")
    try:
        torch.cuda.init()  # raises the real reason when is_available() is quietly False
    except BaseException as exc:
        cuda["init_error"] = "%s: %s" % (type(exc).__name__, exc)
        record_exception("cuda.init", exc)
        put("cuda", cuda)
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
    stuck = False
    count = cuda["device_count"] or 0
    if cuda["available"] and count:
        def report(functional, cudnn):
            cuda["functional"], cuda["cudnn_test"] = functional, cudnn
            put("cuda", cuda)

        _, _, stuck = test_gpus(torch, count, report=report)
        if count >= 2:
            stage("cuda.p2p")
            cuda["p2p"], p2p_stuck = p2p_matrix(torch, count)
            stuck = stuck or p2p_stuck
            put("cuda", cuda)
    return cuda, stuck


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
    facts["cuda"] = attempt("torchvision cuda", lambda: getattr(tv.version, "cuda", None))
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
    stage("python")
    put("python", python_facts())
    stage("packages")
    put("packages", attempt("packages", package_facts, {}))
    put("torch_locations", attempt("torch locations", torch_locations, []))
    stage("import torch")
    try:
        torch, caught = import_torch()
    except BaseException as exc:  # ImportError, OSError (a missing .so), SystemExit
        put("import_error", {"type": type(exc).__name__, "message": str(exc)[:4000]})
        record_exception("import torch", exc)
        stage("done")
        return
    put("import_error", None)
    stage("torch build")
    put("build", torch_build(torch))
    stage("torch libraries")
    put("libraries", torch_libraries(torch))
    stage("torch.distributed")
    put("distributed", distributed_facts(torch))
    stage("numpy")
    put("numpy", attempt("numpy", lambda: numpy_facts(torch, caught)))
    stage("import torchvision")
    put("torchvision", attempt("torchvision", torchvision_facts))
    _, stuck = cuda_facts(torch)
    stage("done")
    if stuck:  # a GPU thread never came back: do not wait for it at interpreter exit
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
