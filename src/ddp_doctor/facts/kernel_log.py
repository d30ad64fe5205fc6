"""The kernel log of this boot: the GPU driver's Xid and the NVSwitch driver's SXid events.

An Xid is the NVIDIA driver's error report and lives only in the kernel log, which outlives
the program that triggered it: a GPU that fell off the bus yesterday, or keeps logging
double-bit ECC errors, is visible here before any job runs on it.

The log is read through the Env seam, each command under its own deadline, in this order:
``journalctl -k -b --no-pager -o short-iso`` (this boot's kernel messages, with ISO times),
then ``dmesg -T`` (human times), then plain ``dmesg`` (seconds since boot; some busybox and
container builds lack ``-T``). Containers usually have no journal, and ``dmesg`` fails for
an unprivileged user where ``kernel.dmesg_restrict=1``: then the fact says the log could not
be read and why, and the check says so and gives the command for the host, never a silent
pass.

Which lines are events: the driver's own format strings, ``"NVRM: Xid (" attr "): %d, "``
(``kernel_rc.c``; ``attr`` is ``PCI:dddd:bb:dd``, with `` GPU-I:nn`` for a MIG instance) and
``"nvidia-%s: SXid (PCI:%04x:%02x:%02x.%x): %05d, "`` (``common_nvswitch.h``), both in
https://github.com/NVIDIA/open-gpu-kernel-modules. Each event's line is also run through the
rule engine that ``diagnose`` uses, handed in by the caller as ``log_code_of``
(``logrules.code_of_line``, one floor above the facts), so the event records the log code
``diagnose`` would give the same line (LOG017 for a hardware Xid, for instance); the rules'
patterns are not repeated here, and without the engine the code is None. Mapping a bus id
to the GPU's index and UUID needs the NVML fact, gathered in parallel, so that join is done
where the facts are read (``facts/view.py``).

Real logs vary more than the format strings suggest, and each variant below was seen in a
captured log (tests/fixtures/kernel_log/SOURCES.md):
- older drivers print the bus id without ``PCI:`` (``NVRM: Xid (0000:01:00): 3, ...``);
- a GPU can fall off the bus with no Xid line at all. Recent drivers print it over three
  lines (``NVRM: The NVIDIA GPU 0000:b3:00.0`` / ``(PCI ID: ...) installed in this system
  has`` / ``fallen off the bus and is not responding to commands.``), old ones as
  ``NVRM: GPU at 0000:01:00.0 has fallen off the bus.``. NVIDIA's own health monitor
  (NVSentinel) treats these as Xid 79, and so does this probe, unless the same GPU's
  Xid 79 line is in the log too;
- syslog-style times (``May 18 19:02:39``) where the log was read without ``-o short-iso``;
- an SXid printed over three lines (the event, then its "Severity" and "Data" lines): one
  event;
- an Xid that names its cause (``45, ... caused by previous Xid 145``) and NVLink5 Xids that
  say ``Fatal`` or ``Nonfatal`` themselves: both are kept (``caused_by``, ``fatal``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Callable, Optional

from ddp_doctor.facts.seam import CommandResult, Env

if TYPE_CHECKING:
    from ddp_doctor.facts.shapes import KernelLogFact, XidEvent

KERNEL_LOG_TIMEOUT_S = 10.0  # per command; journalctl on a large journal is the slow one
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("journalctl", "-k", "-b", "--no-pager", "-o", "short-iso"),
    ("dmesg", "-T"),
    ("dmesg",),
)
# A GPU that flaps can log an Xid many times a second: keep the first events (the cause
# usually comes first) and the latest ones, and count the rest.
KEEP_FIRST = 100
KEEP_LAST = 400

# Candidate lines: any line that names an Xid or SXid (a C-speed scan of the whole text).
_CANDIDATE = re.compile(r"^.*\bS?Xid\b.*$", re.MULTILINE)
_EVENT = re.compile(
    r"(?P<kind>\bS?Xid) \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}"
    r"(?:\.[0-7])?)(?: GPU-I:\w+)?\): (?P<xid>\d+),? ?(?P<rest>.*)$")
_CAUSED_BY = re.compile(r"\bcaused by previous Xid (?P<xid>\d+)")
_FATALITY = re.compile(r"\b(?P<word>Nonfatal|Non-fatal|Fatal)\b")
# The NVSwitch driver prints one SXid over several lines: the event ("Fatal, Link 30 LTSSM
# Fault Up"), then its "Severity N Engine instance ..." and "Data {...}" lines.
_SXID_DETAIL = re.compile(r"^(?:Severity \d+\b|Data \{)")
_PID = re.compile(r"\bpid=(?:'?)(?P<pid>\d+)")
_ISO_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:[+-]\d{2}:?\d{2}|Z)?)\s")
_BRACKET_TIME = re.compile(r"^\[\s*([^\]]+?)\s*\]\s")
_SYSLOG_TIME = re.compile(r"^([A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d)\s")
_NO_ENTRIES = ("-- No entries --",)
LogCodeOf = Callable[[str], Optional[str]]
"""What ``diagnose``'s rules make of a line: a code id, or None."""


def _no_code(line: str) -> str | None:
    return None
_BUS = r"(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?"
# A GPU lost without an Xid line: one line (old drivers) or three (recent ones).
_FELL_OFF = re.compile(
    r"^(?P<line>[^\n]*NVRM: (?:GPU at (?:PCI:)?" + _BUS + r" has fallen off the bus"
    r"|The NVIDIA GPU " + _BUS.replace("pci", "pci2") + r"\s*\n(?:[^\n]*\n){0,2}?"
    r"[^\n]*fallen off the bus))", re.MULTILINE)
FELL_OFF_XID = 79  # "GPU has fallen off the bus" in NVIDIA's Xid catalogue



def _time_of(line: str) -> tuple[str | None, str]:
    """The line's timestamp as printed (ISO, dmesg -T's date, or seconds since boot), and
    the rest of the line."""
    for pattern in (_ISO_TIME, _BRACKET_TIME, _SYSLOG_TIME):
        match = pattern.match(line)
        if match:
            return match.group(1), line[match.end():]
    return None, line


def parse_events(text: str, log_code_of: LogCodeOf = _no_code) -> list[XidEvent]:
    """Every Xid and SXid event in a kernel log, oldest first (a GPU lost from the bus with
    no Xid line counts as its Xid 79)."""
    found: list[tuple[int, XidEvent]] = []
    for match in _CANDIDATE.finditer(text):
        line = match.group(0).strip()
        event = _EVENT.search(line)
        if event is None:
            continue  # "xid" in another sense, or a line cut short
        if event.group("kind") == "SXid" and _SXID_DETAIL.match(event.group("rest")):
            continue  # the detail lines of the SXid event just read
        time, _ = _time_of(line)
        pid = _PID.search(event.group("rest"))
        caused_by = _CAUSED_BY.search(event.group("rest"))
        fatality = _FATALITY.search(event.group("rest"))
        found.append((match.start(), {
            "kind": event.group("kind"),
            "xid": int(event.group("xid")),
            "pci_bus_id": event.group("pci").lower(),
            "time": time,
            "pid": int(pid.group("pid")) if pid else None,
            "message": event.group("rest").strip()[:300],
            "log_code": log_code_of(line),
            "caused_by": int(caused_by.group("xid")) if caused_by else None,
            "fatal": fatality.group("word") == "Fatal" if fatality else None,
        }))
    found.extend(_lost_without_xid(text, found, log_code_of))
    return [event for _, event in sorted(found, key=lambda pair: pair[0])]


def _lost_without_xid(text: str, events: list[tuple[int, XidEvent]], log_code_of: LogCodeOf
                      ) -> list[tuple[int, XidEvent]]:
    """"Fallen off the bus" messages of GPUs that have no Xid 79 line in the same log."""
    if "fallen off the bus" not in text:
        return []
    logged = {event["pci_bus_id"] for _, event in events
              if event["kind"] == "Xid" and event["xid"] == FELL_OFF_XID}
    lost: list[tuple[int, XidEvent]] = []
    for match in _FELL_OFF.finditer(text):
        bus = (match.group("pci") or match.group("pci2")).lower()
        if bus in logged:
            continue
        logged.add(bus)
        first_line = match.group("line").split("\n", 1)[0].strip()
        time, _ = _time_of(first_line)
        log_code = log_code_of(" ".join(part.strip() for part in match.group("line").split("\n")))
        lost.append((match.start(), {
            "kind": "Xid",
            "xid": FELL_OFF_XID,
            "pci_bus_id": bus,
            "time": time,
            "pid": None,
            "message": "GPU has fallen off the bus (logged without an Xid line)",
            "log_code": log_code,
            "caused_by": None,
            "fatal": None,
        }))
    return lost


def _keep(events: list[XidEvent]) -> tuple[list[XidEvent], int]:
    if len(events) <= KEEP_FIRST + KEEP_LAST:
        return events, 0
    return events[:KEEP_FIRST] + events[-KEEP_LAST:], len(events) - KEEP_FIRST - KEEP_LAST


def _readable(result: CommandResult) -> str | None:
    """None when ``result`` holds a kernel log; otherwise why it does not."""
    if not result.ok:
        return result.describe_failure()
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    if not lines or all(line.strip() in _NO_ENTRIES for line in lines):
        # journalctl run without the rights to the system journal answers "-- No entries --"
        # (with a hint on stderr) and exit code 0.
        hint = result.stderr.strip().splitlines()[:1]
        return f"{result.argv[0]}: no kernel messages" + (f" ({hint[0][:200]})" if hint else "")
    return None


def probe_kernel_log(env: Env, timeout: float = KERNEL_LOG_TIMEOUT_S,
                     log_code_of: LogCodeOf = _no_code) -> KernelLogFact:
    """Read this boot's kernel log with the first command that can, and list its events
    (each with LOG_CODE_OF's code for its line)."""
    restrict_text = (env.read_text("/proc/sys/kernel/dmesg_restrict") or "").strip()
    restrict = restrict_text == "1" if restrict_text in ("0", "1") else None
    attempts: list[str] = []
    for argv in COMMANDS:
        result = env.run(list(argv), timeout=timeout)
        problem = _readable(result)
        if problem is not None:
            attempts.append(f"{' '.join(argv)}: {problem}")
            continue
        events, dropped = _keep(parse_events(result.stdout, log_code_of))
        return {"readable": True, "source": " ".join(argv), "attempts": attempts,
                "dmesg_restrict": restrict, "events": events, "events_dropped": dropped}
    return {"readable": False, "source": None, "attempts": attempts,
            "dmesg_restrict": restrict, "events": [], "events_dropped": 0}
