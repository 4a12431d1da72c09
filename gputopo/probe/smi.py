"""Read the text `nvidia-smi topo -m` and `nvidia-smi topo -p2p r|w|n|a|p` print.

Why: on a machine gputopo cannot probe itself (no NVML bindings, an old driver, a machine seen
only through a bug report) the nvidia-smi text is what people have; `gputopo scan --from-smi FILE`
and the simulated-machine descriptions read it through this module.

What the text looks like in the wild, and what this parser therefore accepts:

- Real output is tab separated. The diagonal cell is `` X `` (padded), other cells are link
  classes (``NV4``, ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``; old drivers print ``SOC`` for SYS).
- Recent drivers underline the header with ANSI escapes (``ESC[4m ... ESC[0m``) even when piped.
- After the device columns come ``CPU Affinity``, ``NUMA Affinity`` and (recent drivers)
  ``GPU NUMA ID``; recent drivers print the NUMA affinity followed by *two* tabs
  (``0\\t\\tN/A``), so an empty tab-separated cell is padding, not always a missing value.
- NIC rows and columns (``NIC0``...; older drivers name them after the device, ``mlx5_0``). NIC
  rows have no affinity cells, or only empty ones. A ``NIC Legend:`` maps NIC# to device names.
- Text copied from web pages has tabs expanded to spaces (8-column stops), trailing spaces kept
  or trimmed, CRLF line ends, non-breaking spaces; sometimes runs of spaces collapsed to one.
- A GitHub markdown pipe table (``| GPU0 | GPU1 |``, a ``|---|`` separator row) pasted into an
  issue: read as the tab form, each cell trimmed.
- A paste cut inside a NIC row or right after a whole row, every GPU row whole: read, the cut
  said (``SmiMatrix.notes``).
- ``topo -p2p`` rows start with a space (`` GPU0``) and hold P2P statuses (OK, CNS, GNS, TNS, NS,
  DR, U) with an unpadded ``X`` on the diagonal.

Header names contain spaces, values never do: rows are split on any whitespace, and affinity
values are placed under their header column by count, by tab cell, or by text column (in that
order of preference), so an empty cell never shifts the ones after it.

Errors raise :class:`gputopo.errors.InputFileError` naming the source and the 1-based line.

One module reads it, in layers, each using only the ones above it: lines and tokens (decoding,
cleaning, error helpers); the grid both matrices share (header, rows, affinity columns,
legends); `topo -m` (link classes and affinities -> SmiMatrix); `topo -p2p` (statuses,
capability names); several outputs in one file (sections, kind detection); and the Topology
built from them. Writing such text back (`gputopo scan --format smi`) is smi_format's job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from gputopo.errors import InputFileError, UsageError
from gputopo.line_prefixes import strip_ansi
from gputopo.model import (Gpu, HostInfo, LinkClass, Nic, NotAvailable, P2P_CAPS, P2P_STATUS_NAMES, Pair,
                           PcieLink, Topology)
from gputopo.model.cpu_list import cpu_list_problem, numa_node_problem
from gputopo.model.linkclass import MAX_NVLINKS

__all__ = [
    "AFFINITY_COLUMNS", "NOT_IN_TEXT", "P2P_CAP_LETTERS", "P2P_CAP_NAMES", "P2P_STATUSES", "SMI_SOURCE",
    "SmiMatrix", "SmiSection", "decode_smi_bytes", "detect_smi_kind", "normalize_p2p_cap",
    "parse_p2p_matrix", "parse_topo_matrix", "split_smi_sections", "topology_from_smi",
    "topology_from_smi_file_text", "topology_from_smi_matrix",
]


# --------------------------------------------------------------------------------------------------
# Lines and tokens: decoding, cleaning, splitting, and the error helpers.
# Every part below works on these cleaned lines and reports problems the same way.
# --------------------------------------------------------------------------------------------------


#: The statuses `nvidia-smi topo -p2p` prints.
P2P_STATUSES = tuple(P2P_STATUS_NAMES.values())
_GPU_LABEL_RE = re.compile(r"^GPU(\d+)$")
#: Column names run together by a header whose tabs were lost ("GPU0GPU1GPU2GPU3mlx5_0").
_GLUED_RE = re.compile(r"^GPU\d+(?:GPU\d+|NIC\d+|[a-z][a-z0-9]*_\d+)")
_WORDS_RE = re.compile(r"\S+(?: \S+)*")  # words joined by single spaces; 2+ spaces split
_TOPO = "`nvidia-smi topo -m`"
_P2P = "`nvidia-smi topo -p2p`"


@dataclass(frozen=True)
class _Line:
    no: int  # 1-based line number in the input
    text: str  # no CR, no ANSI escapes, NBSP as space


@dataclass(frozen=True)
class _Tok:
    text: str
    col: int  # start column once tabs are expanded to 8-column stops


def decode_smi_bytes(data: bytes) -> str:
    """Text of a saved nvidia-smi output, whatever wrote it.

    PowerShell's ``>`` writes UTF-16 with a byte-order mark; most else writes UTF-8 (with or
    without a BOM). An undecodable byte becomes the text ``\\xff`` rather than an exception, so
    the parser can point at the line that holds it and a message shows the byte, never the byte
    itself (which would garble a terminal) nor a replacement character that hides its value.
    """
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="backslashreplace")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    if len(data) >= 4 and data[1:2] == b"\x00" and data[3:4] == b"\x00":
        return data.decode("utf-16-le", errors="backslashreplace")  # UTF-16 without its BOM
    return data.decode("utf-8", errors="backslashreplace")


def _split_lines(text: str) -> List[_Line]:
    if text.startswith("\ufeff"):
        text = text[1:]
    parts = text.split("\r") if ("\r" in text and "\n" not in text) else text.split("\n")
    out = []
    for no, raw in enumerate(parts, 1):
        # the escapes recent drivers put around the `topo -m` header even when piped
        s = strip_ansi(raw.replace("\r", "")).replace("\xa0", " ").replace("\u200b", "")
        out.append(_Line(no, s))
    return _unpipe(out)


_MD_SEPARATOR_CELL_RE = re.compile(r"^:?-+:?$")


def _md_cells(text: str) -> List[str]:
    """The cells of a markdown table line, trimmed (the outer pipes are optional)."""
    t = text.strip()
    if t.startswith("|"):
        t = t[1:]
    if t.endswith("|"):
        t = t[:-1]
    return [c.strip() for c in t.split("|")]


def _is_md_separator(line: _Line) -> bool:
    """``|---|:---:|`` or ``-- | --``: the line under a markdown table's header."""
    return "|" in line.text and all(_MD_SEPARATOR_CELL_RE.match(c) for c in _md_cells(line.text))


def _unpipe(lines: List[_Line]) -> List[_Line]:
    """A markdown pipe table (a header naming GPU columns, its ``|---|`` separator, then rows; as
    an issue holds a pasted topology) rewritten in nvidia-smi's own tab form, cells trimmed, an
    empty cell kept as an empty tab cell (nvidia-smi's blank cells). The separator becomes a blank
    line, so every line keeps its number; the matrix is then read as any other."""
    out = list(lines)
    for k in range(1, len(out)):
        header = out[k - 1]
        if not _is_md_separator(out[k]) or "|" not in header.text or _is_md_separator(header):
            continue
        names = _md_cells(header.text)
        if not any(_GPU_LABEL_RE.match(n) for n in names):
            continue  # some other table
        while names and not names[0]:
            names.pop(0)
        out[k - 1] = _Line(header.no, "\t" + "\t".join(names))
        out[k] = _Line(out[k].no, "")
        n = k + 1
        while n < len(out) and "|" in out[n].text and not _is_md_separator(out[n]):
            out[n] = _Line(out[n].no, "\t".join(_md_cells(out[n].text)))
            n += 1
    return out


def _tokens(s: str) -> List[_Tok]:
    """Whitespace-separated tokens with their start columns (tabs expanded to 8)."""
    toks: List[_Tok] = []
    col, start = 0, 0
    cur: List[str] = []
    for ch in s:
        if ch.isspace():
            if cur:
                toks.append(_Tok("".join(cur), start))
                cur = []
            col = (col // 8 + 1) * 8 if ch == "\t" else col + 1
        else:
            if not cur:
                start = col
            cur.append(ch)
            col += 1
    if cur:
        toks.append(_Tok("".join(cur), start))
    return toks


def _pieces(s: str) -> List[_Tok]:
    """Cells separated by a tab or by 2+ spaces (header names hold single spaces)."""
    out: List[_Tok] = []
    col = 0
    parts = s.split("\t")
    for k, part in enumerate(parts):
        for m in _WORDS_RE.finditer(part):
            out.append(_Tok(m.group(0), col + m.start()))
        col += len(part)
        if k < len(parts) - 1:
            col = (col // 8 + 1) * 8
    return out


def _is_blank(line: _Line) -> bool:
    return not line.text.strip()


def _is_skippable(line: _Line) -> bool:
    """Lines people paste around the output: the command itself, markdown fences."""
    t = line.text.strip()
    return t.startswith("```") or t.startswith("~~~") or "nvidia-smi" in t


def _is_cell_value(t: str) -> bool:
    u = t.upper()
    if u == "X" or u in P2P_STATUSES:
        return True
    try:
        LinkClass.parse(u)
        return True
    except ValueError:
        return False


def _is_header(line: _Line) -> bool:
    """A line of column names starting with a GPU label (or with labels run together, as a
    header whose tabs were lost prints them: ``GPU0GPU1GPU2...``). A row has a cell value
    second, and a GPU row always holds its X (even a row with a bad cell second)."""
    toks = _tokens(line.text)
    if not toks or not (_GPU_LABEL_RE.match(toks[0].text) or _GLUED_RE.match(toks[0].text)):
        return False
    if any(t.text.upper() == "X" for t in toks[1:]):
        return False
    return len(toks) == 1 or not _is_cell_value(toks[1].text)


_GPU_WORD_RE = re.compile(r"(?<![A-Za-z0-9_])GPU\d+(?![A-Za-z0-9_])")


def _header_problem(line: _Line) -> Optional[Tuple[str, str]]:
    """For a line that names GPU columns (GPU0, GPU1, ...) but is not read as a matrix header:
    (the names, what was not understood). None for a line naming no GPU."""
    found = _GPU_WORD_RE.findall(line.text)
    if not found:
        return None
    names = ", ".join(found[:8]) + (", ..." if len(found) > 8 else "")
    toks = _tokens(line.text)
    if "|" in line.text:
        why = ("its cells are split by '|' as a markdown table's are, but no markdown separator row "
               "(| --- | --- |) follows it, so it is not read as a table")
    elif not _GPU_LABEL_RE.match(toks[0].text):
        why = f"it has {_q(toks[0].text)} before {found[0]}, where a header starts with its first column"
    elif any(t.text.upper() == "X" for t in toks[1:]):
        why = "it holds X (a row's diagonal cell): it is a row, and no header row comes before it"
    elif len(toks) > 1 and _is_cell_value(toks[1].text):
        why = (f"its second word {_q(toks[1].text)} is a cell value, as in a row: no header row "
               "comes before it")
    else:
        why = "it is not read as a header row"
    return names, why


def _is_legend_like(line: _Line) -> bool:
    return "=" in line.text or line.text.strip().endswith(":")


def _gpu_index(label: str) -> Optional[int]:
    m = _GPU_LABEL_RE.match(label)
    return int(m.group(1)) if m else None


def _err(source: str, message: str, line: Optional[int] = None) -> InputFileError:
    """The error for ``source``; a control character the text held is shown escaped, not sent
    to the terminal."""
    return InputFileError(source, _printable(message), line=line)


def _printable(s: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)


def _q(s: str) -> str:
    """``s`` quoted for a message: unprintable characters escaped, backslashes kept single (so an
    undecodable byte, decoded as the text ``\\xff``, reads as such)."""
    return "'" + _printable(s) + "'"


def _show(s: str, limit: int = 60) -> str:
    s = s.strip()
    return _q(s if len(s) <= limit else s[: limit - 3] + "...")


# --------------------------------------------------------------------------------------------------
# The grid of a matrix: its header, its rows, the affinity columns after the device columns,
# and the legends after the matrix.
# `topo -m` and `topo -p2p` print the same grid (a header of GPU/NIC labels, one row per label);
# it is read once here, so the two readers below only judge the cells.
# --------------------------------------------------------------------------------------------------


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
    #: A NIC row the text ends inside (a paste cut there): (label, line number).
    cut: Optional[Tuple[str, int]] = None
    #: What was read around a damage (names run together, a row's cells joined), said to the user.
    notes: List[str] = field(default_factory=list)


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


def _row_labels_after(lines: Sequence[_Line], k: int) -> List[str]:
    """The labels of the matrix rows that follow the header at ``lines[k]`` (blank lines between
    rows skipped): a row is a label followed by a cell value or the diagonal X."""
    labels: List[str] = []
    for line in lines[k + 1:]:
        if _is_blank(line):
            continue
        toks = _tokens(line.text)
        if len(toks) < 2 or not (_is_cell_value(toks[1].text) or any(t.text.upper() == "X" for t in toks[1:])):
            break
        labels.append(toks[0].text)
    return labels


def _unglue(devices: List[str], labels: Sequence[str]) -> Optional[List[str]]:
    """The device columns of a header whose tabs were lost (``GPU0GPU1GPU2GPU3mlx5_0``), told by
    the rows' own labels: the header must spell exactly the row labels in their order, each run
    of glued names breaking only between labels. None when the rows do not tell the columns."""
    if not labels or len(set(labels)) != len(labels) or "".join(devices) != "".join(labels):
        return None
    label_ends, n = set(), 0
    for name in labels:
        n += len(name)
        label_ends.add(n)
    n = 0
    for name in devices:
        n += len(name)
        if n not in label_ends:
            return None
    return list(labels)


_DEVICE_NAME_RE = re.compile(r"GPU\d+|NIC\d+")


def _split_by_numbering(devices: List[str]) -> Optional[List[str]]:
    """The device columns of a header whose tabs were lost between two names (``NIC8NIC9``) whose
    rows are not in the text, told by the names themselves: each glued name splits into GPU#/NIC# names only, and the
    columns then number GPU0, GPU1, ... and NIC0, NIC1, ... in order, without a gap or a repeat
    (how nvidia-smi prints them). None when that does not hold (nothing is guessed)."""
    out: List[str] = []
    for d in devices:
        parts = _DEVICE_NAME_RE.findall(d)
        if "".join(parts) != d:
            return None
        out += parts
    for prefix in ("GPU", "NIC"):
        numbers = [int(x[len(prefix):]) for x in out if x.startswith(prefix)]
        if numbers != list(range(len(numbers))):
            return None
    return out if len(out) > len(devices) else None


def _header_columns(lines: Sequence[_Line], k: int, source: Optional[str] = None,
                    notes: Optional[List[str]] = None) -> Tuple[List[str], List[_Tok]]:
    """(device columns, trailing columns) of the header at ``lines[k]``. Names run together by
    lost tabs are told apart by the rows' labels, or else by the names' own numbering
    (_split_by_numbering, said in ``notes``); where they cannot be, with ``source`` the header is
    refused (InputFileError), without it the glued names are kept."""
    devices, trailing = _split_header(_header_names(lines[k]))
    glued = [d for d in devices if _GLUED_RE.match(d) or len(_DEVICE_NAME_RE.findall(d)) > 1]
    if not glued:
        return devices, trailing
    labels = _row_labels_after(lines, k)
    unglued = _unglue(devices, labels)
    if unglued is not None:
        return unglued, trailing
    # by the names' numbering only where the rows cannot tell: no glued name has a row in the text
    # (the NIC rows were cut off); glued names the rows could spell and do not are refused below
    numbered = None if any(p in labels for g in glued for p in _DEVICE_NAME_RE.findall(g)) \
        else _split_by_numbering(devices)
    if numbered is not None:
        if notes is not None:
            notes.append(f"line {lines[k].no}: the header's column names {', '.join(glued)} ran together (its tabs "
                         "were lost); read as " + ", ".join(
                             " and ".join(_DEVICE_NAME_RE.findall(g)) for g in glued)
                         + " (the columns' numbering runs on without a gap)")
        return numbered, trailing
    if source is not None:
        rows = ", ".join(labels[:12]) + (", ..." if len(labels) > 12 else "") if labels else "none"
        raise _err(source, f"the header's column names run together ({_show(glued[0], 40)}: its tabs "
                   f"were lost) and the rows' labels ({rows}) do not spell them in order, so the "
                   "columns cannot be told", lines[k].no)
    return devices, trailing


def _parse_grid(lines: Sequence[_Line], source: str, what: str) -> _Grid:
    k = 0
    while k < len(lines) and (_is_blank(lines[k]) or _is_skippable(lines[k])):
        k += 1
    if k == len(lines):
        raise _err(source, f"no text: expected the output of {what}")
    header = lines[k]
    if not _is_header(header):
        problem = _header_problem(header)
        if problem is not None:
            raise _err(source, f"expected the header row of {what}: {_show(header.text)} names "
                       f"{problem[0]} but {problem[1]}", header.no)
        raise _err(source, f"expected the header row of {what} (column names GPU0, GPU1, ...), "
                   f"found {_show(header.text)}", header.no)
    grid_notes: List[str] = []
    devices, trailing = _header_columns(lines, k, source, grid_notes)
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
        try:
            rows[label] = _parse_row(line, label, devices, trailing, source, header.no, grid_notes)
        except InputFileError:
            if _gpu_index(label) is not None or any(not _is_blank(x) for x in lines[k + 1:]):
                raise
            # a NIC row short of cells on the text's last line: the paste was cut there
            return _Grid(header.no, devices, trailing, rows, order, last_row_no, [], cut=(label, line.no),
                         notes=grid_notes)
        order.append(label)
        last_row_no = line.no
        k += 1
    return _Grid(header.no, devices, trailing, rows, order, last_row_no, list(lines[k:]), notes=grid_notes)


def _row_label(line: _Line, devices: Sequence[str]) -> Optional[str]:
    toks = _tokens(line.text)
    if toks and toks[0].text in devices:
        return toks[0].text
    return None


_JOINED_CELLS_RE = re.compile(r"^(?:X|SYS|SOC|NODE|PHB|PXB|PIX|NV\d+){2,}$", re.IGNORECASE)


def _joined_gpu_row(line: _Line, label: str, devices: List[str], toks: List[_Tok], link_cells: int,
                    trailing: List[_Tok], notes: Optional[List[str]]) -> Optional[_Row]:
    """A GPU row with fewer link cells than columns because two of its NIC cells ran together
    (``NODENODE``: a tab lost): when its GPU block (the cells under the GPU columns, which come
    first) is whole, those are read and its NIC cells are not (said in ``notes``). None when the
    damage is anywhere else: the row is refused as before."""
    n_gpu = sum(1 for d in devices if _gpu_index(d) is not None)
    if (notes is None or _gpu_index(label) is None or link_cells < n_gpu or n_gpu == len(devices)
            or any(_gpu_index(d) is None for d in devices[:n_gpu])):
        return None
    block = [t.text for t in toks[:n_gpu]]
    if not all(c.upper() == "X" or _is_class(c) for c in block):
        return None
    joined = [t.text for t in toks[n_gpu:link_cells] if _JOINED_CELLS_RE.match(t.text)]
    if not joined:
        return None
    notes.append(f"line {line.no}: row {label} has {link_cells} link cells for {len(devices)} columns ("
                 f"{', '.join(_q(j) for j in joined)}: cells run together, a tab lost): its GPU cells are read, its "
                 f"NIC cells ({', '.join(devices[n_gpu:])}) are not")
    cells = block + [""] * (len(devices) - n_gpu)
    return _Row(line.no, label, cells, _align_trailing(line, toks[link_cells:], link_cells, trailing))


def _is_class(cell: str) -> bool:
    try:
        LinkClass.parse(cell)
        return True
    except ValueError:
        return False


def _parse_row(line: _Line, label: str, devices: List[str], trailing: List[_Tok], source: str,
               header_no: int, notes: Optional[List[str]] = None) -> _Row:
    toks = _tokens(line.text)[1:]
    n = len(devices)
    link_cells = next((k for k, t in enumerate(toks) if _AFFINITY_VALUE_RE.match(t.text)), len(toks))
    if min(len(toks), link_cells) < n:
        joined = _joined_gpu_row(line, label, devices, toks, link_cells, trailing, notes)
        if joined is not None:
            return joined
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


def _carries_data(line: _Line) -> bool:
    """A line after a matrix that holds cells (a matrix row: a label, then a link class, a P2P
    status or X) or starts another matrix (a header): such a line cannot be passed over."""
    if _is_header(line):
        return True
    toks = _tokens(line.text)
    return (len(toks) >= 2 and "=" not in line.text and _NIC_LABEL_RE.match(toks[0].text) is not None
            and _is_cell_value(toks[1].text))


def _parse_after(rest: Sequence[_Line], source: str, what: str, stop_at_command: bool = False,
                 nic_labels: Sequence[str] = (), notes: Optional[List[str]] = None
                 ) -> Tuple[bool, Dict[str, str], Dict[str, str]]:
    """Legend and NIC legend after the matrix. A line that holds no cells never blocks the
    matrix: inside a legend it is a legend line the terminal wrapped (``NUMA nodes (e.g.,
    QPI/UPI)`` on a line of its own), elsewhere it is passed over and named in ``notes``. A
    line holding cells (a row, another header) is an error, or, for a file holding several
    outputs, the section ends at the next pasted command. A NIC Legend entry must name a NIC
    column (``nic_labels``) once, with a device name."""
    legend_present = False
    legend: Dict[str, str] = {}
    nic_devices: Dict[str, str] = {}
    block = None
    wrapping = False  # the line before was a legend entry (or its wrapped rest)
    for line in rest:
        t = line.text.strip()
        if not t or t.startswith("```") or t.startswith("~~~"):
            wrapping = False
            continue
        if stop_at_command and _is_skippable(line):
            break
        low = t.lower()
        if low == "legend:" or low == "legend":
            legend_present, block, wrapping = True, "legend", False
            continue
        if low == "nic legend:" or low == "nic legend":
            block, wrapping = "nic", False
            continue
        if block == "legend":
            m = _LEGEND_ENTRY_RE.match(line.text)
            if m:
                legend[m.group(1)] = m.group(2).strip()
                wrapping = True
                continue
        m = _NIC_LEGEND_ENTRY_RE.match(line.text)
        if m and (block == "nic" or m.group(1) in nic_labels):
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
        if _carries_data(line):
            hint = ""
            if _is_header(line):
                hint = "; a file holding several nvidia-smi outputs is read by `gputopo scan --from-smi`"
            raise _err(source, f"unexpected text after the {what} matrix: {_show(line.text)}{hint}",
                       line.no)
        if wrapping:  # the rest of a legend entry the terminal wrapped onto a line of its own
            continue
        if notes is not None:
            notes.append(f"line {line.no} after the {what} matrix was not read (no cells): "
                         f"{_show(line.text)}")
    return legend_present, legend, nic_devices


# --------------------------------------------------------------------------------------------------
# `nvidia-smi topo -m`: the link-class matrix and its affinity columns, as a SmiMatrix.
# The link classes between GPUs (and NICs) and each GPU's CPU/NUMA affinity are what a
# topology read from text is built from (topology_from_smi).
# --------------------------------------------------------------------------------------------------


#: What each affinity column may hold besides N/A: a CPU list, a list of NUMA nodes, one node.
_AFFINITY_FORMS = {"CPU Affinity": (re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$"), "a CPU list like 0-31,64-95"),
                   "NUMA Affinity": (re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$"), "a NUMA node like 0"),
                   "GPU NUMA ID": (re.compile(r"^-?\d+$"), "a NUMA node like 2")}
_NA_TEXTS = {"", "N/A", "NA", "N.A.", "-"}


@dataclass
class SmiMatrix:
    """What one `nvidia-smi topo -m` matrix says.

    GPUs are keyed by the number in their label (``GPU3`` -> 3), which is the NVML index.
    ``classes`` holds each GPU pair once, ``(i, j)`` with i < j. Affinity maps hold every GPU;
    ``None`` where the cell says N/A, is empty, or the column is absent (``columns`` tells which
    affinity columns the header has). ``numa_affinity``/``gpu_numa_id`` are ints, or the text
    as printed when it is not one number.
    """

    gpu_count: int
    gpu_labels: List[str]
    classes: Dict[Tuple[int, int], LinkClass]
    cpu_affinity: Dict[int, Optional[str]]
    numa_affinity: Dict[int, Union[int, str, None]]
    gpu_numa_id: Dict[int, Union[int, str, None]]
    nics: List[str] = field(default_factory=list)
    nic_classes: Dict[Tuple[int, str], LinkClass] = field(default_factory=dict)
    #: Between NICs (the NIC rows), each pair once in header order: (NIC0, NIC1) -> class.
    nic_pair_classes: Dict[Tuple[str, str], LinkClass] = field(default_factory=dict)
    legend_present: bool = False
    #: The header's columns after the device columns, as printed ("CPU Affinity", ...).
    columns: List[str] = field(default_factory=list)
    #: NIC label -> device name, from the "NIC Legend:" block ({"NIC0": "mlx5_0"}).
    nic_devices: Dict[str, str] = field(default_factory=dict)
    #: Header columns this parser does not know: name -> {gpu: value or None}.
    extra_columns: Dict[str, Dict[int, Optional[str]]] = field(default_factory=dict)
    #: 1-based line numbers, for callers that report problems found later.
    header_line: int = 0
    gpu_lines: Dict[int, int] = field(default_factory=dict)
    #: What was passed over while reading, said to the user (a line after the matrix without cells).
    notes: List[str] = field(default_factory=list)

    @property
    def gpu_indices(self) -> List[int]:
        return sorted(self.cpu_affinity)

    def link_class(self, i: int, j: int) -> LinkClass:
        return self.classes[(min(i, j), max(i, j))]


def _cell_class(cell: str, row: str, col: str, source: str, no: int) -> LinkClass:
    try:
        return LinkClass.parse(cell)
    except ValueError:
        pass
    if re.fullmatch(r"NV\d+", cell.strip(), re.IGNORECASE):
        raise _err(source, f"{_q(cell)} in row {row}, column {col} is no NVLink count a GPU has "
                   f"(NV1 .. NV{MAX_NVLINKS})", no)
    if cell.upper() in P2P_STATUSES:
        raise _err(source, f"{_q(cell)} (row {row}, column {col}) is a P2P status: this looks like "
                   f"{_P2P} output, not {_TOPO}", no)
    raise _err(source, f"unknown link class {_q(cell)} in row {row}, column {col} (expected X, "
               f"NV#, PIX, PXB, PHB, NODE, SYS or SOC)", no)


def _matrix_classes(grid: _Grid, source: str) -> Dict[Tuple[str, str], LinkClass]:
    """Validated off-diagonal cells of every row: (row label, column label) -> class."""
    out: Dict[Tuple[str, str], LinkClass] = {}
    for label in grid.row_order:
        row = grid.rows[label]
        for col, cell in zip(grid.devices, row.cells):
            if cell == "":  # not read: a row whose cells ran together (_joined_gpu_row says so)
                continue
            if col == label:
                if cell.upper() != "X":
                    raise _err(source, f"the diagonal cell of {label} is {_q(cell)}, expected X",
                               row.no)
                continue
            if cell.upper() == "X":
                raise _err(source, f"X off the diagonal: row {label}, column {col}", row.no)
            out[(label, col)] = _cell_class(cell, label, col, source, row.no)
    for (a, b), cls in out.items():
        other = out.get((b, a))
        if other is not None and other != cls:
            ra, rb = grid.rows[a], grid.rows[b]
            later, earlier = (ra, rb) if ra.no > rb.no else (rb, ra)
            said_later = out[(later.label, earlier.label)]
            said_earlier = out[(earlier.label, later.label)]
            raise _err(source, f"the matrix is not symmetric: row {later.label} says "
                       f"{later.label}-{earlier.label} is {said_later}, row {earlier.label} "
                       f"(line {earlier.no}) says {said_earlier}", later.no)
    return out


def _na(v: Optional[str]) -> Optional[str]:
    return None if v is None or v.strip().upper() in _NA_TEXTS else v.strip()


def _int_or_text(v: Optional[str]) -> Union[int, str, None]:
    v = _na(v)
    if v is None:
        return None
    if re.fullmatch(r"-?\d+", v):
        n = int(v)
        return n if n >= 0 else None  # NVML says -1 for "no NUMA node"
    return v


def _parse_topo_lines(lines: Sequence[_Line], source: str, stop_at_command: bool = False
                      ) -> SmiMatrix:
    grid = _parse_grid(lines, source, _TOPO)
    gpu_labels = [d for d in grid.devices if _gpu_index(d) is not None]
    nics = [d for d in grid.devices if _gpu_index(d) is None]
    if not gpu_labels:
        raise _err(source, "the header names no GPU columns", grid.header_no)
    for n in nics:
        if not _NIC_LABEL_RE.match(n) or n.upper().startswith("GPU"):
            raise _err(source, f"column {_q(n)} is neither a GPU (GPU0, GPU1, ...) nor a NIC (NIC0, "
                       "mlx5_0, ...)", grid.header_no)
    missing = [g for g in gpu_labels + nics if g not in grid.rows]
    cut_notes: List[str] = []
    # A paste cut inside a NIC row, or right after a whole row with nothing after it (no legend):
    # every GPU row is there, only the NIC rows from the cut on are not.
    cut_where: Optional[str] = None
    if missing and not any(g in missing for g in gpu_labels) and missing == grid.devices[-len(missing):]:
        if grid.cut is not None:
            cut_where, no = f"inside row {grid.cut[0]}", grid.cut[1]
        elif grid.row_order and all(_is_blank(x) for x in grid.rest):
            cut_where, no = f"after row {grid.row_order[-1]}", grid.last_row_no
    if cut_where is not None:
        if len(missing) == 1:
            left_out = (f"row {missing[0]} is not in it: its classes are all in the rows above (the matrix is "
                        "symmetric); the legend is not in it")
        else:
            left_out = (f"rows {', '.join(missing)} are not in it: the classes between those NICs are not read "
                        "(each GPU's class to every NIC is, from the GPU rows), nor the legend")
        cut_notes.append(f"line {no}: the text ends {cut_where}, so {left_out}")
        missing = []
    if missing:
        expected_at = grid.last_row_no + 1 if grid.last_row_no < lines[-1].no else grid.last_row_no
        if all(g in missing for g in gpu_labels):
            msg = f"no GPU rows follow the header (line {grid.header_no})"
        else:
            msg = (f"no row for {', '.join(missing)} (the header at line {grid.header_no} names "
                   f"{', '.join(grid.devices)}): the matrix is not square")
        raise _err(source, msg, expected_at)
    classes_by_label = _matrix_classes(grid, source)
    notes: List[str] = grid.notes + cut_notes
    legend_present, legend, nic_devices = _parse_after(grid.rest, source, _TOPO, stop_at_command, nics,
                                                       notes)
    p2p_legend = any(k in P2P_STATUSES for k in legend)
    if p2p_legend and not any(k in ("PIX", "SYS", "SOC", "NV#") for k in legend):
        raise _err(source, f"this is {_P2P} output (its legend names P2P statuses), not {_TOPO}",
                   grid.header_no)

    idx: Dict[str, int] = {}
    for g in gpu_labels:
        index = _gpu_index(g)
        if index is not None:  # gpu_labels are the labels with a GPU index
            idx[g] = index
    classes: Dict[Tuple[int, int], LinkClass] = {}
    for a in gpu_labels:
        for b in gpu_labels:
            if idx[a] < idx[b]:
                classes[(idx[a], idx[b])] = classes_by_label[(a, b)]
    # a GPU row whose NIC cells were not read (_joined_gpu_row) has its classes from the NIC rows, if any
    nic_classes = {(idx[g], n): classes_by_label.get((g, n)) or classes_by_label[(n, g)] for g in gpu_labels
                   for n in nics if (g, n) in classes_by_label or (n, g) in classes_by_label}
    for (gi, n), cls in sorted(nic_classes.items(), key=lambda kv: kv[0][0]):
        if cls.is_nvlink:
            raise _err(source, f"{cls} between GPU{gi} and NIC {n}: a NIC's path to a GPU is a PCIe "
                       "class (PIX, PXB, PHB, NODE, SYS)", grid.rows[f"GPU{gi}"].no)
    nic_pairs = {(a, b): classes_by_label.get((a, b)) or classes_by_label[(b, a)]
                 for k, a in enumerate(nics) for b in nics[k + 1:]
                 if (a, b) in classes_by_label or (b, a) in classes_by_label}

    names = [t.text for t in grid.trailing]
    cpu: Dict[int, Optional[str]] = {}
    numa: Dict[int, Union[int, str, None]] = {}
    gnuma: Dict[int, Union[int, str, None]] = {}
    extra: Dict[str, Dict[int, Optional[str]]] = {n: {} for n in names if n not in AFFINITY_COLUMNS}
    for g in gpu_labels:
        i = idx[g]
        values = dict(zip(names, grid.rows[g].trailing))
        for name, (form, expected) in _AFFINITY_FORMS.items():
            v = _na(values.get(name))
            if v is not None and not form.match(v):
                raise _err(source, f"{name} of {g} is {_q(v)}: expected {expected}, or N/A",
                           grid.rows[g].no)
        cpu[i] = _na(values.get("CPU Affinity"))
        numa[i] = _int_or_text(values.get("NUMA Affinity"))
        gnuma[i] = _int_or_text(values.get("GPU NUMA ID"))
        for n in extra:
            extra[n][i] = _na(values.get(n))
    return SmiMatrix(
        gpu_count=len(gpu_labels), gpu_labels=gpu_labels, classes=classes, cpu_affinity=cpu,
        numa_affinity=numa, gpu_numa_id=gnuma, nics=nics, nic_classes=nic_classes,
        nic_pair_classes=nic_pairs,
        legend_present=legend_present, columns=names, nic_devices=nic_devices,
        extra_columns=extra, header_line=grid.header_no,
        gpu_lines={idx[g]: grid.rows[g].no for g in gpu_labels}, notes=notes,
    )


def parse_topo_matrix(text: str, source: str = "<text>") -> SmiMatrix:
    """Parse the output of `nvidia-smi topo -m` (any driver age; see the module docstring).

    Raises InputFileError(source, message, line=N) when the text is empty, is not such a
    matrix, is not square over the GPUs, has a diagonal cell other than X, is not symmetric,
    names an unknown link class, or has text after the matrix other than its legends.
    """
    lines = _split_lines(text)
    if not any(not _is_blank(ln) for ln in lines):
        raise _err(source, f"no text: expected the output of {_TOPO}")
    return _parse_topo_lines(lines, source)


# --------------------------------------------------------------------------------------------------
# `nvidia-smi topo -p2p r|w|n|a|p`: the P2P status matrix, and the capability names.
# A pair's P2P read/write/nvlink/atomics/pci status comes from these matrices, one per
# capability; NVML may answer differently by direction, so pairs are kept ordered.
# --------------------------------------------------------------------------------------------------


#: `nvidia-smi topo -p2p` letter -> gputopo capability name (P2P_CAPS).
P2P_CAP_LETTERS = {"r": "read", "w": "write", "n": "nvlink", "a": "atomics", "p": "pci"}
#: Every spelling of a capability -> its P2P_CAPS name (the name itself, its letter, "pcie").
P2P_CAP_NAMES = {**{c: c for c in P2P_CAPS}, **P2P_CAP_LETTERS, "pcie": "pci"}


@dataclass
class _P2pMatrix:
    header_line: int
    gpus: List[int]
    status: Dict[Tuple[int, int], str]  # ordered pairs (row GPU, column GPU)
    legend_present: bool


def _parse_p2p_lines(lines: Sequence[_Line], source: str, stop_at_command: bool = False
                     ) -> _P2pMatrix:
    grid = _parse_grid(lines, source, _P2P)
    if grid.trailing:
        raise _err(source, f"the header has {_q(grid.trailing[0].text)}: this looks like {_TOPO} "
                   f"output, not {_P2P}", grid.header_no)
    gpu_of: Dict[str, int] = {}  # every column (and so every row: rows are columns) is a GPU
    for d in grid.devices:
        index = _gpu_index(d)
        if index is None:
            raise _err(source, f"column {d} is not a GPU ({_P2P} has GPU columns only)",
                       grid.header_no)
        gpu_of[d] = index
    missing = [g for g in grid.devices if g not in grid.rows]
    if missing:
        expected_at = grid.last_row_no + 1 if grid.last_row_no < lines[-1].no else grid.last_row_no
        raise _err(source, f"no row for {', '.join(missing)} (the header at line "
                   f"{grid.header_no} names {', '.join(grid.devices)}): the matrix is not square",
                   expected_at)
    status: Dict[Tuple[int, int], str] = {}
    for label in grid.row_order:
        row = grid.rows[label]
        i = gpu_of[label]
        for col, cell in zip(grid.devices, row.cells):
            u = cell.upper()
            if col == label:
                if u != "X":
                    raise _err(source, f"the diagonal cell of {label} is {_q(cell)}, expected X",
                               row.no)
                continue
            if u not in P2P_STATUSES:
                hint = ""
                try:
                    LinkClass.parse(u)
                    hint = f": a link class, this looks like {_TOPO} output"
                except ValueError:
                    pass
                raise _err(source, f"unknown P2P status {_q(cell)} in row {label}, column {col} "
                           f"(expected one of {', '.join(P2P_STATUSES)}){hint}", row.no)
            status[(i, gpu_of[col])] = u
    legend_present, _, _ = _parse_after(grid.rest, source, _P2P, stop_at_command)
    return _P2pMatrix(grid.header_no, sorted(gpu_of[d] for d in grid.devices), status,
                      legend_present)


def parse_p2p_matrix(text: str, source: str = "<text>") -> Dict[Tuple[int, int], str]:
    """Parse `nvidia-smi topo -p2p r|w|n|a|p` output into {(i, j): "OK"/"NS"/...}.

    Keys are *ordered* pairs i != j as printed (row i, column j), since NVML's answer may
    differ by direction. Raises InputFileError like :func:`parse_topo_matrix`.
    """
    lines = _split_lines(text)
    if not any(not _is_blank(ln) for ln in lines):
        raise _err(source, f"no text: expected the output of {_P2P}")
    return _parse_p2p_lines(lines, source).status


def normalize_p2p_cap(cap: str) -> str:
    """'r'/'read', 'w'/'write', 'n'/'nvlink', 'a'/'atomics', 'p'/'pci'/'pcie' -> P2P_CAPS name."""
    key = str(cap).strip().lower()
    if key not in P2P_CAP_NAMES:
        raise UsageError(f"unknown P2P capability {cap!r}; use one of {', '.join(P2P_CAPS)} "
                         f"(or r, w, n, a, p)")
    return P2P_CAP_NAMES[key]


# --------------------------------------------------------------------------------------------------
# Several outputs in one file: find the matrices and tell their kind.
# People paste `topo -m` and `topo -p2p X` outputs into one file, each under the command
# they ran; `gputopo scan --from-smi FILE` reads such a file section by section.
# --------------------------------------------------------------------------------------------------


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
    devices, trailing = _header_columns(lines, k)
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
            if m and m.group(1).lower() in P2P_CAP_NAMES:
                cap = P2P_CAP_NAMES[m.group(1).lower()]
    return cap


def _sections(lines: List[_Line], source: str) -> List[SmiSection]:
    headers = [k for k, ln in enumerate(lines) if _is_header(ln)]
    if not headers:
        for ln in lines:
            problem = _header_problem(ln) if not _is_skippable(ln) else None
            if problem is not None:
                raise _err(source, f"no nvidia-smi topo matrix found: line {ln.no} names {problem[0]} "
                           f"but is no header row of {_TOPO}: {problem[1]}", ln.no)
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


# --------------------------------------------------------------------------------------------------
# The Topology built from the matrices.
# Fields the text does not carry are NotAvailable(NOT_IN_TEXT).
# --------------------------------------------------------------------------------------------------


#: Reason given for every field the nvidia-smi text does not carry.
NOT_IN_TEXT = "not in nvidia-smi topo text"
#: Topology.source of a topology read from nvidia-smi text.
SMI_SOURCE = "nvidia-smi text"


def topology_from_smi_matrix(matrix: SmiMatrix,
                             p2p: Optional[Mapping[str, Mapping[Tuple[int, int], str]]] = None,
                             source: str = "<text>", p2p_skipped: Sequence[str] = ()) -> Topology:
    """Build a Topology from a parsed matrix and parsed `-p2p` matrices keyed by capability.

    A pair's P2P status is the row-i/column-j cell (i < j); if the two directions disagree the
    one that is not OK is kept, since P2P is only usable when both ways work. ``p2p_skipped``
    says why `-p2p` matrices that were given could not be used; it is added to the reason of
    every capability left without a status.
    """
    p2p = {(c if c == UNKNOWN_CAP else normalize_p2p_cap(c)): m for c, m in (p2p or {}).items()}
    gpus_idx = matrix.gpu_indices
    for cap, statuses in p2p.items():
        if cap == UNKNOWN_CAP:
            continue  # checked against the topo -m GPUs where it was read
        named = sorted({i for pair in statuses for i in pair})
        if (named or len(gpus_idx) > 1) and named != gpus_idx:
            raise _err(source, f"the `nvidia-smi topo -p2p` matrix for {cap} names GPUs "
                       f"{named} but the {_TOPO} matrix names {gpus_idx}")

    gpus = []
    for i in gpus_idx:
        if "CPU Affinity" in matrix.columns:
            cpu = matrix.cpu_affinity[i] if matrix.cpu_affinity[i] is not None \
                else NotAvailable("N/A in nvidia-smi topo text")
            if isinstance(cpu, str) and re.fullmatch(r"[\d,\- ]+", cpu) and cpu_list_problem(cpu):
                raise _err(source, f"GPU{i}'s CPU Affinity: {cpu_list_problem(cpu)}")
        else:
            cpu = NotAvailable(NOT_IN_TEXT)
        numa_v = matrix.numa_affinity[i]
        numa: Union[int, NotAvailable]
        if "NUMA Affinity" not in matrix.columns:
            numa = NotAvailable(NOT_IN_TEXT)
        elif numa_v is None:
            numa = NotAvailable("N/A in nvidia-smi topo text")
        elif isinstance(numa_v, int):
            if numa_node_problem(numa_v):
                raise _err(source, f"GPU{i}'s NUMA Affinity: {numa_node_problem(numa_v)}")
            numa = numa_v
        else:
            numa = NotAvailable(f"NUMA Affinity {numa_v!r} in nvidia-smi topo text is not one node")
        na = NotAvailable(NOT_IN_TEXT)
        gpus.append(Gpu(
            nvml_index=i, name=na, uuid=na, pci_bus_id=na, cuda_index=na, numa_node=numa,
            gpu_memory_numa_node=_gpu_numa_id(matrix, i), cpu_affinity=cpu, mig_mode=na,
            pcie=PcieLink(gen_current=na, gen_max=na, width_current=na, width_max=na,
                          replay_counter=na),
            nvlinks=[],
        ))

    pairs = []
    for (i, j), cls in sorted(matrix.classes.items()):
        caps: Dict[str, object] = {}
        for cap in P2P_CAPS:
            if cap not in p2p:
                caps[cap] = NotAvailable(f"no `nvidia-smi topo -p2p {cap[0]}` text given"
                                         + "".join(f"; {why}" for why in p2p_skipped))
                continue
            ways = [s for s in (p2p[cap].get((i, j)), p2p[cap].get((j, i))) if s is not None]
            if not ways:
                caps[cap] = NotAvailable(f"pair {i},{j} not in the -p2p {cap[0]} text")
            else:
                caps[cap] = next((s for s in ways if s != "OK"), ways[0])
        if UNKNOWN_CAP in p2p:  # a -p2p matrix pasted without its command line: which capability is not known
            ways = [s for s in (p2p[UNKNOWN_CAP].get((i, j)), p2p[UNKNOWN_CAP].get((j, i))) if s is not None]
            if ways:
                caps[UNKNOWN_CAP] = next((s for s in ways if s != "OK"), ways[0])
        pairs.append(Pair(gpus=(i, j), link_class=cls, nvlink_count=cls.nvlinks, p2p=caps))

    host = HostInfo(hostname=NotAvailable(NOT_IN_TEXT), kernel=NotAvailable(NOT_IN_TEXT),
                    iommu_mode=NotAvailable(NOT_IN_TEXT), acs=NotAvailable(NOT_IN_TEXT),
                    driver_version=NotAvailable(NOT_IN_TEXT), nvml_version=NotAvailable(NOT_IN_TEXT),
                    cuda_driver_version=NotAvailable(NOT_IN_TEXT))
    return Topology(gpus=gpus, pairs=pairs, host=host, source=SMI_SOURCE, simulated=False,
                    machine="", nics=_nics(matrix))


def _gpu_numa_id(matrix: SmiMatrix, i: int):
    """GPU NUMA ID column -> Gpu.gpu_memory_numa_node ("N/A" there: the driver said N/A)."""
    if "GPU NUMA ID" not in matrix.columns:
        return NotAvailable(NOT_IN_TEXT)
    v = matrix.gpu_numa_id[i]
    return v if isinstance(v, int) else NotAvailable("N/A in nvidia-smi topo text")


def _nics(matrix: SmiMatrix) -> List[Nic]:
    """The NIC columns: label, device name (NIC Legend, or the label old drivers print), classes."""
    out = []
    for label in matrix.nics:
        device: Union[str, NotAvailable, None] = matrix.nic_devices.get(label)
        if device is None:
            device = (NotAvailable("no NIC Legend entry in nvidia-smi topo text")
                      if re.fullmatch(r"NIC\d+", label) else label)
        others = {(b if a == label else a): c for (a, b), c in matrix.nic_pair_classes.items()
                  if label in (a, b)}
        out.append(Nic(label=label, device=device, pci_bus_id=NotAvailable(NOT_IN_TEXT),
                       numa_node=NotAvailable(NOT_IN_TEXT),
                       gpu_classes={g: c for (g, n), c in matrix.nic_classes.items() if n == label},
                       nic_classes={n: others[n] for n in matrix.nics if n in others}))
    return out


def topology_from_smi(topo_text: str, p2p_texts: Optional[Mapping[str, str]] = None,
                      source: str = "<nvidia-smi text>") -> Topology:
    """Topology from `nvidia-smi topo -m` text and, optionally, `topo -p2p X` texts keyed by
    capability ("read", "write", "nvlink", "atomics", "pci"; or r/w/n/a/p).

    Fields the text does not carry are NotAvailable("not in nvidia-smi topo text");
    ``numa_node`` comes from NUMA Affinity, ``cpu_affinity`` from CPU Affinity, each pair's
    ``nvlink_count`` from NV#. Topology.source is "nvidia-smi text".
    """
    matrix = parse_topo_matrix(topo_text, source)
    p2p = {normalize_p2p_cap(c): parse_p2p_matrix(t, source) for c, t in (p2p_texts or {}).items()}
    return topology_from_smi_matrix(matrix, p2p, source)


def topology_from_smi_file_text(text: str, source: str = "<nvidia-smi text>",
                                default_p2p_cap: Optional[str] = None,
                                notes: Optional[List[str]] = None) -> Topology:
    """Topology from a file holding `nvidia-smi topo -m` output, optionally followed (or
    preceded) by `nvidia-smi topo -p2p X` outputs, as people paste them.

    Each `-p2p` matrix's capability is read from the command line pasted above it
    (`$ nvidia-smi topo -p2p r`); where there is none, ``default_p2p_cap`` is used, and without
    it that matrix is skipped: the skip is appended to ``notes`` (for the caller to say) and is
    the reason given for the P2P statuses left unknown. Lines after a matrix without cells are
    passed over and named in ``notes`` too. Exactly one `topo -m` matrix is required; line
    numbers in errors and notes are those of the file.
    """
    said: List[str] = notes if notes is not None else []
    lines = _split_lines(text)
    sections = _sections(lines, source)
    topo_secs = [s for s in sections if s.kind == "topo"]
    if not topo_secs:
        raise _err(source, f"no {_TOPO} matrix in the file (found only {_P2P} output at line "
                   f"{sections[0].header_line})", sections[0].header_line)
    if len(topo_secs) > 1:
        raise _err(source, f"a second {_TOPO} matrix (the first is at line "
                   f"{topo_secs[0].header_line})", topo_secs[1].header_line)
    # Everything but the last section ends at the next command, so text after a legend that
    # is neither a command nor a legend is an error in every section.
    matrix = _parse_topo_lines(topo_secs[0]._lines, source, stop_at_command=True)
    said.extend(matrix.notes)
    default = normalize_p2p_cap(default_p2p_cap) if default_p2p_cap else None
    p2p: Dict[str, Dict[Tuple[int, int], str]] = {}
    where: Dict[str, int] = {}
    skipped: List[str] = []
    for sec in sections:
        if sec.kind != "p2p":
            continue
        cap = sec.cap or default
        if cap is None:
            unknown = _unknown_cap_matrix(sec, source, matrix.gpu_indices)
            if unknown is not None and UNKNOWN_CAP not in p2p:
                p2p[UNKNOWN_CAP], where[UNKNOWN_CAP] = unknown, sec.header_line
                statuses = ", ".join(f"GPU{i}-GPU{j} {st}" for (i, j), st in sorted(unknown.items()) if i < j)
                skipped.append(f"a {_P2P} matrix (line {sec.header_line}) was read, but which capability it shows "
                               f"(r, w, n, a or p) is unknown (no command line above it): kept as 'unknown'")
                said.append(f"line {sec.header_line}: a {_P2P} matrix without its command line was read, its "
                            f"capability unknown (r, w, n, a or p): {statuses or 'no pair'}; kept as each pair's P2P "
                            "status 'unknown', judged by no rule; put the command you ran (e.g. `nvidia-smi topo -p2p "
                            "r`) on the line above it to have it judged")
                continue
            skipped.append(f"a {_P2P} matrix (line {sec.header_line}) was given but not read: "
                           "which capability it shows (r, w, n, a or p) cannot be told")
            said.append(_skipped_p2p_note(sec, source))
            continue
        if cap in p2p:
            raise _err(source, f"a second {_P2P} matrix for {cap} (the first is at line "
                       f"{where[cap]})", sec.header_line)
        parsed = _parse_p2p_lines(sec._lines, source, stop_at_command=True)
        if parsed.gpus != matrix.gpu_indices:
            raise _err(source, f"this {_P2P} matrix names GPUs {parsed.gpus} but the {_TOPO} "
                       f"matrix (line {matrix.header_line}) names {matrix.gpu_indices}",
                       sec.header_line)
        p2p[cap], where[cap] = parsed.status, sec.header_line
    return topology_from_smi_matrix(matrix, p2p, source, skipped)


#: The key of a pair's P2P statuses read from a `-p2p` matrix whose capability is not known.
UNKNOWN_CAP = "unknown"


def _unknown_cap_matrix(sec: SmiSection, source: str, gpus: List[int]) -> Optional[Dict[Tuple[int, int], str]]:
    """The statuses of a `-p2p` matrix pasted without its command line, when it reads whole and
    names the `topo -m` matrix's GPUs; None otherwise (then it is skipped, and said so)."""
    try:
        parsed = _parse_p2p_lines(sec._lines, source, stop_at_command=True)
    except InputFileError:
        return None
    return dict(parsed.status) if parsed.gpus == gpus and parsed.status else None


def _skipped_p2p_note(sec: SmiSection, source: str) -> str:
    """What to say of a `-p2p` matrix whose capability cannot be told (what it holds, and how
    to have it read)."""
    try:
        statuses = sorted(set(_parse_p2p_lines(sec._lines, source, stop_at_command=True).status.values()))
        held = f"its cells say {', '.join(statuses)}" if statuses else "it has one GPU"
    except InputFileError as e:
        prefix = f"{e.path}:{e.line}: " if e.line is not None else f"{e.path}: "
        why = str(e)[len(prefix):] if str(e).startswith(prefix) else str(e)
        held = f"it could not be read either, line {e.line}: {why}" if e.line else f"it could not be read either: {why}"
    return (f"line {sec.header_line}: a {_P2P} matrix was skipped ({held}): which capability it shows "
            "cannot be told; put the command you ran (e.g. `nvidia-smi topo -p2p r`) on the line "
            "above it to have it read")
