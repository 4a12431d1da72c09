"""Fleets: `gputopo health`, one node's verdict in its scheduler's own terms.

- ``checks``: the passive checks (what the scan and the history already judge, grouped by what
  they look at), each with its applicability and basis;
- ``verdict``: the node verdict (pass, warn, fail, not-judged) and its JSON document;
- ``passive``: the passive level run within a time budget (what does not finish is not judged);
- ``dialects``: each consumer's output and exit codes (json, npd, nagios, slurm-healthcheck);
- ``slurm``: drain ownership through `scontrol` and `sinfo`;
- ``state``: the last verdict, kept node-local.

The reason grammar every dialect uses is gputopo/model/reason.py. Measuring nothing, this
package makes no finding: the report's rules (gputopo/report/) and the history's comparisons
(gputopo/recording.py) make them; it only groups and says them.
"""
