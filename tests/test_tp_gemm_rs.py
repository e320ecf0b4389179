"""The tensor-parallel GEMM + reduce-scatter case study (case_studies/tp_gemm_rs): the collective team's
epilogue (reduce-scatter through NVSHMEM in the GEMM's epilogue) builds against the pinned NVSHMEM and links
with the CUTLASS mainloop into one distributed kernel; its contract sizes buffers by the world. On a GPU: the
case study's run in a world of one (correct against fp32; the multi-GPU run needs several GPUs)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelink import toolchain
from pipelink.authoring.builder import build_component, cutlass_include_dir
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.loader import load_contract_file
from pipelink.core.pipeline import load_pipeline
from pipelink.harness.shipped import REPO
from pipelink.linker.passes import LinkOptions, link

STUDY = REPO / "case_studies" / "tp_gemm_rs"
TILE = "64x128"  # the mainloop shape the other CUTLASS tests build too (one build a session)


def _build(name: str, contract: Path, source: Path, out: Path, opts=None) -> Path:
    sink = DiagnosticSink()
    c = load_contract_file(contract, sink)
    assert c is not None and build_component(c, contract.read_bytes(), source, out, sink, opts), \
        [d.render() for d in sink.items]
    return out


@pytest.fixture(scope="module")
def linked(tmp_path_factory):
    if cutlass_include_dir() is None:
        pytest.skip("the pinned nvidia-cutlass headers are not installed")
    try:
        toolchain.nvshmem_root()
    except toolchain.ToolchainError as exc:  # the epilogue includes NVSHMEM's device headers
        pytest.skip(f"the pinned NVSHMEM is not on this machine ({exc.message}; PIPELINK_NVSHMEM_HOME)")
    d = tmp_path_factory.mktemp("tp_rs")
    import pipelink  # `pipelink build`'s path: the object is checked as `pipelink check` would before it is written
    epi = pipelink.build(STUDY / "collective" / "epi_rs_owner.cu", STUDY / "collective" / "epi_rs_owner.json",
                         d / "epi_rs_owner.o", include_dirs=[str(toolchain.nvshmem_root() / "include")])
    gemm = _build(f"hopper_gemm_{TILE}", REPO / "contracts" / f"hopper_gemm_{TILE}.json",
                  REPO / "components" / "hopper_gemm" / "hopper_gemm.cu", d / f"hopper_gemm_{TILE}.o")
    sink = DiagnosticSink()
    spec = load_pipeline(str(STUDY / "pipelines" / f"tp_rs_{TILE}.json"), sink)
    assert spec is not None, [x.render() for x in sink.items]
    result = link([str(gemm), str(epi)], LinkOptions(pipeline=spec, cache=False))
    assert result.ok, [x.render() for x in result.diagnostics]
    return result


def test_the_epilogue_reduce_scatter_links_with_the_cutlass_mainloop_into_one_distributed_kernel(linked):
    m = linked.manifest
    assert m.distributed and m.schedule == "warp_specialized" and m.target == "sm_90a"
    assert [p.name for p in m.user_params] == ["a", "b", "M", "N", "K", "y", "parts", "flags", "epoch", "spin_bound", "report"]
    assert m.resources.frame_bytes <= 256  # NVSHMEM's calls keep a small stack
    assert "#include <pipelink/remote.h>" in linked.glue  # RANK and WORLD, NVSHMEM's device library linked
    y = next(p for p in m.params if p.name == "y")
    assert [str(e) for e in y.tensor_map.shape] == ["M // WORLD", "N"]  # this rank's rows, sized by the world


def test_check_reads_a_component_calling_nvshmem(linked):
    """Its probes link NVSHMEM's device library, as the distributed link does (they had failed: PL015, PL074)."""
    import pipelink
    (epi,) = [c.object for c in linked.manifest.components if c.name == "epi_rs_owner"]
    result = pipelink.check([epi])
    assert [s.target for s in result.sets] == ["sm_90a"] and not result.diagnostics


def test_a_buffer_sized_by_the_world_makes_a_link_distributed():
    # nothing else in the epilogue's contract names the world: its buffers' extents do
    doc = json.loads((STUDY / "collective" / "epi_rs_owner.json").read_text())
    assert "WORLD" in json.dumps(doc["params"]) and "events" not in doc
    from pipelink.core.loader import load_contract_dict
    from pipelink.core.model import Component, Source
    from pipelink.linker.events import distributed_use
    sink = DiagnosticSink()
    c = load_contract_dict(doc, Source("epi_rs_owner.json"), sink)
    assert c is not None, [d.render() for d in sink.items]
    assert distributed_use([Component(c, None)], {}) == ("epi_rs_owner", "/params/0/tensor_map/shape")


@pytest.mark.gpu
def test_the_case_study_is_correct_in_a_world_of_one(linked, tmp_path):
    try:
        toolchain.nvshmem_root()
    except toolchain.ToolchainError as exc:
        pytest.skip(f"the pinned NVSHMEM is not on this machine ({exc.message}; PIPELINK_NVSHMEM_HOME)")
    pytest.importorskip("torch")
    linked.save(tmp_path)  # as build.py saves it: run.py loads tp_rs_<tile>.cubin with its manifest
    env = {**os.environ, "NVSHMEM_DISABLE_NVLS": "1", "NCCL_NVLS_ENABLE": "0"}
    proc = subprocess.run([sys.executable, str(STUDY / "run.py"), "--quick", "--tile", TILE, "--build", str(tmp_path),
                           "--out", str(tmp_path)], capture_output=True, text=True, env=env,
                          timeout=400)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "summary: tp gemm+rs world 1" in out, out[-4000:]
