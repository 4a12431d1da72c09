"""Writing a Topology as nvidia-smi's `topo -m` / `topo -p2p` text, and reading it back."""

from __future__ import annotations

import random

import pytest

from gputopo.model import (Failed, Gpu, LinkClass, NotAvailable, P2P_CAPS, Pair, Topology)
from gputopo.probe.smi_format import format_p2p_matrix, format_topo_matrix
from gputopo.probe.smi import (parse_p2p_matrix, parse_topo_matrix, topology_from_smi,
                               topology_from_smi_file_text)
from helpers.paths import FIXTURES

#: Real nvidia-smi outputs kept in the repository (sources in tests/fixtures/README.md).
TOPO_DIR = FIXTURES / "topo"

TOPO_FIXTURES = ["seed-8gpu-nv4-pairs.txt", "nccl-667_4gpu_pxb_pix_sys.txt",
                 "nccl-1617_4xh100_nv6_nics.txt", "autodl_2x2080ti_pix.txt"]
AUTODL, AUTODL_P2P = "autodl_2x2080ti_pix.txt", "autodl_2x2080ti_p2p_p.txt"
NCCL1617 = "nccl-1617_4xh100_nv6_nics.txt"

LEGEND = (
    "\n"
    "Legend:\n"
    "\n"
    "  X    = Self\n"
    "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
    "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n"
    "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
    "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
    "  PIX  = Connection traversing at most a single PCIe bridge\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n"
)


def fixture(name: str) -> str:
    return (TOPO_DIR / name).read_text()


def model_of(m):
    """What a round trip must keep."""
    return (m.gpu_indices, m.classes, m.cpu_affinity, m.numa_affinity, m.gpu_numa_id)


def make_topology(n, cls, cpu=None, numa=None, p2p=None, lost=()):
    """n GPUs; cls(i, j) -> class name; cpu/numa: {i: value}; p2p: {(i, j): {cap: status}}."""
    gpus = [Gpu(nvml_index=i,
                cpu_affinity=(cpu or {}).get(i, NotAvailable("not read")),
                numa_node=(numa or {}).get(i, NotAvailable("not read")),
                lost=Failed("GPU is lost") if i in lost else None)
            for i in range(n)]
    pairs = []
    for i in range(n):
        for j in range(i + 1, n):
            lc = LinkClass.parse(cls(i, j))
            pairs.append(Pair((i, j), lc, lc.nvlinks, dict((p2p or {}).get((i, j), {}))))
    return Topology(gpus=gpus, pairs=pairs, source="test")


# ----------------------------------------------------------------------------- exact text


@pytest.mark.parametrize("name", ["seed-8gpu-nv4-pairs.txt", "nccl-667_4gpu_pxb_pix_sys.txt"])
def test_format_reproduces_tab_fixtures_exactly(name):
    """These two are in the driver's tab form without a GPU NUMA ID column: byte for byte."""
    text = fixture(name)
    assert format_topo_matrix(topology_from_smi(text)) == text


@pytest.mark.parametrize("name", [AUTODL, NCCL1617])
def test_format_reproduces_space_fixtures_exactly(name):
    """These were posted with tabs shown as spaces, with a GPU NUMA ID column (all N/A, after the
    NUMA affinity's two tabs) and, for nccl-1617, NIC rows and columns (NIC3's row keeps the
    trailing space of its ' X '): the same text once tabs are expanded, character for character."""
    text = fixture(name)
    out = format_topo_matrix(topology_from_smi(text))
    assert out.expandtabs(8) == text
    assert format_topo_matrix(topology_from_smi(out)) == out  # and its own text is a fixed point


def test_format_p2p_reproduces_fixture():
    topo = topology_from_smi(fixture(AUTODL), {"p": fixture(AUTODL_P2P)})
    for cap in ("pci", "p"):
        out = format_p2p_matrix(topo, cap)
        assert out.expandtabs(8) == fixture(AUTODL_P2P)
    assert out == "\tGPU0\tGPU1\n GPU0\tX\tNS\n GPU1\tNS\tX\n" + (
        "\nLegend:\n\n  X    = Self\n  OK   = Status Ok\n  CNS  = Chipset not supported\n"
        "  GNS  = GPU not supported\n  TNS  = Topology not supported\n  NS   = Not supported\n"
        "  U    = Unknown\n")


def test_format_layout():
    topo = make_topology(3, lambda i, j: "NV12" if (i, j) == (0, 1) else "SYS",
                         cpu={0: "0-15", 1: "0-15", 2: "16-31"}, numa={0: 0, 1: 0, 2: 1})
    out = format_topo_matrix(topo)
    assert out == (
        "\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n"
        "GPU0\t X \tNV12\tSYS\t0-15\t0\n"
        "GPU1\tNV12\t X \tSYS\t0-15\t0\n"
        "GPU2\tSYS\tSYS\t X \t16-31\t1\n" + LEGEND
    )
    assert "\x1b" not in out


def test_format_affinity_columns_only_with_data():
    bare = make_topology(2, lambda i, j: "PHB")
    assert format_topo_matrix(bare) == "\tGPU0\tGPU1\nGPU0\t X \tPHB\nGPU1\tPHB\t X \n" + LEGEND
    only_numa = make_topology(2, lambda i, j: "PHB", numa={1: 0})
    assert format_topo_matrix(only_numa).split("\n")[:3] == [
        "\tGPU0\tGPU1\tNUMA Affinity", "GPU0\t X \tPHB\tN/A", "GPU1\tPHB\t X \t0"]
    partial = make_topology(2, lambda i, j: "PHB", cpu={0: "0-7"}, numa={0: 0})
    assert format_topo_matrix(partial).split("\n")[2] == "GPU1\tPHB\t X \tN/A\tN/A"
    m = parse_topo_matrix(format_topo_matrix(partial))
    assert m.cpu_affinity == {0: "0-7", 1: None} and m.numa_affinity == {0: 0, 1: None}


def test_format_one_gpu_and_lost_gpu():
    one = make_topology(1, lambda i, j: "SYS", cpu={0: "0-3"}, numa={0: 0})
    assert format_topo_matrix(one).split("\n")[:2] == ["\tGPU0\tCPU Affinity\tNUMA Affinity",
                                                       "GPU0\t X \t0-3\t0"]
    lost = make_topology(3, lambda i, j: "PIX", lost=(1,))
    out = format_topo_matrix(lost)
    assert out.split("\n")[:3] == ["\tGPU0\tGPU2", "GPU0\t X \tPIX", "GPU2\tPIX\t X "]
    assert parse_topo_matrix(out).classes == {(0, 2): LinkClass.parse("PIX")}


def test_format_no_gpus_is_an_error():
    with pytest.raises(ValueError, match="no GPUs"):
        format_topo_matrix(Topology(gpus=[], pairs=[]))
    with pytest.raises(ValueError, match="no GPUs"):
        format_p2p_matrix(Topology(gpus=[], pairs=[]), "read")


def test_format_missing_pair_is_an_error():
    topo = make_topology(3, lambda i, j: "PIX")
    topo = Topology(gpus=topo.gpus, pairs=[p for p in topo.pairs if p.gpus != (1, 2)])
    with pytest.raises(ValueError, match="no pair GPU1-GPU2"):
        format_topo_matrix(topo)


def test_format_p2p_statuses_legend_and_unknowns():
    p2p = {(0, 1): {"read": "OK"}, (0, 2): {"read": "DR"}, (1, 2): {"read": NotAvailable("x")}}
    topo = make_topology(3, lambda i, j: "PIX", p2p=p2p)
    out = format_p2p_matrix(topo, "r")
    lines = out.split("\n")
    assert lines[:4] == ["\tGPU0\tGPU1\tGPU2", " GPU0\tX\tOK\tDR", " GPU1\tOK\tX\tU",
                         " GPU2\tDR\tU\tX"]
    assert "  NS   = Not supported\n  DR   = Disabled by regkey\n  U    = Unknown\n" in out
    assert "DR" not in format_p2p_matrix(topo, "write")  # all U there: no DR line
    assert parse_p2p_matrix(out) == {(0, 1): "OK", (1, 0): "OK", (0, 2): "DR", (2, 0): "DR",
                                     (1, 2): "U", (2, 1): "U"}
    with pytest.raises(ValueError, match="unknown P2P capability"):
        format_p2p_matrix(topo, "x")


# ----------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("name", TOPO_FIXTURES)
def test_round_trip_fixtures(name):
    """parse -> format -> parse keeps classes, affinities and NUMA nodes."""
    first = parse_topo_matrix(fixture(name), name)
    out = format_topo_matrix(topology_from_smi(fixture(name), source=name))
    again = parse_topo_matrix(out, f"formatted {name}")
    assert model_of(again) == model_of(first)
    assert again.legend_present
    # And once more through the model: a fixed point.
    assert format_topo_matrix(topology_from_smi(out)) == out


@pytest.mark.parametrize("name", TOPO_FIXTURES)
def test_round_trip_fixture_variants(name):
    text = fixture(name)
    variants = [text.expandtabs(8), text.replace("SYS", "SOC"), text.replace("\n", "\r\n"),
                "\n" + text, text[: text.index("\nLegend:")] + "\n"]
    want = model_of(parse_topo_matrix(text))
    for v in variants:
        assert model_of(parse_topo_matrix(format_topo_matrix(topology_from_smi(v)))) == want


def test_round_trip_file_with_both_outputs():
    topo = topology_from_smi(fixture(AUTODL), {"pci": fixture(AUTODL_P2P)})
    text = (format_topo_matrix(topo) + "\n$ nvidia-smi topo -p2p p\n" + format_p2p_matrix(topo, "pci"))
    again = topology_from_smi_file_text(text, "both.txt")
    assert again.pair(0, 1).p2p["pci"] == "NS"
    assert again.pair(0, 1).link_class == topo.pair(0, 1).link_class


NAMES = ["NV1", "NV2", "NV4", "NV6", "NV12", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS"]
STATUSES = ["OK", "CNS", "GNS", "TNS", "DR", "NS", "U"]


@pytest.mark.parametrize("seed", range(25))
def test_round_trip_random_topologies(seed):
    """Property: any topology the model can hold comes back from its own text unchanged."""
    rng = random.Random(seed)
    n = rng.randint(1, 12)
    table = {(i, j): rng.choice(NAMES) for i in range(n) for j in range(i + 1, n)}
    cpu = {i: f"{i * 8}-{i * 8 + 7}" if rng.random() < 0.8 else NotAvailable("n/a")
           for i in range(n)} if rng.random() < 0.8 else {}
    numa = {i: rng.randint(0, 7) for i in range(n) if rng.random() < 0.8} if rng.random() < 0.8 else {}
    p2p = {pair: {cap: rng.choice(STATUSES) for cap in P2P_CAPS} for pair in table}
    topo = make_topology(n, lambda i, j: table[(i, j)], cpu=cpu, numa=numa, p2p=p2p)

    text = format_topo_matrix(topo)
    p2p_texts = {cap: format_p2p_matrix(topo, cap) for cap in P2P_CAPS}
    back = topology_from_smi(text, p2p_texts)
    for i in range(n):
        g, h = topo.gpu(i), back.gpu(i)
        assert (str(h.cpu_affinity) if isinstance(g.cpu_affinity, str) else None) == \
            (g.cpu_affinity if isinstance(g.cpu_affinity, str) else None)
        assert (h.numa_node if isinstance(g.numa_node, int) else None) == \
            (g.numa_node if isinstance(g.numa_node, int) else None)
    for p in topo.pairs:
        q = back.pair(*p.gpus)
        assert q.link_class == p.link_class and q.nvlink_count == p.nvlink_count
        assert q.p2p == p.p2p
    # The same text, pasted as spaces with CRLF endings, reads the same.
    pasted = "\r\n".join(line.expandtabs(8).rstrip() for line in text.split("\n"))
    assert parse_topo_matrix(pasted).classes == parse_topo_matrix(text).classes
    assert parse_topo_matrix(pasted).numa_affinity == parse_topo_matrix(text).numa_affinity
    assert parse_topo_matrix(pasted).cpu_affinity == parse_topo_matrix(text).cpu_affinity


def test_numa_affinity_read_as_unknown_keeps_its_column_as_nvidia_smi_does():
    """A GPU whose sysfs numa_node is -1 (a one-GPU cloud VM) was read, and nvidia-smi prints
    its NUMA Affinity column as N/A (seen posted for a one-GPU Tesla P4 VM, Project-HAMi/HAMi
    pull request 99); the column is dropped only when no source looked for it."""
    from gputopo.sim.scan import scan_simulated

    topo = scan_simulated("h100-sxm-1gpu")
    header, row = format_topo_matrix(topo).splitlines()[:2]
    assert header.split("\t")[1:] == ["GPU0", "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    assert row.split("\t")[1:] == [" X ", "0-15", "N/A", "", "N/A"]
    never = make_topology(2, lambda i, j: "SYS", cpu={0: "0-7", 1: "8-15"})
    assert "NUMA Affinity" not in format_topo_matrix(never)
