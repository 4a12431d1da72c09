"""cuda-samples' p2pBandwidthLatencyTest output into a P2pOutput: devices (name, PCI bus as
printed in hex), the CAN / CANNOT Access Peer lines, the connectivity matrix, and every printed
matrix: unidirectional and bidirectional P2P=Disabled / P2P=Enabled bandwidth (writes, and reads
with ``--p2p_read``), and the latency matrices with their GPU and CPU timings.

Older samples print ``P2P=Enabled Bandwidth Matrix`` without "(P2P Writes)" and one latency
matrix without the GPU / CPU split; both are read. Cell (row i, column j) is the copy from GPU i
to GPU j (the sample's ``matrix[i * n + j]``); the diagonal is a copy inside one GPU. Lines are
read streamed (text_input.py); a matrix cut short and lines that cannot be read are problems.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from gputopo.model.bus_id import as_address, from_p2pbw
from gputopo.model.flagged_lines import flagged_line, line_where
from gputopo.text_input import CappedList, elision_problem

_TITLE = re.compile(r"^(?P<dir>Unidirectional |Bidirectional |directional )?P2P=(?P<p2p>Disabled|Enabled)\s+"
                    r"(?P<what>Bandwidth|Latency)(?:\s+\(P2P (?P<mode>Writes|Reads)\))?\s+Matrix\s+\((?P<unit>GB/s|us)\)")
_CONNECTIVITY = re.compile(r"^P2P Connectivity Matrix")
_HEADER = re.compile(r"^(D\\D|GPU|CPU)((?:\s+\d+)+)\s*$")
_ROW = re.compile(r"^(\d+)((?:\s+[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)+)\s*$")
_DEVICE = re.compile(r"^Device:\s*(\d+),\s*(.+?),\s*pciBusID:\s*([0-9A-Fa-f]+),\s*pciDeviceID:\s*([0-9A-Fa-f]+),"
                     r"\s*pciDomainID:\s*([0-9A-Fa-f]+)")
_ACCESS = re.compile(r"^Device=(\d+)\s+(CAN|CANNOT)\s+Access Peer Device=(\d+)")
#: How the sample reports a CUDA call that failed, then exits: its own cudaCheckError()
#: ("Cuda failure FILE:LINE: 'error string'") and helper_cuda.h's checkCudaErrors ("CUDA error at
#: FILE:LINE code=N(cudaErrorX) "call"").
_FAILURE = re.compile(r"^(?:Cuda failure|CUDA error at)\s+\S+:\d+")
#: The sample prints every bandwidth and latency figure with two decimals ("%6.02f").
_PRINTED = re.compile(r"^[-+]?\d+\.\d\d$")
_BANNER = "[P2P (Peer-to-Peer) GPU Bandwidth Latency Test]"
_KNOWN = (_BANNER, "***NOTE", "So you can see lesser", "NOTE: The CUDA Samples",
          "Test passed", "Press enter", "[p2pBandwidthLatencyTest]", "Usage:", "Options:", "#")


@dataclass
class P2pDevice:
    index: int
    name: str
    pci_bus: str  # hex, as printed ("1", "c1")
    pci_device: str
    pci_domain: str

    @property
    def bus_id(self) -> str:
        """The device in NVML's form without the function, ``00000000:C1:00`` (as printed when it
        is no PCI address)."""
        addr = from_p2pbw(self.pci_bus, self.pci_device, self.pci_domain)
        if addr is None:
            return f"{self.pci_domain}:{self.pci_bus}:{self.pci_device}"
        return as_address(addr).nvml_device

    def to_json(self) -> dict:
        return {**vars(self), "bus_id": self.bus_id}


@dataclass
class P2pMatrix:
    """One printed matrix: ``kind`` is connectivity | bandwidth | latency; ``p2p`` enabled or
    disabled; ``mode`` writes | reads; ``bidirectional``; ``timer`` GPU | CPU (latency)."""

    title: str
    line: int
    kind: str
    p2p: str | None = None
    mode: str = "writes"
    bidirectional: bool = False
    timer: str = "GPU"
    unit: str = "GB/s"
    columns: list[int] = field(default_factory=list)
    cells: list[list[float]] = field(default_factory=list)
    complete: bool = False

    @property
    def name(self) -> str:
        if self.kind == "connectivity":
            return "connectivity"
        parts = ["bidirectional" if self.bidirectional else ("unidirectional" if self.kind == "bandwidth" else ""),
                 f"p2p-{self.p2p}", self.kind, self.mode if self.p2p == "enabled" else "",
                 self.timer.lower() if self.kind == "latency" else ""]
        return " ".join(p for p in parts if p)

    def to_json(self) -> dict:
        return {"name": self.name, "title": self.title, "line": self.line, "unit": self.unit, "timer": self.timer,
                "columns": self.columns, "cells": self.cells, "complete": self.complete}


@dataclass
class P2pOutput:
    source: str
    devices: list[P2pDevice] = field(default_factory=list)
    access: dict[tuple[int, int], bool] = field(default_factory=dict)
    matrices: list[P2pMatrix] = field(default_factory=list)
    problems: list[str] = field(default_factory=lambda: CappedList(200))
    notes: list[str] = field(default_factory=lambda: CappedList(50))
    #: The CUDA failures the sample printed before it exited: {"testcase", "kind", "message", "line"}.
    failures: list[dict] = field(default_factory=list)
    #: (line, what) where a second run of the sample begins (its banner again, or a device number
    #: listed again): one output per file, so the importer refuses it (read_p2pbw).
    second_run: tuple[int, str] | None = None

    def matrix(self, name: str) -> P2pMatrix | None:
        return next((m for m in self.matrices if m.name == name), None)

    def peer_access(self, i: int, j: int) -> bool | None:
        if (i, j) in self.access:
            return self.access[(i, j)]
        conn = self.matrix("connectivity")
        if conn and i < len(conn.cells) and j < len(conn.cells[i]):
            return bool(conn.cells[i][j])
        return None

    def summary(self) -> dict:
        return {"tool": "p2pBandwidthLatencyTest", "file": self.source.rsplit("/", 1)[-1], "path": self.source,
                "devices": [d.to_json() for d in self.devices],
                "peer_access": [[i, j, ok] for (i, j), ok in sorted(self.access.items())],
                "matrices": [m.to_json() for m in self.matrices], "failures": list(self.failures),
                "flagged_lines": [flagged_line(f["message"], tool="p2pBandwidthLatencyTest", where=line_where(self.source, f["line"]),
                                               fails_run=True) for f in self.failures],
                "problems": list(self.problems), "notes": list(self.notes)}


class _Parser:
    def __init__(self, out: P2pOutput):
        self.out = out
        self.title: P2pMatrix | None = None  # the titled matrix being read (GPU part first)
        self.cur: P2pMatrix | None = None
        self.last: tuple[int, str] = (0, "")  # the last line with text, and its number

    def _close(self, why: str = "") -> None:
        m = self.cur
        self.cur = None
        if m is None:
            return
        n = len(m.columns)
        m.complete = len(m.cells) == n and all(len(r) == n for r in m.cells)
        if not m.complete:
            self.out.problems.append(f"line {m.line}: the {m.name} matrix is cut short ({len(m.cells)} of {n} rows"
                                     + (f"; {why}" if why else "") + ")")

    def feed(self, lineno: int, line: str) -> None:
        s = line.strip()
        if s:
            self.last = (lineno, s)
        if self.cur is not None:
            mm = _ROW.match(s)
            if mm and len(self.cur.cells) < len(self.cur.columns):
                vals = [float(t) for t in mm.group(2).split()]
                if len(vals) != len(self.cur.columns):
                    self.out.problems.append(f"line {lineno}: row {mm.group(1)} of the {self.cur.name} matrix has "
                                             f"{len(vals)} value(s) for {len(self.cur.columns)} GPUs"
                                             + ("; its last value may be cut, so it is left out"
                                                if len(vals) < len(self.cur.columns) else ""))
                    if len(vals) < len(self.cur.columns):
                        vals = vals[:-1]
                    else:
                        vals = vals[:len(self.cur.columns)]
                self.cur.cells.append(vals)
                if len(self.cur.cells) == len(self.cur.columns) and len(vals) == len(self.cur.columns):
                    self._close()
                return
            self._close("next line is not a row of it")
        if not s:
            return
        mm = _HEADER.match(s)
        if mm and self.title is not None:
            base = self.title
            timer = "CPU" if mm.group(1) == "CPU" else "GPU"
            m = base if not base.columns and timer == base.timer else P2pMatrix(
                title=base.title, line=lineno, kind=base.kind, p2p=base.p2p, mode=base.mode,
                bidirectional=base.bidirectional, timer=timer, unit=base.unit)
            if m is not base:
                self.out.matrices.append(m)
            m.columns = [int(t) for t in mm.group(2).split()]
            self.cur = m
            return
        if _CONNECTIVITY.match(s):
            self._start(P2pMatrix(title=s, line=lineno, kind="connectivity", unit="1 = peer access"))
            return
        mm = _TITLE.match(s)
        if mm:
            self._start(P2pMatrix(title=s, line=lineno, kind=mm.group("what").lower(), p2p=mm.group("p2p").lower(),
                                  mode=(mm.group("mode") or "Writes").lower(), bidirectional=bool(
                                      mm.group("dir") and mm.group("dir").startswith("Bi")), unit=mm.group("unit")))
            return
        if s.startswith(_BANNER) and (self.out.devices or self.out.matrices) and self.out.second_run is None:
            self.out.second_run = (lineno, "the sample's banner again")
        mm = _DEVICE.match(s)
        if mm:
            if any(d.index == int(mm.group(1)) for d in self.out.devices) and self.out.second_run is None:
                self.out.second_run = (lineno, f"Device: {mm.group(1)} listed again")
            self.out.devices.append(P2pDevice(int(mm.group(1)), mm.group(2).strip(), mm.group(3), mm.group(4),
                                              mm.group(5)))
            return
        mm = _ACCESS.match(s)
        if mm:
            self.out.access[(int(mm.group(1)), int(mm.group(3)))] = mm.group(2) == "CAN"
            return
        if _FAILURE.match(s):
            t = self.title
            self.out.failures.append({"testcase": t.title if t is not None and not t.cells else None, "kind": "error",
                                      "message": s, "line": lineno})
            return
        elided = elision_problem(s, lineno)
        if elided:
            self.out.problems.append(elided)
            return
        if not s.startswith(_KNOWN):
            self.out.notes.append(f"line {lineno}: not a p2pBandwidthLatencyTest line, left out: {s[:80]!r}")

    def _cut_titles(self) -> None:
        """A bandwidth title whose first word was cut ("directional P2P=Disabled ...", a paste that
        began mid-word) is Uni- or Bidirectional by the order the sample prints its matrices in:
        unidirectional P2P=Disabled, P2P=Enabled, then bidirectional P2P=Disabled, P2P=Enabled,
        then the latency matrices. Where the next title does not tell it, the matrix is left out."""
        ms = self.out.matrices
        for m in list(ms):
            if not m.title.startswith("directional "):
                continue
            nxt = next((x for x in ms[ms.index(m) + 1:] if not x.title.startswith("directional ")), None)
            bi: bool | None = None
            if nxt is not None and m.p2p == "disabled" and nxt.kind == "bandwidth" and nxt.p2p == "enabled":
                bi = nxt.bidirectional  # X P2P=Disabled comes just before X P2P=Enabled
            elif nxt is not None and m.p2p == "enabled" and nxt.kind == "latency":
                bi = True  # bidirectional P2P=Enabled comes just before the latency matrices
            elif nxt is not None and m.p2p == "enabled" and nxt.bidirectional and nxt.p2p == "disabled":
                bi = False  # unidirectional P2P=Enabled comes just before bidirectional P2P=Disabled
            if bi is None or nxt is None:
                ms.remove(m)
                self.out.problems.append(f"line {m.line}: the {m.title!r} matrix's title is cut at its start, and "
                                         "the next title does not tell whether it is uni- or bidirectional: left out")
                continue
            m.bidirectional = bi
            self.out.notes.append(f"line {m.line}: {m.title!r} is read as {'Bi' if bi else 'Uni'}{m.title}: its first "
                                  f"word was cut, and the sample prints it just before {nxt.title!r}")

    def _start(self, m: P2pMatrix) -> None:
        self.title = m
        self.out.matrices.append(m)

    def finish(self) -> None:
        m = self.cur or (self.out.matrices[-1] if self.out.matrices else None)
        lineno, last = self.last
        if m is not None and m.kind != "connectivity" and m.cells and _ROW.match(last) \
                and len(m.cells[-1]) == len(m.columns) == len(last.split()) - 1 and not _PRINTED.match(last.split()[-1]):
            # the file ends inside a figure the sample prints with two decimals ("924" of "924.27")
            m.cells[-1] = m.cells[-1][:-1]
            self.out.problems.append(f"line {lineno}: the output ends in the middle of a figure ({last.split()[-1]!r}, "
                                     "printed with two decimals): that value is left out")
            if self.cur is None:
                m.complete = False
                self.out.problems.append(f"line {m.line}: the {m.name} matrix is cut short (its last row lacks a value)")
        if self.cur is not None:
            self._close("the output ends here")
        self._cut_titles()
        for m in self.out.matrices:
            if not m.columns:
                self.out.problems.append(f"line {m.line}: the {m.name} matrix has a title but no rows")


def parse_p2pbw_lines(lines: Iterable[tuple[int, str]], source: str) -> P2pOutput:
    out = P2pOutput(source=source)
    p = _Parser(out)
    for lineno, line in lines:
        p.feed(lineno, line)
        if out.second_run is not None:  # refused there (read_p2pbw): the rest is not read
            break
    p.finish()
    return out
