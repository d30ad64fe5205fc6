"""Compatibility rules: cubin/PTX per compute capability, torch companion pairs."""

from __future__ import annotations

import pytest

from gpu_doctor.knowledge import arch, torch_pairs, wheels

CU121 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]


@pytest.mark.parametrize(("cap", "archs", "expected"), [
    ((8, 6), ["sm_80"], arch.Support.NATIVE),  # B1: same major, newer minor
    ((8, 0), ["sm_86"], arch.Support.NONE),  # B1: never backwards
    ((9, 0), ["sm_80", "sm_86"], arch.Support.NONE),  # no 8.x cubin runs on 9.0
    ((12, 0), CU121, arch.Support.NONE),  # RTX 5090 with a cu121 wheel (pytorch#150733)
    ((12, 1), ["sm_90", "compute_90"], arch.Support.PTX),  # B2: PTX for any newer GPU
    ((8, 9), ["compute_90"], arch.Support.NONE),  # PTX never runs on an older GPU
    ((9, 0), ["sm_90a"], arch.Support.NATIVE),  # B3: arch-specific, exact match only
    ((10, 3), ["sm_90a"], arch.Support.NONE),
    ((6, 1), CU121, arch.Support.NATIVE),  # GTX 1070 runs the sm_60 cubin
])
def test_support_rules(cap, archs, expected):
    assert arch.support_for(cap, archs) is expected


def test_parse_arch_and_capability():
    assert arch.parse_arch("compute_120") == arch.Arch("compute", 12, 0, False)
    assert arch.parse_arch("sm_90a") == arch.Arch("sm", 9, 0, True)
    assert arch.parse_arch("gfx90a") is None
    assert arch.parse_capability("8.6") == (8, 6)
    assert arch.parse_capability(None) is None


def test_wheel_arch_table_agrees_with_the_wheel_variants():
    for variant in wheels.CURRENT_VARIANTS:
        archs = arch.CURRENT_WHEEL_ARCHS[variant.tag]
        caps = [arch.parse_arch(a).capability for a in archs if a.startswith("sm_")]
        assert min(caps) == arch.parse_capability(str(variant.min_capability))
        assert max(c[0] for c in caps) == variant.max_capability_major


@pytest.mark.parametrize(("torch", "vision", "ok"), [
    ("2.0.1+cu117", "0.15.2+cu117", True), ("2.5.1", "0.20.1", True),
    ("2.5.1", "0.19.1", False), ("1.13.1", "0.14.1", True), ("2.11.0", "0.26.0", True),
])
def test_torchvision_pairs(torch, vision, ok):
    assert torch_pairs.torchvision_matches(torch_pairs.release_for(torch), vision) is ok


@pytest.mark.parametrize(("torch", "audio", "ok"), [
    ("2.0.1", "2.0.2", True),  # 2.0's odd pairing is at patch level; the minor matches
    ("2.5.1", "2.5.1", True), ("2.5.1", "2.4.1", False),
    ("2.11.0", "2.11.0", True), ("2.10.0", "2.11.0", False),
    ("1.13.1", "0.13.1", True),
])
def test_torchaudio_pairs(torch, audio, ok):
    assert torch_pairs.torchaudio_matches(torch_pairs.release_for(torch), audio) is ok


def test_unknown_release_gets_no_verdict():
    assert torch_pairs.release_for("2.13.0+cpu") is None
    assert torch_pairs.release_for("not a version") is None


def test_python_ranges():
    release = torch_pairs.release_for("2.9.0")
    assert torch_pairs.python_supported(release, "3.14.0") is True
    assert torch_pairs.python_supported(release, "3.9.18") is False
