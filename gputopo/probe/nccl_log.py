"""What NCCL actually did: its transport per GPU pair, read from NCCL_DEBUG=INFO output.

NCCL (src/transport/*.cc, NVIDIA/nccl 2.2x) logs one line per channel connection, on the sender::

    host:pid:tid [cudaDev] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read
    ... Channel 00/1 : 0[0] -> 1[1] via P2P/CUMEM/read        (cuMem, NCCL >= 2.19; /CE: copy engine)
    ... Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer    (both GPUs in one process)
    ... Channel 00/0 : 0[0] -> 2[2] via P2P/indirect/1[1]     (through an intermediate GPU)
    ... Channel 00 : 0[0] -> 1[1] via SHM/direct/direct       (host shared memory)
    ... Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA, [receive] via NET/Socket/1

A channel line is printed when NCCL *chooses* the transport and sets up its side (the
transport's ``...SendSetup``/``RecvSetup``); the connection is made after it (``...Connect``, in
src/transport.cc ``ncclTransportP2pSetup``), and NCCL says the rings/trees were connected with
``Connected all rings`` / ``Connected all trees`` (NCCL >= 2.12; src/transport/generic.cc) and
then ``Init COMPLETE``. A set-up that fails prints its ``NCCL WARN`` (``transport/p2p.cc:238
NCCL WARN failed to open CUDA IPC handle : 217 peer access is not supported...``) and the error
path (``transport.cc:68 -> 1``) after the channel line and before any of those. So a channel line
of a process whose next error path (not NCCL's progress thread) comes before its next
``Connected ...`` / ``Init COMPLETE`` / ``Init START`` is a transport NCCL tried, not one it
used: ``ChannelLine.setup`` says so ("failed" when the error names that transport's source,
"unfinished" when another transport's, or none, failed first), with the error line.

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

from gputopo.line_prefixes import strip_ansi, strip_launcher_prefix, strip_ray_repeat
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

#: ``host:pid:tid [cudaDev] NCCL INFO msg``; WARN lines name NCCL's source file and line before
#: ``NCCL WARN``. The ``host:pid:tid`` prefix (and the ``[cudaDev]``) may be gone where the lines were
#: cut out of the log (``grep -o 'NCCL INFO.*'``, ``cut -d' ' -f2-``, a paste): read, host unknown.
_PREFIX = re.compile(r"^(?:.*?\s)??(?:(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) )?(?:\[(?P<dev>\d+)\] )?"
                     r"(?:(?P<src>[\w./-]+\.\w+:\d+) )?NCCL (?P<level>INFO|WARN)(?: (?P<msg>.*))?$")
#: The host of lines without the ``host:pid:tid`` prefix.
HOST_UNKNOWN = "(host unknown)"
#: The host of a peer rank that never printed a line of its own (nor an Init line) in the log.
HOST_NOT_IN_LOG = "?"
#: The host of a peer rank of a communicator whose Init lines the log does not show (cut, or left
#: out by Ray): its rank numbers are not the world's, so neither its host nor its GPU can be told.
HOST_NOT_TOLD = "??"
#: What a channel line's transport may be, whole (NCCL 2.4 to 2.30, src/transport/{p2p,shm,net}.cc);
#: anything else is a line cut or garbled, skipped and counted, never guessed ("via P"). The
#: transport is read by its fields, whatever follows it after a blank: RCCL appends
#: `` comm 0x55d8 nRanks 08`` to every connection line (ROCm/rccl issue 1026).
_VIA_WHOLE = re.compile(
    r"^(?:P2P/(?:IPC|CUMEM|MNNVL|direct pointer|indirect/\d+\[[0-9a-fA-F]+\])(?:/read)?(?:/CE)?"
    r"|SHM(?:/(?:direct|CE))*|direct shared memory"
    r"|NET/[^/]+?/\d+(?:\(\d+\))?(?:/GDRDMA)?(?:\(PCI\))?(?:/Shared)?)(?=\s|$)")
#: Where another NCCL line starts inside one line (a paste that joined several lines with blanks):
#: ``host:pid:tid [dev] NCCL INFO`` (host and device optional), after a blank.
_JOINED_LINE = re.compile(r"(?:(?<=\s)|^)(?:[^\s:\[\]]+:\d+:\d+ )?(?:\[\d+\] )?(?:[\w./-]+\.\w+:\d+ )?NCCL (?:INFO|WARN)\b")
#: ``NET/<plugin>/<device index>[(<proxy rank>)][/GDRDMA][(PCI)][/Shared]`` (src/transport/net.cc).
_NET_VIA = re.compile(r"^NET/(?P<net>[^/]+)/(?P<dev>\d+)(?:\((?P<proxy>\d+)\))?(?P<gdr>/GDRDMA)?")
#: NCCL <= 2.x ring order lines "Ring 08 : 0 -> 1 -> 2" (previous -> this -> next rank): no connection.
_RING_ORDER = re.compile(r"^Ring \d+ : \d+ -> \d+ -> \d+$")
#: "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:10.0.0.1<0>" (src/transport/net_ib
#: init.cc) and "NET/Socket : Using [0]eth0:10.1.2.3<0>" (net_socket.cc): the devices, by index.
_NET_USING = re.compile(r"^NET/(?P<net>IB|Socket) ?: Using(?P<devs>.*?)(?:;\s*OOB.*)?$")
_NET_DEV = re.compile(r"\[(?P<i>\d+)\](?P<name>[^\s:\[\]<;]+)(?::(?P<port>\d+))?(?::\d*)*(?:/(?P<link>IB|RoCE))?")
#: NCCL's own IB transport, or an IB plugin (IBext, IBext_v8, ...), that found no device
_NO_IB = re.compile(r"^NET/IB\w* ?: No device found")
#: "Failed to open libibverbs.so[.1]" (src/misc/ibvsymbols.cc): rdma-core is not installed where the job runs
_NO_IBVERBS = re.compile(r"^Failed to open libibverbs\.so")
#: "NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'" (src/graph/topo.cc, NCCL >= 2.19 or so).
_GDR_HCA = re.compile(r"^NET/(?P<net>.+?) ?: GPU Direct RDMA (?P<state>Enabled|Disabled) for HCA (?P<i>\d+) '(?P<name>[^']*)'")
#: NCCL's per-GPU GPUDirect RDMA decision (model/nccl_paths.py names each version's form): "[NET/IB : ]GPU
#: Direct RDMA Disabled for GPU 1b000 / HCA 0 (distance 7 > 4)", "... Enabled for GPU 0 / HCA 0 (distance 4 <=
#: 4), read 1 mode Default", NCCL 2.4's "GPU 0[0]", NCCL 2.3's "HCA mlx5_0", and "... for GPU 0[0] / HCA 0
#: 'mlx5_0' (no module or not supported by GPU)" (NCCL's IB transport without a peer-memory module, 2.3-2.4).
_GDR_GPU = re.compile(r"^(?:NET/(?P<net>[^:]+?) ?: )?GPU Direct RDMA (?P<state>Enabled|Disabled) for GPU "
                      r"(?P<gpu>[0-9a-fA-F]+(?:\[\d+\])?) / HCA (?P<hca>[^\s(']+)(?: '(?P<name>[^']*)')? "
                      r"\((?:distance (?P<d>-?\d+) (?P<op>>=|>|<=|<) (?P<l>-?\d+)\)|(?P<why>[^)]*)\))")
#: NCCL 2.29's form: "GPU Direct RDMA Disabled for GPU/0-110592 (rank 0) - NET/0-1 ( using PXN via GPU/0-..., distance 7 > 5)"
_GDR_GPU_229 = re.compile(r"^GPU Direct RDMA (?P<state>Enabled|Disabled) for GPU/(?P<sys>\d+)-(?P<bus>\d+) \(rank "
                          r"(?P<rank>\d+)\) - NET/(?P<nsys>\d+)-(?P<dev>\d+) \((?P<pxn> ?using PXN via GPU/\d+-\d+, )?"
                          r"distance (?P<d>-?\d+) (?P<op>>|<=) (?P<l>-?\d+)")
#: What shows the job ran on AWS's Elastic Fabric Adapter: the aws-ofi-nccl plugin's lines ("NET/OFI ..."),
#: its provider ("NET/OFI Selected Provider is efa"), EFA devices ("rdmap16s27") and its "Running on
#: <instance type> platform" / "for platform : <instance type>" lines (aws-ofi-nccl src/platform-aws.cpp).
_OFI_PROVIDER = re.compile(r"^NET/OFI Selected [Pp]rovider is (?P<p>\w+)")
_OFI_PLATFORM = re.compile(r"^NET/OFI .*?(?:Running on (?P<a>\S+) platform|for platform : (?P<b>\S+?)[,\s])")
_EFA_DEVICE = re.compile(r"\b(?P<dev>rdmap\d+s\d+)\b")
_USING_NETWORK = re.compile(r"^Using network (?P<net>.+?)\s*$")
_PLUGIN_LOADED = re.compile(r"^(?:NET/Plugin ?: Loaded net plugin (?P<name>.+?)(?: \(v\d+\))?|NET/OFI (?:Using|Initializing) (?P<ofi>aws-ofi-nccl \S+))\s*$")
#: Ray's worker prefix: "(RayWorkerWrapper pid=330, ip=10.244.1.228) " (no ip on the driver's node)
_RAY_PREFIX = re.compile(r"^\((?:[^()]*?\s)?pid=\d+(?:, ip=(?P<ip>[\d.]+|[0-9a-fA-F:]+))?[^()]*\)\s")
#: NCCL's error path: every NCCLCHECK that sees a failure logs "file.cc:line -> code" on its way up.
_TRACE = re.compile(r"^(?P<src>[\w./-]+\.\w+:\d+) -> (?P<code>\d+)(?: \[(?P<where>[^\]]*)\])?\s*$")
#: What a launcher or framework prints when NCCL returned an error (torch, nccl-tests, vLLM).
_ERROR_TEXT = re.compile(r"unhandled (?:system|cuda) error|internal error - please report|invalid usage \(run with|"
                         r"remote process exited or there was a network error|ncclSystemError|ncclInternalError|"
                         r"ncclUnhandledCudaError|ncclRemoteError|ncclInvalidUsage|ncclInvalidArgument")
#: The SHARP library's own warning and error lines, printed into the job's log by NCCL's SHARP
#: (CollNet) plugin: "[host:rank:pid - file.c:N][date time] ERROR msg" and
#: "[host][date time][GENERAL][pid][warn ] - msg" (libsharp's and sharpd's log formats).
_SHARP_LINE = (re.compile(r"^\[(?P<host>[^\]\s:]+)(?::\d+:(?P<pid>\d+))?[^\]]*\]\[[^\]]*\]\s+(?P<mark>(?:ERROR|WARN)\b.*)$"),
               re.compile(r"^\[(?P<host>[^\]\s:]+)\]\[[^\]]*\]\[\w+\]\[(?P<pid>\d+)\](?P<mark>\[(?:warn|error)\s*\].*)$"))
#: ncclResult_t (src/include/nccl.h): the code after "->" in words, as ncclGetErrorString says it.
NCCL_RESULTS = {1: "unhandled cuda error", 2: "unhandled system error", 3: "internal error",
                4: "invalid argument", 5: "invalid usage", 6: "remote process exited or there was a network error",
                7: "operation in progress"}
#: "Channel 00/0 : 0[0] -> 1[1] via ...", NCCL <= 2.5 "Ring 00 : 3[3] -> 2[2] via P2P/IPC" and
#: "Ring 00 : 15 -> 0 [send] via NET/Socket/0" (no device in brackets). The transport is the rest
#: of the line: NET plugin names hold spaces ("NET/AWS Libfabric/1/GDRDMA").
_CHANNEL = re.compile(
    r"(?:Channel|Ring) (?P<ch>\d+)(?:/(?P<conn>\d+))? : (?P<src>\d+)(?:\[(?P<sdev>[0-9a-fA-F]+)\])? -> "
    r"(?P<dst>\d+)(?:\[(?P<ddev>[0-9a-fA-F]+)\])?(?: \[(?P<dir>send|receive)\])? via (?P<via>.+?)\s*$")
_CHANNEL_START = re.compile(r"(?:Channel|Ring) \d+(?:/\d+)? : \d+")
#: "Channel" cut after the word, or run into another process's output ("Channel(RayWorker pid=1)").
_CUT_START = re.compile(r"^(?:Channel|Ring)(?:$|[^\s\w/])|^(?:Channel|Ring) \d+(?:/\d+)?\s*:?\s*$")
_INIT = re.compile(
    r"comm 0x[0-9a-fA-F]+ rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<cuda>\d+)"
    r"(?: nvmlDev (?P<nvml>\d+))? busId (?P<bus>[0-9a-fA-F]+)(?: commId (?P<comm>0x[0-9a-fA-F]+))?")
_INIT_START = re.compile(r"\bcomm 0x[0-9a-fA-F]+ rank \d+ nranks \d+")
#: What NCCL logs once connections were made (src/init.cc, src/transport/generic.cc, nvls.cc):
#: channel lines before one of them, in the same process, were connected.
_CONNECTED = re.compile(r"^Connected (?:all rings|all trees|NVLS tree|binomial trees|collnet \+ chain)\b")
#: The transport family an error path's source file (WARN or ``file.cc:N -> code``) names.
_ERROR_FAMILY = [(re.compile(r"(?:^|/)transport/p2p\.cc:"), "P2P"), (re.compile(r"(?:^|/)transport/shm\.cc:"), "SHM"),
                 (re.compile(r"(?:^|/)transport/(?:coll_net|collnet)\.cc:"), "COLLNET"),
                 (re.compile(r"(?:^|/)transport/nvls\.cc:"), "NVLS"),
                 (re.compile(r"(?:^|/)(?:transport/net\w*\.cc|include/net\.h|misc/ibvwrap\.cc|misc/socket\.cc):"),
                  "NET")]
_SETTING = re.compile(r"(?P<name>NCCL_[A-Z0-9_]+) set (?:by environment )?to\s*(?P<value>.*?)\s*$")
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
        gpu = "" if where.startswith("rank ") else f" ({where})"
        if self.host == HOST_NOT_TOLD:
            return f"rank {self.rank}{gpu} of a communicator whose ranks this log does not show, host unknown"
        if self.host == HOST_NOT_IN_LOG:  # said in words, never "?/nvml 0"
            return f"rank {self.rank}{gpu}, on a host not in this log" if self.rank is not None \
                else f"{where}, on a host not in this log"
        return f"{self.host}/{where}" if self.host else where

    @property
    def host_known(self) -> bool:
        return self.host not in (HOST_NOT_IN_LOG, HOST_NOT_TOLD, HOST_UNKNOWN)


@dataclass
class ChannelLine:
    src_rank: int
    dst_rank: int
    src: Endpoint
    dst: Endpoint
    via: str  # "P2P/IPC/read", "SHM/direct/direct", "NET/IB/0/GDRDMA", "P2P/direct pointer"
    direction: Optional[str] = None  # "send" | "receive" (NET lines), None otherwise

    #: the process that printed the line: its rank (the sender, or the receiver on [receive] lines)
    printer_rank: Optional[int] = None
    #: None where no failure of the printing process followed the line before NCCL said it was
    #: connected; else {"status": "failed" | "unfinished", "transport": family the error path
    #: names (or None), "error": the first WARN (else error path) line, "at": "file:line"}; or
    #: status "unknown" (with "why") for a line without the ``host:pid:tid`` prefix in a file
    #: that has prefixed lines too, after which some process's error path came: whose it was
    #: (the line's process or another) cannot be told. "basis" says "one process" where the
    #: line's whole file is without prefixes and was read as one process's lines in order.
    setup: Optional[dict] = None

    @property
    def used(self) -> Optional[bool]:
        """Whether the connection was set up as far as the log tells (no failure after its line);
        None where an error followed that cannot be tied to the line's process or another."""
        if self.setup is None:
            return True
        return None if self.setup.get("status") == "unknown" else False

    @property
    def kind(self) -> str:
        if self.via.startswith("direct shared memory"):  # NCCL 2.7's SHM (src/transport/shm.cc)
            return "SHM"
        head = self.via.split("/", 1)[0].upper()
        return head if head in TRANSPORT_KINDS else head or "?"

    @property
    def net(self) -> Optional[dict]:
        """A NET line's network, device index (``NET/IB/<n>``: the ``[n]`` of ``NET/IB : Using``),
        proxy rank (PXN) and GPUDirect RDMA (``/GDRDMA``); None for other transports."""
        m = _NET_VIA.match(self.via)
        if m is None:
            return None
        return {"net": m.group("net"), "dev": int(m.group("dev")), "gdr": bool(m.group("gdr")),
                "proxy_rank": int(m.group("proxy")) if m.group("proxy") else None}

    @property
    def printer(self) -> Endpoint:
        """The GPU of the process that printed the line (its NIC is the one named)."""
        return self.dst if self.direction == "receive" else self.src


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
    _comm_sizes: Dict[str, int] = field(default_factory=dict)  # communicator -> nranks
    #: What the log says that could not be used, per line or connection.
    problems: List[str] = field(default_factory=list)
    _raw: List[Tuple[str, int, Optional[int], dict]] = field(default_factory=list)  # channel lines not yet finished
    #: NCCL lines read without the ``host:pid:tid`` prefix (their host is unknown)
    no_prefix_lines: int = 0
    #: file ("" for text given whole) -> [NCCL lines with the prefix, lines without it]. NCCL
    #: (src/debug.cc ``ncclDebugLogV``) prints ``host:pid:tid`` on every line but its version line,
    #: to stdout or NCCL_DEBUG_FILE alike, so lines without it had it cut off after the run.
    prefixes_by_file: Dict[str, List[int]] = field(default_factory=dict)
    #: file -> the set-up events (as ``_events``) of its lines without the prefix, in order: a
    #: file none of whose lines has one is read as one process's lines (``finish_channels``)
    _bare_events: Dict[str, List[Tuple[int, str, dict]]] = field(default_factory=dict)
    #: file -> every error path (``file.cc:N -> code``, not the progress thread's) of any process
    #: in it, in order: what a line without the prefix in a mixed file cannot be told apart from
    _file_errors: Dict[str, List[Tuple[int, dict]]] = field(default_factory=dict)
    #: NCCL lines Ray left out of the log ("[repeated Nx across cluster]"), and channel lines among them
    ray_folded: int = 0
    ray_folded_channels: int = 0
    #: Ray's nodes as its line prefixes show them: the ``ip=`` of ``(RayWorker pid=1, ip=10.0.0.2)``,
    #: or "" for the driver's node (Ray prints no ip there) -> the hosts of the NCCL lines it prefixed
    ray_nodes: Dict[str, List[str]] = field(default_factory=dict)
    #: NET connection lines whose peer's host the log did not show, named as the other of the two
    #: machines the log's Ray prefixes show (finish_channels): their count
    ray_peer_hosts: int = 0
    #: host -> network -> the devices ``NET/IB : Using`` / ``NET/Socket : Using`` list:
    #: [{"index": 0, "device": "mlx5_0", "port": 1, "link": "RoCE"}]
    net_devices: Dict[str, Dict[str, List[dict]]] = field(default_factory=dict)
    no_ib_device: List[str] = field(default_factory=list)  # hosts that logged "NET/IB : No device found"
    no_ibverbs: List[str] = field(default_factory=list)  # hosts that logged "Failed to open libibverbs.so"
    networks: Dict[str, List[str]] = field(default_factory=dict)  # host -> "Using network X" values
    plugins_loaded: Dict[str, List[str]] = field(default_factory=dict)  # host -> external net plugins loaded
    #: (host, network, HCA index) -> {"host", "net", "index", "device", "gdr": bool}: NCCL's
    #: "GPU Direct RDMA Enabled|Disabled for HCA n 'name'" lines
    gdr_hcas: Dict[Tuple[str, str, int], dict] = field(default_factory=dict)
    #: NCCL's per-GPU "GPU Direct RDMA Enabled|Disabled for GPU g / HCA n (distance D > L)" lines, as printed:
    #: {"host", "gdr", "gpu", "hca", "hca_name", "distance", "level", "why", "pxn", "form", "net", "count"}
    gdr_gpus: Dict[tuple, dict] = field(default_factory=dict)
    #: host -> what the log shows of AWS's EFA: {"provider", "instance_type", "devices", "lines"}
    efa: Dict[str, dict] = field(default_factory=dict)
    #: (host, pid) -> what the process said about itself: "warnings" (NCCL WARN lines, with their
    #: source), "trace" (NCCL's error path "file.cc:line -> code"), "init_complete", "ranks"
    processes: Dict[Tuple[str, int], dict] = field(default_factory=dict)
    #: lines of the launcher or framework that quote an NCCL error ("unhandled system error")
    error_lines: List[str] = field(default_factory=list)
    error_line_count: int = 0
    #: other libraries' warning and error lines in the job's log (SHARP's): {"text", "host", "pid",
    #: "where", "tool"}
    library_lines: List[dict] = field(default_factory=list)
    #: (host, pid) -> the process's lines that decide a channel line's set-up, in log order:
    #: (line number among NCCL lines, "warn" | "trace" | "connected" | "start", details)
    _events: Dict[Tuple[str, int], List[Tuple[int, str, dict]]] = field(default_factory=dict)

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


def _sharp_line(log: NcclDebugLog, bare: str, where: str) -> bool:
    """Keep a SHARP library warning or error line (at most 200); whether it was one."""
    for rx in _SHARP_LINE:
        m = rx.match(bare)
        if m:
            if len(log.library_lines) < 200:
                log.library_lines.append({"text": m.group("mark"), "host": m.group("host"), "where": where,
                                          "pid": int(m.group("pid")) if m.group("pid") else None, "tool": "SHARP"})
            return True
    return False


def _process(log: NcclDebugLog, host: str, pid: int) -> dict:
    return log.processes.setdefault((host, pid), {"host": host, "pid": pid, "warnings": [], "trace": [],
                                                  "init_complete": False, "ranks": []})


def read_debug_line(log: NcclDebugLog, line: str, where: str = "") -> None:
    """Feed one line (launcher prefixes, colours and Ray's ``[repeated Nx across cluster]`` are
    removed first); ``where`` ("file:line") names it when it is a channel line that cannot be read
    whole (cut or garbled): such a line is skipped and counted, never guessed."""
    ray = _RAY_PREFIX.match(strip_ansi(line))
    bare, folded = strip_ray_repeat(strip_launcher_prefix(line))
    bare = bare.strip()
    starts = [m.start() for m in _JOINED_LINE.finditer(bare)]
    if len(starts) > 1:  # several NCCL lines joined into one with blanks: each read as its own line
        for k, at in enumerate(starts):
            piece = bare[0 if k == 0 else at:starts[k + 1] if k + 1 < len(starts) else None].strip()
            read_debug_line(log, piece + (f" [repeated {folded}x across cluster]" if folded and k == len(starts) - 1 else ""), where)
        return
    m = _PREFIX.match(bare)
    if not m:
        v = _VERSION.match(bare)  # rank 0 prints "NCCL version 2.9.9+cuda11.2" without the INFO prefix
        if v and v.group("v") not in log.versions:
            log.versions.append(v.group("v"))
        elif bare.startswith("[") and _sharp_line(log, bare, where):
            pass
        elif "NCCL" in bare and _ERROR_TEXT.search(bare):
            log.error_line_count += 1
            if len(log.error_lines) < 5 and bare[:300] not in log.error_lines:
                log.error_lines.append(bare[:300])
        return
    log.lines += 1
    log.ray_folded += folded
    msg = (m.group("msg") or "").strip()
    dev = int(m.group("dev")) if m.group("dev") is not None else None
    file = where.rsplit(":", 1)[0] if where else ""
    counts = log.prefixes_by_file.setdefault(file, [0, 0])
    if m.group("host") is None:
        log.no_prefix_lines += 1
        counts[1] += 1
        host, pid = HOST_UNKNOWN, -1  # the process is told by its rank where the line names one
    else:
        counts[0] += 1
        host, pid = m.group("host"), int(m.group("pid"))
        if ray is not None:
            _add_once(log.ray_nodes.setdefault(ray.group("ip") or "", []), host)
    bare_events = log._bare_events.setdefault(file, []) if host == HOST_UNKNOWN else []
    if m.group("level") == "WARN":
        _process(log, host, pid)["warnings"].append({"message": msg, "source": m.group("src"), "where": where,
                                                     "cuda_dev": dev})
        event = (log.lines, "warn", {"source": m.group("src"),
                                     "text": f"{m.group('src') or ''} NCCL WARN {msg}".strip(), "where": where})
        log._events.setdefault((host, pid), []).append(event)
        bare_events.append(event)
        return
    c = _CHANNEL.search(msg)
    if c:
        g = c.groupdict()
        via = g["via"].split(", [", 1)[0]
        whole = _VIA_WHOLE.match(via)
        g["via"] = whole.group(0) if whole else via.rstrip(".")
        own = int(g["dst"]) if g["dir"] == "receive" else int(g["src"])
        if not whole and not _VIA_WHOLE.match(g["via"]):
            log.problems.append(f"{where or 'a line'}: a channel line that could not be read whole (cut or garbled: "
                                f"transport {g['via'][:40]!r}): not counted")
            return
        log.ray_folded_channels += folded
        if host == HOST_UNKNOWN:
            pid = -1 - own
        g["comm"] = log._current_comm.get((host, pid))
        g["seq"] = log.lines
        g["file"] = file
        log._raw.append((host, pid, dev, g))
        if g["comm"] is None:  # ranks of an unknown communicator: only the world map may hold them
            log.rank_map.from_channel(own, RankSeen(host=host, pid=pid, cuda_dev=dev))
        return
    if (_CHANNEL_START.match(msg) and "->" in msg and not _RING_ORDER.match(msg)) or _CUT_START.match(msg):
        log.problems.append(f"{where or 'a line'}: a channel line that could not be read whole (cut or garbled): "
                            f"{msg[:120]!r}: not counted")
        return
    i = _INIT.search(msg)
    if i is None and _INIT_START.search(msg):
        log.problems.append(f"{where or 'a line'}: an Init line that could not be read whole (cut or garbled): "
                            f"{msg[:120]!r}: not counted")
        return
    if i:
        nvml = i.group("nvml")
        bus = _bus_id(i.group("bus").rjust(5, "0"))
        rank = int(i.group("rank"))
        if host == HOST_UNKNOWN:
            pid = -1 - rank
        if nvml is not None and bus is not None:
            log.buses[(host, int(nvml))] = bus
        log.ranks[(host, rank)] = {
            "bus_id": bus,
            "nvml_dev": int(nvml) if nvml is not None else None, "cuda_dev": int(i.group("cuda")),
            "nranks": int(i.group("nranks")), "comm_id": i.group("comm")}
        seen = RankSeen(host=host, pid=pid, cuda_dev=int(i.group("cuda")),
                        nvml_dev=int(nvml) if nvml is not None else None, bus_id=bus)
        log.rank_map.from_init(rank, int(i.group("nranks")), seen)
        comm = i.group("comm") or f"nranks {i.group('nranks')}"
        log.comm_ranks.setdefault(comm, {})[rank] = seen
        log._comm_sizes[comm] = int(i.group("nranks"))
        proc = _process(log, host, pid)
        if rank not in proc["ranks"]:
            proc["ranks"].append(rank)
        if "Init START" in msg:  # the channel lines this process prints next are this communicator's
            log._current_comm[(host, pid)] = comm
            log._events.setdefault((host, pid), []).append((log.lines, "start", {}))
            bare_events.append((log.lines, "start", {}))
        if "Init COMPLETE" in msg:
            proc["init_complete"] = True
            log._events.setdefault((host, pid), []).append((log.lines, "connected", {}))
            bare_events.append((log.lines, "connected", {}))
        return
    if _CONNECTED.match(msg):
        log._events.setdefault((host, pid), []).append((log.lines, "connected", {}))
        bare_events.append((log.lines, "connected", {}))
        return
    if _read_network_line(log, host, msg):
        return
    t = _TRACE.match(msg)
    if t:
        step = {"source": t.group("src"), "code": int(t.group("code")), "where": where}
        if t.group("where"):  # the thread NCCL names after the code ("Progress Thread", "Proxy Service 2")
            step["thread"] = t.group("where")
        _process(log, host, pid)["trace"].append(step)
        if step["code"]:
            info = {"source": step["source"], "thread": step.get("thread"), "where": where,
                    "text": f"{step['source']} -> {step['code']}"}
            log._events.setdefault((host, pid), []).append((log.lines, "trace", info))
            bare_events.append((log.lines, "trace", info))
            if info["thread"] != "Progress Thread":
                log._file_errors.setdefault(file, []).append((log.lines, info))
        return
    s = _SETTING.search(msg)
    if s:
        value = s.group("value")
        log.settings[s.group("name")] = value[:-1] if value.endswith(".") else value  # NCCL's period
        return
    v = _VERSION.search(msg)
    if v and v.group("v") not in log.versions:
        log.versions.append(v.group("v"))


def _add_once(values: List[str], value: str) -> None:
    if value not in values:
        values.append(value)


def _read_network_line(log: NcclDebugLog, host: str, msg: str) -> bool:
    """The network facts of one INFO message: NIC lists, no IB device, GDR per HCA, the network
    and plugins used. True when the message was one of them."""
    u = _NET_USING.match(msg)
    if u:
        devs = [{"index": int(d.group("i")), "device": d.group("name"),
                 "port": int(d.group("port")) if d.group("port") else None, "link": d.group("link")}
                for d in _NET_DEV.finditer(u.group("devs"))]
        log.net_devices.setdefault(host, {})[u.group("net")] = devs
        return True
    if _NO_IB.match(msg):
        _add_once(log.no_ib_device, host)
        return True
    if _NO_IBVERBS.match(msg):
        _add_once(log.no_ibverbs, host)
        return True
    if _read_gdr_gpu(log, host, msg) or _read_efa_line(log, host, msg):
        return True
    g = _GDR_HCA.match(msg)
    if g:
        net, idx = g.group("net").strip(), int(g.group("i"))
        log.gdr_hcas[(host, net, idx)] = {"host": host, "net": net, "index": idx, "device": g.group("name"),
                                          "gdr": g.group("state") == "Enabled"}
        return True
    n = _USING_NETWORK.match(msg)
    if n:
        _add_once(log.networks.setdefault(host, []), n.group("net"))
        return True
    p = _PLUGIN_LOADED.match(msg)
    if p:
        _add_once(log.plugins_loaded.setdefault(host, []), p.group("name") or p.group("ofi"))
        return True
    return False


def _read_gdr_gpu(log: NcclDebugLog, host: str, msg: str) -> bool:
    """One per-GPU GPUDirect RDMA line, kept as printed (its numbers read by the NCCL version later)."""
    m = _GDR_GPU.match(msg)
    if m:
        rec = {"host": host, "gdr": m.group("state") == "Enabled", "gpu": m.group("gpu"), "hca": m.group("hca"),
               "hca_name": m.group("name"), "distance": int(m.group("d")) if m.group("d") else None,
               "level": int(m.group("l")) if m.group("l") else None, "op": m.group("op"),
               "why": m.group("why"), "pxn": False, "form": "classic", "net": (m.group("net") or "").strip() or None}
    else:
        m = _GDR_GPU_229.match(msg)
        if m is None:
            return False
        rec = {"host": host, "gdr": m.group("state") == "Enabled", "gpu": f"{int(m.group('bus')):x}",
               "rank": int(m.group("rank")), "hca": m.group("dev"), "hca_name": None, "distance": int(m.group("d")),
               "level": int(m.group("l")), "op": m.group("op"), "why": None, "pxn": bool(m.group("pxn")),
               "form": "2.29", "net": None}
    key = (host, rec["gdr"], rec["gpu"], rec["hca"], rec["distance"], rec["level"], rec["why"])
    kept = log.gdr_gpus.setdefault(key, dict(rec, count=0))
    kept["count"] += 1
    return True


def _read_efa_line(log: NcclDebugLog, host: str, msg: str) -> bool:
    """What an INFO line shows of AWS's EFA (its provider, devices, the instance type); False for
    other lines (the line is still read by the others where it is theirs)."""
    p = _OFI_PROVIDER.match(msg)
    plat = _OFI_PLATFORM.match(msg)
    devs = _EFA_DEVICE.findall(msg)
    if not (p or plat or devs):
        return False
    efa = log.efa.setdefault(host, {"provider": None, "instance_type": None, "devices": [], "lines": []})
    if p:
        efa["provider"] = p.group("p")
    if plat:
        efa["instance_type"] = plat.group("a") or plat.group("b")
    for d in devs:
        _add_once(efa["devices"], d)
    if len(efa["lines"]) < 3 and (p or plat):
        efa["lines"].append(msg[:200])
    return bool(p or plat)  # a line naming an rdmap device may be NCCL's NIC list: read on by the others


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
        # Without its communicator's Init START (cut, or folded by Ray), a line of a log with
        # communicators of several sizes names ranks of an unknown one: the world map would guess.
        if members is not None and own_rank in members and (members[own_rank].host, members[own_rank].pid) != (host, pid):
            members = None  # another process is that rank of the printer's last communicator: not its line
        unknown_comm = members is None and len(set(log._comm_sizes.values())) > 1
        own_seen = (members or {}).get(own_rank) if members is not None else \
            None if unknown_comm else log.rank_map.seen(own_rank)
        own_is_world_rank = members is None and own_seen is not None and (own_seen.host, own_seen.pid) == (host, pid)
        if own_seen is None or (own_seen.host, own_seen.pid) != (host, pid):
            own_seen = RankSeen(host=host, pid=pid, cuda_dev=dev)
        peer_seen = members.get(peer_rank) if members is not None else \
            None if unknown_comm else log.rank_map.seen(peer_rank)
        # World ranks carry their machine label; a sub-communicator's are labelled by process.
        own_label = (log.rank_map.host_of(own_rank) if own_is_world_rank else None) or log.rank_map.label_for(own_seen)
        local = g["via"].split("/", 1)[0].upper() in ("P2P", "SHM") or g["via"].startswith("direct shared memory")
        peer_label = (log.rank_map.host_of(peer_rank) if members is None and peer_seen is not None else None) or \
            (log.rank_map.label_for(peer_seen) if peer_seen is not None else own_label if local
             else HOST_NOT_TOLD if unknown_comm else HOST_NOT_IN_LOG)
        if peer_label in (HOST_NOT_TOLD, HOST_NOT_IN_LOG) and not local:
            other = _other_ray_machine(log, host)
            if other is not None:  # a NET peer of a two-machine Ray job: the machine the line's is not
                peer_label, peer_seen = other, None
                log.ray_peer_hosts += 1
        own_ep = _endpoint_of(log, own_seen, own_label, g["sdev"] if own_rank == src_rank else g["ddev"], own_rank)
        peer_ep = _endpoint_of(log, peer_seen, peer_label, g["ddev"] if own_rank == src_rank else g["sdev"],
                               peer_rank)
        src, dst = (own_ep, peer_ep) if own_rank == src_rank else (peer_ep, own_ep)
        if src == dst:
            log.problems.append(f"rank {src_rank} -> {dst_rank} via {g['via']}: both ends read as {src.label()} "
                                "(the log does not tell the two GPUs apart): line not counted")
            continue
        line = ChannelLine(src_rank=src_rank, dst_rank=dst_rank, src=src, dst=dst, via=g["via"],
                           direction=g["dir"], printer_rank=own_rank)
        if host != HOST_UNKNOWN:
            events = log._events.get((host, pid)) or []
            line.setup = _setup_outcome(events, g["seq"], line.kind) or \
                _bare_error_before_connected(log, g["file"], g["seq"], events)
        else:
            line.setup = _bare_setup_outcome(log, g["file"], g["seq"], line.kind)
        log.channels.append(line)
    log._raw = []
    return log


def _other_ray_machine(log: NcclDebugLog, host: str) -> Optional[str]:
    """Where Ray folded a peer's own lines away: in a log whose Ray prefixes show exactly two
    machines (each node's ``ip=``, or none for the driver's, paired with the host of the NCCL
    lines it prefixed), each one host, the other machine than ``host``; None otherwise. A NET
    connection joins two machines, so its peer is on the other one."""
    machines = {tuple(hs) for hs in log.ray_nodes.values()}
    hosts = [hs[0] for hs in machines if len(hs) == 1]
    if len(machines) != 2 or len(hosts) != 2 or host not in hosts or len(set(hosts)) != 2:
        return None
    return next(h for h in hosts if h != host)


def _family(source: Optional[str]) -> Optional[str]:
    for pattern, family in _ERROR_FAMILY:
        if source and pattern.search(source):
            return family
    return None


def _setup_outcome(events: List[Tuple[int, str, dict]], seq: int, kind: str) -> Optional[dict]:
    """Whether the connection a channel line (NCCL line ``seq`` of its process) set up failed: the
    process's error path (a ``file.cc:N -> code`` line, not in NCCL's progress thread, which only
    runs once connected) came after the line and before NCCL said it connected (``Connected all
    rings`` & co., ``Init COMPLETE``) or began another communicator (``Init START``). An error
    path through the progress thread (``proxy.cc:878 -> 6 [Progress Thread]``) is a failure while
    moving data, so the connection had been made."""
    block: List[dict] = []
    failed = False
    for at, what, info in events:
        if at <= seq:
            continue
        if what in ("connected", "start"):
            break
        if what == "trace" and info.get("thread") == "Progress Thread":
            return None  # a failure while moving data (its path ends in the progress thread): connected
        block.append(info)
        failed = failed or what == "trace"
    if not failed:
        return None
    families = [f for f in (_family(i.get("source")) for i in block) if f]
    family = families[0] if families else None
    first = next((i for i in block if "NCCL WARN" in i["text"]), block[0])
    return {"status": "failed" if family == kind else "unfinished", "transport": family,
            "error": first["text"], "at": first.get("where") or None}


def _bare_setup_outcome(log: NcclDebugLog, file: str, seq: int, kind: str) -> Optional[dict]:
    """The set-up of a channel line printed without the ``host:pid:tid`` prefix. NCCL prints the
    prefix on every line but its version line (src/debug.cc), so it was cut off after the run
    (``grep -o 'NCCL INFO.*'``, a paste). In a file none of whose lines has it, the lines are read
    in order as one process's (a one-process run, or one NCCL_DEBUG_FILE=...%p file): the set-up
    check of prefixed lines applies, its outcome marked ``basis: "one process"``. In a file that
    has prefixed lines too, the line is no process's for sure: an error path after it (any
    process's, outside the progress thread) makes its set-up "unknown", never used nor failed."""
    with_prefix, _without = log.prefixes_by_file.get(file, [0, 0])
    if not with_prefix:
        outcome = _setup_outcome(log._bare_events.get(file) or [], seq, kind)
        return None if outcome is None else {**outcome, "basis": "one process"}
    later = [info for at, info in log._file_errors.get(file) or [] if at > seq]
    if not later:
        return None
    first = later[0]
    return {"status": "unknown", "transport": _family(first.get("source")), "error": first["text"],
            "at": first.get("where") or None,
            "why": "the line has no host:pid:tid prefix (cut off) in a log whose other lines have one, and an "
                   "NCCL error path came after it: whether its process is the one that failed cannot be told"}


def _bare_error_before_connected(log: NcclDebugLog, file: str, seq: int,
                                 events: List[Tuple[int, str, dict]]) -> Optional[dict]:
    """A prefixed channel line whose own process shows no failure, but after which an error path
    without the prefix (whose process is not told) came before its process said it connected:
    its set-up is "unknown" (that error may be its own)."""
    if not log.prefixes_by_file.get(file, [0, 0])[1]:
        return None
    end = next((at for at, what, _ in events if at > seq and what in ("connected", "start")), None)
    for at, what, info in log._bare_events.get(file) or []:
        if at > seq and (end is None or at < end) and what == "trace" and info.get("thread") != "Progress Thread":
            return {"status": "unknown", "transport": _family(info.get("source")), "error": info["text"],
                    "at": info.get("where") or None,
                    "why": "an NCCL error path without the host:pid:tid prefix (cut off) came after the line and "
                           "before its process said it connected: whether it was this process's cannot be told"}
    return None


def _endpoint_of(log: NcclDebugLog, seen: Optional[RankSeen], label: str, token: Optional[str],
                 rank: int) -> Endpoint:
    """One end's GPU: from the bracket token (bus id or NVML index), else from what the rank's own
    lines said (Init: bus id / nvmlDev; NCCL <= 2.5 lines: the printing process's [cudaDev])."""
    name = seen.host if seen is not None else label
    unknown = rank if label in (HOST_NOT_IN_LOG, HOST_NOT_TOLD) else None  # a GPU on an unknown host is told by its rank
    if token:
        bus = _bus_id(token)
        if bus is not None:
            return Endpoint(label, bus_id=bus, rank=unknown)
        dev = int(token)
        return Endpoint(label, bus_id=log.buses.get((name, dev)) if unknown is None else None, nvml_dev=dev,
                        rank=unknown)
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
    if log.ray_folded_channels:
        log.problems.append(f"Ray left {log.ray_folded_channels} channel line(s) out of the log as "
                            "'[repeated Nx across cluster]' (its log deduplication): those connections are not "
                            "in it (RAY_DEDUP_LOGS=0 keeps every line)")
    return finish_channels(log)


def transport_summary(lines: List[ChannelLine], source: str) -> dict:
    """What one pair's channel lines say, as stored with measurements and in run folders:
    ``{"kind": "SHM", "via": ["SHM/direct/direct"], "channels": 2, "source": "nccl-debug"}``.
    ``kind`` is "mixed" when the pair used several families (e.g. P2P one way, NET the other).
    ``kind``/``via`` are what NCCL chose; ``used`` is False when the set-up of every one of the
    pair's connections failed, and ``setup_failed`` (only then present) says how many lines
    failed or were left unfinished, the transport the error names and its first line ("basis":
    "one process" where read from a log without host:pid:tid prefixes); ``used`` is None (not
    known) where no line was surely set up and some were followed by an error that cannot be
    tied to their process (lines without the prefix in a log with prefixed ones), said in
    ``setup_unknown``."""
    kinds = sorted({c.kind for c in lines})
    used = True if any(c.used for c in lines) else None if any(c.used is None for c in lines) else False
    out = {"kind": kinds[0] if len(kinds) == 1 else "mixed", "kinds": kinds,
           "via": sorted({c.via for c in lines}), "channels": len(lines), "source": source, "used": used}
    unknown = [c for c in lines if c.used is None]
    if unknown:  # an error came after them that cannot be tied to their process or another
        u = unknown[0].setup or {}
        out["setup_unknown"] = {"lines": len(unknown), "via": sorted({c.via for c in unknown}),
                                "transport": u.get("transport"), "error": u.get("error"), "at": u.get("at"),
                                "why": u.get("why")}
    bad = [c for c in lines if c.used is False]
    if bad:  # NCCL tried these connections; their set-up failed (or stopped at another's failure)
        first = next((c for c in bad if c.setup and c.setup["status"] == "failed"), bad[0])
        assert first.setup is not None
        failed: Dict[str, object] = {
            "lines": len(bad), "failed": sum(1 for c in bad if c.setup and c.setup["status"] == "failed"),
            "unfinished": sum(1 for c in bad if c.setup and c.setup["status"] == "unfinished"),
            "via": sorted({c.via for c in bad}), "transport": first.setup["transport"],
            "error": first.setup["error"], "at": first.setup["at"]}
        if first.setup.get("basis"):
            failed["basis"] = first.setup["basis"]
        out["setup_failed"] = failed
    return out
