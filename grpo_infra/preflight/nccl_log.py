"""Read ``NCCL_DEBUG=INFO`` logs: which transport each rank really uses, and whether GPUDirect RDMA is on.

A multi-node job can run for days on TCP because one node lost its HCA driver: NCCL then quietly
falls back to ``NET/Socket`` on that rank only. The evidence is spread over INFO lines like::

    host:pid:tid [dev] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.0.1<0>
    host:pid:tid [dev] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE ; OOB eth0:10.0.0.1<0>
    host:pid:tid [dev] NCCL INFO NET/OFI Selected Provider is efa (found 4 nics)
    host:pid:tid [dev] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>
    host:pid:tid [dev] NCCL INFO Using network IB | Socket | AWS Libfabric | Libfabric
    host:pid:tid [dev] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'
    host:pid:tid [dev] NCCL INFO comm 0x... rank 3 nranks 16 cudaDev 3 ... - Init COMPLETE
    host:pid:tid [dev] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/3/GDRDMA

Older and newer releases spell some of these differently, all read here: NCCL 2.2-2.3 print
``host:pid:tid [dev] INFO ...`` without the word NCCL and ``Using internal Network IB``; 2.4 prints
``Ring 00 : 7 -> 8 [send] via NET/...``; newer releases put hex bus ids in the brackets
(``9[101d0] -> 0[101c0]``) and spell ``nRanks`` in their topology line. Vendor plugins name themselves
in the same places (:data:`NETWORKS`).

Channel lines say what a connection actually uses, so they win over init lines, which only say
what NCCL found. The ``NET/Socket : Using`` init line is the weakest evidence: NCCL 2.4.0-2.4.7 print
it in every process whatever the transport, because they always bring up the socket transport for
bootstrap before trying IB (NVIDIA/nccl v2.4.7-1 src/init.cc:127 "Always initialize sockets", then
src/transport/net_socket.cc:42 and net_ib.cc:168 print both init lines; their channel lines read
``Ring 00 : 7 -> 8 [send] via NET/IB/0/GDRDMA``, net.cc:306). From 2.4.8 the socket transport starts
only when IB did not (v2.4.8-1 src/init.cc:127-135), so there the line does mean sockets.

Transports: ``infiniband``, ``roce``, ``ib`` (NCCL's verbs transport whose link layer the log does not
show: InfiniBand and RoCE cannot be told apart), ``efa``, ``ofi`` (libfabric with another provider, or
with none shown), ``socket``, ``tcpx`` and ``tcpxo`` (Google's GPUDirect-TCPX/-TCPXO plugins),
``unknown`` (a network name this module does not know) and, for a file, ``mixed`` when ranks disagree.
How each network names itself, with its source, is in :data:`NETWORKS` and docs/nccl-preflight.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from ._lines import clean_lines

RDMA_TRANSPORTS = frozenset({"infiniband", "roce", "ib", "efa", "ofi"})
# Transports that carry GPU data over a fabric without the host's TCP stack in the data path.
FABRIC_TRANSPORTS = RDMA_TRANSPORTS | {"tcpx", "tcpxo"}

# How each network transport names itself: NCCL's `Using network <name>` line and its channel lines
# `via NET/<name>/<dev>` both print the `name` field of the ncclNet_t the transport registers.
NETWORKS: dict[str, str] = {
    # NCCL's own: src/transport/net_ib.cc (`"IB"`) and net_socket.cc (`"Socket"`), every 2.x release.
    "ib": "verbs",
    "socket": "socket",
    # Mellanox/NVIDIA nccl-rdma-sharp-plugins (HPC-X, "RDMA/SHARP"), at commit 8eb729dd136b0b1dd0c7b3b57c5727477d36816d
    # of src/p2p_plugin.c: it registers as `ncclNetPlugin_v6 = {"NCCL RDMA Plugin v6", ...}` (NCCL's loader line
    # "NET/Plugin: Loaded net plugin NCCL RDMA Plugin v6 (v6)"), then `INFO(..., "P2P plugin %s", ...)` names the
    # network it copied in, `IBext` (src/ib_plugin.c; `IBext_v8` in its v8 build), and that name is what NCCL's
    # `Using network` prints. Its CollNet is src/sharp_plugin.c's `ncclCollNetPlugin_v6 = {"SHARP", ...}`
    # ("Loaded collnet plugin SHARP"); SHARP-capable devices read `mlx5_0:1/IB/SHARP`.
    "ibext": "verbs",
    # aws/aws-ofi-nccl, for EFA and for any other libfabric provider (HPE Slingshot's cxi, verbs, tcp):
    # `AWS Libfabric` up to v1.11.0, `Libfabric` after, or `AWS Libfabric`/`OFI` when NCCL_NET asks for
    # those (src/nccl_ofi_interface_nvidia.c, nvidia_plugin_name_fixup).
    "aws libfabric": "libfabric",
    "libfabric": "libfabric",
    "ofi": "libfabric",
    # google/nccl-plugin-gpudirecttcpx at commit 4b8ea7f2716fc21b026b4d09c79578d43b23e86d: src/config.h.in
    # `PRODUCT_NAME "GPUDirectTCPX"` (A3 High, TCPX), and src/net_tcpx.cc's init prints
    # `"NET/" PRODUCT_NAME " ver. " TCPX_VERSION_STRING` ("NET/GPUDirectTCPX ver. 3.1.8.");
    # `_v7` is the ncclNet v7 build. The TCPXO plugin of A3 Mega names itself `FasTrak`.
    "gpudirecttcpx": "tcpx",
    "fastrak": "tcpxo",
    # Google's gIB (A3 Ultra, A4): RDMA over RoCE, `Using network gIB` (Cloud "NCCL/gIB" troubleshooting).
    "gib": "roce",
    # google/nccl-fastsocket, Google Cloud's TCP plugin for gVNIC VMs (A2, A3 without GPUDirect): NCCL prints
    # its name in "NET/Plugin: Loaded net plugin FastSocket (v6)" (NVIDIA/nccl#1519, #1267), and the plugin's
    # own lines (net_fastsocket.cc at commit 1c73af47267b120189d9be08ca406bac40ae47b1, ncclFastSocketInit)
    # are `INFO(NCCL_INIT | NCCL_NET, "NET/FastSocket : Using%s", ...)` with " [%d]%s:%s" per interface,
    # "NET/FastSocket : Tx CPU start: %d" and "NET/FastSocket plugin initialized". Its data travels over TCP.
    "fastsocket": "socket",
}
# The one line for a log NCCL wrote at NCCL_DEBUG=WARN: NCCL names its network only in INFO lines
# (`Using network`, channel lines: INFO(NCCL_INIT|NCCL_NET, ...) in src/init.cc and src/transport/net.cc).
WARN_ONLY = (
    "transport unknown: the NCCL log holds only WARN lines (NCCL_DEBUG=WARN), which never name the network "
    "NCCL used; rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET"
)
# libfabric providers that do not move data by RDMA (libfabric's prov/ directory).
_SOCKET_PROVIDERS = ("tcp", "sockets", "udp")

# Where a WARN line names its source. NCCL's logger (src/debug.cc, ncclDebugLog) writes a WARN as
# `"%s:%d:%d [%d] %s:%d NCCL WARN "` of hostname, pid, tid, cudaDev, filefunc and line, and filefunc is
# whatever the caller passes: NCCL's own `__FILE__` ("misc/ibvwrap.cc:284"), or a plugin's
# `__PRETTY_FUNCTION__`: aws-ofi-nccl's NCCL_OFI_WARN (include/nccl_ofi_log.h) gives
# "nccl_net_ofi_rdma_init:7978", a C++ plugin a signature with blanks,
# "tcpxResult_t tcpxCommProgress(tcpxComm*):1231" (google/nccl-plugin-gpudirecttcpx#1).
_SOURCE = r"(?:[^\s\[][^\[\]]*?:\d+\s+)?"
_PREFIX = re.compile(
    r"^(?:(?P<host>[^\s:\[]+):(?P<pid>\d+)(?::(?P<tid>\d+))?\s+)?\[\s*(?P<dev>\d+)\s*\]\s+"
    # NCCL before 2.3 prints `host:pid:tid [dev] INFO ...`, without the word NCCL (horovod/horovod#489).
    + _SOURCE
    + r"(?:NCCL\s+)?(?P<level>INFO|WARN|TRACE|ABORT)\s?(?P<msg>.*)$"
)
# A line quoted without NCCL's `host:pid:tid [dev]` prefix ("NCCL INFO Using network IB").
_BARE = re.compile(r"^" + _SOURCE + r"NCCL\s+(?P<level>INFO|WARN|TRACE|ABORT)\s?(?P<msg>.*)$")
_P2P_PLUGIN = re.compile(r"^P2P plugin\s+(?P<name>\S+)")
_PLUGIN_LOADED = re.compile(r"^NET/Plugin\s*:\s*Loaded (?:net|coll(?:net)?) plugin\s+(?P<name>.+?)\s*$")
_PLUGIN_INIT = re.compile(
    r"^(?:NET/(?P<net>GPUDirectTCPX|FasTrak|gIB|FastSocket)\b|Initializing network\s+(?P<init>[\w.-]+))", re.IGNORECASE
)
_IB_USING = re.compile(r"^NET/IB\s*:\s*Using\s+(?P<devs>.*?)(?:;\s*OOB.*)?$")
_IB_DEV = re.compile(r"(?:\[\d+\]\s*)?(?P<dev>[A-Za-z][\w.-]*):(?:uverbs\d+:)?\d+/(?P<link>IB|RoCE)\b")
_SOCKET_USING = re.compile(r"^NET/Socket\s*:\s*Using\b")
# `Using network IB` from 2.4 on; `Using internal Network Socket` in 2.2-2.3 (bytedance/byteps#61).
_NETWORK = re.compile(r"^Using (?:internal )?[Nn]etwork\s+(?P<name>.+?)\s*$")
_OFI_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is (?P<prov>[\w;-]+)")
_OFI_ANY = re.compile(r"^NET/OFI\b")
# aws-ofi-nccl on EC2 with FI_PROVIDER unset restricts libfabric to EFA and says so; without EFA the plugin
# then fails and NCCL falls back to its TCP (aws/aws-ofi-nccl src/platform-aws.cpp at commit
# 01666ece684caf1ce4c216d6c64396fd91e3cca4, platform_init: `NCCL_OFI_INFO(NCCL_INIT, "Setting provider_filter
# to efa")`, printed behind the "NET/OFI " prefix NCCL_OFI_INFO adds in include/nccl_ofi_log.h). Libfabric
# channel lines after this line therefore mean EFA, when the log lacks the `Selected Provider` line.
_OFI_FILTER = re.compile(r"NET/OFI Setting provider_filter to (?P<prov>[\w;-]+)")
_OFI_PLUGIN = re.compile(r"NET/OFI (?:Initializing|Using) aws-ofi-nccl\s+(?P<ver>\S+)")
_CHANNEL = re.compile(
    r"(?:Channel|Ring|Tree)\s+\d+(?:/\d+)?\s*:\s*(?P<src>\d+)(?:\[[0-9a-fA-F]+\])?\s*->\s*(?P<dst>\d+)"
    r"(?:\[[0-9a-fA-F]+\])?.*?\bvia\s+(?P<via>\S.*)$"
)
_VIA_NET = re.compile(r"^NET/(?P<net>[^/]+)/(?P<dev>\d+)(?:\(\d+\))?(?P<rest>\S*)")
# `nranks` in Init COMPLETE/Destroy lines; `nRanks` in the topology line of newer releases.
_COMM_RANK = re.compile(r"\bcomm 0x[0-9a-fA-F]+ rank (?P<rank>\d+) n[Rr]anks (?P<nranks>\d+)")
_GDR_ON = re.compile(r"GPU Direct RDMA Enabled", re.IGNORECASE)
_GDR_OFF = re.compile(r"GPU Direct RDMA Disabled", re.IGNORECASE)
_NO_IB = re.compile(r"NET/IB\s*:\s*No device found", re.IGNORECASE)
# ibv_devinfo / ibstat output pasted next to the log ("link_layer: Ethernet", "Link layer: InfiniBand").
_LINK_ETH = re.compile(r"link[_ ]layer\s*:?\s*Ethernet", re.IGNORECASE)
_LINK_IB = re.compile(r"link[_ ]layer\s*:?\s*(?:IB|InfiniBand)\b", re.IGNORECASE)
_VERSION = re.compile(r"NCCL version\s+(?P<ver>\S+)")


@dataclass
class ProcessTransport:
    """What one NCCL process (host, pid) used; a process drives one or more ranks."""

    host: str
    pid: int
    ranks: set[int] = field(default_factory=set)
    devices: list[str] = field(default_factory=list)
    link: str | None = None
    """IB link layer of the HCAs NCCL picked: ``IB`` or ``RoCE``."""
    network: str | None = None
    """NCCL's ``Using network`` name (IB, Socket, AWS Libfabric, ...)."""
    channel_nets: set[str] = field(default_factory=set)
    ofi_provider: str | None = None
    ofi_filter: str | None = None
    """The provider aws-ofi-nccl restricted libfabric to (`Setting provider_filter to efa`)."""
    ofi_plugin: bool = False
    plugin_network: str | None = None
    """A network named by a plugin's own init line (`NET/FasTrak ...`, `P2P plugin IBext_v8`)."""
    unknown_network: str | None = None
    """The network name, when it is none of :data:`NETWORKS`."""
    socket_seen: bool = False
    gdr_channel: bool | None = None
    gdr_enabled: bool | None = None
    transport: str | None = None
    gpudirect_rdma: bool | None = None

    @property
    def label(self) -> str:
        ranks = ",".join(str(r) for r in sorted(self.ranks)) or "?"
        return f"rank {ranks} ({self.host} pid {self.pid})"

    def as_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "pid": self.pid,
            "ranks": sorted(self.ranks),
            "transport": self.transport,
            "network": self.network or self.plugin_network,
            "ofi_provider": self.ofi_provider,
            "gpudirect_rdma": self.gpudirect_rdma,
            "devices": self.devices,
        }


@dataclass
class NcclLogReport:
    """Transport findings for one log file."""

    processes: list[ProcessTransport]
    nranks: int | None
    nccl_version: str | None
    problems: list[str]
    notes: list[str]
    info_lines: int = 0
    """NCCL INFO (and TRACE) lines read: the only lines that name a transport."""
    warn_lines: int = 0

    @property
    def warn_only(self) -> bool:
        """True for a log of NCCL WARN lines and nothing else: NCCL ran with NCCL_DEBUG=WARN, which never names
        the network, so no transport can be read from it."""
        return self.info_lines == 0 and self.warn_lines > 0

    @property
    def hosts(self) -> list[str]:
        """Hosts named by the log (lines quoted without their prefix name none)."""
        return list(dict.fromkeys(p.host for p in self.processes if p.host != "?"))

    @property
    def ranks(self) -> int | None:
        known = {r for p in self.processes for r in p.ranks}
        if self.nranks:
            return self.nranks
        return len(known) or None

    @property
    def transport(self) -> str | None:
        """One transport name when every rank agrees, ``mixed`` when they do not, None if unknown."""
        kinds = {p.transport for p in self.processes if p.transport}
        if "ib" in kinds and len(kinds & {"infiniband", "roce"}) == 1:
            kinds.discard("ib")  # one verbs fabric; some hosts' device lines are just not in the log
        if not kinds:
            return None
        if len(kinds) > 1 or "mixed" in kinds:
            return "mixed"
        return kinds.pop()

    @property
    def gpudirect_rdma(self) -> bool | None:
        """True only when every rank that uses RDMA does so with GPUDirect."""
        values = [p.gpudirect_rdma for p in self.processes if p.transport in RDMA_TRANSPORTS]
        known = [v for v in values if v is not None]
        if not known:
            return None
        return all(known)

    @property
    def socket_ranks(self) -> list[ProcessTransport]:
        return [p for p in self.processes if p.transport in ("socket", "mixed")]


def parse_nccl_log(text: str) -> NcclLogReport | None:
    """Parse NCCL_DEBUG=INFO output; None when there is no NCCL debug line at all."""
    procs: dict[tuple[str, int], ProcessTransport] = {}
    notes: list[str] = []
    version: str | None = None
    nranks: int | None = None
    file_link: set[str] = set()
    file_provider: str | None = None
    file_filter: str | None = None
    no_ib: set[tuple[str, int]] = set()
    seen = False
    info_lines = warn_lines = 0

    for line in clean_lines(text):
        stripped = line.strip()
        match = _VERSION.search(stripped)
        if match and not stripped.startswith("#") and version is None:
            version = match.group("ver")
        if _LINK_ETH.search(stripped):
            file_link.add("RoCE")
        elif _LINK_IB.search(stripped):
            file_link.add("IB")
        match = _PREFIX.match(stripped) or _BARE.match(stripped)
        if not match:
            continue
        seen = True
        # Lines quoted without NCCL's prefix belong to one unnamed process.
        host = match.groupdict().get("host") or "?"
        pid = int(match.groupdict().get("pid") or 0)
        key = (host, pid)
        proc = procs.get(key)
        if proc is None:
            proc = procs[key] = ProcessTransport(host=host, pid=pid)
        msg = match["msg"].strip()
        if match["level"] == "WARN":
            warn_lines += 1
            if len(notes) < 20:
                notes.append(f"{proc.host} pid {proc.pid}: NCCL WARN {msg}")
            continue
        info_lines += match["level"] in ("INFO", "TRACE")
        _read_message(proc, msg)
        if proc.ofi_provider:
            file_provider = file_provider or proc.ofi_provider
        file_filter = file_filter or proc.ofi_filter
        comm = _COMM_RANK.search(msg)
        if comm:
            nranks = max(nranks or 0, int(comm["nranks"]))
        if _NO_IB.search(msg):
            no_ib.add(key)

    if not seen:
        return None
    if no_ib:
        hosts = sorted({host for host, _ in no_ib})
        notes.append(f"NET/IB found no usable device in {len(no_ib)} process(es) on {', '.join(hosts)}")
    host_links = _host_links(list(procs.values()))
    libfabric_named = any(
        _network_class(net) == "libfabric" for p in procs.values() for net in (*p.channel_nets, p.network or "")
    )
    for proc in procs.values():
        _resolve(proc, file_link, host_links.get(proc.host), file_provider, file_filter, libfabric_named)
    _discount_socket_init_lines(list(procs.values()), version, notes)
    problems = _problems(list(procs.values()))
    if info_lines == 0 and warn_lines:
        notes.insert(0, WARN_ONLY)
    return NcclLogReport(
        processes=list(procs.values()),
        nranks=nranks,
        nccl_version=version,
        problems=problems,
        notes=notes,
        info_lines=info_lines,
        warn_lines=warn_lines,
    )


def _read_message(proc: ProcessTransport, msg: str) -> None:
    """Record the evidence one INFO message carries for its process."""
    if msg.startswith("NET/IB"):
        match = _IB_USING.match(msg)
        links = set()
        for dev in _IB_DEV.finditer(match["devs"] if match else msg):
            if dev["dev"] not in proc.devices:
                proc.devices.append(dev["dev"])
            links.add(dev["link"])
        if links:
            proc.link = "RoCE" if links == {"RoCE"} else "IB" if links == {"IB"} else "mixed"
        if match:
            return
    if _SOCKET_USING.match(msg):
        proc.socket_seen = True
        return
    match = _NETWORK.match(msg)
    if match:
        proc.network = match["name"]
        return
    match = _OFI_PROVIDER.search(msg)
    if match:
        proc.ofi_provider = match["prov"].lower()
        return
    match = _OFI_FILTER.search(msg)
    if match:
        proc.ofi_filter = match["prov"].lower()
        proc.ofi_plugin = True  # a NET/OFI line: the plugin loaded, as for any other (_OFI_ANY)
        return
    if _OFI_PLUGIN.search(msg) or _OFI_ANY.match(msg):
        proc.ofi_plugin = True
        return
    match = _P2P_PLUGIN.match(msg) or _PLUGIN_INIT.match(msg)
    if match:
        name = match.groupdict().get("name") or match.groupdict().get("net") or match.groupdict().get("init")
        if name and _network_class(name) is not None:
            proc.plugin_network = proc.plugin_network or name
        return
    match = _COMM_RANK.search(msg)
    if match:
        proc.ranks.add(int(match["rank"]))
        return
    if _GDR_ON.search(msg):
        proc.gdr_enabled = True
        return
    if _GDR_OFF.search(msg):
        if proc.gdr_enabled is None:
            proc.gdr_enabled = False
        return
    match = _CHANNEL.search(msg)
    if match:
        proc.ranks.add(int(match["src"]))
        via = _VIA_NET.match(match["via"])
        if via:
            proc.channel_nets.add(via["net"])
            gdr = "GDRDMA" in via["rest"]
            proc.gdr_channel = gdr if proc.gdr_channel is None else (proc.gdr_channel or gdr)


def _network_class(net: str) -> str | None:
    """The class of a network name (`verbs`, `socket`, `libfabric`, `tcpx`, ...); None when unknown.

    Names carry a plugin API suffix (`IBext_v8`, `GPUDirectTCPX_v7`) that does not change what they are.
    """
    name = re.sub(r"_v\d+$", "", net.strip().lower())
    return NETWORKS.get(name)


def _kind(net: str, link: str | None, provider: str | None) -> str:
    """Map an NCCL network name to a transport kind (see the module docstring)."""
    klass = _network_class(net)
    if klass == "verbs":
        return {"RoCE": "roce", "IB": "infiniband"}.get(link or "", "ib")
    if klass == "libfabric":
        if provider is None:
            return "ofi"
        if provider.startswith("efa"):
            return "efa"
        return "socket" if provider.startswith(_SOCKET_PROVIDERS) else "ofi"
    return klass or "unknown"


def _host_links(procs: list[ProcessTransport]) -> dict[str, str]:
    """The HCA link layer each host's processes agree on: one process's `NET/IB : Using` line speaks for
    the host's others, which share its HCAs."""
    seen: dict[str, set[str]] = {}
    for proc in procs:
        if proc.link in ("IB", "RoCE"):
            seen.setdefault(proc.host, set()).add(proc.link)
    return {host: links.pop() for host, links in seen.items() if len(links) == 1}


# The first NCCL release whose socket init line means the socket transport was chosen (see above).
SOCKET_LINE_MEANS_SOCKETS_FROM = (2, 4, 8)


def _version_tuple(version: str | None) -> tuple[int, ...] | None:
    """`2.4.7+cuda10.1` -> (2, 4, 7); None when there is no version or it does not read as one."""
    match = re.match(r"(\d+)\.(\d+)\.(\d+)", version or "")
    return tuple(int(part) for part in match.groups()) if match else None


def _resolve(
    proc: ProcessTransport,
    file_link: set[str],
    host_link: str | None,
    file_provider: str | None,
    file_filter: str | None = None,
    libfabric_named: bool = False,
) -> None:
    """Decide one process's transport from its strongest evidence (the socket init line is the weakest)."""
    link = proc.link or host_link or (next(iter(file_link)) if len(file_link) == 1 else None)
    # the provider selected (this process's line, else another's: they share the plugin's settings), else the
    # provider aws-ofi-nccl restricted libfabric to, once some process names libfabric as the network NCCL uses
    # (the filter alone comes before the plugin may still fail and leave NCCL on its sockets)
    provider = proc.ofi_provider or file_provider or (proc.ofi_filter or file_filter if libfabric_named else None)
    named = [net for net in (*sorted(proc.channel_nets), proc.network, proc.plugin_network) if net]
    proc.unknown_network = next((net for net in named if _network_class(net) is None), None)
    if proc.channel_nets:
        kinds = {_kind(net, link, provider) for net in proc.channel_nets}
        proc.transport = kinds.pop() if len(kinds) == 1 else "mixed"
    elif proc.network:
        proc.transport = _kind(proc.network, link, provider)
    elif proc.plugin_network:
        proc.transport = _kind(proc.plugin_network, link, provider)
    elif proc.ofi_provider or proc.ofi_plugin:
        proc.transport = _kind("libfabric", link, provider)
    elif proc.devices:
        proc.transport = "roce" if link == "RoCE" else "infiniband"
    elif proc.socket_seen:
        proc.transport = "socket"
    if proc.transport in RDMA_TRANSPORTS:
        if proc.gdr_channel is not None:
            proc.gpudirect_rdma = proc.gdr_channel
        else:
            proc.gpudirect_rdma = proc.gdr_enabled


def _discount_socket_init_lines(procs: list[ProcessTransport], version: str | None, notes: list[str]) -> None:
    """A process known only by its socket init line, in a log where others show an RDMA transport, is
    undetermined unless the log is from an NCCL whose socket line means sockets (2.4.8 or later)."""
    if not any(p.transport in FABRIC_TRANSPORTS for p in procs):
        return
    known = _version_tuple(version)
    if known is not None and known >= SOCKET_LINE_MEANS_SOCKETS_FROM:
        return
    weak = [p for p in procs if p.transport == "socket" and p.socket_seen and not p.channel_nets and not p.network]
    for proc in weak:
        proc.transport = None
    if weak:
        notes.append(
            f"{len(weak)} process(es) show only NCCL's `NET/Socket : Using` init line, which NCCL before 2.4.8 "
            f"prints in every process whatever the transport (NCCL {version or 'version not in the log'}): "
            f"their transport is not known: {', '.join(p.label for p in weak[:4])}"
        )


def _problems(procs: list[ProcessTransport]) -> list[str]:
    """Name every rank that fell back to sockets while others use an RDMA fabric."""
    rdma = {p.transport for p in procs if p.transport in FABRIC_TRANSPORTS}
    if "ib" in rdma and rdma & {"infiniband", "roce"}:
        rdma.discard("ib")  # the same verbs transport, on a host whose device line is not in the log
    problems: list[str] = []
    if rdma:
        fabric = "/".join(sorted(rdma))
        for proc in procs:
            if proc.transport == "socket":
                problems.append(f"{proc.label} fell back to sockets (NET/Socket) while others use {fabric}")
            elif proc.transport == "mixed":
                problems.append(f"{proc.label} sends over more than one network: {sorted(proc.channel_nets)}")
    if len(rdma) > 1:
        problems.append(f"ranks disagree on the RDMA transport: {', '.join(sorted(rdma))}")
    no_gdr = [p for p in procs if p.transport in RDMA_TRANSPORTS and p.gpudirect_rdma is False]
    if no_gdr and any(p.transport in RDMA_TRANSPORTS and p.gpudirect_rdma for p in procs):
        labels = ", ".join(p.label for p in no_gdr[:4])
        problems.append(f"GPUDirect RDMA is off on {labels} but on elsewhere (nvidia-peermem not loaded?)")
    return problems
