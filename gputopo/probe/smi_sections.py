"""Find the matrices in a file that holds one or several nvidia-smi outputs, and tell their kind.

Why: people paste `topo -m` and `topo -p2p X` outputs into one file, each under the command
they ran; `gputopo scan --from-smi FILE` reads such a file section by section.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, List, Optional, Sequence

from gputopo.model import LinkClass
from gputopo.probe.smi_grid import _LEGEND_ENTRY_RE, _header_names, _split_header
from gputopo.probe.smi_lines import (P2P_STATUSES, _Line, _TOPO, _err, _is_blank, _is_header,
                                     _is_legend_like, _is_skippable, _show, _split_lines, _tokens)
from gputopo.probe.smi_p2p import _CAP_NAMES

_P2P_CMD_RE = re.compile(r"(?:-p2p|--p2pstatus)\s*=?\s*([A-Za-z]+)")


@dataclass
class SmiSection:
    """One matrix found in a file that may hold several nvidia-smi outputs."""

    kind: str  # "topo" (`topo -m`) | "p2p" (`topo -p2p X`)
    cap: Optional[str]  # for "p2p": the capability named on the command line above it, if any
    header_line: int
    text: str  # the section's lines; line numbers are kept by `_lines`
    _lines: List["_Line"] = field(default_factory=list, repr=False)


def _detect(lines: Sequence[_Line]) -> Optional[str]:
    headers = [k for k, ln in enumerate(lines) if _is_header(ln)]
    if not headers:
        return None
    k = headers[0]
    names = _header_names(lines[k])
    devices, trailing = _split_header(names)
    if trailing:
        return "topo"
    leading_space_rows = 0
    for ln in lines[k + 1:]:
        if _is_blank(ln):
            continue
        toks = _tokens(ln.text)
        if not toks or toks[0].text not in devices:
            key = _LEGEND_ENTRY_RE.match(ln.text)
            if key and key.group(1) in ("OK", "CNS", "GNS", "TNS", "NS"):
                return "p2p"
            if key and key.group(1) in ("PIX", "PXB", "PHB", "NODE", "SYS", "SOC", "NV#"):
                return "topo"
            if ln.text.strip().lower().startswith("legend") or _is_legend_like(ln):
                continue
            break
        leading_space_rows += ln.text[:1] == " "
        for t in toks[1:]:
            u = t.text.upper()
            if u == "X":
                continue
            if u in P2P_STATUSES:
                return "p2p"
            try:
                LinkClass.parse(u)
                return "topo"
            except ValueError:
                pass
    return "p2p" if leading_space_rows else "topo"


def detect_smi_kind(text: str) -> Optional[str]:
    """"topo" for `nvidia-smi topo -m` text, "p2p" for `topo -p2p X` text, None for neither.

    Looks at the first matrix in the text: affinity columns or link classes mean "topo", P2P
    statuses (or a P2P legend) mean "p2p". A one-GPU matrix without either is called "topo"
    unless its rows start with a space as `-p2p` rows do.
    """
    return _detect(_split_lines(text))


def _cap_from_command(lines: Iterable[_Line]) -> Optional[str]:
    cap = None
    for ln in lines:
        if "nvidia-smi" in ln.text or "topo" in ln.text:
            m = _P2P_CMD_RE.search(ln.text)
            if m and m.group(1).lower() in _CAP_NAMES:
                cap = _CAP_NAMES[m.group(1).lower()]
    return cap


def _sections(lines: List[_Line], source: str) -> List[SmiSection]:
    headers = [k for k, ln in enumerate(lines) if _is_header(ln)]
    if not headers:
        for ln in lines:
            if not _is_blank(ln) and not _is_skippable(ln):
                raise _err(source, "no nvidia-smi topo matrix found: expected a header row "
                           f"naming GPU0, GPU1, ... (the output of {_TOPO}), found "
                           f"{_show(ln.text)}", ln.no)
        raise _err(source, f"no text: expected the output of {_TOPO}")
    out: List[SmiSection] = []
    prev_end = 0
    for n, k in enumerate(headers):
        end = headers[n + 1] if n + 1 < len(headers) else len(lines)
        # The section ends at the next pasted command line; what follows it up to the next
        # header (the command of the next output, a shell prompt) is the next one's preamble.
        body_end = end
        for m in range(k + 1, end):
            if _is_skippable(lines[m]) and not lines[m].text.strip().startswith(("```", "~~~")):
                body_end = m
                break
        preamble, body = lines[prev_end:k], lines[k:body_end]
        kind = _detect(body) or "topo"
        cap = _cap_from_command(preamble) if kind == "p2p" else None
        out.append(SmiSection(kind, cap, lines[k].no, "\n".join(ln.text for ln in body),
                              list(body)))
        prev_end = body_end
    return out


def split_smi_sections(text: str, source: str = "<text>") -> List[SmiSection]:
    """Find each `topo -m` / `topo -p2p` matrix in a file holding one or several outputs.

    A matrix starts at its header row; the command line pasted above a `-p2p` matrix
    (`nvidia-smi topo -p2p r`) names its capability. Raises InputFileError if no matrix is found.
    """
    lines = _split_lines(text)
    return _sections(lines, source)
