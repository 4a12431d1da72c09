"""One document shape for every import (issue 51): imported.json's ``imports``, each entry naming
its ``tool``; folders imported before it (nccl_tests.json, kernel_log.json, nccl_debug.json) read
into the same entries and judged the same.

Each old folder here is the new folder of the same import rewritten in the old layout (the
entries moved back to their tool's own file, as gputopo wrote them before), so the two must
read and judge alike: same entries, same findings, same verdict.
"""

from __future__ import annotations

import json

import pytest
from conftest_report import seed_topology, write_run
from helpers.paths import FIXTURES

from gputopo.errors import UsageError
from gputopo.importers.run import run_import
from gputopo.report.run_folder import load_run
from gputopo.report.summary import summarize
from gputopo.runfolder.layout import IMPORTED_JSON

NCCL_TESTS_LOG = FIXTURES / "nccl-tests" / "autodl_2x2080ti_all_reduce.txt"
KERNEL_LOG = FIXTURES / "xid" / "bumblebee-677_xid32_xid31.txt"


def _to_old_layout(run_dir, tool: str, name: str, wrap) -> None:
    doc = json.loads((run_dir / IMPORTED_JSON).read_text())
    entries = [{k: v for k, v in e.items() if k != "tool"} for e in doc["imports"] if e["tool"] == tool]
    assert entries and len(entries) == len(doc["imports"])
    (run_dir / IMPORTED_JSON).unlink()
    (run_dir / name).write_text(json.dumps({"schema_version": doc["schema_version"], **wrap(entries)}))


def _judged(run_dir):
    run = load_run(run_dir)
    summary = summarize(run)
    return run.imports, sorted(f.kind for f in summary.findings), summary.verdict


@pytest.mark.parametrize("tool, path, name, wrap", [
    ("nccl-tests", NCCL_TESTS_LOG, "nccl_tests.json", lambda es: {"logs": es}),
    ("kernel-log", KERNEL_LOG, "kernel_log.json", lambda es: es[0]),
])
def test_an_old_folders_tool_file_reads_as_the_new_imports(tmp_path, tool, path, name, wrap):
    new = run_import(tool, [path], out_dir=tmp_path / "new", render=False).run_dir
    old = run_import(tool, [path], out_dir=tmp_path / "old", render=False).run_dir
    _to_old_layout(old, tool, name, wrap)
    assert not (old / IMPORTED_JSON).exists() and not (new / name).exists()
    new_imports, new_kinds, new_verdict = _judged(new)
    old_imports, old_kinds, old_verdict = _judged(old)
    strip = [{k: v for k, v in e.items() if k != "schema_version"} for e in old_imports]
    assert strip == new_imports and all(e["tool"] == tool for e in new_imports)
    assert (old_kinds, old_verdict) == (new_kinds, new_verdict)


def test_nccl_debug_into_adds_its_entry_and_is_refused_a_second_time(tmp_path):
    log = FIXTURES / "nccl-debug" / "nccl-429_2node_16gpu_p2p-direct-pointer_ib-gdrdma_excerpt.log"
    topo = seed_topology(set())
    run = write_run(tmp_path / "run", topo=topo)
    with pytest.raises(UsageError):  # another machine's log: refused, nothing written
        run_import("nccl-debug", [log], into=run, render=False)
    assert not (run / IMPORTED_JSON).exists()


def test_an_old_nccl_debug_file_blocks_a_second_import(tmp_path):
    """A folder that has nccl_debug.json (imported before the one shape) holds that import: a
    second `--into` is refused, never a second entry beside it."""
    from gputopo.runfolder.imported import attach_import

    run = write_run(tmp_path / "run", topo=seed_topology(set()))
    (run / "nccl_debug.json").write_text(json.dumps({"schema_version": 1, "pairs": []}))
    assert [e["tool"] for e in load_run(run).imports] == ["nccl-debug"]
    with pytest.raises(UsageError, match="already holds an import of nccl-debug"):
        attach_import(run, [{"tool": "nccl-debug", "pairs": []}])
    attach_import(run, [{"tool": "other", "x": 1}])  # another tool's entry is added
    assert [e["tool"] for e in load_run(run).imports] == ["other", "nccl-debug"]
