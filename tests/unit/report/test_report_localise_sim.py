"""Localising on simulated machines: a fault placed on a GPU, a pair, a class, two at once, a
narrowed PCIe link and a crashing GPU, each found from the data (the report is never told the
fault) and named as its smallest culprit."""

from __future__ import annotations

import json

import pytest

from helpers.cli import gputopo

pytestmark = pytest.mark.slow

BASE = 'extends = "pcie-4gpu"\nname = "{name}"\n'  # PXB 0-1, PIX 2-3, SYS 0-2 0-3 1-2 1-3


def fault(where, what, **kw):
    extra = "".join(f"{k} = {json.dumps(v)}\n" for k, v in kw.items())
    return f'[[fault]]\nwhere = "{where}"\nwhat = "{what}"\n{extra}'


def culprits(tmp_path, name, *faults, machine=BASE):
    desc = tmp_path / f"{name}.toml"
    desc.write_text(machine.format(name=name) + "\n".join(faults))
    proc = gputopo("bench", "--sim", desc, "--quick", "--tests", "p2p", "--json", "--out", tmp_path / name,
                   timeout=600)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    found = [f for f in doc["findings"] if f["kind"] in ("gpu-fault", "link-fault", "class-fault", "worker-killed")]
    return found, doc


def test_gpu_fault_on_every_path(tmp_path):
    found, doc = culprits(tmp_path, "gpu", fault("gpu:3", "corrupt", path="all"))
    assert [(f["kind"], f["gpus"]) for f in found] == [("gpu-fault", [3])]
    ev = found[0]["evidence"]
    assert ev["staged_bad"] is True and sorted(map(tuple, ev["pairs"])) == [(0, 3), (1, 3), (2, 3)]
    assert "every path" in found[0]["message"]
    corrupt = [f for f in doc["findings"] if f["kind"] == "corrupt"]
    assert corrupt and all(f["evidence"]["explained_by"] == ["gpu-fault:3"] for f in corrupt)


def test_pair_fault_is_the_link(tmp_path):
    found, _ = culprits(tmp_path, "pair", fault("pair:0,2", "corrupt"))
    assert [(f["kind"], f["gpus"], f["link_class"]) for f in found] == [("link-fault", [0, 2], "SYS")]


def test_class_fault_is_the_host_path(tmp_path):
    found, _ = culprits(tmp_path, "class", fault("class:SYS", "corrupt"))
    assert [(f["kind"], f["link_class"]) for f in found] == [("class-fault", "SYS")]
    assert found[0]["evidence"]["culprit"] == "host-path"
    assert sorted(tuple(x["gpus"]) for x in found[0]["evidence"]["explains"]) == [(0, 2), (0, 3), (1, 2), (1, 3)]


def test_two_independent_faults(tmp_path):
    found, _ = culprits(tmp_path, "two", fault("gpu:3", "corrupt", path="all"), fault("pair:0,2", "corrupt"))
    assert sorted((f["kind"], tuple(f["gpus"])) for f in found) == [("gpu-fault", (3,)), ("link-fault", (0, 2))]


def test_slow_pairs_chain_to_the_narrowed_gpu_link(tmp_path):
    found, doc = culprits(tmp_path, "narrow", fault("gpu:1", "downtrained", width=4))
    assert [(f["kind"], f["gpus"], f["evidence"]["culprit"]) for f in found] == [("gpu-fault", [1], "gpu-pcie-link")]
    assert "trained at x4 of x16" in found[0]["message"]
    explained = {x["kind"] for x in found[0]["evidence"]["explains"]}
    assert "pcie-downgraded" in explained and explained & {"slow", "outlier"}


def test_crashes_on_one_gpu_blame_the_gpu(tmp_path):
    found, _ = culprits(tmp_path, "crash", fault("gpu:2", "crash"))
    assert [(f["kind"], f["gpus"]) for f in found] == [("gpu-fault", [2])]
    assert {x["kind"] for x in found[0]["evidence"]["explains"]} == {"crash"}
