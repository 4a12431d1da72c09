"""Code the tests share (tests/ is on sys.path: see tests/conftest.py): `helpers.cli` runs the
gputopo command; cluster_fault_rank.py is a script the cluster tests start as a rank."""
