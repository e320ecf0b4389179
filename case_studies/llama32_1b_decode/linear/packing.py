"""W packed for the loader-ring GEMVs (the `_lr` components of this folder), once, when the weights are loaded.

A loader-ring task copies its slots of W into shared memory by bulk copies. Row-major W took one copy per row and
slot (16 rows: 16 copies of 2 KB a slot), and the count of copies bounded the ring; packed, a task's rows lie
contiguous in the order the walk reads them, so a slot is one copy. Layout of packed W (gemv.cuh's
WLoaderRing): [task][32-wide block of K][8-row half][row g of the half][k quarter q][8 bf16], element
(t, blk, half, g, q, e) = W[row of task t's local row 8 half + g][32 blk + 8 q + e]; a row a task does not have
(past N) and the columns past K (to whole 32-wide blocks) are zeros. Which rows a task has is the component's
(its load entry and its walk use the same order): `task_rows`.

The sizes a task takes (rows per task) are the geometry values the components provide: by default as their
contracts declare them, or as a linked kernel has them (its manifest's geometry, which --values may have changed):
`provides`. `task_rows`, `padded_k` and `source` need nothing but Python; `pack` takes torch tensors (any device).
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
BLOCK = 32          # columns of a packed block (two k16 steps of the mma)
HALF = 8            # rows of a packed half (the mma's 8-row halves)
QKV_TASK_HEADS = 48  # qkv_rope_normed_lr's grid: [48, 64 // QKV_ROWS] (32 q, 8 k and 8 v heads of 64 rows)
HEAD_DIM = 64


@lru_cache(maxsize=None)
def _provides(component: str) -> dict:
    return json.loads((HERE / f"{component}.json").read_text())["geometry"]["provides"]


def rows_per_task(component: str, provides: dict | None = None) -> int:
    """The rows of W one task of `component` multiplies (its packed task's height); `provides`: the geometry
    values to read it from (a linked kernel's), else the contract's."""
    p = dict(_provides(component), **(provides or {}))
    return {"gemv_residual_lr": lambda: p["GEMV_ROWS"], "lm_head_lr": lambda: p["LM_ROWS"],
            "gemv_swiglu_normed_lr": lambda: 2 * p["SWIGLU_COLS"], "qkv_rope_normed_lr": lambda: p["QKV_ROWS"]}[component]()


def padded_k(K: int) -> int:
    """K padded with zeros to whole 32-wide blocks: a packed row's length."""
    return -(-K // BLOCK) * BLOCK


def task_rows(component: str, n: int, provides: dict | None = None) -> list[list[int]]:
    """For each task of `component` in its grid's order, the row of W each local row multiplies (-1: none).
    n: the component's output size (gemv_residual_lr N, gemv_swiglu_normed_lr I, lm_head_lr V; unused by
    qkv_rope_normed_lr, whose W_qkv has 3072 rows)."""
    R = rows_per_task(component, provides)
    if component in ("gemv_residual_lr", "lm_head_lr"):
        return [[t * R + i if t * R + i < n else -1 for i in range(R)] for t in range(-(-n // R))]
    if component == "gemv_swiglu_normed_lr":  # gate rows, then the same columns' up rows (swiglu.cuh's row_of)
        cols = R // 2
        return [[(c if i < cols else n + c) if (c := t * cols + i % cols) < n else -1 for i in range(R)]
                for t in range(-(-n // cols))]
    if component == "qkv_rope_normed_lr":  # task (hd, j), row-major: rotation pairs (qkv_rope.cuh's row_of)
        pairs = R // 2
        return [[hd * HEAD_DIM + j * pairs + (i if i < pairs else HEAD_DIM // 2 + i - pairs) for i in range(R)]
                for hd in range(QKV_TASK_HEADS) for j in range(HEAD_DIM // R)]
    raise KeyError(f"{component}: not a loader-ring GEMV of this folder")


def packed_shape(component: str, n: int, K: int, provides: dict | None = None) -> tuple[int, int, int]:
    """[tasks, rows per task, padded K]: the extents of one layer's packed W (the contract's shape of `w`)."""
    return (len(task_rows(component, n, provides)), rows_per_task(component, provides), padded_k(K))


def source(rows: list[list[int]], K: int, index: int) -> tuple[int, int] | None:
    """Where element `index` of packed W comes from: (row, column) of W, or None for a zero of the padding."""
    R, kp = len(rows[0]), padded_k(K)
    t, rest = divmod(index, R * kp)
    blk, rest = divmod(rest, R * BLOCK)
    half, rest = divmod(rest, HALF * BLOCK)
    g, rest = divmod(rest, BLOCK)
    col = blk * BLOCK + rest  # rest = 8 q + e
    row = rows[t][half * HALF + g]
    return None if row < 0 or col >= K else (row, col)


def pack(w, component: str, n: int, provides: dict | None = None):
    """W ([..., rows, K] torch tensor, leading dims such as layers kept) packed for `component`:
    [..., tasks, rows per task, padded K], contiguous, on w's device."""
    import torch
    rows = task_rows(component, n, provides)
    T, R, K = len(rows), len(rows[0]), w.shape[-1]
    kp = padded_k(K)
    idx = torch.tensor(rows, dtype=torch.long, device=w.device)
    g = w.index_select(-2, idx.clamp(min=0).flatten()).unflatten(-2, (T, R))       # [..., T, R, K]
    g = torch.where((idx >= 0)[..., None], g, torch.zeros((), dtype=w.dtype, device=w.device))
    g = torch.nn.functional.pad(g, (0, kp - K))
    lead = g.shape[:-3]
    g = g.reshape(*lead, T, R // HALF, HALF, kp // BLOCK, BLOCK)                   # [..., t, half, g, blk, 32]
    nd = len(lead)
    g = g.permute(*range(nd), nd, nd + 3, nd + 1, nd + 2, nd + 4)                   # [..., t, blk, half, g, 32]
    return g.contiguous().reshape(*lead, T, R, kp)
