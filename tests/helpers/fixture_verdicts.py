"""What gputopo says of every real output under tests/fixtures/: one row per file.

Each posted output is read the way a user would (`scan --from-smi`, `import <kind>`), in this
process, and the row records the exit code, the verdict, the findings' kinds and severities
(or the problems `scan` / `import nccl-debug` name) and, for a refusal, its one line.

    python tests/helpers/fixture_verdicts.py            # print the table as JSON
    python tests/helpers/fixture_verdicts.py --write    # rewrite tests/fixtures/verdicts.json

tests/e2e/test_fixture_verdicts.py checks the tree against tests/fixtures/verdicts.json, so a
change of any verdict shows up as a failing test and then as a diff of that file in review.
tests/fixtures/verdicts_before.json is the table as the code gave it before issue 46 (commit
ee4abce, plus the row of each fixture added since, as that code read it), and
tests/fixtures/verdict_changes.csv lists every verdict that moved since, with the line of the post
or thread that justifies it: tests/e2e/test_verdict_changes.py checks that verdicts.json is
verdicts_before.json with exactly those changes (findings may change freely; verdict and rc only as
listed).

A row is marked ``"healthy": true`` where the post or thread the fixture comes from says the machine
was healthy (tests/fixtures/README.md says so in its row); the marks are kept in
verdicts_before.json and copied into every table written. Each row of a run folder also says what
its verdict judged (``judged``: series, series judged, facts judged; summary.json's ``judged``), and
an NCCL_DEBUG log's row how many connection lines its rules judged.

Companion topology: a p2pbw or nvbandwidth fixture ``X.txt`` with a sibling ``X.topo.txt`` (the
`nvidia-smi topo -m` the same post gave for the same machine) is imported with
``--topo X.topo.txt``, so the link-class rules, the reference rates and the GPU numbering run on
the posted pair; its row says so ("topo": the companion's name). The companion gets one row of its
own, read as a `topo` fixture is (``scan --from-smi``): it is a posted output that is nowhere else,
and a companion that scan refuses or reads oddly shows there rather than only as the pair's
refusal. The exception is a companion that is a byte-for-byte copy of a file in tests/fixtures/topo/
(the same post already kept there): that file's own row already says what scan makes of it, so the
copy is not run twice.
"""

from __future__ import annotations

import json
import re
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
TABLE = FIXTURES / "verdicts.json"
BEFORE = FIXTURES / "verdicts_before.json"
CHANGES = FIXTURES / "verdict_changes.csv"

#: The command that reads each folder's files (the folder name is the kind of output).
COMMANDS = {
    "topo": ["scan", "--from-smi", "{file}", "--json"],
    "nccl-tests": ["import", "nccl-tests", "{file}", "--out", "{out}", "--no-history"],
    "nvbandwidth": ["import", "nvbandwidth", "{file}", "--out", "{out}", "--no-history"],
    "p2pbw": ["import", "p2pbw", "{file}", "--out", "{out}", "--no-history"],
    "xid": ["import", "kernel-log", "{file}", "--out", "{out}", "--no-history"],
    "nccl-debug": ["import", "nccl-debug", "{file}", "--json"],
    "ibstat": ["import", "ibstat", "{file}", "--out", "{out}", "--no-history"],
    "perftest": ["import", "perftest", "{file}", "--out", "{out}", "--no-history"],
}


#: The folders whose fixtures may have a companion topology, and its suffix.
TOPO_FOLDERS = ("p2pbw", "nvbandwidth")
TOPO_SUFFIX = ".topo.txt"


def is_companion(path: Path) -> bool:
    return path.parent.name in TOPO_FOLDERS and path.name.endswith(TOPO_SUFFIX)


def companion(path: Path) -> Optional[Path]:
    """``X.topo.txt`` beside a p2pbw / nvbandwidth fixture ``X.<ext>``, if there is one."""
    if path.parent.name not in TOPO_FOLDERS or is_companion(path):
        return None
    topo = path.with_name(path.stem + TOPO_SUFFIX)
    return topo if topo.is_file() else None


def _copy_of_a_topo_fixture(path: Path) -> bool:
    data = path.read_bytes()
    return any(t.read_bytes() == data for t in (FIXTURES / "topo").glob("*") if t.is_file())


def fixture_files() -> List[Path]:
    """Every fixture that gets a row: a companion topology only where it is not a copy of a
    tests/fixtures/topo/ file (see the module's docstring)."""
    return sorted(p for p in FIXTURES.rglob("*") if p.is_file() and p.parent.name in COMMANDS
                  and not (is_companion(p) and _copy_of_a_topo_fixture(p)))


def _kinds(items: Any) -> List[str]:
    """"kind:severity" of each finding or problem, sorted, repeats counted ("kind x3"); a
    problem given as text keeps its words without the file and line it names."""
    counts: Dict[str, int] = {}
    for item in items or []:
        if isinstance(item, dict):
            kind = item.get("kind") or item.get("code") or "?"
            severity = item.get("severity")
            key = f"{kind}:{severity}" if severity else str(kind)
        else:
            key = re.sub(r"^\S*?:\d+: ", "", str(item).replace(str(FIXTURES) + "/", ""))
            key = re.sub(r"\d+", "N", key)[:70]
        counts[key] = counts.get(key, 0) + 1
    return sorted(k if n == 1 else f"{k} x{n}" for k, n in counts.items())


def row(path: Path) -> Dict[str, Any]:
    """What gputopo says of one fixture, with its ``healthy`` mark (verdicts_before.json)."""
    result = _row(path)
    if str(path.relative_to(FIXTURES)) in healthy():
        result["healthy"] = True
    return result


def _row(path: Path) -> Dict[str, Any]:
    if str(REPO / "tests") not in sys.path:
        sys.path.insert(0, str(REPO / "tests"))
    from helpers.cli import gputopo_here

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        kind = "topo" if is_companion(path) else path.parent.name
        words = [w.format(file=path, out=out) for w in COMMANDS[kind]]
        topo = companion(path)
        if topo is not None:
            words += ["--topo", str(topo)]
        ran = gputopo_here(*words, cwd=REPO, env={"GPUTOPO_HISTORY": str(Path(tmp) / "h.sqlite")})
        result: Dict[str, Any] = {"command": " ".join(words[:2]), "rc": ran.returncode}
        if topo is not None:
            result["topo"] = topo.name
        if ran.returncode == 2:
            lines = [ln for ln in ran.stderr.splitlines() if ln.strip()]
            result["refusal"] = (lines[-1] if lines else "").replace(str(FIXTURES) + "/", "")[:200]
            return result
        summary = out / "summary.json"
        if summary.is_file():
            data = json.loads(summary.read_text())
            result["verdict"] = data.get("verdict")
            result["findings"] = _kinds(data.get("findings"))
            judged = data.get("judged") or {}
            result["judged"] = {k: judged.get(k) for k in ("series", "series_judged", "facts_judged")}
        elif ran.stdout.lstrip().startswith("{"):
            data = json.loads(ran.stdout)
            verdict: Optional[str] = data.get("verdict")
            if verdict is not None:
                result["verdict"] = verdict
            for key in ("findings", "problems"):
                if key in data:
                    result[key] = _kinds(data[key])
            if verdict is not None and "channel_lines" in data:  # an NCCL_DEBUG log: what its rules judged
                result["judged"] = {"facts_judged": data["channel_lines"]}
        return result


def healthy() -> List[str]:
    """The fixtures whose post or thread says the machine was healthy (marked in verdicts_before.json)."""
    return sorted(k for k, v in json.loads(BEFORE.read_text()).items() if v.get("healthy"))


def table() -> Dict[str, Dict[str, Any]]:
    return {str(p.relative_to(FIXTURES)): row(p) for p in fixture_files()}


def main(argv: List[str]) -> int:
    rows = table()
    text = json.dumps(rows, indent=1, sort_keys=True) + "\n"
    if "--write" in argv:
        TABLE.write_text(text)
        print(f"wrote {TABLE.relative_to(REPO)} ({len(rows)} files)")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
