"""A fault a simulated machine has (the ``[[fault]]`` entries of a description).

``Fault`` checks its own fields (ValueError naming the field); the description builder
(description_faults.py) turns those into file/key/line errors and applies the faults a scan sees
(link_down, downtrained). What the simulated transport does with the others (corrupt, nan, slow,
hang, crash) is gputopo.bench.fabrics.sim's job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from gputopo.model.linkclass import LinkClass

FAULT_KINDS = ("corrupt", "nan", "slow", "link_down", "downtrained", "hang", "crash")
FAULT_PATHS = ("p2p", "all")

#: The pair-key syntax "I,J": a fault's ``where = "pair:I,J"`` and the keys of [pairs] and [p2p].
_PAIR_KEY_RE = re.compile(r"^\s*(\d+)\s*,\s*(\d+)\s*$")


@dataclass
class Fault:
    """A fault the simulated machine has.

    ``where``: ``"pair:5,6"`` | ``"gpu:3"`` | ``"class:SYS"`` (``"class:NV"`` = any NVLink class).
    ``what``: one of FAULT_KINDS. ``path``: ``"p2p"`` (peer DMA only) or ``"all"`` (every path
    that touches the GPU/pair, staged copies and collectives included). ``rate`` (corrupt, nan):
    fraction of elements hit. ``factor`` (slow, downtrained): fraction of the healthy throughput
    that remains (0.25 = four times slower); for downtrained it is computed from ``width``/``gen``
    unless given. Raises ValueError when a field is invalid.
    """

    where: str
    what: str
    path: Optional[str] = None
    rate: Optional[float] = None
    factor: Optional[float] = None
    description: str = ""
    width: Optional[int] = None  # downtrained: the current PCIe width it drops to
    gen: Optional[int] = None  # downtrained: the current PCIe generation it drops to

    def __post_init__(self):
        if self.what not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.what!r}; kinds: {', '.join(FAULT_KINDS)}")
        if self.path is None:
            self.path = "all" if self.what == "downtrained" else "p2p"
        if self.path not in FAULT_PATHS:
            raise ValueError(f"path must be one of {', '.join(FAULT_PATHS)}, got {self.path!r}")
        self._scope, self._target = _parse_where(self.where)
        self._factor_given = self.factor is not None
        if self.rate is None:
            self.rate = 1e-3 if self.what in ("corrupt", "nan") else 0.0
        if not isinstance(self.rate, (int, float)) or isinstance(self.rate, bool) or not 0 <= self.rate <= 1:
            raise ValueError(f"rate must be a fraction of elements in [0, 1], got {self.rate!r}")
        if self.what in ("corrupt", "nan") and self.rate == 0:
            raise ValueError(f"a {self.what} fault needs rate > 0")
        if self.factor is None:
            self.factor = 0.5 if self.what == "slow" else 1.0
        if (not isinstance(self.factor, (int, float)) or isinstance(self.factor, bool)
                or not 0 < self.factor <= 1):
            raise ValueError(f"factor is the fraction of throughput left, in (0, 1] "
                             f"(0.25 = four times slower), got {self.factor!r}")
        if self.what == "downtrained" and self._scope != "gpu":
            raise ValueError("a downtrained fault is a GPU's PCIe link: where = \"gpu:N\"")
        for name in ("width", "gen"):
            v = getattr(self, name)
            if v is not None and self.what != "downtrained":
                raise ValueError(f"{name} applies to downtrained faults only")
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        self.rate = float(self.rate)
        self.factor = float(self.factor)

    @property
    def factor_given(self) -> bool:
        """Whether ``factor`` was given (a downtrained fault's is computed otherwise)."""
        return self._factor_given

    @property
    def scope(self) -> str:
        """"pair" | "gpu" | "class"."""
        return self._scope

    @property
    def gpus(self) -> Tuple[int, ...]:
        """The GPU (gpu scope) or the two GPUs (pair scope); () for a class."""
        return self._target if self._scope != "class" else ()

    @property
    def link_class(self) -> Optional[str]:
        """The class a class-scoped fault hits ("SYS", "NV4", or "NV" for any NVLink class)."""
        return self._target if self._scope == "class" else None

    def hits_path(self, path: str) -> bool:
        """Whether the fault acts on transfers over ``path`` ("p2p", or another path name such as
        "host"; "any" matches every fault)."""
        return path == "any" or self.path == "all" or self.path == path

    def matches_class(self, cls: LinkClass) -> bool:
        target = self.link_class
        if target is None:
            return False
        if target == "NV":
            return cls.is_nvlink
        return str(cls) == target

    def to_json(self) -> Dict[str, Any]:
        d: Dict[str, Any] = {"where": self.where, "what": self.what, "path": self.path}
        if self.what in ("corrupt", "nan"):
            d["rate"] = self.rate
        if self.what == "slow" or (self.what == "downtrained" and self.factor_given):
            d["factor"] = self.factor
        for k in ("width", "gen"):
            if getattr(self, k) is not None:
                d[k] = getattr(self, k)
        if self.description:
            d["description"] = self.description
        return d


def _parse_where(where: Any) -> Tuple[str, Any]:
    if not isinstance(where, str) or ":" not in where:
        raise ValueError(f"where must be \"pair:I,J\", \"gpu:N\" or \"class:CLASS\", got {where!r}")
    scope, _, rest = where.partition(":")
    scope, rest = scope.strip(), rest.strip()
    if scope == "pair":
        m = _PAIR_KEY_RE.match(rest)
        if not m or m.group(1) == m.group(2):
            raise ValueError(f"where = {where!r}: a pair is two different GPU indices, e.g. \"pair:5,6\"")
        i, j = int(m.group(1)), int(m.group(2))
        return "pair", (min(i, j), max(i, j))
    if scope == "gpu":
        if not rest.isdigit():
            raise ValueError(f"where = {where!r}: expected a GPU index, e.g. \"gpu:3\"")
        return "gpu", (int(rest),)
    if scope == "class":
        if rest.upper() == "NV":
            return "class", "NV"
        try:
            cls = LinkClass.parse(rest)
        except ValueError:
            cls = None
        if cls is None or cls.kind == "X":
            raise ValueError(f"where = {where!r}: unknown link class (NV, NV4, PIX, PXB, PHB, NODE, SYS)")
        return "class", str(cls)
    raise ValueError(f"where = {where!r}: expected \"pair:I,J\", \"gpu:N\" or \"class:CLASS\"")

