"""Host probe through FakePsutil: /dev/shm, cgroup memory caps, CPU and limits."""

from __future__ import annotations

from ddp_doctor.facts.host import probe_host
from tests.support.fakes import FakeEnv, FakePsutil

GIB = 1024**3
MIB = 1024**2
WORKDIR = "/workspace"


def _env(**kwargs) -> FakeEnv:
    return FakeEnv(**kwargs)


def test_docker_default_64mib_shm():
    """`docker run` without --shm-size/--ipc=host: /dev/shm is a 64 MiB tmpfs."""
    psutil = FakePsutil(memory_total=251 * GIB, memory_available=240 * GIB, swap_total=0,
                        cpu_logical=32, cpu_physical=16, affinity=8,
                        nofile=(1048576, 1048576),
                        disks={"/dev/shm": (64 * MIB, 64 * MIB), "/": (100 * GIB, 40 * GIB)})
    env = _env(dirs={"/dev/shm"}, fake_psutil=psutil,
               files={"/sys/fs/cgroup/memory.max": "34359738368\n"})
    facts = probe_host(env, workdir=WORKDIR)
    assert facts == {
        "cpu_logical": 32,
        "cpu_physical": 16,
        "cpu_affinity": 8,
        "memory_total": 251 * GIB,
        "memory_available": 240 * GIB,
        "swap_total": 0,
        "cgroup_memory_limit": 32 * GIB,
        "shm": {"path": "/dev/shm", "total": 64 * MIB, "free": 64 * MIB, "used": 0},
        "disk": {"path": WORKDIR, "total": 100 * GIB, "free": 40 * GIB, "used": 60 * GIB},
        "nofile_limit": {"soft": 1048576, "hard": 1048576},
        "rendezvous_port": {"port": 29500, "source": "torchrun default", "in_use": False,
                            "pid": None, "process": None,
                            "method": "psutil.net_connections", "error": None},
    }


def test_missing_dev_shm():
    env = _env(fake_psutil=FakePsutil(disks={"/": (100 * GIB, 50 * GIB)}))
    facts = probe_host(env, workdir=WORKDIR)
    assert facts["shm"] == {"path": "/dev/shm", "missing": True}
    assert facts["disk"]["free"] == 50 * GIB


def test_shm_mounted_but_unreadable_is_none():
    env = _env(dirs={"/dev/shm"}, fake_psutil=FakePsutil(disks={}))
    facts = probe_host(env, workdir=WORKDIR)
    assert facts["shm"] is None
    assert facts["disk"] is None


def test_cgroup_v2_unlimited_is_none():
    env = _env(files={"/sys/fs/cgroup/memory.max": "max\n"})
    assert probe_host(env, workdir=WORKDIR)["cgroup_memory_limit"] is None


def test_cgroup_v2_number_is_the_limit():
    env = _env(files={"/sys/fs/cgroup/memory.max": "8589934592\n"})
    assert probe_host(env, workdir=WORKDIR)["cgroup_memory_limit"] == 8 * GIB


def test_cgroup_v1_limit_and_unlimited():
    path = "/sys/fs/cgroup/memory/memory.limit_in_bytes"
    assert probe_host(_env(files={path: "17179869184\n"}),
                      workdir=WORKDIR)["cgroup_memory_limit"] == 16 * GIB
    # cgroup v1 says "unlimited" with the largest page-aligned 64-bit number.
    assert probe_host(_env(files={path: "9223372036854771712\n"}),
                      workdir=WORKDIR)["cgroup_memory_limit"] is None


def test_no_cgroup_files_is_none_and_defaults_pass_through():
    facts = probe_host(_env(), workdir=WORKDIR)
    assert facts["cgroup_memory_limit"] is None
    assert facts["cpu_logical"] == 16
    assert facts["cpu_physical"] == 8
    assert facts["cpu_affinity"] == 16  # no affinity mask: every CPU
    assert facts["nofile_limit"] == {"soft": 1024, "hard": 1048576}
    assert facts["memory_total"] == 64 * GIB


def test_platform_without_rlimit():
    class NoRlimit(FakePsutil):
        def __getattribute__(self, name):
            if name == "RLIMIT_NOFILE":  # psutil defines it on Linux only
                raise AttributeError(name)
            return super().__getattribute__(name)

    facts = probe_host(_env(fake_psutil=NoRlimit()), workdir=WORKDIR)
    assert facts["nofile_limit"] is None
    assert facts["cpu_logical"] == 16
