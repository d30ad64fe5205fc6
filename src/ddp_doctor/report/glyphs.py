"""Status and severity marks shared by the console and Markdown renderers."""

from __future__ import annotations

from ddp_doctor.model import Severity, Status

STATUS_GLYPH = {
    Status.PASS: "✓",
    Status.WARN: "!",
    Status.FAIL: "✗",
    Status.SKIP: "–",
    Status.ERROR: "‼",
}
STATUS_STYLE = {
    Status.PASS: "green",
    Status.WARN: "yellow",
    Status.FAIL: "red",
    Status.SKIP: "dim",
    Status.ERROR: "magenta",
}
SEVERITY_GLYPH = {Severity.ERROR: "✗", Severity.WARNING: "!", Severity.INFO: "i"}
SEVERITY_STYLE = {
    Severity.ERROR: "bold red",
    Severity.WARNING: "bold yellow",
    Severity.INFO: "cyan",
}
AREA_TITLES = {
    "driver": "Driver",
    "cuda": "CUDA",
    "cudnn": "cuDNN",
    "pytorch": "PyTorch",
    "visibility": "GPU visibility",
    "nccl": "NCCL",
    "wsl": "WSL",
    "host": "Host",
    "launch": "Launch plan",
    "plugins": "Plugins",
    "smoke": "Smoke training",
}


def area_title(area: str) -> str:
    return AREA_TITLES.get(area, area.replace("_", " ").capitalize())
