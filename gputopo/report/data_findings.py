"""Findings about the run's own data, not the hardware: a run folder with lines that could not be
read or a measurements file that was emptied (``incomplete-data``), measurements appended twice
measurement lines with impossible values (a negative time, a GPU the topology lacks) or nccl-tests
rows with negative figures (``invalid-data``), an imported nccl-tests log that stops before its
footer or mid-row, and imported kernel-log / NCCL_DEBUG lines that could not be read
(``incomplete-data``); and an imported nccl-tests log that checked no data (``not-verified``, info:
validation 0, so its integrity is not measured).

On gputopo's own bench run they are warnings: the hardware may be fine, but a report built from
part of the data cannot say "ok" as if it had all of it, and `gputopo check` fails it. What an
*import* could not read (a posted output cut short or elided with ``...``, a damaged line, the
lines of a log imported ``--into`` a run) is coverage, not a fault (issue 46): the finding is info,
the verdict line says what was not read (judged.py), and it never turns a healthy reading into
``degraded``; `check` still fails it (run.readable). The problems themselves are collected where
the data is read (the run-folder reader, importers/nccl_tests.py); here they become findings, one
per problem.
"""

from __future__ import annotations

from typing import List

from gputopo.model import Finding

from .run_folder import Run

# The finding kinds this module makes are the table's ``data_trouble`` kinds
# (gputopo/model/finding_kinds.py, docs/findings.md).
REMEDY_RERUN = "re-run the benchmark (or re-import the complete log) to get the missing results"


def _kind(problem: str) -> str:
    invalid = ("negative", "non-finite", "impossible values", "repeat an earlier")
    return "invalid-data" if any(w in problem for w in invalid) else "incomplete-data"


#: The severity of what an import could not read (coverage: said, counted, never a fault).
IMPORT_TROUBLE = "info"


def is_import(run: Run) -> bool:
    """Whether ``run`` is the folder of `gputopo import` (its data is a tool's output, read once)."""
    return bool((run.info.get("options") or {}).get("imported_from")) or bool(run.imported) or bool(run.nccl_tests)


def data_severity(run: Run) -> str:
    """``warning`` on gputopo's own run folder, ``info`` on an import's (IMPORT_TROUBLE)."""
    return IMPORT_TROUBLE if is_import(run) else "warning"


def data_findings(run: Run) -> List[Finding]:
    out = []
    severity = data_severity(run)
    for problem in run.problems:
        out.append(Finding(_kind(problem), severity, f"run folder: {problem}",
                           evidence={"folder": str(run.path)}, remedies=[REMEDY_RERUN]))
    for log in run.nccl_tests:
        for problem in log.get("problems") or []:
            out.append(Finding(_kind(problem), IMPORT_TROUBLE,
                               f"nccl-tests {log.get('op', '?')} log {log.get('file', '?')}: {problem}",
                               gpus=None, evidence={"file": log.get("path") or log.get("file")},
                               remedies=[REMEDY_RERUN]))
    out += not_verified_findings(run)
    for problem in (run.nccl_debug or {}).get("problems") or []:
        out.append(Finding("incomplete-data", IMPORT_TROUBLE, f"imported NCCL_DEBUG log: {problem}",
                           evidence={"files": (run.nccl_debug or {}).get("files")},
                           remedies=["re-import the complete NCCL_DEBUG=INFO log"]))
    return out


def not_verified_findings(run: Run) -> List[Finding]:
    """An imported nccl-tests log that checked no data (``validation: 0``: nccl-tests' -c 0, or
    every #wrong printed N/A): its #wrong is no result, so the data's integrity is not measured.
    A stated fact (info): the bandwidth figures stand, nothing says the bytes were right."""
    out = []
    for log in run.nccl_tests:
        if log.get("validated") is not False:
            continue
        how = ("validation: 0 in its header (nccl-tests -c 0)" if log.get("validation") == 0
               else "#wrong printed N/A in every row")
        out.append(Finding(
            "not-verified", "info",
            f"{log.get('tool') or 'nccl-tests'} {log.get('op', '?')} log {log.get('file', '?')}: the data was not "
            f"verified ({how}); its #wrong is no result, so this run says nothing of the data's integrity",
            gpus=log.get("gpus") or None,
            evidence={"file": log.get("path") or log.get("file"), "validation": log.get("validation"),
                      "integrity": "not measured"},
            remedies=["rerun without -c 0 (nccl-tests checks every result by default) to check the data"]))
    return out
