"""Compatibility rules: cubin/PTX per compute capability, torch companion pairs."""

from __future__ import annotations

import pytest

from ddp_doctor.knowledge import arch, torch_pairs, wheels

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
    """Every current variant has an arch list, and none carries sm_110 (Jetson Thor): that
    is only in the aarch64 CUDA 13 builds (knowledge §2.3)."""
    for variant in wheels.CURRENT_VARIANTS:
        assert variant.archs == arch.CURRENT_WHEEL_ARCHS[variant.tag]
        assert arch.support_for((11, 0), list(variant.archs)) is not arch.Support.NATIVE


@pytest.mark.parametrize(("cap", "archs", "expected"), [
    ((8, 7), ["sm_80", "sm_86"], arch.Support.NONE),  # Orin: no dGPU cubin (B5)
    ((7, 2), ["sm_70"], arch.Support.NONE),  # Xavier
    ((8, 7), ["sm_80", "sm_87"], arch.Support.NATIVE),
    ((8, 7), ["sm_80", "compute_80"], arch.Support.PTX),  # PTX still JIT-compiles
    ((8, 9), ["sm_80", "sm_87"], arch.Support.NATIVE),  # sm_80 still serves an L4 (8.9)
])
def test_jetson_capabilities_take_only_their_own_cubin(cap, archs, expected):
    """knowledge §2.2 B5: torch's DEVICE_REQUIREMENT excludes 8.7 from sm_80/sm_86 and 7.2
    from sm_70."""
    assert arch.support_for(cap, archs) is expected


def _rec(driver_cuda, caps, python, driver=None):
    return wheels.recommend(driver_cuda, caps, python, driver)


def test_recommend_prefers_full_support_over_minor_version_compat():
    """Driver 590 (CUDA 13.1) with an RTX 4070: cu130, not cu132 (MVC)."""
    rec = _rec("13.1", [(8, 9)], "3.11.9", "590.48.01")
    assert (rec.install.tag, rec.install.torch, rec.install.minor_compat) == ("cu130", None, False)
    assert rec.blocked == ()
    assert _rec("13.2", [(8, 9)], "3.11", "595.45.04").install.tag == "cu132"


def test_recommend_blackwell_on_r570_names_the_driver_and_the_older_release():
    """Sm_120 on R570 (CUDA 12.8): no current build has both; torch 2.11
    cu128 runs now, R580 (580.65.06) for the current cu130 build."""
    rec = _rec("12.8", [(12, 0)], "3.11.9", "570.133.07")
    assert rec.blocked == ("driver",)
    assert (rec.install.torch, rec.install.torchvision, rec.install.tag) == (
        "2.11.0", "0.26.0", "cu128")
    assert (rec.driver_branch, rec.driver_needed, rec.current.tag) == ("580", "580.65.06",
                                                                       "cu130")
    assert rec.install.command("/venv/bin/python -m pip") == (
        "/venv/bin/python -m pip install torch==2.11.0 torchvision==0.26.0 "
        "--index-url https://download.pytorch.org/whl/cu128")


def test_recommend_v100_on_r470_with_python_38():
    """The torch_missing machine: torch 2.0.1 cu117 (what the healthy V100
    fixture runs on the same driver); current torch needs 525.60.13 and Python 3.10+."""
    rec = _rec("11.4", [(7, 0)], "3.8.10", "470.129.06")
    assert set(rec.blocked) == {"driver", "python"}
    assert (rec.install.torch, rec.install.torchvision, rec.install.tag) == (
        "2.0.1", "0.15.2", "cu117")
    assert rec.install.minor_compat is True
    assert (rec.driver_needed, rec.current.tag) == ("525.60.13", "cu126")


@pytest.mark.parametrize(("driver_cuda", "caps", "python", "tag", "torch"), [
    ("13.0", [(7, 0)], "3.11", "cu126", None),  # V100 on R580: only cu126 has sm_70
    ("13.0", [(7, 0), (9, 0)], "3.11", "cu126", None),  # mixed box: both need kernels
    ("13.0", [(7, 0), (12, 0)], "3.11", "cu128", "2.10.0"),  # V100 + RTX 5090: 2.10 cu128
    ("12.2", [(7, 0)], "3.8", "cu121", "2.4.1"),  # R535, Python 3.8: newest for 3.8
    (None, [(9, 0)], "3.11", "cu130", None),  # no driver: the R580 build
])
def test_recommend_checks_every_gpu_and_python(driver_cuda, caps, python, tag, torch):
    install = _rec(driver_cuda, caps, python).install
    assert (install.tag, install.torch) == (tag, torch)


def test_recommend_never_offers_a_build_without_kernels_for_jetson_thor():
    """CC 11.0 has no x86 cu13x kernels."""
    rec = _rec("13.0", [(11, 0)], "3.11")
    assert "gpu" in rec.blocked


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
    assert torch_pairs.release_for("2.14.0+cpu") is None
    assert torch_pairs.release_for("2.13.0+cpu").torchvision == "0.28"
    assert torch_pairs.release_for("not a version") is None


def test_python_ranges():
    release = torch_pairs.release_for("2.9.0")
    assert torch_pairs.python_supported(release, "3.14.0") is True
    assert torch_pairs.python_supported(release, "3.9.18") is False
