"""A recovery action NVML reports (field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, newer drivers):
read by the probe through the fake NVML's nvmlDeviceGetFieldValues, set by a sim description's
``recovery_action``, typed "not available" where the driver does not answer the field, and judged
by `gputopo gate` (gputopo/fleet/gate.py) beside an Xid 154 in the kernel log."""

import pytest

from gputopo.errors import GputopoError
from gputopo.fleet.gate import judge_gate
from gputopo.model import NotAvailable
from gputopo.model.xid import NVML_RECOVERY_ACTIONS, RECOVERY_ACTIONS
from gputopo.report.rules import scan_findings
from gputopo.sim.scan import scan_simulated


def sim(tmp_path, **actions):
    """A DGX H100 whose GPUs set ``recovery_action`` (index -> NVML enum name)."""
    gpus = ", ".join(f'{{ recovery_action = "{actions[str(i)]}" }}' if str(i) in actions else "{}"
                     for i in range(8))
    path = tmp_path / "ra.toml"
    path.write_text(f'extends = "dgx-h100"\nname = "ra"\ngpu = [{gpus}]\n')
    return str(path)


def verdict(topo, gpus):
    return judge_gate(topo, scan_findings(topo), gpus, {"gpus": gpus, "source": "test"}, fabric_name="sim",
                      budget_s=10, used_s=1, time_s=0)


def test_the_probe_reads_the_field_and_says_why_where_the_driver_does_not_answer(tmp_path):
    topo = scan_simulated(sim(tmp_path, **{"1": "DRAIN_P2P", "2": "NONE"}))
    assert topo.gpu(1).health.recovery_action == "Drain P2P"
    assert topo.gpu(2).health.recovery_action == "None"
    na = topo.gpu(0).health.recovery_action
    assert isinstance(na, NotAvailable)
    assert "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION" in na.reason and "NOT_SUPPORTED" in na.reason


def test_every_action_xid_154_names_is_an_nvml_action_too():
    assert set(RECOVERY_ACTIONS) <= {text for _name, text in NVML_RECOVERY_ACTIONS.values()}


@pytest.mark.parametrize("action, status, scope, words", [
    ("NODE_REBOOT", "broken", "node", "reboot the node"),
    ("GPU_RESET", "broken", "gpu", "nvidia-smi -r -i <bus>"),
    ("DRAIN_P2P", "degraded", "gpu", "stop peer-to-peer work"),
    ("BUS_RESET", "broken", "gpu", "the driver's recovery action 'BUS_RESET'"),
])
def test_gate_judges_the_action_nvml_reports(tmp_path, action, status, scope, words):
    topo = scan_simulated(sim(tmp_path, **{"2": action}))
    v = verdict(topo, [2, 5])
    j = {g.index: g for g in v.gpus}[2].judgement
    assert (j.status, j.scope, j.kind) == (status, scope, "xid")
    assert j.evidence == {"recovery_action": NVML_RECOVERY_ACTIONS[[n for n, (name, _t) in
                                                                     NVML_RECOVERY_ACTIONS.items()
                                                                     if name == action][0]][1],
                          "source": "nvml"}
    assert words.replace("<bus>", str(topo.gpu(2).pci_bus_id)) in (j.action or "") and "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION" in (j.cause or "")
    assert {g.index: g for g in v.gpus}[5].judgement.status == "ok"
    assert v.verdict == ("fail" if status == "broken" else "warn")


def test_none_or_not_reported_is_no_fault(tmp_path):
    topo = scan_simulated(sim(tmp_path, **{"2": "NONE"}))
    v = verdict(topo, [2, 5])
    assert all(g.judgement.status == "ok" for g in v.gpus)
    assert "recovery action: None" in v.gpus[0].layers["reported"]
    assert "recovery action: n/a" in v.gpus[1].layers["reported"]


def test_the_reset_pending_sim_says_it_through_the_kernel_log_and_nvml_alike():
    topo = scan_simulated("dgx-h100-reset-pending")
    assert topo.gpu(3).health.recovery_action == "GPU Reset Required"
    j = {g.index: g for g in verdict(topo, [2, 3]).gpus}[3].judgement
    assert (j.status, j.scope, j.kind) == ("broken", "gpu", "xid")
    assert "Xid 154 in the kernel log" in (j.cause or "")  # the kernel log's, not said twice


def test_a_bad_action_in_a_description_is_one_line(tmp_path):
    with pytest.raises(GputopoError, match="recovery_action.*expected one of NONE, GPU_RESET"):
        scan_simulated(sim(tmp_path, **{"1": "REBOOT_PLEASE"}))
