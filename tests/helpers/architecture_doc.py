"""docs/architecture.md against the code: its table of rules against the registry
(gputopo/report/rules.py), and its code map against the package's modules.

The table of rules, between the two markers, is generated from ``RULES``:

    python tests/helpers/architecture_doc.py            # print the table
    python tests/helpers/architecture_doc.py --write    # rewrite it in docs/architecture.md

The code map (the section "Code map") names every module of gputopo/: a module ``pkg/mod.py``
is named where the paragraph of ``pkg/`` (its ``**`pkg/`**`` paragraph) has ``mod`` in
backquotes, alone or in a list such as ``nvml_gpu + nvml_pairs`` or as ``sub/mod``; a module at
the top of the package, where the section names ``mod.py`` or ``mod``. ``*_x`` in backquotes
names every module whose name ends in ``_x``, ``x_*`` every one that starts with ``x_``.
tests/docs/test_architecture_doc.py checks both.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Dict, List, Set

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "tests") not in sys.path:  # run as a script (--write), tests/ is not on the path
    sys.path.insert(0, str(REPO / "tests"))
from helpers.generated_part import write_part  # noqa: E402
PAGE = REPO / "docs" / "architecture.md"
PACKAGE = REPO / "gputopo"
BEGIN = ("<!-- rules: generated from gputopo/report/rules.py by `python tests/helpers/architecture_doc.py "
         "--write`; register a rule there, not here -->")
END = "<!-- /rules -->"
CODE_MAP = "## Code map"
AFTER_CODE_MAP = "## Conventions every command keeps"


def _registry():
    sys.path.insert(0, str(REPO))
    from gputopo.report import rules
    return rules


def render() -> str:
    """The generated table of rules, markers included."""
    rules = _registry()
    lines = [BEGIN, "", "| rule | reads | makes | judgements | what it judges |", "|---|---|---|---|---|"]
    for r in rules.RULES:
        lines.append(f"| `{r.name}` | {', '.join(r.reads)} | {', '.join(f'`{k}`' for k in r.makes)} | "
                     f"{', '.join(r.judgements)} | {r.says} |")
    lines += ["", "The facts: " + "; ".join(f"**{name}**: {what}" for name, what in rules.FACTS.items()) + ".",
              "", END]
    return "\n".join(lines)


def rule_problems(text: str) -> List[str]:
    if BEGIN not in text or END not in text:
        return ["the table of rules is missing (markers not found)"]
    part = text[text.index(BEGIN):text.index(END) + len(END)]
    if part != render():
        return ["the table of rules differs from gputopo/report/rules.py: run python tests/helpers/architecture_doc.py "
                "--write"]
    return []


def _named(paragraph: str) -> Set[str]:
    out: Set[str] = set()
    for quoted in re.findall(r"`([^`]+)`", paragraph):
        for word in re.split(r"[\s,+()]+|->", quoted):
            word = word.strip().strip(":;.")
            if word:
                out.add(word.removesuffix(".py").removesuffix("/"))
    return out


def _is_named(stem: str, sub: str, names: Set[str]) -> bool:
    if stem in names or sub in names:
        return True
    return any((n.startswith("*") and stem.endswith(n[1:])) or (n.endswith("*") and stem.startswith(n[:-1]))
               for n in names if len(n) > 2)


def unnamed_modules(text: str) -> List[str]:
    """The modules of gputopo/ the code map does not name (empty: it names them all)."""
    section = text[text.index(CODE_MAP):text.index(AFTER_CODE_MAP)]
    paragraphs: Dict[str, str] = {}
    for p in re.split(r"\n(?=\*\*`)", section):
        m = re.match(r"\*\*`([a-z_]+)/`\*\*", p)
        if m:
            paragraphs[m.group(1)] = p
    top = _named(section)
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE)
        if rel.name in ("__init__.py", "__main__.py"):
            continue
        if len(rel.parts) == 1:
            ok = _is_named(rel.stem, rel.stem, top)
        else:
            sub = "/".join(rel.parts[1:])[:-3]
            ok = _is_named(rel.stem, sub, _named(paragraphs.get(rel.parts[0], "")))
        if not ok:
            out.append(rel.as_posix())
    return out


def write() -> None:
    write_part(PAGE, BEGIN, END, render())


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write()
    elif sys.argv[1:] == ["--unnamed"]:
        print("\n".join(unnamed_modules(PAGE.read_text(encoding="utf-8"))))
    else:
        print(render())
