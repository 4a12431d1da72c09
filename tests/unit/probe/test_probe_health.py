"""GPU health in the scan: NVML health calls through the fake NVML (answering as a real driver
does), Xid lines from the kernel log, the findings they make, and what `scan` shows."""

import json
import subprocess

import pytest

from gputopo.errors import InputFileError
from gputopo.model import topology_from_json, topology_to_json
from gputopo.model.health import GpuHealth
from gputopo.model.values import Failed, NotAvailable
from gputopo.probe.health import clock_event_names, read_health
from gputopo.probe.kernel_log import read_kernel_log, read_xid_events
from gputopo.probe.xid_lines import read_kernel_log_lines
from gputopo.probe.scan import read_machine
from gputopo.report.health_checks import health_cells, health_findings, kernel_log_line
from gputopo.report.topology_checks import topology_findings
from gputopo.sim.description import parse_description
from gputopo.sim.fake_host import FakeHost
from gputopo.sim.fake_nvml import FakeNvml

SICK = """
extends = "dgx-a100"
name = "sick-a100"
[[gpu]]
[[gpu]]
ecc_uncorrected = 2
remapped_rows_pending = true
remapped_rows_uncorrected = 1
xid = [94, 63]
[[gpu]]
ecc_uncorrected_aggregate = 3
[[gpu]]
remapped_rows_failure = true
[[gpu]]
xid = [79, 79, 13]
[[gpu]]
[[gpu]]
[[gpu]]
clock_events = ["hw_thermal_slowdown"]
temperature_c = 91
"""

CONSUMER = """
name = "two-3090"
[pairs]
default = "numa"
[defaults]
name = "NVIDIA GeForce RTX 3090"
[[gpu]]
[[gpu]]
"""


def scan_text(text, *, as_root=True, **hooks):
    desc = parse_description(text)
    lib = FakeNvml(desc, **hooks)
    lib.nvmlInit()
    try:
        with FakeHost(desc, as_root=as_root) as host:
            return read_machine(lib, host.root, host.run, machine=desc.name, source="sim", simulated=True)
    finally:
        lib.nvmlShutdown()


def kinds(findings):
    return sorted((f.kind, f.severity, tuple(f.gpus or ())) for f in findings)


# ----------------------------------------------------------------------------- kernel log

# Lines as real drivers wrote them: open-gpu-kernel-modules issue 1151 (journalctl, Xid 79) and
# stas00/ml-engineering compute/accelerator/nvidia/debug.md (dmesg, Xid 63); the old-driver form
# without "PCI:" and with a function number.
REAL_LOG = """\
May 18 19:02:39 kernel: NVRM: GPU at PCI:0000:2b:00: GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae
May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.
May 18 19:02:39 kernel: NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.
[ 8841.123456] NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.
[  100.000001] NVRM: Xid (0000:3b:00.0): 13, Graphics Exception
"""


def test_xid_lines_parse_by_bus():
    by_bus = read_kernel_log_lines(REAL_LOG.splitlines()).events
    assert [e.xid for e in by_bus[(0, 0x2B, 0)]] == [79]
    assert by_bus[(0, 0x2B, 0)][0].timestamp == "May 18 19:02:39"
    assert by_bus[(0, 0x10, 0x1C)][0].text.startswith("pid=1896, Row Remapper")
    assert by_bus[(0, 0x10, 0x1C)][0].timestamp == "[ 8841.123456]"
    assert [e.xid for e in by_bus[(0, 0x3B, 0)]] == [13]
    assert len(by_bus) == 3  # the "GPU has fallen off the bus" line without Xid is not an event


def test_xid_events_map_to_nvml_bus_ids_and_keep_the_rest():
    run = lambda argv: (0, REAL_LOG, "")  # noqa: E731
    events, source, unmatched, read = read_xid_events(["00000000:2B:00.0", "00000000:3B:00.0", "00000000:5E:00.0"],
                                                      run)
    assert read is not None and read.problems == []
    assert source == "dmesg"
    assert [e.xid for e in events["00000000:2B:00.0"]] == [79]
    assert [e.xid for e in events["00000000:3B:00.0"]] == [13]
    assert events["00000000:5E:00.0"] == []
    assert list(unmatched) == ["0000:10:1c"]


def test_kernel_log_not_readable_names_every_reason():
    def run(argv):
        if argv[0] == "dmesg":
            return 1, "", "dmesg: read kernel buffer failed: Operation not permitted\n"
        raise FileNotFoundError(argv[0])

    text, source = read_kernel_log(run)
    assert isinstance(text, NotAvailable) and source == ""
    assert "Operation not permitted" in text.reason and "journalctl: command not found" in text.reason


def test_kernel_log_timeout_is_not_available():
    def run(argv):
        raise subprocess.TimeoutExpired(argv, 2.0)

    text, _ = read_kernel_log(run)
    assert isinstance(text, NotAvailable) and "timed out" in text.reason


def test_journalctl_used_when_dmesg_is_restricted():
    def run(argv):
        if argv[0] == "dmesg":
            return 1, "", "dmesg: read kernel buffer failed: Operation not permitted\n"
        return 0, REAL_LOG, ""

    text, source = read_kernel_log(run)
    assert source.startswith("journalctl -k") and "Xid" in text


# ----------------------------------------------------------------------------- NVML through the fake


def test_healthy_datacenter_gpu_reads_every_value():
    topo = scan_text('extends = "dgx-a100"\nname = "ok"')
    h = topo.gpus[0].health
    assert isinstance(h, GpuHealth)
    assert (h.ecc_mode_current, h.ecc_mode_pending) == ("enabled", "enabled")
    assert h.ecc_errors["volatile"] == {"corrected": 0, "uncorrected": 0}
    assert h.remapped_rows == {"corrected": 0, "uncorrected": 0, "pending": False, "failure": False}
    # A100 remaps rows; page retirement is NOT_SUPPORTED there, typed with its reason
    assert isinstance(h.retired_pages, NotAvailable) and "not supported" in h.retired_pages.reason
    assert h.temperature_c == 34 and h.power_limit_w == 400.0 and h.persistence_mode == "enabled"
    assert h.clock_event_reasons == ["gpu_idle"] and h.xid_events == []
    assert topo.host.kernel_log == "dmesg"
    assert health_findings(topo) == []


def test_consumer_gpu_has_no_ecc_nor_memory_repair():
    topo = scan_text(CONSUMER)
    h = topo.gpus[0].health
    for value in (h.ecc_mode_current, h.ecc_errors, h.remapped_rows, h.retired_pages):
        assert isinstance(value, NotAvailable) and "not supported" in value.reason
    assert h.temperature_c == 34  # what every GPU answers
    assert health_findings(topo) == []
    assert health_cells(h)[-1] == "ok" and health_cells(h)[3:6] == ["n/a", "n/a", "n/a"]


def test_volta_retires_pages_and_has_no_remapped_rows():
    topo = scan_text('extends = "pcie-4gpu"\nname = "v"\n[[gpu]]\nretired_pages_dbe = 2\n'
                     'retired_pages_pending = true\n[[gpu]]\n[[gpu]]\n[[gpu]]')
    h = topo.gpus[0].health
    assert h.retired_pages == {"single_bit": 0, "double_bit": 2} and h.retired_pages_pending is True
    assert isinstance(h.remapped_rows, NotAvailable)
    assert kinds(health_findings(topo)) == [("retired-pages", "warning", (0,))]


def test_sick_machine_findings_with_meanings():
    topo = scan_text(SICK)
    found = health_findings(topo)
    assert kinds(found) == [
        ("ecc", "warning", (1,)), ("ecc", "warning", (2,)), ("remapped-rows", "error", (3,)),
        ("remapped-rows", "info", (1,)), ("thermal", "warning", (7,)),
        ("xid", "error", (4,)), ("xid", "info", (1,)), ("xid", "info", (4,)), ("xid", "warning", (1,)),
    ]
    # GPU 1's Xid 94 (contained: reset when convenient) is a warning and its Xid 63 (a remap that
    # applies at the next reset, work keeps running) info, as NVIDIA's Xid catalog has them.
    by_code = {f.evidence["xid"]: f.severity for f in found if f.kind == "xid" and f.gpus == [1]}
    assert by_code == {63: "info", 94: "warning"}
    xid79 = next(f for f in found if f.kind == "xid" and f.evidence["xid"] == 79)
    assert "fallen off the bus" in xid79.message and xid79.evidence["count"] == 2 and "(2 times)" in xid79.message
    xid13 = next(f for f in found if f.kind == "xid" and f.evidence["xid"] == 13)
    # An application's fault: listed as info, with what NVIDIA's Xid catalog asks (restart the
    # application, then its Xid 13 workflow), never a replacement.
    assert xid13.severity == "info" and [r.split("(NVIDIA's Xid catalog: ")[1] for r in xid13.remedies] == [
        "RESTART_APP)", "WORKFLOW_XID_13)"]
    assert xid13.message.startswith("GPU 4 (0000:") and xid13.evidence["bus_id"].startswith("0000:")
    assert set(kinds(found)) <= set(kinds(topology_findings(topo)))
    # The Xid column lists every code; the health cell the problems (63 is none: info).
    assert health_cells(topo.gpus[1].health)[-2:] == ["63,94", "ECC UE 2, remap pending, Xid 94"]
    assert health_cells(topo.gpus[3].health)[-1] == "remap FAILED"
    assert health_cells(topo.gpus[4].health)[-2:] == ["13,79", "Xid 79"]  # 13: an application's


def test_pending_row_remap_is_said_as_nvidia_says_it():
    """NVIDIA's GPU memory error guide (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/, "Error
    Recovery and Response Flags"): the pending flag means the remap happens at the next GPU reset,
    and "even with the flag set, unaffected applications can continue running without affecting
    accuracy and performance, and new workloads can be launched" (error containment and dynamic
    page offlining, which it lists for A100-class chips). Not "the bad row stays in use": info, with
    the reset as the way to apply it; the health cell still says the GPU waits for one."""
    topo = scan_text(SICK)
    f = next(f for f in health_findings(topo) if f.kind == "remapped-rows" and f.gpus == [1])
    assert f.severity == "info"
    assert "stays in use" not in f.message
    assert "next reset" in f.message and "new work can start" in f.message
    assert any("nvidia-smi -r" in r and "live VM" in r for r in f.remedies)
    assert "remap pending" in health_cells(topo.gpus[1].health)[-1]


def test_pending_row_remap_on_a_chip_without_page_offlining_stays_a_warning():
    """The guide lists dynamic page offlining (and error containment) for GA100/GH100-class
    chips, not for GA10x or AD10x parts, which also remap rows: there gputopo cannot say the bad
    memory is kept out of use until the reset, so the reset stays the remedy of a warning."""
    topo = scan_text(SICK)
    topo.gpus[1].name = "NVIDIA RTX A6000"
    f = next(f for f in health_findings(topo) if f.kind == "remapped-rows" and f.gpus == [1])
    assert f.severity == "warning" and "next reset" in f.message and "page offlining" in f.message
    assert f.remedies and "nvidia-smi -r" in f.remedies[0]


def test_failed_row_remap_says_what_nvidia_counts_as_failure_and_its_rma_test():
    """NVIDIA's RMA policy (docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/rma-policy-thresholds-
    for-row-remapping.html): the failure flag is set by an uncorrectable error on a bank that
    already has eight rows remapped for uncorrectable errors, on a row already remapped, or after
    512 such remaps; the RMA criterion is met when the field diagnostic validates it."""
    topo = scan_text(SICK)
    f = next(f for f in health_findings(topo) if f.kind == "remapped-rows" and f.gpus == [3])
    assert f.severity == "error"
    assert "already remapped" in f.cause and "512" in f.cause and "eight" in f.cause
    assert any("field diagnostic" in r for r in f.remedies)


def test_ecc_remedy_asks_for_a_reset_only_where_a_repair_waits_for_one():
    """NVIDIA's memory error guide: A100/H100-class GPUs "do not require a GPU reset when memory
    errors occur" (dynamic page offlining keeps the page out of use at once); a row remap still
    waits for the reset. Before them (Volta), after a double-bit error "no further context will be
    created on the GPU until the DBE is mapped out" (docs.nvidia.com/deploy/dynamic-page-retirement/),
    at the next reattachment: the reset is needed."""
    topo = scan_text(SICK)
    ecc = {f.gpus[0]: f for f in health_findings(topo) if f.kind == "ecc"}
    assert ecc[2].severity == "warning" and not any("nvidia-smi -r" in r for r in ecc[2].remedies)
    assert "nvidia-smi -r" in ecc[1].remedies[0]  # GPU 1's row remap waits for the reset
    volta = scan_text('extends = "pcie-4gpu"\nname = "v"\n[[gpu]]\necc_uncorrected = 1\n[[gpu]]\n[[gpu]]\n[[gpu]]')
    f = next(f for f in health_findings(volta) if f.kind == "ecc")
    assert f.severity == "error" and "nvidia-smi -r" in f.remedies[0]
    # An uncorrectable error is detected, not silently wrong: the work that read it is told and
    # stopped (DPR: "a DBE event notification for graceful exit"; A100 guide: error containment).
    assert "may be wrong" not in ecc[1].message and "work that read it was stopped" in ecc[1].message
    # On an A100 (error containment, page offlining) NVIDIA says other work runs on and no reset is
    # needed for the error itself: a warning, not a broken GPU; a Volta's stops new contexts: error.
    assert ecc[1].severity == "warning" and "no reset" in ecc[1].message


def test_bare_hw_slowdown_bit_is_not_called_heat_or_power():
    """nvml.h / DCGM field constants (docs.nvidia.com/datacenter/dcgm/latest/dcgm-api/
    dcgm-api-field-constants.html): HW Slowdown "is an indicator of" heat, an external power brake
    or power draw too high (Fast Trigger), and "may be also reported during PState or clock change".
    Alone, without the thermal or power-brake bit, it is said as what it may be and read again;
    with one of them, the warning stays."""
    topo = scan_text('extends = "dgx-a100"\nname = "s"\n[[gpu]]\nclock_events = ["hw_slowdown"]\n'
                     '[[gpu]]\nclock_events = ["hw_slowdown", "hw_thermal_slowdown"]\n' + "[[gpu]]\n" * 6)
    th = {f.gpus[0]: f for f in health_findings(topo) if f.kind == "thermal"}
    assert th[0].severity == "info" and "PState or clock change" in th[0].message
    assert "heat" not in (th[0].cause or "")
    assert th[1].severity == "warning" and "hw_thermal_slowdown" in th[1].message
    assert health_cells(topo.gpus[0].health)[-1] == "hw_slowdown (read again)"
    assert health_cells(topo.gpus[1].health)[-1] == "slowdown"


def test_lifetime_only_ecc_errors_with_persistence_off_do_not_claim_none_since_load():
    """nvidia-smi --help-query-gpu: volatile counters count "since the last driver load", and only
    with persistence mode enabled does "the NVIDIA driver remain loaded even when no active clients
    ... exist". With it off, the driver may have loaded for this scan: zero volatile errors then
    say nothing about the GPU's recent past, and the message says so."""
    topo = scan_text('extends = "dgx-a100"\nname = "p"\n[[gpu]]\necc_uncorrected_aggregate = 3\n'
                     'persistence = false\n[[gpu]]\necc_uncorrected_aggregate = 3\n' + "[[gpu]]\n" * 6)
    ecc = {f.gpus[0]: f for f in health_findings(topo) if f.kind == "ecc"}
    assert "persistence mode is off" in ecc[0].message and ecc[0].severity == "warning"
    assert "persistence mode is off" not in ecc[1].message and "none since the driver loaded" in ecc[1].message


def test_kernel_log_refused_is_typed_na_and_nvml_values_still_read():
    topo = scan_text(SICK, as_root=False)
    h = topo.gpus[4].health
    assert isinstance(h.xid_events, NotAvailable) and "Operation not permitted" in h.xid_events.reason
    assert isinstance(topo.host.kernel_log, NotAvailable)
    assert [f.kind for f in health_findings(topo) if f.kind == "xid"] == []
    assert h.remapped_rows["pending"] is False and topo.gpus[1].health.remapped_rows["pending"] is True


def test_function_not_supported_and_missing_bindings():
    topo = scan_text('extends = "dgx-a100"\nname = "ok"', unsupported={"nvmlDeviceGetRemappedRows"},
                     missing={"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetEnforcedPowerLimit"})
    h = topo.gpus[0].health
    assert isinstance(h.remapped_rows, NotAvailable) and "not supported" in h.remapped_rows.reason
    assert h.clock_event_reasons == ["gpu_idle"]  # from the older ThrottleReasons name
    assert h.power_limit_w == 400.0  # from nvmlDeviceGetPowerManagementLimit


def test_failed_call_is_failed_not_zero():
    topo = scan_text('extends = "dgx-a100"\nname = "ok"', errors={("nvmlDeviceGetTotalEccErrors", 0): 999})
    h = topo.gpus[0].health
    assert isinstance(h.ecc_errors["volatile"]["uncorrected"], Failed)
    assert topo.gpus[1].health.ecc_errors["volatile"]["uncorrected"] == 0


def test_lost_gpu_health_and_gpu_lost_during_health_read():
    topo = scan_text(SICK, lost={4})
    h = topo.gpus[4].health  # lost to NVML, but the kernel log still says why
    assert h.temperature_c == NotAvailable("GPU lost") and h.remapped_rows == NotAvailable("GPU lost")
    assert [e.xid for e in h.xid_events] == [79, 79, 13]
    assert ("xid", "error", (4,)) in kinds(health_findings(topo))
    assert ("gpu-lost", "error", (4,)) in kinds(topology_findings(topo))
    assert health_cells(h)[-1] == "Xid 79" and health_cells(h)[0] == "n/a"
    assert topo.host.xid_unmatched["0000:78:00"]["attributed_to_gpu"] == 4
    assert "bus 0000:78:00's attributed to GPU 4, whose bus id NVML cannot read" in kernel_log_line(topo)
    assert isinstance(topo.gpus[5].health, GpuHealth)
    topo = scan_text(SICK, errors={("nvmlDeviceGetRemappedRows", 2): 15})
    assert isinstance(topo.gpus[2].health, Failed) and "GPU_IS_LOST" in topo.gpus[2].health.error
    assert isinstance(topo.gpus[1].health, GpuHealth)


def test_health_round_trips_through_json():
    topo = scan_text(SICK)
    back = topology_from_json(json.loads(json.dumps(topology_to_json(topo))))
    for a, b in zip(topo.gpus, back.gpus):
        assert a.health == b.health
    assert kinds(health_findings(back)) == kinds(health_findings(topo))
    assert back.host.kernel_log == "dmesg"


def test_read_health_without_kernel_log_command():
    desc = parse_description(SICK)
    lib = FakeNvml(desc)
    lib.nvmlInit()
    try:
        with FakeHost(desc) as host:
            topo = read_machine(lib, host.root, host.run, machine="m", source="sim", simulated=True)
        read_health(lib, topo, lambda argv: (127, "", f"{argv[0]}: command not found"))
    finally:
        lib.nvmlShutdown()
    assert "dmesg: command not found" in topo.gpus[0].health.xid_events.reason


def test_clock_event_names():
    assert clock_event_names(0x41) == ["gpu_idle", "hw_thermal_slowdown"]
    assert clock_event_names(0x8000) == ["0x8000"]


@pytest.mark.parametrize("text, words", [
    ('extends = "pcie-4gpu"\nname = "v"\n[[gpu]]\nremapped_rows_pending = true\n[[gpu]]\n[[gpu]]\n[[gpu]]',
     "retires pages (NVML answers NOT_SUPPORTED for remapped_rows_pending)"),
    (CONSUMER + "ecc_uncorrected = 1\n", 'ECC counts need ecc = "enabled"'),
    (CONSUMER + 'ecc = "enabled"\n', "has no ECC memory"),
    (CONSUMER + "xid = [\"79\"]\n", "list of Xid codes"),
    (CONSUMER + "clock_events = [\"hot\"]\n", "expected a list of gpu_idle"),
])
def test_description_health_errors(text, words):
    with pytest.raises(InputFileError) as exc:
        parse_description(text)
    assert words in str(exc.value)


def test_scan_cli_shows_health(tmp_path):
    from click.testing import CliRunner

    from gputopo.cli.main import _register, cli

    _register()
    path = tmp_path / "sick.toml"
    path.write_text(SICK)
    res = CliRunner().invoke(cli, ["scan", "--sim", str(path), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["gpus"][4]["health"]["xid_events"][0]["xid"] == 79
    assert doc["host"]["kernel_log"] == "dmesg"
    assert {"xid", "ecc", "remapped-rows", "thermal"} <= {p["kind"] for p in doc["problems"]}
    res = CliRunner().invoke(cli, ["scan", "--sim", str(path), "--no-color"], terminal_width=250)
    assert res.exit_code == 0
    assert "ECC UE 2, remap pending, Xid 94" in res.output
    assert "kernel log: dmesg (5 Xid line(s) for these GPUs)" in res.output


def test_scan_from_smi_text_says_health_is_not_available(tmp_path):
    from click.testing import CliRunner

    from gputopo.cli.main import _register, cli

    _register()
    smi = CliRunner().invoke(cli, ["scan", "--sim", "seed-8gpu", "--format", "smi"]).output
    path = tmp_path / "topo.txt"
    path.write_text(smi)
    res = CliRunner().invoke(cli, ["scan", "--from-smi", str(path), "--no-color"])
    assert res.exit_code == 0
    assert "GPU health: n/a (not read; source" in res.output and "kernel log: n/a" in res.output


def test_live_kernel_log_driver_lines_are_judged_as_import_judges_them():
    """The live log (dmesg) goes through the reader `import kernel-log` uses: its NVIDIA driver
    lines that are no Xid become the same findings, on the GPU they name (before, only Xids were read)."""
    log = ("[   12.5] NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x62:0x40:1867)\n"
           "[   13.0] nvidia_peermem: Unknown symbol ib_register_peer_memory_client (err -2)\n"
           "[   14.0] NVRM: Xid (PCI:0000:1a:00): 13, Graphics Exception\n")
    desc = parse_description('name = "two"\n[pairs]\ndefault = "numa"\n[defaults]\nname = "NVIDIA GeForce RTX 3090"\n'
                             '[[gpu]]\nbus_id = "0000:1a:00.0"\n[[gpu]]\nbus_id = "0000:3b:00.0"\n')
    lib = FakeNvml(desc)
    lib.nvmlInit()
    try:
        with FakeHost(desc) as host:
            run = lambda argv: (0, log, "") if argv[0] == "dmesg" else host.run(argv)  # noqa: E731
            topo = read_machine(lib, host.root, run, machine=desc.name, source="sim", simulated=True)
    finally:
        lib.nvmlShutdown()
    assert topo.host.kernel_log == "dmesg" and topo.host.kernel_log_facts["file"] == "dmesg"
    assert [e.xid for e in topo.gpus[0].health.xid_events] == [13]
    got = [(f.kind, f.severity, f.gpus) for f in topology_findings(topo) if f.kind in ("driver-error", "gpudirect-rdma")]
    assert sorted(got, key=str) == [("driver-error", "error", [1]), ("gpudirect-rdma", "warning", None)]
