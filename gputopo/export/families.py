"""A Snapshot (cache.py) as Prometheus metric families, fresh on every scrape.

Names follow Prometheus conventions: a ``gputopo_`` prefix, base units in the name
(``_celsius``, ``_watts``, ``_bytes_per_second``, ``_seconds``), ``_total`` only on counters,
GPUs as ``gpu="3"`` (the NVML index; ``uuid`` and ``bus_id`` on gputopo_gpu_info). A value that
NVML could not give is left out, never exported as 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from gputopo.model import Topology, is_value
from gputopo.model.health import GpuHealth, xid_list
from gputopo.model.topology import NVLINK_ERROR_COUNTERS

from .cache import Snapshot


def _num(v: Any) -> float | None:
    if is_value(v) and isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return None


class _Families:
    """Families by name, created on first use with their HELP text and type."""

    def __init__(self) -> None:
        self.items: dict[str, Any] = {}  # Gauge/CounterMetricFamily by name

    def add(self, kind: str, name: str, doc: str, labels: list[str], values: list[str], v: float | None) -> None:
        if v is None:
            return
        fam = self.items.get(name)
        if fam is None:
            cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            fam = self.items[name] = cls(name, doc, labels=labels)
        fam.add_metric(values, v)


def snapshot_families(snap: Snapshot) -> Iterator[Metric]:
    f = _Families()
    topo = snap.topology
    f.add("counter", "gputopo_scans", "Scans the exporter ran (at most one per --interval).", [], [], snap.scans)
    f.add("counter", "gputopo_scan_errors", "NVML reads that failed while scanning (a lost GPU, one "
          "field of one GPU) and scans that failed as a whole.", [], [], snap.scan_errors)
    f.add("gauge", "gputopo_last_scan_timestamp_seconds", "Unix time of the last successful scan.",
          [], [], snap.scanned_s)
    f.add("gauge", "gputopo_scan_duration_seconds", "Wall time the last successful scan took.",
          [], [], snap.scan_duration_s)
    if topo is not None:
        f.add("gauge", "gputopo_simulated", "1 when the scanned machine is SIMULATED (--sim).",
              ["machine"], [topo.machine], 1.0 if topo.simulated else 0.0)
        _gpus(f, topo)
        _pairs(f, topo)
        _network(f, topo)
    counts: dict[tuple, int] = {}
    for fd in snap.findings:
        counts[(fd.kind, fd.severity, "scan")] = counts.get((fd.kind, fd.severity, "scan"), 0) + 1
    for d in snap.history.findings:
        key = (d["kind"], d["severity"], "last_run")
        counts[key] = counts.get(key, 0) + 1
    for (kind, sev, source), n in sorted(counts.items()):
        f.add("gauge", "gputopo_findings", "Findings by kind and severity: of the last scan "
              "(source=scan) and of the newest run in the history (source=last_run).",
              ["kind", "severity", "source"], [kind, sev, source], n)
    h = snap.history
    f.add("gauge", "gputopo_last_run_timestamp_seconds", "Unix time of the newest run of this "
          "machine in the history database (a simulated machine's clock when it sets one).", [], [], h.last_run_s)
    f.add("gauge", "gputopo_history_up", "1 when the history database could be read.", [], [],
          0.0 if h.error else 1.0)
    f.add("gauge", "gputopo_series_not_judged", "Measured series of the newest run in the history that "
          "nothing could judge (no published or theoretical rate, no like GPUs, no history): its "
          "verdict is not-judged for them, not ok.", [], [],
          None if h.series_not_judged is None else float(h.series_not_judged))
    for fig in h.figures:
        gpus = fig["gpus"].split(",")
        if len(gpus) != 2:
            continue
        labels = ["gpu_a", "gpu_b", "link_class", "series", "direction"]
        values = [gpus[0], gpus[1], fig["link_class"] or "", fig["series"], fig["direction"] or ""]
        f.add("gauge", "gputopo_pair_bandwidth_bytes_per_second", "Last measured headline figure per "
              "pair and series (busbw, algbw for copies), from the history.", labels, values,
              None if fig["gbps"] is None else fig["gbps"] * 1e9)
        f.add("gauge", "gputopo_pair_wrong_elements", "Elements that arrived wrong in the last "
              "measurement per pair and series (nccl-tests' #wrong), from the history.", labels,
              values, fig["wrong"])
    return iter(f.items.values())


def _gpus(f: _Families, topo: Topology) -> None:
    for g in topo.gpus:
        gpu = str(g.nvml_index)
        f.add("gauge", "gputopo_gpu_info", "One per GPU: its UUID, PCI bus id and name.",
              ["gpu", "uuid", "bus_id", "name"],
              [gpu, str(g.uuid) if is_value(g.uuid) else "", str(g.pci_bus_id) if is_value(g.pci_bus_id) else "",
               str(g.name) if is_value(g.name) else ""], 1.0)
        f.add("gauge", "gputopo_gpu_lost", "1 when NVML lost the GPU (its other metrics are absent).",
              ["gpu"], [gpu], 1.0 if g.lost is not None else 0.0)
        if g.lost is not None:
            continue
        f.add("gauge", "gputopo_nvlinks_active", "NVLinks of the GPU that are up.", ["gpu"], [gpu],
              float(len(g.active_nvlinks())))
        f.add("gauge", "gputopo_nvlinks", "NVLinks of the GPU (up or not).", ["gpu"], [gpu], float(len(g.nvlinks)))
        for state in ("current", "max"):
            f.add("gauge", "gputopo_pcie_link_width_lanes", "PCIe link width (current: as trained now).",
                  ["gpu", "state"], [gpu, state], _num(getattr(g.pcie, f"width_{state}")))
            f.add("gauge", "gputopo_pcie_link_generation", "PCIe link generation (current drops at idle).",
                  ["gpu", "state"], [gpu, state], _num(getattr(g.pcie, f"gen_{state}")))
        f.add("counter", "gputopo_pcie_replays", "PCIe replay counter of the GPU's link.", ["gpu"], [gpu],
              _num(g.pcie.replay_counter))
        for lk in g.nvlinks:
            for name in NVLINK_ERROR_COUNTERS:
                f.add("counter", "gputopo_nvlink_errors", "NVLink error counters per link.",
                      ["gpu", "link", "counter"], [gpu, str(lk.link), name], _num(lk.errors.get(name)))
        _health(f, gpu, g.health)


def _health(f: _Families, gpu: str, h: Any) -> None:
    if not isinstance(h, GpuHealth):
        return
    if isinstance(h.ecc_errors, dict):
        for scope, counts in h.ecc_errors.items():
            if isinstance(counts, dict):
                for kind, v in counts.items():
                    f.add("counter", "gputopo_ecc_errors", "ECC errors (volatile: since the driver "
                          "loaded, aggregate: the GPU's life).", ["gpu", "type", "scope"],
                          [gpu, kind, scope], _num(v))
    if isinstance(h.remapped_rows, dict):
        for kind in ("corrected", "uncorrected"):
            f.add("gauge", "gputopo_remapped_rows", "Memory rows remapped, by the error that caused it.",
                  ["gpu", "type"], [gpu, kind], _num(h.remapped_rows.get(kind)))
    if isinstance(h.xid_events, list):
        f.add("gauge", "gputopo_xid_events", "Xid events the kernel log holds for the GPU.",
              ["gpu"], [gpu], float(len(xid_list(h))))
    f.add("gauge", "gputopo_temperature_celsius", "GPU temperature.", ["gpu"], [gpu], _num(h.temperature_c))
    f.add("gauge", "gputopo_power_watts", "GPU power draw.", ["gpu"], [gpu], _num(h.power_w))


def _pairs(f: _Families, topo: Topology) -> None:
    for p in topo.pairs:
        f.add("gauge", "gputopo_pair_link_class_info", "One per GPU pair: its link class as "
              "nvidia-smi topo -m prints it.", ["gpu_a", "gpu_b", "link_class"],
              [str(p.gpus[0]), str(p.gpus[1]), str(p.link_class)], 1.0)


def _network(f: _Families, topo: Topology) -> None:
    """RDMA NIC ports (state, rate, PCIe, error counters), each GPU's nearest NIC with NCCL's GDR
    distance rule, and the kernel side of GPUDirect RDMA (report/network_checks.py, model/nic.py)."""
    from gputopo.model.nic import GdrKernel
    from gputopo.report.network_checks import gpu_network_paths

    f.add("gauge", "gputopo_rdma_nics", "RDMA NICs (with a PCI function) the scan found.", [], [],
          float(len(topo.nics)))
    for n in topo.nics:
        for p in n.ports:
            labels, values = ["nic", "port"], [p.device, str(p.port)]
            f.add("gauge", "gputopo_nic_port_info", "One per RDMA NIC port: its state, physical state, "
                  "link layer and adapter model as sysfs says.",
                  ["nic", "port", "state", "phys_state", "link_layer", "ca_type"],
                  values + [str(x) if is_value(x) else "" for x in (p.state, p.phys_state, p.link_layer, p.ca_type)],
                  1.0)
            f.add("gauge", "gputopo_nic_port_active", "1 when the port's state is Active.", labels, values,
                  (1.0 if p.state == "Active" else 0.0) if is_value(p.state) else None)
            rate = _num(p.rate_gbps)
            f.add("gauge", "gputopo_nic_port_rate_bits_per_second", "The port's rate (sysfs rate).", labels,
                  values, None if rate is None else rate * 1e9)
            for name, v in p.counters.items():
                f.add("counter", "gputopo_nic_port_errors", "NIC port error counters (cumulative, sysfs "
                      "counters/).", ["nic", "port", "counter"], values + [name], _num(v))
            for state in ("current", "max"):
                f.add("gauge", "gputopo_nic_pcie_link_width_lanes", "The NIC's PCIe link width.",
                      ["nic", "state"], [p.device, state], _num(getattr(p, f"pcie_width_{state}")))
                f.add("gauge", "gputopo_nic_pcie_link_generation", "The NIC's PCIe link generation.",
                      ["nic", "state"], [p.device, state], _num(getattr(p, f"pcie_gen_{state}")))
    for path in gpu_network_paths(topo):
        for device in path.devices:
            f.add("gauge", "gputopo_gpu_nearest_nic_info", "One per GPU and nearest RDMA NIC (best PCIe "
                  "class; not NCCL's own NIC choice).", ["gpu", "nic", "link_class"],
                  [str(path.gpu), device, str(path.link_class)], 1.0)
        gdr = path.gdr_by_distance
        f.add("gauge", "gputopo_gpu_gdr_by_distance", "1 when NCCL's GDR distance rule (ncclTopoCheckGdr) "
              "allows GPUDirect RDMA between the GPU and its nearest NIC.", ["gpu"], [str(path.gpu)],
              (1.0 if gdr else 0.0) if isinstance(gdr, bool) else None)
    g = topo.host.gpudirect_rdma
    if isinstance(g, GdrKernel) and topo.nics:
        for name, v in (("available", g.available), ("peermem", g.peermem), ("dmabuf", g.dmabuf)):
            f.add("gauge", "gputopo_gpudirect_rdma", "The kernel side of GPUDirect RDMA: available, "
                  "peer-memory module loaded, dma-buf can work (absent: not known).", ["what"], [name],
                  (1.0 if v else 0.0) if isinstance(v, bool) else None)


class GputopoCollector:
    """A prometheus_client collector: every collect() reads the cache (scanning when due)."""

    def __init__(self, cache) -> None:
        self.cache = cache

    def collect(self) -> Iterator[Metric]:
        return snapshot_families(self.cache.current())
