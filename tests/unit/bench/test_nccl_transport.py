"""What NCCL actually did per pair: the NCCL INFO log parser on real log excerpts (tests/data/
nccl_debug, sources in each file), the cuda worker's NCCL log plumbing (without a GPU), the
sim fabric's modeled route, `gputopo import nccl-debug` and the report's sentence."""

import json
from pathlib import Path

import pytest

from conftest_report import seed_topology, write_run
from gputopo.bench.nccl_transport import (NCCL_LOG_SUFFIX, NcclLogTail, modeled_transport, nccl_debug_env,
                                          step_transport)
from gputopo.model.bus_id import from_nccl
from gputopo.probe.nccl_log import parse_nccl_debug, parse_nccl_debug_files
from helpers.cli import gputopo_here
from helpers.paths import DATA as TEST_DATA

DATA = TEST_DATA / "nccl_debug"


def pairs_of(log):
    return {(a.label(), b.label()): sorted({c.via for c in lines}) for (a, b), lines in log.pairs().items()}


# ----------------------------------------------------------------------------- parser


def test_old_nccl_bus_ids_in_brackets():
    log = parse_nccl_debug_files([DATA / "p2p_ipc_read_busid_nccl743.log"])
    assert from_nccl("4a000").lspci == "0000:4a:00.0" and from_nccl("3") is None
    h = "task272117-mq5ss/"
    assert pairs_of(log) == {
        (h + "0000:4a:00.0", h + "0000:50:00.0"): ["P2P/IPC/read"],
        (h + "0000:13:00.0", h + "0000:4a:00.0"): ["P2P/IPC/read"],
        (h + "0000:0e:00.0", h + "0000:13:00.0"): ["P2P/IPC/read"],
    }
    assert len(log.channels) == 12 and log.lines == 16  # "Connected all rings" read, not a channel


def test_shm_pairs_by_nvml_index():
    log = parse_nccl_debug_files([DATA / "shm_8gpu_nccl1817.log"])
    got = {tuple(sorted((a.nvml_dev, b.nvml_dev))) for a, b in log.pairs()}
    assert got == {(2, 7), (3, 7), (0, 4), (1, 5), (2, 6)}
    assert {c.kind for c in log.channels} == {"SHM"} and len(log.channels) == 11


def test_net_and_p2p_and_direct_pointer():
    log = parse_nccl_debug_files([DATA / "net_socket_and_p2p_nccl952.log", DATA / "direct_pointer_tinygrad22.log"])
    kinds = {c.via: c.kind for c in log.channels}
    assert kinds == {"P2P/IPC/read": "P2P", "NET/Socket/3": "NET", "P2P/direct pointer": "P2P"}
    net = [c for c in log.channels if c.kind == "NET"]
    assert {c.direction for c in net} == {"send"} and net[0].dst.host == "?"  # no Init line names rank 6


def test_init_lines_give_bus_ids_and_ranks():
    log = parse_nccl_debug_files([DATA / "init_lines_nccl1412.log"])
    assert log.ranks[("swat1-04", 0)]["bus_id"] == "0000:07:00.0"  # "busId 7000"
    assert log.ranks[("swat1-04", 6)]["comm_id"] == "0x49bbd7790311d5eb"
    assert log.buses[("swat1-04", 1)] == "0000:0b:00.0" and not log.channels


def test_nvml_index_tokens_get_bus_ids_from_init_lines_of_every_comm():
    log = parse_nccl_debug_files([DATA / "ddp_shm_and_cumem_seed.log"])
    assert pairs_of(log) == {
        ("gpu-node-07/0000:90:00.0", "gpu-node-07/0000:b7:00.0"): ["SHM/direct/direct"],
        ("gpu-node-07/0000:b7:00.0", "gpu-node-07/0000:bd:00.0"): ["P2P/CUMEM/read"],
    }
    assert log.settings == {"NCCL_P2P_LEVEL": "PXB"} and log.versions == ["2.21.5+cuda12.4"]


def test_lines_with_prefixes_and_noise():
    text = ("(WorkerDict pid=7) node1:7:9 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[1] via P2P/IPC\n"
            "random text via SHM\nnode1:7:9 [0] NCCL WARN Cuda failure 'invalid argument'\n")
    log = parse_nccl_debug(text)
    assert [c.via for c in log.channels] == ["P2P/IPC"] and log.lines == 2  # the INFO and the WARN
    assert log.processes[("node1", 7)]["warnings"][0]["message"] == "Cuda failure 'invalid argument'"


# ----------------------------------------------------------------------------- cuda worker plumbing


def test_nccl_debug_env_keeps_what_the_user_set():
    assert nccl_debug_env({}, "/r/w0.log") == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH,ENV",
                                               "NCCL_DEBUG_FILE": "/r/w0.log" + NCCL_LOG_SUFFIX}
    env = {"NCCL_DEBUG": "TRACE", "NCCL_DEBUG_SUBSYS": "NET", "NCCL_DEBUG_FILE": "/tmp/mine.%h.%p"}
    # INIT for the channels, ENV for NCCL's "X set by environment to Y" lines
    assert nccl_debug_env(env, "/r/w0.log") == {"NCCL_DEBUG_SUBSYS": "NET,INIT,ENV"}
    assert "NCCL_DEBUG_SUBSYS" not in nccl_debug_env({**env, "NCCL_DEBUG_SUBSYS": "env,INIT"}, "w")
    assert nccl_debug_env({"NCCL_DEBUG": "WARN", "NCCL_DEBUG_SUBSYS": "ALL"}, "w")["NCCL_DEBUG"] == "INFO"


def test_step_transport_reads_only_what_the_step_appended(tmp_path):
    worker_log = str(tmp_path / "w0.log")
    env = dict(nccl_debug_env({}, worker_log))
    tail = NcclLogTail.for_worker(env, worker_log)
    nccl_file = Path(env["NCCL_DEBUG_FILE"])
    nccl_file.write_text("h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n")  # an earlier step
    tail.mark()
    assert "not_available" in step_transport(tail, [5, 6])
    with open(nccl_file, "a") as f:
        f.write("h:1:2 [0] NCCL INFO Channel 00 : 0[5] -> 1[6] via SHM/direct/direct\n"
                "h:1:2 [0] NCCL INFO Channel 01 : 0[5] -> 1[6] via SHM/direct/direct\n"
                "h:1:2 [0] NCCL WARN NET/Socket : message truncated\n")
    got = step_transport(tail, [5, 6])
    assert got["kind"] == "SHM" and got["channels"] == 2 and got["gpus"] == [5, 6]
    assert got["source"] == "nccl-debug" and got["log"] == str(nccl_file)
    assert "NCCL WARN NET/Socket" in tail.warnings()
    theirs = NcclLogTail.for_worker({"NCCL_DEBUG_FILE": "/tmp/x"}, worker_log)
    assert "set by the user" in step_transport(theirs, [0, 1])["not_available"]


def test_modeled_transport_is_labelled():
    t = modeled_transport("host", [0, 4])
    assert t["kind"] == "SHM" and t["source"] == "modeled" and "modeled" in t["via"][0]


# ----------------------------------------------------------------------------- import and report


def test_import_into_a_run_says_why_ddp_survived(tmp_path):
    topo = seed_topology({"nan-dp"})
    topo.host.hostname = "gpu-node-07"  # the host the log's job ran on (another host is refused)
    run = write_run(tmp_path / "run", faults=["nan-dp"], topo=topo)
    rc, out, err = gputopo_here("import", "nccl-debug", DATA / "ddp_shm_and_cumem_seed.log", "--into", run)
    assert rc == 0, err
    assert "SHM/direct/direct" in out and "P2P/CUMEM/read" in out
    doc = json.loads((run / "imported.json").read_text())["imports"][0]
    by_gpus = {tuple(p["gpus"]): p for p in doc["pairs"]}
    assert by_gpus[(5, 6)]["kind"] == "SHM" and by_gpus[(6, 7)]["kind"] == "P2P"
    assert by_gpus[(5, 6)]["matched_by"] == ["bus id"]
    report = (run / "report.md").read_text()
    assert ("DDP survived because NCCL used SHM (host memory) on this pair, not the peer-to-peer path "
            "nn.DataParallel copies over (the imported NCCL_DEBUG=INFO log of your job)") in report
    assert "| 5,6 | NODE |" in report and "SHM/direct/direct (imported)" in report
    summary = json.loads((run / "summary.json").read_text())
    pair = next(p for p in summary["pairs"] if p["gpus"] == [5, 6])
    assert pair["nccl_transport"]["kind"] == "SHM"
    # a second import into the same run is refused; nothing is overwritten
    rc, out, err = gputopo_here("import", "nccl-debug", DATA / "ddp_shm_and_cumem_seed.log", "--into", run)
    assert rc == 2 and "never overwritten" in err and "Traceback" not in err


def test_no_sentence_when_nccl_used_p2p_on_the_failing_pair(tmp_path):
    topo = seed_topology({"nan-dp"})
    topo.host.hostname = "gpu-node-07"
    run = write_run(tmp_path / "run", faults=["nan-dp"], topo=topo)
    log = tmp_path / "p2p.log"
    log.write_text("gpu-node-07:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 nvmlDev 5 busId 90000 commId 0x1 - Init START\n"
                   "gpu-node-07:2:2 [1] NCCL INFO comm 0x2 rank 1 nranks 2 cudaDev 1 nvmlDev 6 busId b7000 commId 0x1 - Init START\n"
                   "gpu-node-07:1:1 [0] NCCL INFO Channel 00/0 : 0[5] -> 1[6] via P2P/IPC\n")
    rc, _, err = gputopo_here("import", "nccl-debug", log, "--into", run, "--json")
    assert rc == 0, err
    assert "DDP survived" not in (run / "report.md").read_text()


def test_import_errors(tmp_path):
    plain = tmp_path / "plain.log"
    plain.write_text("hello\n")
    rc, _, err = gputopo_here("import", "nccl-debug", plain)
    assert rc == 2 and "no 'NCCL INFO' or 'NCCL WARN' lines" in err
    rc, _, err = gputopo_here("import", "nccl-debug", tmp_path / "missing.log")
    assert rc == 2 and "gputopo: error:" in err
    run = write_run(tmp_path / "run")
    rc, _, err = gputopo_here("import", "nccl-debug", DATA / "p2p_ipc_read_busid_nccl743.log", "--into", run)
    assert rc == 2 and "host(s) task272117-mq5ss are not host seed of run" in err
    assert len(err.strip().splitlines()) == 1 and not (run / "imported.json").exists()
    topo = seed_topology(set())
    topo.host.hostname = "task272117-mq5ss"  # the right host, but none of its GPUs' bus ids
    run = write_run(tmp_path / "run2", topo=topo)
    rc, _, err = gputopo_here("import", "nccl-debug", DATA / "p2p_ipc_read_busid_nccl743.log", "--into", run)
    assert rc == 2 and "none of the 3 GPU pair(s)" in err and not (run / "imported.json").exists()


def test_import_without_run_prints_pairs_as_json():
    rc, out, err = gputopo_here("import", "nccl-debug", DATA / "shm_8gpu_nccl1817.log", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert len(doc["pairs"]) == 5 and {p["kind"] for p in doc["pairs"]} == {"SHM"}
    assert all("gpus" not in p for p in doc["pairs"])


@pytest.mark.slow
def test_sim_bench_records_the_modeled_route_per_pair(tmp_path):
    from gputopo.bench.api import BenchOptions, run_bench
    from gputopo.sim.description import load_description
    from gputopo.sim.scan import scan_description

    desc = load_description("seed-8gpu")
    topo = scan_description(desc)
    opts = BenchOptions(out_dir=str(tmp_path / "run"), preset="quick", progress=False, pairs=[(0, 1), (0, 4)],
                        tests=("collectives",))
    res = run_bench(topo, opts, "sim", desc)
    got = {m.gpus: m.extra["nccl_transport"]["kind"] for m in res.measurements if m.test.startswith("collective.")}
    assert got == {(0, 1): "P2P", (0, 4): "SHM"}  # NV4 peer-to-peer; SYS beyond NCCL_P2P_LEVEL=PXB
