"""Acceptance specs: the shipped examples load; a bad spec is refused naming the key (exit 2)."""

from __future__ import annotations

import pytest

from gputopo.check.spec import load_spec, parse_spec, selector_matches, shipped_spec_names, shipped_spec_path
from gputopo.errors import EXIT_USAGE, InputFileError


def test_shipped_specs_load():
    assert {"pcie-box", "nvswitch-8gpu"} <= set(shipped_spec_names())
    pcie = load_spec(shipped_spec_path("pcie-box"))
    assert pcie.integrity == dict.fromkeys(("no_corruption", "no_nan", "no_divergence", "no_hang", "no_crash"), True)
    assert pcie.pcie_full_width
    # inside a socket a fraction of the PCIe rate; across sockets (SYS) the CPU interconnect's
    # published rate (a healthy Intel box's ~6 GB/s SYS copies are 19 % of PCIe Gen4 x16)
    by_class = {r.selector: r for r in pcie.bandwidth}
    assert set(by_class) == {"PIX", "PXB", "PHB", "NODE", "SYS"}
    assert all(by_class[c].min_efficiency == 0.5 for c in ("PIX", "PXB", "PHB", "NODE"))
    assert by_class["SYS"].min_efficiency is None and by_class["SYS"].min_gbps == 4.5
    nvs = load_spec(shipped_spec_path("nvswitch-8gpu"))
    assert nvs.gpu_count == 8 and nvs.all_pairs == "NV18" and nvs.nvlink_min_links_up == 18
    assert nvs.busbw == {"all_reduce": {"*": 100.0}}


def test_shipped_specs_document_every_key():
    """Every key the loader knows appears (set or commented) in the PCIe example."""
    text = shipped_spec_path("pcie-box").read_text()
    for key in ("schema_version", "name", "description", "strict", "gpu_count", "all_pairs", "matrix",
                "[topology.pairs]", "full_width", "min_gen", "min_width", "max_replay", "min_links_up",
                "[nvlink.links_up]", "[nvlink.max_errors]", "min_gbps", "min_efficiency", "series",
                "[busbw]", "no_corruption", "no_nan", "no_divergence", "no_hang", "no_crash", "fail_on"):
        assert key in text, key


def _bad(tmp_path, text):
    p = tmp_path / "spec.toml"
    p.write_text(text)
    with pytest.raises(InputFileError) as e:
        load_spec(p)
    assert e.value.exit_code == EXIT_USAGE
    return e.value


@pytest.mark.parametrize("text,key", [
    ("[pcie]\nmin_widht = 16\n", "pcie.min_widht"),
    ("[pcie]\nmin_width = \"x16\"\n", "pcie.min_width"),
    ("[bandwidth.SYS]\nmin_gbps = -1\n", "bandwidth.SYS.min_gbps"),
    ("[bandwidth.FOO]\nmin_gbps = 1\n", "bandwidth.FOO"),
    ("[bandwidth.SYS]\nseries = \"p2p.copy\"\n", "bandwidth.SYS"),
    ("[busbw]\nallreduce = 5\n", "busbw.allreduce"),
    ("[topology.pairs]\n\"0,0\" = \"NV4\"\n", "topology.pairs.0,0"),
    ("[topology.pairs]\n\"0,1\" = \"NV\"\n", "topology.pairs.0,1"),
    ("[integrity]\nno_corruption = \"yes\"\n", "integrity.no_corruption"),
    ("[findings]\nfail_on = [\"bogus\"]\n", "findings.fail_on"),
    ("[nvlink.max_errors]\ncrc = 1\n", "nvlink.max_errors.crc"),
    ("schema_version = 2\n", "schema_version"),
    ("strict = 1\n", "strict"),
    ("colour = \"red\"\n", "colour"),
])
def test_bad_spec_names_the_key(tmp_path, text, key):
    err = _bad(tmp_path, text)
    assert err.key == key
    assert f"[{key}]" in str(err) and "spec.toml" in str(err)


def test_toml_syntax_error_names_the_line(tmp_path):
    err = _bad(tmp_path, "name = \"x\"\n[pcie\nmin_width = 16\n")
    assert err.line == 2 and "not valid TOML" in str(err)


def test_missing_spec_file(tmp_path):
    with pytest.raises(InputFileError, match="cannot read"):
        load_spec(tmp_path / "nope.toml")


def test_matrix_accepts_nvidia_smi_text():
    pytest.importorskip("gputopo.probe.smi")
    matrix = ("\tGPU0\tGPU1\tGPU2\tCPU Affinity\tNUMA Affinity\n"
              "GPU0\t X \tNV4\tSYS\t0-31\t0\n"
              "GPU1\tNV4\t X \tSYS\t0-31\t0\n"
              "GPU2\tSYS\tSYS\t X \t32-63\t1\n")
    spec = parse_spec({"topology": {"matrix": matrix, "pairs": {"1,2": "NODE"}}})
    assert spec.expected_classes == {(0, 1): "NV4", (0, 2): "SYS", (1, 2): "NODE"}
    assert spec.gpu_count == 3
    with pytest.raises(InputFileError) as e:
        parse_spec({"topology": {"matrix": "GPU0 GPU1\nGPU0 X NV4\n"}}, "s.toml")
    assert e.value.key == "topology.matrix"


def test_selectors():
    assert selector_matches("*", None) and selector_matches("*", "SYS")
    assert selector_matches("NV", "NV18") and not selector_matches("NV", "PIX")
    assert selector_matches("PCIe", "SYS") and not selector_matches("PCIe", "NV4")
    assert selector_matches("SYS", "SOC") and not selector_matches("NODE", "SYS")
    assert not selector_matches("SYS", None)
