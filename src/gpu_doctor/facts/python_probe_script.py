"""Standalone probe run *inside* the Python interpreter being diagnosed.

It is executed as ``[python, -c, <this file's text>]`` so it sees exactly what the
user's training script would see: the same ``sys.path``, environment and working
directory. It imports nothing but the standard library (and torch, when asked), and
must run on old interpreters too (Python 3.6+), so no newer syntax.

Output: lines ``@@gpu-doctor@@ {json}`` on stdout, each either ``{"stage": name}``
(announced *before* a step that may hang or crash, so the parent can say where it
stopped) or ``{"key": k, "value": v}`` (a result, sent as soon as it is known, so
partial results survive a hang or a segfault).
"""

import json
import os
import sys
import traceback

MARK = "@@gpu-doctor@@ "
PACKAGE_PREFIXES = ("nvidia-", "nvidia_")
PACKAGES = (
    "torch", "torchvision", "torchaudio", "numpy", "ultralytics", "yolov5", "yolox",
    "lightning", "pytorch-lightning", "accelerate", "deepspeed", "triton", "nvidia-ml-py",
    "pynvml", "opencv-python", "opencv-python-headless", "pillow", "setuptools",
)


def emit(obj):
    sys.stdout.write(MARK + json.dumps(obj, default=str) + "\n")
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


def torch_libraries(torch):
    libs = {"cudnn_available": None, "cudnn_version": None, "nccl_version": None}
    libs["cudnn_available"] = attempt(
        "cudnn available", lambda: bool(torch.backends.cudnn.is_available())
    )
    if libs["cudnn_available"]:
        libs["cudnn_version"] = attempt("cudnn version", torch.backends.cudnn.version)
    if getattr(torch.version, "cuda", None):
        def nccl():
            value = torch.cuda.nccl.version()
            return ".".join(str(v) for v in value) if isinstance(value, tuple) else str(value)
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


def cuda_facts(torch):
    cuda = {"available": False, "device_count": 0, "init_error": None, "devices": []}
    stage("cuda.is_available")
    cuda["available"] = bool(attempt("cuda.is_available", torch.cuda.is_available, False))
    put("cuda", cuda)
    if not getattr(torch.version, "cuda", None) and not getattr(torch.version, "hip", None):
        return cuda
    stage("cuda.init")
    try:
        torch.cuda.init()  # raises the real reason when is_available() is quietly False
    except BaseException as exc:
        cuda["init_error"] = "%s: %s" % (type(exc).__name__, exc)
        record_exception("cuda.init", exc)
        put("cuda", cuda)
        return cuda
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
    return cuda


def main():
    stage("python")
    put("python", python_facts())
    stage("packages")
    put("packages", attempt("packages", package_facts, {}))
    put("torch_locations", attempt("torch locations", torch_locations, []))
    stage("import torch")
    try:
        import torch
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
    cuda_facts(torch)
    stage("done")


if __name__ == "__main__":
    main()
