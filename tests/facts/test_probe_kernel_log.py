"""The kernel-log probe: this boot's Xid/SXid events, read through the Env seam, or why not.

Inputs are the kernel-log fixtures in tests/fixtures/kernel_log (sources in its SOURCES.md):
real driver messages in journalctl's and dmesg's layouts. The Env is a FakeEnv that refuses
any command it was not told about.
"""

from __future__ import annotations

from pathlib import Path

from ddp_doctor.facts import kernel_log
from ddp_doctor.facts.kernel_log import KEEP_FIRST, KEEP_LAST, parse_events, probe_kernel_log
from ddp_doctor.facts.seam import CommandResult
from ddp_doctor.logrules import code_of_line, match_text
from tests.support.fakes import FakeEnv

LOGS = Path(__file__).parents[1] / "fixtures" / "kernel_log"
JOURNAL = ("journalctl", "-k", "-b", "--no-pager", "-o", "short-iso")
DMESG_T = ("dmesg", "-T")
DMESG = ("dmesg",)


def log(name: str) -> str:
    return (LOGS / name).read_text(encoding="utf-8")


def answer(argv: tuple[str, ...], rc: int | None = 0, stdout: str = "", stderr: str = "",
           **kw: object) -> tuple[tuple[str, ...], CommandResult]:
    return argv, CommandResult(argv, rc, stdout, stderr, **kw)  # type: ignore[arg-type]


NOT_FOUND = {"rc": None, "stderr": "No such file or directory", "not_found": True}
DENIED = "dmesg: read kernel buffer failed: Operation not permitted\n"


def test_journal_events_with_bus_time_pid_and_what_diagnose_makes_of_each_line():
    env = FakeEnv(commands=[answer(JOURNAL, stdout=log("kernel-log-journal-xid.txt"))])
    fact = probe_kernel_log(env, log_code_of=code_of_line)
    assert fact["readable"] is True
    assert fact["source"] == " ".join(JOURNAL)
    assert fact["attempts"] == [] and fact["events_dropped"] == 0
    assert env.calls == [JOURNAL]  # the first command that reads the log is the last run
    got = [(e["kind"], e["xid"], e["pci_bus_id"], e["time"], e["pid"], e["log_code"])
           for e in fact["events"]]
    assert got == [
        ("Xid", 43, "0000:01:00", "2025-03-14T11:40:27+0000", 1814139, "LOG035"),
        # Xid 63 is no rule's: the scan still finds it (the rules are not the finder).
        ("Xid", 63, "0000:10:1c", "2025-03-14T13:05:51+0000", 1896, None),
        # The MIG instance suffix ("GPU-I:05") is not part of the bus id.
        ("Xid", 94, "0000:01:00", "2025-03-14T14:22:09+0000", 7194, "LOG017"),
        ("Xid", 95, "0000:01:00", "2025-03-14T14:22:10+0000", 7062, "LOG017"),
        ("Xid", 119, "0000:00:16", "2025-03-14T16:48:30+0000", 36055, "LOG017"),
        ("Xid", 79, "0000:2a:00", "2025-03-14T17:02:44+0000", None, "LOG017"),
        ("Xid", 79, "0000:2a:00", "2025-03-14T17:02:44+0000", None, "LOG017"),
    ]
    assert fact["events"][-1]["message"] == ("pid='<unknown>', name=<unknown>, GPU has fallen "
                                             "off the bus")


def test_the_log_code_is_the_rule_engines_own_answer_for_the_line():
    """No pattern is repeated in the probe: each event's code is match_text's first match."""
    for line in log("kernel-log-journal-xid.txt").splitlines():
        events = parse_events(line, code_of_line)
        if not events:
            continue
        matches = match_text(line)
        assert events[0]["log_code"] == (matches[0].rule.code.id if matches else None)


def test_a_healthy_journal_is_read_with_no_events():
    env = FakeEnv(commands=[answer(JOURNAL, stdout=log("kernel-log-journal-healthy.txt"))])
    fact = probe_kernel_log(env, log_code_of=code_of_line)
    assert fact["readable"] is True and fact["events"] == []


def test_no_journalctl_falls_back_to_dmesg_with_its_times_and_nvswitch_sxid():
    env = FakeEnv(commands=[answer(JOURNAL, **NOT_FOUND),  # type: ignore[arg-type]
                            answer(DMESG_T, stdout=log("kernel-log-dmesg-sxid.txt"))])
    fact = probe_kernel_log(env, log_code_of=code_of_line)
    assert fact["source"] == "dmesg -T"
    assert fact["attempts"] == ["journalctl -k -b --no-pager -o short-iso: journalctl: not found"]
    sxid, xid = fact["events"]
    assert (sxid["kind"], sxid["xid"], sxid["pci_bus_id"], sxid["time"]) == (
        "SXid", 22010, "0000:05:00.0", "Fri Mar 14 10:31:07 2025")
    assert sxid["message"] == "Fatal, Link 04 MINION Watchdog timer ran out (First)"
    assert sxid["log_code"] is None
    assert (xid["kind"], xid["xid"]) == ("Xid", 79)


def test_plain_dmesg_keeps_seconds_since_boot_when_dash_t_is_not_supported():
    line = ("[ 5123.404211] NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, "
            "GPU has fallen off the bus\n")
    env = FakeEnv(commands=[
        answer(JOURNAL, **NOT_FOUND),  # type: ignore[arg-type]
        answer(DMESG_T, rc=1, stderr="dmesg: unrecognized option: T\n"),
        answer(DMESG, stdout=line)])
    fact = probe_kernel_log(env, log_code_of=code_of_line)
    assert fact["source"] == "dmesg"
    assert [e["time"] for e in fact["events"]] == ["5123.404211"]
    assert fact["attempts"][1] == "dmesg -T: dmesg: exit code 1: dmesg: unrecognized option: T"


def test_no_permission_anywhere_is_unreadable_with_each_reason_and_dmesg_restrict():
    """An unprivileged user: the journal answers with no entries, dmesg is refused."""
    env = FakeEnv(
        files={"/proc/sys/kernel/dmesg_restrict": "1\n"},
        commands=[answer(JOURNAL, stdout="-- No entries --\n",
                         stderr="Hint: You are currently not seeing messages from other users "
                                "and the system.\n"),
                  answer(DMESG, rc=1, stderr=DENIED)])
    fact = probe_kernel_log(env, log_code_of=code_of_line)
    assert fact["readable"] is False and fact["source"] is None
    assert fact["dmesg_restrict"] is True
    assert fact["events"] == []
    assert fact["attempts"] == [
        "journalctl -k -b --no-pager -o short-iso: journalctl: no kernel messages (Hint: You "
        "are currently not seeing messages from other users and the system.)",
        "dmesg -T: dmesg: exit code 1: dmesg: read kernel buffer failed: Operation not "
        "permitted",
        "dmesg: dmesg: exit code 1: dmesg: read kernel buffer failed: Operation not permitted",
    ]


def test_every_command_runs_under_a_deadline_and_a_hung_one_is_an_attempt():
    env = FakeEnv(commands=[answer(JOURNAL, rc=-9, timed_out=True, duration_s=10.0),
                            answer(DMESG_T, stdout=log("kernel-log-journal-healthy.txt"))])
    fact = probe_kernel_log(env, timeout=10.0, log_code_of=code_of_line)
    assert fact["readable"] is True and fact["source"] == "dmesg -T"
    assert fact["attempts"] == ["journalctl -k -b --no-pager -o short-iso: journalctl: no "
                                "answer within 10s, killed"]


def test_a_flood_keeps_the_first_and_the_latest_events_and_counts_the_rest():
    line = "[ {n}.000000] NVRM: Xid (PCI:0000:2a:00): 79, pid={n}, GPU has fallen off the bus\n"
    text = "".join(line.format(n=n) for n in range(1, KEEP_FIRST + KEEP_LAST + 51))
    env = FakeEnv(commands=[answer(JOURNAL, stdout=text)])
    fact = probe_kernel_log(env, log_code_of=code_of_line)
    pids = [e["pid"] for e in fact["events"]]
    assert len(pids) == KEEP_FIRST + KEEP_LAST and fact["events_dropped"] == 50
    assert pids[0] == 1 and pids[KEEP_FIRST - 1] == KEEP_FIRST
    assert pids[KEEP_FIRST] == KEEP_FIRST + 51 and pids[-1] == KEEP_FIRST + KEEP_LAST + 50


def test_lines_that_only_mention_xid_are_not_events():
    text = ("kernel: some-daemon: checking for Xid errors\n"
            "kernel: NVRM: Xid (PCI:0000:2a:00): 79, pid=1, GPU has fallen off the bus\n")
    assert [e["xid"] for e in parse_events(text, code_of_line)] == [79]


def test_the_three_commands_and_their_order():
    assert kernel_log.COMMANDS == (JOURNAL, DMESG_T, DMESG)


# Real kernel logs from public threads and a peer's test data (tests/fixtures/kernel_log/
# SOURCES.md): the variants the driver's format strings alone do not show.

def _summary(name: str) -> list[tuple[int, str, str | None, int | None]]:
    return [(e["xid"], e["pci_bus_id"], e["time"], e["pid"])
            for e in parse_events(log(name), code_of_line)]


def test_a_real_dmesg_of_an_h100_server_with_repeated_gsp_timeouts():
    events = parse_events(log("real-dmesg-T-xid119-gsp-timeout.txt"), code_of_line)
    assert [(e["xid"], e["pci_bus_id"], e["pid"]) for e in events] == [
        (119, "0000:9b:00", 2024380), (119, "0000:9b:00", 2024380),
        (119, "0000:9b:00", 2024380), (119, "0000:9b:00", 1263500),
        (119, "0000:9b:00", 1240590)]
    assert events[0]["time"] == "Sun Feb 23 16:24:18 2025"
    assert events[-1]["time"] == "Sun Feb 23 16:30:13 2025"
    assert events[0]["message"].startswith("pid=2024380, name=nvidia-smi, Timeout after 6s")
    # The GSP RPC history lines and the call trace between them are not events.
    assert all(e["kind"] == "Xid" for e in events)


def test_a_gpu_lost_without_an_xid_line_is_its_xid_79():
    """Recent drivers log the loss over three lines and no Xid when the GPU is gone at probe."""
    events = parse_events(log("real-dmesg-fallen-off-bus-without-xid.txt"), code_of_line)
    assert [(e["kind"], e["xid"], e["pci_bus_id"], e["time"]) for e in events] == [
        ("Xid", 79, "0000:b3:00", "1843.308145")]
    assert "without an Xid line" in events[0]["message"]
    assert events[0]["log_code"] == match_text(
        "NVRM: GPU at 0000:b3:00.0 has fallen off the bus.")[0].rule.code.id


def test_an_old_driver_prints_the_bus_without_pci_and_the_loss_on_one_line():
    assert _summary("real-syslog-xid-without-pci-prefix.txt") == [
        (79, "0000:01:00", "Jan 18 11:38:05", None),  # "GPU at 0000:01:00.0 has fallen off"
        (3, "0000:01:00", "Jan 18 11:38:05", None)]


def test_the_loss_logged_with_its_xid_is_counted_once():
    assert _summary("real-journal-xid79.txt") == [(79, "0000:2b:00", "May 18 19:02:39", None)]


def test_seconds_since_boot_from_an_old_driver():
    assert _summary("real-dmesg-xid31-32-old-driver.txt") == [
        (32, "0000:01:00", "24128.828315", None), (32, "0000:01:00", "24128.828608", None),
        (31, "0000:01:00", "24128.834365", None)]


def test_an_xid_that_names_its_cause_and_nvlink5_xids_that_say_their_fatality():
    caused = parse_events(log("real-journal-xid45-caused-by-nvlink5.txt"), code_of_line)
    assert [(e["xid"], e["caused_by"], e["pci_bus_id"]) for e in caused][:2] == [
        (45, 149, "0000:dc:00"), (45, 145, "0000:ed:00")]
    assert all(e["fatal"] is None and e["time"] is None for e in caused)
    nvlink5 = parse_events(log("real-xid144-149-nvlink5-fatality.txt"), code_of_line)
    assert [(e["xid"], e["fatal"], e["caused_by"]) for e in nvlink5] == [
        (144, False, None), (149, True, None), (149, True, None)]


def test_one_sxid_printed_over_three_lines_is_one_event():
    """A real SXid 20034 (Red Hat solution 6619941): the Fatal line, its Severity line and its
    Data line are one event of the NVSwitch at 0000:a9:00.0."""
    events = parse_events(log("real-dmesg-sxid-20034-three-lines.txt"), code_of_line)
    assert [(e["kind"], e["xid"], e["pci_bus_id"], e["time"], e["fatal"]) for e in events] == [
        ("SXid", 20034, "0000:a9:00.0", "131453.740743", True)]
    assert events[0]["message"] == "Fatal, Link 30 LTSSM Fault Up"


def test_without_the_rule_engine_an_event_has_no_log_code():
    """The rules lie above the facts: the probe names a line's code only with the engine
    its caller hands in (the app passes ``logrules.code_of_line``)."""
    text = log("real-dmesg-T-xid119-gsp-timeout.txt")
    assert {e["log_code"] for e in parse_events(text)} == {None}
    assert {e["log_code"] for e in parse_events(text, code_of_line)} != {None}
