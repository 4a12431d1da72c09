"""nvbandwidth's text output (v0.2 to v0.8) into an NvbOutput (nvbandwidth_records.py).

Read line by line (text_input.py: bounded memory, launcher prefixes and quote marks removed, lost
leading blanks do not matter). Accepted: the version/CUDA/driver header, ``Device N: NAME`` with
or without the bus id (v0.6+: v0.5 announced it, but its sources print none), the hostname line
(v0.8), multinode ``Process N (host): device D:`` lines, ``Running X.`` / ``Waiving X.``
(v0.2-v0.4) / ``Waived:`` (v0.5+, printed instead of ``Running X.``, so without the testcase's
name), every matrix (GB/s or ns), ``N/A`` cells,
``SUM key value`` and ``&&&& PERF key value`` lines, and a failed run: `` Invalid value when
checking the pattern`` (a data-check failure of the running testcase) and ``ASSERT in
expression`` / ``[CUDA_ERROR_...]`` lines. A ``...`` line (the poster cut something) and a matrix
cut short are said as problems; nothing real is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gputopo.text_input import elision_problem

from .nvbandwidth_records import (
    NvbDevice,
    NvbFailure,
    NvbMatrix,
    NvbOutput,
    UNNAMED_WAIVER,
    testcase_of_key,
)

_VERSION = re.compile(r"^nvbandwidth Version:\s*(\S+)")
_GIT = re.compile(r"^Built from Git version:\s*(\S*)")
_CUDA_RT = re.compile(r"^CUDA Runtime Version:\s*(\d+)")
_CUDA_DRV = re.compile(r"^CUDA Driver Version:\s*(\d+)")
_DRIVER = re.compile(r"^Driver Version:\s*(\S+)")
_DEVICE = re.compile(r"^Device (\d+):\s*(.+?)(?:\s+\(([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.\d)?)\))?\s*$")
_PROCESS = re.compile(r"^Process\s+(\d+)\s+\(([^)]*)\):\s*device\s+(\d+):\s*(.+?)"
                      r"(?:\s+\(([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})\))?\s*$")
#: (a "> " before it: the line pasted as a markdown quote)
_RUNNING = re.compile(r"^(?:>\s*)?Running (?:benchmark )?(\w+)\.?\s*$")
_WAIVING = re.compile(r"^Waiving (\w+)\.?\s*$")
_STATUS = re.compile(r"^(Waived|Not Found|Error|ERROR)\s*:\s*(.*)$")
_DESCRIPTION = re.compile(r"^(?:memcpy|memory latency|Device to Device Latency)\b.*\((?:GB/s|ns)\)\s*$")
_SUM = re.compile(r"^(?:SUM|&&&& PERF)\s+(\w+)\s+([-+0-9.eE]+|nan|inf)")
_STAT = re.compile(r"^(?:MIN|MAX|AVG)\s+\w+\s+\S+\s*$")
_PATTERN = re.compile(r"Invalid value when checking the pattern(?: at)?\s*(.*)$")
_OFFSET = re.compile(r"^Current offset\b")
_ASSERT = re.compile(r"^(ASSERT in expression .*|\[CUDA_ERROR_\w+\].*|\[cuda\w+\].*|NVML_ERROR: .*)$")
_CELL = re.compile(r"^(?:[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|N/A|nan|-?inf)$", re.IGNORECASE)
_KNOWN = ("NOTE:", "Performance can vary", "Additional system-specific", "MPI version:",
          "nvbandwidth reports", "Index, Name:", "====")


def _cell(tok: str) -> float | None:
    return None if tok.upper() == "N/A" else float(tok)


class _Parser:
    def __init__(self, out: NvbOutput):
        self.out = out
        self.testcase: str | None = None
        self.matrix: NvbMatrix | None = None
        self.header_expected = False

    # --- matrices
    def _close(self, why: str | None = None) -> None:
        m = self.matrix
        if m is None:
            return
        self.matrix = None
        square = m.columns and len(m.cells) == len(m.columns) and m.description.count("GPU(row)")
        # a host testcase prints one row, the host's (CPU(row) -> / <- GPU(column)): whole without
        # the SUM line after it (a paste that left the SUM lines out)
        host_row = len(m.cells) == 1 and "CPU(row)" in m.description and m.row_labels == ["0"]
        full_rows = all(len(r) == len(m.columns) for r in m.cells)
        m.complete = bool(m.cells) and full_rows and (m.printed_sum is not None or bool(square) or host_row)
        values = [v for row in m.cells for v in row if v is not None]
        if m.complete and m.printed_sum is not None and abs(sum(values) - m.printed_sum) > 0.005 * len(values) + 0.01:
            self.out.problems.append(f"line {m.line}: the {m.key} matrix's cells add up to {sum(values):.2f}, not the "
                                     f"printed SUM {m.printed_sum}: a cell was changed or misread")
        if not m.complete:
            what = m.key or m.testcase or "a testcase"
            m.problems.append(f"line {m.line}: the {what} matrix ({m.description}) is cut short"
                              + (f" ({why})" if why else "") + f": {len(m.cells)} row(s) read")
            self.out.problems.extend(m.problems[-1:])

    def _matrix_line(self, lineno: int, line: str) -> bool:
        """Consume a header or row of the open matrix; False when the line is not one."""
        m = self.matrix
        assert m is not None
        toks = line.split()
        if self.header_expected:
            if toks and all(t.isdigit() for t in toks):
                m.columns = toks
                self.header_expected = False
                return True
            self.out.problems.append(f"line {lineno}: expected the column numbers of the {m.description!r} matrix, "
                                     f"read {line.strip()[:60]!r}")
            self.header_expected = False
            return False
        if len(toks) >= 2 and all(_CELL.match(t) for t in toks[1:]) and re.match(r"^\w+$", toks[0]):
            cells = [_cell(t) for t in toks[1:]]
            if len(cells) != len(m.columns):
                short = len(cells) < len(m.columns)
                self.out.problems.append(f"line {lineno}: row {toks[0]} of the {m.key or m.testcase or '?'} matrix has "
                                         f"{len(cells)} value(s) for {len(m.columns)} column(s)"
                                         + ("; its last value may be cut, so it is left out" if short else ""))
                cells = cells[:-1] if short else cells[:len(m.columns)]
            m.row_labels.append(toks[0])
            m.cells.append(cells)
            return True
        return False

    # --- one line
    def feed(self, lineno: int, line: str) -> None:
        s = line.strip()
        out = self.out
        if self.matrix is not None:
            if not s:
                if self.header_expected or not self.matrix.cells:
                    return
                return  # the blank line before SUM: the SUM line closes it
            if self._matrix_line(lineno, line):
                return
            sm = _SUM.match(s)
            if sm:
                self._sum(sm)
                return
            self._close("next line is not a matrix row")
        if not s:
            return
        elided = elision_problem(s, lineno, "what was left out is not known")
        if elided:
            out.problems.append(elided)
            return
        for rx, attr, conv in ((_VERSION, "version", str), (_GIT, "git_version", str), (_CUDA_RT, "cuda_runtime", int),
                               (_CUDA_DRV, "cuda_driver", int), (_DRIVER, "driver", str)):
            mm = rx.match(s)
            if mm:
                setattr(out, attr, conv(mm.group(1)) if mm.group(1) else None)
                return
        mm = _DEVICE.match(s)
        if mm:
            out.devices.append(NvbDevice(int(mm.group(1)), mm.group(2).strip(), mm.group(3)))
            return
        mm = _PROCESS.match(s)
        if mm:
            out.devices.append(NvbDevice(int(mm.group(1)), mm.group(4).strip(), mm.group(5), host=mm.group(2)))
            out.multinode = True
            return
        mm = _RUNNING.match(s)
        if mm:
            self.testcase = mm.group(1)
            out.testcases_run.append(self.testcase)
            return
        mm = _WAIVING.match(s)
        if mm:
            out.waived.append(mm.group(1))
            return
        if _DESCRIPTION.match(s):
            self.matrix = NvbMatrix(description=s, line=lineno, testcase=self.testcase)
            out.matrices.append(self.matrix)
            self.header_expected = True
            return
        sm = _SUM.match(s)
        if sm:
            self._sum(sm, lineno=lineno)
            return
        if self._failure(lineno, s):
            return
        mm = _STATUS.match(s)
        if mm:
            if mm.group(1) == "Waived":  # printed in place of "Running X.": never the testcase above
                out.waived.append(UNNAMED_WAIVER)
            else:
                out.failures.append(NvbFailure(self.testcase, "error", s, lineno))
            return
        if _STAT.match(s) or s.startswith(_KNOWN):
            return
        if out.hostname is None and not out.devices and re.fullmatch(r"[\w.-]+", s) and out.version:
            out.hostname = s  # v0.8 prints the hostname above the device list
            return
        out.notes.append(f"line {lineno}: not an nvbandwidth line, left out: {s[:80]!r}")

    def _sum(self, sm, lineno: int | None = None) -> None:
        key, value = sm.group(1), float(sm.group(2))
        m = self.matrix
        if m is None:  # a SUM line without its matrix (elided above it)
            m = next((x for x in reversed(self.out.matrices) if x.key is None), None)
            if m is None:
                self.out.problems.append(f"line {lineno}: SUM {key} without its matrix (cut when posted?)")
                return
        m.key = key
        m.testcase = m.testcase if m.testcase and key.startswith(m.testcase) else testcase_of_key(key)
        m.printed_sum = value
        if self.matrix is m:
            self._close()

    def _failure(self, lineno: int, s: str) -> bool:
        out = self.out
        mm = _PATTERN.search(s)
        if mm:
            out.failures.append(NvbFailure(self.testcase, "pattern-check", s, lineno))
            return True
        last = out.failures[-1] if out.failures else None
        if _OFFSET.match(s) and last is not None:
            last.details.append(s)
            return True
        mm = _ASSERT.match(s)
        if mm:
            if last is not None and last.kind == "pattern-check" and last.testcase == self.testcase and not any(
                    d.startswith(("ASSERT", "[")) for d in last.details):
                last.details.append(s)  # the assert that ended the run after the failed check
            else:
                kind = "assert" if s.startswith("ASSERT") else "cuda-error"
                out.failures.append(NvbFailure(self.testcase, kind, s, lineno))
            return True
        return False

    def finish(self) -> None:
        if self.matrix is not None:
            self._close("the output ends here")
        done = {m.testcase for m in self.out.matrices if m.complete}
        failed = {f.testcase for f in self.out.failures}
        printed = {m.testcase for m in self.out.matrices}  # once, not per testcase (issue 44)
        for tc in self.out.testcases_run:
            if tc not in done and tc not in failed and tc not in printed:
                self.out.problems.append(f"testcase {tc} started (Running {tc}.) but printed no matrix: "
                                         "the output stops or was cut there")


def parse_nvbandwidth_lines(lines: Iterable[tuple[int, str]], source: str) -> NvbOutput:
    out = NvbOutput(source=source)
    p = _Parser(out)
    for lineno, line in lines:
        p.feed(lineno, line)
    p.finish()
    return out


def looks_like_nvbandwidth(out: NvbOutput) -> bool:
    """Anything of nvbandwidth's in it: its version line, a matrix, or a testcase that ran."""
    return bool(out.version or out.matrices or out.testcases_run)


def matrices_of(out: NvbOutput, testcase: str) -> list[NvbMatrix]:
    return [m for m in out.matrices if m.testcase == testcase]
