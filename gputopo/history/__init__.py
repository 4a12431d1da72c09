"""A machine's history: every run kept in one SQLite database (issue 19).

``db`` opens it (WAL, busy timeout, schema version and ordered migrations), ``record`` writes
one run as one transaction, ``query`` lists runs and works out a machine's baseline, and
``drift`` / ``counters`` compare a new run with that history. They return measurements; the
findings (``drift``, ``counter-growth``) are made in gputopo/report/history_findings.py.
This package imports only the model, never the report, so the report may read it.
"""
