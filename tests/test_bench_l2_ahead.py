"""bench/l2_ahead (a GPU benchmark): its kernel compiles for sm_90a without spilling, and the host's closed-form
check of what each CTA drains matches the sum over the words themselves."""
import subprocess
from pathlib import Path

import numpy as np

from pipelink import toolchain
from pipelink.authoring.builder import pipelink_include_dir

from casestudy import case_module

BENCH = Path(__file__).resolve().parent.parent / "bench" / "l2_ahead"


def _module():
    return case_module(BENCH, "l2_ahead")


def test_the_kernel_compiles_without_a_frame(tmp_path):
    proc = subprocess.run([str(toolchain.nvcc_path()), "-arch=sm_90a", "-cubin", "-O3", f"-I{pipelink_include_dir()}",
                           "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"), str(BENCH / "l2_ahead.cu")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes stack frame, 0 bytes spill stores" in proc.stderr, proc.stderr


def test_the_drained_sums_in_closed_form():
    m = _module()
    w_bytes, per_round, ctas, rounds = 1 << 20, 3 * m.SLOT, 5, 7
    w = np.arange(w_bytes // 4, dtype=np.uint64) * m.GOLDEN % (1 << 32)
    modulus = w_bytes // per_round * per_round
    want = []
    for cta in range(ctas):
        starts = [((r * ctas + cta) * per_round % modulus) // 4 for r in range(rounds)]
        want.append(sum(int(w[a:a + per_round // 4].sum()) for a in starts) % (1 << 32))
    assert np.array_equal(m.expected_sums(ctas, rounds, per_round, w_bytes), np.array(want, dtype=np.uint32))
    assert not m.expected_sums(ctas, rounds, 0, w_bytes).any()
