"""`gputopo health --as npd` run as node-problem-detector's custom plugin monitor runs a plugin
(kubernetes/node-problem-detector pkg/custompluginmonitor/plugin/plugin.go): the rule's path and
args from docs/fleet.md's plugin configuration, killed at the configured timeout, its stdout
trimmed and cut at ``max_output_length`` bytes, exit 0 OK, 1 NonOK, anything else Unknown. The
contract: gputopo ends before NPD's timeout, its status is the verdict's, and NPD's cut never
cuts its line (it is built to fit)."""

import json
import re
import subprocess
import sys
import time

import pytest

from gputopo.model.reason import REASON_PATTERN
from helpers.cli import cli_env
from helpers.paths import REPO

pytestmark = [pytest.mark.slow, pytest.mark.serial]  # the plugin is a process, as under NPD  # serial: wall-time bounds


def npd_config() -> dict:
    text = (REPO / "docs" / "fleet.md").read_text(encoding="utf-8")
    block = re.search(r"```json\n(.*?)```", text, re.S)
    assert block, "docs/fleet.md shows NPD's plugin configuration as a json block"
    return json.loads(block.group(1))


def seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)", text)
    assert m, text
    return float(m.group(1)) * {"ms": 0.001, "s": 1, "m": 60}[m.group(2)]


def run_as_npd(args, env, history):
    """plugin.go's run(): (status, message, wall seconds, the whole stdout trimmed); the rule's
    history database moved to ``history``."""
    cfg = npd_config()
    rule = cfg["rules"][0]
    timeout = min(seconds(rule.get("timeout", cfg["pluginConfig"]["timeout"])), seconds(cfg["pluginConfig"]["timeout"]))
    cut = cfg["pluginConfig"]["max_output_length"]
    rule_args = [history if a == "/var/lib/gputopo/history.sqlite" else a for a in rule["args"]]
    argv = [sys.executable, "-m", "gputopo", *rule_args, *args]  # rule["path"] is the installed gputopo
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, capture_output=True, timeout=timeout, env=env)
        out, code = p.stdout, p.returncode
    except subprocess.TimeoutExpired as e:
        return "Unknown", f"Timeout when running plugin: output - {e.stdout!r}", time.monotonic() - t0, b""
    message = out.decode("utf-8", "replace").strip()
    message = message.encode()[:cut].decode("utf-8", "replace")
    return {0: "OK", 1: "NonOK"}.get(code, "Unknown"), message, time.monotonic() - t0, out.strip()


def test_the_documented_config_is_npd_s_format():
    cfg = npd_config()
    assert cfg["plugin"] == "custom" and cfg["pluginConfig"]["max_output_length"] == 80
    rule = cfg["rules"][0]
    assert rule["type"] == "permanent" and rule["condition"] == cfg["conditions"][0]["type"]
    assert rule["args"][:3] == ["health", "--as", "npd"] and "--level" not in rule["args"]  # passive only
    assert seconds(cfg["pluginConfig"]["timeout"]) == 5.0


@pytest.mark.parametrize("sim, status", [("dgx-h100", "OK"), ("seed-8gpu", "OK"), ("h100-sxm-shared-vm", "OK"),
                                         ("degraded-nvlink", "NonOK"), ("dgx-h100-unregistered", "NonOK")])
def test_run_as_npd_runs_it(sim, status, tmp_path):
    env = cli_env({"GPUTOPO_HISTORY": str(tmp_path / "h.sqlite"), "GPUTOPO_STATE_DIR": str(tmp_path)})
    got, message, wall, whole = run_as_npd(["--sim", sim], env, str(tmp_path / "h.sqlite"))
    assert got == status and wall < 5.0
    assert message.encode() == whole  # NPD's cut took nothing: the line fits its 80 bytes
    if status == "NonOK":
        assert re.match(REASON_PATTERN, message)
    elif sim == "seed-8gpu":  # a warning is OK to NPD, its reason still the message
        assert message.startswith("gputopo: iommu host ")
    else:
        assert message.startswith("gputopo ok: SIMULATED ")


def test_a_budget_that_runs_out_is_unknown_before_npd_kills_it(tmp_path):
    """A scan slower than the budget (a hung NVML call): the plugin answers Unknown at its budget,
    within NPD's timeout, instead of being killed."""
    slow = tmp_path / "slow_scan.py"
    slow.write_text("import time, gputopo.cli.scan as s\nreal = s.load_topology\n"
                    "def load(*a, **k):\n    time.sleep(30)\n    return real(*a, **k)\ns.load_topology = load\n"
                    "from gputopo.cli.main import entry\nimport sys\nsys.argv[0] = 'gputopo'\nentry()\n")
    env = cli_env({"GPUTOPO_STATE_DIR": str(tmp_path), "PYTHONPATH": str(REPO)})
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, str(slow), "health", "--as", "npd", "--sim", "dgx-h100"], capture_output=True,
                       timeout=5.0, env=env)
    wall = time.monotonic() - t0
    assert p.returncode == 2 and wall < 5.0  # NPD's Unknown, never NonOK
    line = p.stdout.decode().strip()
    assert line.startswith("gputopo not judged: SIMULATED the scan") and len(line.encode()) <= 80
