"""nvbandwidth's ``-j`` JSON output (v0.5+, json_output.cpp) into an NvbOutput.

Layout: ``{"nvbandwidth": {"version", "git_version", "CUDA Runtime Version", "Driver Version",
"GPU Device list": ["0: NAME (dddddddd:bb:dd): (host)", ...], "testcases": [{"name", "status"
("Passed" | "Running" | "Waived" | "Error" | "Not Found"), "bandwidth_description",
"bandwidth_matrix": [["26.34", "N/A", ...], ...] (cells as strings), "sum", "error"}],
"error", "warning"}}``. A testcase left at "Running" with an ``error`` is one that failed (the
run was aborted after printing the JSON). The JSON form is small (one matrix per testcase), so
it is read whole, within text_input's byte limit.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gputopo.errors import InputFileError

from .nvbandwidth_records import NvbDevice, NvbFailure, NvbMatrix, NvbOutput

_DEVICE = re.compile(r"^\s*(\d+):\s*(.+?)(?:\s+\(([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})\))?"
                     r"(?::\s*\(([^)]*)\))?\s*$")


def parse_nvbandwidth_json(text: str, source: str) -> NvbOutput:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputFileError(source, f"starts like nvbandwidth -j output but is not valid JSON ({e.msg})",
                             line=e.lineno) from None
    root = doc.get("nvbandwidth") if isinstance(doc, dict) else None
    if not isinstance(root, dict):
        raise InputFileError(source, "JSON without an \"nvbandwidth\" object: not nvbandwidth -j output")
    out = NvbOutput(source=source, form="json")
    out.version = _str(root.get("version"))
    out.git_version = _str(root.get("git_version"))
    rt = root.get("CUDA Runtime Version")
    out.cuda_runtime = rt if isinstance(rt, int) else None
    out.driver = _str(root.get("Driver Version"))
    for k, entry in enumerate(root.get("GPU Device list") or []):
        m = _DEVICE.match(str(entry))
        if m:
            out.devices.append(NvbDevice(int(m.group(1)), m.group(2).strip(), m.group(3), host=m.group(4)))
            out.hostname = out.hostname or m.group(4)
        else:
            out.problems.append(f"GPU Device list[{k}]: not read ({str(entry)[:60]!r})")
    if root.get("error"):
        out.failures.append(NvbFailure(None, _kind(str(root["error"])), str(root["error"]), 0))
    if root.get("warning"):
        out.notes.append(f"nvbandwidth warning: {root['warning']}")
    for k, tc in enumerate(root.get("testcases") or []):
        if isinstance(tc, dict):
            _testcase(out, k, tc)
    return out


def _testcase(out: NvbOutput, k: int, tc: dict[str, Any]) -> None:
    name = _str(tc.get("name"))
    status = _str(tc.get("status")) or "?"
    if status == "Waived":
        out.waived.append(name or f"testcases[{k}]")
        return
    if name:
        out.testcases_run.append(name)
    if tc.get("error"):
        out.failures.append(NvbFailure(name, _kind(str(tc["error"])), str(tc["error"]), 0))
    elif status not in ("Passed", "Running"):
        out.failures.append(NvbFailure(name, "error", f"status {status}", 0))
    rows = tc.get("bandwidth_matrix")
    if rows is None:
        if status == "Passed":
            out.problems.append(f"testcases[{k}] ({name}): passed but holds no bandwidth_matrix")
        return
    m = NvbMatrix(description=_str(tc.get("bandwidth_description")) or "?", line=0, testcase=name, key=name)
    width = max((len(r) for r in rows if isinstance(r, list)), default=0)
    m.columns = [str(c) for c in range(width)]
    for r, row in enumerate(rows):
        cells = []
        for c, v in enumerate(row if isinstance(row, list) else []):
            try:
                cells.append(None if str(v).strip().upper() == "N/A" else float(v))
            except (TypeError, ValueError):
                cells.append(None)
                out.problems.append(f"testcases[{k}] ({name}) cell [{r}][{c}]: {v!r} is not a number")
        m.row_labels.append(str(r))
        m.cells.append(cells)
    s = tc.get("sum")
    m.printed_sum = float(s) if isinstance(s, (int, float)) and not isinstance(s, bool) else None
    m.complete = bool(m.cells) and all(len(r) == width for r in m.cells)
    out.matrices.append(m)


def _kind(message: str) -> str:
    if "Invalid value when checking the pattern" in message:
        return "pattern-check"
    if message.lstrip().startswith("ASSERT"):
        return "assert"
    return "cuda-error" if "CUDA_ERROR" in message else "error"


def _str(v) -> Any:
    return str(v) if v is not None and v != "" else None
