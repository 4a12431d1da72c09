"""The sim and cpu fabrics' caching allocator (gputopo/bench/fabrics/host_blocks.py): a block
comes back only when nothing uses it, and the pool stays within its bound."""

import pytest
import torch

from gputopo.bench.fabrics import host_blocks
from gputopo.bench.fabrics.host_blocks import HostBlocks

MIN_BYTES = 1 << 20  # the pool's threshold, lowered so these tests stay small
N = MIN_BYTES // 4  # elements of the smallest pooled block

pytestmark = pytest.mark.skipif(host_blocks._use_count is None,
                                reason="this torch has no storage use count: no pooling")


@pytest.fixture(autouse=True)
def _small_blocks(monkeypatch):
    monkeypatch.setattr(host_blocks, "MIN_BYTES", MIN_BYTES)


def _ptr(t):
    return t.untyped_storage().data_ptr()


def test_a_freed_block_is_reused_and_a_busy_one_never():
    pool = HostBlocks()
    a = pool.empty((N,))
    where = _ptr(a)
    b = pool.empty((N,))  # a is still alive: a second block
    assert _ptr(b) != where and pool.allocated == 2
    del a
    c = pool.empty((N,))
    assert _ptr(c) == where and pool.reused == 1  # a's block, now free
    assert c.shape == (N,) and c.dtype == torch.float32 and c.is_contiguous()


def test_a_view_keeps_its_block_busy():
    pool = HostBlocks()
    a = pool.empty((2, N // 2))
    part = a[1]  # a view that outlives the tensor it came from
    part.fill_(7.0)
    where = _ptr(a)
    del a
    b = pool.empty((2, N // 2))
    b.fill_(-1.0)
    assert _ptr(b) != where and bool((part == 7.0).all())  # not handed out under `part`
    chunks = torch.tensor_split(b, 2)  # views of b: its block stays busy too
    del b, part
    c = pool.empty((2, N // 2))
    assert _ptr(c) == where != _ptr(chunks[0])  # a's block is free now, b's is not


def test_shapes_are_laid_out_as_torch_empty_would():
    pool = HostBlocks()
    t = pool.empty((4, N // 4))
    ref = torch.empty((4, N // 4))
    assert t.shape == ref.shape and t.stride() == ref.stride()
    t.copy_(torch.arange(N, dtype=torch.float32).view(4, N // 4))
    assert float(t[3, -1]) == N - 1


def test_small_requests_are_plain_allocations():
    pool = HostBlocks()
    t = pool.empty((16,))
    assert t.shape == (16,) and pool.allocated == 0 and pool.pooled_bytes == 0
    assert host_blocks.HostBlocks().empty((N - 1,)).numel() == N - 1  # one element short: plain


def test_idle_blocks_beyond_the_bound_are_dropped():
    pool = HostBlocks()
    big = pool.empty((4 * N,))  # largest block so far: the bound is 8 of these
    small = [pool.empty((N,)) for _ in range(20)]
    del small  # 20 idle small blocks, within 8 x 4 blocks' worth
    assert pool.pooled_bytes == 4 * MIN_BYTES + 20 * MIN_BYTES
    more = [pool.empty((4 * N,)) for _ in range(7)]  # 8 big ones in use: idle small ones go
    assert pool.pooled_bytes <= host_blocks.BLOCKS_PER_SIZE * 4 * MIN_BYTES
    assert all(t.numel() == 4 * N for t in more) and big.numel() == 4 * N



def test_a_smaller_request_takes_the_smallest_idle_block_that_holds_it(monkeypatch):
    """A request may be served by an idle block up to FIT times its size (the smallest such),
    laid out from the block's start; a block more than FIT times larger is left alone."""
    monkeypatch.setattr(host_blocks, "FIT", 4)
    pool = HostBlocks()
    big, mid = pool.empty((4 * N,)), pool.empty((2 * N,))
    big_at, mid_at = _ptr(big), _ptr(mid)
    del big, mid
    t = pool.empty((2, N // 2))  # N elements: the 2N block fits better than the 4N one
    assert t.data_ptr() == mid_at and pool.allocated == 2 and pool.reused == 1
    assert t.shape == (2, N // 2) and t.is_contiguous() and t.stride() == (N // 2, 1)
    t.copy_(torch.arange(N, dtype=torch.float32).view(2, N // 2))
    assert float(t[1, -1]) == N - 1
    u = pool.empty((3 * N,))  # only the 4N block holds it
    assert u.data_ptr() == big_at and u.numel() == 3 * N and pool.allocated == 2
    del t, u
    monkeypatch.setattr(host_blocks, "FIT", 1)  # now the 2N block is too big for N
    v = pool.empty((N,))
    assert v.data_ptr() not in (big_at, mid_at) and pool.allocated == 3
