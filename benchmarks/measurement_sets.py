"""Are two runs' measurements the same? Compares two ``measurements.jsonl`` (run folders or the
files themselves) as sets keyed by (test, gpus, direction, size_bytes), the wall-clock fields
left out, so a refactor can show that it changed nothing it measures (issue 49: the demo's and
one cpu pair's measurements before and after).

Left out of a record whose ``timing`` is measured (``wall``, ``cuda-events``): ``samples_s``
and ``derived`` (medians and GB/s made from them), and in ``extra`` the keys that count or hold
seconds of that clock (``*_s``, ``hold_too_short_samples``). A ``modeled`` record (the sim) is
compared whole: its times come from the link model, not a clock. Everything else (verification:
``wrong``, ``first_bad_index``, ``error``; the sizes, counts, transport, timing method) must be
equal. A line written before measurements recorded ``figures_of`` is compared with it as the
run folder's reader gives it (from the fabric the line names: bench/fabrics/fabric.py), so a
folder from before the field is the same set as its twin written after it.

    python benchmarks/measurement_sets.py BEFORE AFTER     # exit 0: equal; 1: they differ

Prints the keys only one side has and, per differing key, the fields that differ.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

from gputopo.bench.fabrics.fabric import figures_of_fabric

Key = Tuple[str, Tuple[int, ...], Any, Any]

#: Fields of a measured (not modeled) record that are its clock's readings.
WALL_FIELDS = ("samples_s", "derived")
#: Keys of ``extra`` that hold or count a clock's readings.
WALL_EXTRA = ("hold_too_short_samples",)


def _path(arg: str) -> Path:
    p = Path(arg)
    return p / "measurements.jsonl" if p.is_dir() else p


def comparable(rec: Dict[str, Any]) -> Dict[str, Any]:
    """``rec`` without its wall-clock fields (none for a modeled record)."""
    if rec.get("timing") == "modeled":
        return rec
    out = {k: v for k, v in rec.items() if k not in WALL_FIELDS}
    extra = out.get("extra")
    if isinstance(extra, dict):
        out["extra"] = {k: v for k, v in extra.items() if not k.endswith("_s") and k not in WALL_EXTRA}
    return out


def key_of(rec: Dict[str, Any]) -> Key:
    return (rec["test"], tuple(rec["gpus"]), rec.get("direction"), rec.get("size_bytes"))


def load(arg: str) -> Dict[Key, Dict[str, Any]]:
    """The records of one file by key; a key seen twice is an error (it would not be a set)."""
    out: Dict[Key, Dict[str, Any]] = {}
    with open(_path(arg), encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            rec = json.loads(line)
            if "figures_of" not in rec:  # written before the field: as the reader derives it
                rec["figures_of"] = figures_of_fabric(rec.get("fabric"))
            k = key_of(rec)
            if k in out:
                raise SystemExit(f"{arg}: line {n}: key {k} seen twice")
            out[k] = comparable(rec)
    return out


def differences(before: Dict[Key, Dict[str, Any]], after: Dict[Key, Dict[str, Any]]) -> List[str]:
    lines: List[str] = []
    for k in sorted(set(before) - set(after), key=repr):
        lines.append(f"only before: {k}")
    for k in sorted(set(after) - set(before), key=repr):
        lines.append(f"only after: {k}")
    for k in sorted(set(before) & set(after), key=repr):
        a, b = before[k], after[k]
        if a != b:
            fields = sorted(f for f in set(a) | set(b) if a.get(f) != b.get(f))
            lines.append(f"differs: {k}: {', '.join(fields)}")
    return lines


def main(argv: List[str]) -> int:
    if len(argv) != 2:
        print("usage: python benchmarks/measurement_sets.py BEFORE AFTER", file=sys.stderr)
        return 2
    before, after = load(argv[0]), load(argv[1])
    diff = differences(before, after)
    for line in diff:
        print(line)
    timings = sorted({r.get("timing") for r in before.values()})
    print(f"{'equal' if not diff else 'DIFFERENT'}: {len(before)} vs {len(after)} measurements "
          f"(timing: {', '.join(map(str, timings))}), keyed by (test, gpus, direction, size_bytes)")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
