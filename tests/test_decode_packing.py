"""W packed for the decode case study's loader-ring GEMVs (case_studies/llama32_1b_decode/linear/packing.py), on the
CPU: the layout's pure parts. That `pack` (torch) follows `source`, and that the `_lr` kernels read what it packs, is
tests/test_gpu_decode_rings.py's."""
import json
import sys
from pathlib import Path

import pytest

CASE = Path(__file__).resolve().parent.parent / "case_studies" / "llama32_1b_decode"
sys.path.insert(0, str(CASE))

import decode_model  # noqa: E402
from linear import packing  # noqa: E402
from pipelink.core.expr import parse  # noqa: E402

CASES = [("gemv_residual_lr", 1000, 40), ("gemv_residual_lr", 48, 2048), ("gemv_swiglu_normed_lr", 1001, 72),
         ("gemv_swiglu_normed_lr", 16, 64), ("qkv_rope_normed_lr", 0, 40), ("lm_head_lr", 1001, 2056)]


def _rows_of_w(component, n):
    return 3072 if component.startswith("qkv") else 2 * n if "swiglu" in component else n


@pytest.mark.parametrize("component,n,K", CASES, ids=str)
def test_every_element_of_w_is_packed_once(component, n, K):
    rows = packing.task_rows(component, n)
    T, R, kp = packing.packed_shape(component, n, K)
    assert (T, R) == (len(rows), len(rows[0])) and kp % 32 == 0 and K <= kp < K + 32
    seen = set()
    for i in range(T * R * kp):
        s = packing.source(rows, K, i)
        if s is not None:
            assert s not in seen and 0 <= s[0] < _rows_of_w(component, n) and 0 <= s[1] < K
            seen.add(s)
    assert len(seen) == _rows_of_w(component, n) * K


@pytest.mark.parametrize("component,n,K", CASES, ids=str)
def test_a_warp_reads_a_rows_32_columns_from_one_block(component, n, K):
    """The walk's read (gemv.cuh's rows_ring): lane 4 g + q of a warp reads, for 32-wide block blk and 8-row half h,
    the 16 bytes at ((blk * halves + h) * 32 + lane) * 16 of the task: columns 32 blk + 8 q .. + 7 of the half's
    row g."""
    rows = packing.task_rows(component, n)
    T, R, kp = packing.packed_shape(component, n, K)
    halves = R // 8
    for t in (0, T - 1):
        for blk in range(kp // 32):
            for h in range(halves):
                for lane in range(32):
                    g, q = lane // 4, lane % 4
                    first = t * R * kp + ((blk * halves + h) * 32 + lane) * 8
                    for e in range(8):
                        row, col = rows[t][h * 8 + g], blk * 32 + 8 * q + e
                        want = None if row < 0 or col >= K else (row, col)
                        assert packing.source(rows, K, first + e) == want


def test_task_rows_follow_the_components_row_order():
    """The rows a task multiplies, as the components' row_of (qkv_rope.cuh: a task's rotation pairs, swiglu.cuh:
    gate rows then their up rows, gemv: consecutive rows)."""
    qkv = packing.task_rows("qkv_rope_normed_lr", 0)
    R = packing.rows_per_task("qkv_rope_normed_lr")
    assert len(qkv) == 48 * (64 // R) and qkv[1][:R // 2] == list(range(R // 2, R)) and qkv[1][R // 2] == 32 + R // 2
    assert sorted(r for t in qkv for r in t) == list(range(3072))
    sw = packing.task_rows("gemv_swiglu_normed_lr", 20, {"SWIGLU_COLS": 8})  # I = 20: the last task has 4 columns
    assert sw == [[*range(0, 8), *range(20, 28)], [*range(8, 16), *range(28, 36)],
                  [16, 17, 18, 19, -1, -1, -1, -1, 36, 37, 38, 39, -1, -1, -1, -1]]
    assert packing.task_rows("lm_head_lr", 17, {"LM_ROWS": 16}) == [list(range(16)), [16] + [-1] * 15]


def test_the_rows_per_task_are_the_linked_kernels():
    """A kernel linked with other contract values (run.py --values) has W packed for its own rows per task."""
    assert packing.rows_per_task("lm_head_lr", {"LM_ROWS": 32}) == 32
    assert packing.rows_per_task("gemv_swiglu_normed_lr", {"SWIGLU_COLS": 16}) == 32
    assert packing.packed_shape("qkv_rope_normed_lr", 0, 2048, {"QKV_ROWS": 16}) == (192, 16, 2048)
    doc = json.loads((CASE / "linear" / "lm_head_lr.json").read_text())
    assert packing.rows_per_task("lm_head_lr") == doc["geometry"]["provides"]["LM_ROWS"]


@pytest.mark.parametrize("component", ["gemv_residual_lr", "gemv_swiglu_normed_lr", "qkv_rope_normed_lr", "lm_head_lr"])
def test_the_contract_declares_the_packed_shape(component):
    """The component's contract shape of `w` is packing's (the stacked layers' stride comes from it)."""
    doc = json.loads((CASE / "linear" / f"{component}.json").read_text())
    w = doc["entry"]["params"][0]
    assert w["name"] == "w"
    name = {"gemv_residual_lr": "N", "lm_head_lr": "V", "gemv_swiglu_normed_lr": "I", "qkv_rope_normed_lr": None}[component]
    for n, K in ((1000, 40), (2048, 8192)):
        env = dict(doc["geometry"]["provides"], K=K, **({name: n} if name else {}))
        assert tuple(parse(e).evaluate(env) for e in w["shape"]) == packing.packed_shape(component, n, K)


def test_the_model_packs_every_weight_an_lr_gemv_reads():
    shapes = decode_model.packed_weight_shapes()
    full = decode_model.weight_shapes()
    assert set(shapes) == set(decode_model.PACKED_WEIGHTS)
    for name, (src, _, _) in decode_model.PACKED_WEIGHTS.items():
        n = 1
        for e in shapes[name]:
            n *= e
        m = 1
        for e in full[src]:
            m *= e
        assert n == m, name  # the model's sizes need no padding
