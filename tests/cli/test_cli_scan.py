"""`gputopo scan` and `gputopo sims` as a user runs them (click's CliRunner and the command's entry point)."""

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from gputopo.cli.main import _register, cli
from helpers.cli import gputopo_here

_register()

SEED_NV4 = {(0, 1), (2, 3), (4, 5), (6, 7)}


def invoke(args):
    r = CliRunner().invoke(cli, args, catch_exceptions=False)
    return r


def seed_class(i, j):
    if (i, j) in SEED_NV4:
        return "NV4"
    return "NODE" if (i < 4) == (j < 4) else "SYS"


def test_help_of_every_command():
    r = invoke(["--help"])
    assert r.exit_code == 0 and "scan" in r.output
    for name in cli.commands:
        r = invoke([name, "--help"])
        assert r.exit_code == 0, name
        assert "Usage:" in r.output


def test_scan_sim_json_has_the_story():
    r = invoke(["scan", "--sim", "seed-8gpu", "--json"])
    assert r.exit_code == 0
    doc = json.loads(r.output)
    assert doc["schema_version"] == 1 and doc["simulated"] is True
    assert len(doc["gpus"]) == 8 and len(doc["pairs"]) == 28
    for p in doc["pairs"]:
        assert p["link_class"] == seed_class(*p["gpus"]), p
    kinds = {f["kind"] for f in doc["problems"]}
    assert "iommu" in kinds and "acs" in kinds
    assert doc["host"]["iommu_mode"] == "translated"


def test_scan_sim_healthy_twin_has_no_host_problems():
    doc = json.loads(invoke(["scan", "--sim", "seed-8gpu-healthy", "--json"]).output)
    kinds = {f["kind"] for f in doc["problems"]}
    assert not kinds & {"iommu", "acs"}
    assert doc["host"]["iommu_mode"] in ("passthrough", "off")


def test_scan_table_says_simulated_and_names_problems():
    r = invoke(["scan", "--sim", "seed-8gpu", "--no-color"])
    assert r.exit_code == 0
    assert "SIMULATED" in r.output
    assert "NV4" in r.output and "SYS" in r.output and "NODE" in r.output
    assert "iommu" in r.output


def test_scan_nvswitch_and_degraded():
    doc = json.loads(invoke(["scan", "--sim", "dgx-a100", "--json"]).output)
    assert {p["link_class"] for p in doc["pairs"]} == {"NV12"}
    doc = json.loads(invoke(["scan", "--sim", "degraded-nvlink", "--json"]).output)
    classes = {p["link_class"] for p in doc["pairs"]}
    assert "NV12" in classes and classes - {"NV12"}, classes
    down = [f for f in doc["problems"] if f["kind"] == "nvlink-down"]
    assert len(down) == 1
    broken = down[0]["gpus"][0]
    for p in doc["pairs"]:
        assert (p["link_class"] == "NV12") == (broken not in p["gpus"]), p


def test_scan_csv_one_row_per_pair():
    r = invoke(["scan", "--sim", "pcie-4gpu", "--csv"])
    lines = r.output.strip().splitlines()
    assert lines[0].startswith("gpu_i,gpu_j,link_class,nvlink_count,p2p_read")
    assert len(lines) == 1 + 6


def test_scan_format_smi_round_trips_through_from_smi(tmp_path):
    smi = invoke(["scan", "--sim", "seed-8gpu", "--format", "smi"]).output
    assert smi.splitlines()[0].split("\t")[1:3] == ["GPU0", "GPU1"]
    f = tmp_path / "topo.txt"
    f.write_text(smi)
    doc = json.loads(invoke(["scan", "--from-smi", str(f), "--json"]).output)
    assert doc["simulated"] is False
    assert {tuple(p["gpus"]): p["link_class"] for p in doc["pairs"]} == \
        {(i, j): seed_class(i, j) for i in range(8) for j in range(i + 1, 8)}


def test_scan_from_smi_fixture_and_stdin(fixtures_dir):
    text = (fixtures_dir / "topo" / "nccl-667_4gpu_pxb_pix_sys.txt").read_text()
    rc, out, err = gputopo_here("scan", "--from-smi", "-", "--json", input=text)
    assert rc == 0, err
    classes = {tuple(p["gpus"]): p["link_class"] for p in json.loads(out)["pairs"]}
    assert classes[(0, 1)] == "PXB" and classes[(2, 3)] == "PIX" and classes[(0, 2)] == "SYS"


@pytest.mark.parametrize("args,code,needle", [
    (["scan", "--sim", "nosuch"], 2, "seed-8gpu"),
    (["scan", "--from-smi", "/nonexistent/topo.txt"], 2, "/nonexistent/topo.txt"),
    (["scan", "--sim", "seed-8gpu", "--from-smi", "x"], 2, "exclusive"),
    (["scan", "--format", "xml"], 2, "xml"),
])
def test_scan_bad_input_one_line_exit_2(args, code, needle):
    rc, out, err = gputopo_here(*args)
    assert rc == code
    assert needle in err and "Traceback" not in err


def test_scan_broken_smi_file_names_file_and_line(tmp_path):
    f = tmp_path / "bad.txt"
    f.write_text("\tGPU0\tGPU1\nGPU0\t X \tNVX\nGPU1\tNVX\t X \n")
    rc, out, err = gputopo_here("scan", "--from-smi", str(f))
    assert rc == 2 and f"{f}:2" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_scan_broken_description_names_key(tmp_path):
    f = tmp_path / "m.toml"
    f.write_text('name = "x"\nsummary = "y"\n[[fault]]\nwhere = "pair:0,1"\nwhat = "melt"\n')
    rc, out, err = gputopo_here("scan", "--sim", str(f))
    assert rc == 2 and str(f) in err and "Traceback" not in err


def test_scan_without_driver_exits_3_and_names_sim():
    rc, out, err = gputopo_here("scan")
    if rc == 0:
        pytest.skip("this machine has an NVIDIA driver")
    assert rc == 3 and "--sim" in err and "Traceback" not in err


def test_sims_lists_builtins():
    r = invoke(["sims"])
    names = [line.split()[0] for line in r.output.splitlines()]
    for n in ("seed-8gpu", "seed-8gpu-healthy", "dgx-a100", "dgx-h100", "pcie-4gpu", "degraded-nvlink"):
        assert n in names


@pytest.mark.slow
def test_scan_does_not_import_heavy_libraries():
    code = (
        "import sys\n"
        "from gputopo.cli.main import main\n"
        "try:\n    main(['scan', '--sim', 'seed-8gpu', '--json'])\n"
        "except SystemExit as e:\n    assert e.code == 0, e.code\n"
        "heavy = sorted(m for m in ('torch', 'pandas', 'matplotlib', 'numpy') if m in sys.modules)\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in proc.stderr, proc.stderr[-2000:]


def test_a_big_machines_matrix_is_plain_rows_with_every_class():
    """Above MAX_DRAWN_MATRIX devices the matrix is plain aligned text (a coloured table of
    1,024 GPUs took most of a minute to lay out): still every cell, each pair's class."""
    from gputopo.report.scan_view import MAX_DRAWN_MATRIX

    n = MAX_DRAWN_MATRIX + 2
    rc, out, err = gputopo_here("scan", "--sim", f"synthetic-{n}gpu", "--no-history")
    assert rc == 0, err
    lines = out.splitlines()
    assert any(f"{n} GPUs: the matrix below is plain text" in line for line in lines)
    header = next(line for line in lines if line.split()[:2] == ["GPU0", "GPU1"])
    assert header.split()[n - 1] == f"GPU{n - 1}" and header.split()[n:] == ["CPU", "Affinity", "NUMA", "Affinity"]
    doc = json.loads(gputopo_here("scan", "--sim", f"synthetic-{n}gpu", "--json", "--no-history")[1])
    want = {tuple(p["gpus"]): p["link_class"] for p in doc["pairs"]}
    rows = {line.split()[0]: line.split() for line in lines if line.startswith("GPU") and line.split()[1:2] != ["GPU1"]}
    for i in (0, 1, n // 2, n - 1):
        cells = rows[f"GPU{i}"][1:n + 1]
        assert cells[i] == "X"
        assert [c for j, c in enumerate(cells) if j != i] == [want[(min(i, j), max(i, j))] for j in range(n) if j != i]
