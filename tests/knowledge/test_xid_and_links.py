"""knowledge/xid.py (the common Xids) and knowledge/links.py (link rates, clock reasons)."""

from __future__ import annotations

from ddp_doctor.knowledge.links import (
    CLOCK_REASONS,
    SLOWING_BITS,
    active_reasons,
    pcie_gbps,
    reasons_mask,
)
from ddp_doctor.knowledge.xid import XID_CATALOG_TABLE, XIDS, Blame, describe

COMMON = [13, 31, 43, 45, 48, 61, 62, 63, 64, 68, 69, 74, 79, 92, 94, 95, 109, 119, 120, 140,
          143, 154]


def test_the_table_holds_exactly_the_common_xids_each_with_meaning_and_action():
    assert sorted(XIDS) == COMMON
    for xid, info in XIDS.items():
        assert info.xid == xid
        assert info.meaning and info.action and info.action.endswith(".")


def test_what_could_not_be_confirmed_is_marked():
    """Every name but 109's is the driver header's (nverror.h); 109 is confirmed nowhere."""
    unconfirmed = [x for x, info in XIDS.items() if not info.confirmed]
    assert unconfirmed == [109]
    assert XIDS[109].driver_name is None
    assert all(info.driver_name for x, info in XIDS.items() if x != 109)


def test_who_is_blamed_first():
    application = sorted(x for x, i in XIDS.items() if i.blame is Blame.APPLICATION)
    assert application == [13, 31, 43, 45, 68, 69]
    assert XIDS[79].blame is Blame.HARDWARE and XIDS[119].blame is Blame.DRIVER


def test_an_unknown_xid_points_to_the_catalogue_and_is_not_blamed_on_the_program():
    info = describe(150)
    assert info.blame is Blame.HARDWARE
    assert XID_CATALOG_TABLE in info.action
    assert info.confirmed == ()


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
