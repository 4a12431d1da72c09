#!/usr/bin/env python3
"""The GPU check's comparisons (tools/gpu_check.py runs each as a step of its own):

    scan  DIR   gputopo's `scan --json` (and `--format smi`) against nvidia-smi's own answers
                captured in DIR (`-q -x` XML, `--query-gpu` CSV, `topo -m`, `nvlink -s`), field by
                field: equal / differs / n/a with the reason. Writes comparison.json and .md.
    ratio DIR   `bench --self` against the bare CUDA-event loop of the same copies
                (benchmarks/cuda_self.py): gputopo's GB/s / the loop's, per direction and size,
                target >= 0.97 at the largest size; with the PCIe and HBM theoretical rates.
                Writes self-ratio.json and .md.

nvidia-smi reads NVML too, but through NVIDIA's code: a field gputopo reads wrongly (a wrong
call, index, unit) shows as `differs`. Values that move between two readings (current PCIe
generation, temperature) are compared as they were read, moments apart, and say so.
The XML is parsed as XML (xml.etree), never as text; `topo -m` through gputopo's own parser
(gputopo.probe.smi, tested on the real outputs in tests/fixtures/topo).

Exit codes: 0 nothing differs (or below target), 1 something does, 2 an input the comparison
needs is missing (scan.json / bench-self.json).
"""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

# The files the check writes into its folder, read here.
SCAN_JSON, SCAN_SMI = "scan.json", "scan-smi.txt"
SMI_XML, SMI_CSV, SMI_TOPO, SMI_NVLINK = ("nvidia-smi-q.xml", "nvidia-smi-query.csv",
                                          "nvidia-smi-topo-m.txt", "nvidia-smi-nvlink-s.txt")
BENCH_SELF_JSON, CUDA_SELF_JSON = "bench-self.json", "cuda-self.json"

#: What the check asks `nvidia-smi --query-gpu` for (each is in `nvidia-smi --help-query-gpu`).
QUERY_FIELDS = ("index", "name", "uuid", "pci.bus_id", "driver_version", "memory.total",
                "pcie.link.gen.current", "pcie.link.gen.max", "pcie.link.width.current",
                "pcie.link.width.max", "mig.mode.current", "persistence_mode", "ecc.mode.current",
                "ecc.mode.pending", "power.limit", "temperature.gpu", "compute_cap", "vbios_version")

EQUAL, DIFFERS, NA = "equal", "differs", "n/a"
#: Ratio target: gputopo's copies at least this fraction of the bare loop's GB/s.
RATIO_TARGET = 0.97
_NA_TEXT = {"", "n/a", "[n/a]", "[not supported]", "not supported", "none", "n/a."}
NOT_READ = object()  # a source that was not captured at all


# ----------------------------------------------------------------------------- parsing


def _is_na(v: Any) -> bool:
    return v is None or (isinstance(v, dict) and "not_available" in v) or \
        (isinstance(v, str) and v.strip().lower() in _NA_TEXT)


def _num(text: Any) -> Optional[float]:
    """"300.00 W" -> 300.0, "16x" -> 16.0, "34 C" -> 34.0, "81559 MiB" -> 81559.0; None for N/A."""
    if _is_na(text):
        return None
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    m = re.match(r"^\s*(-?[0-9]+(?:\.[0-9]+)?)", str(text))
    return float(m.group(1)) if m else None


def parse_xml(text: str) -> Dict[str, Any]:
    """`nvidia-smi -q -x` -> {"driver_version", "cuda_version", "attached_gpus", "gpus": [...]},
    each GPU a flat dict of the elements compared (text as nvidia-smi wrote it)."""
    root = ET.fromstring(text)

    def t(node, path):
        el = node.find(path)
        return el.text.strip() if el is not None and el.text is not None else None

    out: Dict[str, Any] = {"driver_version": t(root, "driver_version"),
                           "cuda_version": t(root, "cuda_version"),
                           "attached_gpus": t(root, "attached_gpus"), "gpus": []}
    link = "pci/pci_gpu_link_info/"
    for g in root.findall("gpu"):
        d = {"id": g.get("id"), "product_name": t(g, "product_name"), "uuid": t(g, "uuid"),
             "pci_bus_id": t(g, "pci/pci_bus_id"),
             "max_link_gen": t(g, link + "pcie_gen/max_link_gen"),
             "current_link_gen": t(g, link + "pcie_gen/current_link_gen"),
             "max_link_width": t(g, link + "link_widths/max_link_width"),
             "current_link_width": t(g, link + "link_widths/current_link_width"),
             "replay_counter": t(g, "pci/replay_counter"),
             "current_mig": t(g, "mig_mode/current_mig"),
             "persistence_mode": t(g, "persistence_mode"),
             "fb_total": t(g, "fb_memory_usage/total"),
             "current_ecc": t(g, "ecc_mode/current_ecc"), "pending_ecc": t(g, "ecc_mode/pending_ecc"),
             "power_limit": t(g, "gpu_power_readings/current_power_limit")
             or t(g, "power_readings/power_limit"),  # drivers before 530
             "gpu_temp": t(g, "temperature/gpu_temp"),
             "remapped_row_corr": t(g, "remapped_rows/remapped_row_corr"),
             "remapped_row_unc": t(g, "remapped_rows/remapped_row_unc"),
             "remapped_row_pending": t(g, "remapped_rows/remapped_row_pending"),
             "remapped_row_failure": t(g, "remapped_rows/remapped_row_failure"),
             "fabric_state": t(g, "fabric/state")}
        for scope in ("volatile", "aggregate"):
            base = f"ecc_errors/{scope}/"
            d[f"ecc_{scope}_uncorrected"] = [t(g, base + k) for k in
                                             ("sram_uncorrectable_parity", "sram_uncorrectable_secded",
                                              "dram_uncorrectable")]
            d[f"ecc_{scope}_corrected"] = [t(g, base + k) for k in ("sram_correctable", "dram_correctable")]
        out["gpus"].append(d)
    return out


def parse_query_csv(text: str) -> List[Dict[str, Optional[str]]]:
    """`nvidia-smi --query-gpu=... --format=csv,nounits` (header line kept) -> a dict per GPU,
    keyed by field name (the header's " [MiB]" unit notes dropped)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    names = [re.sub(r"\s*\[.*\]$", "", c.strip()) for c in lines[0].split(",")]
    rows: List[Dict[str, Optional[str]]] = []
    for ln in lines[1:]:
        cells = [c.strip() for c in ln.split(",")]
        if len(cells) != len(names):  # a name with a comma would shift the cells: say so
            raise ValueError(f"{len(cells)} cells for {len(names)} fields: {ln!r}")
        rows.append(dict(zip(names, cells)))
    return rows


_NVLINK_GPU = re.compile(r"^GPU (\d+): ")
_NVLINK_LINK = re.compile(r"^\s*Link (\d+): (.*)$")


def parse_nvlink_status(text: str) -> Dict[int, Dict[int, Optional[float]]]:
    """`nvidia-smi nvlink -s` -> {GPU: {link: GB/s, or None for "<inactive>"}}; a GPU printed
    with "all links are inActive" (or nothing) under its header gets {}."""
    out: Dict[int, Dict[int, Optional[float]]] = {}
    gpu: Optional[int] = None
    for line in text.splitlines():
        m = _NVLINK_GPU.match(line)
        if m:
            gpu = int(m.group(1))
            out[gpu] = {}
            continue
        m = _NVLINK_LINK.match(line)
        if m and gpu is not None:
            rate = re.match(r"^([0-9.]+) GB/s", m.group(2).strip())
            out[gpu][int(m.group(1))] = float(rate.group(1)) if rate else None
    return out


def _cpu_set(text: Any) -> Optional[frozenset]:
    """"0-15,32-47" -> the CPUs; None for N/A or text that is no CPU list."""
    if _is_na(text):
        return None
    cpus: set = set()
    for part in str(text).replace(" ", "").split(","):
        m = re.match(r"^(\d+)(?:-(\d+))?$", part)
        if not m:
            return None
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        cpus.update(range(lo, hi + 1))
    return frozenset(cpus)


# ----------------------------------------------------------------------------- the comparison


class Fields:
    """The list of compared fields, one dict each: field, gputopo, nvidia_smi, source, verdict, why."""

    def __init__(self):
        self.rows: List[Dict[str, Any]] = []

    def add(self, field: str, ours: Any, theirs: Any, source: str, verdict: str, why: str = "") -> None:
        self.rows.append({"field": field, "gputopo": _show(ours), "nvidia_smi": _show(theirs),
                          "source": source, "verdict": verdict, "why": why})

    def same(self, field: str, ours: Any, theirs: Any, source: str, *, norm=None, tol: float = 0.0,
             note: str = "") -> None:
        """Compare a value of the scan with nvidia-smi's: ``norm`` makes both comparable (None for
        a value that says n/a); ``tol`` an absolute tolerance for numbers."""
        if theirs is NOT_READ:
            self.add(field, ours, None, source, NA, f"{source.split(':')[0]} was not captured")
            return
        norm = norm or _text
        a, b = (None if _is_na(ours) else norm(ours)), (None if _is_na(theirs) else norm(theirs))
        if a is None and b is None:
            self.add(field, ours, theirs, source, EQUAL, _join("both say not available", note))
        elif a is None:
            why = (ours.get("not_available") if isinstance(ours, dict) else "no value") or "no value"
            self.add(field, ours, theirs, source, DIFFERS,
                     _join(f"gputopo has none ({why}); nvidia-smi has one", note))
        elif b is None:
            self.add(field, ours, theirs, source, DIFFERS, _join("nvidia-smi says not available", note))
        elif isinstance(a, float) and isinstance(b, float):
            ok = abs(a - b) <= tol
            self.add(field, ours, theirs, source, EQUAL if ok else DIFFERS,
                     _join(f"within {tol:g}" if tol and ok else f"off by {a - b:+g}" if not ok else "", note))
        else:
            self.add(field, ours, theirs, source, EQUAL if a == b else DIFFERS, note)

    def na(self, field: str, ours: Any, theirs: Any, source: str, why: str) -> None:
        self.add(field, ours, theirs, source, NA, why)

    def counts(self) -> Dict[str, int]:
        out = {EQUAL: 0, DIFFERS: 0, NA: 0}
        for r in self.rows:
            out[r["verdict"]] += 1
        return out


def _join(*parts: str) -> str:
    return "; ".join(p for p in parts if p)


def _show(v: Any) -> Any:
    if v is NOT_READ:
        return None
    if isinstance(v, frozenset):
        return sorted(v)
    return v


def _text(v: Any) -> Any:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    s = str(v).strip()
    n = _num(s)
    if n is not None and re.match(r"^-?[0-9]+(\.[0-9]+)?$", s):
        return n
    return s.lower()


def _lower(v: Any) -> Any:
    return str(v).strip().lower()


def _number(v: Any) -> Optional[float]:
    return _num(v)


def _on_off(v: Any) -> Any:
    """NVML's enabled/disabled and nvidia-smi's Enabled/Disabled (or Yes/No) alike."""
    s = str(v).strip().lower()
    return {"yes": "enabled", "no": "disabled", "true": "enabled", "false": "disabled",
            "on": "enabled", "off": "disabled"}.get(s, s)


def _yes_no(v: Any) -> Any:
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v).strip().lower()


def _sum(cells: Any) -> Any:
    """The sum of nvidia-smi's per-location ECC counts (sram parity + sec-ded + dram...), None
    when any is N/A."""
    if not isinstance(cells, list) or not cells or any(_num(c) is None for c in cells):
        return None
    return sum(_num(c) or 0.0 for c in cells)


def _read(dir_: Path, name: str, parse, notes: Dict[str, str]):
    p = dir_ / name
    if not p.is_file() or p.stat().st_size == 0:
        notes[name] = "missing (its step failed or did not run)"
        return NOT_READ
    try:
        out = parse(p.read_text(encoding="utf-8", errors="replace"))
    except Exception as e:  # noqa: BLE001 - an unreadable capture is a finding, not a crash
        notes[name] = f"unreadable: {type(e).__name__}: {e}"
        return NOT_READ
    notes[name] = "read"
    return out


def _topo_parse(text: str):
    from gputopo.probe.smi import parse_topo_matrix

    return parse_topo_matrix(text, "nvidia-smi topo -m")


def compare_scan(dir_: Path) -> Dict[str, Any]:
    notes: Dict[str, str] = {}
    scan = _read(dir_, SCAN_JSON, json.loads, notes)
    if scan is NOT_READ:
        return {"error": f"{SCAN_JSON} {notes[SCAN_JSON]}", "sources": notes, "fields": [],
                "counts": {EQUAL: 0, DIFFERS: 0, NA: 0}}
    xml = _read(dir_, SMI_XML, parse_xml, notes)
    rows = _read(dir_, SMI_CSV, parse_query_csv, notes)
    topo = _read(dir_, SMI_TOPO, _topo_parse, notes)
    nvl = _read(dir_, SMI_NVLINK, parse_nvlink_status, notes)
    f = Fields()
    host = scan.get("host") or {}
    gpus = scan.get("gpus") or []
    X, C, T, L = "nvidia-smi -q -x", "nvidia-smi --query-gpu", "nvidia-smi topo -m", "nvidia-smi nvlink -s"

    # machine-wide
    f.same("gpu_count", len(gpus), xml["attached_gpus"] if xml is not NOT_READ else NOT_READ,
           f"{X}: attached_gpus", norm=_number)
    f.same("gpu_count", len(gpus), len(rows) if rows is not NOT_READ else NOT_READ, f"{C}: rows",
           norm=_number)
    f.same("gpu_count", len(gpus), topo.gpu_count if topo is not NOT_READ else NOT_READ,
           f"{T}: GPU rows", norm=_number)
    f.same("host.driver_version", host.get("driver_version"),
           xml["driver_version"] if xml is not NOT_READ else NOT_READ, f"{X}: driver_version")
    f.same("host.driver_version", host.get("driver_version"),
           _col(rows, 0, "driver_version"), f"{C}: driver_version")
    f.same("host.cuda_driver_version", host.get("cuda_driver_version"),
           xml["cuda_version"] if xml is not NOT_READ else NOT_READ, f"{X}: cuda_version")

    for g in gpus:
        _compare_gpu(f, g, xml, rows, topo, nvl, X, C, T, L)
    _compare_pairs(f, scan, topo, T)
    _compare_smi_text(f, dir_, topo, notes, T)
    out = {"fields": f.rows, "counts": f.counts(), "sources": notes,
           "simulated": bool(scan.get("simulated")), "machine": scan.get("machine")}
    return out


def _col(rows, index: int, name: str) -> Any:
    if rows is NOT_READ:
        return NOT_READ
    for r in rows:
        if _num(r.get("index")) == index:
            return r.get(name)
    return None


def _compare_gpu(f: Fields, g: Dict[str, Any], xml, rows, topo, nvl, X: str, C: str, T: str, L: str) -> None:
    from gputopo.model.bus_id import try_parse as bus_norm  # "00000000:41:00.0" / "0000:41:00.0": one key

    k = g.get("nvml_index")
    p = f"gpu[{k}]."
    bus = bus_norm(g.get("pci_bus_id"))
    xg: Any = NOT_READ
    if xml is not NOT_READ:
        xg = next((x for x in xml["gpus"] if bus is not None and bus_norm(x.get("pci_bus_id") or x.get("id")) == bus),
                  None)
        if xg is None:
            f.add(p + "pci_bus_id", g.get("pci_bus_id"), [x.get("pci_bus_id") for x in xml["gpus"]],
                  f"{X}: pci/pci_bus_id", DIFFERS, "nvidia-smi has no GPU at this bus id")
            xg = NOT_READ
        else:
            f.add(p + "pci_bus_id", g.get("pci_bus_id"), xg.get("pci_bus_id"), f"{X}: pci/pci_bus_id",
                  EQUAL, "the same address (domain written with 8 or 4 digits)")
    cr: Any = NOT_READ
    if rows is not NOT_READ:
        cr = next((r for r in rows if bus is not None and bus_norm(r.get("pci.bus_id")) == bus), None)
        if cr is None:
            f.add(p + "pci_bus_id", g.get("pci_bus_id"), [r.get("pci.bus_id") for r in rows],
                  f"{C}: pci.bus_id", DIFFERS, "nvidia-smi has no GPU at this bus id")
            cr = NOT_READ

    def x(key):
        return NOT_READ if xg is NOT_READ else xg.get(key)

    def c(key):
        return NOT_READ if cr is NOT_READ else cr.get(key)

    pcie = g.get("pcie") or {}
    health = g.get("health") or {}
    f.same(p + "nvml_index", k, c("index"), f"{C}: index", norm=_number)
    f.same(p + "name", g.get("name"), x("product_name"), f"{X}: product_name", norm=_lower)
    f.same(p + "name", g.get("name"), c("name"), f"{C}: name", norm=_lower)
    f.same(p + "uuid", g.get("uuid"), x("uuid"), f"{X}: uuid", norm=_lower)
    f.same(p + "uuid", g.get("uuid"), c("uuid"), f"{C}: uuid", norm=_lower)
    moving = "the current generation drops while the GPU idles: read moments apart"
    for key, xk, ck, note in (("gen_max", "max_link_gen", "pcie.link.gen.max", ""),
                              ("gen_current", "current_link_gen", "pcie.link.gen.current", moving),
                              ("width_max", "max_link_width", "pcie.link.width.max", ""),
                              ("width_current", "current_link_width", "pcie.link.width.current", "")):
        f.same(p + "pcie." + key, pcie.get(key), x(xk), f"{X}: {xk}", norm=_number, note=note)
        f.same(p + "pcie." + key, pcie.get(key), c(ck), f"{C}: {ck}", norm=_number, note=note)
    f.same(p + "pcie.replay_counter", pcie.get("replay_counter"), x("replay_counter"),
           f"{X}: pci/replay_counter", norm=_number)
    f.same(p + "mig_mode", g.get("mig_mode"), x("current_mig"), f"{X}: mig_mode/current_mig", norm=_on_off)
    f.same(p + "mig_mode", g.get("mig_mode"), c("mig.mode.current"), f"{C}: mig.mode.current", norm=_on_off)
    theirs = x("fb_total") if xg is not NOT_READ else c("memory.total")
    f.na(p + "memory_total_mib", None, theirs, f"{X}: fb_memory_usage/total",
         "gputopo scan does not read a GPU's total memory (only the bench's free-memory check does)")
    f.same(p + "health.ecc_mode_current", health.get("ecc_mode_current"), x("current_ecc"),
           f"{X}: ecc_mode/current_ecc", norm=_on_off)
    f.same(p + "health.ecc_mode_current", health.get("ecc_mode_current"), c("ecc.mode.current"),
           f"{C}: ecc.mode.current", norm=_on_off)
    f.same(p + "health.ecc_mode_pending", health.get("ecc_mode_pending"), x("pending_ecc"),
           f"{X}: ecc_mode/pending_ecc", norm=_on_off)
    ecc = health.get("ecc_errors")
    for scope in ("volatile", "aggregate"):
        for kind, xkind in (("uncorrected", "uncorrected"), ("corrected", "corrected")):
            ours: Any = ecc.get(scope, {}).get(kind) if isinstance(ecc, dict) and isinstance(ecc.get(scope), dict) \
                else ecc
            cells = x(f"ecc_{scope}_{xkind}")
            theirs = NOT_READ if cells is NOT_READ else _sum(cells)
            f.same(p + f"health.ecc_errors.{scope}.{kind}", ours, theirs,
                   f"{X}: ecc_errors/{scope} (sum of its sram_*/dram_* {xkind} counts)", norm=_number)
    rr = health.get("remapped_rows")
    for ours_k, xk in (("corrected", "remapped_row_corr"), ("uncorrected", "remapped_row_unc"),
                       ("pending", "remapped_row_pending"), ("failure", "remapped_row_failure")):
        ours = rr.get(ours_k) if isinstance(rr, dict) and "not_available" not in rr else rr
        norm = _yes_no if ours_k in ("pending", "failure") else _number
        f.same(p + f"health.remapped_rows.{ours_k}", ours, x(xk), f"{X}: remapped_rows/{xk}", norm=norm)
    f.same(p + "health.persistence_mode", health.get("persistence_mode"), x("persistence_mode"),
           f"{X}: persistence_mode", norm=_on_off)
    f.same(p + "health.persistence_mode", health.get("persistence_mode"), c("persistence_mode"),
           f"{C}: persistence_mode", norm=_on_off)
    f.same(p + "health.power_limit_w", health.get("power_limit_w"), x("power_limit"),
           f"{X}: gpu_power_readings/current_power_limit", norm=_number, tol=0.5)
    f.same(p + "health.power_limit_w", health.get("power_limit_w"), c("power.limit"), f"{C}: power.limit",
           norm=_number, tol=0.5)
    f.same(p + "health.temperature_c", health.get("temperature_c"), x("gpu_temp"),
           f"{X}: temperature/gpu_temp", norm=_number, tol=5.0, note="read moments apart")
    if "fabric" in g:
        fab = g.get("fabric")
        ours = fab.get("state") if isinstance(fab, dict) and "state" in fab else fab
        f.same(p + "fabric.state", ours, x("fabric_state"), f"{X}: fabric/state",
               norm=lambda v: str(v).strip().lower().replace(" ", "-"))
    # topo -m: affinity columns of this GPU's row
    if topo is NOT_READ:
        for name in ("numa_node", "cpu_affinity", "gpu_memory_numa_node"):
            f.same(p + name, g.get(name), NOT_READ, f"{T}")
    elif k not in topo.gpu_indices:
        f.add(p + "topo_row", k, topo.gpu_indices, T, DIFFERS, f"nvidia-smi topo -m has no GPU{k} row")
    else:
        f.same(p + "numa_node", g.get("numa_node"), topo.numa_affinity.get(k), f"{T}: NUMA Affinity",
               norm=_number)
        f.same(p + "cpu_affinity", g.get("cpu_affinity"), topo.cpu_affinity.get(k), f"{T}: CPU Affinity",
               norm=_cpu_set)
        f.same(p + "gpu_memory_numa_node", g.get("gpu_memory_numa_node"), topo.gpu_numa_id.get(k),
               f"{T}: GPU NUMA ID", norm=_number)
    # NVLinks
    links = g.get("nvlinks")
    ours_links = links if isinstance(links, list) else []
    if nvl is NOT_READ:
        f.same(p + "nvlinks.active", None, NOT_READ, L)
        return
    theirs_links = nvl.get(k)
    if theirs_links is None:
        f.add(p + "nvlinks", len(ours_links), None, L, DIFFERS if ours_links else EQUAL,
              "nvidia-smi nvlink -s lists no such GPU" if ours_links else "no NVLink on either side")
        return
    active = sorted(lk["link"] for lk in ours_links if lk.get("active") is True)
    theirs_active = sorted(li for li, r in theirs_links.items() if r is not None)
    f.same(p + "nvlinks.active", active, theirs_active, f"{L}: links with a rate", norm=lambda v: tuple(v))
    if not theirs_links:
        f.na(p + "nvlinks.listed", len(ours_links), 0, L,
             "nvidia-smi lists no link for this GPU (none, or 'all links are inActive'): the port "
             "count cannot be compared")
    else:
        f.same(p + "nvlinks.listed", len(ours_links), len(theirs_links), f"{L}: links listed", norm=_number)
        states = {lk["link"]: lk.get("active") for lk in ours_links}
        off = [li for li, r in theirs_links.items() if li in states and states[li] != (r is not None)]
        f.add(p + "nvlinks.state_per_link", {li: states[li] for li in sorted(states)} if off else "as listed",
              "as listed" if not off else {li: theirs_links[li] for li in off}, f"{L}: per link",
              DIFFERS if off else EQUAL, f"links {off} differ" if off else "every listed link in the same state")


def _compare_pairs(f: Fields, scan: Dict[str, Any], topo, T: str) -> None:
    pairs = scan.get("pairs") or []
    if len(scan.get("gpus") or []) < 2:
        f.na("pairs.link_class", None, None, T, "one GPU: no pair to compare")
        return
    if topo is NOT_READ:
        f.same("pairs.link_class", None, NOT_READ, T)
        return
    for pr in pairs:
        i, j = pr["gpus"]
        try:
            theirs = str(topo.link_class(i, j))
        except Exception as e:  # noqa: BLE001
            f.add(f"pair[{i},{j}].link_class", pr.get("link_class"), None, T, DIFFERS, f"not in topo -m: {e}")
            continue
        f.same(f"pair[{i},{j}].link_class", pr.get("link_class"), theirs, f"{T}: matrix cell",
               norm=lambda v: str(v).strip().upper())


def _matrix_lines(text: str) -> List[List[str]]:
    """The matrix part of topo -m text (header to the blank line / Legend), whitespace-split,
    without the ANSI escapes recent drivers underline the header with even when piped (stripped
    with the parser's own pattern, gputopo.line_prefixes.strip_ansi, line by line; gputopo's text has none)."""
    from gputopo.line_prefixes import strip_ansi

    out = []
    for ln in (strip_ansi(raw) for raw in text.splitlines()):
        if ln.strip().startswith("Legend"):
            break
        if ln.strip():
            out.append(ln.split())
    return out


def _compare_smi_text(f: Fields, dir_: Path, topo, notes: Dict[str, str], T: str) -> None:
    ours_p, theirs_p = dir_ / SCAN_SMI, dir_ / SMI_TOPO
    if not ours_p.is_file() or not theirs_p.is_file():
        f.na("scan --format smi text", None, None, T, "one of the two texts was not captured")
        return
    a = _matrix_lines(ours_p.read_text(encoding="utf-8", errors="replace"))
    b = _matrix_lines(theirs_p.read_text(encoding="utf-8", errors="replace"))
    first = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if first is None and len(a) == len(b):
        f.add("scan --format smi text", "matrix lines", "matrix lines", f"{T}: text up to Legend", EQUAL,
              "the same cells line by line (whitespace aside)")
    else:
        k = first if first is not None else min(len(a), len(b))
        f.add("scan --format smi text", " ".join(a[k]) if k < len(a) else None,
              " ".join(b[k]) if k < len(b) else None, f"{T}: text up to Legend", DIFFERS,
              f"first different matrix line: {k + 1}")


# ----------------------------------------------------------------------------- bench vs bare loop


def compare_ratio(dir_: Path) -> Dict[str, Any]:
    """bench --self's GB/s over the bare loop's, per test and size; theoretical rates beside."""
    notes: Dict[str, str] = {}
    bench = _read(dir_, BENCH_SELF_JSON, json.loads, notes)
    if bench is NOT_READ:
        return {"error": f"{BENCH_SELF_JSON} {notes[BENCH_SELF_JSON]}", "sources": notes, "rows": []}
    bare = _read(dir_, CUDA_SELF_JSON, json.loads, notes)
    scan = _read(dir_, SCAN_JSON, json.loads, notes)
    ours: Dict[Tuple[str, int], Dict[str, Any]] = {}
    run_dir = Path(bench.get("run_dir") or "")
    mpath = run_dir / "measurements.jsonl"
    if not mpath.is_file():  # the folder moved with the check's (run_dir is where it was written)
        mpath = dir_ / "bench-self" / "measurements.jsonl"
    if mpath.is_file():
        for ln in mpath.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                m = json.loads(ln)
            except ValueError:
                continue
            if str(m.get("test", "")).startswith("self.") and (m.get("gpus") or [None])[0] == 0:
                ours[(m["test"], int(m["size_bytes"]))] = m
    notes["measurements.jsonl"] = "read" if ours else f"no self.* measurement in {mpath}"
    theirs = {(r["test"], int(r["size_bytes"])): r for r in (bare.get("results") or [])} \
        if bare is not NOT_READ else {}
    rows: List[Dict[str, Any]] = []
    for (test, size), m in sorted(ours.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        gb = (m.get("derived") or {}).get("algbw_gbps")
        r = theirs.get((test, size))
        ratio = gb / r["gbps"] if r and gb and r.get("gbps") else None
        rows.append({"test": test, "size_bytes": size, "gputopo_gbps": gb, "gputopo_timing": m.get("timing"),
                     "gputopo_wrong": m.get("wrong"), "bare_gbps": r.get("gbps") if r else None,
                     "bare_bit_exact": r.get("bit_exact_after") if r else None, "ratio": ratio})
    verdicts: Dict[str, Dict[str, Any]] = {}
    for test in ("self.h2d", "self.d2h", "self.d2d"):
        mine = [x for x in rows if x["test"] == test and x["ratio"] is not None]
        if not mine:
            why = ("no bare loop figures (" + notes.get(CUDA_SELF_JSON, "?") + ")" if not theirs
                   else "no size measured by both")
            if bench.get("simulated"):
                why = "simulated bench (modeled times): nothing to hold against a CUDA loop"
            verdicts[test] = {"verdict": NA, "why": why}
            continue
        top = max(mine, key=lambda x: x["size_bytes"])
        ok = top["ratio"] >= RATIO_TARGET
        verdicts[test] = {"verdict": "ok" if ok else "below-target", "size_bytes": top["size_bytes"],
                          "ratio": top["ratio"], "target": RATIO_TARGET}
    out: Dict[str, Any] = {"rows": rows, "verdicts": verdicts, "sources": notes,
                           "simulated": bool(bench.get("simulated")), "target": RATIO_TARGET}
    out["theoretical"] = _theoretical(scan, bare)
    return out


def _theoretical(scan, bare) -> Dict[str, Any]:
    from gputopo.model.bandwidth import pcie_gbps

    th: Dict[str, Any] = {}
    g = (scan.get("gpus") or [{}])[0] if scan is not NOT_READ else {}
    pcie = g.get("pcie") or {}
    gm, wm, gc, wc = (pcie.get(k) for k in ("gen_max", "width_max", "gen_current", "width_current"))
    if isinstance(gm, int) and isinstance(wm, int):
        th["pcie_max_gbps"] = pcie_gbps(gm, wm)
        th["pcie_max"] = f"Gen{gm} x{wm} (per direction, after 128b/130b coding: gputopo.model.bandwidth)"
    if isinstance(gc, int) and isinstance(wc, int):
        th["pcie_at_scan_gbps"] = pcie_gbps(gc, wc)
        th["pcie_at_scan"] = f"Gen{gc} x{wc} as read by the scan (an idle GPU may run a lower generation)"
    if bare is not NOT_READ:
        th["hbm_gbps"] = bare.get("hbm_theoretical_gbps")
        th["hbm_source"] = bare.get("hbm_theoretical_source")
        th["hbm_published_gbps"] = bare.get("hbm_published_gbps")
        th["note"] = "a GPU->GPU copy reads and writes each byte: its GB/s can reach half the HBM rate"
    return th


# ----------------------------------------------------------------------------- output


def _md_cell(v: Any) -> str:
    s = json.dumps(v) if isinstance(v, (dict, list)) else ("" if v is None else str(v))
    return s.replace("|", "\\|").replace("\n", " ")[:120]


def write_scan(dir_: Path, doc: Dict[str, Any]) -> str:
    (dir_ / "comparison.json").write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    c = doc["counts"]
    lines = ["# gputopo scan vs nvidia-smi, field by field", ""]
    if doc.get("error"):
        lines += [f"not compared: {doc['error']}", ""]
    if doc.get("simulated"):
        lines += [f"SIMULATED scan (machine {doc.get('machine')}): compared with whatever nvidia-smi "
                  "answered (a fake here): this checks the comparison, not a GPU.", ""]
    lines += [f"{c[EQUAL]} equal, {c[DIFFERS]} differ, {c[NA]} n/a", "",
              "sources: " + ", ".join(f"{k} {v}" for k, v in doc["sources"].items()), "",
              "| field | gputopo | nvidia-smi | source | verdict | why |", "|---|---|---|---|---|---|"]
    for r in doc["fields"]:
        lines.append("| " + " | ".join(_md_cell(r[k]) for k in ("field", "gputopo", "nvidia_smi", "source",
                                                               "verdict", "why")) + " |")
    (dir_ / "comparison.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    differ = [r["field"] for r in doc["fields"] if r["verdict"] == DIFFERS]
    head = f"{c[EQUAL]} equal, {c[DIFFERS]} differ, {c[NA]} n/a"
    if doc.get("error"):
        return f"not compared: {doc['error']}"
    return head + (f"; differ: {', '.join(dict.fromkeys(differ))}" if differ else "")


def write_ratio(dir_: Path, doc: Dict[str, Any]) -> str:
    (dir_ / "self-ratio.json").write_text(json.dumps(doc, indent=1, default=str) + "\n", encoding="utf-8")
    if doc.get("error"):
        (dir_ / "self-ratio.md").write_text(f"# bench --self vs a bare CUDA loop\n\nnot compared: {doc['error']}\n",
                                            encoding="utf-8")
        return f"not compared: {doc['error']}"
    lines = ["# bench --self vs a bare CUDA-event loop (benchmarks/cuda_self.py)", "",
             f"target: gputopo / bare >= {RATIO_TARGET} at the largest size, per direction", ""]
    if doc.get("simulated"):
        lines += ["SIMULATED bench: its times are modeled, so no ratio is taken.", ""]
    lines += ["| test | size | gputopo GB/s | bare GB/s | ratio | #wrong |", "|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        lines.append(f"| {r['test']} | {r['size_bytes'] >> 20} MiB | {_fmt(r['gputopo_gbps'])} "
                     f"({r['gputopo_timing']}) | {_fmt(r['bare_gbps'])} | {_fmt(r['ratio'], 3)} | "
                     f"{r['gputopo_wrong']} |")
    lines += ["", "| direction | verdict |", "|---|---|"]
    for t, v in doc["verdicts"].items():
        lines.append(f"| {t} | {v['verdict']}: " + (f"{v['ratio']:.3f} at {v['size_bytes'] >> 20} MiB"
                                                  if "ratio" in v else v.get("why", "")) + " |")
    th = doc.get("theoretical") or {}
    lines += ["", "Theoretical rates (GB = 1e9 B):", ""]
    for k in ("pcie_max", "pcie_at_scan"):
        if k in th:
            lines.append(f"- PCIe {th[k]}: {_fmt(th.get(k + '_gbps'))} GB/s")
    if th.get("hbm_gbps") or th.get("hbm_published_gbps"):
        lines.append(f"- HBM: {_fmt(th.get('hbm_gbps'))} GB/s ({th.get('hbm_source')}); published "
                     f"{_fmt(th.get('hbm_published_gbps'))} GB/s; {th.get('note')}")
    (dir_ / "self-ratio.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    parts = []
    for t, v in doc["verdicts"].items():
        parts.append(f"{t.split('.')[1]} " + (f"{v['ratio']:.3f}" if "ratio" in v else "n/a"))
    whys: List[str] = [str(v.get("why", "")) for v in doc["verdicts"].values()]
    return ", ".join(parts) + (f" (target >= {RATIO_TARGET})" if any("ratio" in v for v in doc["verdicts"].values())
                               else f": {whys[0] if whys else ''}")


def _fmt(v: Any, digits: int = 1) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2 or argv[0] not in ("scan", "ratio"):
        print("usage: gpu_check_compare.py scan|ratio DIR", file=sys.stderr)
        return 2
    dir_ = Path(argv[1])
    if argv[0] == "scan":
        doc = compare_scan(dir_)
        print(write_scan(dir_, doc))
        if doc.get("error"):
            return 2
        return 1 if doc["counts"][DIFFERS] else 0
    doc = compare_ratio(dir_)
    print(write_ratio(dir_, doc))
    if doc.get("error"):
        return 2
    return 1 if any(v["verdict"] == "below-target" for v in doc["verdicts"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
