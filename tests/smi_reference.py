"""nvidia-smi's own answers, parsed for the GPU tests: the independent source that gputopo's
NVML scan is compared with, field by field (issue 16, item 9). nvidia-smi reads NVML too, but
through NVIDIA's code, not gputopo's reader: a field gputopo reads wrongly (a wrong call, a
wrong index, a wrong unit) shows as a difference. Pure text parsing, unit-tested on samples
in tests/unit/probe/test_smi_reference.py.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Sequence

_NVLINK_GPU = re.compile(r"^GPU (\d+): ")
_NVLINK_LINK = re.compile(r"^\s*Link (\d+): (.*)$")
_RATE = re.compile(r"^([0-9.]+) GB/s")
_CUDA_VERSION = re.compile(r"CUDA Version:\s*([0-9.]+)")


def parse_query_csv(text: str, fields: Sequence[str]) -> List[Dict[str, str]]:
    """`nvidia-smi --query-gpu=F1,F2,... --format=csv,noheader,nounits` -> one dict per GPU."""
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(fields):  # a name with a comma would shift the cells: say so
            raise ValueError(f"{len(cells)} cells for {len(fields)} fields: {line!r}")
        rows.append(dict(zip(fields, cells, strict=True)))
    return rows


def parse_nvlink_status(text: str) -> Dict[int, Dict[int, Optional[float]]]:
    """`nvidia-smi nvlink -s` -> {GPU index: {link: GB/s, or None when "<inactive>"}}.

    A GPU whose links are all down may print no link but a line "NVML: Unable to retrieve
    NVLink information as all links are inActive"; a GPU without NVLink prints its header
    only. Both give an empty dict: no active link."""
    out: Dict[int, Dict[int, Optional[float]]] = {}
    gpu: Optional[int] = None
    for line in text.splitlines():
        m = _NVLINK_GPU.match(line)
        if m:
            gpu = int(m.group(1))
            out[gpu] = {}
            continue
        m = _NVLINK_LINK.match(line)
        if m and gpu is not None:
            rate = _RATE.match(m.group(2).strip())
            out[gpu][int(m.group(1))] = float(rate.group(1)) if rate else None
    return out


def cuda_version(text: str) -> Optional[str]:
    """The driver's CUDA version from plain `nvidia-smi`'s header ("CUDA Version: 12.4")."""
    m = _CUDA_VERSION.search(text)
    return m.group(1) if m else None


def mig_mode(cell: str) -> Optional[str]:
    """`mig.mode.current` ("Enabled", "Disabled", "[N/A]") as gputopo says it, None for n/a."""
    v = cell.strip().lower()
    return v if v in ("enabled", "disabled") else None


def as_int(cell: str) -> Optional[int]:
    """A number cell, or None for "[N/A]" / "[Not Supported]"."""
    return int(cell) if cell.strip().isdigit() else None
