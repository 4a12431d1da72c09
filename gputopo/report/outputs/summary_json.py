"""summary.json: findings, class table, per-pair table, with ``schema_version``."""

from __future__ import annotations

from pathlib import Path

from gputopo.runfolder.writer import write_json
from gputopo.report.summary import Summary

FILENAME = "summary.json"


def write_summary_json(summary: Summary, out_dir) -> Path:
    path = Path(out_dir) / FILENAME
    write_json(path, summary.to_json())
    return path
