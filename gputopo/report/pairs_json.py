"""The JSON text of a topology's pairs, exactly as ``json.dumps(..., indent=2)`` writes them,
in a fraction of its time: `scan --json` of a 1,024-GPU machine writes 523,776 pairs (135 MB),
and the standard library's indenting encoder is pure Python (8 CPU seconds there).

Pairs differ mostly in their two GPU indices; the rest of a pair's text (class, NVLink count,
P2P status) takes a few forms. Each form is written once by json.dumps itself and reused, the
indices written in front of it; a pair whose P2P values are not all plain strings is written
by json.dumps alone. tests/unit/probe/test_scan_pair_cost.py compares the result with json.dumps.
"""

from __future__ import annotations

import json
from typing import Dict, List, Sequence, Tuple

from gputopo.model.topology import Pair, pair_to_json


def pairs_json_text(pairs: Sequence[Pair], level: int = 1, indent: int = 2) -> str:
    """``json.dumps([pair_to_json(p) for p in pairs], indent=indent)`` as it reads nested at
    ``level`` (the list being a value of a dict at level ``level - 1``)."""
    if not pairs:
        return "[]"
    item_pad = " " * (indent * (level + 1))
    shift = "\n" + item_pad
    key_pad = " " * (indent * (level + 2))
    index_pad = " " * (indent * (level + 3))
    tails: Dict[Tuple, str] = {}
    parts: List[str] = []
    for p in pairs:
        i, j = p.gpus
        values = tuple(p.p2p.items())
        if i.__class__ is not int or j.__class__ is not int or any(v.__class__ is not str for _, v in values):
            parts.append(json.dumps(pair_to_json(p), indent=indent).replace("\n", shift))
            continue
        head = f'{{\n{key_pad}"gpus": [\n{index_pad}{i},\n{index_pad}{j}\n{key_pad}]'
        key = (str(p.link_class), p.nvlink_count.__class__, p.nvlink_count, values)
        tail = tails.get(key)
        if tail is None:
            whole = json.dumps(pair_to_json(p), indent=indent).replace("\n", shift)
            if not whole.startswith(head):  # not the form this writer knows: json.dumps's own
                parts.append(whole)
                continue
            tail = tails[key] = whole[len(head):]
        parts.append(head + tail)
    return "[" + shift + ("," + shift).join(parts) + "\n" + " " * (indent * level) + "]"
