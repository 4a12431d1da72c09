"""The fabric is an object (issue 51 item 1): bench/fabrics/fabric.py alone knows the fabrics by
name; everything else asks a Fabric's properties, and the report asks each measurement what its
figures are of (``figures_of``). The house rules below scan gputopo/ with ``ast``, outside
bench/fabrics/, for a comparison (``==``, ``!=``, ``in``, ``not in``) between a fabric's name as a
string constant and anything, and for a tuple, list or set written with two fabric names or more
(a list of fabrics kept by hand: FABRIC_NAMES and the fabrics' properties say it)."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path
from typing import List

import pytest

from gputopo.bench.fabrics.fabric import FABRIC_NAMES, FABRICS, fabric_named, recorded_fabric
from gputopo.bench.plan import Step, layout
from gputopo.errors import UsageError
from helpers.paths import REPO

PACKAGE = REPO / "gputopo"
FABRICS_DIR = PACKAGE / "bench" / "fabrics"

#: Comparisons with the same strings that are not of a fabric: a torch device's type, a key of
#: /proc/cpuinfo, a word searched for in an error text. (file, the comparison as ast.unparse
#: writes it.)
NOT_A_FABRIC = {
    ("gputopo/bench/patterns.py", "dev == 'cpu'"),  # a torch device's type
    ("gputopo/bench/verification.py", "flat.device.type == 'cpu'"),
    ("gputopo/bench/verification.py", "expected.device.type == 'cpu'"),
    ("gputopo/numerics/ways.py", "device != 'cpu'"),  # a torch device
    ("gputopo/probe/host_facts.py", "key == 'cpu'"),  # /proc/cpuinfo's "cpu" line (POWER)
    ("gputopo/report/step_failures.py", "'cuda' in low"),  # a word in an error's text
}

#: Fabric-name comparisons not yet replaced: none left (issue 51). Keep it empty: a new place
#: that needs to tell fabrics apart asks a Fabric property or a measurement's ``figures_of``.
KNOWN_EXCEPTIONS: set = set()


def _names(node: ast.AST) -> bool:
    """A fabric's name as a string constant, or a tuple/list/set holding one."""
    if isinstance(node, ast.Constant):
        return node.value in FABRIC_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names(e) for e in node.elts)
    return False


def name_comparisons(root: Path, skip: Path) -> List[tuple]:
    """(file relative to ``root``'s parent, the comparison) of every Compare node of a module
    under ``root`` (not under ``skip``) that has a fabric's name on either side."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if skip in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and any(_names(x) for x in [node.left, *node.comparators]):
                found.append((path.relative_to(root.parent).as_posix(), ast.unparse(node)))
    return found


def name_lists(root: Path, skip: Path) -> List[tuple]:
    """(file relative to ``root``'s parent, the literal) of every tuple, list or set literal of a
    module under ``root`` (not under ``skip``) that holds two or more fabric names as string
    constants: fabrics listed by hand."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if skip in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                named = {e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in FABRIC_NAMES}
                if len(named) >= 2:
                    found.append((path.relative_to(root.parent).as_posix(), ast.unparse(node)))
    return found


def test_no_list_of_fabric_names_outside_bench_fabrics():
    found = name_lists(PACKAGE, FABRICS_DIR)
    assert not found, ("take the fabrics from bench/fabrics/fabric.py (FABRIC_NAMES, a Fabric property), "
                       "not a list of their names: " + "; ".join(f"{f}: {c}" for f, c in found))


def test_the_list_scan_sees_a_list_of_names(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "fabrics").mkdir(parents=True)
    (pkg / "a.py").write_text('A = ("cuda", "sim")\nB = ["cpu", "cuda", "x"]\nC = {"sim", "cpu"}\n'
                              'ok = ("cuda", "nccl")\nok2 = ("sim", "sim_path")\n')
    (pkg / "fabrics" / "b.py").write_text('A = ("cuda", "sim")\n')  # the one place: allowed
    assert name_lists(pkg, pkg / "fabrics") == [("pkg/a.py", "('cuda', 'sim')"), ("pkg/a.py", "['cpu', 'cuda', 'x']"),
                                                ("pkg/a.py", "{'sim', 'cpu'}")]


def test_no_fabric_name_is_compared_outside_bench_fabrics():
    found = set(name_comparisons(PACKAGE, FABRICS_DIR))
    new = sorted(found - NOT_A_FABRIC - KNOWN_EXCEPTIONS)
    assert not new, ("compare a Fabric's properties (bench/fabrics/fabric.py), not its name: "
                     + "; ".join(f"{f}: {c}" for f, c in new))
    gone = sorted((NOT_A_FABRIC | KNOWN_EXCEPTIONS) - found)
    assert not gone, f"no longer in the code, drop from the lists: {gone}"


def test_the_scan_sees_each_form_of_comparison(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "fabrics").mkdir(parents=True)
    (pkg / "a.py").write_text('x = f == "cuda"\ny = "sim" != f\nz = f in ("cpu", "cuda")\n'
                              'w = g not in {"sim"}\nok = f == "nccl"\n')
    (pkg / "fabrics" / "b.py").write_text('x = f == "cuda"\n')  # the one place: allowed
    got = name_comparisons(pkg, pkg / "fabrics")
    assert got == [("pkg/a.py", c) for c in ("f == 'cuda'", "'sim' != f", "f in ('cpu', 'cuda')",
                                             "g not in {'sim'}")]


def test_one_lookup_and_an_unknown_name_is_a_usage_error():
    assert [fabric_named(n).name for n in ("cuda", " CPU ", "sim")] == ["cuda", "cpu", "sim"]
    assert fabric_named(FABRICS["sim"]) is FABRICS["sim"]
    with pytest.raises(UsageError, match=r"unknown fabric 'rocm'; known: cuda, cpu, sim"):
        fabric_named("rocm")
    assert recorded_fabric("none") is None and recorded_fabric(None) is None


def test_a_fabric_crosses_to_a_worker_process():
    for f in FABRICS.values():
        assert pickle.loads(pickle.dumps(f)) == f


def test_properties_say_what_the_names_used_to():
    cuda, cpu, sim = (fabric_named(n) for n in ("cuda", "cpu", "sim"))
    assert (cuda.timing, cpu.timing, sim.timing) == ("cuda-events", "wall", "modeled")
    assert (cuda.backend, cpu.backend, sim.backend) == ("nccl", "gloo", None)
    assert [f.needs_store for f in (cuda, cpu, sim)] == [True, True, False]
    assert [f.concurrent_allowed for f in (cuda, cpu, sim)] == [True, True, False]
    assert [f.memory for f in (cuda, cpu, sim)] == ["gpu", "host", "host"]
    assert cuda.pool_size(8) == 1 and cpu.pool_size(8) == 1 and sim.pool_size(3) == 3
    assert 1 <= sim.pool_size(None) <= 4
    pair = Step(id="s", group="p2p", gpus=(2, 5), link_class=None)
    coll = Step(id="t", group="collectives", gpus=(2, 5), link_class=None)
    assert layout(pair, cuda) == [(2, 5)] and layout(coll, cuda) == [(2,), (5,)]
    assert layout(pair, cpu) == [(2,), (5,)] and layout(coll, sim) == [(2, 5)]
