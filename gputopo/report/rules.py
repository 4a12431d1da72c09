"""The registry of rules: every rule that turns facts into findings, what it reads, what it makes.

A rule is a function of the facts of one judgement (:class:`Facts`) that returns findings. Each is
registered here once (:data:`RULES`), with the facts it reads (:data:`FACTS` names them), the
finding kinds it makes (each an entry of gputopo/model/finding_kinds.py), the judgements it takes
part in and the section of the findings list its findings go to. One loop, :func:`judge`, runs
the registry for each judgement:

- ``run``: a run folder, written by `gputopo bench` or by `gputopo import <tool>` (every tool's
  import is a run folder: imported.json's entries by tool, measurements.jsonl),
  read again by `report`, `check`, `diff`, `place --run` (report/analysis.py);
- ``scan``: a machine's topology alone (`gputopo scan`, `place`, `export`);
- ``nccl-debug``: an NCCL_DEBUG log read on its own (`gputopo import nccl-debug --json`);
- ``cluster``: a `gputopo cluster` run (its rounds' outcome and its nodes' fingerprints).

The rules run in the registry's order; the findings list is their sections in :data:`SECTIONS`'
order (the scan's, then the steps that did not finish, then what the data shows, then the run
folder's own trouble), each section in the order its rules made it. What comes after the rules
(the culprits, gputopo/report/why/; the history, history_record.py) explains findings and
makes none of these kinds.

Adding a rule: write its function in the module of its concept (a ``*_findings.py`` module) and
register it here with what it reads and makes; docs/architecture.md lists the registry
(tests/docs/test_architecture_rules.py checks it against :data:`RULES`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from gputopo.model import Finding, Topology
from gputopo.model.finding_kinds import is_kind, symptom

from .bandwidth_findings import slow_findings, staged_findings
from . import cluster_findings as cluster
from .data_findings import data_findings
from .event_findings import run_event_findings
from .flagged_findings import run_flagged_lines, tool_flagged_findings
from .import_findings import (import_asymmetry_findings, import_failure_findings, import_problem_findings,
                              import_shared_gpu_findings)
from .headline import link_class_of
from .integrity_findings import nccl_tests_findings, with_causes
from .measured_findings import corrupt_findings, noisy_findings
from .kernel_log_findings import kernel_log_findings
from .like_gpus import like_gpu_findings
from .nccl_debug_findings import nccl_debug_findings
from .numerics_findings import numerics_findings
from .peer_access import no_peer_access_findings
from .perftest_findings import perftest_run_findings
from .sweep_findings import cliff_findings
from .run_folder import Run
from .topology_checks import topology_findings
from .network_checks import staged_gpus

#: The facts a rule may read, and what each is.
FACTS: Dict[str, str] = {
    "topology": "the machine's topology: NVML's (scan, a bench run's topology.json) or an import's --topo",
    "headlines": "each pair's headline bandwidth per series (headline.py, from the measurements)",
    "measurements": "measurements.jsonl: timed transfers, their wrong-element counts and samples",
    "numerics": "numerics.jsonl: the training numerics of each pair (DataParallel, DDP, one GPU)",
    "events": "events.jsonl: the steps that hung or crashed, and findings a writer recorded",
    "nccl-tests": "imported.json's nccl-tests (and rccl-tests) logs (their out-of-bounds counts)",
    "imported": "imported.json: what an import of nvbandwidth, p2pBandwidthLatencyTest, perftest or ibstat read",
    "nccl-debug": "imported.json's nccl-debug entry: what an imported NCCL_DEBUG log says the job did",
    "kernel-log": "imported.json's kernel-log entry: an imported kernel log's NVIDIA driver lines",
    "run-folder": "the run folder's own state: files cut, lines unread, a run that did not finish",
    "cluster": "a cluster run's outcome: its rounds' groups, the ranks lost, the slow threshold",
    "fingerprints": "each cluster node's fingerprint (GPUs, driver, links) and its ranks",
    "findings": "findings earlier rules of the same judgement made",
}
#: The judgements the loop runs.
JUDGEMENTS = ("run", "scan", "nccl-debug", "cluster")
#: Sections of a judgement's findings list, in its order.
SECTIONS = ("scan", "events", "data", "run-folder")


@dataclass
class ClusterFacts:
    """A cluster run's facts: its outcome, node names, each node's ranks and fingerprint, and the
    fraction of its round's reference below which a group is slow."""

    outcome: Any  # gputopo.model.cluster.Outcome
    names: List[str]
    ranks: List[List[int]]
    fingerprints: List[Dict[str, Any]]
    slow_below: float


@dataclass
class Facts:
    """What one judgement reads; a fact the judgement has not is None."""

    topology: Optional[Topology] = None
    run: Optional[Run] = None
    headlines: Optional[List[Any]] = None
    nccl_debug: Optional[Dict[str, Any]] = None
    cluster: Optional[ClusterFacts] = None
    #: The findings made so far, by section (a rule that reads ``findings``).
    made: Dict[str, List[Finding]] = field(default_factory=dict)

    def need_run(self) -> Run:
        assert self.run is not None, "a run rule without a run folder"
        return self.run

    def need_cluster(self) -> ClusterFacts:
        assert self.cluster is not None, "a cluster rule without a cluster run"
        return self.cluster


@dataclass(frozen=True)
class Rule:
    """One rule: ``judge`` makes findings of the kinds ``makes`` from the facts ``reads``."""

    name: str
    reads: Tuple[str, ...]
    makes: Tuple[str, ...]
    judgements: Tuple[str, ...]
    section: str
    judge: Callable[[Facts], List[Finding]]
    #: What the rule judges, in a few words (docs/architecture.md's table says it too).
    says: str = ""

    def __post_init__(self):
        unknown = [f for f in self.reads if f not in FACTS]
        if unknown:
            raise ValueError(f"rule {self.name}: unknown facts {unknown}")
        if any(not is_kind(k) for k in self.makes):
            raise ValueError(f"rule {self.name}: a kind not in the kind table in {self.makes}")
        if any(j not in JUDGEMENTS for j in self.judgements) or self.section not in SECTIONS:
            raise ValueError(f"rule {self.name}: unknown judgement or section")


# ----------------------------------------------------------------------------- the rules' adapters
# Each reads its facts off Facts and calls the rule's function in the module of its concept.

def _scan(facts: Facts) -> List[Finding]:
    if facts.topology is None:
        return []
    doc = facts.nccl_debug if facts.run is None else facts.run.nccl_debug  # an import's NCCL log, if any
    return list(topology_findings(facts.topology, staged_gpus=staged_gpus(doc)))


def _events(facts: Facts) -> List[Finding]:
    # A writer may also have recorded a finding the data rules derive (e.g. the bench's own
    # `corrupt`): the derived one, with host facts and causes, replaces it.
    seen = {_identity(f) for f in facts.made.get("data", [])}
    return [f for f in run_event_findings(facts.need_run()) if _identity(f) not in seen]


def _identity(f: Finding):
    return (f.kind, tuple(sorted(f.gpus)) if f.gpus else None)


def _classes(facts: Facts):
    """A measurement's link class from the topology, where it recorded none."""
    topo = facts.topology
    return lambda m: link_class_of(topo, m)


def _corrupt(facts: Facts) -> List[Finding]:
    return with_causes(corrupt_findings(facts.need_run().measurements, _classes(facts)), facts.topology)


def _nccl_tests_corrupt(facts: Facts) -> List[Finding]:
    return nccl_tests_findings(facts.need_run().nccl_tests, facts.topology)


def _numerics(facts: Facts) -> List[Finding]:
    corrupt_pairs = {tuple(sorted(f.gpus)) for f in facts.made.get("data", []) if f.kind == "corrupt" and f.gpus}
    return numerics_findings(facts.need_run().numerics, facts.topology, corrupt_pairs)


def _slow(facts: Facts) -> List[Finding]:
    return slow_findings(facts.headlines or [], facts.topology)


def _like_gpus(facts: Facts) -> List[Finding]:
    # what earlier rules already said is slow, of a pair (a speed symptom: slow, outlier, peer
    # copies slower than staged) or of a GPU (an import's shared-GPU outlier)
    said = {tuple(sorted(f.gpus)) for f in facts.made.get("data", [])
            if symptom(f.kind) == "speed" and f.severity == "warning" and f.gpus}
    return like_gpu_findings(facts.headlines or [], facts.topology, said)


def _staged(facts: Facts) -> List[Finding]:
    return staged_findings(facts.need_run().measurements, facts.topology)


def _noisy(facts: Facts) -> List[Finding]:
    return noisy_findings(facts.need_run().measurements, _classes(facts))


def _import_failures(facts: Facts) -> List[Finding]:
    return import_failure_findings(facts.need_run())


def _import_problems(facts: Facts) -> List[Finding]:
    return import_problem_findings(facts.need_run())


def _perftest(facts: Facts) -> List[Finding]:
    return perftest_run_findings(facts.need_run().imported)


def _peer_access(facts: Facts) -> List[Finding]:
    return no_peer_access_findings(facts.need_run())


def _import_asymmetry(facts: Facts) -> List[Finding]:
    return import_asymmetry_findings(facts.need_run())


def _import_shared_gpu(facts: Facts) -> List[Finding]:
    return import_shared_gpu_findings(facts.need_run())


def _nccl_debug(facts: Facts) -> List[Finding]:
    doc = facts.nccl_debug if facts.run is None else facts.run.nccl_debug
    return nccl_debug_findings(doc or {}, facts.topology)


def _cliff(facts: Facts) -> List[Finding]:
    return cliff_findings(facts.need_run().measurements)


def _kernel_log(facts: Facts) -> List[Finding]:
    return kernel_log_findings(facts.need_run())


def _tool_flagged(facts: Facts) -> List[Finding]:
    made = [f for fs in facts.made.values() for f in fs]
    if facts.run is None:
        doc = facts.nccl_debug or {}
        return tool_flagged_findings(doc.get("flagged_lines") or [], made, doc.get("files"))
    run = facts.run
    return tool_flagged_findings(run_flagged_lines(run.imported, run.nccl_tests, run.nccl_debug), made)


def _run_folder(facts: Facts) -> List[Finding]:
    return data_findings(facts.need_run())


def _cluster_mismatch(facts: Facts) -> List[Finding]:
    c = facts.need_cluster()
    return cluster.mismatch_findings(c.names, c.fingerprints, c.ranks)


def _cluster_slow(facts: Facts) -> List[Finding]:
    c = facts.need_cluster()
    return cluster.slow_node_findings(cluster.triangulate(c.outcome, len(c.names)), c.names, c.ranks, c.slow_below)


def _cluster_corrupt(facts: Facts) -> List[Finding]:
    c = facts.need_cluster()
    return cluster.wrong_sum_findings(c.outcome, c.names)


def _cluster_rank_errors(facts: Facts) -> List[Finding]:
    c = facts.need_cluster()
    return cluster.rank_error_findings(c.outcome, c.names)


def _cluster_lost(facts: Facts) -> List[Finding]:
    return cluster.lost_findings(facts.need_cluster().outcome)


_SCAN_KINDS = ("gpu-lost", "nvlink-down", "nvlink-fabric", "pcie-downgraded", "link-errors", "p2p-unsupported",
               "nvlink-not-connected", "iommu", "acs", "nic-far", "gpudirect-rdma", "nic-port-down", "nic-rate",
               "nic-errors", "ecc", "remapped-rows", "retired-pages", "xid", "thermal", "driver-error")
_R = Rule
#: The registry, in the order the rules run.
RULES: Tuple[Rule, ...] = (
    _R("scan-checks", ("topology", "nccl-debug"), _SCAN_KINDS, ("run", "scan"), "scan", _scan,
       "what NVML shows: lost GPUs, links down or narrow, link errors, P2P, IOMMU/ACS, NICs, GPU health "
       "(topology_checks.py, network_checks.py, health_checks.py)"),
    _R("wrong-data", ("measurements", "topology"), ("corrupt",), ("run",), "data", _corrupt,
       "wrong elements after a copy, a DataParallel primitive or a collective (measured_findings.py), with "
       "the host facts and causes (integrity_findings.py)"),
    _R("nccl-tests-out-of-bounds", ("nccl-tests", "topology"), ("corrupt",), ("run",), "data", _nccl_tests_corrupt,
       "nccl-tests' own out-of-bounds count (integrity_findings.py)"),
    _R("numerics", ("numerics", "topology", "findings"), ("nan", "diverged"), ("run",), "data", _numerics,
       "DataParallel or DDP went NaN or diverged from one GPU (numerics_findings.py)"),
    _R("slow", ("headlines", "topology"), ("slow",), ("run",), "data", _slow,
       "a pair below its link's published or theoretical rate (bandwidth_findings.py)"),
    _R("staged-faster", ("measurements", "topology"), ("p2p-slower-than-staged",), ("run",), "data", _staged,
       "peer copies slower than copies staged through host memory (bandwidth_findings.py)"),
    _R("noisy", ("measurements", "topology"), ("noisy",), ("run",), "data", _noisy,
       "samples that spread (measured_findings.py)"),
    _R("import-failures", ("imported",), ("corrupt", "crash"), ("run",), "data", _import_failures,
       "an imported testcase that failed: nvbandwidth's data check, or another error (import_findings.py)"),
    _R("import-problems", ("imported",), ("incomplete-data",), ("run",), "data", _import_problems,
       "what an import could not read (import_findings.py)"),
    _R("perftest", ("imported",), ("rdma-test-failed", "rdma-slow", "rdma-bandwidth"), ("run",), "data", _perftest,
       "an imported perftest run: its failure, its bandwidth against its port's rate (perftest_findings.py)"),
    _R("peer-access", ("imported",), ("no-peer-access",), ("run",), "data", _peer_access,
       "pairs an imported output shows without peer access (peer_access.py)"),
    _R("import-asymmetry", ("imported", "measurements"), ("outlier",), ("run",), "data", _import_asymmetry,
       "without --topo, a pair one direction of which is slower than the other (import_findings.py)"),
    _R("import-shared-gpu", ("imported", "measurements"), ("outlier",), ("run",), "data", _import_shared_gpu,
       "without --topo, a GPU all of whose staged pairs are slow (import_findings.py)"),
    _R("like-gpus", ("headlines", "topology", "findings"), ("outlier", "slow-gpu-group"), ("run",), "data",
       _like_gpus, "GPUs of one model compared with each other: a pair below its like pairs' median, a set of "
       "GPUs slower than the others with every peer (like_gpus.py)"),
    _R("nccl-debug", ("nccl-debug", "topology"),
       ("nccl-init-failed", "nccl-gdr-off", "nccl-socket-fallback", "nccl-far-nic", "nccl-comm-failed",
        "nccl-collnet-failed", "nccl-known-warn"),
       ("run", "nccl-debug"), "data", _nccl_debug, "what an NCCL_DEBUG log says the job did (nccl_debug_findings.py)"),
    _R("bandwidth-cliff", ("measurements",), ("bandwidth-cliff", "not-verified"), ("run",), "data", _cliff,
       "an nccl-tests size sweep that falls and does not recover; a run that checked no data (sweep_findings.py)"),
    _R("kernel-log", ("kernel-log", "topology"), ("driver-error", "incomplete-data"), ("run",), "data",
       _kernel_log, "a kernel log's NVIDIA driver lines that are no Xid (kernel_log_findings.py)"),
    # after every rule that may claim a flagged line (quoting it in evidence["tool_lines"])
    _R("tool-flagged", ("imported", "nccl-tests", "nccl-debug", "findings"), ("tool-flagged",), ("run", "nccl-debug"),
       "data", _tool_flagged, "every line a tool marked as a warning or error (NCCL WARN, nccl-tests' Test failure, "
                              "perftest's errors, Cuda failure) that no other rule claims (flagged_findings.py)"),
    # events.jsonl's recorded findings: a cluster run's (its findings, written at its end) and an
    # older bench folder's (hangs, crashes, its own corrupt and noisy)
    _R("steps-not-finished", ("events", "numerics", "topology", "findings"),
       ("hang", "crash", "corrupt", "nan", "diverged", "noisy", "out-of-memory", "slow", "slow-node",
        "topology-mismatch", "rank-error", "stopped"), ("run",), "events", _events,
       "the bench steps and numerics ways that hung or crashed (their one failure record), and the findings a "
       "writer recorded: a cluster run's, an older bench folder's (event_findings.py, step_failures.py)"),
    _R("run-folder", ("run-folder",), ("incomplete-data", "invalid-data"), ("run",), "run-folder", _run_folder,
       "a run folder cut short, lines unread, a run that did not finish (data_findings.py)"),
    _R("cluster-mismatch", ("fingerprints",), ("topology-mismatch",), ("cluster",), "data", _cluster_mismatch,
       "a node that differs from the majority (cluster_findings.py)"),
    _R("cluster-slow", ("cluster", "fingerprints"), ("slow-node", "slow"), ("cluster",), "data", _cluster_slow,
       "a slow node or a slow link, told apart by who was slow with whom (cluster_findings.py)"),
    _R("cluster-wrong-sums", ("cluster", "fingerprints"), ("corrupt",), ("cluster",), "data", _cluster_corrupt,
       "an all_reduce whose sum was wrong (cluster_findings.py)"),
    _R("cluster-rank-errors", ("cluster", "fingerprints"), ("rank-error", "out-of-memory", "stopped"), ("cluster",),
       "data", _cluster_rank_errors, "a rank that failed on its own, ran out of memory or was stopped "
                                     "(cluster_findings.py)"),
    _R("cluster-lost-ranks", ("cluster",), ("hang", "crash", "stopped"), ("cluster",), "data", _cluster_lost,
       "ranks lost: hung or crashed, by host and rank (cluster_findings.py)"),
)


def judge(judgement: str, facts: Facts, rules: Optional[Sequence[Rule]] = None,
          trace: Optional[Dict[str, List[Finding]]] = None) -> List[Finding]:
    """Run every rule of ``judgement`` (``rules``, default the registry) on ``facts``, in order;
    the findings in SECTIONS' order. ``trace``: filled with each rule's findings, by rule name."""
    if judgement not in JUDGEMENTS:
        raise ValueError(f"unknown judgement {judgement!r}")
    facts.made = {s: [] for s in SECTIONS}
    for rule in RULES if rules is None else rules:
        if judgement not in rule.judgements:
            continue
        found = rule.judge(facts)
        facts.made[rule.section] += found
        if trace is not None:
            trace[rule.name] = list(found)
    return [f for s in SECTIONS for f in facts.made[s]]


def scan_findings(topo: Topology) -> List[Finding]:
    """A machine's findings from its topology alone (`gputopo scan`, `place`, `export`)."""
    return judge("scan", Facts(topology=topo))


def cluster_run_findings(outcome, names: List[str], ranks: List[List[int]], fingerprints: List[Dict[str, Any]],
                         slow_below: float) -> List[Finding]:
    """Every finding of a cluster run: mismatched nodes, slow nodes/links, wrong sums, ranks that
    failed on their own, lost ranks."""
    return judge("cluster", Facts(cluster=ClusterFacts(outcome, names, ranks, fingerprints, slow_below)))


def nccl_debug_log_findings(doc: Dict[str, Any], topo: Optional[Topology]) -> List[Finding]:
    """An NCCL_DEBUG log's findings, read on its own (`gputopo import nccl-debug --json`)."""
    return judge("nccl-debug", Facts(nccl_debug=doc, topology=topo))


def run_findings(run: Run, headlines: List[Any]) -> List[Finding]:
    """A run folder's findings (a bench run or an import), before the culprits and the history."""
    return judge("run", Facts(topology=run.topology, run=run, headlines=headlines))
