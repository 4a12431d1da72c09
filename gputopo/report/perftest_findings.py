"""Findings of an imported perftest run (imported.json ``tool: "perftest"``, written by `gputopo
import perftest`: importers/perftest_import.py).

- A run that failed is ``rdma-test-failed`` (error), saying what failed and what it usually means:
  memory registration (``Couldn't allocate MR`` / ``Failed to create MR``: with ``--use_cuda``,
  GPU memory the NIC cannot register, i.e. GPUDirect RDMA not set up (no ``nvidia_peermem``) or
  ``--use_cuda_dmabuf`` needed; from host memory, the locked-memory limit, e.g. a pod's
  memlock), a completion error (its work-completion status: transport retry exceeded is the
  peer or the path gone), the peer not reached (``Couldn't read remote address``, ``Couldn't
  connect to``), no such device, or QP/CQ setup.
- The bandwidth of the largest message size printed (perftest's average, not its peak) is judged
  against the port's rate where the import knew it (``--ibstat`` / ``--topo``): below
  ``RDMA_SLOW_RATIO`` of it (twice the rate for a bidirectional test, which prints the sum of both
  directions) is ``rdma-slow`` (warning); otherwise ``rdma-bandwidth`` (info) states the figure
  and its share of the rate. Without the rate, or below ``RDMA_MIN_JUDGED_BYTES`` (small messages
  measure the message rate, not the link), ``rdma-bandwidth`` (info) states the figure and says
  "not judged" and why.

The port is the one perftest's output shows (its error about the port, the command line's ``-i``,
perftest's default 1 where the command line has none); where the output shows none and the device
has several ports, port 1 is assumed and the finding says "port not printed: assumed 1".

An ``--out_json`` report (imported.json ``source_format: "out_json"``) is judged the same way,
with two facts of that file: its unit is derived from its own figures (perftest_json.py), and a
bidirectional run's figure is the sum of both directions, or, with ``--report-both``, the remote
side's one direction (perftest rewrites the file at each report; the file does not say which).
Such a figure is judged only where both readings agree: at or above 80 % of twice the rate
(fine either way), or below 80 % of the rate itself (slow either way); between, it is stated,
not judged.

Why 0.8: a healthy RC write/read/send at 64 KiB and up reaches 90-98 % of the port's data rate
(the headers of a 4096 B MTU packet cost ~1.5 %; posted EDR runs read 11,129 MiB/s = 93.4 Gb/s on
100 Gb/s); below 80 % something is in the way (PCIe of the NIC or GPU, a far GPU with --use_cuda,
a congested or mis-negotiated link).
"""

from __future__ import annotations

from typing import Any

from gputopo.model import Finding
from gputopo.model.flagged_lines import TOOL_LINES, quoted
from gputopo.model.ibv_wc_status import WC_STATUS

#: The average of a run below this share of its port's rate is rdma-slow.
RDMA_SLOW_RATIO = 0.8
#: Rows of smaller messages are not judged against the port's rate (perftest's default BW size is
#: 65536 B, DEF_SIZE_BW in perftest_parameters.h).
RDMA_MIN_JUDGED_BYTES = 65536

#: What to do for a completion error, by its status (the advice follows the status, not cables by
#: default): statuses the peer's side refused mostly mean the two sides ran different tests or options.
_SAME_COMMAND = ("run the same test with the same options on both sides (the same ib_*_bw, -s, -R / rdma_cm, "
                 "--use_cuda, -q): a server and client started with different tests or options are the usual "
                 "cause of a remote access or invalid request error")
_COMPLETION_REMEDIES = {
    9: [_SAME_COMMAND],
    10: [_SAME_COMMAND, "with --use_cuda on the peer, check that its GPU memory can be registered (GPUDirect RDMA: "
                        "nvidia_peermem or dma-buf)"],
    11: [_SAME_COMMAND, "check `dmesg` on the peer for mlx5 errors"],
    4: ["with --use_cuda, check GPUDirect RDMA on this node (nvidia_peermem loaded, or --use_cuda_dmabuf); "
        "run the same test without --use_cuda: if host memory works, the NIC and the path are fine"],
    8: ["check the buffer's memory registration on this side (the locked-memory limit, --use_cuda's GPUDirect RDMA)"],
    5: ["read the first completion error before it (every later request is flushed after it): it is the cause"],
    12: ["check both ports' state (`ibstat`, `gputopo import ibstat`) and `dmesg` on both nodes",
         "check that the peer process was still running; on RoCE, that the network is lossless (PFC/ECN)",
         "if it repeats with both sides up, swap the cable or the peer to localise it"],
    13: ["check that the peer process was still running and keeps receives posted (send tests); run it again"],
    19: ["check `dmesg` on this node for mlx5 / adapter errors; the adapter may need a reset"],
    20: ["check both ports' state and that the peer process was still running; run it again"],
}


def completion_remedies(status: int | None) -> list[str]:
    """What to do for a completion error of ``status`` (ibv_wc_status), or for one whose status was not printed."""
    if status is not None and status in _COMPLETION_REMEDIES:
        return list(_COMPLETION_REMEDIES[status])
    return ["check both ports' state (`ibstat`, `gputopo import ibstat`) and `dmesg` on both nodes",
            "run the same test with the same options on both sides, and again: the status tells which side failed"]


_ERRNO = {12: "ENOMEM (out of locked memory)", 14: "EFAULT (bad address)", 13: "EACCES (permission denied)",
          22: "EINVAL (invalid argument)", 95: "EOPNOTSUPP (not supported)", 1: "EPERM (not permitted)"}


def _gbps(v: float) -> str:
    return f"{v:.1f} Gb/s" if v >= 10 else f"{v:.3g} Gb/s"


def _printed(row: dict) -> str:
    return f"{row['bw_average']} {row['unit']}"  # as perftest printed it (%.2lf, or %.6lf below 0.1 Gb/s)


def _where(doc: dict) -> str:
    """``ib_write_bw on mlx5_0 with --use_cuda (GPU memory)``: the head of each message (the report's story
    takes the text before the first ': ')."""
    dev = doc.get("device")
    return (f"{doc.get('test', 'perftest')}" + (f" on {dev}" if dev else "")
            + (" with --use_cuda (GPU memory)" if doc.get("use_cuda") else
               " with --use_rocm (GPU memory)" if doc.get("use_rocm") else "")
            + (f" (run {doc['run']} of {doc['runs_in_file']} in its file)" if doc.get("runs_in_file") else ""))


def _file_line(doc: dict, line: Any) -> str:
    return f"{doc.get('file', '?')}" + (f" line {line}" if line else "")


def _mr_failure(doc: dict, f: dict) -> tuple[str, str, list[str]]:
    errno = f.get("errno")
    err = f" (error={errno}, {_ERRNO.get(errno, 'an errno')})" if errno is not None else ""
    text = " ".join(f.get("lines") or [])
    if doc.get("use_cuda"):
        gpu = f" ({doc['gpu_name']})" if doc.get("gpu_name") else ""
        what = f"could not register its GPU buffer{gpu} with the NIC{err}"
        cause = ("the NIC could not register GPU memory; which of these is not known from this output: "
                 "GPUDirect RDMA not set up on the node (the nvidia_peermem module, or the older nv_peer_mem, not "
                 "loaded, and no dma-buf), or a GPU, driver or NIC that cannot expose GPU memory that way (older "
                 "GPUs such as the Tesla K80 often cannot); a scan of the node tells the first")
        if doc.get("cuda_dmabuf") or "DMA-BUF" in text:
            cause = ("dma-buf registration of GPU memory failed: it needs a kernel >= 5.12, the open GPU kernel "
                     "module and an RDMA stack that supports dma-buf (perftest printed that it does not)"
                     if "does not support DMA-BUF" in text else
                     "dma-buf registration of GPU memory failed: check the kernel (>= 5.12), the open GPU kernel "
                     "module and the RDMA stack's dma-buf support")
        remedies = ["`gputopo scan` of the node says whether GPUDirect RDMA is available there (peer-memory "
                    "module, dma-buf)",
                    "where it says no peer-memory module is loaded: `modprobe nvidia_peermem` and run again, or run "
                    "with --use_cuda_dmabuf (kernel >= 5.12, open GPU kernel module)",
                    "run the same test without --use_cuda: if host memory works, the NIC and the path are fine"]
        if errno == 12:
            cause = "out of locked memory while registering the buffer: the memlock limit (a pod's or a user's)"
            remedies = ["raise the memlock limit (`ulimit -l unlimited`; in Kubernetes the container runtime's "
                        "LimitMEMLOCK) and run again", *remedies[:1]]
        return what, cause, remedies
    what = f"could not register its host buffer with the NIC{err}"
    cause = ("registering host memory for RDMA failed; why is not known from this output (perftest printed no "
             "errno): most often the locked-memory limit (`ulimit -l`; in a container or pod the runtime's memlock "
             "limit) is below what perftest pins, which `ulimit -l` where it ran tells")
    remedies = ["raise the memlock limit (`ulimit -l unlimited`, /etc/security/limits.conf; for a pod, the "
                "container runtime's LimitMEMLOCK) and run again",
                "check `dmesg` for mlx5 / ib_core errors"]
    return what, cause, remedies


def failure_finding(doc: dict, f: dict) -> Finding:
    kind, where = f.get("kind"), _where(doc)
    evidence: dict[str, Any] = {"tool": "perftest", "file": doc.get("path") or doc.get("file"),
                                "test": doc.get("test"), "device": doc.get("device"), "failure": f.get("kind"),
                                "line": f.get("line"), "lines": f.get("lines") or [], "use_cuda": doc.get("use_cuda"),
                                TOOL_LINES: quoted([f.get("message") or ""] + list(f.get("lines") or []))}
    if kind == "memory-registration":
        what, cause, remedies = _mr_failure(doc, f)
    elif kind == "port-not-active":
        what = f"found its port {f.get('port')} {f.get('port_state') or 'not active'} and did not run"
        evidence["port"] = f.get("port")
        cause = ("perftest runs only on an Active port (set_link_layer): the port was Down (no link: cable, "
                 "peer or switch port), still Init/Armed (no subnet manager has brought it up), or the "
                 "wrong port was named with -i")
        remedies = ["check the port with `ibstat` (`gputopo import ibstat`): state and physical state",
                    "on InfiniBand, check that a subnet manager runs (`sminfo`)",
                    "name the port that is Active with -i"]
    elif kind == "completion-error":
        st = f.get("wc_status")
        name, meaning = (WC_STATUS.get(st) if isinstance(st, int) else None) or (
            f.get("wc_status_text") or "status not printed", "")
        if st is not None:
            evidence["wc_status"] = st
        what = (f"had a transfer complete with an error at the {f.get('side') or 'client'} "
                f"(status {st if st is not None else '?'}, {f.get('wc_status_text') or name})")
        cause = meaning or "a work request completed with an error; its status says which"
        remedies = completion_remedies(st if isinstance(st, int) else None)
    elif kind == "peer-unreachable":
        what = "did not reach its peer (" + str(f.get("message", "")).strip().replace(": ", " ")[:120] + ")"
        cause = ("the peer was gone or never reached: the server not started or already ended, a wrong address "
                 "or port, a firewall on perftest's TCP port (18515 by default), or with rdma_cm a route missing")
        remedies = ["start the server side first and give the client its address",
                    "check the address, `-p` port and the firewall between the nodes"]
    elif kind == "device" and "port" in str(f.get("message", "")).lower():
        what = "could not use the port it was given (" + str(f.get("message", "")).strip().replace(": ", " ")[:120] + ")"
        cause = "the device has no such port (-i), or its link layer could not be read"
        remedies = ["list the device's ports with `ibstat` and name one with -i"]
    elif kind == "device":
        what = "found no usable RDMA device (" + str(f.get("message", "")).strip().replace(": ", " ")[:120] + ")"
        cause = "the device named with -d does not exist on this node, or the RDMA drivers are not loaded"
        remedies = ["list the devices with `ibv_devices` / `ibstat` and name one with -d"]
    else:
        what = "could not set up its RDMA resources (" + str(f.get("message", "")).strip().replace(": ", " ")[:120] + ")"
        cause = "perftest failed before any transfer; the lines above the failure say why"
        remedies = ["read the lines before the failure in the output", "check `dmesg` for mlx5 / ib_core errors"]
    return Finding("rdma-test-failed", "error",
                   f"{where} {what}: {_file_line(doc, f.get('line'))}; no bandwidth was measured after it",
                   evidence=evidence, cause=cause, remedies=remedies)


def judged_row(doc: dict) -> dict | None:
    """The row a run is judged by: the largest message size printed (its last such row), of the
    run's own table (not --report-both's "Local results" / "Remote results", one direction each)."""
    rows = [r for r in doc.get("rows") or [] if isinstance(r, dict) and isinstance(r.get("bw_average_gbps"), float)]
    if any(not r.get("part") for r in rows):
        rows = [r for r in rows if not r.get("part")]
    if not rows:
        return None
    top = max(r["size_bytes"] for r in rows)
    same = [r for r in rows if r["size_bytes"] == top]
    if len(same) == 1:
        return same[-1]
    # the same size printed again and again (--run_infinitely prints a row per interval, a loop
    # pasted whole): repeated measurements of one figure, judged by their median, the spread said
    ordered = sorted(same, key=lambda r: r["bw_average_gbps"])
    mid = dict(ordered[(len(ordered) - 1) // 2])
    mid["repeats"] = {"count": len(same), "min_gbps": round(ordered[0]["bw_average_gbps"], 3),
                      "max_gbps": round(ordered[-1]["bw_average_gbps"], 3),
                      "lines": [r.get("line") for r in same][:50]}
    return mid


def _link_mismatch(doc: dict, port: dict) -> bool:
    """perftest's ``Link type : IB`` / ``Ethernet`` against the port's link layer, where both are known."""
    printed = ((doc.get("header") or {}).get("link_type") or "").lower()
    layer = (port.get("link_layer") or "").lower()
    if not printed or not layer:
        return False
    return ("ethernet" in printed) != (layer == "ethernet")


def _json_only_finding(doc: dict) -> Finding | None:
    """--out_json's bw_avg / msgRate_avg written alone (--output=bandwidth / message_rate)."""
    fig = doc.get("json_only_figure")
    if not isinstance(fig, dict):
        return None
    unit = fig.get("unit") or "MiB/sec, or Gb/sec with --report_gbits: the file does not say which"
    return Finding("rdma-bandwidth", "info",
                   f"{_where(doc)} wrote {fig.get('key')} {fig.get('value')} ({unit}), not judged: perftest's "
                   f"--out_json with --output writes that figure alone, without message size or unit "
                   f"({doc.get('file', '?')})",
                   evidence={"tool": "perftest", "file": doc.get("path") or doc.get("file"), "judged": False,
                             "device": doc.get("device"), **{k: fig.get(k) for k in ("key", "value")}})


def _port_note(port: dict) -> str:
    """"; port not printed: assumed 1 (...)" where the port was assumed, else ""."""
    return f"; {port.get('port_from')}" if port.get("port_assumed") and port.get("port_from") else ""


def bandwidth_finding(doc: dict) -> Finding | None:
    row = judged_row(doc)
    if row is None:
        return _json_only_finding(doc)
    port = doc.get("port") or {}
    rate = port.get("rate_gbps")
    got = float(row["bw_average_gbps"])
    size = row["size_bytes"]
    bi = bool(doc.get("bidirectional"))
    rep = row.get("repeats")
    head = (f"{_where(doc)} averaged {_printed(row)} = {_gbps(got)} at {size} B messages"
            + (" (both directions together)" if bi else "")
            + (f" (the median of {rep['count']} repeated measurements of this size"
               + (" (--run_infinitely)" if doc.get("run_infinitely") else "")
               + f", {_gbps(rep['min_gbps'])} to {_gbps(rep['max_gbps'])})" if rep else ""))
    at = _file_line(doc, row.get("line"))
    json_bi = bi and doc.get("source_format") == "out_json"
    evidence: dict[str, Any] = {"tool": "perftest", "file": doc.get("path") or doc.get("file"), "test": doc.get("test"),
                                "device": doc.get("device"), "size_bytes": size, "bw_average": row["bw_average"],
                                "bw_peak": row["bw_peak"], "unit": row["unit"], "unit_meaning": doc.get("unit_meaning"),
                                "bw_average_gbps": round(got, 3), "line": row.get("line"),
                                "bidirectional": bi, "use_cuda": doc.get("use_cuda"), "port": port,
                                "source_format": doc.get("source_format") or "text",
                                **({"repeats": rep} if rep else {})}
    if doc.get("unit_derived"):
        evidence["unit_derived"] = doc["unit_derived"]
    why_not = None
    if rate is None:
        why_not = port.get("why") or "port rate unknown"
    elif size < RDMA_MIN_JUDGED_BYTES:
        why_not = (f"messages of {size} B measure the message rate, not the link (judged from "
                   f"{RDMA_MIN_JUDGED_BYTES} B up)")
    elif (doc.get("header") or {}).get("dual_port", "OFF").upper() == "ON":
        why_not = "a dual-port run spans two ports; its figure is not compared with one port's rate"
    elif _link_mismatch(doc, port):
        why_not = (f"perftest ran over {(doc.get('header') or {}).get('link_type')} but {port.get('name')} is "
                   f"{port.get('link_layer')} in {port.get('source')}: the text is not of this port")
    elif port.get("state") not in (None, "Active"):
        why_not = f"the port {port.get('name')} was {port.get('state')} in {port.get('source')}, not the port this ran on then"
    if not why_not and json_bi and RDMA_SLOW_RATIO * float(rate or 0) <= got < RDMA_SLOW_RATIO * 2 * float(rate or 0):
        why_not = (f"{got / (2 * float(rate or 1)):.0%} of 2 x {port.get('name')}'s rate if it is the sum of both "
                   f"directions, {got / float(rate or 1):.0%} of it if it is the remote side's one direction "
                   "(perftest's --out_json of a bidirectional run with --report-both ends with that, and the file "
                   "does not say which)")
    if why_not:
        evidence["judged"] = False
        return Finding("rdma-bandwidth", "info",
                       f"{head}, not judged: {why_not.replace(': ', ', ')} ({at}){_port_note(port)}",
                       evidence=evidence)
    # an --out_json bidirectional figure below 80 % of one direction's rate is slow either way
    one_way = json_bi and got < RDMA_SLOW_RATIO * float(rate or 0)
    expected = float(rate or 0.0) * (2 if bi and not one_way else 1)
    ratio = got / expected if expected > 0 else 0.0
    evidence.update({"judged": True, "expected_gbps": expected, "ratio": round(ratio, 3),
                     "threshold_ratio": RDMA_SLOW_RATIO,
                     "basis": f"{port.get('name')} rate {rate:g} Gb/s from {port.get('source')}" + (
                         " x 2 (bidirectional)" if bi and not one_way else "")})
    of = f"{ratio:.0%} of {port.get('name')}'s {expected:g} Gb/s" + (
        " (its rate for one direction: below it, the figure is slow whether it is the sum of both or "
        "--report-both's one direction)" if one_way else " (2 x its rate: bidirectional)" if bi else "")
    path = doc.get("gpu_path") or {}
    if path:
        evidence["gpu_path"] = path
    far = path.get("link_class") in ("NODE", "SYS", "PHB")
    if ratio < RDMA_SLOW_RATIO:
        cuda = doc.get("use_cuda")
        return Finding(
            "rdma-slow", "warning", f"{head} = {of}, below {RDMA_SLOW_RATIO:.0%}: {at}{_port_note(port)}",
            evidence=evidence,
            cause=("the transfer did not fill the port: " + (
                f"the GPU it used (GPU {path.get('gpu')} at {path.get('pci')}) reaches {doc.get('device')} over "
                f"{path.get('link_class')}, through the CPU, which often limits GPUDirect RDMA (NCCL's default "
                "distance rule would not use it there); " if far else "") + (
                "with --use_cuda the GPU-NIC path (a GPU across the socket from its NIC, SYS/NODE; GPUDirect "
                "RDMA off so data is staged) often limits it; " if cuda else "")
                + "the NIC's PCIe link trained below its maximum, a congested or mis-negotiated link, or too few "
                  "queue pairs / too small messages for this port"),
            remedies=["run again with larger messages (-s 1M or -a) and more queue pairs (-q 4)",
                      "compare with the same test from host memory (without --use_cuda)" if cuda else
                      "check the NIC's PCIe link (`gputopo scan`, `lspci -vv`: LnkSta against LnkCap)",
                      "check the port's counters and the peer's port rate (`ibstat` on both nodes)"])
    return Finding("rdma-bandwidth", "info", f"{head} = {of}: {at}{_port_note(port)}", evidence=evidence)


def perftest_findings(doc: dict) -> list[Finding]:
    out = [failure_finding(doc, f) for f in doc.get("perftest_failures") or [] if isinstance(f, dict)]
    bw = bandwidth_finding(doc)
    if bw is not None:
        out.append(bw)
    return out


def perftest_run_findings(imported: list[dict]) -> list[Finding]:
    """The findings of every perftest run among a run folder's imports (imported.json)."""
    return [f for doc in imported if doc.get("tool") == "perftest" for f in perftest_findings(doc)]


def perftest_measured(imported: list[dict]) -> bool:
    """Whether an imported perftest run printed a bandwidth (something was measured)."""
    return any(d.get("tool") == "perftest" and judged_row(d) is not None for d in imported)
