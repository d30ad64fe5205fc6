"""knowledge/xid.py (the common Xids) and knowledge/links.py (link rates, clock reasons)."""

from __future__ import annotations

import csv
from pathlib import Path

from ddp_doctor.knowledge.links import (
    CLOCK_REASONS,
    SLOWING_BITS,
    active_reasons,
    board_lanes,
    pcie_gbps,
    reasons_mask,
)
from ddp_doctor.knowledge.xid import XID_CATALOG_TABLE, XIDS, Blame, describe

MAPPING = Path(__file__).parents[1] / "fixtures" / "knowledge" / "xid-resolution-buckets.csv"

COMMON = [8, 13, 31, 32, 43, 45, 46, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119,
          120, 136, 140, 143, 144, 145, 146, 147, 148, 149, 150, 154, 155, 158]


def nvidia_mapping() -> dict[int, tuple[str, str, str]]:
    """NVIDIA's rows: number -> (mnemonic, immediate action, FATAL/NONFATAL)."""
    with MAPPING.open(newline="", encoding="utf-8") as rows:
        return {int(r[0]): (r[1].strip(), r[2].strip(), r[3].strip()) for r in csv.reader(rows)}


def test_the_table_holds_exactly_the_common_xids_each_with_meaning_and_action():
    assert sorted(XIDS) == COMMON
    for xid, info in XIDS.items():
        assert info.xid == xid
        assert info.meaning and info.action and info.action.endswith(".")


def test_every_rows_action_and_fatality_are_nvidias():
    mapping = nvidia_mapping()
    assert sorted(mapping) == COMMON
    for xid, info in XIDS.items():
        _, bucket, fatal = mapping[xid]
        assert info.fatal is (fatal == "FATAL"), xid
        expected = "FOLLOW_THE_OTHER_XID" if xid == 154 else bucket  # NVIDIA's is prose there
        assert info.bucket == expected, xid
        assert "bucket" in info.confirmed


def test_every_name_is_the_drivers_or_nvidias_mapping():
    """The header's name where it has one; where it has none, the mapping's mnemonic. The
    header and the mapping disagree only on 63/64 (PAGE vs DRAM retirement: one event)."""
    mapping = nvidia_mapping()
    for xid, info in XIDS.items():
        mnemonic = mapping[xid][0]
        if "name" in info.confirmed:
            assert info.driver_name in mnemonic or xid in (63, 64), xid
        else:
            assert info.driver_name == mnemonic, xid
    assert XIDS[109].driver_name == "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR"


def test_non_fatal_hardware_xids_leave_the_gpu_working():
    still_works = sorted(x for x, i in XIDS.items()
                         if i.blame is not Blame.APPLICATION and i.gpu_still_works)
    assert still_works == [63, 92, 94, 154]
    assert not XIDS[95].gpu_still_works and not XIDS[79].gpu_still_works


def test_who_is_blamed_first():
    application = sorted(x for x, i in XIDS.items() if i.blame is Blame.APPLICATION)
    assert application == [8, 13, 31, 32, 43, 45, 68, 69]
    assert XIDS[79].blame is Blame.HARDWARE and XIDS[119].blame is Blame.DRIVER
    # Every Xid the catalogue answers with a restart of the program is the program's first,
    # except the contained ECC error (94), whose cause is the memory.
    restart_app = [x for x, i in XIDS.items() if i.bucket == "RESTART_APP"]
    assert [x for x in restart_app if XIDS[x].blame is not Blame.APPLICATION] == [94]


def test_an_unknown_xid_points_to_the_catalogue_and_is_not_blamed_on_the_program():
    info = describe(151)
    assert info.blame is Blame.HARDWARE
    assert XID_CATALOG_TABLE in info.action
    assert info.confirmed == () and info.bucket is None and not info.gpu_still_works


def test_pcie_rates():
    assert pcie_gbps(3, 16) == 0.985 * 16
    assert pcie_gbps(4, 8) == 1.969 * 8
    assert pcie_gbps(None, 16) is None and pcie_gbps(3, None) is None and pcie_gbps(9, 16) is None


def test_clock_reasons_names_and_which_slow_the_gpu():
    assert [r.bit for r in CLOCK_REASONS] == [1 << i for i in range(9)]
    assert SLOWING_BITS == 0x8 | 0x20 | 0x40 | 0x80
    assert [r.name for r in active_reasons(0x1 | 0x40)] == ["Idle", "HW Thermal Slowdown"]
    assert active_reasons(None) == [] and active_reasons(0) == []
    assert reasons_mask({"Idle": True, "HW Slowdown": False, "sw power cap": True,
                         "Unknown Reason": True}) == 0x1 | 0x4


def test_boards_wired_for_eight_lanes():
    assert [board_lanes(m) for m in ("NVIDIA GeForce RTX 3050", "NVIDIA GeForce RTX 4060 Ti",
                                     "NVIDIA GeForce RTX 5060 Ti", "NVIDIA GeForce RTX 5050")] \
        == [8, 8, 8, 8]
    assert [board_lanes(m) for m in ("NVIDIA GeForce RTX 3060", "NVIDIA GeForce RTX 4070",
                                     "NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4060 Laptop GPU",
                                     None, "")] == [None] * 6
