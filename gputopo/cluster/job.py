"""One cluster job: the rounds on a backend, the findings, the run folder. Shared by a real job
(every rank runs the rounds, rank 0 writes) and a simulated cluster (one process).
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from gputopo.bench.fabrics.fabric import fabric_named
from gputopo import SCHEMA_VERSION
from gputopo.model import Finding, worst_first
from gputopo.model.cluster import LostRank, Outcome
from gputopo.report.cluster_findings import drain_lines
from gputopo.report.rules import cluster_run_findings
from gputopo.report.cluster_view import cluster_markdown, write_node_heatmap
from gputopo.runfolder.cluster import ClusterRunFolder, make_run_dir
from gputopo.runfolder.layout import DEFAULT_BASE_DIR

from .rounds import DEFAULT_SLOW_BELOW, run_rounds
from .survivor import claim_writer, lowest_survivor, marked_alive, saved_fingerprints


@dataclass
class ClusterOptions:
    pattern: str = "random2pass"
    size_bytes: int = 64 << 20
    samples: int = 5
    timeout_s: float = 120.0
    slow_below: float = DEFAULT_SLOW_BELOW
    seed: int = 0
    intra: bool = True
    out_dir: Optional[str] = None
    reports_dir: str = DEFAULT_BASE_DIR
    argv: List[str] = field(default_factory=list)

    def to_json(self) -> Dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k != "argv"}


@dataclass
class ClusterResult:
    run_dir: Optional[Path]
    doc: Dict[str, Any]
    findings: List[Finding]
    outcome: Outcome

    @property
    def rounds_inter(self) -> int:
        return len(self.outcome.inter_rounds)


def finish_folder(folder: ClusterRunFolder, *, outcome: Outcome, names: List[str], ranks: List[List[int]],
                  fingerprints: List[Dict[str, Any]], findings: List[Finding], fabric: str,
                  simulated: bool, time_s: float, time_source: str, size_bytes: int,
                  slow_below: float, extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The end of the run folder: the findings (worst first) in events.jsonl, cluster.json,
    drain.txt, the report (report.md, heatmap_nodes.png), then run.json's status; returns the
    cluster.json document."""
    findings = worst_first(findings)
    intra = {g.nodes[0]: g.to_json() for r in outcome.rounds if r.phase == "intra" for g in r.groups}
    inter = outcome.inter_rounds
    doc = {
        "schema_version": SCHEMA_VERSION, "simulated": simulated, "fabric": fabric,
        "pattern": outcome.pattern, "rounds_inter": len(inter), "time_s": round(time_s, 3),
        "time_source": time_source, "size_bytes": size_bytes, "slow_below": slow_below,
        "reference_gbps": inter[0].reference_gbps if inter else None,
        "nodes": [{"name": n, "ranks": ranks[k], "fingerprint": fingerprints[k],
                   "intra": intra.get(k)} for k, n in enumerate(names)],
        "rounds": [r.to_json() for r in outcome.rounds],
        "lost": [vars(r) for r in outcome.lost], "lost_phase": outcome.lost_phase,
        "findings": [f.to_json() for f in findings], **(extra or {}),
    }
    folder.results(doc, findings, drain_lines(findings))
    # only stopped by a signal: interrupted; a rank hung or gone: failed
    folder.status = ("failed" if any(r.state != "stopped" for r in outcome.lost) else
                     "interrupted" if outcome.lost else "complete")
    folder.status_more = {"rounds_inter": len(inter)}
    with folder.ending():  # the report refused (a FIFO, an unwritable heatmap): run.json still final
        (folder.dir / "report.md").write_text(cluster_markdown(doc, findings), encoding="utf-8")
        write_node_heatmap(doc, folder.dir)
    return doc


def run_sim_cluster(cluster, opts: ClusterOptions, *, write: bool = True) -> ClusterResult:
    """A simulated cluster (gputopo.sim.cluster_description) on the sim fabric, modeled time."""
    from gputopo.sim.scan import scan_description

    from .sim_backend import SimBackend

    backend = SimBackend(cluster, size_bytes=opts.size_bytes, samples=opts.samples,
                         timeout_s=opts.timeout_s, seed=opts.seed)
    names = backend.node_names
    ranks = [backend.ranks(k) for k in range(len(names))]
    fingerprints = backend.fingerprints()
    folder = None
    ending: Any = contextlib.nullcontext()
    if write:
        run_dir = make_run_dir(opts.out_dir, opts.reports_dir, cluster.name if "cluster" in cluster.name
                                                                   else f"cluster-{cluster.name}")
        folder = ClusterRunFolder(run_dir)
        folder.start(fabric="sim", simulated=True, machine=f"{cluster.name} ({len(names)} x "
                     f"{cluster.node.name})", argv=opts.argv, options=opts.to_json(), nodes=names,
                     topology=scan_description(cluster.node))
        ending = folder.ending()  # every ending from here leaves run.json final
    with ending:
        return _sim_rounds(backend, cluster, opts, folder, names, ranks, fingerprints)


def _sim_rounds(backend, cluster, opts: ClusterOptions, folder: Optional[ClusterRunFolder], names: List[str],
                ranks: List[List[int]], fingerprints: List[Dict[str, Any]]) -> ClusterResult:
    if folder is not None:
        folder.nodes(names, ranks, fingerprints)
    wall0 = time.monotonic()
    outcome = run_rounds(backend, opts.pattern, seed=opts.seed, slow_below=opts.slow_below,
                         intra=opts.intra, on_round=folder.round if folder else None)
    findings = cluster_run_findings(outcome, names, ranks, fingerprints, opts.slow_below)
    extra = {"sim": cluster.name, "sim_path": cluster.path, "node_machine": cluster.node.name,
             "wall_s": round(time.monotonic() - wall0, 3),
             "intra_node_models": backend.intra_models}
    doc: Dict[str, Any] = {}
    if folder is not None:
        doc = finish_folder(folder, outcome=outcome, names=names, ranks=ranks, fingerprints=fingerprints,
                            findings=findings, fabric="sim", simulated=True,
                            time_s=backend.elapsed_s, time_source="modeled",
                            size_bytes=opts.size_bytes, slow_below=opts.slow_below, extra=extra)
    else:
        doc = {"time_s": backend.elapsed_s, "time_source": "modeled", **extra}
    return ClusterResult(run_dir=folder.dir if folder else None, doc=doc, findings=findings,
                         outcome=outcome)


def _local_facts(env, fabric: str) -> Dict[str, Any]:
    """This node's fingerprint and topology (local rank 0 only scans; the others send None).
    A scan that fails is recorded as n/a (never raised: the other ranks would wait for this one)."""
    from gputopo.errors import GputopoError
    from gputopo.model import topology_to_json

    from .fingerprint import local_nics, software_facts, topology_facts

    if env.local_rank != 0:
        return {}
    try:
        if fabric_named(fabric).real_gpus:
            from gputopo.probe.scan import scan_real

            topo = scan_real()
        else:
            from gputopo.bench.api import cpu_topology

            topo = cpu_topology(env.local_world_size, machine=env.node_name)
        fp = topology_facts(topo)
        topo_json = topology_to_json(topo)
    except GputopoError as e:
        fp, topo_json = {"gpu_count": f"n/a: {e}"}, None
    fp.update(software_facts(), nics=local_nics())
    return {"fingerprint": fp, "topology": topo_json}


def run_dist_cluster(env, fabric: str, opts: ClusterOptions) -> ClusterResult:
    """This rank's part of a real cluster run; the writer (rank 0, or the lowest live rank when
    rank 0 is lost) returns the result, the others their outcome only (no run folder)."""
    from .dist_backend import DistBackend

    backend = DistBackend(env, fabric, size_bytes=opts.size_bytes, samples=opts.samples,
                          timeout_s=opts.timeout_s)
    everyone = backend.meet(_local_facts(env, fabric))
    names, ranks = backend.node_names, backend.node_ranks
    facts: List[Dict[str, Any]] = []
    for rs in ranks:
        recs = [everyone[r] for r in rs]
        facts.append(next((r["facts"] for r in recs if r["local_rank"] == 0 and r["facts"]), {}))
    fingerprints = [f.get("fingerprint") or {} for f in facts]
    folder = None
    ending: Any = contextlib.nullcontext()
    if env.rank == 0:
        from gputopo.bench.worker_env import override_line
        from gputopo.model import topology_from_json

        line = override_line(backend.env_set, "the cluster's cuda ranks", "env_set")
        if line:  # rank 0's shell; every rank set the same values
            print(line, file=sys.stderr)

        run_dir = make_run_dir(opts.out_dir, opts.reports_dir, f"cluster-{len(names)}nodes").resolve()
        folder = ClusterRunFolder(run_dir)
        first = next((f["topology"] for f in facts if f.get("topology")), None)
        folder.start(fabric=fabric, simulated=False, machine=f"cluster of {len(names)} nodes",
                     argv=opts.argv, options=opts.to_json(), nodes=names,
                     topology=topology_from_json(first) if first else None,
                     env_set=backend.env_set)
        ending = folder.ending()  # every ending of rank 0 from here leaves run.json final
    with ending:
        if folder is not None:
            folder.nodes(names, ranks, fingerprints, [f.get("topology") for f in facts])
        return _measure_rank(backend, env, fabric, opts, folder, fingerprints)


def _measure_rank(backend, env, fabric: str, opts: ClusterOptions, folder: Optional[ClusterRunFolder],
                  fingerprints: List[Dict[str, Any]]) -> ClusterResult:
    backend.share_run_dir(str(folder.dir) if folder else None)
    wall0 = time.monotonic()
    # from here a SIGTERM/SIGINT (a launcher stopping the job after losing a rank, a user)
    # stops the measuring but not the rank: whoever writes still writes, naming who was lost
    with backend.stop_signals():
        outcome = run_rounds(backend, opts.pattern, seed=opts.seed, slow_below=opts.slow_below,
                             intra=opts.intra, on_round=folder.round if folder else None)
        return _conclude_rank(backend, env, fabric, opts, outcome, folder, fingerprints, wall0)


def _conclude_rank(backend, env, fabric: str, opts: ClusterOptions, outcome: Outcome,
                   folder: Optional[ClusterRunFolder], fingerprints: List[Dict[str, Any]],
                   wall0: float) -> ClusterResult:
    """Write the folder (the writer) or wait for it to be written (the others)."""
    names, ranks = backend.node_names, backend.node_ranks
    extra: Dict[str, Any] = {"launcher": env.launcher, "world_size": env.world_size}
    # ranks only stopped by a signal were named by the round's gather, rank 0 among the living
    only_stopped = bool(outcome.lost) and all(r.state == "stopped" for r in outcome.lost)
    if folder is None and outcome.lost_phase and backend.run_dir and not only_stopped:
        folder, fingerprints = _survivor_folder(backend, outcome, names)
        extra.update(written_by_rank=env.rank, fingerprints_compared=any(fingerprints))
    elif folder is not None and not claim_writer(folder.dir, env.rank):
        folder.hand_over()  # a survivor took rank 0 for lost and wrote: one writer per folder
        folder = None
    if folder is None:
        backend.wait_written()
        return ClusterResult(run_dir=None, doc={}, findings=[], outcome=outcome)
    with folder.ending():  # a survivor's too: run.json final however its writing ends
        findings = cluster_run_findings(outcome, names, ranks, fingerprints, opts.slow_below)
        doc = finish_folder(folder, outcome=outcome, names=names, ranks=ranks, fingerprints=fingerprints,
                            findings=findings, fabric=fabric, simulated=False,
                            time_s=time.monotonic() - wall0, time_source="wall",
                            size_bytes=opts.size_bytes, slow_below=opts.slow_below, extra=extra)
    backend.written()
    return ClusterResult(run_dir=folder.dir, doc=doc, findings=findings, outcome=outcome)


def _survivor_folder(backend, outcome: Outcome, names: List[str]):
    """A rank other than 0 after a loss: (the folder to write, the fingerprints) when rank 0 is
    lost too and this is the lowest live rank, else (None, []) (rank 0, or a lower rank, writes).
    The folder is rank 0's (shared at start-up; no ``start()``): its run.json, nodes/ and
    fingerprints stay; the lost ranks found here replace the empty list this rank learnt."""
    from .dist_backend import STORE_GONE

    lost = backend.lost_with_rank0()
    if lost is None or not lowest_survivor(backend.run_dir, backend.rank) \
            or not claim_writer(backend.run_dir, backend.rank):
        return None, []
    if lost[0].message == STORE_GONE:  # only rank 0 named: add every rank that did not say it lived
        alive = set(marked_alive(backend.run_dir))
        lost += [LostRank(r, backend.node_of(r), "crash", "did not answer after the loss (crashed, "
                          "stopped by its launcher, or hung)")
                 for r in range(1, backend.world) if r not in alive]
    outcome.lost = lost
    return ClusterRunFolder(backend.run_dir), saved_fingerprints(backend.run_dir, names)
