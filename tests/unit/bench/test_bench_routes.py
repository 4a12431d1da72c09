"""NCCL's route rule, shared by the sim fabric and the numerics (one rule, NCCL's settings honoured)."""

import pytest

from gputopo.bench.routes import nccl_route
from gputopo.model import LinkClass
from gputopo.numerics.paths import nccl_path


@pytest.mark.parametrize("cls,peer_ok,env,route", [  # CPU vendor unknown: NCCL's default PXB
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


# (class, cpu vendor, GPUs in the communicator, env, route): ncclTopoCheckP2p, NCCL 2.23-2.30
NCCL_CASES = [
    ("NODE", "intel", 2, {}, "host"),        # NODE is NCCL's PHB: beyond PXB
    ("SYS", "intel", 2, {}, "host"),
    ("PXB", "intel", 8, {}, "p2p"),
    ("SYS", "amd", 2, {}, "p2p"),            # AMD x86 with <= 2 GPUs: P2P up to SYS
    ("NODE", "amd", 2, {}, "p2p"),
    ("SYS", "amd", 4, {}, "host"),           # ... not with more GPUs
    ("SYS", "arm", 2, {}, "host"),
    ("SYS", "amd", 2, {"NCCL_P2P_LEVEL": "PXB"}, "host"),   # the user's level replaces it
    ("SYS", "intel", 2, {"NCCL_P2P_LEVEL": "SYS"}, "p2p"),
    ("NODE", "intel", 2, {"NCCL_P2P_LEVEL": "PHB"}, "p2p"),
    ("NODE", "intel", 2, {"NCCL_P2P_LEVEL": "3"}, "p2p"),    # old numbering: 3 = PHB
    ("SYS", "intel", 2, {"NCCL_P2P_LEVEL": "4"}, "p2p"),     # 4 and above = SYS
    ("PXB", "intel", 2, {"NCCL_P2P_LEVEL": "1"}, "host"),    # 1 = PIX
    ("SYS", "intel", 2, {"NCCL_P2P_LEVEL": "sys"}, "host"),  # names are case-sensitive: ignored
    ("NV4", "amd", 2, {"NCCL_P2P_DISABLE": "1"}, "host"),    # LOC: not even NVLink
    ("NV4", "amd", 2, {"NCCL_P2P_DISABLE": "0x1"}, "host"),  # strtol(.., 0)
    ("SYS", "amd", 2, {"NCCL_P2P_DISABLE": "true"}, "p2p"),  # strtol("true") is 0: not disabled
    ("NV4", "intel", 2, {"NCCL_P2P_LEVEL": "NVL"}, "p2p"),
    ("PIX", "intel", 2, {"NCCL_P2P_LEVEL": "NVL"}, "host"),
]


@pytest.mark.parametrize("cls,vendor,n,env,route", NCCL_CASES,
                         ids=[f"{c}-{v}-{n}-{e}" for c, v, n, e, _ in NCCL_CASES])
def test_nccl_p2p_level_depends_on_cpu_vendor_and_settings(cls, vendor, n, env, route):
    assert nccl_route(cls, True, env, cpu_vendor=vendor, n_gpus=n) == route


def test_older_nccl_rule_and_the_reason_says_which_route():
    from gputopo.bench.routes import route_and_reason

    # NCCL < 2.23: SYS by default, PXB on Intel, ARM, Zhaoxin
    assert nccl_route("SYS", True, {}, cpu_vendor="amd", n_gpus=8, nccl_version=(2, 21)) == "p2p"
    assert nccl_route("SYS", True, {}, cpu_vendor="zhaoxin", nccl_version=(2, 21)) == "host"
    route, why = route_and_reason("NODE", True, {}, cpu_vendor="intel")
    assert route == "host" and "host memory" in why and "PHB" in why and "intel" in why
    route, why = route_and_reason("SYS", True, {}, cpu_vendor="amd")
    assert route == "p2p" and "AMD" in why
    route, why = route_and_reason("PXB", False, {}, cpu_vendor="intel")
    assert route == "host" and "NVML" in why


def test_numerics_follows_the_same_rule_and_settings(monkeypatch):
    monkeypatch.delenv("NCCL_P2P_DISABLE", raising=False)
    monkeypatch.delenv("NCCL_P2P_LEVEL", raising=False)
    assert nccl_path(LinkClass.parse("PXB"), {"read": "OK", "write": "OK"}) == "p2p"
    assert nccl_path(LinkClass.parse("PXB"), {"read": "CNS", "write": "OK"}) == "host"
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    assert nccl_path(LinkClass.parse("NV4"), {}) == "host"
    monkeypatch.delenv("NCCL_P2P_DISABLE")
    assert nccl_path(LinkClass.parse("SYS"), {}, "amd") == "p2p"
    assert nccl_path(LinkClass.parse("SYS"), {}, "intel") == "host"


def test_sim_fabric_uses_the_hosts_cpu_vendor(monkeypatch):
    from gputopo.bench.fabrics.sim import SimModel
    from gputopo.sim.description import load_description

    for k in ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL"):
        monkeypatch.delenv(k, raising=False)
    seed = load_description("seed-8gpu")  # intel
    assert SimModel(seed, {}).nccl_route(5, 6) == "host"
    seed.host.cpu_vendor = "amd"
    assert SimModel(seed, {}).nccl_route(5, 6) == "p2p"
    assert SimModel(seed, {}).nccl_route(5, 6, n_gpus=4) == "host"
    assert SimModel(seed, {"NCCL_P2P_DISABLE": "1"}).nccl_route(5, 6) == "host"
