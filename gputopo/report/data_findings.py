"""Findings about the run's own data, not the hardware: a run folder with lines that could not be
read or a measurements file that was emptied (``incomplete-data``), measurements appended twice
measurement lines with impossible values (a negative time, a GPU the topology lacks) or nccl-tests
rows with negative figures (``invalid-data``), an imported nccl-tests log that stops before its
footer or mid-row, and imported kernel-log / NCCL_DEBUG lines that could not be read
(``incomplete-data``).

They are warnings: the hardware may be fine, but a report built from part of the data cannot say
"ok" as if it had all of it. The problems themselves are collected where the data is read
(the run-folder reader, importers/nccl_tests.py); here they become findings, one per problem.
"""

from __future__ import annotations

from typing import List

from gputopo.model import Finding

from .run_folder import Run

#: The finding kinds this module makes (stable vocabulary, docs/findings.md).
DATA_KINDS = ("incomplete-data", "invalid-data")
REMEDY_RERUN = "re-run the benchmark (or re-import the complete log) to get the missing results"


def _kind(problem: str) -> str:
    invalid = ("negative", "non-finite", "impossible values", "repeat an earlier")
    return "invalid-data" if any(w in problem for w in invalid) else "incomplete-data"


def data_findings(run: Run) -> List[Finding]:
    out = []
    for problem in run.problems:
        out.append(Finding(_kind(problem), "warning", f"run folder: {problem}",
                           evidence={"folder": str(run.path)}, remedies=[REMEDY_RERUN]))
    for log in run.nccl_tests:
        for problem in log.get("problems") or []:
            out.append(Finding(_kind(problem), "warning",
                               f"nccl-tests {log.get('op', '?')} log {log.get('file', '?')}: {problem}",
                               gpus=None, evidence={"file": log.get("path") or log.get("file")},
                               remedies=[REMEDY_RERUN]))
    for problem in (run.nccl_debug or {}).get("problems") or []:
        out.append(Finding("incomplete-data", "warning", f"imported NCCL_DEBUG log: {problem}",
                           evidence={"files": (run.nccl_debug or {}).get("files")},
                           remedies=["re-import the complete NCCL_DEBUG=INFO log"]))
    return out
