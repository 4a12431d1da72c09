"""What NCCL actually did: its transport per GPU pair, read from NCCL_DEBUG=INFO output.

NCCL (src/transport/*.cc, NVIDIA/nccl 2.2x) logs one line per channel connection, on the sender::

    host:pid:tid [cudaDev] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read
    ... Channel 00/1 : 0[0] -> 1[1] via P2P/CUMEM/read        (cuMem, NCCL >= 2.19; /CE: copy engine)
    ... Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer    (both GPUs in one process)
    ... Channel 00/0 : 0[0] -> 2[2] via P2P/indirect/1[1]     (through an intermediate GPU)
    ... Channel 00 : 0[0] -> 1[1] via SHM/direct/direct       (host shared memory)
    ... Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA, [receive] via NET/Socket/1

``R[X]``: rank R and, since NCCL 2.12 or so, X = the GPU's NVML index (``nvmlDev``); older
releases print its PCI bus id as NCCL's integer (``0[1b000]`` = 0000:1b:00.0). Which GPU a rank
drives is also told by ``comm 0x... rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x...
- Init START|COMPLETE`` lines (older: without nvmlDev and commId). Settings NCCL read from the
environment are logged as ``NCCL_P2P_DISABLE set by environment to 1``.

The parser keeps every channel line with the GPUs it joins (host + bus id where known, else host
+ NVML index), and sums them up per pair of GPUs. No torch, no NCCL needed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

#: Transport families, from the text after "via ".
TRANSPORT_KINDS = ("P2P", "SHM", "NET", "COLLNET", "NVLS")
#: Where the bytes of each family go, for sentences.
KIND_WORDS = {
    "P2P": "direct GPU peer-to-peer (NVLink or PCIe peer DMA)",
    "SHM": "host shared memory (staged through the CPU, no peer DMA)",
    "NET": "the network (InfiniBand/RoCE or sockets), no peer DMA",
}

_PREFIX = re.compile(r"^(?:.*?\s)?(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL INFO (?P<msg>.*)$")
_CHANNEL = re.compile(
    r"Channel (?P<ch>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)\[(?P<sdev>[0-9a-fA-F]+)\] -> "
    r"(?P<dst>\d+)\[(?P<ddev>[0-9a-fA-F]+)\](?: \[(?P<dir>send|receive)\])? via (?P<via>\S+(?: pointer)?(?:/\S+)*)")
_INIT = re.compile(
    r"comm 0x[0-9a-fA-F]+ rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<cuda>\d+)"
    r"(?: nvmlDev (?P<nvml>\d+))? busId (?P<bus>[0-9a-fA-F]+)(?: commId (?P<comm>0x[0-9a-fA-F]+))?")
_SETTING = re.compile(r"(?P<name>NCCL_[A-Z0-9_]+) set by environment to (?P<value>\S+)")
_VERSION = re.compile(r"NCCL version (?P<v>\S+)")


def bus_id_from_nccl(token: str) -> Optional[str]:
    """NCCL's integer bus id ("1b000": domain<<20 | bus<<12 | device<<4 | function) as
    ``0000:1b:00.0``; None for a token that is an NVML index (short decimal)."""
    if len(token) < 4:
        return None
    try:
        v = int(token, 16)
    except ValueError:
        return None
    return f"{v >> 20:04x}:{(v >> 12) & 0xFF:02x}:{(v >> 4) & 0xFF:02x}.{v & 0xF:x}"


@dataclass(frozen=True)
class Endpoint:
    """One GPU as a log names it: its host and bus id ("0000:1b:00.0") or, failing that, NVML index."""

    host: str
    bus_id: Optional[str] = None
    nvml_dev: Optional[int] = None

    def label(self) -> str:
        where = self.bus_id if self.bus_id else f"nvml {self.nvml_dev}"
        return f"{self.host}/{where}" if self.host else where


@dataclass
class ChannelLine:
    src_rank: int
    dst_rank: int
    src: Endpoint
    dst: Endpoint
    via: str  # "P2P/IPC/read", "SHM/direct/direct", "NET/IB/0/GDRDMA", "P2P/direct pointer"
    direction: Optional[str] = None  # "send" | "receive" (NET lines), None otherwise

    @property
    def kind(self) -> str:
        head = self.via.split("/", 1)[0].upper()
        return head if head in TRANSPORT_KINDS else head or "?"


@dataclass
class NcclDebugLog:
    """Everything read from one or more NCCL INFO logs."""

    channels: List[ChannelLine] = field(default_factory=list)
    #: (host, rank) -> {"bus_id", "nvml_dev", "cuda_dev", "nranks", "comm_id"} from Init lines
    #: (the last communicator's, when a job makes several)
    ranks: Dict[Tuple[str, int], dict] = field(default_factory=dict)
    #: (host, nvmlDev) -> bus id, from every Init line (unique per host, unlike ranks)
    buses: Dict[Tuple[str, int], str] = field(default_factory=dict)
    settings: Dict[str, str] = field(default_factory=dict)  # NCCL_* read from the environment
    versions: List[str] = field(default_factory=list)
    lines: int = 0  # NCCL INFO lines read

    def pairs(self) -> Dict[Tuple[Endpoint, Endpoint], List[ChannelLine]]:
        """Channel lines per unordered pair of GPUs (endpoints sorted by label)."""
        out: Dict[Tuple[Endpoint, Endpoint], List[ChannelLine]] = {}
        for c in self.channels:
            a, b = sorted((c.src, c.dst), key=Endpoint.label)
            out.setdefault((a, b), []).append(c)
        return out


def _endpoint(host: str, token: str, buses: Dict[Tuple[str, int], str]) -> Endpoint:
    """The GPU of a ``R[X]`` token: X is a bus id (old NCCL) or an NVML index, whose bus id the
    Init lines of that host tell (``buses``: (host, nvmlDev) -> bus id)."""
    bus = bus_id_from_nccl(token)
    if bus is not None:
        return Endpoint(host, bus_id=bus)
    dev = int(token)
    return Endpoint(host, bus_id=buses.get((host, dev)), nvml_dev=dev)


def parse_nccl_debug(text: str, into: Optional[NcclDebugLog] = None) -> NcclDebugLog:
    """Read NCCL INFO lines from ``text`` (other lines are ignored). Init lines may come after the
    channel lines they explain (NCCL < 2.18 logs Init COMPLETE only), so bus ids are filled in
    at the end."""
    log = into if into is not None else NcclDebugLog()
    raw: List[Tuple[str, dict]] = []
    for line in text.splitlines():
        m = _PREFIX.match(line.strip())
        if not m:
            continue
        log.lines += 1
        host, msg = m.group("host"), m.group("msg")
        c = _CHANNEL.search(msg)
        if c:
            raw.append((host, c.groupdict()))
            continue
        i = _INIT.search(msg)
        if i:
            nvml = i.group("nvml")
            bus = bus_id_from_nccl(i.group("bus").rjust(5, "0"))
            if nvml is not None and bus is not None:
                log.buses[(host, int(nvml))] = bus
            log.ranks[(host, int(i.group("rank")))] = {
                "bus_id": bus,
                "nvml_dev": int(nvml) if nvml is not None else None, "cuda_dev": int(i.group("cuda")),
                "nranks": int(i.group("nranks")), "comm_id": i.group("comm")}
            continue
        s = _SETTING.search(msg)
        if s:
            log.settings[s.group("name")] = s.group("value")
            continue
        v = _VERSION.search(msg)
        if v and v.group("v") not in log.versions:
            log.versions.append(v.group("v"))
    buses = log.buses
    for host, g in raw:
        src_rank, dst_rank = int(g["src"]), int(g["dst"])
        via = g["via"]
        kind = via.split("/", 1)[0].upper()
        dst_host = host if kind in ("P2P", "SHM") else _host_of(dst_rank, log.ranks)
        log.channels.append(ChannelLine(
            src_rank=src_rank, dst_rank=dst_rank, src=_endpoint(host, g["sdev"], buses),
            dst=_endpoint(dst_host, g["ddev"], buses), via=via, direction=g["dir"]))
    return log


def _host_of(rank: int, ranks: Dict[Tuple[str, int], dict]) -> str:
    """The host of a rank of a NET connection, when the Init lines name exactly one."""
    hosts = {h for (h, r) in ranks if r == rank}
    return hosts.pop() if len(hosts) == 1 else "?"


def parse_nccl_debug_files(paths: Iterable) -> NcclDebugLog:
    """Parse several files (one per rank or one for the job) into one log; InputFileError (one
    line) for a file that is not a readable regular file or is larger than any real log."""
    from gputopo.inputs import MAX_TEXT_BYTES, read_user_text

    log = NcclDebugLog()
    for p in paths:
        parse_nccl_debug(read_user_text(p, "NCCL log", MAX_TEXT_BYTES, errors="replace"), into=log)
    return log


def transport_summary(lines: List[ChannelLine], source: str) -> dict:
    """What one pair's channel lines say, as stored with measurements and in run folders:
    ``{"kind": "SHM", "via": ["SHM/direct/direct"], "channels": 2, "source": "nccl-debug"}``.
    ``kind`` is "mixed" when the pair used several families (e.g. P2P one way, NET the other)."""
    kinds = sorted({c.kind for c in lines})
    return {"kind": kinds[0] if len(kinds) == 1 else "mixed", "kinds": kinds,
            "via": sorted({c.via for c in lines}), "channels": len(lines), "source": source}
