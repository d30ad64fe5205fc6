"""WSL probe on FakeEnv: the wsl2_rtx4070 machine, WSL1, a Linux driver inside WSL."""

from __future__ import annotations

from ddp_doctor.facts.seam import CommandResult
from ddp_doctor.facts.wsl import parse_size, parse_wslconfig, probe_wsl
from tests.conftest import load_fixture_facts
from tests.support.fakes import FakeEnv, ok
from tests.support.smi_captures import capture

LIB = "/usr/lib/wsl/lib"
LDCONFIG = ("\t3 libs found in cache `/etc/ld.so.cache'\n"
            "\tlibnvidia-ml.so.1 (libc6,x86-64) => /usr/lib/wsl/lib/libnvidia-ml.so.1\n"
            "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/wsl/lib/libcuda.so.1\n"
            "\tlibcuda.so (libc6,x86-64) => /usr/lib/wsl/lib/libcuda.so\n"
            "\tlibc.so.6 (libc6,x86-64) => /lib/x86_64-linux-gnu/libc.so.6\n")


def wsl2_env(**overrides) -> FakeEnv:
    """The laptop of the wsl2_rtx4070 fixture (kernel string from leoheck/kiri#28)."""
    facts = load_fixture_facts("wsl2_rtx4070")
    files = {f"{LIB}/{n}": "" for n in facts["os"]["wsl"]["lib_dir_files"]}
    files["/proc/version"] = capture("wsl-kiri-28-wsl2-proc-version.txt")
    files["/proc/modules"] = ""
    files["/var/lib/dpkg/status"] = ""
    env = FakeEnv(files=files, env=dict(facts["env_vars"]),
                  plat={"system": "Linux", "release": facts["os"]["kernel"]},
                  commands=[(("ldconfig", "-p"), ok(LDCONFIG)),
                            (("dpkg-query",), ok("ii  libc6 2.31-0ubuntu9.16\n"))])
    for key, value in overrides.items():
        setattr(env, key, value)
    return env


def test_native_linux_is_answered_without_running_anything():
    env = FakeEnv()
    assert probe_wsl(env) == {"is_wsl": False}
    assert env.calls == []


def test_healthy_wsl2_laptop_matches_the_fixture():
    wsl = probe_wsl(wsl2_env())
    assert wsl == load_fixture_facts("wsl2_rtx4070")["wsl"]
    assert wsl["libcuda_resolved"] == {"path": f"{LIB}/libcuda.so.1", "via": "ldconfig cache"}
    assert wsl["linux_driver"]["packages"] == []


def test_wsl1_kernel_from_distrod_69():
    """nullpo-head/wsl-distrod#69: `uname -a` on WSL1 says 4.4.0-19041-Microsoft."""
    uname = capture("wsl-distrod-69-wsl1-uname.txt").split()
    env = FakeEnv(plat={"system": "Linux", "release": uname[2]},
                  commands=[(("ldconfig", "-p"), ok("")),
                            (("dpkg-query",), ok(""))])
    wsl = probe_wsl(env)
    assert (wsl["is_wsl"], wsl["version"]) == (True, 1)
    assert wsl["libcuda_in_lib_dir"] is False
    assert wsl["libcuda_resolved"] == {"path": None, "via": None}


def test_linux_driver_inside_wsl_is_found_by_packages_and_files():
    """microsoft/WSL#11589: nvidia-smi 545.46 in WSL against Windows driver 546.80."""
    env = wsl2_env()
    env.files["/usr/lib/x86_64-linux-gnu/libcuda.so.545.29.06"] = ""
    env.links["/usr/lib/x86_64-linux-gnu/libcuda.so.1"] = "libcuda.so.545.29.06"
    env.links["/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"] = f"{LIB}/libnvidia-ml.so.1"
    env.commands = [
        (("ldconfig", "-p"), ok("\tlibcuda.so.1 (libc6,x86-64) => "
                                "/usr/lib/x86_64-linux-gnu/libcuda.so.1\n" + LDCONFIG)),
        (("dpkg-query",), ok("ii  nvidia-utils-545 545.29.06-0ubuntu0~gpu22.04.1\n"
                             "ii  libnvidia-compute-545:amd64 545.29.06-0ubuntu0~gpu22.04.1\n"
                             "rc  nvidia-driver-535 535.154.05-0ubuntu0.22.04.1\n"
                             "ii  libc6 2.35-0ubuntu3.7\n")),
    ]
    wsl = probe_wsl(env)
    assert wsl["linux_driver"]["packages"] == [
        "nvidia-utils-545 545.29.06-0ubuntu0~gpu22.04.1",
        "libnvidia-compute-545:amd64 545.29.06-0ubuntu0~gpu22.04.1"]
    assert wsl["linux_driver"]["files"] == [
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1 -> libcuda.so.545.29.06",
        "/usr/lib/x86_64-linux-gnu/libcuda.so.545.29.06"]
    assert wsl["libcuda_resolved"]["path"] == "/usr/lib/x86_64-linux-gnu/libcuda.so.1"


def test_ld_library_path_wins_over_the_cache_and_a_missing_ldconfig_is_recorded():
    def gone(argv):
        return CommandResult(tuple(argv), None, "", "No such file", not_found=True)

    env = wsl2_env(commands=[(("ldconfig",), gone), (("/sbin/ldconfig",), gone),
                             (("dpkg-query",), ok(""))])
    env.env["LD_LIBRARY_PATH"] = f"/opt/x:{LIB}"
    wsl = probe_wsl(env)
    assert wsl["ldconfig"]["ok"] is False
    assert wsl["ldconfig"]["error"] == "/sbin/ldconfig: not found"
    assert wsl["libcuda_resolved"] == {"path": f"{LIB}/libcuda.so.1", "via": "LD_LIBRARY_PATH"}


def test_a_hung_dpkg_is_an_error_not_a_hang():
    def hung(argv):
        return CommandResult(tuple(argv), None, "", "", timed_out=True, duration_s=5.0)

    env = wsl2_env()
    env.commands = [(("ldconfig", "-p"), ok(LDCONFIG)), (("dpkg-query",), hung)]
    driver = probe_wsl(env)["linux_driver"]
    assert driver["checked"] is False
    assert driver["error"] == "dpkg-query: no answer within 5s, killed"


def test_wslconfig_of_the_windows_user_is_read():
    env = wsl2_env()
    env.files["/mnt/c/Users/jesse/.wslconfig"] = (
        "# limits\n[wsl2]\nmemory=4GB  # for the browser\nprocessors=2\nswap=0\n")
    env.dirs.add("/mnt/c/Users/Public")
    assert probe_wsl(env)["wslconfig"] == [{
        "path": "/mnt/c/Users/jesse/.wslconfig", "memory": "4GB", "memory_bytes": 4 * 1024**3,
        "processors": 2, "swap": "0", "swap_bytes": 0, "error": None}]


def test_sizes_and_broken_wslconfig():
    assert parse_size("1536MB") == 1536 * 1024**2
    assert parse_size("8gb") == 8 * 1024**3
    assert parse_size("lots") is None
    assert parse_wslconfig("memory=4GB\n")["error"].startswith("cannot parse")
    assert parse_wslconfig("[experimental]\nsparseVhd=true\n")["memory"] is None

