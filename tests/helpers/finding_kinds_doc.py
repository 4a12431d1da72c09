"""docs/findings.md against the one table of finding kinds (gputopo/model/finding_kinds.py).

The page documents each kind in one table row, under the heading of the kind's family, and its
severity column names exactly the severities of the kind's policy (a row that says "as `nan`"
takes that kind's). Its "Kind properties" part, between the two markers, is generated from the
table:

    python tests/helpers/finding_kinds_doc.py            # print the generated part
    python tests/helpers/finding_kinds_doc.py --write    # rewrite it in docs/findings.md

tests/docs/test_finding_kinds_doc.py checks both, so the page cannot drift from the table.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Dict, List, Sequence

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "tests") not in sys.path:  # run as a script (--write), tests/ is not on the path
    sys.path.insert(0, str(REPO / "tests"))
from helpers.generated_part import write_part  # noqa: E402
PAGE = REPO / "docs" / "findings.md"
BEGIN = ("<!-- kind-properties: generated from gputopo/model/finding_kinds.py by "
         "`python tests/helpers/finding_kinds_doc.py --write`; edit the table, not this list -->")
END = "<!-- /kind-properties -->"

MARK_WORDS = {"all": "every pair of the GPU", "pcie": "its PCIe pairs", "nvlink": "its NVLink pairs",
              "link-evidence": "its NVLink or PCIe pairs, as its evidence names the link",
              "counter": "the pairs of the link whose counter grew"}
SEVERITY_WORDS = ("error", "warning", "info")


def _table():
    sys.path.insert(0, str(REPO))
    from gputopo.model import finding_kinds
    return finding_kinds


def _names(kinds: Sequence) -> str:
    return ", ".join(f"`{k.name}`" for k in kinds) or "none"


def render() -> str:
    """The generated part of docs/findings.md, markers included, from the table as it is now."""
    fk = _table()
    table = fk.KIND_TABLE
    lines = [BEGIN, ""]
    for scope in fk.SCOPES:
        lines.append(f"- **Scope {scope}**: {_names([k for k in table if k.scope == scope])}")
    marks = [f"`{k.name}` ({MARK_WORDS[k.marks_pairs]}{', of each GPU it names' if k.marks_each_gpu else ''})"
             for k in table if k.marks_pairs]
    lines.append("- **Marks pairs** (a GPU's own finding flags the pairs its link carries, warnings and errors "
                 "only: the report's pair rows and `gputopo place`): " + (", ".join(marks) or "none"))
    degr = [f"`{k.name}` (\"{k.degrades}\"{'; every pair of the GPU' if k.degrades_every_pair else ''})"
            for k in table if k.degrades]
    lines.append("- **Degrades a placement** (`gputopo place`: the pairs it marks are `degraded`, correct "
                 "but slower; the words are the reason it gives): " + (", ".join(degr) or "none"))
    brk = [f"`{k.name}`" + (f" (p2p-broken: \"{k.peer_only}\")" if k.peer_only else "")
           for k in table if k.breaks]
    lines.append("- **Breaks a pair** (an error on a pair: never placed; `p2p-broken` where only the peer "
                 "path was shown bad): " + (", ".join(brk) or "none"))
    lines.append("- **Drains a cluster node** (`drain.txt`): " + _names([k for k in table if k.drains]))
    lines.append("- **Data trouble** (the run's own data, told apart from the hardware's; `check` fails "
                 "the run): " + _names([k for k in table if k.data_trouble]))
    lines.append("- **Judged against the history** (only they may come from `history_findings.json`): "
                 + _names([k for k in table if k.history]))
    lines.append("- **Culprits** (the localisation names them; each explains other findings): "
                 + _names([k for k in table if k.culprit]))
    sym = "; ".join(f"{s}: {_names([k for k in table if k.symptom == s])}" for s in fk.SYMPTOM_FAMILIES)
    lines.append("- **Symptoms** the localisation takes together, by family: " + sym)
    lines.append("- **Explains slow pairs** over the GPU's own link (a `gpu-fault`'s chain): "
                 + _names([k for k in table if k.explains_slow]))
    lines.append("- **Breaks PCIe peer DMA** (named in a PCIe `class-fault`'s reasoning): "
                 + _names([k for k in table if k.breaks_peer_dma]))
    lines.append("- **Said one by one** (alike findings never share a row of the findings tables: each is a "
                 "distinct fact): " + _names([k for k in table if not k.grouped]))
    lines += ["", END]
    return "\n".join(lines)


def rows(text: str) -> Dict[str, List[tuple]]:
    """Kind -> [(heading, severity column)] for every table row of the page that starts with it."""
    out: Dict[str, List[tuple]] = {}
    heading = ""
    for line in text.splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        m = re.match(r"\|\s*`([a-z0-9-]+)`\s*\|([^|]*)\|", line)
        if m:
            out.setdefault(m.group(1), []).append((heading, m.group(2)))
    return out


def severities_said(column: str) -> set:
    return {s for s in SEVERITY_WORDS if re.search(rf"\b{s}\b", column)}


def problems(text: str) -> List[str]:
    """What the page says that the table does not (empty: they agree)."""
    fk = _table()
    found = rows(text)
    out = []
    names = [k.name for k in fk.KIND_TABLE]
    for name in sorted(set(found) - set(names)):
        out.append(f"{name}: documented, but no kind of the table")
    for k in fk.KIND_TABLE:
        where = found.get(k.name, [])
        if len(where) != 1:
            out.append(f"{k.name}: {len(where)} rows in docs/findings.md (one wanted)")
            continue
        heading, column = where[0]
        if heading != fk.FAMILIES[k.family]:
            out.append(f"{k.name}: documented under {heading!r}, its family {k.family!r} is "
                       f"{fk.FAMILIES[k.family]!r}")
        like = re.match(r"\s*as `([a-z0-9-]+)`", column)
        if like and len(found.get(like.group(1), [])) == 1:
            column = found[like.group(1)][0][1]
        if severities_said(column) != set(k.severities):
            out.append(f"{k.name}: docs/findings.md's severities {sorted(severities_said(column))}, "
                       f"the table's {sorted(k.severities)}")
    if BEGIN not in text or END not in text:
        out.append("the generated kind properties are missing (markers not found)")
    else:
        part = text[text.index(BEGIN):text.index(END) + len(END)]
        if part != render():
            out.append("the kind properties differ from the table: run python tests/helpers/finding_kinds_doc.py "
                       "--write")
    return out


def write() -> None:
    write_part(PAGE, BEGIN, END, render())


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write()
    else:
        print(render())
