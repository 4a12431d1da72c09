"""What a bench run measures: presets, the options record, and pure parsers for the CLI's flags.

Parsers take the flag text and the machine, and raise :class:`gputopo.errors.UsageError` with
one line that names the flag and the bad value (exit 2). Nothing here imports torch.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from gputopo.console import clip
from gputopo.errors import UsageError
from gputopo.model import LinkClass, Topology
from gputopo.runfolder.layout import DEFAULT_BASE_DIR

from .fabrics.fabric import FABRIC_NAMES, fabric_named

#: Test groups a pair step can run, in the order they run.
TEST_GROUPS = ("p2p", "dp", "collectives")
#: Fabrics: real GPUs, real CPU processes over gloo, a simulated machine's link model.
FABRICS = FABRIC_NAMES

Pair = Tuple[int, int]

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@dataclass(frozen=True)
class Preset:
    """How much to measure: the sizes swept, latency sizes, warm-up and timed samples."""

    name: str
    sizes_bytes: Tuple[int, ...]
    latency_sizes_bytes: Tuple[int, ...]
    warmup: int
    samples: int
    latency_repeat: int  # small copies per latency sample (time is divided by it)


PRESETS: Dict[str, Preset] = {
    # Small enough that the 28-pair seed-8gpu sim sweep takes seconds on 2 cores (tests use it).
    "quick": Preset("quick", (1 * MiB, 16 * MiB), (4,), warmup=1, samples=5, latency_repeat=20),
    "default": Preset("default", (1 * MiB, 16 * MiB, 64 * MiB, 256 * MiB), (4, 4 * KiB),
                      warmup=2, samples=10, latency_repeat=50),
    "full": Preset("full", (64 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1 * GiB),
                   (4, 256, 4 * KiB), warmup=5, samples=25, latency_repeat=100),
}

#: Default seconds without progress before a step counts as hung.
DEFAULT_TIMEOUT_S = 120.0


@dataclass
class BenchOptions:
    """Everything `gputopo bench` was asked to do, resolved to plain values.

    ``pairs`` are NVML index pairs (i < j); ``self_gpus`` the GPUs measured alone (``--self``).
    ``sizes_bytes`` / ``warmup`` / ``samples`` override the preset when set. ``timeout_s`` is
    how long a step may go without delivering a measurement before it is a ``hang``.
    ``sim_workers`` is the number of worker processes of the sim fabric (None: one per core,
    at most 4); modeled times do not depend on it.
    """

    pairs: List[Pair] = field(default_factory=list)
    self_gpus: List[int] = field(default_factory=list)
    tests: Tuple[str, ...] = TEST_GROUPS
    preset: str = "default"
    sizes_bytes: Optional[Tuple[int, ...]] = None
    latency_sizes_bytes: Optional[Tuple[int, ...]] = None
    warmup: Optional[int] = None
    samples: Optional[int] = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    concurrent: bool = False
    resume_dir: Optional[str] = None
    out_dir: Optional[str] = None
    reports_dir: str = DEFAULT_BASE_DIR
    progress: bool = True
    argv: List[str] = field(default_factory=list)
    sim_workers: Optional[int] = None
    #: --resume --retry-hung: run steps again that recorded a hang (else a hang is a result).
    retry_hung: bool = False

    def __post_init__(self):
        if self.preset not in PRESETS:
            raise UsageError(f"unknown preset {self.preset!r}; known: {', '.join(PRESETS)}")
        self.pairs = [(lo, hi) for lo, hi in (sorted(p) for p in self.pairs)]
        self.tests = tuple(self.tests)
        if self.sizes_bytes is not None:
            self.sizes_bytes = tuple(self.sizes_bytes)
        if self.latency_sizes_bytes is not None:
            self.latency_sizes_bytes = tuple(self.latency_sizes_bytes)

    # --- the effective plan (preset, overridden by explicit values)
    @property
    def effective(self) -> Preset:
        p = PRESETS[self.preset]
        return Preset(
            name=p.name,
            sizes_bytes=tuple(self.sizes_bytes) if self.sizes_bytes else p.sizes_bytes,
            latency_sizes_bytes=(tuple(self.latency_sizes_bytes) if self.latency_sizes_bytes
                                 else p.latency_sizes_bytes),
            warmup=p.warmup if self.warmup is None else int(self.warmup),
            samples=p.samples if self.samples is None else int(self.samples),
            latency_repeat=p.latency_repeat,
        )

    def to_json(self) -> Dict[str, Any]:
        d = asdict(self)
        d["pairs"] = [list(p) for p in self.pairs]
        d["tests"] = list(self.tests)
        eff = self.effective
        d["effective"] = {"sizes_bytes": list(eff.sizes_bytes),
                          "latency_sizes_bytes": list(eff.latency_sizes_bytes),
                          "warmup": eff.warmup, "samples": eff.samples,
                          "latency_repeat": eff.latency_repeat}
        return d

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "BenchOptions":
        d = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        d["pairs"] = [tuple(p) for p in d.get("pairs", [])]
        return cls(**d)


# ----------------------------------------------------------------------------- parsers

_INT = re.compile(r"^\s*(\d+)\s*$")


def _gpu_index(text: str, flag: str, whole: str, n_gpus: int) -> int:
    m = _INT.match(text)
    if not m:
        what = f"{text.strip()!r} is not a GPU index" if text.strip() else "a GPU index is missing"
        raise UsageError(f"{flag} {whole}: {what} (e.g. 0,1 or 0-3)")
    digits = m.group(1).lstrip("0") or "0"
    if len(digits) > 9:  # 100,000 digits: past what int() converts, and no machine's GPU
        raise UsageError(f"{flag} {clip(whole)}: GPU index {clip(digits, 30)} is far too large (this "
                         f"machine has {_gpu_range_text(n_gpus)})")
    k = int(digits)
    if k >= n_gpus:
        raise UsageError(f"{flag} {whole}: GPU {k} does not exist (this machine has "
                         f"{_gpu_range_text(n_gpus)})")
    return k


def _gpu_range_text(n_gpus: int) -> str:
    if n_gpus <= 0:
        return "no GPUs"
    return "GPU 0" if n_gpus == 1 else f"GPUs 0-{n_gpus - 1}"


def all_pairs(gpus: Iterable[int]) -> List[Pair]:
    g = sorted(set(gpus))
    return [(a, b) for k, a in enumerate(g) for b in g[k + 1:]]


def parse_pairs(values: Optional[Sequence[str]], n_gpus: int) -> List[Pair]:
    """``--pairs`` values ("5,6", "all"; the flag may repeat) -> sorted pairs (i < j), deduplicated.

    No value or "all" gives every pair of the machine.
    """
    values = list(values or []) or ["all"]
    if len(values) > 1 and any(str(v).strip().lower() == "all" for v in values):
        others = " ".join(f"--pairs {v}" for v in values if str(v).strip().lower() != "all")
        raise UsageError(f"--pairs all is given with {others or 'itself again'}: 'all' already "
                         "names every pair; give it alone")
    out: List[Pair] = []
    for v in values:
        text = str(v).strip()
        if text.lower() == "all":
            out.extend(all_pairs(range(n_gpus)))
            continue
        parts = text.split(",")
        if len(parts) != 2:
            raise UsageError(f"--pairs {text}: expected two GPU indices like 5,6 (or 'all')")
        i = _gpu_index(parts[0], "--pairs", text, n_gpus)
        j = _gpu_index(parts[1], "--pairs", text, n_gpus)
        if i == j:
            raise UsageError(f"--pairs {text}: a pair needs two different GPUs")
        out.append((min(i, j), max(i, j)))
    seen, uniq = set(), []
    for p in out:
        if p not in seen:
            seen.add(p)
            uniq.append(p)
    return uniq


def parse_gpus(text: Optional[str], n_gpus: int) -> List[int]:
    """``--gpus 0-3,5`` -> [0, 1, 2, 3, 5]. None or "all" gives every GPU."""
    if text is None or str(text).strip().lower() in ("", "all"):
        return list(range(n_gpus))
    out: List[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if "-" in part:
            lo_t, _, hi_t = part.partition("-")
            lo = _gpu_index(lo_t, "--gpus", text, n_gpus)
            hi = _gpu_index(hi_t, "--gpus", text, n_gpus)
            if hi < lo:
                raise UsageError(f"--gpus {text}: range {part} runs backwards")
            out.extend(range(lo, hi + 1))
        else:
            out.append(_gpu_index(part, "--gpus", text, n_gpus))
    return sorted(set(out))


_SIZE = re.compile(r"^(\d+)\s*([kmgt]?)(i?b)?$", re.IGNORECASE)
_MULT = {"": 1, "k": KiB, "m": MiB, "g": GiB, "t": 1 << 40}


def parse_size(text: str, flag: str = "--sizes") -> int:
    """"64M" -> 67108864. K/M/G/T are binary multiples (KiB...); a plain number is bytes."""
    t = str(text).strip()
    m = _SIZE.match(t)
    if not m:
        raise UsageError(f"{flag}: {clip(t)!r} is not a size (use bytes or K/M/G, e.g. 1M,64M)")
    if len(m.group(1).lstrip("0")) > 18:
        raise UsageError(f"{flag}: size {clip(t)!r} is far larger than any GPU memory")
    n = int(m.group(1)) * _MULT[m.group(2).lower()]
    if n <= 0:
        raise UsageError(f"{flag}: size {t!r} must be positive")
    if n % 4:
        raise UsageError(f"{flag}: size {t!r} must be a multiple of 4 bytes (float32 elements)")
    return n


def parse_sizes(text: str, flag: str = "--sizes") -> Tuple[int, ...]:
    """"1M,64M,256M" -> sorted, deduplicated byte counts."""
    parts = [p for p in str(text).split(",")]
    if not str(text).strip() or any(not p.strip() for p in parts):
        raise UsageError(f"{flag} {text!r}: expected sizes separated by commas, e.g. 1M,64M")
    return tuple(sorted({parse_size(p, flag) for p in parts}))


def parse_tests(text: str) -> Tuple[str, ...]:
    """"p2p,dp,collectives" (or "all") -> test groups in run order."""
    t = str(text).strip()
    if t.lower() == "all":
        return TEST_GROUPS
    names = [p.strip().lower() for p in t.split(",")]
    for n in names:
        if n not in TEST_GROUPS:
            raise UsageError(f"--tests: unknown test {n!r}; known: {', '.join(TEST_GROUPS)}")
    return tuple(g for g in TEST_GROUPS if g in names)


def parse_link_class(text: str) -> Tuple[str, Optional[LinkClass]]:
    """"SYS" -> ("SYS", LinkClass); "NV" -> ("NV", None) meaning any NVLink class."""
    t = str(text).strip().upper()
    if t in ("NV", "NV#"):
        return "NV", None
    try:
        lc = LinkClass.parse(t)
    except ValueError:
        raise UsageError(f"--class: unknown link class {text!r}; known: NV# (e.g. NV4), NV, "
                         "PIX, PXB, PHB, NODE, SYS") from None
    if lc.kind == "X":
        raise UsageError("--class: X is a GPU with itself, not a pair")
    return str(lc), lc


def select_class_pairs(topology: Topology, class_text: str) -> List[Pair]:
    """Every pair of ``topology`` whose link class is ``class_text`` ("NV" = any NVLink)."""
    name, lc = parse_link_class(class_text)
    if lc is None:
        pairs = [p.gpus for p in topology.pairs if p.link_class.is_nvlink]
    else:
        pairs = [p.gpus for p in topology.pairs if p.link_class == lc]
    if not pairs:
        here = ", ".join(str(c) for c in topology.classes()) or "none"
        raise UsageError(f"--class {class_text}: no GPU pair of class {name} on this machine "
                         f"(classes here: {here})")
    return sorted(pairs)


def select_pairs(topology: Topology, pairs_values: Optional[Sequence[str]] = None,
                 class_text: Optional[str] = None, gpus_text: Optional[str] = None) -> List[Pair]:
    """Combine ``--pairs``, ``--class`` and ``--gpus`` into the pairs to measure.

    ``--pairs`` (default all) is intersected with the class's pairs and restricted to ``--gpus``.
    A pair named explicitly that ``--gpus`` or ``--class`` excludes is an error, not a silent skip.
    """
    n = len(topology.gpus)
    explicit = pairs_values is not None and bool(pairs_values) and not any(str(v).strip().lower() == "all" for v in pairs_values)
    pairs = parse_pairs(pairs_values, n)
    gpus = set(parse_gpus(gpus_text, n))
    known = {p.gpus for p in topology.pairs}
    for p in pairs:
        if p not in known:
            raise UsageError(f"--pairs {p[0]},{p[1]}: this machine's topology has no such pair")
    if class_text:
        allowed = set(select_class_pairs(topology, class_text))
        if explicit:
            for p in pairs:
                if p not in allowed:
                    raise UsageError(f"--pairs {p[0]},{p[1]} is not of class {class_text} "
                                     f"(it is {topology.link_class(*p)})")
        pairs = [p for p in pairs if p in allowed]
    if gpus_text:
        if explicit:
            for p in pairs:
                if not set(p) <= gpus:
                    raise UsageError(f"--pairs {p[0]},{p[1]} is outside --gpus {gpus_text}")
        pairs = [p for p in pairs if set(p) <= gpus]
    if not pairs:
        raise UsageError("no GPU pair left to measure (check --pairs, --class and --gpus)")
    return pairs


def parse_fabric(text: str) -> str:
    """The name of the fabric ``text`` names (UsageError for an unknown one: fabrics/fabric.py)."""
    return fabric_named(text).name


def format_size(n: int) -> str:
    """Bytes as the CLI writes them: 1M, 64K, 1G, 4 (bytes)."""
    for unit, mult in (("T", 1 << 40), ("G", GiB), ("M", MiB), ("K", KiB)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{unit}"
    return f"{n}B"
