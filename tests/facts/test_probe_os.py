"""OS probe: WSL1/WSL2 on real kernels' strings, containers, Slurm, and probe_os whole."""

from __future__ import annotations

import pytest

from ddp_doctor.facts.os_info import detect_container, detect_scheduler, detect_wsl, probe_os
from tests.support.fakes import FakeEnv
from tests.support.smi_captures import capture


def _uname_release(uname_a: str) -> str:
    """`uname -a` is "Linux HOST RELEASE ...": the release is the third word."""
    return uname_a.split()[2]


# ---------------------------------------------------------------- WSL

# (capture, WSL version, the kernel release it shows) -- see fixtures/captures/SOURCES.md
PROC_VERSIONS = [
    ("wsl-kiri-28-wsl2-proc-version.txt", 2, "5.4.72-microsoft-standard-WSL2"),
    ("wsl-wsl-4555-wsl2-proc-version.txt", 2, "4.19.67-microsoft-standard"),
    ("wsl-wsl-4555-wsl1-proc-version.txt", 1, "4.4.0-18985-Microsoft"),
    ("wsl-wsl-1090-wsl1-proc-version.txt", 1, "3.4.0-Microsoft"),
]
UNAMES = [
    ("wsl-wsl2-linux-kernel-42-wsl2-uname.txt", 2, "4.19.59-microsoft-standard"),
    ("wsl-distrod-69-wsl1-uname.txt", 1, "4.4.0-19041-Microsoft"),
]


@pytest.mark.parametrize(("name", "version", "release"), PROC_VERSIONS)
def test_wsl_from_proc_version(name, version, release):
    text = capture(name)
    assert text.split()[2] == release  # "Linux version RELEASE ..."
    # The probe sees both: the release from uname(2) and the whole /proc/version.
    wsl = detect_wsl(release, text, {})
    assert wsl == {"is_wsl": True, "version": version, "evidence": release}
    # /proc/version alone is enough too.
    assert detect_wsl("", text, {}) == {"is_wsl": True, "version": version,
                                         "evidence": text.strip()}


@pytest.mark.parametrize(("name", "version", "release"), UNAMES)
def test_wsl_from_uname_release(name, version, release):
    assert _uname_release(capture(name)) == release
    assert detect_wsl(release, "", {}) == {"is_wsl": True, "version": version,
                                           "evidence": release}


def test_wsl1_earliest_uname_has_no_marker_but_proc_version_does():
    """WSL 2016 (microsoft/WSL#1090): `uname -a` says "3.4.0+" with no Microsoft at all."""
    release = _uname_release(capture("wsl-wsl-1090-wsl1-uname.txt"))
    assert release == "3.4.0+"
    assert detect_wsl(release, "", {})["is_wsl"] is False
    proc_version = capture("wsl-wsl-1090-wsl1-proc-version.txt")
    assert detect_wsl(release, proc_version, {}) == {"is_wsl": True, "version": 1,
                                                     "evidence": "3.4.0+"}


def test_wsl2_by_interop_variable_when_the_kernel_does_not_say():
    """A custom-built WSL2 kernel named "...-Microsoft" still runs under WSL2 interop."""
    wsl = detect_wsl("5.15.90.1-Microsoft", "", {"WSL_INTEROP": "/run/WSL/8_interop"})
    assert wsl == {"is_wsl": True, "version": 2, "evidence": "WSL_INTEROP is set"}


@pytest.mark.parametrize("release", ["6.8.0-45-generic", "5.15.0-1057-azure",
                                     "4.18.0-513.5.1.el8_9.x86_64"])
def test_native_linux_is_not_wsl(release):
    proc_version = (f"Linux version {release} (buildd@lcy02-amd64-014) (x86_64-linux-gnu-gcc-12 "
                    "(Ubuntu 12.3.0-1ubuntu1~22.04) 12.3.0) #45~22.04.1-Ubuntu SMP")
    assert detect_wsl(release, proc_version, {"WSL_INTEROP": "x"}) == {
        "is_wsl": False, "version": None, "evidence": None}


# ---------------------------------------------------------------- containers

DOCKER_CGROUP_V1 = """\
12:memory:/docker/4f3c1b5a9e0d7c2b8a6f1e3d5c7b9a0e2f4d6c8b1a3e5f7d9c0b2a4e6f8d1c3b
11:devices:/docker/4f3c1b5a9e0d7c2b8a6f1e3d5c7b9a0e2f4d6c8b1a3e5f7d9c0b2a4e6f8d1c3b
1:name=systemd:/docker/4f3c1b5a9e0d7c2b8a6f1e3d5c7b9a0e2f4d6c8b1a3e5f7d9c0b2a4e6f8d1c3b
"""
K8S_CGROUP_V1 = """\
12:pids:/kubepods/burstable/pod5d1c2e3f-8a9b-4c0d-9e1f-2a3b4c5d6e7f/0b6e1f2a3c4d
11:memory:/kubepods/burstable/pod5d1c2e3f-8a9b-4c0d-9e1f-2a3b4c5d6e7f/0b6e1f2a3c4d
1:name=systemd:/kubepods/burstable/pod5d1c2e3f-8a9b-4c0d-9e1f-2a3b4c5d6e7f/0b6e1f2a3c4d
"""
CGROUP_V2_NAMESPACED = "0::/\n"  # what a container on a cgroup v2 host sees


def test_docker_by_dockerenv():
    env = FakeEnv(files={"/.dockerenv": "", "/proc/1/cgroup": CGROUP_V2_NAMESPACED})
    assert detect_container(env, {}) == {"in_container": True, "kind": "docker",
                                         "evidence": ["/.dockerenv exists"]}


def test_docker_by_cgroup_v1():
    env = FakeEnv(files={"/proc/1/cgroup": DOCKER_CGROUP_V1})
    assert detect_container(env, {}) == {"in_container": True, "kind": "docker",
                                         "evidence": ["/proc/1/cgroup mentions docker"]}


def test_podman_by_containerenv():
    env = FakeEnv(files={"/run/.containerenv": "engine=\"podman-4.9.3\"\n",
                         "/proc/1/cgroup": CGROUP_V2_NAMESPACED})
    result = detect_container(env, {"container": "podman"})
    assert result == {"in_container": True, "kind": "podman",
                      "evidence": ["/run/.containerenv exists", "container=podman"]}


def test_kubernetes_by_kubepods_cgroup():
    env = FakeEnv(files={"/proc/1/cgroup": K8S_CGROUP_V1})
    assert detect_container(env, {}) == {"in_container": True, "kind": "kubernetes",
                                         "evidence": ["/proc/1/cgroup mentions kubepods"]}


def test_kubernetes_service_host_wins_over_docker():
    env = FakeEnv(files={"/.dockerenv": "", "/proc/1/cgroup": CGROUP_V2_NAMESPACED})
    result = detect_container(env, {"KUBERNETES_SERVICE_HOST": "10.96.0.1"})
    assert result["kind"] == "kubernetes"
    assert result["evidence"] == ["/.dockerenv exists", "KUBERNETES_SERVICE_HOST is set"]


def test_bare_metal_is_no_container():
    env = FakeEnv(files={"/proc/1/cgroup": "0::/init.scope\n"})
    assert detect_container(env, {"HOME": "/root"}) == {"in_container": False, "kind": None,
                                                         "evidence": []}


# ---------------------------------------------------------------- Slurm


def test_slurm_allocation():
    environ = {
        "SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "16",
        "SLURM_GPUS_ON_NODE": "8", "SLURM_CPUS_ON_NODE": "64",
        "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7", "SLURM_CONF": "/etc/slurm/slurm.conf",
    }
    assert detect_scheduler(environ) == {
        "slurm": True, "slurm_job_id": "4242", "slurm_job_num_nodes": "2",
        "slurm_ntasks": "16", "slurm_gpus_on_node": "8", "slurm_cpus_on_node": "64",
        "slurm_job_gpus": "0,1,2,3,4,5,6,7",
    }


def test_slurm_login_node_without_a_job_is_no_allocation():
    assert detect_scheduler({"SLURM_CONF": "/etc/slurm/slurm.conf"}) == {"slurm": False}


# ---------------------------------------------------------------- probe_os


# /usr/lib/wsl/lib on a WSL2 machine with an NVIDIA GPU: the libraries the Windows driver
# maps in (microsoft/WSL#8587, #8174; ollama/ollama#1897).
WSL_LIB_FILES = ["libcuda.so", "libcuda.so.1", "libcuda.so.1.1", "libd3d12.so",
                 "libd3d12core.so", "libdxcore.so", "libnvidia-ml.so.1", "nvidia-smi"]


def test_probe_os_on_a_wsl2_box():
    proc_version = capture("wsl-kiri-28-wsl2-proc-version.txt")
    env = FakeEnv(
        files={"/proc/version": proc_version, "/proc/1/cgroup": "0::/\n",
               **{f"/usr/lib/wsl/lib/{name}": "" for name in WSL_LIB_FILES}},
        env={"WSL_DISTRO_NAME": "Ubuntu-20.04", "WSL_INTEROP": "/run/WSL/8_interop",
             "PATH": "/usr/bin:/usr/lib/wsl/lib"},
        plat={"system": "Linux", "release": "5.4.72-microsoft-standard-WSL2",
              "version": "#1 SMP Wed Oct 28 23:40:43 UTC 2020", "machine": "x86_64",
              "node": "DESKTOP-7Q2K9", "python": "3.8.10"},
        release={"id": "ubuntu", "name": "Ubuntu", "version": "20.04",
                 "pretty": "Ubuntu 20.04.6 LTS"},
    )
    facts = probe_os(env)
    assert facts == {
        "system": "Linux",
        "kernel": "5.4.72-microsoft-standard-WSL2",
        "machine": "x86_64",
        "hostname": "DESKTOP-7Q2K9",
        "distro": {"id": "ubuntu", "name": "Ubuntu", "version": "20.04",
                   "pretty": "Ubuntu 20.04.6 LTS"},
        "proc_version": proc_version.strip(),
        "wsl": {
            "is_wsl": True, "version": 2, "evidence": "5.4.72-microsoft-standard-WSL2",
            "lib_dir": "/usr/lib/wsl/lib", "lib_dir_files": sorted(WSL_LIB_FILES),
            "distro_name": "Ubuntu-20.04",
        },
        "container": {"in_container": False, "kind": None, "evidence": []},
        "scheduler": {"slurm": False},
    }
    assert env.calls == []  # reading the OS needs no commands


def test_probe_os_native_in_docker_and_broken_os_release():
    class BrokenRelease(FakeEnv):
        def os_release(self):
            raise OSError("[Errno 2] No such file or directory: '/etc/os-release'")

    env = BrokenRelease(files={"/.dockerenv": "", "/proc/1/cgroup": "0::/\n"})
    facts = probe_os(env)
    assert facts["kernel"] == "6.8.0-45-generic"
    assert facts["distro"] == {"error": "[Errno 2] No such file or directory: '/etc/os-release'"}
    assert facts["proc_version"] is None
    assert facts["wsl"] == {"is_wsl": False, "version": None, "evidence": None}
    assert facts["container"]["kind"] == "docker"
