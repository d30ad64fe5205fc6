"""What one parser read from one section, and the small text helpers the parsers share.

Every parser returns a ``Parsed``: the kind of section, partial fact values in the shapes
the live probes produce (``nvml``, ``torch``, ``python``, ``os``, ``driver``), holding only
keys the text showed, and a one-line summary. ``build.py`` merges them into one ``Facts``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MIB = 1024**2

# Values that mean "the tool could not tell": collect_env's "Could not collect", nvidia-smi's
# "N/A" and "ERR!", and the "No CUDA" collect_env prints on machines without CUDA.
UNKNOWN_VALUES = frozenset({"", "n/a", "na", "could not collect", "no cuda", "none", "err!",
                            "[n/a]", "[not supported]", "not supported", "unknown"})


@dataclass
class Parsed:
    """One parsed section: partial facts by name and a summary line."""

    kind: str
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    summary: str = ""


SECTION_TITLES = {
    "collect_env": "the collect_env report",
    "nvidia_smi": "the nvidia-smi table",
    "nvidia_smi_q": "the nvidia-smi -q output",
    "yolo_checks": "the `yolo checks` output",
    "yolov5_banner": "the Ultralytics start-up banner",
}
"""Each section kind as a person names it; the kind itself stays a machine key."""


def known(value: str | None) -> str | None:
    """VALUE stripped, or None when it is one of the tools' "unknown" spellings."""
    if value is None:
        return None
    text = value.strip()
    return None if text.lower() in UNKNOWN_VALUES else text


def normalize_line(line: str) -> str:
    """Full-width colons (pastes through CJK input methods) become ASCII; tabs spaces."""
    return line.replace("\uff1a", ":").replace("\t", "    ").rstrip("\r\n")


def yes_no(value: str | None) -> bool | None:
    text = (known(value) or "").lower()
    if text in {"true", "yes", "on", "enabled", "active"}:
        return True
    if text in {"false", "no", "off", "disabled", "not active"}:
        return False
    return None


def to_int(value: str | None) -> int | None:
    match = re.match(r"\s*(-?\d+)", value or "")
    return int(match.group(1)) if match else None


def version_in(text: str | None) -> str | None:
    """The first dotted version number in TEXT ("3.11.14 | packaged by ..." -> "3.11.14")."""
    match = re.search(r"\d+\.\d+(?:\.\d+)*", text or "")
    return match.group(0) if match else None


def cuda_from_local_tag(version: str | None) -> str | None:
    """torch's CUDA version from its wheel tag: "2.1.0+cu118" -> "11.8", "1.13.0+cu116" ->
    "11.6", "1.7.1+cu92" -> "9.2" (https://download.pytorch.org/whl/ names one index per
    cuXYZ; the last digit is the minor version)."""
    match = re.search(r"\+cu(\d+)(\d)\b", version or "")
    return f"{int(match.group(1))}.{match.group(2)}" if match else None


def rocm_from_local_tag(version: str | None) -> str | None:
    match = re.search(r"\+rocm(\d+(?:\.\d+)*)", version or "")
    return match.group(1) if match else None


_WSL_KERNEL = re.compile(r"microsoft", re.IGNORECASE)


def os_from_platform(platform: str | None) -> dict[str, Any]:
    """``platform.platform()`` text ("Linux-5.10.16.3-microsoft-standard-WSL2-x86_64-with-
    glibc2.31", "Windows-10-10.0.22631-SP0", "macOS-14.5-x86_64-i386-64bit") as ``os`` keys.

    WSL is told apart the way ``facts.os_info.detect_wsl`` does it, from the kernel name.
    """
    from ddp_doctor.facts.os_info import detect_wsl

    text = (platform or "").strip()
    out: dict[str, Any] = {}
    match = re.match(r"Linux-(.+?)-(x86_64|aarch64|arm64|ppc64le|s390x|armv7l|i686)\b", text)
    if match:
        out.update(system="Linux", kernel=match.group(1), machine=match.group(2))
        wsl = detect_wsl(match.group(1), "", {})
        out["wsl"] = wsl
    elif text.startswith("Windows-"):
        out["system"] = "Windows"
    elif text.startswith(("macOS-", "Darwin-")):
        out["system"] = "Darwin"
    return out


_DISTRO_IDS = (("ubuntu", "ubuntu"), ("debian", "debian"), ("centos", "centos"),
               ("red hat", "rhel"), ("rocky", "rocky"), ("almalinux", "almalinux"),
               ("fedora", "fedora"), ("amazon linux", "amzn"), ("arch linux", "arch"),
               ("opensuse", "opensuse-leap"), ("linux mint", "linuxmint"), ("pop!_os", "pop"))


def distro_from_pretty(pretty: str) -> dict[str, Any]:
    """"Ubuntu 22.04.5 LTS" -> the ``os.distro`` shape (id, name, version, pretty)."""
    low = pretty.lower()
    distro_id = next((i for word, i in _DISTRO_IDS if low.startswith(word)), None)
    version = re.search(r"\d+(?:\.\d+)?", pretty)
    return {"id": distro_id, "name": pretty.split(" ")[0] if pretty else None,
            "version": version.group(0) if version else None, "pretty": pretty}
