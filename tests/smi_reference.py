"""nvidia-smi's own answers, parsed for the GPU tests: the independent source that gputopo's
NVML scan is compared with, field by field (issue 16, item 9). nvidia-smi reads NVML too, but
through NVIDIA's code, not gputopo's reader: a field gputopo reads wrongly (a wrong call, a
wrong index, a wrong unit) shows as a difference. Pure text parsing, unit-tested on samples
in tests/unit/probe/test_smi_reference.py.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Dict, List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
# `nvidia-smi nvlink -s` is read by the one parser make gpu-check uses (tools/ is stdlib only):
# {GPU index: {link: GB/s, or None when "<inactive>"}}; a GPU whose links are all down ("all
# links are inActive") or that has no NVLink (its header only) gets an empty dict.
from gpu_check_compare import parse_nvlink_status  # noqa: E402,F401

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
