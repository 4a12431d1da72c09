"""Name a list of PCI bridges once per section of a report, not in every cause and remedy.

why/causes.py writes the redirecting bridges into a finding's cause ("ACS redirect on bridge(s) A, B,
...") and into its ACS remedy, and the corrupt, nan and diverged findings of one class share that
cause: the Causes section of seed-8gpu's report listed the same twelve addresses six times. A
:class:`BridgeNamer` rewrites the texts of one section in reading order: the first text that names
a list keeps it; later ones say "the same N bridges as above". :func:`bridge_key` is a text with
its bridge lists blanked, for telling texts apart but for their bridges (why/explain.py, story.py,
why/root_causes.py).
"""

from __future__ import annotations

import re
from typing import List, Optional, Set, overload

#: A PCI bridge address as why/causes.py writes it.
BDF = r"(?:[0-9a-fA-F]{4,8}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
#: A list of bridge addresses in a cause or remedy.
BRIDGES = re.compile(rf"bridge\(s\) ({BDF}(?:, {BDF})*)")


def bridge_key(text: Optional[str]) -> Optional[str]:
    """``text`` with each bridge list blanked: two causes or remedies that differ only in the
    bridges they name have one key (alike findings are explained once, a remedy told once)."""
    return None if text is None else BRIDGES.sub("bridge(s) {}", text)


class BridgeNamer:
    """Rewrites texts of one section, in order, so that each bridge list is spelled out once."""

    def __init__(self) -> None:
        self._named: Set[str] = set()

    @overload
    def __call__(self, text: str) -> str: ...

    @overload
    def __call__(self, text: None) -> None: ...

    def __call__(self, text: Optional[str]) -> Optional[str]:
        if text is None:
            return None

        def once(m: "re.Match") -> str:
            listed = m.group(1)
            if listed in self._named:
                n = len(listed.split(", "))
                return "the same bridge as above" if n == 1 else f"the same {n} bridges as above"
            self._named.add(listed)
            return m.group(0)

        return BRIDGES.sub(once, text)

    def all(self, texts: List[str]) -> List[str]:
        return [self(t) for t in texts]
