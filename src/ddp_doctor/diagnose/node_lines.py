"""Host by host: what NCCL said about each node in a multi-node log, and where they differ.

Every NCCL INFO line starts with ``host:pid:tid [device]``, so a log of a job across nodes
says, per host, which NCCL version it loaded, whether it found a network plugin, which
network it chose and which NCCL_* variables were set; nccl-tests' device table adds each
rank's host and GPU model. Collected per host (a few lines each, whatever the log's size)
and judged by ``nodes.agree``, the same judgement ``compare`` applies to saved facts, a
difference such as a plugin found on some nodes only becomes a node_mismatch finding.

Line formats: NCCL's init.cc ("NCCL version"), its plugin loading ("NET/Plugin: Loaded
net plugin ...", and since 2.2x "Plugin Path : /path/libnccl-net.so"; without one "Could not find:
libnccl-net.so. Using internal network plugin" (2.27 stops after the file name), older "No
plugin found (libnccl-net.so), using internal implementation" or "No plugin found
(libnccl-net.so)" then "Using internal network plugin."), "Using network X" and the
channel lines' "via NET/IB/0", param.cc ("NCCL_X set by environment to Y"), and nccl-tests'
device table ("#  Rank  0 Group  0 Pid ... on HOST device 0 [0x..] MODEL"); see
https://github.com/NVIDIA/nccl and https://github.com/NVIDIA/nccl-tests.

Per host, also what its InfiniBand transport said (``transports``, judged host by host in
``diagnose.transport``, so a single-host paste counts too): the HCAs NCCL listed or failed
to open (net_ib.cc: "NET/IB : Using [0]mlx5_0:1/IB ...", "NET/IB : Unable to open device
mlx5_0"), "NET/IB : No device found", the network it chose, and "NET/IB : GPU Direct RDMA
Disabled for HCA 0 'mlx5_0'", which ncclIbGetProperties prints (with " (no module)" in the
2.1x sources) when neither nv_peer_mem nor nvidia_peermem is loaded. Users often paste these
lines with the ``host:pid:tid [dev]`` prefix cut off; they then count for one unnamed host.

And each nccl-tests run pasted (``nccl_runs``): from its "nThread" line, the lines after it
in the same chunk go to ``textfacts.nccl_tests`` (a run cut by a chunk boundary is read as
far as it goes), so its table and verdict are judged without a section marker of its own.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from ddp_doctor.nodes import Comparison, NodeSummary, compare_nodes
from ddp_doctor.textfacts import nccl_tests

MAX_HOSTS = 512  # beyond this a log is not one job's; stop collecting
MAX_CHANNEL_LINES = 4096  # "via NET/" channel lines read in all: they only confirm a network
# What a line must hold to say anything here; each is one bytes.find per chunk of the log.
MARKERS = (b"NCCL INFO NCCL version", b"NCCL INFO NET/Plugin", b"NCCL INFO Plugin Path",
           b"NCCL INFO Using network",
           b" set by environment to ", b" via NET/", b" Group ", b"NET/IB : ",
           b"NET/Socket : Using ", b"Bootstrap : Using ", b"Bootstrap: Using ")
UNNAMED = ""  # the host of NCCL lines pasted without their host:pid:tid prefix
NCCL_TESTS_MARKER = b"nThread "  # the first line of an nccl-tests run
MAX_RUNS = 64  # nccl-tests runs read from one log
_PREFIX = re.compile(r"(?P<host>[A-Za-z0-9][\w.-]*):\d+:\d+ \[\d+\] NCCL INFO (?P<msg>.*)$")
_VERSION = re.compile(r"^NCCL version (?P<v>\d+\.\d+\.\d+)")
_PLUGIN = re.compile(r"^NET/Plugin\s*:\s*Loaded net plugin (?P<name>.+?)(?: \(v\d+\))?\s*$")
_PLUGIN_PATH = re.compile(r"^Plugin Path\s*:\s*(?P<path>\S+)")
_INTERNAL = re.compile(r"^NET/Plugin\s*:\s*(?:Could not find: \S+|No plugin found \(\S+\)|"
                       r"Using internal network plugin)")
_NETWORK = re.compile(r"^Using network (?P<net>\S+)")
_VIA = re.compile(r"\bvia NET/(?P<net>[A-Za-z][\w]*)/")
_ENV = re.compile(r"^(?P<var>NCCL_[A-Z0-9_]+) set by environment to (?P<val>.*?)\.?\s*$")
_HOST = re.compile(r"(?P<host>[A-Za-z0-9][\w.-]*):\d+:\d+ \[\d+\] NCCL (?:INFO|WARN)")
_IB_USING = re.compile(r"NET/IB : Using (?P<devs>[^;]*)")
# The interfaces NCCL's socket transport and its bootstrap use (misc/socket.cc, net_socket.cc:
# "NET/Socket : Using [0]bond0:172.27.231.79<0> [1]veth8739016:fe80::...<0>", "Bootstrap :
# Using eth0:10.0.0.1<0>"); the name is what precedes the address.
_SOCKET_USING = re.compile(r"NET/Socket : Using (?P<ifs>.*)$")
_SOCKET_IF = re.compile(r"\[\d+\](?P<name>[^\s:\[<]+):")
_BOOTSTRAP_USING = re.compile(r"Bootstrap ?: Using (?P<name>[^\s:<]+):")  # 2.27: "Bootstrap:"
_IB_DEV = re.compile(r"\[\d+\](?P<dev>[A-Za-z][\w.-]*):\d+/(?:IB|RoCE)")
_IB_UNABLE = re.compile(r"NET/IB : Unable to open device (?P<dev>[A-Za-z][\w.-]*)")
_GDR_OFF = re.compile(r"NET/IB : GPU Direct RDMA Disabled for HCA \d+ '(?P<dev>[^']+)'")
_DEVICE = re.compile(r"^#\s*Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(?P<host>\S+)\s+"
                     r"device\s+\d+\s+\[[^\]]*\]\s+(?P<model>.+?)\s*$")


class NodeLines:
    """Collects, line by line, what each host's NCCL reported; ``judge`` compares them."""

    def __init__(self) -> None:
        self.hosts: dict[str, dict[str, Any]] = {}
        self.channel_lines = 0
        # host -> {"hcas": [...], "no_ib": bool, "network": str, "gdr_off": [...]}
        self.transports: dict[str, dict[str, Any]] = {}
        self.nccl_runs: list[dict[str, Any]] = []  # textfacts.nccl_tests' reading of each run

    def feed_chunk(self, chunk: bytes) -> None:
        """The lines of one chunk of raw log (whole lines) that hold a marker: a few passes
        of ``bytes.find``, so a log without NCCL output costs next to nothing."""
        self._nccl_tests(chunk)
        for marker in MARKERS:
            at = chunk.find(marker)
            while at != -1:
                if marker == b" via NET/":
                    self.channel_lines += 1
                    if self.channel_lines > MAX_CHANNEL_LINES:
                        break
                start = chunk.rfind(b"\n", 0, at) + 1
                end = chunk.find(b"\n", at)
                end = len(chunk) if end == -1 else end
                self.feed(chunk[start:end].decode("utf-8", "replace").rstrip("\r"))
                at = chunk.find(marker, end)

    def feed_lines(self, chunk: bytes, lines: list[bytes], picked: list[int]) -> None:
        """``feed_chunk`` given the chunk's lines (``chunk.split(b"\\n")``) and the indices
        of those that may hold a marker (``LineGate``: any that holds one is among them):
        the same lines are fed in the same order, marker by marker, without a pass of
        ``bytes.find`` per marker over the whole chunk."""
        if any(NCCL_TESTS_MARKER in lines[i] for i in picked):
            self._nccl_tests(chunk)
        for marker in MARKERS:
            for index in picked:
                line = lines[index]
                if marker not in line:
                    continue
                if marker == b" via NET/":
                    self.channel_lines += 1
                    if self.channel_lines > MAX_CHANNEL_LINES:
                        break
                self.feed(line.decode("utf-8", "replace").rstrip("\r"))

    def _nccl_tests(self, chunk: bytes) -> None:
        at = chunk.find(NCCL_TESTS_MARKER)
        while at != -1 and len(self.nccl_runs) < MAX_RUNS:
            start = chunk.rfind(b"\n", 0, at) + 1
            # only the bytes of the lines read are decoded (up to a newline: the lines
            # split from them are the first lines of the rest of the chunk)
            end = start
            for _ in range(nccl_tests.MAX_LINES):
                end = chunk.find(b"\n", end) + 1
                if end == 0:
                    end = len(chunk)
                    break
            lines = chunk[start:end].decode("utf-8", "replace").splitlines()[
                :nccl_tests.MAX_LINES]
            parsed = nccl_tests.parse(lines)
            if parsed is not None:
                self.nccl_runs += parsed.facts["nccl_tests"]["runs"]
            at = chunk.find(NCCL_TESTS_MARKER, at + len(NCCL_TESTS_MARKER))

    def feed(self, line: str) -> None:
        """One clean log line (rank prefixes may still be on it)."""
        if "NET/" in line or "Using network" in line or "Bootstrap" in line:
            self._transport(line)
        if "NCCL INFO" in line:
            found = _PREFIX.search(line)
            if found is not None:
                self._info(found.group("host"), found.group("msg"))
        elif "Rank" in line and " on " in line:
            device = _DEVICE.match(line.strip())
            if device is not None:
                node = self._node(device.group("host"))
                if node is not None:
                    node.setdefault("gpu_models", []).append(device.group("model"))

    def _node(self, host: str) -> Optional[dict[str, Any]]:
        if host not in self.hosts and len(self.hosts) >= MAX_HOSTS:
            return None
        return self.hosts.setdefault(host, {"host": host})

    def _info(self, host: str, msg: str) -> None:
        node = self._node(host)
        if node is None:
            return
        if (m := _VERSION.match(msg)) is not None:
            node["nccl"] = m.group("v")
        elif (m := _PLUGIN.match(msg)) is not None:
            node["net_plugin"] = m.group("name")
        elif (m := _PLUGIN_PATH.match(msg)) is not None:
            node.setdefault("net_plugin", m.group("path"))  # the plugin's name, if logged, wins
        elif _INTERNAL.match(msg) is not None:
            node.setdefault("net_plugin", "internal")
        elif (m := _NETWORK.match(msg)) is not None:
            node["nccl_network"] = m.group("net")
        elif (m := _ENV.match(msg)) is not None:
            node.setdefault("env", {})[m.group("var")] = m.group("val")
        elif "via NET/" in msg and (m := _VIA.search(msg)) is not None:
            node.setdefault("nccl_network", m.group("net"))  # channel lines name it too

    def _transport(self, line: str) -> None:
        """What one NCCL line says about its host's network transport."""
        found = _HOST.search(line)
        host = found.group("host") if found is not None else UNNAMED
        if host not in self.transports and len(self.transports) >= MAX_HOSTS:
            return
        net = self.transports.setdefault(host, {"hcas": [], "gdr_off": []})
        if (m := _GDR_OFF.search(line)) is not None:
            if m.group("dev") not in net["gdr_off"]:
                net["gdr_off"].append(m.group("dev"))
        elif (m := _IB_USING.search(line)) is not None:
            for dev in _IB_DEV.findall(m.group("devs")):
                if dev not in net["hcas"]:
                    net["hcas"].append(dev)
        elif (m := _IB_UNABLE.search(line)) is not None:
            if m.group("dev") not in net["hcas"]:
                net["hcas"].append(m.group("dev"))
        elif "NET/IB : No device found" in line:
            net["no_ib"] = True
        elif (m := _SOCKET_USING.search(line)) is not None:
            for name in _SOCKET_IF.findall(m.group("ifs")):
                if name not in net.setdefault("socket_ifs", []):
                    net["socket_ifs"].append(name)
        elif (m := _BOOTSTRAP_USING.search(line)) is not None:
            net["bootstrap_if"] = m.group("name")
        elif (m := _NETWORK.search(line[line.find("Using network"):])) is not None:
            net["network"] = m.group("net")
        elif (m := _VIA.search(line)) is not None:
            net.setdefault("network", m.group("net"))

    def summaries(self) -> tuple[list[str], list[NodeSummary]]:
        """The hosts that said anything to compare, and what each said.

        Variables are compared only when every host logged its settings: NCCL prints "set by
        environment" for each variable it reads, so a host that printed some and not others
        has those unset, while a host that printed none may simply have been cut out.
        """
        hosts = [h for h, node in self.hosts.items() if len(node) > 1]
        nodes = [dict(self.hosts[h]) for h in hosts]
        if not all("env" in node for node in nodes):
            for node in nodes:
                node.pop("env", None)
        for node in nodes:
            if "gpu_models" in node:
                node["gpu_models"] = sorted(node["gpu_models"])
        return hosts, [NodeSummary(**node) for node in nodes]  # type: ignore[typeddict-item]

    def judge(self) -> Optional[Comparison]:
        """The hosts compared, or None when the log shows fewer than two."""
        hosts, summaries = self.summaries()
        if len(hosts) < 2:
            return None
        return compare_nodes(hosts, summaries)
