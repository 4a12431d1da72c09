"""`import nccl-debug` on a posted NCCL_DEBUG excerpt whose error came after init (NVIDIA/nccl
issue 1405, sources in tests/fixtures/README.md): ``NET/IB : Got completion ... status=12`` with
its error path ``proxy.cc:878 -> 6 [Progress Thread]``. It was called "NCCL init failed"; NCCL's
progress thread only runs once the communicator moves data, so it is ``nccl-comm-failed``, with the
completion status in words. An init failure (its path in the proxy's connection service, issue
242 of nccl-tests) stays ``nccl-init-failed``."""

from __future__ import annotations

import json

from helpers.cli import gputopo_here
from helpers.paths import FIXTURES

DEBUG = FIXTURES / "nccl-debug"
COMPLETION_12 = DEBUG / "nccl-1405_k8s-ddp_net-ib-completion-status-12-vendor-err-129_progress-thread_excerpt.log"
QP_TIMEOUT = DEBUG / "nccl-tests-242_2node-a100_roce-gid3_ibv-modify-qp-timeout_proxy-connect-failed_excerpt.log"


def _findings(path):
    ran = gputopo_here("import", "nccl-debug", str(path), "--json")
    doc = json.loads(ran.stdout)
    return doc["verdict"], doc["findings"]


def test_an_error_in_nccls_progress_thread_is_a_failure_after_init_not_an_init_failure():
    verdict, findings = _findings(COMPLETION_12)
    assert verdict == "broken"
    (f,) = findings
    assert f["kind"] == "nccl-comm-failed" and f["severity"] == "error"
    assert f["message"].startswith("NCCL failed after init, while moving data") and "init failed" not in f["message"]
    assert "status=12" in f["message"] and "IBV_WC_RETRY_EXC_ERR" in f["cause"]
    assert any("ib_write_bw" in r for r in f["remedies"])


def test_an_error_in_the_proxys_connection_service_stays_an_init_failure():
    verdict, findings = _findings(QP_TIMEOUT)
    assert verdict == "broken"
    assert [f["kind"] for f in findings] == ["nccl-init-failed"]
    assert "ibv_modify_qp failed with error Connection timed out" in findings[0]["message"]


PEER_217 = DEBUG / "ray-lightning-24_ray-pid-prefix_nccl278_p2p-ipc-217-peer-access-not-supported_excerpt.log"


def test_a_p2p_connection_cuda_refused_says_why_and_what_to_set():
    # ray-project/ray_lightning issue 24: NCCL 2.7.8 behind Ray's "(pid=...)" prefixes picks
    # P2P/IPC between 0[2d000] and 1[2e000]; CUDA answers 217, peer access not supported
    verdict, findings = _findings(PEER_217)
    assert verdict == "broken"
    (f,) = findings
    assert f["kind"] == "nccl-init-failed" and "217 peer access is not supported" in f["message"]
    assert "cudaErrorPeerAccessUnsupported" in f["cause"]
    assert f["remedies"][0].startswith("set NCCL_P2P_DISABLE=1")
