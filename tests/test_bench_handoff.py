"""bench/handoff (a GPU benchmark): every kernel of it compiles for sm_90a without spilling (the protocols, and the
stream through the hand-off with its waiter warps), and the host's x after some rounds is the kernels' rule applied
step by step."""
import re
import subprocess
from pathlib import Path

import numpy as np

from pipelink import toolchain
from pipelink.authoring.builder import pipelink_include_dir

from casestudy import case_module

BENCH = Path(__file__).resolve().parent.parent / "bench" / "handoff"
KERNELS = {"counter_rounds", "release_rounds", "spread_rounds", "tagged_rounds", "counter_bg_rounds",
           "waiter_bg_rounds"}


def test_every_kernel_compiles_without_a_frame(tmp_path):
    proc = subprocess.run([str(toolchain.nvcc_path()), "-arch=sm_90a", "-cubin", "-O3", f"-I{pipelink_include_dir()}",
                           "-Xptxas", "-v", "-o", str(tmp_path / "k.cubin"), str(BENCH / "handoff.cu")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    compiled = set(re.findall(r"Compiling entry function '(\w+)'", proc.stderr))
    assert compiled == KERNELS, compiled
    frames = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores", proc.stderr)
    assert len(frames) == len(KERNELS) and all(f == ("0", "0") for f in frames), proc.stderr


def test_the_host_rule_is_the_kernels_word_by_word():
    m = case_module(BENCH, "handoff")
    x0 = np.arange(16, dtype=np.uint32) * np.uint32(977) + np.uint32(5)
    x = [int(v) for v in x0]
    for r in range(1, 4):
        s = sum(x) % (1 << 32)
        x = [(s * 2654435761 + r * 131 + i) % (1 << 32) for i in range(len(x))]
    assert np.array_equal(m.expected(x0, 3), np.array(x, dtype=np.uint32))
