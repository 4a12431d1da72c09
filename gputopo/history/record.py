"""One run as rows of the history database, written in ONE transaction.

The records here are plain: the caller (gputopo/recording.py) fills them from a run folder or
a scan. What a GPU's counters are is read straight from the model's Topology (``counters_of``),
since that is all a scan knows; a value that NVML could not give (NotAvailable / Failed) is not
stored, so "not read" never becomes a 0 that a later scan would see "grow" from.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from gputopo.model import Topology, is_value
from gputopo.model.health import GpuHealth, xid_list
from gputopo.model.topology import NVLINK_ERROR_COUNTERS


@dataclass
class MachineIdentity:
    """Who the machine is: hostname and its GPUs. ``key`` never matches a simulated machine
    to a real one, so a sim's runs are never part of a real machine's baseline."""

    hostname: str
    simulated: bool
    sim_name: str | None
    driver: str | None
    gpus: list[tuple[int, str | None, str | None, str | None]]  # index, uuid, bus, model

    @property
    def key(self) -> str:
        uuids = ",".join(sorted(u or f"index{i}" for i, u, _b, _m in self.gpus))
        return f"{'sim' if self.simulated else 'real'}|{self.hostname}|{uuids}"


@dataclass
class Figure:
    """One measured point: a series on a pair (or group) at one size."""

    gpus: tuple[int, ...]
    link_class: str | None
    series: str
    direction: str | None
    size_bytes: int
    gbps: float | None  # None: the measurement failed
    metric: str  # "algbw" | "busbw"
    wrong: int | None
    timing: str  # where the time came from: cuda-events | wall | modeled
    headline: bool  # the size the report takes the series' figure from


@dataclass
class CounterValue:
    """An error counter of one GPU (and link) as a scan read it."""

    gpu_uuid: str
    nvml_index: int
    bus_id: str | None
    counter: str
    link: int | None
    value: int


@dataclass
class LayoutRow:
    """What a scan saw of one GPU (``uuids`` one UUID) or pair (two, lower NVML index first):
    the pair's link class and NVLinks, the GPU's active NVLinks and whether it is in an NVSwitch
    fabric. What `gputopo gate` judges a machine against when no spec is given."""

    uuids: tuple[str, ...]
    link_class: str | None
    nvlinks: int
    fabric: str | None = None


@dataclass
class RunRecord:
    command: str
    time_s: float
    time_source: str  # "wall" | "sim-clock"
    argv: list[str]
    run_dir: str | None
    simulated: bool
    sim_name: str | None
    fabric: str | None
    status: str
    verdict: str | None
    errors: int
    gputopo_version: str
    figures: list[Figure] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)  # Finding.to_json() of the run
    counters: list[CounterValue] = field(default_factory=list)
    #: What the verdict judged (report/judged.py Judgement.to_json(): series judged or not and
    #: why, facts); None for a scan
    judged: dict[str, Any] | None = None
    #: The series nothing judged ([series, gpus, direction]): the history may (recording.save)
    unjudged: list[list[Any]] = field(default_factory=list)
    #: The links the run's scan saw (``layout_of``); empty when it had no topology
    layout: list[LayoutRow] = field(default_factory=list)


def _text(v: Any) -> str | None:
    return str(v) if is_value(v) and v is not None else None


def machine_identity(topo: Topology, sim_name: str | None = None) -> MachineIdentity:
    hostname = _text(topo.host.hostname) or topo.machine or "unknown"
    gpus = [(g.nvml_index, _text(g.uuid), _text(g.pci_bus_id), _text(g.name)) for g in topo.gpus]
    return MachineIdentity(hostname=hostname, simulated=bool(topo.simulated), sim_name=sim_name,
                           driver=_text(topo.host.driver_version), gpus=gpus)


def _count(v: Any) -> int | None:
    return int(v) if is_value(v) and isinstance(v, (int, float)) and not isinstance(v, bool) else None


def counters_of(topo: Topology) -> list[CounterValue]:
    """Every error counter the scan read, per GPU (keyed by UUID) and NVLink."""
    out: list[CounterValue] = []
    for g in topo.gpus:
        uuid = _text(g.uuid)
        if g.lost is not None or uuid is None:
            continue
        bus = _text(g.pci_bus_id)

        def add(counter: str, value: Any, link: int | None = None) -> None:
            n = _count(value)
            if n is not None:
                out.append(CounterValue(uuid, g.nvml_index, bus, counter, link, n))  # noqa: B023

        for lk in g.nvlinks:
            for name in NVLINK_ERROR_COUNTERS:
                add(f"nvlink_{name}", lk.errors.get(name), lk.link)
        add("pcie_replay", g.pcie.replay_counter)
        h = g.health
        if isinstance(h, GpuHealth):
            if isinstance(h.ecc_errors, dict):
                for scope in ("volatile", "aggregate"):
                    counts = h.ecc_errors.get(scope)
                    if isinstance(counts, dict):
                        for kind in ("corrected", "uncorrected"):
                            add(f"ecc_{kind}_{scope}", counts.get(kind))
            if isinstance(h.remapped_rows, dict):
                for kind in ("corrected", "uncorrected"):
                    add(f"remapped_rows_{kind}", h.remapped_rows.get(kind))
            if isinstance(h.xid_events, list):
                add("xid", len(xid_list(h)))
    out += nic_counters_of(topo)
    return out


def layout_of(topo: Topology) -> list[LayoutRow]:
    """Each GPU's active NVLinks and NVSwitch fabric, each pair's link class and NVLinks, keyed by
    UUID (an index may change between boots); GPUs lost or without a UUID are left out."""
    from gputopo.model.fabric import GpuFabric

    uuid = {g.nvml_index: _text(g.uuid) for g in topo.gpus if g.lost is None}
    out: list[LayoutRow] = []
    for g in topo.gpus:
        u = uuid.get(g.nvml_index)
        if u is None:
            continue
        switch = isinstance(g.fabric, GpuFabric) or any(
            is_value(lk.remote_type) and lk.remote_type == "SWITCH" for lk in g.nvlinks)
        out.append(LayoutRow((u,), None, len(g.active_nvlinks()), "nvswitch" if switch else None))
    for p in topo.pairs:
        a, b = p.gpus
        ua, ub = uuid.get(a), uuid.get(b)
        if ua is None or ub is None:
            continue
        n = p.nvlink_count or p.link_class.nvlinks
        out.append(LayoutRow((ua, ub), str(p.link_class), int(n)))
    return out


#: A NIC port's counters are kept in the same table as a GPU's: its key (the ``gpu_uuid`` column)
#: is ``nic:<device>:<port>`` (``nic:mlx5_0:1``), ``nvml_index`` is NIC_INDEX, ``link`` the port
#: and the counter name is the sysfs one with ``nic_`` before it (``nic_symbol_error``).
NIC_KEY_PREFIX = "nic:"
NIC_INDEX = -1


def nic_counters_of(topo: Topology) -> list[CounterValue]:
    """The RDMA NIC port counters that count a bad link (model/nic.py LINK_ERROR_COUNTERS; the
    others grow on healthy fabrics too), as the scan read them."""
    from gputopo.model.nic import LINK_ERROR_COUNTERS

    out: list[CounterValue] = []
    for n in topo.nics:
        for p in n.ports:
            bus = _text(p.pci_bus_id)
            for name, value in p.counters.items():
                if name not in LINK_ERROR_COUNTERS:
                    continue
                c = _count(value)
                if c is not None:
                    out.append(CounterValue(f"{NIC_KEY_PREFIX}{p.device}:{p.port}", NIC_INDEX, bus,
                                            f"nic_{name}", p.port, c))
    return out


def record_run(conn: sqlite3.Connection, machine: MachineIdentity, rec: RunRecord,
               history_findings: Sequence[dict[str, Any]] = ()) -> int:
    """Write the run (machine row, run row, figures, findings, counters) in one transaction;
    returns the run's id. A crash before COMMIT leaves the database as it was."""
    now = time.time()
    conn.execute("BEGIN IMMEDIATE")
    try:
        row = conn.execute("SELECT id FROM machines WHERE key = ?", (machine.key,)).fetchone()
        if row:
            machine_id = int(row[0])
            conn.execute("UPDATE machines SET driver = coalesce(?, driver) WHERE id = ?",
                         (machine.driver, machine_id))
        else:
            cur = conn.execute("INSERT INTO machines (key, hostname, simulated, sim_name, driver, "
                               "first_seen_s) VALUES (?, ?, ?, ?, ?, ?)",
                               (machine.key, machine.hostname, int(machine.simulated),
                                machine.sim_name, machine.driver, rec.time_s))
            machine_id = int(cur.lastrowid or 0)
        conn.executemany("INSERT OR REPLACE INTO machine_gpus VALUES (?, ?, ?, ?, ?)",
                         [(machine_id, i, u, b, m) for i, u, b, m in machine.gpus])
        cur = conn.execute(
            "INSERT INTO runs (machine_id, command, time_s, time_source, recorded_s, argv, run_dir, "
            "simulated, sim_name, fabric, status, verdict, errors, driver, gputopo_version, judged) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (machine_id, rec.command, rec.time_s, rec.time_source, now, json.dumps(rec.argv),
             rec.run_dir, int(rec.simulated), rec.sim_name, rec.fabric, rec.status, rec.verdict,
             rec.errors, machine.driver, rec.gputopo_version,
             json.dumps(rec.judged) if rec.judged is not None else None))
        run_id = int(cur.lastrowid or 0)
        conn.executemany(
            "INSERT INTO figures VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(run_id, ",".join(map(str, f.gpus)), f.link_class, f.series, f.direction, f.size_bytes,
              f.gbps, f.metric, f.wrong, f.timing, int(f.headline)) for f in rec.figures])
        conn.executemany(
            "INSERT INTO findings VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(run_id, d["kind"], d["severity"], _gpus_text(d.get("gpus")), d.get("link_class"),
              d.get("message"), origin,
              json.dumps(d.get("evidence")) if origin == "history" and d.get("evidence") else None)
             for origin, ds in (("run", rec.findings), ("history", history_findings)) for d in ds])
        conn.executemany(
            "INSERT INTO counters VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(run_id, c.gpu_uuid, c.nvml_index, c.bus_id, c.counter, c.link, c.value)
             for c in rec.counters])
        conn.executemany(
            "INSERT INTO layout VALUES (?, ?, ?, ?, ?)",
            [(run_id, " ".join(r.uuids), r.link_class, r.nvlinks, r.fabric) for r in rec.layout])
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return run_id


def _gpus_text(gpus: Any) -> str | None:
    return ",".join(map(str, gpus)) if gpus else None
