"""`gputopo health --as slurm-healthcheck` drains and resumes its own node through fake `scontrol`
and `sinfo` scripts this test writes: they record their argv and keep the node's state and reason
as slurmctld would (sinfo prints it in Slurm 22.05's ``%N|%T|%E`` form; ``scontrol update
State=DRAIN Reason=...`` drains, ``State=RESUME`` resumes). Every answer is exit 0 and one log
line: Slurm only logs a health check's exit code."""

import json
import sys
from pathlib import Path

import pytest

from helpers.cli import gputopo_here

pytestmark = pytest.mark.slow  # the fake scontrol and sinfo are processes

FAKE = '''#!{python}
import json, sys
from pathlib import Path
here = Path({folder!r})
state = json.loads((here / "node.json").read_text())
with open(here / "calls.jsonl", "a") as fh:
    fh.write(json.dumps([Path(sys.argv[0]).name] + sys.argv[1:]) + "\\n")
if Path(sys.argv[0]).name == "sinfo":
    print(f"{{state['name']}}|{{state['state']}}|{{state['reason'] or 'none'}}")
    sys.exit(0)
args = dict(a.split("=", 1) for a in sys.argv[2:])
if args.get("State") == "DRAIN":
    state.update(state="drained", reason=args["Reason"])
elif args.get("State") == "RESUME":
    state.update(state="idle", reason="")
(here / "node.json").write_text(json.dumps(state))
'''


class FakeSlurm:
    def __init__(self, folder: Path, name: str = "gpu01"):
        self.folder, self.name = folder, name
        for tool in ("sinfo", "scontrol"):
            p = folder / tool
            p.write_text(FAKE.format(python=sys.executable, folder=str(folder)))
            p.chmod(0o755)
        self.set("idle", "")

    def set(self, state: str, reason: str) -> None:
        (self.folder / "node.json").write_text(json.dumps({"name": self.name, "state": state, "reason": reason}))

    @property
    def node(self) -> dict:
        return json.loads((self.folder / "node.json").read_text())

    def calls(self) -> list:
        p = self.folder / "calls.jsonl"
        out = [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []
        p.unlink(missing_ok=True)
        return out

    def check(self, sim: str, *more, state_dir: Path):
        return gputopo_here("health", "--as", "slurm-healthcheck", "--sim", sim, "--scontrol", self.folder / "scontrol",
                            "--sinfo", self.folder / "sinfo", "--node", self.name, "--state-dir", state_dir, *more)


@pytest.fixture
def slurm(tmp_path):
    (tmp_path / "slurm").mkdir()
    return FakeSlurm(tmp_path / "slurm")


def test_a_fault_drains_the_same_fault_does_nothing_a_fix_resumes(slurm, tmp_path):
    st = tmp_path / "state"
    r = slurm.check("degraded-nvlink", state_dir=st)
    assert r.returncode == 0 and r.stdout.count("\n") == 1
    reason = slurm.node["reason"]
    assert slurm.node["state"] == "drained" and reason.startswith("gputopo: nvlink-down gpu5 ")
    assert slurm.calls() == [["sinfo", "-h", "-N", "-n", "gpu01", "-o", "%N|%T|%E"],
                             ["scontrol", "update", "NodeName=gpu01", "State=DRAIN", f"Reason={reason}"]]
    assert "fail" in r.stdout and "drained" in r.stdout and reason in r.stdout
    kept = json.loads((st / "health-last.json").read_text())
    assert kept["verdict"] == "fail" and kept["slurm"]["kind"] == "drain" and kept["budget_s"] == 45

    r = slurm.check("degraded-nvlink", state_dir=st)  # the same verdict again: no call at all
    assert r.returncode == 0 and slurm.calls() == [] and "unchanged" in r.stdout

    r = slurm.check("dgx-a100", state_dir=st)
    assert r.returncode == 0 and slurm.node == {"name": "gpu01", "state": "idle", "reason": ""}
    assert slurm.calls()[-1] == ["scontrol", "update", "NodeName=gpu01", "State=RESUME"]
    assert "resumed" in r.stdout


@pytest.mark.parametrize("reason", ["bad PSU, ticket 4711", ""])
def test_another_owners_drain_is_never_touched(slurm, tmp_path, reason):
    slurm.set("drained", reason)
    for sim in ("degraded-nvlink", "dgx-a100"):  # a failure does not take it over, a pass does not resume it
        r = slurm.check(sim, state_dir=tmp_path / "state")
        assert r.returncode == 0 and slurm.node["reason"] == reason and slurm.node["state"] == "drained"
        assert [c[0] for c in slurm.calls()] == ["sinfo"]


def test_a_failure_drains_once_another_owner_resumes(slurm, tmp_path):
    """Another owner's drain is left alone, and looked at again: once they resume the node, the
    failure that still stands drains it as gputopo's. An admin's resume of gputopo's own drain
    holds until the verdict changes."""
    st = tmp_path / "state"
    slurm.set("drained", "bad PSU")
    slurm.check("degraded-nvlink", state_dir=st)
    assert slurm.node["reason"] == "bad PSU"
    slurm.set("idle", "")  # the other owner resumes it
    slurm.check("degraded-nvlink", state_dir=st)
    assert slurm.node["state"] == "drained" and slurm.node["reason"].startswith("gputopo: nvlink-down")
    slurm.calls()
    slurm.set("idle", "")  # an admin resumes gputopo's drain by hand: the same verdict leaves it
    slurm.check("degraded-nvlink", state_dir=st)
    assert slurm.node["state"] == "idle" and slurm.calls() == []


def test_a_gputopo_drain_gets_the_new_reason(slurm, tmp_path):
    slurm.set("drained", "gputopo: xid gpu3 79 fallen off the bus")
    slurm.check("degraded-nvlink", state_dir=tmp_path / "state")
    assert slurm.node["reason"].startswith("gputopo: nvlink-down gpu5")


def test_a_warning_drains_nothing(slurm, tmp_path):
    r = slurm.check("seed-8gpu", state_dir=tmp_path / "state")  # IOMMU and ACS: warnings
    assert r.returncode == 0 and "warn" in r.stdout and slurm.node["state"] == "idle"
    assert [c[0] for c in slurm.calls()] == ["sinfo"]


def test_not_judged_drains_only_when_asked(slurm, tmp_path, monkeypatch):
    import time

    import gputopo.cli.scan as scan

    real = scan.load_topology

    def slow(*a, **kw):
        time.sleep(2.0)
        return real(*a, **kw)

    monkeypatch.setattr(scan, "load_topology", slow)
    r = slurm.check("degraded-nvlink", "--budget", "0.2", state_dir=tmp_path / "state")
    assert r.returncode == 0 and "not-judged" in r.stdout and slurm.node["state"] == "idle"
    r = slurm.check("degraded-nvlink", "--budget", "0.2", "--on-unknown", "drain", state_dir=tmp_path / "state2")
    assert r.returncode == 0 and slurm.node["state"] == "drained"
    assert slurm.node["reason"].startswith("gputopo: not-judged node ")


def test_slurm_unreachable_is_a_log_line_and_exit_0(tmp_path):
    r = gputopo_here("health", "--as", "slurm-healthcheck", "--sim", "degraded-nvlink", "--sinfo", "/nonexistent/sinfo",
                     "--node", "n1", "--state-dir", tmp_path)
    assert r.returncode == 0 and "not changed" in r.stdout and "cannot run /nonexistent/sinfo" in r.stderr
    # not acted on: the next check tries again
    assert json.loads((tmp_path / "health-last.json").read_text())["slurm"]["ok"] is False


def test_on_unknown_drain_drains_a_check_that_could_not_run(slurm, tmp_path, monkeypatch):
    """No driver: by default a log line and nothing drained; with --on-unknown drain the node is
    drained, its reason saying why."""
    from gputopo.errors import NoHardwareError
    import gputopo.probe.scan as probe_scan

    def no_driver(**kw):
        raise NoHardwareError("no NVIDIA driver found")

    monkeypatch.setattr(probe_scan, "scan_real", no_driver)
    args = ["health", "--as", "slurm-healthcheck", "--scontrol", slurm.folder / "scontrol", "--sinfo",
            slurm.folder / "sinfo", "--node", slurm.name, "--state-dir", tmp_path]
    r = gputopo_here(*args)
    assert r.returncode == 0 and slurm.node["state"] == "idle" and slurm.calls() == []
    assert r.stdout.startswith("gputopo health: could not run: no NVIDIA driver found") and "node: unchanged" in r.stdout
    r = gputopo_here(*args, "--on-unknown", "drain")
    assert r.returncode == 0 and slurm.node["state"] == "drained"
    assert slurm.node["reason"].startswith("gputopo: not-judged node could not run: no NVIDIA driver found")
    assert "node: gpu01 drained" in r.stdout


def test_a_prolog_error_drain_is_left_as_it_is_and_explained_by_gates_kept_verdict(slurm, tmp_path):
    """Slurm drained the node after gate's Prolog failed ("Prolog error"); a healthy check never
    resumes it, and says gate's kept verdict; a gate verdict kept after a settled check makes
    the next check read the node again."""
    st = tmp_path / "state"
    r = slurm.check("dgx-a100", state_dir=st)  # healthy, not drained: settled
    assert r.returncode == 0 and "not drained" in r.stdout and slurm.calls()
    r = slurm.check("dgx-a100", state_dir=st)
    assert slurm.calls() == [] and "unchanged" in r.stdout

    gate_reason = "gputopo: nvlink-down gpu3 2 NVLinks down"
    (st / "gate-last.json").write_text(json.dumps({"command": "gate", "verdict": "fail", "reason": gate_reason,
                                                   "time": "2026-12-07T21:00:00+00:00", "job": "42",
                                                   "exit_code": 1}))
    slurm.set("drained", "Prolog error")
    for _ in range(2):  # read again each time (another owner's drain), never resumed
        r = slurm.check("dgx-a100", state_dir=st)
        assert r.returncode == 0 and r.stdout.count("\n") == 1
        assert [c[0] for c in slurm.calls()] == ["sinfo"]
        assert slurm.node == {"name": "gpu01", "state": "drained", "reason": "Prolog error"}
        assert "pass" in r.stdout and "explained by gate fail at 2026-12-07T21:00:00+00:00 (job 42)" in r.stdout
        assert gate_reason in r.stdout and "left as it is" in r.stdout
    kept = json.loads((st / "health-last.json").read_text())
    assert kept["verdict"] == "pass" and kept["gate_kept"]["reason"] == gate_reason

    (st / "gate-last.json").unlink()
    r = slurm.check("dgx-a100", state_dir=st)
    assert "not explained" in r.stdout and slurm.node["reason"] == "Prolog error"
