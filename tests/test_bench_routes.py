"""NCCL's route rule, shared by the sim fabric and the numerics (one rule, NCCL's settings honoured)."""

import pytest

from gputopo.bench.routes import nccl_route
from gputopo.model import LinkClass
from gputopo.numerics.paths import nccl_path


@pytest.mark.parametrize("cls,peer_ok,env,route", [
    ("NV4", True, {}, "p2p"), ("PIX", True, {}, "p2p"), ("PXB", True, {}, "p2p"),
    ("PHB", True, {}, "host"), ("NODE", True, {}, "host"), ("SYS", True, {}, "host"),
    ("PXB", False, {}, "host"),
    ("PXB", True, {"NCCL_P2P_DISABLE": "1"}, "host"),
    ("NV4", True, {"NCCL_P2P_LEVEL": "LOC"}, "host"),
    ("SYS", True, {"NCCL_P2P_LEVEL": "SYS"}, "p2p"),
    ("PXB", True, {"NCCL_P2P_LEVEL": "PIX"}, "host"),
])
def test_nccl_route(cls, peer_ok, env, route):
    assert nccl_route(cls, peer_ok, env) == route


def test_numerics_follows_the_same_rule_and_settings(monkeypatch):
    monkeypatch.delenv("NCCL_P2P_DISABLE", raising=False)
    monkeypatch.delenv("NCCL_P2P_LEVEL", raising=False)
    assert nccl_path(LinkClass.parse("PXB"), {"read": "OK", "write": "OK"}) == "p2p"
    assert nccl_path(LinkClass.parse("PXB"), {"read": "CNS", "write": "OK"}) == "host"
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    assert nccl_path(LinkClass.parse("NV4"), {}) == "host"
