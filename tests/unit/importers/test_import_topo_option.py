"""Every importer takes the one shared `--topo FILE` option (gputopo/cli/importer.py topo_option):
the same help, the same reader (`gputopo scan --json` output or saved `nvidia-smi topo -m` text)
and the same one-line refusals. `import kernel-log --topo` puts the log's Xid events on the
machine's own GPUs by bus id; `import nccl-debug --topo` names each pair's GPUs and link class
without a run folder."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from gputopo.cli.main import _register, cli
from helpers.cli import gputopo_here, refused  # noqa: E402
from helpers.paths import REPO

_register()

SEED_SMI = REPO / "tests" / "fixtures" / "topo" / "seed-8gpu-nv4-pairs.txt"
OTHER_SMI = REPO / "tests" / "fixtures" / "topo" / "autodl_2x2080ti_pix.txt"
DDP_LOG = REPO / "tests" / "data" / "nccl_debug" / "ddp_shm_and_cumem_seed.log"
NCCL_TESTS_LOG = next((REPO / "tests" / "fixtures" / "nccl-tests").glob("*.txt"))
XID_1C = "[ 5.0] NVRM: Xid (PCI:0000:1c:00): 48, An uncorrectable double bit error (DBE)\n"


def _topo_help(*command) -> str:
    text = CliRunner().invoke(cli, [*command, "--help"], terminal_width=200).output
    m = re.search(r"--topo FILE\s+(.*?)(?:\n  -|\Z)", text, re.S)
    assert m, text
    return " ".join(m.group(1).split())


@pytest.fixture(scope="module")
def pcie_scan(tmp_path_factory) -> Path:
    """`gputopo scan --sim pcie-4gpu --json`: a topology with bus ids (GPU 1 at 0000:1c:00)."""
    r = CliRunner().invoke(cli, ["scan", "--sim", "pcie-4gpu", "--json", "--no-history"])
    assert r.exit_code == 0, r.output
    path = tmp_path_factory.mktemp("scan") / "scan.json"
    path.write_text(r.stdout)
    return path


def test_every_importer_has_the_same_topo_option():
    shared = _topo_help("import", "nvbandwidth")
    for kind in ("p2pbw", "nccl-tests", "nccl-debug", "kernel-log"):
        assert _topo_help("import", kind) == shared, kind


@pytest.mark.parametrize("kind, inputs", [
    ("nccl-tests", [NCCL_TESTS_LOG]), ("nccl-debug", [DDP_LOG]), ("kernel-log", ["{log}"]),
    ("nvbandwidth", [REPO / "tests" / "fixtures" / "README.md"]),
])
def test_a_bad_topo_is_one_line_and_exit_2_with_the_same_words(tmp_path, kind, inputs):
    log = tmp_path / "kern.log"
    log.write_text(XID_1C)
    args = [str(a).format(log=log) for a in inputs]
    if kind != "nccl-debug":  # (it writes no folder of its own)
        args += ["--out", str(tmp_path / "r")]
    not_topo = tmp_path / "not-topo.txt"
    not_topo.write_text("hello\n")
    err = refused("import", kind, *args, "--topo", not_topo)
    assert f"{not_topo}:1: no nvidia-smi topo matrix found" in err
    err = refused("import", kind, *args, "--topo", tmp_path / "missing.txt")
    assert "missing.txt: cannot read the topology" in err
    assert not (tmp_path / "r").exists()


def test_kernel_log_onto_the_machines_own_gpus(tmp_path, pcie_scan):
    log = tmp_path / "kern.log"
    log.write_text(XID_1C)
    code, out, err = gputopo_here("import", "kernel-log", log, "--topo", pcie_scan, "--out", tmp_path / "r",
                                  "--no-history")
    assert code == 0, err
    topo = json.loads((tmp_path / "r" / "topology.json").read_text())
    scan = json.loads(pcie_scan.read_text())
    assert [g["pci_bus_id"] for g in topo["gpus"]] == [g["pci_bus_id"] for g in scan["gpus"]]
    assert [g["name"] for g in topo["gpus"]] == [g["name"] for g in scan["gpus"]]
    xids = {g["nvml_index"]: [e["xid"] for e in g["health"]["xid_events"]] for g in topo["gpus"]}
    assert xids == {0: [], 1: [48], 2: [], 3: []}
    assert len(topo["pairs"]) == len(scan["pairs"]) > 0  # link classes of the machine
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    xid = [f for f in summary["findings"] if f["kind"] == "xid"]
    assert [f["gpus"] for f in xid] == [[1]]
    # only the Xids come from the log: nothing else of the scan's health is judged as the log's
    assert all(f["kind"] in ("xid", "gpu-fault") for f in summary["findings"] if f["severity"] != "info"), \
        summary["findings"]
    info = json.loads((tmp_path / "r" / "run.json").read_text())
    assert info["options"]["topology_file"] == str(pcie_scan)


def test_kernel_log_refuses_a_topology_it_cannot_map(tmp_path, pcie_scan):
    log = tmp_path / "kern.log"
    log.write_text(XID_1C)
    err = refused("import", "kernel-log", log, "--topo", SEED_SMI, "--out", tmp_path / "a")
    assert "has no PCI bus id" in err and "gputopo scan --json" in err
    other = tmp_path / "other.log"
    other.write_text(XID_1C.replace("1c:00", "99:00"))
    err = refused("import", "kernel-log", other, "--topo", pcie_scan, "--out", tmp_path / "b")
    assert "has no GPU at 0000:99:00" in err and "another machine" in err
    uuid = tmp_path / "uuid.log"
    uuid.write_text("[ 1.0] NVRM: GPU at PCI:0000:1c:00: GPU-00000000-0000-0000-0000-000000000000\n" + XID_1C)
    err = refused("import", "kernel-log", uuid, "--topo", pcie_scan, "--out", tmp_path / "c")
    assert "GPU-00000000-0000-0000-0000-000000000000 there" in err
    assert not any((tmp_path / d).exists() for d in "abc")


def test_nccl_debug_names_pairs_by_gpu_and_link_class():
    code, out, err = gputopo_here("import", "nccl-debug", DDP_LOG, "--topo", SEED_SMI, "--json")
    assert code == 0, err
    by_gpus = {tuple(p["gpus"]): p for p in json.loads(out)["pairs"]}
    assert by_gpus[(5, 6)]["link_class"] == "NODE" and by_gpus[(5, 6)]["kind"] == "SHM"
    assert by_gpus[(6, 7)]["link_class"] == "NV4" and by_gpus[(6, 7)]["kind"] == "P2P"
    code, out, err = gputopo_here("import", "nccl-debug", DDP_LOG, "--topo", SEED_SMI)
    assert code == 0 and "NV4" in out and "NODE" in out


def test_nccl_debug_topo_refusals(tmp_path, pcie_scan):
    err = refused("import", "nccl-debug", DDP_LOG, "--topo", OTHER_SMI)
    assert "none of the 2 GPU pair(s)" in err
    err = refused("import", "nccl-debug", DDP_LOG, "--topo", pcie_scan)  # host ml-pcie-02
    assert "are not host" in err and "gpu-node-07" in err
    run = tmp_path / "run"
    run.mkdir()
    err = refused("import", "nccl-debug", DDP_LOG, "--topo", SEED_SMI, "--into", run)
    assert "give one of --into and --topo" in err


CHLC = REPO / "tests" / "fixtures" / "p2pbw" / "chlc-blog_8x4090_stock-driver_p2p-none_no-device-header.txt"
CHLC_TOPO = CHLC.with_name(CHLC.stem + ".topo.txt")


def test_import_says_what_reading_the_topo_file_said(tmp_path):
    """The posted `topo -m` text is cut after row NIC2 (no NIC3 row, no legend): `scan --from-smi`
    says so, and `import p2pbw --topo` says the same, prefixed with the --topo file, on the
    terminal, in report.md, in summary.json's notes and in run.json; it is no finding."""
    scan = gputopo_here("scan", "--from-smi", CHLC_TOPO, "--no-history")
    assert scan.returncode == 0, scan.stderr
    said = [line.split(": ", 3)[3] for line in scan.stderr.splitlines() if line.startswith("gputopo: note: ")]
    cut = [n for n in said if "the text ends after row NIC2" in n]
    assert cut, scan.stderr
    r = gputopo_here("import", "p2pbw", CHLC, "--topo", CHLC_TOPO, "--out", tmp_path / "run", "--no-history")
    assert r.returncode == 0, r.stderr
    expected = [f"--topo {CHLC_TOPO}: {n}" for n in said]
    assert " ".join(r.stdout.split()).count(" ".join(expected[0].split()).split(" (")[0]) == 1, r.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert [n for n in summary["notes"] if n.startswith("--topo ")] == expected
    assert not any("the text ends" in json.dumps(f) for f in summary["findings"])
    report = " ".join((tmp_path / "run" / "report.md").read_text().split())
    assert " ".join(expected[0].split()) in report
    options = json.loads((tmp_path / "run" / "run.json").read_text())["options"]
    assert options["topology_notes"] == expected


def test_nccl_debug_and_perftest_say_what_reading_the_topo_file_said(tmp_path):
    """The same note where `import nccl-debug --topo` (no run folder: its text and its --json
    document) and `import perftest --topo` (its report) say theirs."""
    cut = f"--topo {CHLC_TOPO}: line 12: the text ends after row NIC2, so row NIC3 is not in it"
    code, out, err = gputopo_here("import", "nccl-debug", DDP_LOG, "--topo", CHLC_TOPO)
    assert code == 0, err
    assert cut in " ".join(out.split()), out
    code, out, err = gputopo_here("import", "nccl-debug", DDP_LOG, "--topo", CHLC_TOPO, "--json")
    assert code == 0, err
    assert [n for n in json.loads(out)["topology_notes"] if n.startswith(cut)]
    perftest = next((REPO / "tests" / "fixtures" / "perftest").glob("*ib-write-bw*.txt"))
    code, out, err = gputopo_here("import", "perftest", perftest, "--topo", CHLC_TOPO, "--out", tmp_path / "r",
                                  "--no-history")
    assert code == 0, err
    assert cut in " ".join(out.split()), out
    assert cut in (tmp_path / "r" / "report.md").read_text()
