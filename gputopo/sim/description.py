"""Simulated machine descriptions: which machine a name means, and reading, validating and
building a description (TOML) into the machine a scan, the fake NVML and the sim fabric see.

The entry points: ``load_description`` (a built-in name, ``synthetic-<N>gpu`` or a path),
``parse_description`` (TOML text), ``build_description`` (parsed TOML), ``generate_description``
(a synthetic machine of any size) and the built-in catalog (``builtin_names``,
``builtin_summaries``). They build a :class:`Description`, a gputopo.sim.records.MachineDesc that
can rebuild itself with other faults; the records (GpuDesc, NvLinkDesc, HostDesc, Fault,
LinkModel) are in records.py.

A description says what a scan of the machine would see (GPUs, NVLinks, PCIe, pair classes, P2P
status, host IOMMU/ACS facts), how fast each path is when healthy (the link model), and which
faults the simulated transport applies to the bytes it moves. The format is documented with a
complete example in ``docs/sim-format.md``; in short::

    name = "my-box"                      # optional, defaults to the file name
    summary = "one line"
    matrix = \"\"\"<nvidia-smi topo -m text>\"\"\"   # or [pairs], or nvswitch = true
    [defaults]   name = "NVIDIA A100-SXM4-80GB", pcie_gen = 4, pcie_width = 16, ...
    [[gpu]]      bus_id = "0000:07:00.0", numa_node = 0, cpu_affinity = "0-31", overrides...
    [host]       iommu = "translated", acs_redirect = true, driver_version = "535.154.05", ...
    [link_model] NODE = { gbps = 24.0, latency_us = 5.0 }, ...
    [p2p]        SYS = { read = "CNS" }, "0,5" = "NS", ...
    [[fault]]    where = "class:SYS", what = "corrupt", path = "p2p", rate = 0.001

Hardware states a scan sees are applied while building: a GPU's ``nvlinks_down`` and
``link_down`` faults make NVLinks inactive (so the pair's class drops to its PCIe class),
``downtrained`` faults lower the GPU's current PCIe width/generation. Everything else a fault
does (corrupt, nan, slow, the throughput loss of a downtrained link, hang, crash) is the
transport's job: ``link_model`` stays the healthy model of the pair's class.

Errors in a file raise :class:`gputopo.errors.InputFileError` naming the file, the key
(``gpu[3].numa_node``, ``fault[0].what``) and, where it can be found, the line; a name that is
no machine raises :class:`gputopo.errors.UsageError`.

The module reads top down: which machine a name means (built-ins, synthetic machines, files
with ``extends``), then the builder (``build_description``), then what it calls: error
reporting, the pair classes, the GPUs, the NVLinks, the checks that span entries, the faults,
and the host, link model and P2P tables. GPU health and NVLink fabric keys are read by health.py
and fabric.py, NICs by nics.py, the ``[cluster]`` table by cluster_description.py.
"""

from __future__ import annotations

import functools
import math
import os
import re
import sys
import uuid as uuid_mod
from typing import Any, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from gputopo.errors import InputFileError, UsageError
from gputopo.model.bandwidth import pcie_gbps
from gputopo.model.bus_id import PciAddress
from gputopo.model.cpu_list import cpu_list_problem, numa_node_problem
from gputopo.model.linkclass import PCIE_KINDS, LinkClass
from gputopo.model.topology import NVLINK_ERROR_COUNTERS, P2P_CAPS

from .fabric import FABRIC_KEYS, gpu_fabric_desc
from .gpu_models import GENERIC, MODEL_KEYS, GpuModel, find_model
from .health import HEALTH_KEYS, parse_health
from .processes import PROCESS_KEYS, parse_processes
from .nics import parse_nics
from .records import (CPU_VENDORS, DEFAULT_EFFICIENCY, DEFAULT_NVSWITCHES, IOMMU_MODES, P2P_STATUSES,
                      PAIR_KEY_RE, Fault, GpuDesc, HostDesc, MachineDesc, NvLinkDesc, pcie_theory_gbps,
                      shared_link_class)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


# ============================================================================ which machine a name means
# --sim NAME-or-path: a built-in machine (machines/*.toml), a synthetic one (synthetic-<N>gpu)
# or a description file.


#: Generated machines of any size, e.g. "synthetic-64gpu" (generate_description), N in SYNTHETIC_GPUS.
SYNTHETIC_RE = re.compile(r"^synthetic-([0-9]+)gpu$")
#: The sizes a synthetic machine may have (a 1024-GPU scan already takes about 25 s of CPU).
SYNTHETIC_GPUS = range(1, 1025)
SYNTHETIC_HELP = (f"synthetic-<N>gpu (N GPUs, N = {SYNTHETIC_GPUS.start}..{SYNTHETIC_GPUS.stop - 1}: "
                  "NV4 pairs, NODE inside a socket, SYS across)")


def load_description(name_or_path: str) -> Description:
    """A built-in machine by name, or a description file by path.

    Raises UsageError listing the built-in names when ``name_or_path`` is neither, and
    InputFileError naming the file, key and line when the file is invalid. Built-ins are parsed
    once per process; every call returns a fresh Description.
    """
    text_arg = str(name_or_path)
    synthetic = SYNTHETIC_RE.match(text_arg)
    if synthetic and not os.path.exists(text_arg):
        n = int(synthetic.group(1))
        if n not in SYNTHETIC_GPUS:
            raise UsageError(f"--sim {text_arg}: a synthetic machine has {SYNTHETIC_GPUS.start} to "
                             f"{SYNTHETIC_GPUS.stop - 1} GPUs, not {n}")
        return generate_description(n)
    names = builtin_names()
    is_builtin = text_arg in names and os.sep not in text_arg and "/" not in text_arg
    looks_like_path = (text_arg.endswith(".toml") or os.sep in text_arg or "/" in text_arg
                       or os.path.exists(text_arg))
    if not is_builtin and not looks_like_path:
        raise UsageError(f"unknown simulated machine {text_arg!r}; built-in machines: "
                         f"{', '.join(names)}, {SYNTHETIC_HELP} (or give the path of a .toml description)")
    if is_builtin:
        return load_builtin(text_arg)
    path = text_arg
    if not os.path.lexists(path):
        raise InputFileError(path, "no such file (give a built-in machine name or the path of a "
                             f"description; built-ins: {', '.join(builtin_names())})")
    from gputopo.inputs import MAX_DESCRIPTION_BYTES, read_user_text

    return parse_description(read_user_text(path, "description", MAX_DESCRIPTION_BYTES), path)


# ============================================================================ built-in machines
# gputopo/sim/machines/*.toml: names, one-line summaries, and each one read and parsed once
# per process.


MACHINES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "machines")


@functools.lru_cache(maxsize=1)
def _names() -> Tuple[str, ...]:
    try:
        files = os.listdir(MACHINES_DIR)
    except OSError:
        return ()
    return tuple(sorted(f[:-5] for f in files if f.endswith(".toml")))


def builtin_names() -> List[str]:
    """Names of the built-in machines, sorted (each is ``machines/<name>.toml``)."""
    return list(_names())


def builtin_path(name: str) -> str:
    """The file of a built-in machine (KeyError when there is none by that name)."""
    if name not in _names():
        raise KeyError(name)
    return os.path.join(MACHINES_DIR, f"{name}.toml")


@functools.lru_cache(maxsize=1)
def _summaries() -> Tuple[Tuple[str, str], ...]:
    out = []
    for name in builtin_names():
        path = builtin_path(name)
        with open(path, encoding="utf-8") as f:
            data = toml_loads(f.read(), path)
        out.append((name, str(data.get("summary", ""))))
    return tuple(out)


def builtin_summaries() -> List[Tuple[str, str]]:
    """(name, one-line summary) of every built-in machine, sorted by name."""
    return list(_summaries())


_BUILTIN_TEXT_CACHE: Dict[str, Tuple[str, Dict[str, Any]]] = {}


def load_builtin(name: str) -> Description:
    """The built-in machine ``name`` (KeyError when there is none); a fresh Description per call."""
    cached = _BUILTIN_TEXT_CACHE.get(name)
    if cached is None:
        path = builtin_path(name)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        cached = (text, resolve_extends(toml_loads(text, path), path, text))
        _BUILTIN_TEXT_CACHE[name] = cached
    text, data = cached
    return build_description(data, f"builtin:{name}", text=text, source="builtin", default_name=name)


# ============================================================================ description files
# TOML text to a machine, with ``extends`` (a base description, built-in or file, with this
# file's tables on top) resolved first. The one TOML reader of the sim package (descriptions,
# the built-in catalog, clusters) turns tomllib's syntax errors into InputFileError naming the line.


def parse_description(text: str, path: str = "<text>") -> Description:
    """Parse description TOML text; ``path`` names it in errors (and resolves ``matrix_file``)."""
    data = resolve_extends(toml_loads(text, path), path, text)
    stem = os.path.splitext(os.path.basename(path))[0] if path and not path.startswith("<") else "sim"
    return build_description(data, path, text=text, source="file", default_name=stem)


def _merge(base: Dict[str, Any], over: Dict[str, Any]) -> Dict[str, Any]:
    """Tables merge key by key; any other value (arrays of tables included) replaces the base's."""
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def resolve_extends(data: Dict[str, Any], path: str, text: str, depth: int = 0) -> Dict[str, Any]:
    """``extends = "NAME-or-path"``: the base description's data with this file's on top."""
    if "extends" not in data:
        return data
    ctx = DescContext(path, text)
    ref = data["extends"]
    if not isinstance(ref, str):
        raise ctx.error(f"expected a built-in name or a path, got {ref!r}", "extends")
    if depth > 8:
        raise ctx.error("descriptions extend each other in a loop", "extends")
    if ref in builtin_names() and not ref.endswith(".toml"):
        base_path = builtin_path(ref)
    else:
        base_path = ref if os.path.isabs(ref) or path.startswith(("<", "builtin:")) else \
            os.path.join(os.path.dirname(os.path.abspath(path)), ref)
    from gputopo.inputs import MAX_DESCRIPTION_BYTES, read_user_text

    try:
        base_text = read_user_text(base_path, "description", MAX_DESCRIPTION_BYTES)
    except InputFileError as e:
        why = str(e).split(": ", 1)[-1]
        raise ctx.error(f"cannot read {ref!r}: not a built-in machine ({', '.join(builtin_names())}) "
                        f"nor a readable file ({why})", "extends") from None
    base = resolve_extends(toml_loads(base_text, base_path), base_path, base_text, depth + 1)
    base = {k: v for k, v in base.items() if k not in ("name", "summary")}
    over = {k: v for k, v in data.items() if k != "extends"}
    return _merge(base, over)


_TOML_LINE_RE = re.compile(r"\(at line (\d+), column (\d+)\)")


def toml_loads(text: str, path: str) -> Dict[str, Any]:
    """Parsed TOML ``text``; InputFileError naming ``path`` and the line on a syntax error."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = _TOML_LINE_RE.search(msg)
        line = int(m.group(1)) if m else None
        msg = _TOML_LINE_RE.sub("", msg).strip()
        raise InputFileError(path, f"TOML syntax error: {msg}", line=line) from None


# ============================================================================ synthetic machines
# For scan-speed benchmarks (8, 64, 256 GPUs...). The layout repeats the seed machine's
# pattern: GPUs in NVLink pairs (2k, 2k+1) joined by NV4 and sharing a PCIe switch (PIX under the
# NVLink), each pair on its own host bridge, four (up to 8 GPUs) or eight GPUs per socket: NODE
# inside a socket, SYS across. Each socket gets its own PCI domain so bus numbers never run out.
# Built straight from a dict (no TOML, no matrix text), so a 256-GPU machine takes well under a
# second.


def generate_description(n_gpus: int, *, gpu_name: str = "NVIDIA RTX A6000", gpus_per_socket: int = 0,
                         iommu: str = "off") -> Description:
    """A synthetic ``n_gpus``-GPU machine (the layout above). ``gpus_per_socket`` 0 picks
    4 for up to 8 GPUs, else 8. Raises ValueError for fewer than 1 GPU."""
    if not isinstance(n_gpus, int) or n_gpus < 1:
        raise ValueError(f"n_gpus must be a positive integer, got {n_gpus!r}")
    per_socket = gpus_per_socket or (4 if n_gpus <= 8 else 8)
    if per_socket < 1 or per_socket > 8:
        raise ValueError("gpus_per_socket must be 1..8")
    gpus: List[Dict[str, Any]] = []
    for k in range(n_gpus):
        socket, slot = divmod(k, per_socket)
        bus = 0x20 + 0x30 * (slot // 2) + 3 + (slot % 2)
        gpus.append({
            "bus_id": f"{socket:04x}:{bus:02x}:00.0",
            "numa_node": socket,
            "cpu_affinity": f"{socket * 16}-{socket * 16 + 15}",
        })
    nv_pairs = [f"{k},{k + 1}" for k in range(0, n_gpus - 1, 2)
                if k // per_socket == (k + 1) // per_socket]
    data: Dict[str, Any] = {
        "name": f"synthetic-{n_gpus}gpu",
        "summary": f"synthetic {n_gpus} GPUs: NV4 pairs, NODE inside {per_socket}-GPU sockets, SYS across",
        "defaults": {"name": gpu_name, "pcie_gen": 4, "pcie_width": 16, "nvlink_version": 3},
        "gpu": gpus,
        "pairs": {"default": "numa", "NV4": nv_pairs} if nv_pairs else {"default": "numa"},
        "host": {"hostname": f"synthetic-{n_gpus}gpu", "iommu": iommu},
    }
    if nv_pairs:
        data["pcie_pairs"] = {"PIX": nv_pairs}
    return build_description(data, f"generated:synthetic-{n_gpus}gpu", source="generated",
                             default_name=data["name"])


# ============================================================================ the machine
# Validate every table of parsed TOML and make the Description: pair classes, GPUs, faults,
# NVLinks (taken down by faults), downtrained PCIe links, host, NICs, link model, P2P rules.


_TOP_KEYS = {"extends", "name", "summary", "matrix", "matrix_file", "pairs", "pcie_pairs", "nvswitch",
             "nvswitches", "nvswitch_bus_ids", "gpu_count", "defaults", "gpu", "host",
             "link_model", "p2p", "fault", "nic", "clock",
             "cluster"}  # a cluster's [cluster] table: read by cluster_description.py


class Description(MachineDesc):
    """A simulated machine as built from its description (records.MachineDesc), which can
    rebuild itself with other faults (it keeps the data it was built from)."""

    def with_faults(self, faults: Iterable[Any]) -> "Description":
        """A copy with these faults (Fault objects or dicts as in a file) instead of its own,
        rebuilt so NVML-visible states (link_down, downtrained) follow them."""
        if self._raw is None:
            raise ValueError("this description has no source data to rebuild from")
        raw = dict(self._raw)
        raw["fault"] = [f.to_json() if isinstance(f, Fault) else dict(f) for f in faults]
        return build_description(raw, self.path, text="", source=self.source)


def build_description(data: Dict[str, Any], path: str, text: str = "", source: str = "file",
                      default_name: str = "sim") -> Description:
    """Validate parsed TOML ``data`` and build the Description (InputFileError on bad data).

    ``text`` (the file's text) only serves to find line numbers for errors.
    """
    ctx = DescContext(path, text)
    check_keys(ctx, data, _TOP_KEYS)
    name = check_label(ctx, data.get("name", default_name), "name")
    summary = check_label(ctx, data.get("summary", ""), "summary")

    defaults = check_keys(ctx, data.get("defaults", {}), DEFAULT_KEYS, "defaults")
    host_raw = check_keys(ctx, data.get("host", {}), HOST_KEYS, "host")

    matrix = read_matrix(ctx, data, path)  # the pair matrix, given as text or as a file
    nvswitch = data.get("nvswitch", False)
    if not isinstance(nvswitch, bool):
        raise ctx.error(f"expected true or false, got {nvswitch!r}", "nvswitch")
    if matrix is not None and "pairs" in data:
        raise ctx.error("give the pair classes as `matrix` or as [pairs], not both", "pairs")

    entries = gpu_entries(ctx, data, matrix)
    n = len(entries)
    if n > 1 and not (matrix is not None or "pairs" in data or nvswitch):  # one GPU has no pair
        raise ctx.error("no pair classes: give `matrix` (nvidia-smi topo -m text), a [pairs] table, "
                        "or nvswitch = true", "pairs")
    gpus, specs = build_gpus(ctx, name, entries, defaults, matrix, nvswitch)
    faults = build_faults(ctx, data.get("fault", []), n)  # before NVLinks, which they may take down
    wired, pcie = pair_classes(ctx, data, n, gpus, matrix, nvswitch)
    switch_ids, nv_active = wire_nvlinks(ctx, data, gpus, specs, faults, wired, nvswitch)
    apply_downtrained(ctx, gpus, faults)  # what NVML reports of the GPU's PCIe link
    host = build_host(ctx, host_raw, name)

    taken = {g.lspci_bdf: f"GPU {g.index}" for g in gpus}
    taken.update({PciAddress.parse(s).lspci: "an NVSwitch" for s in switch_ids})
    nics = parse_nics(ctx, data.get("nic", []), gpus, taken)
    desc = Description(name=name, summary=summary, path=path, gpus=gpus, host=host, faults=faults,
                       nvswitch=nvswitch, nvswitch_bus_ids=switch_ids, source=source, nics=nics,
                       _wired=wired, _pcie=pcie, _nv_active=nv_active, _raw=data, _text=text)
    check_class_faults(ctx, faults, desc.pairs(), desc.link_class)
    desc._efficiency, desc._link_rules = parse_link_model(ctx, data.get("link_model", {}))
    desc._p2p_rules = parse_p2p(ctx, data.get("p2p", {}), n)
    desc.clock = parse_clock(ctx, data["clock"]) if "clock" in data else None
    host.acs_redirect_bridges = acs_redirect_bridges(ctx, host_raw, desc)
    return desc


# ============================================================================ errors: file, key, line
# DescContext builds the InputFileError every check raises (``gpu[3].numa_node`` at line 42 of
# the file); the check_* helpers validate one value or table and raise through it. health.py,
# fabric.py and nics.py receive the context and report their errors the same way.


class DescContext:
    """Error reporting for one file: key paths, line lookup."""

    def __init__(self, path: str, text: str):
        self.path = path
        self.text = text
        self.lines = text.splitlines() if text else []

    def error(self, message: str, *key: Any) -> InputFileError:
        """The error to raise: this file, ``message``, the key path and its line when found."""
        return InputFileError(self.path, message, line=self.line_of(key) if key else None,
                              key=key_text(key) if key else None)

    def line_of(self, key: Sequence[Any]) -> Optional[int]:
        """Best-effort 1-based line of a key path such as ("gpu", 3, "numa_node")."""
        if not self.lines:
            return None
        for cut in range(len(key) - 1, -1, -1):
            table, name = key[:cut], key[cut]
            line = self._find(table, name)
            if line is not None:
                return line
        return None

    def _find(self, table: Sequence[Any], name: Any) -> Optional[int]:
        # table like ("gpu", 3) or ("link_model",) or (); name a str (key) or int (array entry)
        want, want_index = [], None
        for part in table:
            if isinstance(part, int):
                want_index = part
            else:
                want.append(str(part))
        if isinstance(name, int):  # the N-th [[table]] header itself
            want_index, name = name, None
        current: Optional[List[str]] = [] if not want else None
        counts: Dict[str, int] = {}
        for no, raw in enumerate(self.lines, 1):
            s = raw.strip()
            if s.startswith("["):
                header = s.strip("[]").split("#")[0].strip().strip("[]").strip()
                parts = [p.strip().strip('"') for p in header.split(".")]
                is_array = s.startswith("[[")
                dotted = ".".join(parts)
                index = None
                if is_array:
                    index = counts.get(dotted, 0)
                    counts[dotted] = index + 1
                matches = parts == want and (want_index is None or index == want_index)
                if matches and name is None:
                    return no
                if isinstance(name, str) and want_index is None and parts == want + [name]:
                    return no
                current = parts if matches else None
                continue
            if current is not None and name is not None:
                m = re.match(r'^\s*"?([^"=]+?)"?\s*=', raw)
                if m and m.group(1).strip() == str(name):
                    return no
        return None


def key_text(key: Sequence[Any]) -> str:
    """A key path as a user writes it: ("gpu", 3, "numa_node") -> ``gpu[3].numa_node``."""
    out = ""
    for part in key:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            p = str(part)
            if not re.match(r"^[A-Za-z0-9_-]+$", p):
                p = f'"{p}"'
            out += ("." if out else "") + p
    return out


def check_keys(ctx: DescContext, table: Any, allowed: set, *key: Any) -> Dict[str, Any]:
    """``table`` itself when it is a table whose keys are all in ``allowed``."""
    if not isinstance(table, dict):
        raise ctx.error(f"expected a table, got {type(table).__name__}", *key)
    for k in table:
        if k not in allowed:
            raise ctx.error(f"unknown key {k!r}; allowed: {', '.join(sorted(allowed))}", *key, k)
    return table


def check_int(ctx, value, lo, hi, *key) -> int:
    """``value`` when it is an integer (not a bool) in ``lo..hi``."""
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ctx.error(f"expected an integer in {lo}..{hi}, got {value!r}", *key)
    return value


def check_str(ctx, value, *key) -> str:
    """``value`` when it is a string."""
    if not isinstance(value, str):
        raise ctx.error(f"expected a string, got {value!r}", *key)
    return value


def check_label(ctx, value, *key) -> str:
    """A string that gputopo prints (a machine, GPU or host name): control characters (an ANSI
    escape, a newline) are kept as visible escapes (``\\x1b``, ``\\n``), never sent to the terminal."""
    from gputopo.console import printable

    return printable(check_str(ctx, value, *key))


def check_num(ctx, value, *key, positive=True) -> float:
    """``value`` as a float when it is a finite number (and > 0 unless ``positive`` is False)."""
    # TOML has nan and inf: neither is a rate or a latency
    if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)
            or (positive and value <= 0)):
        raise ctx.error(f"expected a finite {'positive ' if positive else ''}number, got {value!r}", *key)
    return float(value)


def parse_clock(ctx, value) -> float:
    """``clock``: a TOML date-time or an ISO 8601 string, as a UTC epoch time (a time without
    a zone is UTC). The history records a simulated run at this time (issue 19)."""
    import datetime as _dt

    if isinstance(value, str):
        try:
            value = _dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ctx.error(f"expected a date-time like 2026-11-01T08:00:00Z, got {value!r}", "clock") from None
    if isinstance(value, _dt.date) and not isinstance(value, _dt.datetime):
        value = _dt.datetime(value.year, value.month, value.day)
    if not isinstance(value, _dt.datetime):
        raise ctx.error(f"expected a date-time like 2026-11-01T08:00:00Z, got {value!r}", "clock")
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    return value.timestamp()


# ============================================================================ pair classes
# The ``matrix`` (nvidia-smi topo -m text, inline or ``matrix_file``), the ``[pairs]`` and
# ``[pcie_pairs]`` tables, and the wired and PCIe class of every GPU pair they give.


def read_matrix(ctx: DescContext, data: Dict[str, Any], path: str):
    """The parsed ``matrix`` or ``matrix_file`` (gputopo.probe.smi's matrix), or None."""
    matrix = None
    if "matrix" in data and "matrix_file" in data:
        raise ctx.error("give the matrix as `matrix` text or `matrix_file`, not both", "matrix_file")
    if "matrix" in data:
        mtext = check_str(ctx, data["matrix"], "matrix")
        matrix = _parse_matrix(ctx, mtext, offset=_matrix_offset(ctx))
    elif "matrix_file" in data:
        mpath = check_str(ctx, data["matrix_file"], "matrix_file")
        if not os.path.isabs(mpath) and not path.startswith(("<", "builtin:")):
            mpath = os.path.join(os.path.dirname(os.path.abspath(path)), mpath)
        from gputopo.inputs import MAX_SMI_BYTES, read_user_bytes
        from gputopo.probe.smi import decode_smi_bytes

        try:  # as --from-smi reads it: UTF-8 or PowerShell's UTF-16
            mtext = decode_smi_bytes(read_user_bytes(mpath, "matrix file", MAX_SMI_BYTES))
        except InputFileError as exc:
            raise ctx.error(f"{exc}", "matrix_file") from None
        matrix = _parse_matrix(DescContext(mpath, mtext), mtext, offset=0, source=mpath)
    return matrix


def pair_classes(ctx: DescContext, data: Dict[str, Any], n: int, gpus, matrix, nvswitch: bool
                 ) -> Tuple[Dict[Tuple[int, int], LinkClass], Dict[Tuple[int, int], str]]:
    """(wired class, PCIe kind) of every pair from the matrix or [pairs], [pcie_pairs] and the
    NUMA nodes; on an NVSwitch machine the wired class is the PCIe one until the switch is wired."""
    wired: Dict[Tuple[int, int], LinkClass] = {}
    pcie: Dict[Tuple[int, int], str] = {}
    given: Dict[Tuple[int, int], LinkClass] = {}
    if matrix is not None:
        given = dict(matrix.classes)
    elif "pairs" in data:
        given = _parse_pairs_table(ctx, data["pairs"], n, gpus, "pairs", pcie_only=False)
    pcie_given = (_parse_pairs_table(ctx, data["pcie_pairs"], n, gpus, "pcie_pairs", pcie_only=True,
                                     need_all=False) if "pcie_pairs" in data else {})
    for i in range(n):
        for j in range(i + 1, n):
            cls = given.get((i, j))
            if cls is not None and not cls.is_nvlink:
                if (i, j) in pcie_given and str(pcie_given[(i, j)]) != str(cls):
                    raise ctx.error(f"pair {i},{j} is {cls} in the pair classes but "
                                    f"{pcie_given[(i, j)]} here", "pcie_pairs", f"{i},{j}")
                pcie[(i, j)] = cls.kind
            elif (i, j) in pcie_given:
                pcie[(i, j)] = pcie_given[(i, j)].kind
            else:
                pcie[(i, j)] = _numa_kind(gpus[i], gpus[j])
            if nvswitch:
                wired[(i, j)] = shared_link_class(pcie[(i, j)])  # the NVLinks: _wire_switch
            elif cls is not None:
                wired[(i, j)] = cls
            else:
                wired[(i, j)] = shared_link_class(pcie[(i, j)])
    return wired, pcie


@functools.lru_cache(maxsize=64)
def _parse_matrix_cached(text: str, source: str):
    from gputopo.probe.smi import parse_topo_matrix

    return parse_topo_matrix(text, source)


def _matrix_offset(ctx: DescContext) -> int:
    """Lines before the matrix text's first line in the file (for error line numbers)."""
    for no, raw in enumerate(ctx.lines, 1):
        m = re.match(r'^\s*matrix\s*=\s*("""|\'\'\'|"|\')(.*)$', raw)
        if m:
            starts_next = m.group(1) in ('"""', "'''") and m.group(2).strip() == ""
            return no if starts_next else no - 1
    return 0


def _parse_matrix(ctx: DescContext, text: str, offset: int, source: Optional[str] = None):
    try:
        return _parse_matrix_cached(text, source or f"{ctx.path} [matrix]")
    except InputFileError as exc:
        msg = str(exc).split(": ", 1)[-1] if ": " in str(exc) else str(exc)
        line = exc.line + offset if exc.line is not None and source is None else exc.line
        raise InputFileError(ctx.path if source is None else source, f"bad matrix: {msg}",
                             line=line, key="matrix" if source is None else None) from None


def _numa_kind(a: GpuDesc, b: GpuDesc) -> str:
    """PCIe class by NUMA node when nothing else says: NODE on one node, SYS across."""
    if a.numa_node is not None and a.numa_node == b.numa_node:
        return "NODE"
    if a.numa_node is None and b.numa_node is None and a.cpu_affinity == b.cpu_affinity:
        return "NODE"
    return "SYS"


def parse_pair_ref(ctx, ref, n, *key) -> Tuple[int, int]:
    if isinstance(ref, str):
        m = PAIR_KEY_RE.match(ref)
        pair = (int(m.group(1)), int(m.group(2))) if m else None
    elif isinstance(ref, list) and len(ref) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in ref):
        pair = (ref[0], ref[1])
    else:
        pair = None
    if pair is None:
        raise ctx.error(f"expected a pair \"I,J\" or [I, J], got {ref!r}", *key)
    i, j = pair
    if i == j:
        raise ctx.error(f"pair {i},{j}: a pair needs two different GPUs", *key)
    for x in pair:
        if not 0 <= x < n:
            raise ctx.error(f"pair {i},{j}: GPU {x} out of range (the machine has GPUs 0..{n - 1})", *key)
    return (min(i, j), max(i, j))


def parse_class(ctx, text, pcie_only, *key) -> LinkClass:
    try:
        cls = LinkClass.parse(check_str(ctx, text, *key))
    except ValueError:
        cls = None
    if cls is None or cls.kind == "X" or (pcie_only and cls.is_nvlink):
        allowed = ", ".join(PCIE_KINDS) if pcie_only else "NV<n>, " + ", ".join(PCIE_KINDS)
        raise ctx.error(f"unknown link class {text!r} (expected {allowed})", *key)
    return cls


def _parse_pairs_table(ctx, table, n, gpus, name, pcie_only, need_all=True) -> Dict[Tuple[int, int], LinkClass]:
    if not isinstance(table, dict):
        raise ctx.error("expected a table", name)
    out: Dict[Tuple[int, int], LinkClass] = {}

    def put(pair, cls, key):
        if pair in out and out[pair] != cls:
            raise ctx.error(f"pair {pair[0]},{pair[1]} given twice ({out[pair]} and {cls})", name, key)
        out[pair] = cls

    default: Optional[LinkClass | str] = None  # a class, "numa" or none given
    for key, value in table.items():
        if key == "default":
            if value == "numa":
                default = "numa"
            else:
                default = parse_class(ctx, value, pcie_only, name, key)
                if default.is_nvlink:
                    raise ctx.error("the default class must be a PCIe class or \"numa\"", name, key)
        elif PAIR_KEY_RE.match(key):
            put(parse_pair_ref(ctx, key, n, name, key), parse_class(ctx, value, pcie_only, name, key), key)
        else:
            cls = parse_class(ctx, key, pcie_only, name, key)
            if not isinstance(value, list):
                raise ctx.error(f"write either \"I,J\" = \"{cls}\" or {cls} = [\"I,J\", ...]", name, key)
            for ref in value:
                put(parse_pair_ref(ctx, ref, n, name, key), cls, key)
    if not need_all:
        return out
    for i in range(n):
        for j in range(i + 1, n):
            if (i, j) in out:
                continue
            if default is None:
                raise ctx.error(f"pair {i},{j} has no class; list it or set default = \"SYS\" "
                                "(or \"numa\": NODE on one NUMA node, SYS across)", name)
            out[(i, j)] = (default if isinstance(default, LinkClass)
                           else shared_link_class(_numa_kind(gpus[i], gpus[j])))
    return out


# ============================================================================ GPUs
# The ``[[gpu]]`` entries (or ``gpu_count``, or the matrix's GPUs) over ``[defaults]``, as NVML
# would report them: name and model, bus id, UUID, NUMA node, CPU affinity, PCIe generation and
# width, NVLink version, MIG mode, health (health.py) and NVLink fabric registration (fabric.py).


#: Keys of a [[gpu]] entry; [defaults] takes the same but bus_id and uuid (one per GPU).
GPU_KEYS = {"bus_id", "uuid", "name", "numa_node", "cpu_affinity", "pcie_gen", "pcie_width",
            "pcie_gen_current", "pcie_width_current", "pcie_replay", "nvlink_version", "nvlinks",
            "nvlinks_down", "nvlink_errors", "mig", "model", "minor_number"} | HEALTH_KEYS | FABRIC_KEYS | PROCESS_KEYS
DEFAULT_KEYS = GPU_KEYS - {"bus_id", "uuid", "minor_number"}

_CPULIST_RE = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
_UUID_RE = re.compile(r"^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def gpu_entries(ctx: DescContext, data: Dict[str, Any], matrix) -> List[Dict[str, Any]]:
    """The [[gpu]] tables; without any, one empty entry per GPU of the matrix or ``gpu_count``."""
    entries = data.get("gpu")
    if entries is None:
        if matrix is not None:
            n = matrix.gpu_count
            if "gpu_count" in data and data["gpu_count"] != n:
                raise ctx.error(f"gpu_count = {data['gpu_count']!r} but the matrix has {n} GPUs", "gpu_count")
        elif "gpu_count" in data:
            n = check_int(ctx, data["gpu_count"], 1, 4096, "gpu_count")
        else:
            raise ctx.error("no GPUs: add [[gpu]] entries (or a matrix, or gpu_count)", "gpu")
        entries = [{} for _ in range(n)]
    else:
        if not isinstance(entries, list) or not entries:
            raise ctx.error("expected one or more [[gpu]] tables", "gpu")
        n = len(entries)
        if "gpu_count" in data and data["gpu_count"] != n:
            raise ctx.error(f"gpu_count = {data['gpu_count']!r} but there are {n} [[gpu]] entries", "gpu_count")
        if matrix is not None and matrix.gpu_count != n:
            raise ctx.error(f"the matrix has {matrix.gpu_count} GPUs but there are {n} [[gpu]] entries",
                            "matrix")
    return entries


def build_gpus(ctx: DescContext, machine: str, entries: List[Dict[str, Any]], defaults: Dict[str, Any],
               matrix, nvswitch: bool = False) -> Tuple[List[GpuDesc], List[Dict[str, Any]]]:
    """(the GPUs, each GPU's entry over [defaults]: its spec, which the NVLink wiring reads).
    ``nvswitch``: an NVSwitch box, whose Hopper-or-later GPUs are registered with the fabric."""
    gpus: List[GpuDesc] = []
    specs: List[Dict[str, Any]] = []
    seen_bus: Dict[str, int] = {}
    for idx, entry in enumerate(entries):
        key = ("gpu", idx)
        check_keys(ctx, entry, GPU_KEYS, *key)
        spec = dict(defaults)
        spec.update(entry)
        specs.append(spec)

        def where(k, key=key, entry=entry):
            return key + (k,) if k in entry else ("defaults", k)

        name = spec.get("name")
        if name is None:
            raise ctx.error("missing GPU name (set name in [defaults] or in the [[gpu]] entry)", *key, "name")
        name = check_label(ctx, name, *where("name"))
        model, model_key = resolve_model(ctx, name, spec.get("model"), where("name"), where("model"))

        if "bus_id" in spec:
            try:
                addr = PciAddress.parse(check_str(ctx, spec["bus_id"], *key, "bus_id"))
            except ValueError as exc:
                raise ctx.error(str(exc), *key, "bus_id") from None
        else:
            addr = PciAddress(idx // 8, 0x18 + (idx % 8) * 0x18, 0, 0)
        if addr.nvml in seen_bus:
            raise ctx.error(f"bus id {addr.lspci} is also GPU {seen_bus[addr.nvml]}'s", *key, "bus_id")
        seen_bus[addr.nvml] = idx

        if "uuid" in spec:
            uid = check_str(ctx, spec["uuid"], *key, "uuid")
            if not _UUID_RE.match(uid):
                raise ctx.error(f"expected a GPU UUID like \"GPU-1a2b3c4d-...\" (GPU- and 8-4-4-4-12 hex), "
                                f"got {uid!r}", *key, "uuid")
        else:
            uid = "GPU-" + str(uuid_mod.uuid5(uuid_mod.NAMESPACE_URL, f"gputopo-sim/{machine}/{addr.nvml}"))

        numa: Optional[int]
        if "numa_node" in spec:
            v = spec["numa_node"]
            if v == "unsupported":
                numa = None
            else:
                numa = check_int(ctx, v, 0, 1023, *where("numa_node"))
        elif matrix is not None and isinstance(matrix.numa_affinity.get(idx), int):
            numa = matrix.numa_affinity[idx]
            if numa_node_problem(numa):
                raise ctx.error(f"the matrix's NUMA Affinity of GPU {idx}: {numa_node_problem(numa)}",
                                "matrix")
        elif matrix is not None:
            numa = None
        else:
            numa = 0

        if "cpu_affinity" in spec:
            v = spec["cpu_affinity"]
            if v == "unsupported":
                cpus = None
            else:
                cpus = check_str(ctx, v, *where("cpu_affinity")).replace(" ", "")
                why = cpu_list_problem(cpus)
                if why:
                    raise ctx.error(why, *where("cpu_affinity"))
        elif matrix is not None and matrix.cpu_affinity.get(idx):
            cpus = str(matrix.cpu_affinity[idx]).replace(" ", "")
            if not _CPULIST_RE.match(cpus):
                cpus = None
            elif cpu_list_problem(cpus):
                raise ctx.error(f"the matrix's CPU Affinity of GPU {idx}: {cpu_list_problem(cpus)}",
                                "matrix")
        else:
            node = numa or 0
            cpus = f"{node * 32}-{node * 32 + 31}"

        gen_max = check_int(ctx, spec.get("pcie_gen", 4), 1, 6, *where("pcie_gen"))
        width_max = check_int(ctx, spec.get("pcie_width", 16), 1, 32, *where("pcie_width"))
        if width_max not in (1, 2, 4, 8, 12, 16, 32):
            raise ctx.error(f"PCIe width must be 1, 2, 4, 8, 12, 16 or 32 lanes, got {width_max}",
                            *where("pcie_width"))
        gen_cur = check_int(ctx, spec.get("pcie_gen_current", gen_max), 1, gen_max, *where("pcie_gen_current"))
        width_cur = check_int(ctx, spec.get("pcie_width_current", width_max), 1, width_max,
                         *where("pcie_width_current"))
        replay = check_int(ctx, spec.get("pcie_replay", 0), 0, 2**32 - 1, *where("pcie_replay"))
        version = spec.get("nvlink_version", model.nvlink_version)
        if version is not None:
            version = check_int(ctx, version, 1, 6, *where("nvlink_version"))
        mig = spec.get("mig", "disabled" if model.mig_capable else "unsupported")
        if mig not in ("disabled", "enabled", "unsupported"):
            raise ctx.error(f"expected \"disabled\", \"enabled\" or \"unsupported\", got {mig!r}", *where("mig"))
        gpus.append(GpuDesc(index=idx, name=name, uuid=uid, bus_id=addr.nvml, numa_node=numa,
                            cpu_affinity=cpus, pcie_gen=gen_cur, pcie_gen_max=gen_max,
                            pcie_width=width_cur, pcie_width_max=width_max, pcie_replay=replay,
                            pcie_width_healthy=width_cur,
                            nvlink_version=version, mig_mode=None if mig == "unsupported" else mig,
                            health=parse_health(ctx, spec, where, name), model=model_key,
                            fabric=gpu_fabric_desc(ctx, spec, where, model, nvswitch),
                            minor_number=(check_int(ctx, entry["minor_number"], 0, 255, *key, "minor_number")
                                          if "minor_number" in entry else None),
                            processes=parse_processes(ctx, spec, where)))
    check_unique_uuids(ctx, [(g.uuid, ("gpu", g.index, "uuid")) for g in gpus])
    minors: Dict[int, int] = {}
    for g in gpus:
        if g.minor in minors:
            raise ctx.error(f"minor number {g.minor} is also GPU {minors[g.minor]}'s", "gpu", g.index, "minor_number")
        minors[g.minor] = g.index
    return gpus, specs


# ============================================================================ NVLinks
# Each GPU's ports (``nvlinks``, ``nvlink_errors``), wired to its peers from the NV<n> pair
# classes or spread over NVSwitches (``nvswitch = true``), then taken down by ``nvlinks_down`` and
# ``link_down`` faults (a scan then sees the pair's PCIe class).


def wire_nvlinks(ctx: DescContext, data: Dict[str, Any], gpus: List[GpuDesc], specs: List[Dict[str, Any]],
                 faults: List[Fault], wired: Dict[Tuple[int, int], LinkClass], nvswitch: bool
                 ) -> Tuple[List[str], Dict[Tuple[int, int], int]]:
    """Make every GPU's NVLink ports, wire them and take the down ones down.

    Returns (the NVSwitches' bus ids, active NVLinks per directly linked pair); ``wired`` gets
    the NV<n> class of each pair behind NVSwitches."""
    switch_ids: List[str] = []
    peer_links: Dict[Tuple[int, int], Tuple[List[int], List[int]]] = {}
    if nvswitch:
        switch_ids = _wire_switch(ctx, data, gpus, specs, wired)
    else:
        peer_links = _wire_direct(ctx, gpus, specs, wired)
    _apply_link_downs(ctx, gpus, specs, faults, wired, nvswitch, peer_links)
    nv_active: Dict[Tuple[int, int], int] = {}
    if not nvswitch:
        for (i, j), (li, _lj) in peer_links.items():
            nv_active[(i, j)] = sum(1 for a in li if gpus[i].nvlinks[a].active)
    return switch_ids, nv_active


def _ports(ctx, spec, idx, needed, model_ports: int = 0) -> int:
    """The GPU's NVLink ports: ``nvlinks`` when given, else its model's (NVML lists every port of
    an NVLink-capable GPU, bridged or not: the unused ones inactive, with no far end), else as
    many as its pairs need."""
    if "nvlinks" in spec:
        ports = check_int(ctx, spec["nvlinks"], 0, 36, "gpu", idx, "nvlinks")
        if ports < needed:
            raise ctx.error(f"GPU {idx} has {ports} NVLink ports but its pairs need {needed}",
                            "gpu", idx, "nvlinks")
        return ports
    return max(needed, model_ports)


def _error_counts(ctx, spec, idx, ports) -> Dict[int, Dict[str, int]]:
    """Per link: error counters from the GPU's nvlink_errors (by counter for all links, or by link)."""
    table = spec.get("nvlink_errors", {})
    key = ("gpu", idx, "nvlink_errors")
    if not isinstance(table, dict):
        raise ctx.error("expected a table of counters (replay, recovery, crc_flit, crc_data) or of links", *key)
    per_link: Dict[int, Dict[str, int]] = {}

    def counters(d, k):
        if not isinstance(d, dict):
            raise ctx.error("expected a table of counters", *key, k)
        for c, v in d.items():
            if c not in NVLINK_ERROR_COUNTERS:
                raise ctx.error(f"unknown NVLink error counter {c!r}; counters: "
                                f"{', '.join(NVLINK_ERROR_COUNTERS)}", *key, k)
            check_int(ctx, v, 0, 2**64 - 1, *key, k)
        return d

    for k, v in table.items():
        if k.isdigit():
            link = int(k)
            if link >= ports:
                raise ctx.error(f"GPU {idx} has no NVLink {link} (it has {ports})", *key, k)
            per_link.setdefault(link, {}).update(counters(v, k))
        elif k in NVLINK_ERROR_COUNTERS:
            check_int(ctx, v, 0, 2**64 - 1, *key, k)
            for link in range(ports):
                per_link.setdefault(link, {})[k] = v
        else:
            raise ctx.error(f"unknown key {k!r}: use a counter name ({', '.join(NVLINK_ERROR_COUNTERS)}) "
                            "or a link number", *key, k)
    return per_link


def _make_links(gpu: GpuDesc, ports: int, errors: Dict[int, Dict[str, int]]) -> None:
    gpu.nvlinks = []
    for link in range(ports):
        counts = {c: 0 for c in NVLINK_ERROR_COUNTERS}
        counts.update(errors.get(link, {}))
        gpu.nvlinks.append(NvLinkDesc(link=link, active=True, remote_bus_id=None, remote_type="GPU",
                                      errors=counts))


def _wire_direct(ctx, gpus, specs, wired):
    """Direct NVLinks from NV<n> pairs: n links on each GPU whose remote is the peer."""
    n = len(gpus)
    need = [0] * n
    for (i, j), cls in wired.items():
        if cls.is_nvlink:
            need[i] += cls.nvlinks
            need[j] += cls.nvlinks
    for g in gpus:
        model_ports = g.sim_model.nvlink_ports if g.nvlink_version is not None else 0
        ports = _ports(ctx, specs[g.index], g.index, need[g.index], model_ports)
        if ports and g.nvlink_version is None:
            raise ctx.error(f"GPU {g.index} ({g.name}) has NVLinks: set its nvlink_version",
                            "gpu", g.index, "nvlink_version")
        _make_links(g, ports, _error_counts(ctx, specs[g.index], g.index, ports))
    used = [0] * n
    peer_links: Dict[Tuple[int, int], Tuple[List[int], List[int]]] = {}
    for (i, j) in sorted(wired):
        cls = wired[(i, j)]
        if not cls.is_nvlink:
            continue
        li = list(range(used[i], used[i] + cls.nvlinks))
        lj = list(range(used[j], used[j] + cls.nvlinks))
        used[i] += cls.nvlinks
        used[j] += cls.nvlinks
        for a in li:
            gpus[i].nvlinks[a].remote_bus_id = gpus[j].bus_id
        for b in lj:
            gpus[j].nvlinks[b].remote_bus_id = gpus[i].bus_id
        peer_links[(i, j)] = (li, lj)
    for g in gpus:  # ports nothing is plugged into
        for lk in g.nvlinks[used[g.index]:]:
            lk.active = False
    return peer_links


def _wire_switch(ctx, data, gpus, specs, wired) -> List[str]:
    """NVSwitch: each GPU's ports spread over the switches; every pair NV<min ports>."""
    ports_list = []
    for g in gpus:
        spec = specs[g.index]
        if "nvlinks" not in spec:
            raise ctx.error("nvswitch = true needs the number of NVLink ports per GPU (nvlinks = 12 "
                            "in [defaults])", "defaults", "nvlinks")
        ports = _ports(ctx, spec, g.index, 0)
        if ports and g.nvlink_version is None:
            raise ctx.error(f"GPU {g.index} ({g.name}) has NVLinks: set its nvlink_version",
                            "gpu", g.index, "nvlink_version")
        ports_list.append(ports)
    version = max((g.nvlink_version or 0) for g in gpus)
    if "nvswitch_bus_ids" in data:
        raw = data["nvswitch_bus_ids"]
        if not isinstance(raw, list) or not raw:
            raise ctx.error("expected a list of PCI addresses", "nvswitch_bus_ids")
        try:
            switch_ids = [PciAddress.parse(check_str(ctx, b, "nvswitch_bus_ids")).nvml for b in raw]
        except ValueError as exc:
            raise ctx.error(str(exc), "nvswitch_bus_ids") from None
    else:
        count = check_int(ctx, data.get("nvswitches", DEFAULT_NVSWITCHES.get(version, 4)), 1, 64, "nvswitches")
        taken = {g.address.bus for g in gpus if g.address.domain == 0}
        buses = [b for b in range(0xC4, 0x100) if b not in taken][:count]
        switch_ids = [PciAddress(0, b, 0, 0).nvml for b in buses]
    gpu_bus = {g.bus_id for g in gpus}
    for s in switch_ids:
        if s in gpu_bus:
            raise ctx.error(f"NVSwitch address {s} is a GPU's", "nvswitch_bus_ids")
    s_count = len(switch_ids)
    for g, ports in zip(gpus, ports_list):
        _make_links(g, ports, _error_counts(ctx, specs[g.index], g.index, ports))
        sizes = [ports // s_count + (1 if k < ports % s_count else 0) for k in range(s_count)]
        link = 0
        for k, size in enumerate(sizes):
            for _ in range(size):
                g.nvlinks[link].remote_bus_id = switch_ids[k]
                g.nvlinks[link].remote_type = "SWITCH"
                link += 1
    n = len(gpus)
    for i in range(n):
        for j in range(i + 1, n):
            m = min(ports_list[i], ports_list[j])
            if m:
                wired[(i, j)] = shared_link_class(f"NV{m}")
    return switch_ids


def _apply_link_downs(ctx, gpus, specs, faults, wired, nvswitch, peer_links) -> None:
    down: Set[Tuple[int, int]] = set()  # (gpu, link)
    for g in gpus:
        spec = specs[g.index]
        if "nvlinks_down" not in spec:
            continue
        v = spec["nvlinks_down"]
        key = ("gpu", g.index, "nvlinks_down")
        if v is True or v == "all":
            down.update((g.index, lk.link) for lk in g.nvlinks)
        elif v is False:
            pass
        elif isinstance(v, list):
            for link in v:
                if not isinstance(link, int) or isinstance(link, bool) or not 0 <= link < len(g.nvlinks):
                    raise ctx.error(f"GPU {g.index} has no NVLink {link!r} (it has {len(g.nvlinks)}: "
                                    f"0..{len(g.nvlinks) - 1})" if g.nvlinks else
                                    f"GPU {g.index} has no NVLinks to take down", *key)
                down.add((g.index, link))
        else:
            raise ctx.error("expected \"all\", true, or a list of link numbers", *key)
    for k, f in enumerate(faults):
        if f.what != "link_down":
            continue
        if f.scope == "gpu":
            g = gpus[f.gpus[0]]
            if not g.nvlinks:
                raise ctx.error(f"link_down on GPU {g.index}, which has no NVLinks", "fault", k, "where")
            down.update((g.index, lk.link) for lk in g.nvlinks)
        elif f.scope == "pair":
            if nvswitch:
                raise ctx.error("on an NVSwitch machine a pair has no links of its own: take a GPU's "
                                "links down with where = \"gpu:N\"", "fault", k, "where")
            if f.gpus not in peer_links:
                raise ctx.error(f"link_down on pair {f.gpus[0]},{f.gpus[1]}, which has no NVLinks",
                                "fault", k, "where")
            li, lj = peer_links[f.gpus]
            down.update((f.gpus[0], a) for a in li)
        else:
            hit = [p for p, cls in wired.items() if cls.is_nvlink and f.matches_class(cls)]
            if not hit:
                raise ctx.error(f"link_down on class {f.link_class}, which no pair has", "fault", k, "where")
            if nvswitch:
                for i, j in hit:
                    down.update((x, lk.link) for x in (i, j) for lk in gpus[x].nvlinks)
            else:
                for p in hit:
                    down.update((p[0], a) for a in peer_links[p][0])
    # a link is one cable: both ends are down when either is
    if peer_links:
        for (i, j), (li, lj) in peer_links.items():
            for a, b in zip(li, lj):
                if (i, a) in down or (j, b) in down:
                    down.add((i, a))
                    down.add((j, b))
    for g_idx, link in down:
        gpus[g_idx].nvlinks[link].active = False


# ============================================================================ faults
# The ``[[fault]]`` entries checked into Fault records (errors name the entry and key), and the
# ``downtrained`` ones applied to what NVML reports of the GPU's PCIe link. ``link_down`` faults
# are applied with the NVLinks; what the others do to the bytes moved is the simulated
# transport's job.


FAULT_KEYS = {"where", "what", "path", "rate", "factor", "description", "width", "gen"}


def build_faults(ctx: DescContext, entries: Any, n: int) -> List[Fault]:
    """The faults of the [[fault]] tables (``entries``) of an ``n``-GPU machine."""
    if not isinstance(entries, list):
        raise ctx.error("expected [[fault]] tables", "fault")
    faults = []
    for k, entry in enumerate(entries):
        check_keys(ctx, entry, FAULT_KEYS, "fault", k)
        for req in ("where", "what"):
            if req not in entry:
                raise ctx.error(f"missing `{req}`", "fault", k, req)
        try:
            f = Fault(**entry)
        except TypeError as exc:
            raise ctx.error(str(exc), "fault", k) from None
        except ValueError as exc:
            msg = str(exc)
            bad = next((key for key in ("what", "path", "where", "rate", "factor", "width", "gen")
                        if msg.startswith(key) or f"{key} =" in msg or f"{key} must" in msg
                        or (key == "what" and "kind" in msg)), None)
            if "downtrained fault is" in msg:
                bad = "where"
            raise ctx.error(msg, "fault", k, *( [bad] if bad else [])) from None
        for g in f.gpus:
            if not 0 <= g < n:
                raise ctx.error(f"GPU {g} out of range (the machine has GPUs 0..{n - 1})", "fault", k, "where")
        faults.append(f)
    check_fault_fields(ctx, entries)
    return faults


def apply_downtrained(ctx: DescContext, gpus: List[GpuDesc], faults: List[Fault]) -> None:
    """Lower the current PCIe width/generation of GPUs with a downtrained fault, and set the
    fault's throughput factor from them unless the file gives one."""
    for k, f in enumerate(faults):
        if f.what != "downtrained":
            continue
        g = gpus[f.gpus[0]]
        healthy = pcie_theory_gbps(g)
        width = f.width if f.width is not None else max(1, g.pcie_width_max // 2)
        gen = f.gen if f.gen is not None else g.pcie_gen_max
        if width > g.pcie_width_max or gen > g.pcie_gen_max:
            raise ctx.error(f"downtrained to x{width} gen{gen} but GPU {g.index} has at most "
                            f"x{g.pcie_width_max} gen{g.pcie_gen_max}", "fault", k)
        g.pcie_width = min(g.pcie_width, width)
        g.pcie_gen = min(g.pcie_gen, gen)
        if not f.factor_given:
            f.factor = round(min(1.0, (pcie_gbps(gen, width) or healthy) / healthy), 4)


# ============================================================================ checks that span entries
# Each refuses a file that would simulate something other than what it says, with the file,
# the key and the line (exit 2):
# - a GPU name no simulated model matches: it used to fall back to a generic GPU silently, so a
#   typo ("A100-SMX4") lost the model's NVLinks and memory rate; ``model = "generic"`` (or a
#   model's name) says so on purpose;
# - two GPUs with one ``uuid`` (NVML's UUIDs are unique; the CUDA index mapping relies on it);
# - ``rate`` on a fault that has no rate (only ``corrupt`` and ``nan`` hit a fraction of elements),
#   ``factor`` on one without a factor (``slow``, ``downtrained``): silently ignored before;
# - a ``class:`` fault that matches no pair of the machine: a fault that can never fire;
# - a downtrained ``width``/``gen`` no PCIe link has.


#: The fields of a fault that only some kinds have.
RATE_KINDS = ("corrupt", "nan")
FACTOR_KINDS = ("slow", "downtrained")


def resolve_model(ctx, name: str, model: Any, name_key: Sequence[Any], model_key: Sequence[Any]) -> Tuple[GpuModel, str]:
    """(the simulated model, the key it is found by) for a GPU ``name`` and its optional
    ``model`` field; InputFileError when the name (or model) is no model gputopo simulates."""
    known = ", ".join(MODEL_KEYS)
    if model is not None:
        if not isinstance(model, str):
            raise ctx.error(f"expected a model name, got {model!r}", *model_key)
        if model.strip().lower() == "generic":
            return GENERIC, "generic"
        found = find_model(model)
        if found is None:
            raise ctx.error(f"unknown GPU model {model!r}; models: {known}, or \"generic\"", *model_key)
        return found, model
    found = find_model(name)
    if found is None:
        raise ctx.error(f"unknown GPU name {name!r}: no simulated GPU model matches it (models: {known}); "
                        "use a name that contains one, or set model = \"generic\" (or one of them) beside it",
                        *name_key)
    return found, ""


def check_unique_uuids(ctx, uuids: List[Tuple[str, Sequence[Any]]]) -> None:
    """``uuids``: (uuid, its key) per GPU in index order; the second GPU with a UUID is refused."""
    seen: Dict[str, int] = {}
    for idx, (uid, key) in enumerate(uuids):
        if uid.lower() in seen:
            raise ctx.error(f"uuid {uid} is also GPU {seen[uid.lower()]}'s: every GPU has its own UUID", *key)
        seen[uid.lower()] = idx


#: PCIe link widths that exist (lanes), for a downtrained fault's ``width``.
PCIE_WIDTHS = (1, 2, 4, 8, 12, 16, 32)


def check_fault_fields(ctx, entries: List[Dict[str, Any]]) -> None:
    """A ``rate`` or ``factor`` on a fault kind that does not use it; a downtrained ``width``
    no PCIe link has, or a ``gen`` beyond the PCIe generations."""
    for k, entry in enumerate(entries):
        what = entry.get("what")
        if entry.get("width") is not None and entry["width"] not in PCIE_WIDTHS:
            raise ctx.error(f"PCIe width must be {', '.join(map(str, PCIE_WIDTHS))} lanes, got {entry['width']!r}",
                            "fault", k, "width")
        if entry.get("gen") is not None and not 1 <= entry["gen"] <= 6:
            raise ctx.error(f"PCIe generation must be 1..6, got {entry['gen']!r}", "fault", k, "gen")
        if "rate" in entry and what not in RATE_KINDS:
            raise ctx.error(f"rate applies to {' and '.join(RATE_KINDS)} faults (the fraction of elements hit); "
                            f"a {what} fault has none", "fault", k, "rate")
        if "factor" in entry and what not in FACTOR_KINDS:
            raise ctx.error(f"factor applies to {' and '.join(FACTOR_KINDS)} faults (the fraction of throughput "
                            f"left); a {what} fault has none", "fault", k, "factor")


def check_class_faults(ctx, faults, pairs: List[Tuple[int, int]], class_of) -> None:
    """A ``class:`` fault must match at least one pair (``class_of(i, j)``: the pair's LinkClass)."""
    classes: Optional[List[Any]] = None
    for k, f in enumerate(faults):
        if f.link_class is None:
            continue
        if classes is None:
            classes = [class_of(i, j) for i, j in pairs]
        if not any(f.matches_class(c) for c in classes):
            present = ", ".join(sorted({str(c) for c in classes})) or "none"
            raise ctx.error(f"{f.where!r} matches no pair of this machine (its classes: {present}): "
                            "the fault could never fire", "fault", k, "where")


# ============================================================================ host, link model, P2P
# ``[host]`` (IOMMU, ACS redirect, driver and kernel facts), the ``[link_model]`` overrides of
# the healthy path models and the ``[p2p]`` status rules.


HOST_KEYS = {"iommu", "acs_redirect", "driver_version", "nvml_version", "cuda_driver_version",
             "hostname", "kernel", "cmdline", "cpu_vendor", "iommu_group_type", "peermem", "open_kernel_module"}
#: [host] peermem: the peer-memory module loaded for GPUDirect RDMA, or "none".
PEERMEM_CHOICES = ("nvidia_peermem", "nv_peer_mem", "none")


def build_host(ctx: DescContext, raw: Dict[str, Any], machine: str) -> HostDesc:
    """The host facts of [host] (``raw``), with defaults that match its IOMMU mode and CPU vendor."""
    iommu = raw.get("iommu", "off")
    if iommu not in IOMMU_MODES:
        raise ctx.error(f"expected one of {', '.join(IOMMU_MODES)}, got {iommu!r}", "host", "iommu")
    vendor = raw.get("cpu_vendor", "intel")
    if vendor not in CPU_VENDORS:
        raise ctx.error(f"expected one of {', '.join(CPU_VENDORS)}, got {vendor!r}", "host", "cpu_vendor")
    group_types = {"translated": ("DMA", "DMA-FQ"), "passthrough": ("identity",), "off": ()}[iommu]
    gtype = raw.get("iommu_group_type", group_types[0] if group_types else None)
    if gtype not in group_types and not (gtype is None and not group_types):
        allowed = ", ".join(group_types) if group_types else "nothing (no IOMMU groups when iommu = \"off\")"
        raise ctx.error(f"with iommu = {iommu!r} the group type is {allowed}; got {gtype!r}",
                        "host", "iommu_group_type")
    driver = check_label(ctx, raw.get("driver_version", "535.154.05"), "host", "driver_version")
    cuda = raw.get("cuda_driver_version", 12020)
    if isinstance(cuda, str):
        m = re.match(r"^(\d+)\.(\d+)$", cuda.strip())
        if not m:
            raise ctx.error(f"expected e.g. 12040 or \"12.4\", got {cuda!r}", "host", "cuda_driver_version")
        cuda = int(m.group(1)) * 1000 + int(m.group(2)) * 10
    cuda = check_int(ctx, cuda, 1000, 99990, "host", "cuda_driver_version")
    nvml = check_label(ctx, raw.get("nvml_version", f"{cuda // 1000}.{driver}"), "host", "nvml_version")
    kernel = check_label(ctx, raw.get("kernel", "5.15.0-91-generic"), "host", "kernel")
    if "cmdline" in raw:
        cmdline = check_label(ctx, raw["cmdline"], "host", "cmdline")
    else:
        flags = {
            ("intel", "translated"): "intel_iommu=on", ("intel", "passthrough"): "intel_iommu=on iommu=pt",
            ("intel", "off"): "", ("amd", "translated"): "amd_iommu=on", ("amd", "passthrough"): "iommu=pt",
            ("amd", "off"): "amd_iommu=off",
        }[(vendor, iommu)]
        cmdline = f"BOOT_IMAGE=/boot/vmlinuz-{kernel} root=/dev/mapper/vg0-root ro quiet splash"
        cmdline += f" {flags}" if flags else ""
    peermem = raw.get("peermem", "nvidia_peermem")
    if peermem not in PEERMEM_CHOICES:
        raise ctx.error(f"expected one of {', '.join(PEERMEM_CHOICES)}, got {peermem!r}", "host", "peermem")
    open_module = raw.get("open_kernel_module", False)
    if not isinstance(open_module, bool):
        raise ctx.error(f"expected true or false, got {open_module!r}", "host", "open_kernel_module")
    return HostDesc(iommu=iommu, acs_redirect_bridges=[], driver_version=driver, nvml_version=nvml,
                    cuda_driver_version=cuda,
                    hostname=check_label(ctx, raw.get("hostname", f"sim-{machine}"), "host", "hostname"),
                    kernel=kernel, cmdline=cmdline, cpu_vendor=vendor, iommu_group_type=gtype,
                    peermem=peermem, open_kernel_module=open_module)


def acs_redirect_bridges(ctx: DescContext, raw: Dict[str, Any], desc: MachineDesc) -> List[str]:
    """The bridges (lspci form) with ACS redirect on: ``acs_redirect = true`` is every ACS-capable
    bridge of the machine's PCIe tree, a list names some of them, false (the default) none."""
    acs = raw.get("acs_redirect", False)
    if acs is True:
        return [b.bdf for b in desc.pcie_tree.bridges if b.acs_capable]
    if isinstance(acs, list):
        known = desc.pcie_tree.by_bdf
        out = []
        for bdf in acs:
            try:
                key = PciAddress.parse(check_str(ctx, bdf, "host", "acs_redirect")).lspci
            except ValueError as exc:
                raise ctx.error(str(exc), "host", "acs_redirect") from None
            if key not in known or not known[key].acs_capable:
                names = ", ".join(b.bdf for b in desc.pcie_tree.bridges if b.acs_capable)
                raise ctx.error(f"{bdf!r} is not an ACS-capable bridge above the GPUs; they are: {names}",
                                "host", "acs_redirect")
            out.append(key)
        return out
    if acs is not False:
        raise ctx.error("expected true, false or a list of bridge addresses", "host", "acs_redirect")
    return []


def parse_link_model(ctx: DescContext, table: Any) -> Tuple[float, Dict[str, Dict[str, float]]]:
    """(efficiency, per-class/host/device overrides) of [link_model]."""
    if not isinstance(table, dict):
        raise ctx.error("expected a table", "link_model")
    eff = DEFAULT_EFFICIENCY
    rules: Dict[str, Dict[str, float]] = {}
    for key, value in table.items():
        if key == "efficiency":
            eff = check_num(ctx, value, "link_model", key)
            if eff > 1:
                raise ctx.error(f"efficiency is a fraction of the theoretical rate (0..1], got {value!r}",
                                "link_model", key)
            continue
        if key in ("host", "device") or key in PCIE_KINDS:
            allowed = {"gbps", "latency_us"}
        elif key == "NV":
            allowed = {"gbps_per_link", "latency_us"}
        elif re.match(r"^NV\d+$", key):
            allowed = {"gbps", "latency_us"}
        else:
            raise ctx.error(f"unknown key {key!r}; use efficiency, NV (per link), NV<n>, "
                            f"{', '.join(PCIE_KINDS)}, host or device", "link_model", key)
        check_keys(ctx, value, allowed, "link_model", key)
        rules[key] = {k: check_num(ctx, v, "link_model", key, k) for k, v in value.items()}
    return eff, rules


def parse_p2p(ctx: DescContext, table: Any, n: int) -> Dict[str, Dict[str, str]]:
    """The [p2p] rules by "default", "NV", a class or a pair "I,J": capability -> status."""
    if not isinstance(table, dict):
        raise ctx.error("expected a table", "p2p")
    rules: Dict[str, Dict[str, str]] = {}
    for key, value in table.items():
        if key == "default" or key == "NV":
            rule = key
        elif PAIR_KEY_RE.match(key):
            i, j = parse_pair_ref(ctx, key, n, "p2p", key)
            rule = f"{i},{j}"
        else:
            rule = str(parse_class(ctx, key, False, "p2p", key))
        if isinstance(value, str):
            value = {c: value for c in P2P_CAPS}
        check_keys(ctx, value, set(P2P_CAPS), "p2p", key)
        for cap, status in value.items():
            if status not in P2P_STATUSES:
                raise ctx.error(f"unknown P2P status {status!r}; statuses: {', '.join(P2P_STATUSES)}",
                                "p2p", key, cap)
        rules.setdefault(rule, {}).update(value)
    return rules
