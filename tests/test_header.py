"""The generated component header: deterministic, complete, and valid CUDA C++ (NVRTC compiles it)."""
from pathlib import Path

import pytest

from contract_factory import base_contract, dumps
from pipelink import toolchain
from pipelink.authoring.builder import pipelink_include_dir
from pipelink.authoring.header import constant_symbols, entry_prototype, generate_header, marker_symbol
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.loader import load_contract_bytes, load_contract_file
from pipelink.core.model import Source

REPO = Path(__file__).resolve().parent.parent
SHIPPED = sorted(p for p in (REPO / "contracts").glob("*.json") if not p.name.endswith(".schema.json"))


def load(raw):
    sink = DiagnosticSink()
    c = load_contract_bytes(dumps(raw), Source("c.json"), sink)
    assert c is not None, [d.render() for d in sink.items]
    return c


def test_everything_the_contract_decides_is_a_link_time_constant():
    c = load(base_contract())
    syms = constant_symbols(c)
    assert set(syms) == {
        "pl_comp__warp_begin", "pl_comp__role_begin__producer", "pl_comp__role_begin__consumer",
        "pl_comp__smem__stage", "pl_comp__smem__temp", "pl_comp__port__out", "pl_comp__port_stride__out",
        "pl_comp__bar__ready", "pl_comp__mbar__full", "pl_comp__geom__TILE_N", "pl_comp__profile_mark"}
    header = generate_header(c)
    for sym, ctype in syms.items():
        assert f"__device__ extern const {ctype} {sym};" in header
    assert "constexpr int TILE_M = 64;" in header          # provided: compile-time
    assert "int TILE_N() { return pl_comp__geom__TILE_N; }" in header  # consumed: link-time
    assert "void profile_mark(int i) { pl::profile_mark(pl_comp__profile_mark, i); }" in header
    assert f'extern "C" __device__ const unsigned {marker_symbol(c)} = 1u;' in header
    assert marker_symbol(c) == f"pl_comp__contract__{c.hash[:16]}"


def test_entry_prototype():
    c = load(base_contract())
    assert entry_prototype(c) == ('extern "C" __device__ void comp_entry(pl::Tile tile, const float* __restrict__ x, '
                                  'int* __restrict__ topk, int M)')
    raw = base_contract()
    raw["entry"]["invocation"] = "per_cta"
    assert "(const float* __restrict__ x" in entry_prototype(load(raw))


def test_deterministic_and_hash_sensitive():
    a = generate_header(load(base_contract()))
    assert a == generate_header(load(base_contract()))
    assert a != generate_header(load(base_contract(version="1.0.1")))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_headers_compile_with_nvrtc(path, tmp_path):
    sink = DiagnosticSink()
    c = load_contract_file(path, sink)
    (tmp_path / f"{c.name}.pipelink.h").write_text(generate_header(c))
    src = f'#include "{c.name}.pipelink.h"\n'
    arch = "sm_90" if "sm_90" in c.targets.archs else c.targets.archs[0]
    toolchain.nvrtc_to_ltoir(src, "use.cu", [f"-arch={arch}", "-dlto", "-rdc=true", "-std=c++17",
                                             f"-I{tmp_path}", f"-I{pipelink_include_dir()}",
                                             *(f"-I{d}" for d in toolchain.cuda_include_dirs())])


def test_factory_header_compiles_and_accessors_work(tmp_path):
    c = load(base_contract())
    (tmp_path / "comp.pipelink.h").write_text(generate_header(c))
    src = """#include "comp.pipelink.h"
using namespace pl::comp;
extern "C" __device__ void comp_entry(pl::Tile tile, const float* __restrict__ x, int* __restrict__ topk, int M) {
  float* out = port_out(tile.stage);
  float4* stage = smem_stage<float4>();
  static_assert(smem_temp_bytes == 256, "constant sizes are constexpr");
  if (warp_rank() < PRODUCER_WARPS) out[thread_rank()] = x[tile.coord[0] * TILE_M] + TILE_N();
  sync_ready();
  stage[0].x = *mbar_full() + topk[0] + M + port_out_extent1();
}
"""
    toolchain.nvrtc_to_ltoir(src, "use.cu", ["-arch=sm_90", "-dlto", "-rdc=true", "-std=c++17",
                                             f"-I{tmp_path}", f"-I{pipelink_include_dir()}"])


def test_wrong_entry_signature_does_not_compile(tmp_path):
    c = load(base_contract())
    (tmp_path / "comp.pipelink.h").write_text(generate_header(c))
    src = '#include "comp.pipelink.h"\nextern "C" __device__ void comp_entry(pl::Tile tile, int M) {}\n'
    with pytest.raises(toolchain.ToolchainError):
        toolchain.nvrtc_to_ltoir(src, "use.cu", ["-arch=sm_90", "-dlto", "-rdc=true", "-std=c++17",
                                                 f"-I{tmp_path}", f"-I{pipelink_include_dir()}"])
