"""One nvbandwidth output as read (text or ``-j`` JSON): its versions, devices, every printed
matrix with its cells as printed (N/A: None), the testcases that failed and why, and what could
not be read.

Facts about the format (NVIDIA/nvbandwidth v0.2 to v0.8, output.cpp / json_output.cpp):
a matrix's cell (row, column) is written by testcase code as ``value(src, peer)``: for
``*_read_*`` the row GPU reads from the column GPU (data column -> row), for ``*_write_*`` the
row GPU writes to the column GPU (data row -> column); host, all-to-one and one-to-all tests
print one row and a column per GPU. The ``SUM <key>`` line closes a matrix and names it (v0.6+
bidirectional device tests print three: ``<testcase>_read1`` / ``_read2`` / ``_total``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gputopo.text_input import CappedList
from gputopo.model.peer_access import PEER_FILTERED_TESTCASES, UNNAMED_WAIVER  # noqa: F401 (parser's names)

#: Suffixes of a matrix key beyond its testcase's name (v0.6+ bidirectional device tests).
KEY_SUFFIXES = ("_read1", "_read2", "_write1", "_write2", "_total")
#: nvbandwidth's default copy size: 64 MiB up to v0.6, 512 MiB from v0.7 (`-b` changes it and
#: is not printed, so the size is recorded as assumed).
DEFAULT_BUFFER_MIB = {"old": 64, "new": 512}



def testcase_of_key(key: str) -> str:
    for s in KEY_SUFFIXES:
        if key.endswith(s):
            return key[: -len(s)]
    return key


@dataclass
class NvbDevice:
    index: int
    name: str
    bus_id: str | None  # as printed: "00000000:99:00" (v0.6+, as domain:bus:PCI device); None before
    host: str | None = None

    def to_json(self) -> dict:
        return dict(vars(self))


@dataclass
class NvbMatrix:
    """One printed matrix. ``cells[r][c]`` is GB/s (or ns for latency), None for N/A."""

    description: str
    line: int
    testcase: str | None = None
    key: str | None = None
    columns: list[str] = field(default_factory=list)
    row_labels: list[str] = field(default_factory=list)
    cells: list[list[float | None]] = field(default_factory=list)
    printed_sum: float | None = None
    complete: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def unit(self) -> str:
        return "ns" if self.description.rstrip().endswith("(ns)") else "GB/s"

    def to_json(self) -> dict:
        return {"testcase": self.testcase, "key": self.key, "description": self.description,
                "unit": self.unit, "line": self.line, "columns": self.columns, "rows": self.row_labels,
                "cells": self.cells, "printed_sum": self.printed_sum, "complete": self.complete,
                "problems": self.problems}


@dataclass
class NvbFailure:
    """A testcase that stopped: ``kind`` is ``pattern-check`` (the copy's data was wrong),
    ``assert`` / ``cuda-error`` (the run died), or ``error`` (nvbandwidth said ERROR)."""

    testcase: str | None
    kind: str
    message: str
    line: int
    details: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return dict(vars(self))


@dataclass
class NvbOutput:
    source: str
    form: str = "text"  # "text" | "json"
    version: str | None = None
    git_version: str | None = None
    cuda_runtime: int | None = None
    cuda_driver: int | None = None
    driver: str | None = None
    hostname: str | None = None
    devices: list[NvbDevice] = field(default_factory=list)
    matrices: list[NvbMatrix] = field(default_factory=list)
    testcases_run: list[str] = field(default_factory=list)
    waived: list[str] = field(default_factory=list)
    failures: list[NvbFailure] = field(default_factory=list)
    #: What makes the data incomplete (cut pastes, unreadable rows): ``incomplete-data``.
    problems: list[str] = field(default_factory=lambda: CappedList(200))
    #: Lines read but not used (a hostname, notes): said, not judged.
    notes: list[str] = field(default_factory=lambda: CappedList(50))
    #: A multinode run (``Process N (host): device D`` lines, ``multinode_`` testcases).
    multinode: bool = False

    def peer_waivers(self) -> list[str]:
        """The waived testcases nvbandwidth waives only when no GPU pair can access a peer (or
        there is one GPU): the named ones of PEER_FILTERED_TESTCASES, and an unnamed waiver of a
        single-node run (every single-node testcase nvbandwidth can waive is one of them)."""
        multinode = self.multinode or any(t.startswith("multinode_") for t in self.testcases_run + self.waived)
        return [t for t in self.waived
                if t in PEER_FILTERED_TESTCASES or (t == UNNAMED_WAIVER and not multinode)]

    def peer_testcases_measured(self) -> list[str]:
        """The testcases of PEER_FILTERED_TESTCASES that printed a figure (so some pair had peer access)."""
        out: list[str] = []
        for m in self.matrices:
            tc = m.testcase or ""
            if tc in PEER_FILTERED_TESTCASES and tc not in out and any(v is not None for r in m.cells for v in r):
                out.append(tc)
        return out

    @property
    def buffer_mib(self) -> int:
        m = re.match(r"v?(\d+)\.(\d+)", self.version or "")
        if m and (int(m.group(1)), int(m.group(2))) >= (0, 7):
            return DEFAULT_BUFFER_MIB["new"]
        return DEFAULT_BUFFER_MIB["old"] if m else DEFAULT_BUFFER_MIB["new"]

    def summary(self) -> dict:
        return {"tool": "nvbandwidth", "file": self.source.rsplit("/", 1)[-1], "path": self.source,
                "form": self.form, "version": self.version, "git_version": self.git_version,
                "cuda_runtime_version": self.cuda_runtime, "cuda_driver_version": self.cuda_driver,
                "driver_version": self.driver, "hostname": self.hostname,
                "devices": [d.to_json() for d in self.devices],
                "buffer_mib_assumed": self.buffer_mib,
                "testcases_run": self.testcases_run, "waived": self.waived,
                "waived_no_peer_access": self.peer_waivers(),
                "peer_testcases_measured": self.peer_testcases_measured(),
                "matrices": [m.to_json() for m in self.matrices],
                "failures": [f.to_json() for f in self.failures],
                "problems": list(self.problems), "notes": list(self.notes)}
