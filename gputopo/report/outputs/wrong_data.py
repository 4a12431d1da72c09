"""How every heatmap shows a pair that returned wrong data: both its cells painted dark and
hatched, "wrong data" written under the value, and a legend entry.

A thin red outline alone left seed-8gpu's corrupting SYS pairs as green "71 %" cells in the
efficiency heatmap: a pair whose copies are wrong must not look like a healthy one in any plot,
whatever its rate, class or numerics verdict. matplotlib is imported inside the functions.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Set, Tuple

#: A pair that returned wrong data: its cell is painted this way over whatever it shows.
WRONG_DATA_COLOR = "#3d0d0d"
WRONG_DATA_EDGE = "#d73027"
WRONG_DATA_HATCH = "xx"
WRONG_DATA_LABEL = "wrong data"


def wrong_data_pairs(pairs) -> List[tuple]:
    """GPUs of the pair rows that returned wrong data: a ``corrupt`` finding, or wrong elements."""
    return [tuple(p.gpus) for p in pairs
            if p.wrong > 0 or any(f.kind == "corrupt" for f in p.findings)]


def wrong_data_cells(pos: Dict[int, int], pairs) -> Set[Tuple[int, int]]:
    """(row, column) of both cells of every pair with wrong data; ``pos``: GPU -> row."""
    cells = {(pos[i], pos[j]) for i, j in wrong_data_pairs(pairs)}
    return cells | {(b, a) for a, b in cells}


def paint_wrong_data(ax, pos: Dict[int, int], pairs, texts: Optional[List[List[Optional[str]]]],
                     annotate: bool, cells: Optional[Set[Tuple[int, int]]] = None) -> int:
    """Paint the cells of pairs with wrong data (``cells``: only these of them); with
    ``annotate``, write WRONG_DATA_LABEL under the cell's value (``texts[row][col]``).
    Returns how many pairs were painted."""
    from matplotlib.patches import Rectangle

    painted = wrong_data_cells(pos, pairs) if cells is None else cells
    bad = {(min(r, c), max(r, c)) for r, c in painted}
    for r, c in painted:
        ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, facecolor=WRONG_DATA_COLOR, edgecolor=WRONG_DATA_EDGE,
                               hatch=WRONG_DATA_HATCH, lw=0, zorder=3, label=WRONG_DATA_LABEL))
        if annotate:
            value = texts[r][c] if texts is not None else None
            ax.text(c, r, f"{value}\n{WRONG_DATA_LABEL}" if value else WRONG_DATA_LABEL, ha="center",
                    va="center", fontsize=6.5, color="white", zorder=5,
                    bbox=dict(facecolor=WRONG_DATA_COLOR, edgecolor="none", pad=0.8))
    return len(bad)


def wrong_data_handle(count: int):
    """The legend entry of the painted cells."""
    from matplotlib.patches import Patch

    return Patch(facecolor=WRONG_DATA_COLOR, edgecolor=WRONG_DATA_EDGE, hatch=WRONG_DATA_HATCH,
                 label=f"{WRONG_DATA_LABEL}: the pair corrupted transfers ({count} pair{'s' if count != 1 else ''})")
