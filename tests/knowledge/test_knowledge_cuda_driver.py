"""The CUDA/driver table and the minor-version-compatibility rule, at their edges.

Values from the CUDA release notes' tables (knowledge module docstring has the URLs).
"""

from __future__ import annotations

import pytest

from ddp_doctor.knowledge.cuda_driver import (
    TOOLKIT_DRIVERS,
    Verdict,
    compatibility,
    driver_branch_for,
    max_cuda_for_driver,
    min_driver,
    parse_cuda,
    parse_driver,
    toolkit_min_driver,
)


@pytest.mark.parametrize(("text", "parsed"), [
    ("535.129.03", (535, 129, 3)), ("566.36", (566, 36)), ("470.129.06", (470, 129, 6)),
    ("", None), (None, None), ("ERR!", None), ("N/A", None),
])
def test_parse_driver(text, parsed):
    assert parse_driver(text) == parsed


@pytest.mark.parametrize(("text", "parsed"), [
    ("12.8", (12, 8)), ("12.8.1", (12, 8)), ("13", (13, 0)), ("11.0", (11, 0)),
    (None, None), ("cpu", None),
])
def test_parse_cuda(text, parsed):
    assert parse_cuda(text) == parsed


@pytest.mark.parametrize(("cuda", "linux", "windows"), [
    ("13.2", "595.45.04", "595"),  # Windows: N/A in the table, the branch stands in
    ("13.0", "580.65.06", "580"),
    ("12.9", "575.51.03", "576.02"),
    ("12.8", "570.26", "570.65"),
    ("12.6", "560.28.03", "560.76"),
    ("12.4", "550.54.14", "551.61"),
    ("12.2", "535.54.03", "536.25"),
    ("12.0", "525.60.13", "527.41"),
    ("11.8", "520.61.05", "520.06"),
    ("11.4", "470.42.01", "471.11"),
    ("11.0", "450.51.05", "451.48"),
    ("10.2", "440.33", "441.22"),
    ("13.3", "610", "610"),  # only the branch was published
    ("12.7", None, None),  # there is no CUDA 12.7 toolkit
])
def test_toolkit_minimum_is_the_ga_release_per_os(cuda, linux, windows):
    assert toolkit_min_driver(cuda, "linux") == linux
    assert toolkit_min_driver(cuda, "windows") == windows


@pytest.mark.parametrize(("cuda", "os", "expected"), [
    ("12.8", "linux", "525.60.13"), ("12.8", "windows", "528.33"),
    ("12.0", "linux", "525.60.13"),
    ("11.8", "linux", "450.80.02"), ("11.0", "windows", "452.39"),
    ("13.2", "linux", "580.65.06"), ("13.0", "windows", "580"),
    ("10.2", "linux", "440.33"),  # no minor-version compatibility before CUDA 11
])
def test_min_driver_with_minor_version_compatibility(cuda, os, expected):
    assert min_driver(cuda, os) == expected


def test_min_driver_without_minor_version_compatibility_is_the_toolkit_row():
    assert min_driver("12.8", "linux", allow_minor_compat=False) == "570.26"
    assert min_driver("12.8", "windows", allow_minor_compat=False) == "570.65"


def test_min_driver_rejects_an_unknown_os():
    with pytest.raises(ValueError):
        min_driver("12.8", "macos")


@pytest.mark.parametrize(("cuda", "branch"), [
    ("13.0", "R580"), ("13.1", "R590"), ("13.2", "R595"), ("12.9", "R575"), ("12.8", "R570"),
    ("12.4", "R550"), ("12.2", "R535"), ("12.1", "R530"), ("11.8", "R520"), ("11.7", "R515"),
    ("13.3", "R610"), ("12.7", None), ("junk", None),
])
def test_driver_branch_for(cuda, branch):
    assert driver_branch_for(cuda) == branch


@pytest.mark.parametrize(("driver", "os", "cuda"), [
    ("470.129.06", "linux", "11.4"),  # bsyonline V100 server: nvidia-smi says 11.4
    ("535.129.03", "linux", "12.2"),  # DCGM#120 H800: nvidia-smi says 12.2
    ("546.80", "windows", "12.3"),  # WSL#11589 (CUDA Version: ERR!): 546.12 <= 546.80
    ("566.36", "windows", "12.6"),  # nvidia-smi says 12.7 (no 12.7 toolkit to derive it)
    ("580.65.06", "linux", "13.0"),
    ("440.33", "linux", "10.2"),
    ("400.1", "linux", None),
    ("junk", "linux", None),
])
def test_max_cuda_for_driver(driver, os, cuda):
    assert max_cuda_for_driver(driver, os) == cuda


def test_table_rows_are_sorted_newest_first_and_well_formed():
    versions = [parse_cuda(r.cuda) for r in TOOLKIT_DRIVERS]
    assert versions == sorted(versions, reverse=True)
    for row in TOOLKIT_DRIVERS:
        assert parse_driver(row.linux), row
        assert row.windows is None or parse_driver(row.windows), row
        assert (row.windows is None) == row.cuda.startswith("13."), row


# ------------------------------------------------------------------ the rule's edges


@pytest.mark.parametrize(("build", "driver", "driver_cuda", "verdict"), [
    # Same or newer: supported (drivers are backward compatible).
    ("12.4", "550.54.14", "12.4", Verdict.SUPPORTED),
    ("11.7", "595.71.05", "13.2", Verdict.SUPPORTED),
    # Same major, older minor, driver above the MVC minimum: runs with limits.
    ("12.8", "535.129.03", "12.2", Verdict.MINOR_COMPAT),
    ("12.8", "525.60.13", "12.0", Verdict.MINOR_COMPAT),  # exactly the minimum
    ("11.7", "470.129.06", "11.4", Verdict.MINOR_COMPAT),
    ("11.8", "450.80.02", "11.0", Verdict.MINOR_COMPAT),
    # Same major but below the MVC minimum (early R450 builds shipped with 11.0).
    ("11.8", "450.51.06", "11.0", Verdict.TOO_OLD),
    # Older major: error 35.
    ("13.0", "575.57.08", "12.9", Verdict.TOO_OLD),
    ("12.1", "470.129.06", "11.4", Verdict.TOO_OLD),
    # CUDA 10 has no minor-version compatibility (pytorch#28321: 410.104 under 10.1).
    ("10.1", "410.104", "10.0", Verdict.TOO_OLD),
    ("10.2", "440.33", "10.2", Verdict.SUPPORTED),
    # Not enough to tell.
    (None, "535.129.03", "12.2", Verdict.UNKNOWN),
    ("12.8", None, None, Verdict.UNKNOWN),
    ("12.8", None, "12.2", Verdict.UNKNOWN),  # MVC needs the driver build to compare
])
def test_compatibility_verdicts(build, driver, driver_cuda, verdict):
    assert compatibility(build, driver, driver_cuda).verdict is verdict


def test_windows_driver_numbers_are_judged_with_the_windows_column():
    """WSL2 runs on the Windows driver: 528.33 is Windows' 12.x MVC floor, not Linux's
    (the sources disagree between 527.41 and 528.33; the later value is the safe one)."""
    linux = compatibility("12.4", "528.33", "12.0", "linux")
    windows = compatibility("12.4", "528.33", "12.0", "windows")
    assert windows.verdict is Verdict.MINOR_COMPAT
    assert windows.needed_driver == "528.33"
    assert linux.verdict is Verdict.MINOR_COMPAT  # 528.33 >= 525.60.13 as a Linux number too
    assert compatibility("12.4", "527.41", "12.0", "windows").verdict is Verdict.TOO_OLD
    assert compatibility("12.4", "526.98", "12.0", "linux").verdict is Verdict.MINOR_COMPAT


def test_missing_driver_cuda_is_derived_from_the_table_and_says_so():
    """WSL#11589: nvidia-smi prints 'CUDA Version: ERR!' under Windows driver 546.80."""
    compat = compatibility("12.4", "546.80", None, "windows")
    assert compat.driver_cuda == "12.3"
    assert compat.driver_cuda_derived is True
    assert compat.verdict is Verdict.MINOR_COMPAT
    reported = compatibility("12.4", "546.80", "12.3", "windows")
    assert reported.driver_cuda_derived is False


def test_compatibility_names_what_to_install():
    compat = compatibility("13.0", "535.129.03", "12.2")
    assert (compat.needed_driver, compat.full_driver, compat.branch) == (
        "580.65.06", "580.65.06", "R580")
    compat = compatibility("12.8", "470.129.06", "11.4")
    assert (compat.needed_driver, compat.full_driver, compat.branch) == (
        "525.60.13", "570.26", "R570")


def test_wsl2_r580_windows_driver_without_nvml_cuda_is_not_called_too_old():
    """13.x rows have no Windows build, only the branch; a Windows 581.57
    driver (WSL2, 'CUDA Version: ERR!') supports CUDA 13.0, not 12.9."""
    assert max_cuda_for_driver("581.57", "windows") == "13.0"
    assert max_cuda_for_driver("596.10", "windows") == "13.2"
    compat = compatibility("13.0", "581.57", None, "windows")
    assert compat.driver_cuda_derived is True
    assert compat.verdict is Verdict.SUPPORTED


def test_derived_cuda_version_never_makes_a_driver_above_the_minimum_too_old():
    """The table is a lower bound: driver 581.57 is >= the 13.x floor (580), so a CUDA 13.2
    build is at worst minor-version compatible there, never 'too old'."""
    compat = compatibility("13.2", "581.57", None, "windows")
    assert compat.verdict is Verdict.MINOR_COMPAT
