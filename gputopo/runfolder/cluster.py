"""The one run folder of a cluster run (docs/cluster.md): rank 0 writes it (the lowest live rank
when rank 0 is lost; a simulated cluster's one process), and each rank still appends its own
results to its own file in it. One package writes it, not one process.

Layout: ``run.json`` (``kind: "cluster"``) and ``events.jsonl`` (findings, so the report's loader
and ``gputopo check`` see them as any run's), ``topology.json`` (the majority node's machine),
``rounds.jsonl`` (each round as rank 0 gathered it, appended the moment it is done),
``ranks/<node>-rank<N>.jsonl`` (each rank's own results, written by that rank), per-node sections
``nodes/<node>/node.json`` (fingerprint, ranks) and ``topology.json``, then at the end
``cluster.json`` and ``drain.txt``; the cluster layer renders ``report.md`` and
``heatmap_nodes.png`` from ``cluster.json`` (gputopo.report.cluster_view).
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

from gputopo import SCHEMA_VERSION
from gputopo.model import Finding, Topology, topology_to_json

from .layout import (CLUSTER_JSON, DRAIN_TXT, EVENTS_JSONL, NODE_JSON, NODES_DIR, RANKS_DIR, ROUNDS_JSONL,
                     RUN_JSON, TOPOLOGY_JSON)
from .settings import nccl_settings
from .writer import append_jsonl, claim_out_dir, errors_belong_to, new_run_dir, run_info, set_run_status, write_json

#: Clusters larger than this get no per-node folders (cluster.json holds every node).
NODE_DIRS_MAX = 64


def make_run_dir(out_dir: Optional[str], reports_dir: str, name: str) -> Path:
    return claim_out_dir(out_dir) if out_dir else new_run_dir(reports_dir, name)


def rank_log_path(run_dir, node: str, rank: int) -> Path:
    """The file one rank appends its own results to (``ranks/<node>-rank<N>.jsonl``)."""
    d = Path(run_dir) / RANKS_DIR
    d.mkdir(parents=True, exist_ok=True)
    return d / f"{node}-rank{rank:05d}.jsonl"


def read_cluster_doc(run_dir) -> Optional[Dict[str, Any]]:
    """``cluster.json`` of a run folder, or None when the run is not a cluster run."""
    from gputopo.inputs import MAX_TEXT_BYTES, read_user_text

    p = Path(run_dir) / CLUSTER_JSON
    if not p.exists():
        return None
    try:
        return json.loads(read_user_text(p, CLUSTER_JSON, MAX_TEXT_BYTES, fifo_ok=False))
    except ValueError:
        return None


class ClusterRunFolder:
    def __init__(self, run_dir):
        self.dir = Path(run_dir)
        self.t0 = time.monotonic()
        #: the run's own status once its results are on disk (set by whoever writes them), with
        #: what run.json says beside it; the report is written after
        self.status: Optional[str] = None
        self.status_more: Dict[str, Any] = {}
        self.ended = False  # run.json's final status written (or left to another writer)

    def start(self, *, fabric: str, simulated: bool, machine: str, argv: List[str],
              options: Dict[str, Any], nodes: List[str], topology: Optional[Topology] = None,
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
            write_json(self.dir / TOPOLOGY_JSON, dict(topology_to_json(topology),
                                                      schema_version=SCHEMA_VERSION))

    def round(self, rec) -> None:
        """One round as rank 0 gathered it (``rec.to_json()``: cluster.rounds.RoundRecord)."""
        append_jsonl(self.dir / ROUNDS_JSONL, rec.to_json())

    def nodes(self, names: List[str], ranks: List[List[int]], fingerprints: List[Dict[str, Any]],
              topologies: Optional[List[Any]] = None) -> None:
        if len(names) > NODE_DIRS_MAX:
            return
        for k, name in enumerate(names):
            d = self.dir / NODES_DIR / name
            d.mkdir(parents=True, exist_ok=True)
            write_json(d / NODE_JSON, {"node": name, "ranks": ranks[k],
                                       "fingerprint": fingerprints[k]})
            if topologies and topologies[k] is not None:
                write_json(d / TOPOLOGY_JSON, topologies[k])

    def results(self, doc: Dict[str, Any], findings: List[Finding], drain: List[str]) -> None:
        """The end of the run: every finding as an events.jsonl line (worst first, as given),
        ``cluster.json`` (``doc``) and ``drain.txt`` (``host reason`` per line)."""
        for f in findings:
            append_jsonl(self.dir / EVENTS_JSONL, {"type": "finding", **f.to_json()})
        write_json(self.dir / CLUSTER_JSON, doc)
        (self.dir / DRAIN_TXT).write_text("".join(x + "\n" for x in drain), encoding="utf-8")

    def end(self, status: str, **more) -> None:
        """run.json's final status, with the run's elapsed seconds (since this object was made)."""
        set_run_status(self.dir, status, elapsed_s=round(time.monotonic() - self.t0, 3), **more)
        self.ended = True

    def hand_over(self) -> None:
        """Another process writes this folder's results and final status (a cluster's survivor)."""
        self.ended = True

    @contextlib.contextmanager
    def ending(self) -> Iterator[None]:
        """Whatever ends the block leaves run.json final, as a bench run's is (bench.api sets it in
        a ``finally``), never "running" for a run that is over: where the block ends without
        :meth:`end`, or an exception leaves it, the status is the run's own (``self.status``) when
        its results are on disk (a report that then could not be written is ``report_error``:
        the measurements stand, ``gputopo report DIR`` writes the report again), else
        "interrupted" on Ctrl-C / SIGTERM (KeyboardInterrupt) and "failed" with ``error`` on any
        other exception (a refused output, an internal error). The exception goes on, tagged
        with the folder (errors_belong_to: an internal error's traceback is saved there)."""
        try:
            with errors_belong_to(self.dir):
                yield
        except BaseException as e:
            if not self.ended:
                why = _why(e)
                if self.status is not None:
                    self.end(self.status, **self.status_more, report_error=why)
                else:
                    self.end("interrupted" if isinstance(e, KeyboardInterrupt) else "failed", error=why)
            raise
        if not self.ended:
            self.end(self.status or "failed", **self.status_more,
                     **({} if self.status else {"error": "the run ended before its results were written"}))


def _why(e: BaseException) -> str:
    """An ending's cause in one line for run.json."""
    if isinstance(e, KeyboardInterrupt):
        return "interrupted (Ctrl-C or SIGTERM)"
    from gputopo.errors import GputopoError

    text = " ".join(str(e).split())[:500]
    return text if isinstance(e, GputopoError) else f"{type(e).__name__}: {text}".rstrip(": ")
