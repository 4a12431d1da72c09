"""The one run folder of a cluster run (rank 0 writes it; a simulated cluster's one process too).

Layout: the bench's ``run.json`` (``kind: "cluster"``) and ``events.jsonl`` (findings, so the
report loader and ``gputopo check`` see them as any run's), ``topology.json`` (the majority
node's machine), ``rounds.jsonl`` (each round as rank 0 gathered it, appended the moment it is
done), ``ranks/<node>-rank<N>.jsonl`` (each rank's own results, written by that rank), per-node
sections ``nodes/<node>/node.json`` (fingerprint, intra-node result, topology), then at the end
``cluster.json``, ``report.md``, ``heatmap_nodes.png`` and ``drain.txt``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from gputopo import SCHEMA_VERSION
from gputopo.bench.run_settings import nccl_settings
from gputopo.runfolder.layout import EVENTS_JSONL, RUN_JSON, TOPOLOGY_JSON
from gputopo.runfolder.writer import (append_jsonl, claim_out_dir, new_run_dir, run_info, set_run_status,
                                      write_json)
from gputopo.model import Finding, worst_first
from gputopo.report.cluster_view import (CLUSTER_JSON, DRAIN_TXT, cluster_markdown,
                                         write_node_heatmap)

from .findings import drain_lines
from .rounds import Outcome, RoundRecord

ROUNDS_JSONL = "rounds.jsonl"
RANKS_DIR = "ranks"
NODES_DIR = "nodes"
#: Clusters larger than this get no per-node folders (cluster.json holds every node).
NODE_DIRS_MAX = 64


def make_run_dir(out_dir: Optional[str], reports_dir: str, name: str) -> Path:
    return claim_out_dir(out_dir) if out_dir else new_run_dir(reports_dir, name)


def rank_log_path(run_dir, node: str, rank: int) -> Path:
    d = Path(run_dir) / RANKS_DIR
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{node}-rank{rank:05d}.jsonl"


class ClusterRunFolder:
    def __init__(self, run_dir):
        self.dir = Path(run_dir)
        self.t0 = time.monotonic()

    def start(self, *, fabric: str, simulated: bool, machine: str, argv: List[str],
              options: Dict[str, Any], nodes: List[str], topology=None,
              env_set: Optional[Dict[str, Any]] = None) -> None:
        """``env_set``: the variables every rank set whatever the user's environment said, each
        with its value, the value it replaced on rank 0 (None: unset) and why
        (cluster.dist_backend.RANK_ENV); ``nccl_env`` is rank 0's environment after that."""
        more = {} if simulated else {"env_set": dict(env_set or {})}
        write_json(self.dir / RUN_JSON, run_info(
            fabric=fabric, simulated=simulated, machine=machine, argv=argv, options=options,
            kind="cluster", nodes=len(nodes), status="running",
            nccl_env=nccl_settings(), **more))  # rank 0's environment (another node's may differ)
        if topology is not None:
            from gputopo.model import topology_to_json

            write_json(self.dir / TOPOLOGY_JSON, dict(topology_to_json(topology),
                                                      schema_version=SCHEMA_VERSION))

    def round(self, rec: RoundRecord) -> None:
        append_jsonl(self.dir / ROUNDS_JSONL, rec.to_json())

    def nodes(self, names: List[str], ranks: List[List[int]], fingerprints: List[Dict[str, Any]],
              topologies: Optional[List[Any]] = None) -> None:
        if len(names) > NODE_DIRS_MAX:
            return
        for k, name in enumerate(names):
            d = self.dir / NODES_DIR / name
            d.mkdir(parents=True, exist_ok=True)
            write_json(d / "node.json", {"node": name, "ranks": ranks[k],
                                         "fingerprint": fingerprints[k]})
            if topologies and topologies[k] is not None:
                write_json(d / TOPOLOGY_JSON, topologies[k])

    def finish(self, *, outcome: Outcome, names: List[str], ranks: List[List[int]],
               fingerprints: List[Dict[str, Any]], findings: List[Finding], fabric: str,
               simulated: bool, time_s: float, time_source: str, size_bytes: int,
               slow_below: float, extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        findings = worst_first(findings)
        for f in findings:
            append_jsonl(self.dir / EVENTS_JSONL, {"type": "finding", **f.to_json()})
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
        write_json(self.dir / CLUSTER_JSON, doc)
        (self.dir / DRAIN_TXT).write_text("".join(x + "\n" for x in drain_lines(findings)),
                                          encoding="utf-8")
        (self.dir / "report.md").write_text(cluster_markdown(doc, findings), encoding="utf-8")
        write_node_heatmap(doc, self.dir)
        # only stopped by a signal: interrupted; a rank hung or gone: failed
        status = ("failed" if any(r.state != "stopped" for r in outcome.lost) else
                  "interrupted" if outcome.lost else "complete")
        set_run_status(self.dir, status,
                       elapsed_s=round(time.monotonic() - self.t0, 3), rounds_inter=len(inter))
        return doc
