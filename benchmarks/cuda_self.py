"""The copies `gputopo bench --self` makes, as a bare CUDA-event loop: the reference its figures
are held against (tools/gpu_check.py divides gputopo's GB/s by these, direction by direction).

The same copies as gputopo/bench/suites.py's ``_self`` on the cuda fabric
(gputopo/bench/fabrics/cuda.py): float32 buffers of ``size / 4`` elements; host->GPU from a
pinned host buffer, GPU->host into a pinned host buffer, GPU->GPU on the device, each
``dst.copy_(src, non_blocking=True)`` on the current stream of the device. The same sizes,
warm-up runs and timed samples (the bench's default preset unless told). What is left out is
everything gputopo adds around a copy: no stream hold (spin kernel), no output poisoning
between samples, no per-sample bit-exact check (one check after the samples, reported).

Timing: ``torch.cuda.Event`` start and end recorded on the device's current stream right around
each copy, ``end.synchronize()``, ``start.elapsed_time(end)``; GB/s = bytes / median seconds
/ 1e9 (GB = 1e9 B, as gputopo). Launch latency between the start event and the copy counts here
and not in gputopo (its hold keeps it out), so at small sizes gputopo may be faster.

    python benchmarks/cuda_self.py [--gpu 0] [--sizes 1M,16M,64M,256M] [--warmup 2] [--samples 10]

Prints one JSON document. Without a usable CUDA device it prints one "needs CUDA" line on stderr
and exits 3 (the check records the step as n/a). Imports nothing of gputopo: an independent loop.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

#: The bench's default preset (gputopo/bench/options.py PRESETS["default"]), when not told.
DEFAULT_SIZES = "1M,16M,64M,256M"
NEEDS_CUDA = 3

#: Published HBM bandwidth of the GPUs this check targets, GB/s, by a name fragment (NVIDIA's
#: datasheets: H100 SXM5 80GB 3.35 TB/s, H100 PCIe 2.0 TB/s, H100 NVL 3.9 TB/s, H200 4.8 TB/s).
PUBLISHED_HBM_GBPS = (("H200", 4800.0), ("H100 NVL", 3900.0), ("H100 PCIe", 2000.0),
                      ("H100 80GB HBM3", 3350.0), ("H100 SXM", 3350.0))


def parse_sizes(text: str):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    out = []
    for part in text.split(","):
        t = part.strip().upper()
        if not t:
            continue
        out.append(int(t[:-1]) * units[t[-1]] if t[-1] in units else int(t))
    return out


def _bus_id(props):
    """"0000000:41:00.0" from torch's device properties (the pci_* fields torch >= 2.5 has)."""
    bus, dev = getattr(props, "pci_bus_id", None), getattr(props, "pci_device_id", None)
    if bus is None or dev is None:
        return None
    return f"{getattr(props, 'pci_domain_id', 0):08x}:{bus:02x}:{dev:02x}.0"


def published_hbm(name: str):
    for frag, gbps in PUBLISHED_HBM_GBPS:
        if frag.lower() in name.lower():
            return gbps
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="bare CUDA-event loop of bench --self's copies")
    ap.add_argument("--gpu", type=int, default=0, help="CUDA device index")
    ap.add_argument("--sizes", default=DEFAULT_SIZES)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--samples", type=int, default=10)
    a = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() <= a.gpu:
        print(f"needs CUDA: torch {torch.__version__} sees no usable CUDA device {a.gpu}",
              file=sys.stderr)
        return NEEDS_CUDA
    dev = torch.device("cuda", a.gpu)
    props = torch.cuda.get_device_properties(dev)
    clock_khz = getattr(props, "memory_clock_rate", 0) or 0
    bus_bits = getattr(props, "memory_bus_width", 0) or 0
    doc = {
        "tool": "benchmarks/cuda_self.py", "device": props.name, "cuda_index": a.gpu,
        "pci_bus_id": _bus_id(props),
        "torch": torch.__version__, "cuda": torch.version.cuda, "warmup": a.warmup, "samples": a.samples,
        "timing": "cuda-events: start/end recorded around each copy on the device's current stream; no hold",
        # DRAM moves data on both clock edges (torch.cuda._device_limits does the same sum)
        "hbm_theoretical_gbps": (2 * bus_bits / 8 * clock_khz * 1e3 / 1e9) if clock_khz and bus_bits else None,
        "hbm_theoretical_source": "torch device properties: 2 x memory_bus_width/8 x memory_clock_rate",
        "hbm_published_gbps": published_hbm(props.name),
        "results": [],
    }
    torch.cuda.set_device(dev)
    stream = torch.cuda.current_stream(dev)
    for size in parse_sizes(a.sizes):
        n = max(1, size // 4)
        host_src = torch.arange(n, dtype=torch.float32).pin_memory()
        host_dst = torch.empty(n, dtype=torch.float32, pin_memory=True)
        dev_src = host_src.to(dev)
        dev_dst = torch.empty(n, dtype=torch.float32, device=dev)
        copies = (("self.h2d", f"host->{a.gpu}", dev_dst, host_src),
                  ("self.d2h", f"{a.gpu}->host", host_dst, dev_src),
                  ("self.d2d", f"{a.gpu}->{a.gpu}", dev_dst, dev_src))
        for test, direction, dst, src in copies:
            for _ in range(a.warmup):
                dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize(dev)
            times = []
            for _ in range(a.samples):
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record(stream)
                dst.copy_(src, non_blocking=True)
                end.record(stream)
                end.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            torch.cuda.synchronize(dev)
            ok = bool(torch.equal(dst.cpu() if dst.is_cuda else dst, host_src))
            med = statistics.median(times)
            doc["results"].append({"test": test, "direction": direction, "size_bytes": 4 * n,
                                   "samples_s": times, "median_s": med,
                                   "gbps": 4 * n / med / 1e9 if med > 0 else None,
                                   "bit_exact_after": ok})
        del host_src, host_dst, dev_src, dev_dst
        torch.cuda.empty_cache()
    print(json.dumps(doc, indent=1))
    return 0 if all(r["bit_exact_after"] for r in doc["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())
