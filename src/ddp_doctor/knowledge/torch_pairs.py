"""Which torchvision, torchaudio, Python and NumPy belong with a torch release.

Sources:
- torch <-> torchvision: pytorch/vision README.md, compatibility table
  (https://github.com/pytorch/vision#installation).
- torch <-> torchaudio: https://docs.pytorch.org/audio/2.11.0/installation.html
  (compatibility matrix). torchaudio 2.11 is built on torch's stable ABI and works with
  torch 2.11 and later; before it, torchaudio had to match torch's minor exactly.
- Python versions per torch release: pytorch/pytorch RELEASE.md, "Release Compatibility
  Matrix" (the experimental newest Python counts as supported: wheels are published).
- NumPy 2: torch up to 2.2 was built against NumPy 1 and breaks on NumPy 2 ("A module
  that was compiled using NumPy 1.x cannot be run in NumPy 2..."); 2.3.1 is the first
  release safe with it (pytorch/pytorch#107302, #132179; neuromorphs/tonic#317).
- 2.12 and 2.13 (published; RELEASE.md's rows for them were a plan): torch 2.12 pairs with
  torchvision 0.27 (googlecolab/colabtools#5982, "PyTorch v2.12.1, torchvision v0.27.1",
  a PyTorch release manager's note); 2.13's wheels declare Python 3.10-3.15 (classifiers and
  Requires-Python of torch-2.13.0 on PyPI) and torchvision 0.28 follows the 0.(x+15) rule that
  holds from 2.1 to 2.12. torchaudio stopped following torch's minor with 2.11 (stable ABI),
  so the companion named for 2.12 and 2.13 is 2.11, which runs on them.
Releases after 2.13 are left out until published: an unknown release gets no verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import InvalidVersion, Version


@dataclass(frozen=True)
class Release:
    torch: str  # "2.5"
    torchvision: str  # "0.20"
    torchaudio: str  # "2.5"
    python_min: str
    python_max: str


RELEASES: tuple[Release, ...] = (
    Release("1.13", "0.14", "0.13", "3.7", "3.10"),
    Release("2.0", "0.15", "2.0", "3.8", "3.11"),
    Release("2.1", "0.16", "2.1", "3.8", "3.11"),
    Release("2.2", "0.17", "2.2", "3.8", "3.12"),
    Release("2.3", "0.18", "2.3", "3.8", "3.12"),
    Release("2.4", "0.19", "2.4", "3.8", "3.12"),
    Release("2.5", "0.20", "2.5", "3.9", "3.13"),
    Release("2.6", "0.21", "2.6", "3.9", "3.13"),
    Release("2.7", "0.22", "2.7", "3.9", "3.13"),
    Release("2.8", "0.23", "2.8", "3.9", "3.13"),
    Release("2.9", "0.24", "2.9", "3.10", "3.14"),
    Release("2.10", "0.25", "2.10", "3.10", "3.14"),
    Release("2.11", "0.26", "2.11", "3.10", "3.14"),
    Release("2.12", "0.27", "2.11", "3.10", "3.14"),
    Release("2.13", "0.28", "2.11", "3.10", "3.15"),
)
# torchaudio from this release on follows torch's stable ABI: it runs on this torch or newer.
STABLE_ABI_TORCHAUDIO = (2, 11)
NUMPY2_SAFE_TORCH = Version("2.3.1")


def parse(text: str | None) -> Version | None:
    """A version without its local tag (``2.5.1+cu124`` -> 2.5.1); None when unreadable."""
    if not text:
        return None
    try:
        return Version(str(text).split("+", 1)[0])
    except InvalidVersion:
        return None


def local_tag(text: str | None) -> str | None:
    """``2.5.1+cu124`` -> ``cu124``; None without a local tag."""
    if not text or "+" not in str(text):
        return None
    return str(text).split("+", 1)[1]


def minor(version: Version) -> str:
    return f"{version.major}.{version.minor}"


def release_for(torch_version: str | None) -> Release | None:
    parsed = parse(torch_version)
    if parsed is None:
        return None
    return next((r for r in RELEASES if r.torch == minor(parsed)), None)


def torchvision_matches(release: Release, torchvision_version: str | None) -> bool | None:
    parsed = parse(torchvision_version)
    return None if parsed is None else minor(parsed) == release.torchvision


def torchaudio_matches(release: Release, torchaudio_version: str | None) -> bool | None:
    parsed = parse(torchaudio_version)
    if parsed is None:
        return None
    if (parsed.major, parsed.minor) >= STABLE_ABI_TORCHAUDIO:
        torch = Version(release.torch)
        return (torch.major, torch.minor) >= (parsed.major, parsed.minor)
    return minor(parsed) == release.torchaudio


def python_supported(release: Release, python_version: str | None) -> bool | None:
    parsed = parse(python_version)
    if parsed is None:
        return None
    return Version(release.python_min) <= Version(minor(parsed)) <= Version(release.python_max)
