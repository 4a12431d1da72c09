"""`scan --kernel-log LOG` and `import kernel-log LOG` say the same of every posted kernel log in
tests/fixtures/xid/: the same findings (kind, severity, GPUs, words) from the same reader
(probe/xid_lines.py) and the same rules (health_checks.py for Xids, kernel_log_findings.py for
the driver lines and the lines that could not be read), and the same notes.

The scan runs on a simulated machine whose GPUs sit at the bus ids the log names, in bus order
(the import's GPU numbering), so each GPU is the import's GPU of the same number.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from helpers.cli import gputopo_here

XID = Path(__file__).resolve().parents[1] / "fixtures" / "xid"
LOGS = sorted(XID.glob("*.txt"))
#: A bus no posted log names: the one GPU of the machine when the log names none.
SPARE_BUS = "0000:e1:00"
BUS = r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"


def _machine(tmp: Path, buses: list[str]) -> Path:
    """A healthy simulated machine with one GPU at each bus id (PCIe only, IOMMU off)."""
    buses = buses or [SPARE_BUS]
    n = len(buses)
    head = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\tNUMA Affinity"
    rows = ["GPU%d\t" % i + "\t".join(" X " if i == j else "SYS" for j in range(n)) + "\t0-7\t0"
            for i in range(n)]
    gpus = "".join(f'[[gpu]]\nbus_id = "{b}.0"\n' for b in buses)
    path = tmp / "machine.toml"
    path.write_text(f'name = "kernel-log-gpus"\nsummary = "GPUs at the log\'s bus ids"\n'
                    f'matrix = """\n{head}\n' + "\n".join(rows) + '\n"""\n\n[defaults]\n'
                    'name = "Tesla V100-PCIE-32GB"\npcie_gen = 3\npcie_width = 16\n\n' + gpus +
                    '\n[host]\nhostname = "node"\ncpu_vendor = "intel"\niommu = "off"\nacs_redirect = false\n')
    return path


def _same(findings: list[dict]) -> list[tuple]:
    """What each finding says, without where the GPU's name came from (the import names a GPU by
    its bus id, the simulated machine by its model) or the folder/file the evidence points at."""
    out = []
    for f in findings:
        message = re.sub(r"GPU (?:\d+ \((" + BUS + r")\)|at (" + BUS + r")):", r"GPU \1\2:", f["message"].replace("run folder: ", ""))
        out.append((f["kind"], f["severity"], tuple(f.get("gpus") or ()), message))
    return sorted(out)


@pytest.mark.parametrize("log", LOGS, ids=[p.name[:40] for p in LOGS])
def test_scan_kernel_log_says_what_import_says(log, tmp_path):
    env = {"GPUTOPO_HISTORY": str(tmp_path / "h.sqlite")}
    rc, _, err = gputopo_here("import", "kernel-log", str(log), "--out", str(tmp_path / "run"), "--no-history",
                              env=env)
    assert rc == 0, err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    doc = json.loads((tmp_path / "run" / "imported.json").read_text())["imports"][0]
    machine = _machine(tmp_path, doc["gpus"])
    rc, out, err = gputopo_here("scan", "--sim", str(machine), "--kernel-log", str(log), "--json", "--no-history",
                                env=env)
    assert rc == 0, err
    scan = json.loads(out)
    # The simulated machine alone has no problem, so every scan finding comes from the log.
    assert _same(scan["problems"]) == _same(summary["findings"])
    assert scan["kernel_log_notes"] == [n for n in summary.get("notes", []) if n.startswith("kernel log: ")]
    facts = scan["host"]["kernel_log_facts"]
    assert {k: v for k, v in facts.items() if k != "file"} == \
        {k: v for k, v in doc.items() if k not in ("file", "schema_version", "tool")}


def test_scan_health_cell_names_a_gpu_the_driver_could_not_initialise(tmp_path):
    """RmInitAdapter failed for a GPU NVML still lists: its health cell says so, not 'ok'."""
    log = tmp_path / "kern.log"
    log.write_text("[   12.5] NVRM: GPU 0000:1c:00.0: RmInitAdapter failed! (0x62:0x40:1867)\n")
    rc, out, err = gputopo_here("scan", "--sim", "pcie-4gpu", "--kernel-log", str(log), "--no-history",
                                env={"COLUMNS": "200", "GPUTOPO_HISTORY": str(tmp_path / "h.sqlite")})
    assert rc == 0, err
    rows = {ln.split()[0]: ln for ln in out.splitlines() if ln.strip()[:1].isdigit() and "°C" in ln}
    assert "RmInitAdapter failed" in rows["1"] and rows["0"].rstrip().endswith("ok")
    assert "driver-error" in out
