"""Shared fixtures: real objects built once per session with the pinned nvcc wheel."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

COMPONENT_SRC = """\
extern "C" __device__ void comp_scale(float* x, int n) { for (int i = 0; i < n; ++i) x[i] *= 2.0f; }
extern "C" __device__ float comp_helper(float a) { return a * 3.0f; }
"""

HOST_SRC = "int host_only(int a) { return a + 1; }\n"

# Two sections of one name: objcopy refuses to add a second, the assembler can (`unique`).
TWO_CONTRACTS_SRC = r"""
__asm__(".section .pipelink.contract,\"\",@progbits,unique,1\n.ascii \"first\"\n"
        ".section .pipelink.contract,\"\",@progbits,unique,2\n.ascii \"second\"\n.text\n");
"""

# name -> (source file, nvcc arguments); run in parallel, nvcc takes 1-2 s each.
NVCC_BUILDS = {
    "good.o": ("comp.cu", ["-dc", "-dlto", "-arch=sm_90"]),
    "nocompress.o": ("comp.cu", ["-dc", "-dlto", "-arch=sm_90", "-no-compress"]),
    "nolto.o": ("comp.cu", ["-dc", "-arch=sm_90"]),
    "sm80_fast.o": ("comp.cu", ["-dc", "-dlto", "-arch=sm_80", "-use_fast_math"]),
    "debug.o": ("comp.cu", ["-dc", "-G", "-arch=sm_90"]),  # nvcc refuses -G with -dlto
    "comp.fatbin": ("comp.cu", ["-fatbin", "-dlto", "-arch=sm_90"]),
    "comp.cubin": ("comp.cu", ["-cubin", "-rdc=true", "-arch=sm_90"]),
    "host.o": ("host.cpp", ["-c"]),
}


def _run(cmd, cwd, env=None):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed:\n{proc.stderr}")


@pytest.fixture(scope="session", autouse=True)
def link_cache_dir(tmp_path_factory):
    """The link cache of this test session: never the user's ~/.cache/pipelink, and empty at the start."""
    d = tmp_path_factory.mktemp("link-cache")
    before = os.environ.get("PIPELINK_CACHE_DIR")
    os.environ["PIPELINK_CACHE_DIR"] = str(d)
    yield d
    if before is None:
        os.environ.pop("PIPELINK_CACHE_DIR", None)
    else:
        os.environ["PIPELINK_CACHE_DIR"] = before


@pytest.fixture(scope="session")
def built_objects(tmp_path_factory) -> dict[str, Path]:
    from pipelink import toolchain

    d = tmp_path_factory.mktemp("objects")
    (d / "comp.cu").write_text(COMPONENT_SRC)
    (d / "host.cpp").write_text(HOST_SRC)
    env = toolchain.nvcc_env()
    procs = {name: subprocess.Popen([str(toolchain.nvcc_path()), *args, src, "-o", name], cwd=d, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, (src, args) in NVCC_BUILDS.items()}
    for name, proc in procs.items():
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"nvcc for {name} failed:\n{err}")
    paths = {name: d / name for name in NVCC_BUILDS}

    paths["comp.ltoir"] = d / "comp.ltoir"
    paths["comp.ltoir"].write_bytes(
        toolchain.nvrtc_to_ltoir(COMPONENT_SRC, "comp.cu", ["-arch=sm_90", "-dlto", "-rdc=true"]))

    shutil.copy(paths["good.o"], d / "x.o")
    shutil.copy(paths["sm80_fast.o"], d / "long_component_name.o")  # > 15 chars: GNU `//` name table
    _run(["ar", "rcs", "lib.a", "x.o", "long_component_name.o"], d)
    paths["lib.a"] = d / "lib.a"

    good = paths["good.o"].read_bytes()
    paths["half.o"] = d / "half.o"
    paths["half.o"].write_bytes(good[: len(good) // 2])

    paths["empty.o"] = d / "empty.o"
    paths["empty.o"].write_bytes(b"")
    paths["random.o"] = d / "random.o"
    paths["random.o"].write_bytes(bytes((i * 131 + 7) % 251 for i in range(4096)))
    paths["contract.json"] = d / "contract.json"
    paths["contract.json"].write_text('{"pipelink": 1, "name": "comp"}\n')

    if shutil.which("gcc"):
        (d / "two.c").write_text(TWO_CONTRACTS_SRC)
        _run(["gcc", "-c", "two.c", "-o", "two_contracts.o"], d)
        paths["two_contracts.o"] = d / "two_contracts.o"
    return paths


@pytest.fixture(scope="session")
def shipped_objects(tmp_path_factory) -> dict[str, Path]:
    """The shipped components, built with `pipelink build` (contract embedded), by name."""
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.harness.shipped import build_shipped

    d = tmp_path_factory.mktemp("shipped")
    sink = DiagnosticSink()
    objects = build_shipped(d, sink, log=lambda *_: None)
    assert not sink.items, [x.render() for x in sink.items]
    return {o.stem: o for o in objects}


def pytest_collection_modifyitems(config, items):
    """GPU tests (marker `gpu`) run where a GPU is present and are skipped elsewhere."""
    gpu_items = [i for i in items if i.get_closest_marker("gpu")]
    if not gpu_items:
        return
    from pipelink.runtime.launch import gpu_available
    if gpu_available():
        return
    skip = pytest.mark.skip(reason="no GPU on this machine")
    for item in gpu_items:
        item.add_marker(skip)
