"""probe_interconnect on fake machines: IOMMU flags/groups, InfiniBand ports, interfaces."""

from __future__ import annotations

from ddp_doctor.facts.interconnect import probe_interconnect
from tests.fixtures.facts.build_interconnect import ACTIVE_NDR, LO, interconnect_env
from tests.support.fakes import FakeEnv


def test_iommu_on_with_groups_and_no_passthrough():
    """NVIDIA/nccl#199's setup: VT-d on (intel_iommu=on), so ACS redirects PCIe P2P."""
    env = interconnect_env("BOOT_IMAGE=/vmlinuz ro intel_iommu=on quiet", iommu_groups=87)
    iommu = probe_interconnect(env)["iommu"]
    assert iommu == {"cmdline_flags": ["intel_iommu=on"], "groups": 87, "enabled": True,
                     "passthrough": False, "cmdline_read": True}


def test_iommu_passthrough_and_off():
    on_pt = probe_interconnect(interconnect_env("ro intel_iommu=on iommu=pt", iommu_groups=3))
    assert on_pt["iommu"]["enabled"] and on_pt["iommu"]["passthrough"]
    off = probe_interconnect(interconnect_env("ro amd_iommu=off", iommu_groups=0))["iommu"]
    assert off["enabled"] is False and off["cmdline_flags"] == ["amd_iommu=off"]


def test_infiniband_ports_with_state_rate_and_link_layer():
    env = interconnect_env("ro", ib={"mlx5_0": ACTIVE_NDR,
                                     "mlx5_1": ("1: DOWN", "10 Gb/sec (4X SDR)", "Ethernet")})
    ports = probe_interconnect(env)["infiniband"]
    assert ports == [
        {"device": "mlx5_0", "port": 1, "state": "4: ACTIVE", "active": True,
         "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand"},
        {"device": "mlx5_1", "port": 1, "state": "1: DOWN", "active": False,
         "rate": "10 Gb/sec (4X SDR)", "link_layer": "Ethernet"},
    ]


def test_interfaces_with_addresses_up_state_and_speed():
    env = interconnect_env("ro", nics={**LO, "eth0": (True, 25000, 9000, ["10.0.0.5"]),
                                       "eth1": (False, 0, 1500, [])})
    by_name = {i["name"]: i for i in probe_interconnect(env)["interfaces"]}
    assert by_name["eth0"] == {"name": "eth0", "up": True, "speed_mbps": 25000, "mtu": 9000,
                               "addresses": [{"family": "ipv4", "address": "10.0.0.5"}]}
    assert by_name["eth1"]["up"] is False and by_name["eth1"]["speed_mbps"] is None
    assert by_name["lo"]["addresses"] == [{"family": "ipv4", "address": "127.0.0.1"}]


def test_a_failing_part_is_recorded_and_the_rest_survives():
    """A psutil without net_if_addrs (very old psutil) loses only the interfaces."""
    env = FakeEnv(files={"/proc/cmdline": "ro iommu=pt\n"})
    value = probe_interconnect(env)
    assert value["interfaces"] is None
    assert value["errors"]["interfaces"].startswith("AttributeError")
    assert value["iommu"]["passthrough"] is True and value["infiniband"] == []
    assert env.calls == []
