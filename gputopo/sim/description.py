"""Simulated machine descriptions: the TOML format, its loader and validator.

The records it builds (Description, GpuDesc, NvLinkDesc, HostDesc, Fault, LinkModel) live in
gputopo.sim.records and are re-exported here.

A description says what a scan of the machine would see (GPUs, NVLinks, PCIe, pair classes, P2P
status, host IOMMU/ACS facts), how fast each path is when healthy (the link model), and which
faults the simulated transport applies to the bytes it moves. The format is documented with a
complete example in ``gputopo/sim/FORMAT.md``; in short::

    name = "my-box"                      # optional, defaults to the file name
    summary = "one line"
    matrix = \"\"\"<nvidia-smi topo -m text>\"\"\"   # or [pairs], or nvswitch = true
    [defaults]   name = "NVIDIA A100-SXM4-80GB", pcie_gen = 4, pcie_width = 16, ...
    [[gpu]]      bus_id = "0000:07:00.0", numa_node = 0, cpu_affinity = "0-31", overrides...
    [host]       iommu = "translated", acs_redirect = true, driver_version = "535.154.05", ...
    [link_model] NODE = { gbps = 24.0, latency_us = 5.0 }, ...
    [p2p]        SYS = { read = "CNS" }, "0,5" = "NS", ...
    [[fault]]    where = "class:SYS", what = "corrupt", path = "p2p", rate = 0.001

Hardware states a scan sees are applied here: a GPU's ``nvlinks_down`` and ``link_down`` faults
make NVLinks inactive (so the pair's class drops to its PCIe class), ``downtrained`` faults lower
the GPU's current PCIe width/generation. Everything else a fault does (corrupt, nan, slow, the
throughput loss of a downtrained link, hang, crash) is the transport's job: ``link_model``
stays the healthy model of the pair's class.

Errors in a file raise :class:`gputopo.errors.InputFileError` naming the file, the key
(``gpu[3].numa_node``, ``fault[0].what``) and, where it can be found, the line.
"""

from __future__ import annotations

import functools
import math
import os
import re
import sys
import uuid as uuid_mod
from typing import Any, Dict, List, Optional, Sequence, Tuple

from gputopo.errors import InputFileError, UsageError
from gputopo.model.bandwidth import pcie_gbps
from gputopo.model.linkclass import PCIE_KINDS, LinkClass
from gputopo.model.topology import NVLINK_ERROR_COUNTERS, P2P_CAPS

from .description_checks import check_class_faults, check_fault_fields, check_unique_uuids, resolve_model
from .health import HEALTH_KEYS, parse_health
from .nics import parse_nics
from .pci import PciAddress
from .records import (CPU_VENDORS, DEFAULT_EFFICIENCY, DEFAULT_LATENCY_US, DEFAULT_NVSWITCHES,
                      FAULT_KINDS, FAULT_PATHS, IOMMU_MODES, P2P_STATUSES, PCIE_CLASS_DERATE,
                      Description, Fault, GpuDesc, HostDesc, LinkModel, NvLinkDesc, _lc,
                      _pcie_theory)
from .records import _PAIR_KEY_RE  # the pair-key syntax "I,J", shared with Fault's where

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

__all__ = [
    "CPU_VENDORS", "DEFAULT_LATENCY_US", "FAULT_KINDS", "FAULT_PATHS", "IOMMU_MODES", "PCIE_CLASS_DERATE",
    "Description", "Fault", "GpuDesc", "HostDesc", "LinkModel", "NvLinkDesc", "build_description",
    "load_description", "parse_description",
]

_CPULIST_RE = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
_UUID_RE = re.compile(r"^GPU-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_TOML_LINE_RE = re.compile(r"\(at line (\d+), column (\d+)\)")


# ============================================================================ loading


_BUILTIN_TEXT_CACHE: Dict[str, Tuple[str, Dict[str, Any]]] = {}


#: Generated machines of any size, e.g. "synthetic-64gpu" (see generate.py), N in SYNTHETIC_GPUS.
_SYNTHETIC_RE = re.compile(r"^synthetic-([0-9]+)gpu$")
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
    from .catalog import builtin_names, builtin_path

    text_arg = str(name_or_path)
    synthetic = _SYNTHETIC_RE.match(text_arg)
    if synthetic and not os.path.exists(text_arg):
        from .generate import generate_description

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
        cached = _BUILTIN_TEXT_CACHE.get(text_arg)
        if cached is None:
            path = builtin_path(text_arg)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            cached = (text, _resolve_extends(_toml_loads(text, path), path, text))
            _BUILTIN_TEXT_CACHE[text_arg] = cached
        text, data = cached
        return build_description(data, f"builtin:{text_arg}", text=text, source="builtin",
                                 default_name=text_arg)
    path = text_arg
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise InputFileError(path, "no such file (give a built-in machine name or the path of a "
                             f"description; built-ins: {', '.join(builtin_names())})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(path, f"cannot read: {exc}") from None
    return parse_description(text, path)


def parse_description(text: str, path: str = "<text>") -> Description:
    """Parse description TOML text; ``path`` names it in errors (and resolves ``matrix_file``)."""
    data = _resolve_extends(_toml_loads(text, path), path, text)
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


def _resolve_extends(data: Dict[str, Any], path: str, text: str, depth: int = 0) -> Dict[str, Any]:
    """``extends = "NAME-or-path"``: the base description's data with this file's on top."""
    if "extends" not in data:
        return data
    ctx = _Ctx(path, text)
    ref = data["extends"]
    if not isinstance(ref, str):
        raise ctx.error(f"expected a built-in name or a path, got {ref!r}", "extends")
    if depth > 8:
        raise ctx.error("descriptions extend each other in a loop", "extends")
    from .catalog import builtin_names, builtin_path

    if ref in builtin_names() and not ref.endswith(".toml"):
        base_path = builtin_path(ref)
    else:
        base_path = ref if os.path.isabs(ref) or path.startswith(("<", "builtin:")) else \
            os.path.join(os.path.dirname(os.path.abspath(path)), ref)
    try:
        with open(base_path, encoding="utf-8") as f:
            base_text = f.read()
    except OSError:
        raise ctx.error(f"cannot read {ref!r}: not a built-in machine ({', '.join(builtin_names())}) "
                        "nor a readable file", "extends") from None
    base = _resolve_extends(_toml_loads(base_text, base_path), base_path, base_text, depth + 1)
    base = {k: v for k, v in base.items() if k not in ("name", "summary")}
    over = {k: v for k, v in data.items() if k != "extends"}
    return _merge(base, over)


def _toml_loads(text: str, path: str) -> Dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = _TOML_LINE_RE.search(msg)
        line = int(m.group(1)) if m else None
        msg = _TOML_LINE_RE.sub("", msg).strip()
        raise InputFileError(path, f"TOML syntax error: {msg}", line=line) from None


# ============================================================================ building


class _Ctx:
    """Error reporting for one file: key paths, line lookup."""

    def __init__(self, path: str, text: str):
        self.path = path
        self.text = text
        self._lines = text.splitlines() if text else []

    def error(self, message: str, *key: Any) -> InputFileError:
        return InputFileError(self.path, message, line=self.line_of(key) if key else None,
                              key=_key_text(key) if key else None)

    def line_of(self, key: Sequence[Any]) -> Optional[int]:
        """Best-effort 1-based line of a key path such as ("gpu", 3, "numa_node")."""
        if not self._lines:
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
        for no, raw in enumerate(self._lines, 1):
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


def _key_text(key: Sequence[Any]) -> str:
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


_TOP_KEYS = {"extends", "name", "summary", "matrix", "matrix_file", "pairs", "pcie_pairs", "nvswitch",
             "nvswitches", "nvswitch_bus_ids", "gpu_count", "defaults", "gpu", "host",
             "link_model", "p2p", "fault", "nic",
             "cluster"}  # a cluster's [cluster] table: read by cluster_description.py
_GPU_KEYS = {"bus_id", "uuid", "name", "numa_node", "cpu_affinity", "pcie_gen", "pcie_width",
             "pcie_gen_current", "pcie_width_current", "pcie_replay", "nvlink_version", "nvlinks",
             "nvlinks_down", "nvlink_errors", "mig", "model"} | HEALTH_KEYS
_DEFAULT_KEYS = _GPU_KEYS - {"bus_id", "uuid"}
_HOST_KEYS = {"iommu", "acs_redirect", "driver_version", "nvml_version", "cuda_driver_version",
              "hostname", "kernel", "cmdline", "cpu_vendor", "iommu_group_type"}
_FAULT_KEYS = {"where", "what", "path", "rate", "factor", "description", "width", "gen"}


def _check_keys(ctx: _Ctx, table: Any, allowed: set, *key: Any) -> Dict[str, Any]:
    if not isinstance(table, dict):
        raise ctx.error(f"expected a table, got {type(table).__name__}", *key)
    for k in table:
        if k not in allowed:
            raise ctx.error(f"unknown key {k!r}; allowed: {', '.join(sorted(allowed))}", *key, k)
    return table


def _int(ctx, value, lo, hi, *key) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise ctx.error(f"expected an integer in {lo}..{hi}, got {value!r}", *key)
    return value


def _str(ctx, value, *key) -> str:
    if not isinstance(value, str):
        raise ctx.error(f"expected a string, got {value!r}", *key)
    return value


def _num(ctx, value, *key, positive=True) -> float:
    # TOML has nan and inf: neither is a rate or a latency
    if (not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value)
            or (positive and value <= 0)):
        raise ctx.error(f"expected a finite {'positive ' if positive else ''}number, got {value!r}", *key)
    return float(value)


def build_description(data: Dict[str, Any], path: str, text: str = "", source: str = "file",
                      default_name: str = "sim") -> Description:
    """Validate parsed TOML ``data`` and build the Description (InputFileError on bad data).

    ``text`` (the file's text) only serves to find line numbers for errors.
    """
    ctx = _Ctx(path, text)
    _check_keys(ctx, data, _TOP_KEYS)
    name = _str(ctx, data.get("name", default_name), "name")
    summary = _str(ctx, data.get("summary", ""), "summary")

    defaults = _check_keys(ctx, data.get("defaults", {}), _DEFAULT_KEYS, "defaults")
    host_raw = _check_keys(ctx, data.get("host", {}), _HOST_KEYS, "host")

    # --- the pair matrix, given as text or as a file
    matrix = None
    if "matrix" in data and "matrix_file" in data:
        raise ctx.error("give the matrix as `matrix` text or `matrix_file`, not both", "matrix_file")
    if "matrix" in data:
        mtext = _str(ctx, data["matrix"], "matrix")
        matrix = _parse_matrix(ctx, mtext, offset=_matrix_offset(ctx))
    elif "matrix_file" in data:
        mpath = _str(ctx, data["matrix_file"], "matrix_file")
        if not os.path.isabs(mpath) and not path.startswith(("<", "builtin:")):
            mpath = os.path.join(os.path.dirname(os.path.abspath(path)), mpath)
        from gputopo.probe.smi_parser import decode_smi_bytes

        try:
            with open(mpath, "rb") as f:
                mtext = decode_smi_bytes(f.read())  # as --from-smi reads it: UTF-8 or PowerShell's UTF-16
        except OSError as exc:
            raise ctx.error(f"cannot read matrix file {mpath}: {exc.strerror or exc}", "matrix_file") from None
        matrix = _parse_matrix(_Ctx(mpath, mtext), mtext, offset=0, source=mpath)
    nvswitch = data.get("nvswitch", False)
    if not isinstance(nvswitch, bool):
        raise ctx.error(f"expected true or false, got {nvswitch!r}", "nvswitch")
    if matrix is not None and "pairs" in data:
        raise ctx.error("give the pair classes as `matrix` or as [pairs], not both", "pairs")

    # --- GPUs
    gpu_entries = data.get("gpu")
    if gpu_entries is None:
        if matrix is not None:
            n = matrix.gpu_count
            if "gpu_count" in data and data["gpu_count"] != n:
                raise ctx.error(f"gpu_count = {data['gpu_count']!r} but the matrix has {n} GPUs", "gpu_count")
        elif "gpu_count" in data:
            n = _int(ctx, data["gpu_count"], 1, 4096, "gpu_count")
        else:
            raise ctx.error("no GPUs: add [[gpu]] entries (or a matrix, or gpu_count)", "gpu")
        gpu_entries = [{} for _ in range(n)]
    else:
        if not isinstance(gpu_entries, list) or not gpu_entries:
            raise ctx.error("expected one or more [[gpu]] tables", "gpu")
        n = len(gpu_entries)
        if "gpu_count" in data and data["gpu_count"] != n:
            raise ctx.error(f"gpu_count = {data['gpu_count']!r} but there are {n} [[gpu]] entries", "gpu_count")
        if matrix is not None and matrix.gpu_count != n:
            raise ctx.error(f"the matrix has {matrix.gpu_count} GPUs but there are {n} [[gpu]] entries",
                            "matrix")
    if not (matrix is not None or "pairs" in data or nvswitch):
        raise ctx.error("no pair classes: give `matrix` (nvidia-smi topo -m text), a [pairs] table, "
                        "or nvswitch = true", "pairs")

    gpus, specs = _build_gpus(ctx, name, gpu_entries, defaults, matrix)

    # --- faults (validated before NVLinks, which they may take down)
    faults = _build_faults(ctx, data.get("fault", []), n)

    # --- wired classes and PCIe classes
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
                wired[(i, j)] = _lc(pcie[(i, j)])  # NVLink part filled below
            elif cls is not None:
                wired[(i, j)] = cls
            else:
                wired[(i, j)] = _lc(pcie[(i, j)])

    # --- NVLinks
    switch_ids: List[str] = []
    peer_links: Dict[Tuple[int, int], Tuple[List[int], List[int]]] = {}
    if nvswitch:
        switch_ids = _wire_switch(ctx, data, gpus, specs, wired)
    else:
        peer_links = _wire_direct(ctx, gpus, specs, wired)
    _apply_link_downs(ctx, gpus, specs, faults, wired, nvswitch, peer_links)
    nv_active: Dict[Tuple[int, int], int] = {}
    if not nvswitch:
        for (i, j), (li, lj) in peer_links.items():
            nv_active[(i, j)] = sum(1 for a in li if gpus[i].nvlinks[a].active)

    # --- downtrained faults change what NVML reports of the GPU's PCIe link
    for k, f in enumerate(faults):
        if f.what != "downtrained":
            continue
        g = gpus[f.gpus[0]]
        healthy = _pcie_theory(g)
        width = f.width if f.width is not None else max(1, g.pcie_width_max // 2)
        gen = f.gen if f.gen is not None else g.pcie_gen_max
        if width > g.pcie_width_max or gen > g.pcie_gen_max:
            raise ctx.error(f"downtrained to x{width} gen{gen} but GPU {g.index} has at most "
                            f"x{g.pcie_width_max} gen{g.pcie_gen_max}", "fault", k)
        g.pcie_width = min(g.pcie_width, width)
        g.pcie_gen = min(g.pcie_gen, gen)
        if not f.factor_given:
            f.factor = round(min(1.0, (pcie_gbps(gen, width) or healthy) / healthy), 4)

    # --- host
    host = _build_host(ctx, host_raw, name)

    taken = {g.lspci_bdf: f"GPU {g.index}" for g in gpus}
    taken.update({PciAddress.parse(s).lspci: "an NVSwitch" for s in switch_ids})
    nics = parse_nics(ctx, data.get("nic", []), gpus, taken)
    desc = Description(name=name, summary=summary, path=path, gpus=gpus, host=host, faults=faults,
                       nvswitch=nvswitch, nvswitch_bus_ids=switch_ids, source=source, nics=nics,
                       _wired=wired, _pcie=pcie, _nv_active=nv_active, _raw=data, _text=text)
    check_class_faults(ctx, faults, desc.pairs(), desc.link_class)
    desc._efficiency, desc._link_rules = _parse_link_model(ctx, data.get("link_model", {}))
    desc._p2p_rules = _parse_p2p(ctx, data.get("p2p", {}), n)

    acs = host_raw.get("acs_redirect", False)
    if acs is True:
        host.acs_redirect_bridges = [b.bdf for b in desc.pcie_tree.bridges if b.acs_capable]
    elif isinstance(acs, list):
        known = desc.pcie_tree.by_bdf
        out = []
        for k, bdf in enumerate(acs):
            try:
                key = PciAddress.parse(_str(ctx, bdf, "host", "acs_redirect")).lspci
            except ValueError as exc:
                raise ctx.error(str(exc), "host", "acs_redirect") from None
            if key not in known or not known[key].acs_capable:
                names = ", ".join(b.bdf for b in desc.pcie_tree.bridges if b.acs_capable)
                raise ctx.error(f"{bdf!r} is not an ACS-capable bridge above the GPUs; they are: {names}",
                                "host", "acs_redirect")
            out.append(key)
        host.acs_redirect_bridges = out
    elif acs is not False:
        raise ctx.error("expected true, false or a list of bridge addresses", "host", "acs_redirect")
    return desc


# ---------------------------------------------------------------------------- matrix


@functools.lru_cache(maxsize=64)
def _parse_matrix_cached(text: str, source: str):
    from gputopo.probe.smi_parser import parse_topo_matrix

    return parse_topo_matrix(text, source)


def _matrix_offset(ctx: _Ctx) -> int:
    """Lines before the matrix text's first line in the file (for error line numbers)."""
    for no, raw in enumerate(ctx._lines, 1):
        m = re.match(r'^\s*matrix\s*=\s*("""|\'\'\'|"|\')(.*)$', raw)
        if m:
            starts_next = m.group(1) in ('"""', "'''") and m.group(2).strip() == ""
            return no if starts_next else no - 1
    return 0


def _parse_matrix(ctx: _Ctx, text: str, offset: int, source: Optional[str] = None):
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


def _parse_pair_ref(ctx, ref, n, *key) -> Tuple[int, int]:
    if isinstance(ref, str):
        m = _PAIR_KEY_RE.match(ref)
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


def _parse_class(ctx, text, pcie_only, *key) -> LinkClass:
    try:
        cls = LinkClass.parse(_str(ctx, text, *key))
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

    default = None
    for key, value in table.items():
        if key == "default":
            if value == "numa":
                default = "numa"
            else:
                default = _parse_class(ctx, value, pcie_only, name, key)
                if default.is_nvlink:
                    raise ctx.error("the default class must be a PCIe class or \"numa\"", name, key)
        elif _PAIR_KEY_RE.match(key):
            put(_parse_pair_ref(ctx, key, n, name, key), _parse_class(ctx, value, pcie_only, name, key), key)
        else:
            cls = _parse_class(ctx, key, pcie_only, name, key)
            if not isinstance(value, list):
                raise ctx.error(f"write either \"I,J\" = \"{cls}\" or {cls} = [\"I,J\", ...]", name, key)
            for ref in value:
                put(_parse_pair_ref(ctx, ref, n, name, key), cls, key)
    if not need_all:
        return out
    for i in range(n):
        for j in range(i + 1, n):
            if (i, j) in out:
                continue
            if default is None:
                raise ctx.error(f"pair {i},{j} has no class; list it or set default = \"SYS\" "
                                "(or \"numa\": NODE on one NUMA node, SYS across)", name)
            out[(i, j)] = _lc(_numa_kind(gpus[i], gpus[j])) if default == "numa" else default
    return out


# ---------------------------------------------------------------------------- GPUs


def _build_gpus(ctx, machine, entries, defaults, matrix):
    gpus: List[GpuDesc] = []
    specs: List[Dict[str, Any]] = []
    seen_bus: Dict[str, int] = {}
    for idx, entry in enumerate(entries):
        key = ("gpu", idx)
        _check_keys(ctx, entry, _GPU_KEYS, *key)
        spec = dict(defaults)
        spec.update(entry)
        specs.append(spec)

        def where(k):
            return key + (k,) if k in entry else ("defaults", k)

        name = spec.get("name")
        if name is None:
            raise ctx.error("missing GPU name (set name in [defaults] or in the [[gpu]] entry)", *key, "name")
        name = _str(ctx, name, *where("name"))
        model, model_key = resolve_model(ctx, name, spec.get("model"), where("name"), where("model"))

        if "bus_id" in spec:
            try:
                addr = PciAddress.parse(_str(ctx, spec["bus_id"], *key, "bus_id"))
            except ValueError as exc:
                raise ctx.error(str(exc), *key, "bus_id") from None
        else:
            addr = PciAddress(idx // 8, 0x18 + (idx % 8) * 0x18, 0, 0)
        if addr.nvml in seen_bus:
            raise ctx.error(f"bus id {addr.lspci} is also GPU {seen_bus[addr.nvml]}'s", *key, "bus_id")
        seen_bus[addr.nvml] = idx

        if "uuid" in spec:
            uid = _str(ctx, spec["uuid"], *key, "uuid")
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
                numa = _int(ctx, v, 0, 1023, *where("numa_node"))
        elif matrix is not None and isinstance(matrix.numa_affinity.get(idx), int):
            numa = matrix.numa_affinity[idx]
        elif matrix is not None:
            numa = None
        else:
            numa = 0

        if "cpu_affinity" in spec:
            v = spec["cpu_affinity"]
            if v == "unsupported":
                cpus = None
            else:
                cpus = _str(ctx, v, *where("cpu_affinity")).replace(" ", "")
                if not _CPULIST_RE.match(cpus):
                    raise ctx.error(f"expected a CPU list like \"0-31,64-95\", got {v!r}", *where("cpu_affinity"))
        elif matrix is not None and matrix.cpu_affinity.get(idx):
            cpus = str(matrix.cpu_affinity[idx]).replace(" ", "")
            if not _CPULIST_RE.match(cpus):
                cpus = None
        else:
            node = numa or 0
            cpus = f"{node * 32}-{node * 32 + 31}"

        gen_max = _int(ctx, spec.get("pcie_gen", 4), 1, 6, *where("pcie_gen"))
        width_max = _int(ctx, spec.get("pcie_width", 16), 1, 32, *where("pcie_width"))
        if width_max not in (1, 2, 4, 8, 12, 16, 32):
            raise ctx.error(f"PCIe width must be 1, 2, 4, 8, 12, 16 or 32 lanes, got {width_max}",
                            *where("pcie_width"))
        gen_cur = _int(ctx, spec.get("pcie_gen_current", gen_max), 1, gen_max, *where("pcie_gen_current"))
        width_cur = _int(ctx, spec.get("pcie_width_current", width_max), 1, width_max,
                         *where("pcie_width_current"))
        replay = _int(ctx, spec.get("pcie_replay", 0), 0, 2**32 - 1, *where("pcie_replay"))
        version = spec.get("nvlink_version", model.nvlink_version)
        if version is not None:
            version = _int(ctx, version, 1, 6, *where("nvlink_version"))
        mig = spec.get("mig", "disabled" if model.mig_capable else "unsupported")
        if mig not in ("disabled", "enabled", "unsupported"):
            raise ctx.error(f"expected \"disabled\", \"enabled\" or \"unsupported\", got {mig!r}", *where("mig"))
        gpus.append(GpuDesc(index=idx, name=name, uuid=uid, bus_id=addr.nvml, numa_node=numa,
                            cpu_affinity=cpus, pcie_gen=gen_cur, pcie_gen_max=gen_max,
                            pcie_width=width_cur, pcie_width_max=width_max, pcie_replay=replay,
                            pcie_width_healthy=width_cur,
                            nvlink_version=version, mig_mode=None if mig == "unsupported" else mig,
                            health=parse_health(ctx, spec, where, name), model=model_key))
    check_unique_uuids(ctx, [(g.uuid, ("gpu", g.index, "uuid")) for g in gpus])
    return gpus, specs


def _ports(ctx, spec, idx, needed) -> int:
    if "nvlinks" in spec:
        ports = _int(ctx, spec["nvlinks"], 0, 36, "gpu", idx, "nvlinks")
        if ports < needed:
            raise ctx.error(f"GPU {idx} has {ports} NVLink ports but its pairs need {needed}",
                            "gpu", idx, "nvlinks")
        return ports
    return needed


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
            _int(ctx, v, 0, 2**64 - 1, *key, k)
        return d

    for k, v in table.items():
        if k.isdigit():
            link = int(k)
            if link >= ports:
                raise ctx.error(f"GPU {idx} has no NVLink {link} (it has {ports})", *key, k)
            per_link.setdefault(link, {}).update(counters(v, k))
        elif k in NVLINK_ERROR_COUNTERS:
            _int(ctx, v, 0, 2**64 - 1, *key, k)
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
        ports = _ports(ctx, specs[g.index], g.index, need[g.index])
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
            switch_ids = [PciAddress.parse(_str(ctx, b, "nvswitch_bus_ids")).nvml for b in raw]
        except ValueError as exc:
            raise ctx.error(str(exc), "nvswitch_bus_ids") from None
    else:
        count = _int(ctx, data.get("nvswitches", DEFAULT_NVSWITCHES.get(version, 4)), 1, 64, "nvswitches")
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
                wired[(i, j)] = _lc(f"NV{m}")
    return switch_ids


def _apply_link_downs(ctx, gpus, specs, faults, wired, nvswitch, peer_links) -> None:
    down = set()  # (gpu, link)
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


# ---------------------------------------------------------------------------- faults


def _build_faults(ctx, entries, n) -> List[Fault]:
    if not isinstance(entries, list):
        raise ctx.error("expected [[fault]] tables", "fault")
    faults = []
    for k, entry in enumerate(entries):
        _check_keys(ctx, entry, _FAULT_KEYS, "fault", k)
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


# ---------------------------------------------------------------------------- host, models, p2p


def _build_host(ctx, raw, machine) -> HostDesc:
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
    driver = _str(ctx, raw.get("driver_version", "535.154.05"), "host", "driver_version")
    cuda = raw.get("cuda_driver_version", 12020)
    if isinstance(cuda, str):
        m = re.match(r"^(\d+)\.(\d+)$", cuda.strip())
        if not m:
            raise ctx.error(f"expected e.g. 12040 or \"12.4\", got {cuda!r}", "host", "cuda_driver_version")
        cuda = int(m.group(1)) * 1000 + int(m.group(2)) * 10
    cuda = _int(ctx, cuda, 1000, 99990, "host", "cuda_driver_version")
    nvml = _str(ctx, raw.get("nvml_version", f"{cuda // 1000}.{driver}"), "host", "nvml_version")
    kernel = _str(ctx, raw.get("kernel", "5.15.0-91-generic"), "host", "kernel")
    if "cmdline" in raw:
        cmdline = _str(ctx, raw["cmdline"], "host", "cmdline")
    else:
        flags = {
            ("intel", "translated"): "intel_iommu=on", ("intel", "passthrough"): "intel_iommu=on iommu=pt",
            ("intel", "off"): "", ("amd", "translated"): "amd_iommu=on", ("amd", "passthrough"): "iommu=pt",
            ("amd", "off"): "amd_iommu=off",
        }[(vendor, iommu)]
        cmdline = f"BOOT_IMAGE=/boot/vmlinuz-{kernel} root=/dev/mapper/vg0-root ro quiet splash"
        cmdline += f" {flags}" if flags else ""
    return HostDesc(iommu=iommu, acs_redirect_bridges=[], driver_version=driver, nvml_version=nvml,
                    cuda_driver_version=cuda,
                    hostname=_str(ctx, raw.get("hostname", f"sim-{machine}"), "host", "hostname"),
                    kernel=kernel, cmdline=cmdline, cpu_vendor=vendor, iommu_group_type=gtype)


def _parse_link_model(ctx, table) -> Tuple[float, Dict[str, Dict[str, float]]]:
    if not isinstance(table, dict):
        raise ctx.error("expected a table", "link_model")
    eff = DEFAULT_EFFICIENCY
    rules: Dict[str, Dict[str, float]] = {}
    for key, value in table.items():
        if key == "efficiency":
            eff = _num(ctx, value, "link_model", key)
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
        _check_keys(ctx, value, allowed, "link_model", key)
        rules[key] = {k: _num(ctx, v, "link_model", key, k) for k, v in value.items()}
    return eff, rules


def _parse_p2p(ctx, table, n) -> Dict[str, Dict[str, str]]:
    if not isinstance(table, dict):
        raise ctx.error("expected a table", "p2p")
    rules: Dict[str, Dict[str, str]] = {}
    for key, value in table.items():
        if key == "default" or key == "NV":
            rule = key
        elif _PAIR_KEY_RE.match(key):
            i, j = _parse_pair_ref(ctx, key, n, "p2p", key)
            rule = f"{i},{j}"
        else:
            rule = str(_parse_class(ctx, key, False, "p2p", key))
        if isinstance(value, str):
            value = {c: value for c in P2P_CAPS}
        _check_keys(ctx, value, set(P2P_CAPS), "p2p", key)
        for cap, status in value.items():
            if status not in P2P_STATUSES:
                raise ctx.error(f"unknown P2P status {status!r}; statuses: {', '.join(P2P_STATUSES)}",
                                "p2p", key, cap)
        rules.setdefault(rule, {}).update(value)
    return rules
