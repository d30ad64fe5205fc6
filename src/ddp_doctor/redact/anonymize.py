"""Anonymisation (``--anonymize``): what identifies a site, replaced by stable placeholders.

Secrets are removed from every artifact (``secrets.py``); a user who shares a report
outside their site may also want to hide *who and where* they are: host names, user
names, home paths, IPv4/IPv6 and MAC addresses, GPU UUIDs and serial numbers. Each value
gets a stable placeholder (``host-1``, ``user-1``, ``/home/user-1``, ``ip-1``, ``mac-1``,
``GPU-uuid-1``, ``serial-1``): the same value always maps to the same placeholder within
one ``Anonymizer``, so a reader can still tell "the same GPU" from "another GPU" across
the console, JSON, Markdown, JUnit and bundle of one run.

Concrete values (the host name, the users, the GPU UUIDs and serials) are learned from
the run's facts, pair by pair (the key says what a value is); shapes (addresses, UUIDs)
are also found by pattern anywhere. Placeholders never match a pattern again, so
anonymising twice changes nothing and counts nothing. Walking a Report or a facts
snapshot to feed and apply this is ``redactor.Redactor``'s job.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable

from ddp_doctor.redact.secrets import Count

# Kinds counted by Redactor.summary() (the bundle's MANIFEST lists them).
HOSTNAME = "hostname"
USER_NAME = "user name"
HOME_PATH = "home path"
IP_ADDRESS = "ip address"
MAC_ADDRESS = "mac address"
GPU_UUID = "gpu uuid"
SERIAL_NUMBER = "serial number"

_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"  # no leading zeros: 13.590.48.01 is a version
_IPV4 = re.compile(rf"(?<![\w.]){_OCTET}(?:\.{_OCTET}){{3}}(?![\w+]|\.\d|-\d)")
# Text just before a dotted quad that makes it a version: "cuDNN 9.1.0.70",
# "nvidia-cudnn-cu12==9.1.0.70", "Version: 4.10.0.84", "nvidia-cudnn-cu12   9.1.0.70".
_VERSION_BEFORE = re.compile(
    r"(?i)(?:version|\bver\.?|release|build|cudnn|nccl|cublas|cufft|cusparse|tensorrt|"
    r"opencv\S*|nvidia-\S+|\S+-cu\d+\S*|==|>=|<=|~=|!=)\s*[:=]?\s*$")
_HEX4 = r"[0-9A-Fa-f]{1,4}"
_IPV6 = re.compile(
    rf"(?<![\w.])(?:(?:{_HEX4}:){{7}}{_HEX4}"
    rf"|(?:{_HEX4}:){{1,7}}:(?:{_HEX4}(?::{_HEX4}){{0,6}})?"
    rf"|::{_HEX4}(?::{_HEX4}){{0,6}})(?![\w:])")
_MAC = re.compile(r"(?<![\w:.-])[0-9A-Fa-f]{2}([:-])(?:[0-9A-Fa-f]{2}\1){4,18}[0-9A-Fa-f]{2}"
                  r"(?![\w:.-])")
_UUID_HEX = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
# GPU and MIG UUIDs as NVML and `nvidia-smi -L` print them ("GPU-<uuid>", "MIG-<uuid>"):
# https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html
_GPU_UUID = re.compile(rf"(?<![\w-])(?P<prefix>GPU|MIG)-(?P<hex>{_UUID_HEX})(?![\w-])")
_BARE_UUID = re.compile(rf"(?:(?:GPU|MIG)-)?(?P<hex>{_UUID_HEX})")
# `nvidia-smi -q`: "Serial Number                         : 1324321012345"
_SERIAL_LINE = re.compile(r"(?P<pre>\bSerial Number\s*:\s*)(?P<val>[^\s<]+)", re.I)
# Home directories: /home/NAME, /Users/NAME (macOS, and /mnt/c/Users/NAME under WSL),
# C:\Users\NAME (also JSON-escaped, C:\\Users\\NAME).
_HOME = re.compile(r"(?P<pre>/home/|/Users/|\b[A-Za-z]:(?:\\\\|\\)Users(?:\\\\|\\))"
                   r"(?P<name>[^/\\\s\"'`:;,<>|*?()\[\]{}]+)")
# The prefix NCCL puts on every log line (NCCL_DEBUG): "HOST:PID:TID [DEV] NCCL INFO ...",
# "HOST:PID:TID [DEV] misc/socket.cc:484 NCCL WARN ...".
# Launchers may put their own "[rank0]:" / "[default0]:" in front.
_NCCL_PREFIX = re.compile(r"^(?:\[[\w-]+\]:?[ \t]*)?(?P<host>[A-Za-z0-9][\w.-]*):\d+:\d+ \[\d+\] "
                          r"[^\n]*\bNCCL\b", re.M)

_PLACEHOLDER = re.compile(r"(?:host|user|ip|mac|serial|uuid)-\d+", re.I)
_NOT_A_USER = frozenset({"", "root", "shared", "public", "default", "all users", "default user",
                         "guest"})
# Account names too common to replace as bare words ("the user", "runner"): they are still
# replaced inside home paths.
_GENERIC_USERS = frozenset({"user", "users", "admin", "ubuntu", "runner", "nobody", "jovyan",
                            "ec2-user", "centos", "vagrant", "docker", "test", "root", "guest"})
_NOT_A_HOST = frozenset({"", "localhost", "localhost.localdomain", "none", "null", "unknown"})
_NOT_A_SERIAL = frozenset({"", "n/a", "[n/a]", "na", "none", "null", "not supported",
                           "[not supported]", "unknown", "0", "0000000000000"})
_HOST_SHAPE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9-]{1,63})*")
_USER_SHAPE = re.compile(r"[A-Za-z_][\w.-]{0,31}")

_HOST_KEYS = frozenset({"hostname", "host_name", "nodename", "node_name", "fqdn"})
_USER_KEYS = frozenset({"user", "username", "user_name", "owner", "logname", "login"})
_USER_ENV = frozenset({"USER", "LOGNAME", "USERNAME", "SUDO_USER"})
_HOME_ENV = frozenset({"HOME", "USERPROFILE"})


def _is_placeholder(value: str) -> bool:
    return bool(_PLACEHOLDER.fullmatch(value))


class Anonymizer:
    """One run's identities and their placeholders.

    ``learn`` takes (key, value) pairs from the run's facts; ``text`` replaces what was
    learned and what the patterns find, telling ``count(kind, n)`` what it replaced.
    """

    def __init__(self, count: Count) -> None:
        self._count = count
        self._maps: dict[str, dict[str, str]] = {}  # kind -> value -> placeholder
        self._hosts: set[str] = set()
        self._users: set[str] = set()
        self._uuids: set[str] = set()  # lower-case hex of GPU UUIDs learned from facts
        self._serials: set[str] = set()
        self._known: re.Pattern[str] | None = None  # one pattern for the learned literals

    # -- learning ----------------------------------------------------------------------

    def learn(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Learn host/user names, GPU UUIDs and serials from (normalised key, string) pairs."""
        for key, value in pairs:
            self._learn_pair(key, value)
        self._known = None

    def _learn_pair(self, key: str, value: str) -> None:
        text = value.strip()
        if key in _HOST_KEYS:
            self._add_host(text)
        elif key in _USER_KEYS or key.upper() in _USER_ENV:
            self._add_user(text)
        elif key.upper() in _HOME_ENV:
            home = _HOME.match(text)
            if home:
                self._add_user(home.group("name"))
        elif key == "uuid" or key.endswith("_uuid"):
            found = _BARE_UUID.fullmatch(text)
            if found:
                self._uuids.add(found.group("hex").lower())
        elif "serial" in key and text.lower() not in _NOT_A_SERIAL and not _is_placeholder(text):
            self._serials.add(text)
        for m in _HOME.finditer(value):
            self._add_user(m.group("name"))
        for m in _NCCL_PREFIX.finditer(value):
            self._add_host(m.group("host"))

    def _add_host(self, name: str) -> None:
        if (name.lower() in _NOT_A_HOST or _is_placeholder(name) or not _HOST_SHAPE.fullmatch(name)
                or name.isdigit() or _looks_like_ip(name)):
            return
        self._hosts.update({name, name.lower()})
        short = name.split(".", 1)[0]
        if short != name and len(short) >= 2 and not short.isdigit():
            self._hosts.update({short, short.lower()})

    def _add_user(self, name: str) -> None:
        if (name.lower() in _NOT_A_USER or _is_placeholder(name)
                or not _USER_SHAPE.fullmatch(name)):
            return
        self._users.add(name)

    # -- the interface -----------------------------------------------------------------

    def text(self, text: str, version_context: bool = False) -> str:
        """``text`` with every learned or recognised identity replaced by its placeholder.

        ``version_context`` says the text is a version (a "version" key or label), so a
        dotted quad in it is not an IP address.
        """
        hosts = len(self._hosts)
        for m in _NCCL_PREFIX.finditer(text):  # a log names its hosts on every NCCL line
            self._add_host(m.group("host"))
        if len(self._hosts) != hosts:
            self._known = None
        return self._anonymize(text, version_context)

    # -- internals ---------------------------------------------------------------------

    def _placeholder(self, kind: str, key: str, make: Callable[[int], str]) -> str:
        table = self._maps.setdefault(kind, {})
        if key not in table:
            table[key] = make(len(table) + 1)
        return table[key]

    def _known_pattern(self) -> re.Pattern[str] | None:
        """One pattern for every learned literal, longest first, whole words only."""
        if self._known is None:
            alternatives = []
            for group, names in (("host", self._hosts), ("user", self._users - _GENERIC_USERS),
                                 ("serial", self._serials)):
                if names:
                    ordered = sorted(names, key=lambda n: (-len(n), n))
                    # DNS names are case-insensitive; a two-letter one ("vm") only as written
                    words = [re.escape(n) if group != "host" or len(n) < 4
                             else f"(?i:{re.escape(n)})" for n in ordered]
                    alternatives.append(f"(?P<{group}>{'|'.join(words)})")
            if self._uuids:
                hexes = "|".join(sorted(self._uuids))
                alternatives.append(f"(?P<uuid>(?:(?:GPU|MIG)-)?(?i:{hexes}))")
            if not alternatives:
                return None
            self._known = re.compile(r"(?<![\w.-])(?:" + "|".join(alternatives) + r")(?![\w-])")
        return self._known

    def _anonymize(self, text: str, version_context: bool) -> str:
        text = _HOME.sub(self._replace_home, text)
        known = self._known_pattern()
        if known is not None:
            text = known.sub(self._replace_known, text)
        text = _GPU_UUID.sub(self._replace_uuid, text)
        text = _SERIAL_LINE.sub(self._replace_serial_line, text)
        text = _MAC.sub(self._replace_mac, text)
        text = _IPV4.sub(lambda m: self._replace_ipv4(m, version_context), text)
        text = _IPV6.sub(self._replace_ipv6, text)
        return text

    def _replace_known(self, m: re.Match[str]) -> str:
        group = m.lastgroup or ""
        value = m.group(group)
        if group == "host":
            return self._host(value)
        if group == "user":
            self._count(USER_NAME, 1)
            return self._placeholder(USER_NAME, value, lambda n: f"user-{n}")
        if group == "serial":
            return self._serial(value)
        found = _BARE_UUID.fullmatch(value)
        return self._replace_uuid(found) if found else value

    def _host(self, name: str) -> str:
        """node1, NODE1 and node1.cluster.example are one host: one placeholder."""
        self._count(HOSTNAME, 1)
        return self._placeholder(HOSTNAME, name.lower().split(".", 1)[0], lambda n: f"host-{n}")

    def _serial(self, value: str) -> str:
        self._count(SERIAL_NUMBER, 1)
        return self._placeholder(SERIAL_NUMBER, value, lambda n: f"serial-{n}")

    def _replace_uuid(self, m: re.Match[str]) -> str:
        prefix = m.group(0).split("-", 1)[0] if m.group(0)[:4] in ("GPU-", "MIG-") else "GPU"
        self._count(GPU_UUID, 1)
        number = self._placeholder(GPU_UUID, m.group("hex").lower(), lambda n: str(n))
        return f"{prefix}-uuid-{number}"

    def _replace_serial_line(self, m: re.Match[str]) -> str:
        value = m.group("val")
        if value.lower() in _NOT_A_SERIAL or _is_placeholder(value):
            return m.group(0)
        return m.group("pre") + self._serial(value)

    def _replace_home(self, m: re.Match[str]) -> str:
        name = m.group("name")
        if name.lower() in _NOT_A_USER or _is_placeholder(name):
            return m.group(0)
        self._count(HOME_PATH, 1)
        return m.group("pre") + self._placeholder(USER_NAME, name, lambda n: f"user-{n}")

    def _replace_mac(self, m: re.Match[str]) -> str:
        value = m.group(0).lower().replace("-", ":")
        if set(value) <= {"0", ":"} or set(value) <= {"f", ":"}:
            return m.group(0)
        self._count(MAC_ADDRESS, 1)
        return self._placeholder(MAC_ADDRESS, value, lambda n: f"mac-{n}")

    def _replace_ipv4(self, m: re.Match[str], version_context: bool) -> str:
        value = m.group(0)
        known = value in self._maps.get(IP_ADDRESS, {})
        if not known:
            if version_context or _keep_ipv4(value):
                return value
            line_start = m.string.rfind("\n", 0, m.start()) + 1
            if _VERSION_BEFORE.search(m.string[max(line_start, m.start() - 48):m.start()]):
                return value
        self._count(IP_ADDRESS, 1)
        return self._placeholder(IP_ADDRESS, value, lambda n: f"ip-{n}")

    def _replace_ipv6(self, m: re.Match[str]) -> str:
        value = m.group(0)
        try:
            address = ipaddress.IPv6Address(value)
        except ValueError:
            return value
        groups = [g for g in value.split(":") if g]
        if (address.is_loopback or address.is_unspecified or len(groups) < 2
                or (len(groups) < 3 and max(len(g) for g in groups) < 3)):
            return value
        self._count(IP_ADDRESS, 1)
        return self._placeholder(IP_ADDRESS, address.compressed, lambda n: f"ip-{n}")


def _keep_ipv4(value: str) -> bool:
    """Addresses that identify nothing: loopback, unspecified, broadcast and netmasks."""
    return value.startswith(("127.", "0.", "255."))


def _looks_like_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True
