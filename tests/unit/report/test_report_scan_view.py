"""What the scan table prints: every value literally (no rich markup or emoji codes), NIC rows and
columns as nvidia-smi has them, and n/a said once where a file could not tell."""

from __future__ import annotations

import io

from click.testing import CliRunner

from gputopo.cli.main import _register, cli
from gputopo.console import literal_console
from gputopo.model import Failed, Gpu, LinkClass, Pair, PcieLink, Topology
from gputopo.model.finding import Finding
from gputopo.report.scan_view import SMI_BANNER, render_problems, render_scan
from helpers.paths import FIXTURES

_register()

NCCL1617 = FIXTURES / "topo" / "nccl-1617_4xh100_nv6_nics.txt"


def rendered(topo, problems=()):
    buf = io.StringIO()
    render_scan(literal_console(file=buf, width=240, no_color=True), topo, list(problems))
    return buf.getvalue()


def two_gpus(bus0="0000:ab:00.0", name="NVIDIA [red]x[/red] :ab: GPU"):
    gpus = [Gpu(nvml_index=0, name=name, pci_bus_id=bus0, cuda_index=0,
                pcie=PcieLink(gen_current=4, gen_max=4, width_current=16, width_max=16)),
            Gpu(nvml_index=1, name="NVIDIA A100", pci_bus_id="0000:cd:00.0", cuda_index=1,
                lost=None, pcie=PcieLink(gen_current=4, gen_max=4, width_current=8, width_max=16))]
    return Topology(gpus=gpus, pairs=[Pair((0, 1), LinkClass.parse("PIX"))], source="test")


def test_bus_id_with_ab_and_markup_print_literally():
    out = rendered(two_gpus())
    assert "0000:ab:00.0" in out and "\U0001f18e" not in out  # 🆎
    assert "[red]x[/red] :ab: GPU" in out


def test_problem_text_prints_literally():
    buf = io.StringIO()
    f = Finding(kind="acs", severity="warning", message="bridge [bold]0000:ab:00.0[/bold] :ab:",
                gpus=[0, 1])
    render_problems(literal_console(file=buf, width=240), [f])
    assert "bridge [bold]0000:ab:00.0[/bold] :ab:" in buf.getvalue()


def test_cli_scan_sim_prints_the_ab_bus_id_literally():
    r = CliRunner().invoke(cli, ["scan", "--sim", "dgx-h100"], catch_exceptions=False)
    assert r.exit_code == 0
    assert "0000:ab:00.0" in r.output and "\U0001f18e" not in r.output


def test_from_smi_table_says_file_and_na_once():
    r = CliRunner().invoke(cli, ["scan", "--from-smi", str(NCCL1617)], catch_exceptions=False)
    assert r.exit_code == 0
    out = r.output
    assert SMI_BANNER in out
    assert "Genn/a" not in out and "xn/a" not in out
    row0 = next(line for line in out.splitlines() if line.startswith("0 "))
    cells = [c.strip() for c in row0.split("│")]
    # NVML, CUDA, name, bus, NUMA, CPUs, PCIe, NVLinks, MIG: the text has no NVLink states: n/a.
    assert cells == ["0", "n/a", "n/a", "n/a", "3", "6,14,22,30", "n/a", "n/a", "n/a"]


def test_from_smi_table_has_nic_rows_and_columns():
    r = CliRunner().invoke(cli, ["scan", "--from-smi", str(NCCL1617)], catch_exceptions=False)
    lines = r.output.splitlines()
    head = next(line for line in lines if line.split()[:1] == ["GPU0"])
    assert head.split() == ["GPU0", "GPU1", "GPU2", "GPU3", "NIC0", "NIC1", "NIC2", "NIC3", "CPU",
                            "Affinity", "NUMA", "Affinity", "GPU", "NUMA", "ID"]
    gpu2 = next(line for line in lines if line.startswith("GPU2 "))
    assert gpu2.split()[5:9] == ["SYS", "SYS", "PIX", "SYS"]
    nic3 = next(line for line in lines if line.startswith("NIC3 "))
    assert nic3.split()[1:] == ["SYS", "SYS", "SYS", "PIX", "SYS", "SYS", "SYS", "X"]


def test_pcie_shows_what_is_known_and_dash_only_for_real_zero():
    topo = two_gpus()
    topo.gpus[1].pcie = PcieLink(gen_current=4, gen_max=Failed("x"))
    out = rendered(topo)
    assert "Gen4 x16 (Gen4 x16)" in out
    assert "Gen4 (n/a)" in out
    row = next(line for line in out.splitlines() if line.startswith("0 "))
    assert row.split("│")[7].strip() == "-"  # NVML read the GPU and it has no NVLinks
