"""`gputopo export --textfile DIR`: one scan as DIR/gputopo.prom for node_exporter's textfile
collector, written to a temporary file and renamed over the old one (node_exporter never reads
half a file)."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, write_to_textfile

from .families import GputopoCollector

TEXTFILE_NAME = "gputopo.prom"


def write_textfile(cache, folder) -> Path:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GputopoCollector(cache))
    path = Path(folder) / TEXTFILE_NAME
    write_to_textfile(str(path), registry)  # writes PATH.<pid>.<thread> then os.replace
    return path
