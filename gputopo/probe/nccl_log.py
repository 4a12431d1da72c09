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
+ NVML index), and sums them up per pair of GPUs. A line's ``host:pid`` prefix is that of the
process that printed it: the sender, except on ``[receive]`` lines; the other end's host comes
from the rank -> host map the log holds (nccl_ranks.py), looked up in the line's communicator.
NCCL <= 2.5 printed ``Ring 00 : 3[3] -> 2[2] via P2P/IPC`` and ``Ring 00 : 15 -> 0 [send] via
NET/Socket/0``; NET plugins have names with spaces (``NET/AWS Libfabric/1/GDRDMA``), kept whole.
No torch, no NCCL needed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Tuple

from gputopo.line_prefixes import strip_launcher_prefix
from gputopo.model.bus_id import from_nccl
from gputopo.probe.nccl_ranks import RankMap, RankSeen

#: Transport families, from the text after "via ".
TRANSPORT_KINDS = ("P2P", "SHM", "NET", "COLLNET", "NVLS")
#: Where the bytes of each family go, for sentences.
KIND_WORDS = {
    "P2P": "direct GPU peer-to-peer (NVLink or PCIe peer DMA)",
    "SHM": "host shared memory (staged through the CPU, no peer DMA)",
    "NET": "the network (InfiniBand/RoCE or sockets), no peer DMA",
}

_PREFIX = re.compile(r"^(?:.*?\s)?(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL INFO (?P<msg>.*)$")
#: "Channel 00/0 : 0[0] -> 1[1] via ...", NCCL <= 2.5 "Ring 00 : 3[3] -> 2[2] via P2P/IPC" and
#: "Ring 00 : 15 -> 0 [send] via NET/Socket/0" (no device in brackets). The transport is the rest
#: of the line: NET plugin names hold spaces ("NET/AWS Libfabric/1/GDRDMA").
_CHANNEL = re.compile(
    r"(?:Channel|Ring) (?P<ch>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)(?:\[(?P<sdev>[0-9a-fA-F]+)\])? -> "
    r"(?P<dst>\d+)(?:\[(?P<ddev>[0-9a-fA-F]+)\])?(?: \[(?P<dir>send|receive)\])? via (?P<via>.+?)\s*$")
_CHANNEL_START = re.compile(r"(?:Channel|Ring) \d+(?:/\d+)? : \d+")
_INIT = re.compile(
    r"comm 0x[0-9a-fA-F]+ rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<cuda>\d+)"
    r"(?: nvmlDev (?P<nvml>\d+))? busId (?P<bus>[0-9a-fA-F]+)(?: commId (?P<comm>0x[0-9a-fA-F]+))?")
_SETTING = re.compile(r"(?P<name>NCCL_[A-Z0-9_]+) set by environment to\s*(?P<value>.*?)\s*$")
_VERSION = re.compile(r"NCCL version (?P<v>\S+)")


def _bus_id(token: str) -> Optional[str]:
    """A bracket or busId token as ``0000:1b:00.0``; None for an NVML index (short decimal)."""
    addr = from_nccl(token)
    return addr.lspci if addr is not None else None


@dataclass(frozen=True)
class Endpoint:
    """One GPU as a log names it: its host and bus id ("0000:1b:00.0") or, failing that, NVML index."""

    host: str
    bus_id: Optional[str] = None
    nvml_dev: Optional[int] = None
    rank: Optional[int] = None  # only when neither bus id nor NVML index is known
    #: only the printing process's ``[cudaDev]`` (NCCL <= 2.5 NET lines): a CUDA number, which
    #: CUDA_VISIBLE_DEVICES renumbers, so it is never matched to a GPU index
    cuda_dev: Optional[int] = None

    def label(self) -> str:
        where = self.bus_id if self.bus_id else f"nvml {self.nvml_dev}" if self.nvml_dev is not None \
            else f"cuda {self.cuda_dev}" if self.cuda_dev is not None else f"rank {self.rank} (GPU not in the log)"
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
    #: rank -> the process / machine that printed for it (nccl_ranks.py): the peers' hosts.
    rank_map: RankMap = field(default_factory=RankMap)
    #: communicator (commId, else "nranks N") -> rank -> the process that printed its Init line
    comm_ranks: Dict[str, Dict[int, RankSeen]] = field(default_factory=dict)
    _current_comm: Dict[Tuple[str, int], str] = field(default_factory=dict)  # (host, pid) -> last Init START
    #: What the log says that could not be used, per line or connection.
    problems: List[str] = field(default_factory=list)
    _raw: List[Tuple[str, int, int, dict]] = field(default_factory=list)  # channel lines not yet finished

    def pairs(self) -> Dict[Tuple[Endpoint, Endpoint], List[ChannelLine]]:
        """Channel lines per unordered pair of GPUs (endpoints sorted by label)."""
        out: Dict[Tuple[Endpoint, Endpoint], List[ChannelLine]] = {}
        for c in self.channels:
            a, b = sorted((c.src, c.dst), key=Endpoint.label)
            out.setdefault((a, b), []).append(c)
        return out


def parse_nccl_debug(text: str, into: Optional[NcclDebugLog] = None) -> NcclDebugLog:
    """Read NCCL INFO lines from ``text`` (other lines are ignored). Init lines may come after the
    channel lines they explain (NCCL < 2.18 logs Init COMPLETE only), so hosts and bus ids are
    filled in at the end (``finish_channels``)."""
    log = into if into is not None else NcclDebugLog()
    for line in text.splitlines():
        read_debug_line(log, line)
    return finish_channels(log)


def read_debug_line(log: NcclDebugLog, line: str, where: str = "") -> None:
    """Feed one line (launcher prefixes and colours are removed first); ``where`` ("file:line")
    names it when it is a channel line that cannot be read (cut or garbled)."""
    bare = strip_launcher_prefix(line).strip()
    m = _PREFIX.match(bare)
    if not m:
        v = _VERSION.match(bare)  # rank 0 prints "NCCL version 2.9.9+cuda11.2" without the INFO prefix
        if v and v.group("v") not in log.versions:
            log.versions.append(v.group("v"))
        return
    log.lines += 1
    host, msg, pid, dev = m.group("host"), m.group("msg"), int(m.group("pid")), int(m.group("dev"))
    c = _CHANNEL.search(msg)
    if c:
        g = c.groupdict()
        g["via"] = g["via"].split(", [", 1)[0].rstrip(".")
        g["comm"] = log._current_comm.get((host, pid))
        log._raw.append((host, pid, dev, g))
        own = int(g["dst"]) if g["dir"] == "receive" else int(g["src"])
        if g["comm"] is None:  # ranks of an unknown communicator: only the world map may hold them
            log.rank_map.from_channel(own, RankSeen(host=host, pid=pid, cuda_dev=dev))
        return
    if _CHANNEL_START.match(msg) and "->" in msg:
        log.problems.append(f"{where or 'a line'}: a channel line that could not be read (cut or garbled): "
                            f"{msg[:120]!r}")
        return
    i = _INIT.search(msg)
    if i:
        nvml = i.group("nvml")
        bus = _bus_id(i.group("bus").rjust(5, "0"))
        if nvml is not None and bus is not None:
            log.buses[(host, int(nvml))] = bus
        rank = int(i.group("rank"))
        log.ranks[(host, rank)] = {
            "bus_id": bus,
            "nvml_dev": int(nvml) if nvml is not None else None, "cuda_dev": int(i.group("cuda")),
            "nranks": int(i.group("nranks")), "comm_id": i.group("comm")}
        seen = RankSeen(host=host, pid=pid, cuda_dev=int(i.group("cuda")),
                        nvml_dev=int(nvml) if nvml is not None else None, bus_id=bus)
        log.rank_map.from_init(rank, int(i.group("nranks")), seen)
        comm = i.group("comm") or f"nranks {i.group('nranks')}"
        log.comm_ranks.setdefault(comm, {})[rank] = seen
        if "Init START" in msg:  # the channel lines this process prints next are this communicator's
            log._current_comm[(host, pid)] = comm
        return
    s = _SETTING.search(msg)
    if s:
        value = s.group("value")
        log.settings[s.group("name")] = value[:-1] if value.endswith(".") else value  # NCCL's period
        return
    v = _VERSION.search(msg)
    if v and v.group("v") not in log.versions:
        log.versions.append(v.group("v"))


def finish_channels(log: NcclDebugLog) -> NcclDebugLog:
    """Turn the channel lines read so far into ChannelLines. The printing rank is the line's own
    process; the peer is looked up among the ranks of the communicator the line belongs to (the
    printing process's last ``Init START``), else in the world map (nccl_ranks.py), never taken
    from the line's host, except that P2P and SHM peers are on the printer's machine."""
    log.rank_map.assign_machines()
    for host, pid, dev, g in log._raw:
        src_rank, dst_rank = int(g["src"]), int(g["dst"])
        own_rank = dst_rank if g["dir"] == "receive" else src_rank
        peer_rank = src_rank if own_rank == dst_rank else dst_rank
        members = log.comm_ranks.get(g["comm"]) if g["comm"] else None
        own_seen = (members or {}).get(own_rank) if members is not None else log.rank_map.seen(own_rank)
        own_is_world_rank = members is None and own_seen is not None and (own_seen.host, own_seen.pid) == (host, pid)
        if own_seen is None or (own_seen.host, own_seen.pid) != (host, pid):
            own_seen = RankSeen(host=host, pid=pid, cuda_dev=dev)
        peer_seen = members.get(peer_rank) if members is not None else log.rank_map.seen(peer_rank)
        # World ranks carry their machine label; a sub-communicator's are labelled by process.
        own_label = (log.rank_map.host_of(own_rank) if own_is_world_rank else None) or log.rank_map.label_for(own_seen)
        local = g["via"].split("/", 1)[0].upper() in ("P2P", "SHM")
        peer_label = (log.rank_map.host_of(peer_rank) if members is None and peer_seen is not None else None) or \
            (log.rank_map.label_for(peer_seen) if peer_seen is not None else own_label if local else "?")
        own_ep = _endpoint_of(log, own_seen, own_label, g["sdev"] if own_rank == src_rank else g["ddev"], own_rank)
        peer_ep = _endpoint_of(log, peer_seen, peer_label, g["ddev"] if own_rank == src_rank else g["sdev"],
                               peer_rank)
        src, dst = (own_ep, peer_ep) if own_rank == src_rank else (peer_ep, own_ep)
        if src == dst:
            log.problems.append(f"rank {src_rank} -> {dst_rank} via {g['via']}: both ends read as {src.label()} "
                                "(the log does not tell the two GPUs apart): line not counted")
            continue
        log.channels.append(ChannelLine(src_rank=src_rank, dst_rank=dst_rank, src=src, dst=dst, via=g["via"],
                                        direction=g["dir"]))
    log._raw = []
    return log


def _endpoint_of(log: NcclDebugLog, seen: Optional[RankSeen], label: str, token: Optional[str],
                 rank: int) -> Endpoint:
    """One end's GPU: from the bracket token (bus id or NVML index), else from what the rank's own
    lines said (Init: bus id / nvmlDev; NCCL <= 2.5 lines: the printing process's [cudaDev])."""
    name = seen.host if seen is not None else label
    if token:
        bus = _bus_id(token)
        if bus is not None:
            return Endpoint(label, bus_id=bus)
        dev = int(token)
        return Endpoint(label, bus_id=log.buses.get((name, dev)), nvml_dev=dev)
    if seen is not None and (seen.bus_id or seen.nvml_dev is not None):
        return Endpoint(label, bus_id=seen.bus_id, nvml_dev=seen.nvml_dev)
    if seen is not None and seen.cuda_dev is not None:
        return Endpoint(label, cuda_dev=seen.cuda_dev)
    return Endpoint(label, rank=rank)  # the log never says which GPU this rank drove


def parse_nccl_debug_files(paths: Iterable) -> NcclDebugLog:
    """Parse several files (one per rank or one for the job) into one log. InputFileError when
    one cannot be read or is binary."""
    from gputopo.text_input import text_lines

    log = NcclDebugLog()
    for p in paths:
        with text_lines(str(p), "an NCCL_DEBUG=INFO log") as lines:  # streamed; binary refused
            for lineno, line in enumerate(lines, start=1):
                read_debug_line(log, line, f"{p}:{lineno}")
    return finish_channels(log)


def transport_summary(lines: List[ChannelLine], source: str) -> dict:
    """What one pair's channel lines say, as stored with measurements and in run folders:
    ``{"kind": "SHM", "via": ["SHM/direct/direct"], "channels": 2, "source": "nccl-debug"}``.
    ``kind`` is "mixed" when the pair used several families (e.g. P2P one way, NET the other)."""
    kinds = sorted({c.kind for c in lines})
    return {"kind": kinds[0] if len(kinds) == 1 else "mixed", "kinds": kinds,
            "via": sorted({c.via for c in lines}), "channels": len(lines), "source": source}
