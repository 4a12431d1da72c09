"""Every line a tool itself marked as a warning or an error is said (``tool-flagged``).

The importers keep each line a tool marked (model/flagged_lines.py: NCCL's ``NCCL WARN``,
nccl-tests' ``Test CUDA failure`` / ``Test NCCL failure`` / ``Test failure``, perftest's
``Couldn't ...`` and completion errors, the CUDA samples' ``Cuda failure`` / ``CUDA error at``).
A specific rule that explains such a line quotes it in its finding's evidence
(``evidence["tool_lines"]``): it claims it. This rule runs after them and says each line no finding
claims, so no line a tool flagged goes unsaid and none is said twice: one ``tool-flagged`` finding
per distinct text (the same warning on eight hosts is one finding naming the eight), quoting it
with the hosts, ranks and GPUs (CUDA devices) the lines name. It is a warning; an error where the
tool says with it that its run failed (nccl-tests' failure lines, perftest's and the CUDA samples'
errors: each exits after printing it). Its cause is not known from the input (no rule of gputopo
knows the line); the finding says so and what would tell it.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Iterable, List, Optional, Sequence

from gputopo.model import Finding
from gputopo.model.finding import gpu_ranges
from gputopo.model.flagged_lines import TOOL_LINES, normalized

#: At most this many distinct flagged texts become findings of their own; the rest are counted
#: in the last one.
MAX_FINDINGS = 40

#: What tells more, per tool, where no rule knows the line.
_WHAT_TELLS = {
    "NCCL": ["read the lines around it in the log: NCCL prints what it did before and after the warning",
             "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,GRAPH,ENV for the lines before it"],
    "nccl-tests": ["read the NCCL WARN lines and the CUDA or NCCL error above the failure (rerun with "
                   "NCCL_DEBUG=WARN, or INFO, if the output has none)",
                   "`gputopo scan` of the node for its GPUs' and NICs' state"],
    "perftest": ["read the lines before it in the output: perftest names the call that failed",
                 "check the port with `ibstat` (`gputopo import ibstat`) and `dmesg` for mlx5 / ib_core errors"],
    "p2pBandwidthLatencyTest": ["the CUDA error names the call that failed; `dmesg` for Xid errors",
                                "`gputopo scan` of the node (peer access, PCIe, IOMMU/ACS)"],
}


def claimed(findings: Iterable[Finding]) -> set:
    """The flagged texts the findings quote (``evidence["tool_lines"]``)."""
    out = set()
    for f in findings:
        for t in (f.evidence or {}).get(TOOL_LINES) or []:
            out.add(normalized(t))
    return out


def _line_text(where: Optional[str]) -> str:
    """``line N`` (of the file, named by its base name where the record says ``path:N``)."""
    if not where:
        return "line not known"
    if where.startswith("line "):
        return where
    path, _, line = where.rpartition(":")
    return f"line {line} of {path.rsplit('/', 1)[-1]}" if line.isdigit() else where


def _where_text(group: List[Dict[str, Any]]) -> str:
    by_host: Dict[str, Dict[str, set]] = {}
    for rec in group:
        h = rec.get("host") or "host not printed"
        d = by_host.setdefault(h, {"ranks": set(), "gpus": set()})
        d["ranks"].update(rec.get("ranks") or [])
        if rec.get("gpu") is not None:
            d["gpus"].add(rec["gpu"])
    if list(by_host) == ["host not printed"] and not any(by_host["host not printed"].values()):
        return ""  # the line names no host, rank or GPU
    parts = []
    for h, d in sorted(by_host.items()):
        bits = []
        if d["ranks"]:
            bits.append(("rank " if len(d["ranks"]) == 1 else "ranks ") + gpu_ranges(d["ranks"]))
        if d["gpus"]:
            bits.append(("CUDA device " if len(d["gpus"]) == 1 else "CUDA devices ") + gpu_ranges(d["gpus"]))
        parts.append(h + (f" ({', '.join(bits)})" if bits else ""))
    shown = parts[:8]
    return ", ".join(shown) + (f" and {len(parts) - 8} more hosts" if len(parts) > 8 else "")


def tool_flagged_findings(lines: Sequence[Dict[str, Any]], made: Iterable[Finding],
                          files: Optional[List[str]] = None) -> List[Finding]:
    """One ``tool-flagged`` finding per distinct text among ``lines`` (flagged-line records) that
    no finding of ``made`` claims."""
    taken = claimed(made)
    groups: Dict[tuple, List[Dict[str, Any]]] = {}
    for rec in lines:
        if not isinstance(rec, dict) or not rec.get("text"):
            continue
        text = normalized(rec["text"])
        if text in taken:
            continue
        groups.setdefault((str(rec.get("tool") or "the tool"), text), []).append(rec)
    out = []
    items = list(groups.items())
    for n, ((tool, text), group) in enumerate(items[:MAX_FINDINGS]):
        fails = any(r.get("fails_run") for r in group)
        more = len(items) - MAX_FINDINGS if n == MAX_FINDINGS - 1 and len(items) > MAX_FINDINGS else 0
        also = (f"; {more} more distinct flagged line(s) of the input are not shown, listed in evidence"
                if more else "")
        said = ("an error that ended its run" if fails else
                "an error line" if re.match(r"\[?error\b", text, re.IGNORECASE) else "a warning")
        count = f"{len(group)} lines" if len(group) > 1 else _line_text(group[0].get("where"))
        where = _where_text(group)
        on = f" on {where}" if where else ""
        chain = next((r["chain"] for r in group if isinstance(r.get("chain"), list) and r["chain"]), None)
        if chain:  # nccl-tests' "Test failure" lines that unwound from it: said with it
            said += " (then its call chain: " + ", ".join(f"`Test failure {c}`" for c in chain[:30]) + (
                f" and {len(chain) - 30} more" if len(chain) > 30 else "") + ")"
        out.append(Finding(
            "tool-flagged", "error" if fails else "warning",
            f"{tool} printed `{text}`{on} ({count}): {said} that no rule of gputopo explains{also}",
            evidence={"tool": tool, TOOL_LINES: [text], "lines": [r.get("where") for r in group][:20],
                      "count": len(group), "hosts": sorted({r["host"] for r in group if r.get("host")}),
                      "ranks": sorted({k for r in group for k in r.get("ranks") or []}),
                      "cuda_devices": sorted({r["gpu"] for r in group if r.get("gpu") is not None}),
                      "fails_run": fails, "files": files,
                      **({"not_shown": [t for (_tl, t), _g in items[MAX_FINDINGS:]][:200]} if more else {})},
            cause="not known from this input: no rule of gputopo explains this line, so it is quoted as "
                  f"{tool} printed it",
            remedies=list(_WHAT_TELLS.get(tool, ["read the lines around it in the tool's output"]))))
    return out


def run_flagged_lines(imported: Iterable[Dict[str, Any]], nccl_tests: Iterable[Dict[str, Any]],
                      nccl_debug: Optional[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Every flagged line a run folder's imports kept: imported.json's entries (nvbandwidth,
    p2pBandwidthLatencyTest, perftest; the nccl-tests logs; the nccl-debug log's)."""
    out: List[Dict[str, Any]] = []
    for doc in list(imported) + list(nccl_tests) + ([nccl_debug] if nccl_debug else []):
        if isinstance(doc, dict):
            out += [r for r in doc.get("flagged_lines") or [] if isinstance(r, dict)]
    return out
