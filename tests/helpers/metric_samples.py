"""The Prometheus samples a snapshot exports, read back through prometheus_client's own text
format and parser (what a scraper sees)."""

from __future__ import annotations

from typing import List

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from gputopo.export.cache import Snapshot
from gputopo.export.families import snapshot_families


def snapshot_samples(snap: Snapshot) -> List[Sample]:
    """Every sample ``snap`` exports, as a scrape of the exporter reads it."""

    class C:
        def collect(self):
            return snapshot_families(snap)

    reg = CollectorRegistry()
    reg.register(C())
    text = generate_latest(reg).decode()
    return [s for fam in text_string_to_metric_families(text) for s in fam.samples]
