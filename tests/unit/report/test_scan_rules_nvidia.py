"""The scan's link rules read as NVIDIA documents the NVML values they judge (fake NVML, a
simulated machine): what an idle reading can and cannot say."""

from __future__ import annotations

from gputopo.report.topology_checks import topology_findings
from gputopo.sim.description import parse_description
from gputopo.sim.scan import scan_description

FOUR = 'extends = "dgx-a100"\nname = "w"\n'


def _scan(gpu1: str):
    return scan_description(parse_description(FOUR + "[[gpu]]\n[[gpu]]\n" + gpu1 + "\n[[gpu]]\n" * 6))


def _down(topo):
    return [f for f in topology_findings(topo) if f.kind == "pcie-downgraded"]


def test_narrow_link_at_full_generation_is_a_trained_down_link():
    """Gen4 of Gen4 but x8 of x16: the link is not in its idle power state, so it trained narrow."""
    [f] = _down(_scan("pcie_width_current = 8"))
    assert f.severity == "warning" and f.gpus == [1]
    assert "x8 of x16" in f.message and "not in use" not in f.message
    assert f.evidence["at_top_generation"] is True


def test_narrow_link_read_while_it_idles_says_nvidia_lets_width_drop_too():
    """nvidia-smi --help-query-gpu: pcie.link.width.current "The current PCI-E link width. These may
    be reduced when the GPU is not in use", as for the generation. A narrow reading taken while
    the link idles below its top generation stays a warning (a riser or slot fault reads the same
    at idle, and must not pass as ok) but says the reading is not yet proof and how to confirm it."""
    [f] = _down(_scan("pcie_width_current = 8\npcie_gen_current = 1"))
    assert f.severity == "warning"
    assert "x8 of x16" in f.message and "Gen1 of Gen4" in f.message and "not in use" in f.message
    assert any("under load" in r for r in f.remedies)
    assert f.evidence["at_top_generation"] is False


def test_generation_alone_below_max_is_no_finding():
    """The generation drops at idle to save power (the same NVIDIA sentence): never a finding."""
    assert _down(_scan("pcie_gen_current = 1")) == []
