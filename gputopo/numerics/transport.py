"""How tensors move between the two GPUs of a pair, as far as the numerics needs to know.

The numerics only needs one call: ``copy(tensor, src_gpu, dst_gpu, path) -> tensor``, returning
the tensor as it arrived on ``dst_gpu`` (NVML indices; ``path`` "p2p" for a peer copy, "host" for
a copy staged through host memory). On the sim fabric that is the bench's simulated transport,
which applies the machine's faults to the bytes that really move; the numerics is never told
about a fault and has to find it in the loss. On the cpu fabric DataParallel's flow is emulated
over :class:`LocalTransport`, a plain copy, and says so.

``adapt_transport`` wraps whatever object the bench hands over: a fabric's ``Ops`` (gputopo.bench
.fabrics: ``transfers([(dst, src, dst_gpu, src_gpu)], route)`` into buffers from ``empty(gpu,
shape)``), or anything with a ``copy(tensor, src, dst[, path])`` method.
"""

from __future__ import annotations

import inspect
from typing import Any, Protocol


class Transport(Protocol):
    """The one seam between the numerics and the fabric's data movement."""

    name: str

    def copy(self, tensor, src: int, dst: int, path: str = "p2p"):  # pragma: no cover - protocol
        ...


class LocalTransport:
    """A faithful copy with no link in between (cpu fabric; tests)."""

    name = "local"

    def __init__(self):
        self.bytes_moved = 0
        self.copies = 0

    def copy(self, tensor, src: int, dst: int, path: str = "p2p"):
        self.copies += 1
        self.bytes_moved += tensor.numel() * tensor.element_size()
        return tensor.detach().clone()


class _PathAdapter:
    """Wrap a transport whose ``copy`` takes no ``path``: every copy is a peer copy there."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.name = getattr(inner, "name", type(inner).__name__)

    def copy(self, tensor, src: int, dst: int, path: str = "p2p"):
        return self.inner.copy(tensor, src, dst)


class OpsTransport:
    """A bench fabric's operations (``Ops``) seen as a Transport: each copy is one ``transfers``
    call on the fabric, so the fabric's link model and faults apply to the bytes. Only float32
    moves through the fabric (its buffers are float32); other dtypes (a BatchNorm's step
    counter) are copied as they are."""

    def __init__(self, ops: Any):
        self.ops = ops
        self.name = getattr(ops, "fabric", type(ops).__name__)
        self.copies = 0
        #: every (source GPU, destination GPU, path) a copy went over
        self.routes: set = set()

    def copy(self, tensor, src: int, dst: int, path: str = "p2p"):
        import torch

        if tensor.dtype != torch.float32:
            return tensor.detach().clone()
        src_t = tensor.detach().contiguous()
        out = self.ops.empty(dst, tuple(src_t.shape))
        self.ops.transfers([(out, src_t, dst, src)], path)
        self.copies += 1
        self.routes.add((src, dst, path))
        return out


def adapt_transport(obj: Any) -> Transport:
    """Return ``obj`` as a Transport: a fabric ``Ops`` (has ``transfers``), or an object with a
    ``copy(tensor, src, dst[, path])`` method."""
    if callable(getattr(obj, "transfers", None)) and callable(getattr(obj, "empty", None)):
        return OpsTransport(obj)
    copy = getattr(obj, "copy", None)
    if copy is None or not callable(copy):
        raise TypeError(f"{type(obj).__name__} has no copy(tensor, src, dst) method")
    try:
        params = inspect.signature(copy).parameters
    except (TypeError, ValueError):
        return obj
    if "path" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return obj
    return _PathAdapter(obj)
