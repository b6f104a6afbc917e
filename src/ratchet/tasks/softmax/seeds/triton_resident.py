"""Softmax in Triton with one read of x: a row's pieces stay in registers while its programs agree on
the row's max and sum.

The idea: a softmax row needs its max and sum before any output, so two-pass kernels read x twice, and
at 64 x 128256 fp32 (33 MB, most of the H200's L2) the second read comes from HBM. Here each program
holds one piece of a row (BLOCK elements) in registers: it reduces its piece, publishes (max, sum of
exp), waits at a barrier for the row's other pieces, then writes its piece normalized from the same
registers. The kernel is persistent: a grid of row slots x pieces walks the rows (slot, slot + SLOTS,
...), loading the next row's piece before the barrier so the wait hides the load. Only SLOTS rows are in
flight, so x is read once and out written once.

A barrier inside a grid is safe only if the programs it waits for run at the same time: the grid asks
for at most one program per SM (an empty SM always has room for one), so all of them are resident
whatever their registers. A row that fits one piece waits for nobody; the Triton interpreter runs the
programs one after another, so there every row is one piece.

On the H200 (2026-11-30, fp32, the default config, `python -m benchmarks.suite --tasks softmax --shapes 3
--graph-below 100`): 64 x 128256 28.8 us under a CUDA graph (the two-kernel online seed 33.1; the softmax
goal: 20), 256 x 128256 97.7 us (116.9), one row 9.4 us (7.2: eight programs do not fill the SMs).
That run also found a race in rows of one piece, fixed since (see the comment at the barrier) and not
yet measured on a GPU.
"""

import functools
import os

import torch
import triton
import triton.language as tl

from ratchet.tasks.softmax.seeds._rows import operands

SPACE = {"BLOCK_N": [16384, 8192, 32768], "num_warps": [32, 16]}

_DEFAULT_SMS = 132  # an H100 / H200; the interpreter and the CPU-only sm_90 compile check have no GPU to ask


@triton.jit
def _softmax_resident(x_ptr, out_ptr, m_ptr, s_ptr, arrived_ptr, stride_x, stride_out, M, N, PIECES, SLOTS,
                      BLOCK: tl.constexpr, PIECES_P2: tl.constexpr):
    slot = tl.program_id(0)
    piece = tl.program_id(1)
    cols = piece * BLOCK + tl.arange(0, BLOCK)
    col_ok = cols < N
    parts = tl.arange(0, PIECES_P2)
    part_ok = parts < PIECES
    x = tl.load(x_ptr + slot.to(tl.int64) * stride_x + cols, mask=col_ok, other=-float("inf"))
    for row in range(slot, M, SLOTS):
        row64 = tl.cast(row, tl.int64)  # a plain int under the interpreter
        # The next row's piece is on its way while this one reduces and waits.
        next_ok = col_ok & (cols * 0 + row + SLOTS < M)  # a vector: the interpreter's row is a plain int
        x_next = tl.load(x_ptr + (row64 + SLOTS) * stride_x + cols, mask=next_ok, other=-float("inf"))
        xf = x.to(tl.float32)
        m_piece = tl.max(xf, axis=0)  # every piece holds at least one column: finite
        s_piece = tl.sum(tl.exp(xf - m_piece), axis=0)
        if PIECES > 1:
            tl.store(m_ptr + row64 * PIECES + piece, m_piece)
            tl.store(s_ptr + row64 * PIECES + piece, s_piece)
            # Every thread's stores happen before the release (a CTA barrier first: rows of one piece once
            # read their own partials back with none between, the likely cause of NaN at 4096 x 1024 on
            # the H200, 2026-11-30); nothing reads the partials before the acquire that sees all PIECES.
            tl.debug_barrier()
            tl.atomic_add(arrived_ptr + row64, 1, sem="release")
            arrived = tl.atomic_add(arrived_ptr + row64, 0, sem="acquire")
            while arrived < PIECES:
                arrived = tl.atomic_add(arrived_ptr + row64, 0, sem="acquire")
            tl.debug_barrier()
            m_parts = tl.load(m_ptr + row64 * PIECES + parts, mask=part_ok, other=-float("inf"),
                              cache_modifier=".cg")
            s_parts = tl.load(s_ptr + row64 * PIECES + parts, mask=part_ok, other=0.0, cache_modifier=".cg")
            row_max = tl.max(m_parts, axis=0)
            inv_sum = 1.0 / tl.sum(s_parts * tl.exp(m_parts - row_max), axis=0)
        else:  # the row is this piece: nothing to publish or wait for
            row_max = m_piece
            inv_sum = 1.0 / s_piece
        out = tl.exp(xf - row_max) * inv_sum
        tl.store(out_ptr + row64 * stride_out + cols, out.to(out_ptr.dtype.element_ty), mask=col_ok)
        x = x_next


@functools.lru_cache(maxsize=None)
def _sm_count(index):
    return torch.cuda.get_device_properties(index).multi_processor_count


def _interpreted():
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def layout(M, N, block_n, sms, interpreted):
    """(BLOCK, PIECES, SLOTS): pieces of BLOCK columns per row, and rows in flight. A split row needs all
    its pieces resident at once, so SLOTS x PIECES stays within one program per SM; a row the SMs cannot
    hold in pieces, or any row under the interpreter, is one piece (its block the whole row).
    Layouts at 64 x 128256 with BLOCK_N 16384 on 132 SMs: 8 pieces, 16 slots, 4 rows per program."""
    if interpreted:  # whole rows, and half as many slots as rows, so the walk over rows still runs
        return triton.next_power_of_2(N), 1, max(1, M // 2)
    block = min(block_n, triton.next_power_of_2(N))
    pieces = triton.cdiv(N, block)
    if pieces > sms:
        block, pieces = triton.next_power_of_2(N), 1
    slots = M if pieces == 1 else max(1, min(M, sms // pieces))
    return block, pieces, slots


def kernel(x, BLOCK_N=16384, num_warps=32):
    x, out = operands(x)
    M, N = x.shape
    if M == 0 or N == 0:
        return out
    sms = _sm_count(x.device.index if x.device.index is not None else torch.cuda.current_device()) \
        if x.device.type == "cuda" else _DEFAULT_SMS
    block, pieces, slots = layout(M, N, BLOCK_N, sms, _interpreted())
    m_parts = torch.empty((M, pieces), dtype=torch.float32, device=x.device)
    s_parts = torch.empty((M, pieces), dtype=torch.float32, device=x.device)
    arrived = torch.zeros(M, dtype=torch.int32, device=x.device)  # one memset: the counters start at 0
    _softmax_resident[(slots, pieces)](x, out, m_parts, s_parts, arrived, x.stride(0), out.stride(0), M, N,
                                       pieces, slots, BLOCK=block, PIECES_P2=triton.next_power_of_2(pieces),
                                       num_warps=num_warps)
    return out
