"""Metrics for Prometheus (issue 19): the scan and the history as metric families
(``families``), a cache that scans at most once per interval and never twice at once
(``cache``), node_exporter's textfile (``textfile``) and a /metrics HTTP endpoint
(``server``). prometheus_client is imported only by these modules.
"""
