"""The host kernel side of GPUDirect RDMA, read from files (model/nic.py GdrKernel).

A NIC reads and writes GPU memory directly in one of two ways, and NCCL's IB transport
(NCCL 2.30.7, ``src/transport/net_ib/gdr.cc``) tests each:

- peer memory: ``ncclIbGdrSupport`` looks for ``/sys/kernel/mm/memory_peers/nv_mem/version``,
  ``/sys/kernel/mm/memory_peers/nv_mem_nc/version`` (the older out-of-tree ``nv_peer_mem``) or
  ``/sys/module/nvidia_peermem/version``. The same files are looked at here, and ``/proc/modules``
  for a ``nvidia_peermem`` / ``nv_peer_mem`` line. Known absent only when ``/proc/modules`` was
  read and none of them is there.
- dma-buf: ``ncclIbDmaBufSupport`` registers a dummy dma-buf memory region with the NIC at run
  time, and NCCL's init asks CUDA for ``CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED``. Neither can be
  asked from a file; what they depend on can: a kernel >= 5.12 (RDMA dma-buf support) and the
  open GPU kernel modules (``/proc/driver/nvidia/version`` says ``Open Kernel Module``; the
  proprietary module does not export GPU memory as dma-buf). Both known true: "can work" (the
  NIC driver and rdma-core must still support it: only a run can say); either known false:
  absent.
"""

from __future__ import annotations

import re
from typing import Any, Optional, Tuple

from gputopo.model.nic import GdrKernel
from gputopo.model.values import NotAvailable, is_value

from .host_files import read_host_file

#: Files whose presence NCCL takes as a loaded peer-memory module, with the module they mean.
PEERMEM_FILES = (("sys/module/nvidia_peermem/version", "nvidia_peermem"),
                 ("sys/kernel/mm/memory_peers/nv_mem/version", "nv_peer_mem"),
                 ("sys/kernel/mm/memory_peers/nv_mem_nc/version", "nv_peer_mem"))
PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem")
#: The first kernel whose RDMA core can register dma-buf memory (ib_umem_dmabuf, Linux 5.12).
DMABUF_MIN_KERNEL = (5, 12)
_KERNEL_RE = re.compile(r"^(\d+)\.(\d+)")


def kernel_version(release: Any) -> Optional[Tuple[int, int]]:
    """``"5.15.0-91-generic"`` -> (5, 15); None when it is not a kernel release."""
    if not isinstance(release, str):
        return None
    m = _KERNEL_RE.match(release.strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


def read_gdr_kernel(root: str, kernel: Any) -> GdrKernel:
    """The peer-memory module and dma-buf facts under ``root``; ``kernel`` is the release read
    already (HostInfo.kernel: a string or NotAvailable)."""
    out = GdrKernel(kernel=kernel)
    for rel, module in PEERMEM_FILES:
        if read_host_file(root, rel) is not None:
            out.peermem, out.peermem_module = True, module
            out.sources["peermem"] = "/" + rel
            break
    modules = read_host_file(root, "proc/modules")
    if out.peermem is not True:
        if modules is None:
            out.peermem = NotAvailable("cannot read /proc/modules (nor NCCL's peer-memory files "
                                       "under /sys/module, /sys/kernel/mm/memory_peers)")
        else:
            loaded = {line.split()[0] for line in modules.splitlines() if line.split()}
            found = [m for m in PEERMEM_MODULES if m in loaded]
            out.peermem = bool(found)
            out.peermem_module = found[0] if found else None
            out.sources["peermem"] = "/proc/modules"

    version = read_host_file(root, "proc/driver/nvidia/version")
    if version is None:
        out.open_kernel_module = NotAvailable("cannot read /proc/driver/nvidia/version (no NVIDIA driver loaded?)")
    else:
        out.open_kernel_module = "Open Kernel Module" in version
        out.sources["open_kernel_module"] = "/proc/driver/nvidia/version"
    release = kernel_version(kernel)
    need = ".".join(map(str, DMABUF_MIN_KERNEL))
    if release is not None and release < DMABUF_MIN_KERNEL:
        out.dmabuf, out.dmabuf_reason = False, f"kernel {kernel} is older than {need}"
    elif out.open_kernel_module is False:
        out.dmabuf, out.dmabuf_reason = False, ("the GPU driver is the proprietary kernel module; "
                                                "dma-buf needs the open GPU kernel modules")
    elif release is None:
        out.dmabuf = NotAvailable(f"kernel release not known ({kernel}); dma-buf needs >= {need}")
        out.dmabuf_reason = out.dmabuf.reason
    elif not is_value(out.open_kernel_module):
        out.dmabuf = NotAvailable("whether the GPU driver is the open kernel module is not known")
        out.dmabuf_reason = out.dmabuf.reason
    else:
        out.dmabuf, out.dmabuf_reason = True, (f"kernel {kernel} >= {need} and the open GPU kernel "
                                               "modules (NIC driver support is tested only at run time)")
    return out
