"""The names of the run folder: where new folders go, its files, run.json's status values and
the schema versions a reader takes (docs/run-folder.md, the contract). Every writer and reader
takes them from here, so a name is spelled once."""

from __future__ import annotations

from gputopo import SCHEMA_VERSION

#: Where a new run folder goes without ``--out``: ``reports/<YYYYmmdd-HHMMSS>-<machine>/`` under
#: the current directory.
DEFAULT_BASE_DIR = "reports"

# -- the raw files, written as results come and never rewritten by a reader
RUN_JSON = "run.json"
TOPOLOGY_JSON = "topology.json"
MEASUREMENTS_JSONL = "measurements.jsonl"
EVENTS_JSONL = "events.jsonl"
#: Written by the numerics (DP-vs-DDP training results per pair and way) into the same folder.
NUMERICS_JSONL = "numerics.jsonl"
#: Every numerics run's loss per step, written once by the numerics when they end (a resume
#: rewrites it).
LOSSES_CSV = "numerics_losses.csv"
#: Each worker process's stdout/stderr, ``<worker>.<generation>.log``.
WORKERS_DIR = "workers"
#: The lock a writing job holds in its run folder (``fcntl.flock``; writer.run_folder_lock).
LOCK_FILE = ".gputopo.lock"
#: The internal error's traceback (exit 4).
ERROR_TXT = "error.txt"

# -- what an import keeps beside its measurements
#: What every import read, one document shape for every tool: ``{"schema_version": N, "imports":
#: [{"tool": ..., ...}, ...]}``, one entry per file, log or run the tool's output held (an
#: nvbandwidth / p2pBandwidthLatencyTest output's matrices, a perftest run, ibstat's ports, an
#: nccl-tests log, a kernel log's driver lines, an NCCL_DEBUG log's transports). `import
#: nccl-debug --into` adds its entry to the folder it attaches to.
IMPORTED_JSON = "imported.json"
#: The ``tool`` of the entries the report reads by tool (the others are judged by import_findings
#: and its kin: "nvbandwidth", "p2pBandwidthLatencyTest", "perftest", "ibstat").
NCCL_TESTS_TOOL = "nccl-tests"
#: The tools whose logs `import nccl-tests` reads, as each log names the one that printed it.
NCCL_TESTS_TOOLS = (NCCL_TESTS_TOOL, "rccl-tests")
NCCL_DEBUG_TOOL = "nccl-debug"
KERNEL_LOG_TOOL = "kernel-log"
#: Where folders imported before that one shape kept them (read, never written now):
#: nccl_tests.json's ``logs``, nccl_debug.json and kernel_log.json, each read as its tool's entries.
NCCL_TESTS_JSON = "nccl_tests.json"
NCCL_DEBUG_JSON = "nccl_debug.json"
KERNEL_LOG_JSON = "kernel_log.json"

#: What the machine's history said when the run was recorded (docs/history.md).
HISTORY_FINDINGS_JSON = "history_findings.json"

# -- a cluster run's own (docs/cluster.md; cluster.py)
#: The cluster's nodes, rounds and verdicts, written at the end.
CLUSTER_JSON = "cluster.json"
#: ``host reason`` per line: the nodes to drain.
DRAIN_TXT = "drain.txt"
#: Each round as rank 0 gathered it, appended the moment it is done.
ROUNDS_JSONL = "rounds.jsonl"
#: ``ranks/<node>-rank<N>.jsonl``: each rank's own results, written by that rank.
RANKS_DIR = "ranks"
#: ``nodes/<node>/node.json`` (and the node's topology.json).
NODES_DIR = "nodes"
NODE_JSON = "node.json"

#: The JSON-lines files appended to as results come (a resume appends to them too).
APPENDED = (MEASUREMENTS_JSONL, EVENTS_JSONL, NUMERICS_JSONL)

# -- run.json's status
#: Statuses of a run that did not finish ("running" from the start).
UNFINISHED = ("running", "interrupted", "failed")
#: Every status a bench or cluster run's run.json can hold; a reader takes any other as damage.
STATUSES = UNFINISHED + ("complete",)

#: Schema versions of run-folder files this gputopo reads (SCHEMA_VERSION: what it writes).
READABLE_SCHEMA_VERSIONS = (SCHEMA_VERSION,)
