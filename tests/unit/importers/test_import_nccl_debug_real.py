"""`import nccl-debug` on real multi-node NCCL_DEBUG=INFO logs (tests/fixtures/nccl-debug, sources in
tests/fixtures/README.md): each ``[receive]`` line's host is the receiver's, peers' hosts come from
the rank -> host map, NET transport names are kept whole, NCCL <= 2.5 "Ring" lines are read,
setting values lose NCCL's trailing period, one host name on two machines is kept apart, and
``--into`` refuses a log of another host."""

from __future__ import annotations


import pytest
from conftest_report import seed_topology, write_run

from gputopo.errors import UsageError
from gputopo.importers.run import run_import
from gputopo.probe.nccl_log import parse_nccl_debug, parse_nccl_debug_files
from helpers.paths import FIXTURES

FIX = FIXTURES


def pairs(log):
    return {(a.label(), b.label()): (sorted({c.via for c in lines}), len(lines)) for (a, b), lines in log.pairs().items()}


def test_nccl429_receive_line_host_is_the_receivers():
    log = parse_nccl_debug_files([FIX / "nccl-debug" / "nccl-429_2node_16gpu_p2p-direct-pointer_ib-gdrdma_excerpt.log"])
    got = pairs(log)
    # "machine-1 ... 7[b2000] -> 14[b1000] [receive]" is printed by rank 14 on machine-1; rank 7 is on
    # machine-2 (its own [send] line): one pair, both lines, no GPU paired with itself.
    assert got[("machine-1/0000:b1:00.0", "machine-2/0000:b2:00.0")] == (["NET/IB/0/GDRDMA"], 2)
    assert {c.direction for c in log.pairs()[next(k for k in log.pairs() if k[0].label() == "machine-1/0000:b1:00.0"
                                                  and k[1].label() == "machine-2/0000:b2:00.0")]} == {"send", "receive"}
    assert got[("machine-1/0000:1b:00.0", "machine-1/0000:3e:00.0")] == (["P2P/direct pointer"], 3)
    assert got[("machine-2/0000:1a:00.0", "machine-2/0000:1b:00.0")] == (["P2P/direct pointer"], 3)
    # 15[b2000] -> 6[b1000] [send] from machine-1: rank 6 never prints, so its host is not guessed
    assert got[("machine-1/0000:b2:00.0", "rank 6 (0000:b1:00.0), on a host not in this log")] == (["NET/IB/0/GDRDMA"], 1)
    assert len(got) == 6 and all(a != b for a, b in got)


def test_nccl398_ring_format_and_bare_net_ranks():
    log = parse_nccl_debug_files([FIX / "nccl-debug" / "nccl-398_2node_aws_ring-format_p2p-ipc_net-socket_excerpt.log"])
    assert len(log.channels) == 17
    got = pairs(log)
    assert got[("ip-172-31-13-129/nvml 5", "ip-172-31-13-129/nvml 7")] == (["P2P/IPC"], 2)
    assert got[("ip-172-31-0-112/nvml 2", "ip-172-31-0-112/nvml 3")] == (["P2P/IPC"], 1)
    # "15 -> 0 [send] via NET/Socket/0" by rank 15 ([7] on ip-172-31-13-129); rank 0 never prints
    # the printer is known only by its [cudaDev] (a CUDA number, not an NVML index)
    assert got[("ip-172-31-13-129/cuda 7", "rank 0, on a host not in this log")] == (["NET/Socket/0"], 1)
    assert got[("ip-172-31-0-112/cuda 7", "rank 8, on a host not in this log")] == (["NET/Socket/0"], 1)


def test_aws_efa_tag_output_net_plugin_name_whole():
    log = parse_nccl_debug_files([FIX / "nccl-tests" / "aws-efa-eks_p4d-2node-16gpu_all_reduce_tagoutput.txt"])
    net = {c.via for c in log.channels if c.kind == "NET"}
    assert net == {f"NET/AWS Libfabric/{k}/GDRDMA" for k in range(4)}
    assert log.versions == ["2.9.9+cuda11.2"]
    got = pairs(log)
    w0, w1 = "nccl-tests-efa-16-worker-0", "nccl-tests-efa-16-worker-1"
    assert got[(f"{w0}/0000:10:1d.0", f"{w1}/0000:10:1c.0")] == (["NET/AWS Libfabric/1/GDRDMA"], 4)
    assert got[(f"{w0}/0000:10:1c.0", f"{w0}/0000:10:1d.0")] == (["P2P/IPC/read"], 16)
    assert all(a != b for a, b in got) and not any(h.startswith("?") for k in got for h in k)


def test_p4d_one_pod_settings_without_period_and_cumem():
    log = parse_nccl_debug_files([FIX / "nccl-debug" / "training-on-eks_p4d-24xlarge-1pod-4proc.log"])
    assert log.settings["NCCL_BUFFSIZE"] == "8388608" and log.settings["NCCL_PROTO"] == "simple"
    assert log.settings["NCCL_TOPO_FILE"] == ""
    got = pairs(log)
    h = "llama-3-8b-node-0-0"
    assert got == {(f"{h}/0000:10:1c.0", f"{h}/0000:20:1d.0"): (["P2P/CUMEM/read"], 48),
                   (f"{h}/0000:20:1c.0", f"{h}/0000:20:1d.0"): (["P2P/CUMEM/read"], 48),
                   (f"{h}/0000:10:1d.0", f"{h}/0000:20:1c.0"): (["P2P/CUMEM/read"], 48),
                   (f"{h}/0000:10:1c.0", f"{h}/0000:10:1d.0"): (["P2P/CUMEM/read"], 48)}


def test_megatron_p4d_bus_ids_in_brackets():
    got = pairs(parse_nccl_debug_files([FIX / "nccl-debug" / "megatron-516_p4d_8gpu_p2p-ipc-read_busid_excerpt.log"]))
    h = "09677202c889"
    assert got[(f"{h}/0000:20:1c.0", f"{h}/0000:20:1d.0")] == (["P2P/IPC/read"], 3)
    assert got[(f"{h}/0000:10:1c.0", f"{h}/0000:10:1d.0")] == (["P2P/IPC/read"], 2)  # rank 0 never prints
    assert len(got) == 6


def test_h800_ranks_on_other_devices_shm():
    got = pairs(parse_nccl_debug_files([FIX / "nccl-debug" / "nccl-1609_h800_4rank_shm_rank-ne-dev_excerpt.log"]))
    assert got == {("tj5-sc-ai-h800r-dev01/nvml 6", "tj5-sc-ai-h800r-dev01/nvml 7"): (["SHM/direct/direct"], 12)}


def test_one_host_name_on_two_machines_kept_apart():
    lines = []
    for rank in range(4):  # two containers both named "worker", 2 GPUs each, same pids and bus ids
        _node, dev = divmod(rank, 2)
        lines.append(f"worker:{10 + dev}:{10 + dev} [{dev}] NCCL INFO comm 0x1 rank {rank} nranks 4 cudaDev {dev} "
                     f"nvmlDev {dev} busId {'1b000' if dev == 0 else '3d000'} commId 0x9 - Init COMPLETE")
    lines += ["worker:10:20 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
              "worker:11:21 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/0",
              "worker:10:22 [0] NCCL INFO Channel 00/0 : 1[1] -> 2[0] [receive] via NET/IB/0",
              "worker:10:23 [0] NCCL INFO Channel 00/0 : 2[0] -> 3[1] via P2P/IPC"]
    got = pairs(parse_nccl_debug("\n".join(lines)))
    assert got == {("worker#1/0000:1b:00.0", "worker#1/0000:3d:00.0"): (["P2P/IPC"], 1),
                   ("worker#1/0000:3d:00.0", "worker#2/0000:1b:00.0"): (["NET/IB/0"], 2),
                   ("worker#2/0000:1b:00.0", "worker#2/0000:3d:00.0"): (["P2P/IPC"], 1)}


def test_launcher_prefixes_stripped():
    text = ("[1,3]<stdout>:n1:5:6 [3] NCCL INFO Channel 00/0 : 3[3] -> 2[2] via P2P/IPC\n"
            "2: n1:4:6 [2] NCCL INFO Channel 01/0 : 2[2] -> 3[3] via P2P/IPC\n"
            "\x1b[32m2024-05-01 12:00:00,123 - INFO - n1:4:6 [2] NCCL INFO NCCL_IB_HCA set by environment to mlx5_0.\x1b[0m\n")
    log = parse_nccl_debug(text)
    assert pairs(log) == {("n1/nvml 2", "n1/nvml 3"): (["P2P/IPC"], 2)} and log.settings == {"NCCL_IB_HCA": "mlx5_0"}


def test_into_refuses_another_hosts_log(tmp_path):
    run = write_run(tmp_path / "run")  # host "seed"
    with pytest.raises(UsageError) as e:
        run_import("nccl-debug", [FIX / "nccl-debug" / "nccl-429_2node_16gpu_p2p-direct-pointer_ib-gdrdma_excerpt.log"],
                   into=run, render=False)
    assert "machine-1, machine-2 are not host seed" in str(e.value) and "\n" not in str(e.value)


def test_into_matches_only_the_runs_host(tmp_path):
    topo = seed_topology(set())
    topo.host.hostname = "machine-2"
    topo.gpus[0].pci_bus_id = "00000000:1A:00.0"
    topo.gpus[1].pci_bus_id = "00000000:1B:00.0"
    run = write_run(tmp_path / "run", topo=topo)
    doc = run_import("nccl-debug", [FIX / "nccl-debug" / "nccl-429_2node_16gpu_p2p-direct-pointer_ib-gdrdma_excerpt.log"],
                     into=run, render=False).imported.imports[0]
    matched = [p for p in doc["pairs"] if "gpus" in p]
    assert [(p["endpoints"], p["gpus"]) for p in matched] == [
        (["machine-2/0000:1a:00.0", "machine-2/0000:1b:00.0"], [0, 1])]
    assert doc["hosts"] == ["machine-1", "machine-2"]


def test_cut_channel_line_is_said_with_its_line(tmp_path, capsys):
    from gputopo.cli.main import main

    f = tmp_path / "job.log"
    f.write_text("n1:5:6 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC\n"
                 "n1:5:6 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[")
    log = parse_nccl_debug_files([f])
    assert len(log.channels) == 1
    assert log.problems == [f"{f}:2: a channel line that could not be read whole (cut or garbled): "
                            "'Channel 01/0 : 0[0] -> 1[': not counted"]
    with pytest.raises(SystemExit) as e:
        main(["import", "nccl-debug", str(f)])
    assert e.value.code == 0 and f"Not read: {f}:2: a channel line" in capsys.readouterr().out.replace("\n", "")


def test_sub_communicator_ranks_are_not_world_ranks():
    """A data-parallel communicator of 2 ranks across nodes: its rank 1 is world rank 2 (node b),
    not world rank 1 (node a); the peer is looked up in the line's own communicator (the
    printing process's last Init START)."""
    init = "{h}:{pid}:{pid} [{d}] NCCL INFO comm 0x{c} rank {r} nranks {n} cudaDev {d} nvmlDev {d} busId {bus} commId {cid} - Init START"
    lines = [init.format(h="a", pid=1, d=0, c=1, r=0, n=4, bus="1b000", cid="0xw"),
             init.format(h="a", pid=2, d=1, c=2, r=1, n=4, bus="3d000", cid="0xw"),
             init.format(h="b", pid=3, d=0, c=3, r=2, n=4, bus="1b000", cid="0xw"),
             init.format(h="b", pid=4, d=1, c=4, r=3, n=4, bus="3d000", cid="0xw"),
             "a:1:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
             init.format(h="a", pid=1, d=0, c=5, r=0, n=2, bus="1b000", cid="0xdp"),
             init.format(h="b", pid=3, d=0, c=6, r=1, n=2, bus="1b000", cid="0xdp"),
             "a:1:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0",
             "b:3:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [receive] via NET/IB/0"]
    got = pairs(parse_nccl_debug("\n".join(lines)))
    assert got == {("a/0000:1b:00.0", "a/0000:3d:00.0"): (["P2P/IPC"], 1),
                   ("a/0000:1b:00.0", "b/0000:1b:00.0"): (["NET/IB/0"], 2)}
