"""`gputopo import p2pbw FILE`: p2pBandwidthLatencyTest output as a run folder.

Matrices become the bench's own series, so the report judges them the same way: P2P=Enabled
writes -> ``p2p.copy`` (and ``p2p.copy_read`` for ``--p2p_read``), P2P=Disabled -> ``p2p.staged``
(the sample's copies through host memory), bidirectional -> ``p2p.copy_bidir`` /
``p2p.staged_bidir``, the diagonal -> ``self.d2d``, latency -> ``p2p.latency`` /
``p2p.latency_staged`` (``_cpu`` for the CPU-timed matrix). Peer copies slower than staged ones
on a pair then show as ``p2p-slower-than-staged``, as in a bench run.

Where the output says a pair has no peer access (``Device=i CANNOT Access Peer Device=j``, a 0 in
the P2P Connectivity Matrix: every pair of GeForce cards), the sample's "P2P=Enabled" copies of
that pair go through host memory like the P2P=Disabled ones: they are recorded as staged copies,
``p2p.staged_no_peer`` (``_read``, ``_bidir``, ``_bidir_read``) and
``p2p.latency_staged_no_peer`` (``_read``, ``_cpu``), never as ``p2p.copy``, so nothing judges
them as peer-to-peer. Run folders imported before this kept them as ``p2p.copy`` with
``extra.peer_access`` false; they are still read as they are (report/peer_access.py says the fact
from ``peer_access`` either way).

The sample copies 40,000,000 ints (160 MB) 5 times per cell and prints GB/s (1e9), timed with CUDA
events: each cell becomes one sample, the time that rate gives for 160 MB (both directions'
bytes for bidirectional cells, which the sample counts twice).
"""

from __future__ import annotations

from gputopo.errors import InputFileError
from gputopo.model import Measurement, Topology
from gputopo.model.measurement import FIGURES_OF_GPUS

from .contract import Imported, Importer
from .matrix_import import ImportedDevice, parse_outputs
from .p2pbw_parse import P2pMatrix, P2pOutput, parse_p2pbw_lines
from gputopo.text_input import TextSource, open_lines

#: Bytes of one copy in p2pBandwidthLatencyTest (numElems = 40000000 ints).
COPY_BYTES = 40_000_000 * 4

_BANDWIDTH_TESTS = {  # (p2p, bidirectional, mode) -> test
    ("enabled", False, "writes"): "p2p.copy", ("enabled", False, "reads"): "p2p.copy_read",
    ("disabled", False, "writes"): "p2p.staged",
    ("enabled", True, "writes"): "p2p.copy_bidir", ("enabled", True, "reads"): "p2p.copy_bidir_read",
    ("disabled", True, "writes"): "p2p.staged_bidir",
}


def read_p2pbw(path: str) -> P2pOutput:
    src = TextSource(path)
    out = parse_p2pbw_lines(open_lines(path, src), src.name)
    if not any(m.cells for m in out.matrices) and not out.devices:
        raise InputFileError(src.name, "not p2pBandwidthLatencyTest output: no '[P2P (Peer-to-Peer) GPU Bandwidth "
                                       "Latency Test]' device lines and no P2P matrix")
    if out.second_run is not None:
        line, what = out.second_run
        raise InputFileError(src.name, f"a second p2pBandwidthLatencyTest output begins here ({what}): one run "
                                       "per file (split the file and import each run)", line=line)
    src.tell(out)
    return out


#: The "P2P=Enabled" series of a pair without peer access: copies staged through host memory.
_NO_PEER_TESTS = {"p2p.copy": "p2p.staged_no_peer", "p2p.copy_read": "p2p.staged_no_peer_read",
                  "p2p.copy_bidir": "p2p.staged_no_peer_bidir", "p2p.copy_bidir_read": "p2p.staged_no_peer_bidir_read"}
#: Every series name a "P2P=Enabled" matrix of a pair without peer access is recorded under.
NO_PEER_SERIES = tuple(_NO_PEER_TESTS.values()) + ("p2p.latency_staged_no_peer",)


def _test_of(m: P2pMatrix) -> str | None:
    if m.kind == "bandwidth":
        return _BANDWIDTH_TESTS.get((m.p2p or "", m.bidirectional, m.mode))
    if m.kind == "latency":
        return ("p2p.latency" if m.p2p == "enabled" else "p2p.latency_staged") \
            + ("_read" if m.mode == "reads" and m.p2p == "enabled" else "") + ("_cpu" if m.timer == "CPU" else "")
    return None


def _staged_test(test: str) -> str:
    """The series of a "P2P=Enabled" cell whose pair has no peer access (the driver stages it
    through host memory)."""
    if test.startswith("p2p.latency"):  # p2p.latency[_read][_cpu]
        return "p2p.latency_staged_no_peer" + test.removeprefix("p2p.latency")
    return _NO_PEER_TESTS.get(test, test)


def p2pbw_measurements(out: P2pOutput) -> list[Measurement]:
    res: list[Measurement | None] = []
    for m in out.matrices:
        test = _test_of(m)
        if test is None:
            continue
        for i, row in enumerate(m.cells):
            for k, v in enumerate(row):
                if k >= len(m.columns):
                    continue
                j = m.columns[k]
                extra = {"source": "p2pBandwidthLatencyTest", "file": out.source.rsplit("/", 1)[-1],
                         "matrix": m.name, "cell": [i, k], "printed": v, "unit": m.unit, "line": m.line}
                cell_test = test
                if i != j:
                    access = out.peer_access(i, j)
                    if access is None and out.peer_access(j, i) is not None:
                        # the output names only the other direction (cut, or abridged): peer
                        # access is granted per pair in practice, so that answer stands for both
                        access = out.peer_access(j, i)
                        extra["peer_access_from"] = f"{j}->{i}"
                    extra["peer_access"] = access
                    if access is False and m.p2p == "enabled":
                        cell_test = _staged_test(test)
                        extra["staged"] = "no peer access: the P2P=Enabled copy went through host memory"
                res.append(_one(m, cell_test, i, j, v, extra))
    return [x for x in res if x is not None]


def _one(m: P2pMatrix, test: str, i: int, j: int, v: float, extra: dict) -> Measurement | None:
    pair: tuple[int, ...] = tuple(sorted((i, j)))
    gpus: tuple[int, ...]
    if m.kind == "latency":
        if i == j or v <= 0:
            return None
        return Measurement(test=test, gpus=pair, size_bytes=0, samples_s=[v * 1e-6],
                           timing="wall" if m.timer == "CPU" else "cuda-events", fabric="cuda",
                           figures_of=FIGURES_OF_GPUS, direction=f"{i}->{j}", bytes_per_iter=0, extra=extra)
    if i == j:
        if test != "p2p.staged":  # the diagonal is the same local copy in every matrix: kept once
            return None
        test, gpus, direction = "self.d2d", (i,), f"{i}->{i}"
    else:
        gpus, direction = pair, (f"{i}<->{j}" if m.bidirectional else f"{i}->{j}")
    moved = COPY_BYTES * (2 if m.bidirectional and i != j else 1)
    samples = [moved / (v * 1e9)] if v > 0 else []
    return Measurement(test=test, gpus=gpus, size_bytes=COPY_BYTES, samples_s=samples, timing="cuda-events",
                       fabric="cuda", figures_of=FIGURES_OF_GPUS, direction=direction, bytes_per_iter=moved, extra=extra)


def p2pbw_devices(out: P2pOutput) -> list[ImportedDevice]:
    if out.devices:
        return [ImportedDevice(d.index, d.name, d.bus_id) for d in out.devices]
    n = max((len(m.columns) for m in out.matrices), default=0)
    return [ImportedDevice(k, None, None) for k in range(n)]


def parse_p2pbw(paths: list[str], topology: Topology | None = None, *,
                topology_file: str | None = None) -> Imported:
    return parse_outputs(tool="p2pbw", label="p2pBandwidthLatencyTest", paths=paths, read=read_p2pbw,
                         devices_of=p2pbw_devices, measurements_of=p2pbw_measurements,
                         topology=topology, topology_file=topology_file)


IMPORTER = Importer(name="p2pbw", parse=parse_p2pbw, help="""Read cuda-samples' p2pBandwidthLatencyTest output (`-` reads stdin) into a run folder: the
    connectivity matrix, P2P=Disabled / P2P=Enabled bandwidth (uni- and bidirectional, writes and
    reads), latency (GPU and CPU timed), device names and bus ids. Peer copies slower than the
    P2P=Disabled copies of the same pair are reported as `p2p-slower-than-staged`.

    \b
    Example:
      ./p2pBandwidthLatencyTest > p2p.txt; gputopo import p2pbw p2p.txt --topo topo.txt
    """)
