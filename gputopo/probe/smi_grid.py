"""The grid of an nvidia-smi matrix: its header, its rows, the affinity columns after the
device columns, and the legends after the matrix.

Why: `topo -m` and `topo -p2p` print the same grid (a header of GPU/NIC labels, one row per
label); this module reads that shape once, so :mod:`gputopo.probe.smi_topo` and
:mod:`gputopo.probe.smi_p2p` only judge the cells.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from gputopo.probe.smi_lines import (_GPU_LABEL_RE, _Line, _Tok, _err, _gpu_index, _is_blank,
                                     _is_cell_value, _is_header, _is_legend_like, _is_skippable,
                                     _pieces, _q, _show, _tokens)

#: The columns after the device columns that nvidia-smi prints, oldest first.
AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_LEGEND_ENTRY_RE = re.compile(r"^\s*(\S+)\s*=\s*(.*)$")
_NIC_LEGEND_ENTRY_RE = re.compile(r"^\s*(\S+)\s*:\s*(\S+)\s*$")
#: A cell that can only be an affinity value (a cpulist, a node number, N/A), never a link.
_AFFINITY_VALUE_RE = re.compile(r"^(?:[\d,\-]+|N/A)$", re.IGNORECASE)
#: A NIC column: NIC# (recent drivers) or the device name older drivers print (mlx5_0, ib0).
_NIC_LABEL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]*$")
_MULTIWORD_NAMES = {tuple(name.split()): name for name in AFFINITY_COLUMNS}


@dataclass
class _Row:
    no: int
    label: str
    cells: List[str]  # one per device column of the header, stripped
    trailing: List[Optional[str]]  # one per trailing (affinity) column; None = empty


@dataclass
class _Grid:
    header_no: int
    devices: List[str]  # device column labels in header order (GPUs and NICs)
    trailing: List[_Tok]  # trailing column names with their start columns
    rows: Dict[str, _Row]
    row_order: List[str]
    last_row_no: int
    rest: List[_Line]  # the lines after the matrix (legend, ...)


def _header_names(line: _Line) -> List[_Tok]:
    names: List[_Tok] = []
    for piece in _pieces(line.text):
        if " " not in piece.text or piece.text in AFFINITY_COLUMNS:
            names.append(piece)
            continue
        words, offset = [], 0
        for w in piece.text.split(" "):
            words.append(_Tok(w, piece.col + offset))
            offset += len(w) + 1
        # Collapsed whitespace ("GPU0 GPU1 CPU Affinity"): re-join the known multi-word names.
        if not any(_GPU_LABEL_RE.match(w.text) for w in words) and not _has_known_run(words):
            names.append(piece)  # a multi-word column this parser does not know
            continue
        k = 0
        while k < len(words):
            for n in (3, 2):
                key = tuple(w.text for w in words[k:k + n])
                if len(key) == n and key in _MULTIWORD_NAMES:
                    names.append(_Tok(_MULTIWORD_NAMES[key], words[k].col))
                    k += n
                    break
            else:
                names.append(words[k])
                k += 1
    return names


def _has_known_run(words: Sequence[_Tok]) -> bool:
    texts = [w.text for w in words]
    return any(tuple(texts[k:k + len(key)]) == key for key in _MULTIWORD_NAMES for k in range(len(texts)))


def _split_header(names: List[_Tok]) -> Tuple[List[str], List[_Tok]]:
    """Device columns (single words before the first affinity column), then the rest."""
    devices: List[str] = []
    trailing: List[_Tok] = []
    for tok in names:
        if trailing or " " in tok.text or tok.text in AFFINITY_COLUMNS or tok.text == "Affinity":
            trailing.append(tok)
        else:
            devices.append(tok.text)
    return devices, trailing


def _parse_grid(lines: Sequence[_Line], source: str, what: str) -> _Grid:
    k = 0
    while k < len(lines) and (_is_blank(lines[k]) or _is_skippable(lines[k])):
        k += 1
    if k == len(lines):
        raise _err(source, f"no text: expected the output of {what}")
    header = lines[k]
    if not _is_header(header):
        raise _err(source, f"expected the header row of {what} (column names GPU0, GPU1, ...), "
                   f"found {_show(header.text)}", header.no)
    devices, trailing = _split_header(_header_names(header))
    seen = set()
    for name in devices:
        if name in seen:
            raise _err(source, f"column {name} appears twice in the header", header.no)
        seen.add(name)

    rows: Dict[str, _Row] = {}
    order: List[str] = []
    last_row_no = header.no
    k += 1
    while k < len(lines):
        line = lines[k]
        if _is_blank(line):
            # Blank lines between rows (double-spaced pastes) do not end the matrix.
            n = k + 1
            while n < len(lines) and _is_blank(lines[n]):
                n += 1
            if n < len(lines) and _row_label(lines[n], devices) is not None:
                k = n
                continue
            break
        label = _row_label(line, devices)
        if label is None:
            toks = _tokens(line.text)
            if len(toks) >= 2 and _is_cell_value(toks[1].text) and not _is_legend_like(line):
                raise _err(source, f"row {toks[0].text} is not a column of the header "
                           f"(line {header.no})", line.no)
            break
        if label in rows:
            raise _err(source, f"a second row for {label} (the first is at line {rows[label].no})",
                       line.no)
        rows[label] = _parse_row(line, label, devices, trailing, source, header.no)
        order.append(label)
        last_row_no = line.no
        k += 1
    return _Grid(header.no, devices, trailing, rows, order, last_row_no, list(lines[k:]))


def _row_label(line: _Line, devices: Sequence[str]) -> Optional[str]:
    toks = _tokens(line.text)
    if toks and toks[0].text in devices:
        return toks[0].text
    return None


def _parse_row(line: _Line, label: str, devices: List[str], trailing: List[_Tok], source: str,
               header_no: int) -> _Row:
    toks = _tokens(line.text)[1:]
    n = len(devices)
    link_cells = next((k for k, t in enumerate(toks) if _AFFINITY_VALUE_RE.match(t.text)), len(toks))
    if min(len(toks), link_cells) < n:
        toks = toks[:link_cells]
        raise _err(source, f"row {label} has {len(toks)} link cells but the header (line {header_no}) "
                   f"has {n} device columns ({', '.join(devices)}): the matrix is not square",
                   line.no)
    cells = [t.text for t in toks[:n]]
    extra = toks[n:]
    if _gpu_index(label) is None:
        return _Row(line.no, label, cells, [None] * len(trailing))  # NIC rows: no affinity
    if len(extra) > len(trailing):
        raise _err(source, f"row {label} has {n + len(extra)} cells but the header (line "
                   f"{header_no}) has {n + len(trailing)} columns", line.no)
    return _Row(line.no, label, cells, _align_trailing(line, extra, n, trailing))


def _align_trailing(line: _Line, extra: List[_Tok], n_devices: int,
                    trailing: List[_Tok]) -> List[Optional[str]]:
    """Place the affinity values of a GPU row under their header columns."""
    if len(extra) == len(trailing):
        return [t.text for t in extra]
    if not extra:
        return [None] * len(trailing)
    if "\t" in line.text:
        cells = line.text.split("\t")
        # Clean tab form: every cell holds at most one token. Find where the device cells end.
        if all(len(c.split()) <= 1 for c in cells):
            seen, cut = 0, None
            for idx, c in enumerate(cells):
                if c.strip():
                    seen += 1
                    if seen == n_devices + 1:  # the label plus the device cells
                        cut = idx + 1
                        break
            if cut is not None:
                rest: List[Optional[str]] = [c.strip() or None for c in cells[cut:]]
                while rest and rest[-1] is None:
                    rest.pop()
                # nvidia-smi pads with an empty cell after a value ("0\t\tN/A"); drop such
                # padding (an empty cell right after a value) until the count fits.
                idx = len(rest) - 1
                while len(rest) > len(trailing) and idx > 0:
                    if rest[idx] is None and rest[idx - 1] is not None:
                        del rest[idx]
                    idx -= 1
                if len(rest) <= len(trailing):
                    return rest + [None] * (len(trailing) - len(rest))
    return _align_by_column(extra, trailing)


def _align_by_column(extra: List[_Tok], trailing: List[_Tok]) -> List[Optional[str]]:
    """Each value goes under the header column starting nearest to it, keeping their order.

    On a tie the later column wins: an empty cell expanded from a tab is narrower than its
    header, so the values after it drift left of their own columns, not right.
    """
    out: List[Optional[str]] = [None] * len(trailing)
    first = 0
    for k, tok in enumerate(extra):
        last = len(trailing) - (len(extra) - k)  # leave a column for each value still to place
        best = min(range(first, last + 1), key=lambda c: (abs(tok.col - trailing[c].col), -c))
        out[best] = tok.text
        first = best + 1
    return out


def _parse_after(rest: Sequence[_Line], source: str, what: str, stop_at_command: bool = False,
                 nic_labels: Sequence[str] = ()) -> Tuple[bool, Dict[str, str], Dict[str, str]]:
    """Legend and NIC legend after the matrix; anything else is an error (or, for a file
    holding several outputs, ends the section at the next pasted command). A NIC Legend entry
    must name a NIC column (``nic_labels``) once, with a device name."""
    legend_present = False
    legend: Dict[str, str] = {}
    nic_devices: Dict[str, str] = {}
    block = None
    for line in rest:
        t = line.text.strip()
        if not t or t.startswith("```") or t.startswith("~~~"):
            continue
        if stop_at_command and _is_skippable(line):
            break
        low = t.lower()
        if low == "legend:" or low == "legend":
            legend_present, block = True, "legend"
            continue
        if low == "nic legend:" or low == "nic legend":
            block = "nic"
            continue
        if block == "legend":
            m = _LEGEND_ENTRY_RE.match(line.text)
            if m:
                legend[m.group(1)] = m.group(2).strip()
                continue
        if block == "nic":
            m = _NIC_LEGEND_ENTRY_RE.match(line.text)
            if m:
                label, device = m.group(1), m.group(2)
                if label not in nic_labels:
                    raise _err(source, f"the NIC Legend names {_q(label)}, which is no NIC column of "
                               f"the matrix ({', '.join(nic_labels) or 'it has none'})", line.no)
                if label in nic_devices:
                    raise _err(source, f"{label} is in the NIC Legend twice", line.no)
                if not _NIC_LABEL_RE.match(device):
                    raise _err(source, f"{_q(device)} is no device name (like mlx5_0) for {label}",
                               line.no)
                nic_devices[label] = device
                continue
        hint = ""
        if _is_header(line):
            hint = "; a file holding several nvidia-smi outputs is read by `gputopo scan --from-smi`"
        raise _err(source, f"unexpected text after the {what} matrix: {_show(line.text)}{hint}",
                   line.no)
    return legend_present, legend, nic_devices
