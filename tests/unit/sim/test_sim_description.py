"""Machine descriptions: built-ins, the TOML format's validation, faults, link models, generation."""

import re
import subprocess
import sys
import textwrap

import pytest

from gputopo.errors import InputFileError, UsageError
from gputopo.sim.description import (builtin_names, builtin_summaries, generate_description, load_description,
                                    parse_description)
from gputopo.sim.records import Fault
from helpers.paths import REPO

EXPECTED_BUILTINS = {"seed-8gpu", "seed-8gpu-healthy", "dgx-a100", "dgx-h100", "pcie-4gpu", "degraded-nvlink"}
SEED_NV4 = {(0, 1), (2, 3), (4, 5), (6, 7)}


def seed_class(i, j):
    if (i, j) in SEED_NV4:
        return "NV4"
    return "NODE" if (i < 4) == (j < 4) else "SYS"


def classes(desc):
    return {(i, j): str(desc.link_class(i, j)) for i, j in desc.pairs()}


# --------------------------------------------------------------------------- built-ins


def test_builtin_names_and_summaries():
    assert EXPECTED_BUILTINS <= set(builtin_names())
    summaries = dict(builtin_summaries())
    assert set(summaries) == set(builtin_names())
    for name, summary in summaries.items():
        assert summary and "\n" not in summary, name


@pytest.mark.parametrize("name", sorted(EXPECTED_BUILTINS))
def test_every_builtin_loads_consistently(name):
    d = load_description(name)
    assert d.name == name and d.source == "builtin"
    assert len(d.gpus) >= 4
    assert len({g.bus_id for g in d.gpus}) == len(d.gpus)
    assert len({g.uuid for g in d.gpus}) == len(d.gpus)
    for g in d.gpus:
        assert re.match(r"^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.[0-7]$", g.bus_id), g.bus_id
        assert re.match(r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", g.uuid)
        assert g.pcie_width <= g.pcie_width_max and g.pcie_gen <= g.pcie_gen_max
    # the bridge tree a host reader sees agrees with the PCIe classes NVML reports
    tree = d.pcie_tree
    for i, j in d.pairs():
        assert tree.derived_kind(i, j) == str(d.pcie_class(i, j)), (i, j)


def test_seed_machine_tells_the_story():
    d = load_description("seed-8gpu")
    assert classes(d) == {(i, j): seed_class(i, j) for i in range(8) for j in range(i + 1, 8)}
    assert d.host.iommu == "translated" and d.host.acs_redirect_bridges
    assert d.host.cuda_driver_version == 12020
    # every PCIe pair (SYS across sockets, NODE inside one: the story's 5,6) corrupts on the
    # peer path; NVLink pairs and staging through host memory are clean
    for pair in [(3, 4), (0, 7), (5, 6), (0, 2), (1, 3)]:
        assert [(f.what, f.path) for f in d.faults_for(*pair)] == [("corrupt", "p2p")], pair
    assert d.faults_for(6, 7) == [] and d.faults_for(0, 1) == []
    assert d.faults_for(3, 4, path="host") == [] and d.faults_for(5, 6, path="host") == []
    # NVLink pairs are wired link by link
    g0 = d.gpus[0]
    assert [lk.remote_bus_id for lk in g0.nvlinks] == [d.gpus[1].bus_id] * 4
    assert all(lk.active and lk.remote_type == "GPU" for lk in g0.nvlinks)
    assert str(d.pcie_class(0, 1)) == "PIX"


def test_healthy_twin_differs_only_in_host_and_faults():
    sick, fine = load_description("seed-8gpu"), load_description("seed-8gpu-healthy")
    assert classes(sick) == classes(fine)
    assert [g.bus_id for g in sick.gpus] == [g.bus_id for g in fine.gpus]
    assert fine.host.iommu == "passthrough" and fine.host.iommu_group_type == "identity"
    assert fine.host.acs_redirect_bridges == [] and fine.faults == []
    assert "iommu=pt" in fine.host.cmdline and "iommu=pt" not in sick.host.cmdline


def test_nvswitch_boxes():
    a100 = load_description("dgx-a100")
    assert set(classes(a100).values()) == {"NV12"}
    assert a100.nvswitch and len(a100.nvswitch_bus_ids) == 6
    for g in a100.gpus:
        assert len(g.nvlinks) == 12 and all(lk.remote_type == "SWITCH" for lk in g.nvlinks)
        per_switch = {s: sum(lk.remote_bus_id == s for lk in g.nvlinks) for s in a100.nvswitch_bus_ids}
        assert set(per_switch.values()) == {2}
    assert str(a100.pcie_class(0, 1)) == "PXB" and str(a100.pcie_class(0, 2)) == "SYS"

    h100 = load_description("dgx-h100")
    assert set(classes(h100).values()) == {"NV18"}
    g = h100.gpus[0]
    counts = sorted(sum(lk.remote_bus_id == s for lk in g.nvlinks) for s in h100.nvswitch_bus_ids)
    assert counts == [4, 4, 5, 5]
    assert g.pcie_gen_max == 5 and g.nvlink_version == 4


def test_pcie_box_matches_its_matrix():
    d = load_description("pcie-4gpu")
    assert classes(d) == {(0, 1): "PXB", (0, 2): "SYS", (0, 3): "SYS", (1, 2): "SYS", (1, 3): "SYS",
                          (2, 3): "PIX"}
    assert all(g.nvlinks == [] for g in d.gpus)
    assert [g.numa_node for g in d.gpus] == [0, 0, 1, 1]
    assert d.gpus[2].cpu_affinity == "28-55,84-111"


def test_degraded_box_drops_one_gpu_to_pcie():
    d = load_description("degraded-nvlink")
    for (i, j), cls in classes(d).items():
        if 5 in (i, j):
            other = j if i == 5 else i
            assert cls == ("NODE" if other >= 4 else "SYS"), (i, j, cls)
            assert str(d.healthy_link_class(i, j)) == "NV12"
        else:
            assert cls == "NV12", (i, j)
    assert not any(lk.active for lk in d.gpus[5].nvlinks)
    assert d.gpus[5].nvlinks[2].errors["crc_flit"] == 1287
    assert all(lk.active for lk in d.gpus[4].nvlinks)


def test_builtins_are_cached_but_each_load_is_a_fresh_object():
    load_description("seed-8gpu")
    a = load_description("seed-8gpu")
    b = load_description("seed-8gpu")
    assert a is not b and a.gpus[0] is not b.gpus[0]
    a.faults.clear()
    assert len(load_description("seed-8gpu").faults) == 2  # NODE and SYS


def test_unknown_builtin_lists_the_names():
    with pytest.raises(UsageError) as ei:
        load_description("dgx-z900")
    msg = str(ei.value)
    assert "dgx-z900" in msg
    for name in EXPECTED_BUILTINS:
        assert name in msg


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputFileError) as ei:
        load_description(str(tmp_path / "nope.toml"))
    assert "nope.toml" in str(ei.value)


# --------------------------------------------------------------------------- validation

GOOD = """\
name = "t"
summary = "test box"
[pairs]
default = "numa"
"0,1" = "NV2"
[defaults]
name = "NVIDIA A100-SXM4-80GB"
[[gpu]]
bus_id = "0000:07:00.0"
numa_node = 0
[[gpu]]
bus_id = "0000:0f:00.0"
numa_node = 0
[[gpu]]
bus_id = "0000:87:00.0"
numa_node = 1
"""


def bad(text, path="m.toml"):
    with pytest.raises(InputFileError) as ei:
        parse_description(textwrap.dedent(text), path)
    return ei.value


def test_good_minimal_file():
    d = parse_description(GOOD, "m.toml")
    assert classes(d) == {(0, 1): "NV2", (0, 2): "SYS", (1, 2): "SYS"}
    assert d.gpus[0].bus_id == "00000000:07:00.0" and d.gpus[0].lspci_bdf == "0000:07:00.0"
    assert d.gpus[0].uuid.startswith("GPU-")
    assert parse_description(GOOD, "m.toml").gpus[0].uuid == d.gpus[0].uuid  # stable


def test_toml_syntax_error_names_line():
    e = bad('name = "x"\nsummary = "y"\n[host]\niommu = translated\n')
    assert e.line == 4 and "m.toml:4" in str(e) and "TOML" in str(e)


def test_unknown_fault_kind_names_key_and_line():
    e = bad(GOOD + '[[fault]]\nwhere = "pair:0,1"\nwhat = "melt"\n')
    assert e.key == "fault[0].what"
    assert e.line == GOOD.count("\n") + 3
    assert "melt" in str(e) and "corrupt" in str(e)


#: A broken description -> the key its error names (and words the message must hold).
BAD_KEYS = [
    pytest.param(GOOD + '[[fault]]\nwhere = "pair:0,9"\nwhat = "corrupt"\n', "fault[0].where", ["9"],
                 id="fault-pair-out-of-range"),
    pytest.param(GOOD + '[[fault]]\nwhere = "rack:1"\nwhat = "corrupt"\n', "fault[0].where", [],
                 id="fault-where-malformed"),
    pytest.param(GOOD + '[[fault]]\nwhere = "gpu:1"\nwhat = "slow"\nfactor = 4\n', "fault[0].factor", [],
                 id="fault-slow-factor-above-1"),
    pytest.param(GOOD + '[[fault]]\nwhere = "class:SYS"\nwhat = "downtrained"\n', "fault[0].where", [],
                 id="fault-downtrained-on-a-class"),
    pytest.param(GOOD + '[[fault]]\nwhat = "corrupt"\n', "fault[0].where", ["missing"],
                 id="fault-where-missing"),
    pytest.param(GOOD.replace('"0,1" = "NV2"', '"0,7" = "NV2"'), 'pairs."0,7"', ["out of range"],
                 id="pair-out-of-range-in-pairs-table"),
    pytest.param(GOOD.replace('default = "numa"\n', ""), "pairs", ["0,2"],
                 id="pairs-without-default-name-the-missing-pair"),
    pytest.param(GOOD.replace('[defaults]\nname = "NVIDIA A100-SXM4-80GB"\n', ""), "gpu[0].name", ["name"],
                 id="missing-gpu-name"),
    pytest.param(GOOD.replace('numa_node = 1', 'numa_node = -1'), "gpu[2].numa_node", [],
                 id="negative-numa-node"),
    pytest.param(GOOD.replace('bus_id = "0000:87:00.0"', 'bus_id = "0000:87:00"'), "gpu[2].bus_id", [],
                 id="malformed-bus-id"),
    pytest.param(GOOD.replace('bus_id = "0000:87:00.0"', 'bus_id = "0000:07:00.0"'), "gpu[2].bus_id",
                 ["also GPU 0"], id="duplicate-bus-id"),
    pytest.param(GOOD + '[[gpu]]\nbus_id = "0000:90:00.0"\npcie_width_current = 32\n',
                 "gpu[3].pcie_width_current", [], id="pcie-width-32"),
    pytest.param(GOOD + '[host]\niommu = "maybe"\n', "host.iommu", ["translated"], id="bad-iommu-mode"),
    pytest.param(GOOD + '[p2p]\nSYS = { read = "FINE" }\n', "p2p.SYS.read", [], id="bad-p2p-status"),
    pytest.param(GOOD + '[link_model]\nSYS = { gbps = -3 }\n', "link_model.SYS.gbps", [],
                 id="negative-link-rate"),
]


@pytest.mark.parametrize("text,key,words", BAD_KEYS)
def test_bad_values_name_their_keys(text, key, words):
    e = bad(text)
    assert e.key == key, str(e)
    for w in words:
        assert w in str(e)


def test_unknown_top_level_key_names_its_line():
    e = bad('colour = "red"\n' + GOOD)
    assert e.key == "colour" and e.line == 1


def test_no_gpus_and_no_classes():
    e = bad('name = "x"\nsummary = "y"\n[[fault]]\nwhere = "pair:0,1"\nwhat = "melt"\n')
    assert "m.toml" in str(e)
    e = bad('[[gpu]]\nname = "NVIDIA A100-SXM4-80GB"\n[[gpu]]\nname = "NVIDIA A100-SXM4-80GB"\n')
    assert e.key == "pairs" and "matrix" in str(e)


def test_one_gpu_needs_no_pair_table():
    """One GPU has no pair: its description needs no matrix, [pairs] or nvswitch."""
    d = parse_description('[[gpu]]\nname = "NVIDIA H100 PCIe"\n', "one.toml")
    assert len(d.gpus) == 1 and d.pairs() == []


def test_bad_matrix_error_points_into_the_file():
    text = ('name = "x"\n'
            'matrix = """\n'
            '\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n'
            'GPU0\t X \tNVX\t0-7\t0\n'
            'GPU1\tNVX\t X \t0-7\t0\n'
            '"""\n'
            '[defaults]\nname = "NVIDIA A100-SXM4-80GB"\n')
    e = bad(text)
    assert e.key == "matrix" and e.line == 4, str(e)
    assert "matrix" in str(e)


def test_matrix_gpu_count_must_match_gpu_entries(fixtures_dir):
    text = (fixtures_dir / "topo" / "nccl-667_4gpu_pxb_pix_sys.txt").read_text()
    src = f'matrix = """\n{text}"""\n[defaults]\nname = "Tesla V100-PCIE-32GB"\n[[gpu]]\n[[gpu]]\n'
    e = bad(src)
    assert e.key == "matrix" and "4 GPUs" in str(e)


def test_matrix_file_relative_to_description(tmp_path, fixtures_dir):
    (tmp_path / "topo.txt").write_text((fixtures_dir / "topo" / "nccl-667_4gpu_pxb_pix_sys.txt").read_text())
    f = tmp_path / "box.toml"
    f.write_text('matrix_file = "topo.txt"\n[defaults]\nname = "Tesla V100-PCIE-32GB"\npcie_gen = 3\n')
    d = load_description(str(f))
    assert d.name == "box" and len(d.gpus) == 4
    assert str(d.link_class(0, 1)) == "PXB" and str(d.link_class(2, 3)) == "PIX"
    assert d.gpus[3].numa_node == 1 and d.gpus[3].cpu_affinity == "28-55,84-111"


def test_extends_a_builtin(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text('extends = "dgx-a100"\nsummary = "with a flaky GPU"\n'
                 '[[fault]]\nwhere = "gpu:3"\nwhat = "slow"\nfactor = 0.25\n'
                 '[host]\niommu = "translated"\niommu_group_type = "DMA-FQ"\n')
    d = load_description(str(f))
    assert d.name == "mine" and set(classes(d).values()) == {"NV12"}
    assert d.host.iommu == "translated" and d.host.hostname == "dgx-a100-01"
    assert [f.factor for f in d.faults_for(3, 6)] == [0.25] and d.faults_for(1, 2) == []


# --------------------------------------------------------------------------- faults


def with_faults(*faults, base=GOOD):
    text = base
    for f in faults:
        text += "[[fault]]\n" + "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in f.items())
    return parse_description(text, "f.toml")


def test_faults_for_resolves_where_clauses():
    d = with_faults({"where": "gpu:2", "what": "nan"}, {"where": "class:SYS", "what": "corrupt", "rate": 0.01},
                    {"where": "pair:1,0", "what": "slow", "factor": 0.5, "path": "all"},
                    {"where": "class:NV", "what": "hang"})
    kinds = lambda fs: sorted(f.what for f in fs)  # noqa: E731
    assert kinds(d.faults_for(0, 2)) == ["corrupt", "nan"]  # gpu 2 and SYS
    assert kinds(d.faults_for(2, 1)) == ["corrupt", "nan"]
    assert kinds(d.faults_for(0, 1)) == ["hang", "slow"]  # NV2 and the pair
    assert kinds(d.faults_for(0, 1, path="host")) == ["slow"]  # only path = "all" on other paths
    assert kinds(d.faults_for(2)) == ["nan"]  # GPU alone: only GPU faults
    assert kinds(d.faults_for(0)) == []
    assert kinds(d.faults_for(0, 2, path="any")) == ["corrupt", "nan"]
    assert d.faults_for(0, 2)[0].rate in (0.01, 1e-3)
    with pytest.raises(KeyError):
        d.faults_for(0, 0)


def test_fault_defaults_and_validation():
    f = Fault(where="class:SYS", what="corrupt")
    assert f.path == "p2p" and f.rate == 1e-3 and f.scope == "class" and f.link_class == "SYS"
    assert Fault(where="gpu:1", what="downtrained").path == "all"
    assert Fault(where="pair:6,5", what="slow").gpus == (5, 6)
    assert Fault(where="class:soc", what="crash").link_class == "SYS"
    for kwargs in ({"where": "pair:3,3", "what": "nan"}, {"where": "class:NVX", "what": "nan"},
                   {"where": "gpu:1", "what": "nan", "rate": 2}, {"where": "gpu:1", "what": "slow", "path": "pcie"},
                   {"where": "gpu:1", "what": "corrupt", "width": 8}):
        with pytest.raises(ValueError):
            Fault(**kwargs)


def test_link_down_fault_shows_as_inactive_links_and_pcie_class():
    d = with_faults({"where": "pair:0,1", "what": "link_down"})
    assert str(d.link_class(0, 1)) == "NODE" and str(d.healthy_link_class(0, 1)) == "NV2"
    assert not any(lk.active for lk in d.gpus[0].nvlinks + d.gpus[1].nvlinks)
    # the class a scan now reports is what class faults match
    d2 = with_faults({"where": "pair:0,1", "what": "link_down"}, {"where": "class:NODE", "what": "corrupt"})
    assert [f.what for f in d2.faults_for(0, 1)] == ["link_down", "corrupt"]
    e = bad(GOOD + '[[fault]]\nwhere = "pair:0,2"\nwhat = "link_down"\n')
    assert e.key == "fault[0].where" and "no NVLinks" in str(e)


def test_nvlinks_down_on_one_end_downs_the_cable():
    d = parse_description(GOOD.replace('bus_id = "0000:0f:00.0"', 'bus_id = "0000:0f:00.0"\nnvlinks_down = [1]'),
                          "x.toml")
    # the pair's two cables; the model's other ports are unused (inactive, nothing attached)
    assert [lk.active for lk in d.gpus[1].nvlinks[:2]] == [True, False]
    assert [lk.active for lk in d.gpus[0].nvlinks[:2]] == [True, False]
    assert all(not lk.active and lk.remote_bus_id is None for lk in d.gpus[0].nvlinks[2:])
    assert str(d.link_class(0, 1)) == "NV1" and d.nvlink_count(0, 1) == 1


def test_downtrained_fault_lowers_reported_width_and_sets_factor():
    d = with_faults({"where": "gpu:2", "what": "downtrained", "width": 4})
    g = d.gpus[2]
    assert (g.pcie_width, g.pcie_width_max, g.pcie_gen) == (4, 16, 4)
    f = d.faults[0]
    assert f.factor == pytest.approx(0.25) and f.path == "all"
    assert d.link_model(0, 2) == d.with_faults([]).link_model(0, 2)  # link model stays healthy
    e = bad(GOOD + '[[fault]]\nwhere = "gpu:2"\nwhat = "downtrained"\nwidth = 32\n')
    assert e.key == "fault[0]"


def test_link_down_on_nvswitch_machine():
    base = load_description("dgx-a100")
    d = base.with_faults([{"where": "gpu:3", "what": "link_down"}])
    assert all(str(d.link_class(3, j)) in ("NODE", "SYS", "PXB") for j in range(8) if j != 3)
    assert str(d.link_class(0, 1)) == "NV12"
    assert base.with_faults([]).faults == [] and str(base.link_class(3, 4)) == "NV12"
    with pytest.raises(InputFileError, match="gpu:N"):
        base.with_faults([{"where": "pair:0,1", "what": "link_down"}])


# --------------------------------------------------------------------------- models and P2P


def test_link_models_follow_design_table():
    seed = load_description("seed-8gpu")
    nv4 = seed.link_model(0, 1)
    assert nv4.gbps == pytest.approx(4 * 25 * 0.85)
    node, sys_ = seed.link_model(0, 2), seed.link_model(0, 4)
    assert 23 < node.gbps < 27 and sys_.gbps < node.gbps and sys_.latency_us > node.latency_us
    host = seed.host_link_model(0)
    assert host.gbps == pytest.approx(31.5 * 0.85, abs=0.01)
    assert seed.device_link_model(0).gbps > 10 * host.gbps
    assert load_description("dgx-h100").link_model(0, 7).gbps == pytest.approx(18 * 25 * 0.85)
    assert nv4.transfer_s(10**9) == pytest.approx(nv4.latency_us * 1e-6 + 1 / nv4.gbps)


def test_sys_peer_copies_follow_the_published_socket_link_rate_of_the_cpu_vendor():
    """A SYS peer copy crosses the CPU interconnect: the sim models it at the figure gputopo
    judges it against (reference_rates.csv's intel-sys-p2p / amd-sys-p2p rows), not at ~3.7x it."""
    from gputopo.report.references import closest_reference
    from gputopo.sim.records import SOCKET_LINK_GBPS

    for vendor in ("intel", "amd"):
        row = closest_reference("p2p.copy", 2, "SYS", [], vendor)
        assert row is not None and SOCKET_LINK_GBPS[vendor] == row.gbps, vendor
        d = parse_description(GOOD + f'[host]\ncpu_vendor = "{vendor}"\n', "x.toml")
        assert str(d.link_class(0, 2)) == "SYS" and d.link_model(0, 2).gbps == row.gbps, vendor
    seed = load_description("seed-8gpu")  # Intel: 6 GB/s across the sockets, PCIe inside one
    assert seed.link_model(0, 4).gbps == 6.0 and seed.link_model(0, 2).gbps > 20
    # a PCIe link slower than the socket link stays the limit (Gen3 x4: 3.94 GB/s theoretical)
    slow = parse_description(GOOD + "pcie_gen = 3\npcie_width = 4\n", "x.toml")
    assert slow.link_model(0, 2).gbps == pytest.approx(3.9375 * 0.85 * 0.85, abs=0.01)
    # [link_model] SYS still overrides the vendor's rate
    over = parse_description(GOOD + '[link_model]\nSYS = { gbps = 11.0 }\n', "x.toml")
    assert over.link_model(0, 2).gbps == 11.0


def test_staged_copies_are_pipelined_at_the_published_staged_rate():
    """The driver pipelines a copy staged through host memory: a Gen4 x16 pair stages at the
    21.4 GB/s published for healthy A100 PCIe (reference_rates.csv a100-pcie-staged), not at the
    13.4 of two host copies in a row."""
    from gputopo.bench.fabrics.sim import SimModel
    from gputopo.report.references import reference_rows

    d = parse_description(GOOD, "x.toml")
    m = SimModel(d, env={})
    n = 1 << 30
    host = d.host_link_model(0)
    gbps = n / (m.staged_seconds(n, 0, 2, []) - 2 * host.latency_us * 1e-6) / 1e9
    ref = {r.id: r for r in reference_rows()}["a100-pcie-staged"]
    assert gbps == pytest.approx(ref.gbps, rel=0.01)


def test_sim_fabric_caps_a_downtrained_sys_pair_after_lowering_its_pcie_part():
    """GPU 0 at x8 (Gen4: 15.75 GB/s theoretical, 11.4 as SYS after derating) still beats the
    Intel socket link's 6 GB/s: the SYS copy stays at 6, not 6 x 0.5; a slow fault slows the rest."""
    from gputopo.bench.fabrics.sim import SimModel

    def sys_gbps(faults: str) -> float:
        d = parse_description(GOOD + '[host]\ncpu_vendor = "intel"\n' + faults, "x.toml")
        m = SimModel(d, env={})
        n = 1 << 30
        t = m.transfer_seconds(n, 0, 2, "p2p", m.faults(0, 2, "p2p")) - d.link_model(0, 2).latency_us * 1e-6
        return n / t / 1e9

    assert sys_gbps("") == pytest.approx(6.0)
    assert sys_gbps('[[fault]]\nwhere = "gpu:0"\nwhat = "downtrained"\nwidth = 8\n') == pytest.approx(6.0)
    assert sys_gbps('[[fault]]\nwhere = "gpu:0"\nwhat = "downtrained"\nwidth = 2\n') == pytest.approx(
        31.5 * 2 / 16 * 0.85 * 0.85, rel=1e-3)  # x2: the PCIe part is the limit again
    assert sys_gbps('[[fault]]\nwhere = "pair:0,2"\nwhat = "slow"\nfactor = 0.3\n') == pytest.approx(1.8)


def test_link_model_overrides():
    d = parse_description(GOOD + '[link_model]\nNV = { gbps_per_link = 10.0 }\nSYS = { gbps = 7.5, latency_us = 9 }\n'
                          'host = { gbps = 20 }\ndevice = { gbps = 900, latency_us = 1 }\n', "x.toml")
    assert d.link_model(0, 1).gbps == pytest.approx(20.0)
    assert d.link_model(0, 2) == type(d.link_model(0, 2))(7.5, 9.0)
    assert d.host_link_model(1).gbps == 20.0 and d.device_link_model(1).latency_us == 1.0


def test_p2p_defaults_and_overrides():
    d = parse_description(GOOD + '[p2p]\nSYS = { read = "CNS", write = "CNS" }\n"1,2" = "NS"\n', "x.toml")
    assert d.p2p_status(0, 1) == {c: "OK" for c in ("read", "write", "nvlink", "atomics", "pci")}
    assert d.p2p_status(0, 2) == {"read": "CNS", "write": "CNS", "nvlink": "NS", "atomics": "NS", "pci": "OK"}
    assert set(d.p2p_status(2, 1).values()) == {"NS"}


# --------------------------------------------------------------------------- generated machines


@pytest.mark.parametrize("n", [8, 64, 256])
def test_generated_machines(n):
    d = generate_description(n)
    assert len(d.gpus) == n and len(d.pairs()) == n * (n - 1) // 2
    assert str(d.link_class(0, 1)) == "NV4" and str(d.link_class(1, 2)) == "NODE"
    assert str(d.link_class(0, n - 1)) == "SYS"
    assert len({g.numa_node for g in d.gpus}) >= 2
    assert len({g.bus_id for g in d.gpus}) == n


def test_generated_odd_and_invalid():
    d = generate_description(3)
    # GPU 2 has no partner: an RTX A6000 still lists its 4 NVLink ports, inactive, no far end
    assert [(lk.active, lk.remote_bus_id) for lk in d.gpus[2].nvlinks] == [(False, None)] * 4
    assert str(d.link_class(1, 2)) == "NODE"
    with pytest.raises(ValueError):
        generate_description(0)


@pytest.mark.slow
def test_import_stays_light():
    code = ("import sys, gputopo.sim.description, gputopo.sim.fake_nvml, gputopo.sim.fake_host, "
            "gputopo.sim.records, gputopo.sim.cluster_description\n"
            "print(sorted(m for m in ('torch', 'pandas', 'matplotlib', 'pynvml') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_format_md_example_loads_as_documented(tmp_path):

    doc = (REPO / "docs" / "sim-format.md").read_text()
    example = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    d = parse_description(example, str(tmp_path / "my-box.toml"))
    assert d.name == "my-box" and len(d.gpus) == 4
    assert str(d.link_class(0, 1)) == "NV4" and str(d.link_class(2, 3)) == "NV3"  # link 3 of GPU 3 down
    assert str(d.pcie_class(0, 1)) == "PIX" and str(d.link_class(0, 2)) == "SYS"
    assert d.gpus[3].numa_node is None and d.gpus[2].pcie_width == 8
    assert d.gpus[3].nvlinks[0].errors["crc_flit"] == 120
    assert d.p2p_status(0, 2)["read"] == "NS" and d.p2p_status(1, 2)["read"] == "CNS"
    assert d.link_model(0, 3).gbps == 18.0 and d.link_model(0, 1).gbps == pytest.approx(85.0)
    assert [f.what for f in d.faults_for(1, 2)] == ["corrupt", "slow"]
    assert d.host.acs_redirect_bridges and d.host.iommu == "translated"


def test_descriptions_pickle_for_worker_processes():
    import pickle

    d = load_description("degraded-nvlink")
    _ = d.pcie_tree  # built trees travel too
    e = pickle.loads(pickle.dumps(d))
    assert classes(e) == classes(d) and e.faults == d.faults
    assert e.with_faults([{"where": "gpu:1", "what": "nan"}]).faults_for(0, 1)[0].what == "nan"


# --------------------------------------------------------------------------- cross-entry checks

UUID = "GPU-11111111-2222-3333-4444-555555555555"


@pytest.mark.parametrize("text,key,line,words", [
    pytest.param(GOOD.replace('bus_id = "0000:07:00.0"\n', f'bus_id = "0000:07:00.0"\nuuid = "{UUID}"\n')
                 .replace('bus_id = "0000:87:00.0"\n', f'bus_id = "0000:87:00.0"\nuuid = "{UUID}"\n'),
                 "gpu[2].uuid", 17, ["also GPU 0's"], id="duplicate-uuid"),
    pytest.param(GOOD + '[[fault]]\nwhere = "pair:0,1"\nwhat = "hang"\nrate = 0.5\n', "fault[0].rate", 20,
                 ["rate applies to corrupt and nan", "hang fault has none"], id="rate-on-hang"),
    pytest.param(GOOD + '[[fault]]\nwhere = "pair:0,1"\nwhat = "corrupt"\nfactor = 0.5\n', "fault[0].factor", 20,
                 ["factor applies to slow and downtrained"], id="factor-on-corrupt"),
    pytest.param(GOOD + '[[fault]]\nwhere = "class:PIX"\nwhat = "corrupt"\n', "fault[0].where", 18,
                 ["'class:PIX' matches no pair", "its classes: NV2, SYS"], id="class-fault-matching-no-pair"),
    pytest.param(GOOD + '[[fault]]\nwhere = "class:NV4"\nwhat = "slow"\n', "fault[0].where", 18,
                 ["matches no pair"], id="nvlink-class-fault-of-another-width"),
    pytest.param(GOOD.replace("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SMX4-80GB"), "defaults.name", 7,
                 ["unknown GPU name 'NVIDIA A100-SMX4-80GB'", "A100-SXM4-80GB", 'model = "generic"'],
                 id="unknown-gpu-name"),
    pytest.param(GOOD + '[link_model]\nSYS = { gbps = nan }\n', "link_model.SYS.gbps", 18,
                 ["finite positive number, got nan"], id="link-rate-nan"),
    pytest.param(GOOD + '[link_model]\nefficiency = inf\n', "link_model.efficiency", 18,
                 ["finite positive number, got inf"], id="efficiency-inf"),
    pytest.param(GOOD + '[[fault]]\nwhere = "gpu:0"\nwhat = "downtrained"\nwidth = 3\n', "fault[0].width", 20,
                 ["PCIe width must be 1, 2, 4, 8, 12, 16, 32 lanes, got 3"], id="downtrained-width-3"),
    pytest.param(GOOD.replace('name = "NVIDIA A100-SXM4-80GB"\n', 'name = "Foo"\nmodel = "Z9000"\n'),
                 "defaults.model", 8, ["unknown GPU model 'Z9000'"], id="unknown-model"),
])
def test_cross_entry_errors_name_key_and_line(text, key, line, words):
    e = bad(text)
    assert (e.key, e.line) == (key, line), str(e)
    for w in words:
        assert w in str(e), str(e)


def test_a_gpu_name_no_model_matches_needs_model_generic_or_a_model():
    generic = parse_description(GOOD.replace('name = "NVIDIA A100-SXM4-80GB"\n',
                                             'name = "ACME Accel 1"\nmodel = "generic"\nnvlink_version = 3\n'))
    assert generic.gpus[0].name == "ACME Accel 1" and generic.gpus[0].pci_device_id == 0x2000
    named = parse_description(GOOD.replace('name = "NVIDIA A100-SXM4-80GB"\n',
                                           'name = "ACME Accel 1"\nmodel = "H100 80GB HBM3"\n'))
    assert named.gpus[0].pci_device_id == 0x2330 and named.gpus[0].nvlink_version == 4


def test_matrix_file_in_utf16_or_with_bad_bytes(tmp_path):
    """matrix_file is read as --from-smi reads smi text: PowerShell's UTF-16 works, and bytes
    that are not text give an input error naming the file, not an internal error (exit 4)."""
    matrix = "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\nGPU0\t X \tPIX\t0-15\t0\nGPU1\tPIX\t X \t0-15\t0\n"
    (tmp_path / "m16.txt").write_bytes(matrix.encode("utf-16"))
    desc_path = tmp_path / "box.toml"
    desc_path.write_text('name = "t"\nmatrix_file = "m16.txt"\n[defaults]\nname = "NVIDIA RTX A6000"\n')
    assert str(load_description(str(desc_path)).link_class(0, 1)) == "PIX"
    (tmp_path / "bad.txt").write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF")
    desc_path.write_text('name = "t"\nmatrix_file = "bad.txt"\n[defaults]\nname = "NVIDIA RTX A6000"\n')
    with pytest.raises(InputFileError, match="bad.txt"):
        load_description(str(desc_path))
