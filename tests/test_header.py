"""The generated component header: deterministic, complete, and valid CUDA C++ (NVRTC compiles it)."""
import re
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


def _nvrtc_errors(src: str, tmp_path) -> str:
    """NVRTC's log for `src` compiled as a component is (the pipelink and CUDA headers on its path); '' if it compiles."""
    try:
        toolchain.nvrtc_to_ltoir(src, "use.cu", ["-arch=sm_90", "-dlto", "-rdc=true", "-std=c++17", f"-I{tmp_path}",
                                                 f"-I{pipelink_include_dir()}"])
    except toolchain.ToolchainError as exc:
        return exc.log or exc.message
    return ""


def test_the_members_of_pl_are_read_from_the_headers_as_the_compiler_sees_them(tmp_path):
    """identifiers.pl_members() reads pipelink's headers; the compiler is the judge of what they declare in `pl`.
    Every identifier the headers spell anywhere is tried as a namespace inside `pl`: exactly the members read from
    the headers that are no namespaces are redeclared (an error), and every namespace read is one (it reopens)."""
    from pipelink.core import identifiers
    members = identifiers.pl_members()
    assert {"Tile", "TensorMap", "warp_index", "dynamic_smem", "profile_mark", "kProfileMarks", "tma_store_chunks"} <= \
        {n for n, (what, _) in members.items() if what != "namespace"}
    assert {"ring", "frag", "glue", "events", "profile"} <= {n for n, (what, _) in members.items() if what == "namespace"}
    texts = [p.read_text() for p in sorted((pipelink_include_dir() / "pipelink").glob("*.h"))]
    candidates = sorted({t for text in texts for t in re.findall(r"\b[A-Za-z_]\w*\b", text)
                         if identifiers.problem(t, "whole") is None and t not in ("pl", "pl_component")})
    head = ["#include <pipelink/component.h>", "#include <pipelink/fragment.h>", "#include <pipelink/glue.h>",
            "#include <pipelink/events.h>"]  # remote.h needs NVSHMEM's headers; it declares the namespace pl::remote
    lines = head + [f"namespace pl {{ namespace {n} {{ }} }}" for n in candidates]
    log = _nvrtc_errors("\n".join(lines) + "\n", tmp_path)
    failed = {candidates[int(m.group(1)) - len(head) - 1] for m in re.finditer(r"^use\.cu\((\d+)\): error", log, re.M)}
    assert failed == {n for n, (what, _) in members.items() if what != "namespace"}, log[:2000]
    assert {n for n, (what, _) in members.items() if what == "namespace"} - {"remote"} <= set(candidates) - failed


@pytest.mark.parametrize("name, edit", [
    ("Tile", None), ("warp_index", None), ("TensorMap", None),
    ("ring", lambda c: c["geometry"]["provides"].update(index=2))])  # reopened: its index() meets the geometry
def test_a_component_named_as_a_member_of_pl_is_refused_at_its_name(name, edit, tmp_path):
    """Such a component had passed `pipelink check` and then failed its build in the generated header."""
    import dataclasses
    raw = base_contract()
    if edit:
        edit(raw)
    fine = load(raw)
    c = dataclasses.replace(fine, name=name, raw=dict(fine.raw, name=name))  # the header as it was generated
    (tmp_path / f"{name}.pipelink.h").write_text(generate_header(c))
    assert "error" in _nvrtc_errors(f'#include "{name}.pipelink.h"\n', tmp_path)
    raw["name"] = name
    sink = DiagnosticSink()
    assert load_contract_bytes(dumps(raw), Source("c.json"), sink) is None
    assert [(d.code, d.location.pointer) for d in sink.errors] == [("PL188", "/name")]
    assert f"pl::{name}" in sink.errors[0].message


def test_names_of_pl_members_are_harmless_inside_the_components_namespace(tmp_path):
    """Geometry, roles, buffers and entry symbols live in pl::<name>, or at global scope: `pl`'s members do not meet
    them (the header names them qualified), so they load and compile; so does a component name near one."""
    raw = base_contract(name="Tiles")
    raw["geometry"]["provides"].update(Tile=2, warp_index=1)
    raw["threads"]["roles"][1]["name"] = "dynamic_smem"
    raw["smem"]["buffers"][1]["name"] = "ring"
    raw["entry"]["symbol"] = "lane_index"
    c = load(raw)
    (tmp_path / "Tiles.pipelink.h").write_text(generate_header(c))
    assert _nvrtc_errors('#include "Tiles.pipelink.h"\nusing namespace pl::Tiles;\n'
                         'static_assert(Tile == 2 && warp_index == 1, "the component\'s own");\n', tmp_path) == ""


def test_a_name_the_build_defines_as_a_macro_is_refused_at_its_field(tmp_path):
    """`pipelink build` defines PIPELINK_HEADER on nvcc's command line, in no header pipelink reads: a component
    named so had passed `pipelink check`, then failed its build in the generated header (namespace "x.pipelink.h")."""
    raw = base_contract()
    fine = load(raw)
    (tmp_path / "h.pipelink.h").write_text(generate_header(fine).replace(f"namespace {fine.name}", "namespace PIPELINK_HEADER"))
    assert "error" in _nvrtc_errors('#define PIPELINK_HEADER "h.pipelink.h"\n#include PIPELINK_HEADER\n', tmp_path)
    for pointer, edit in (("/name", lambda r: r.update(name="PIPELINK_HEADER")),
                          ("/entry/symbol", lambda r: r["entry"].update(symbol="PIPELINK_HEADER"))):
        raw = base_contract()
        edit(raw)
        sink = DiagnosticSink()
        assert load_contract_bytes(dumps(raw), Source("c.json"), sink) is None
        assert [(d.code, d.location.pointer) for d in sink.errors] == [("PL188", pointer)], [d.render() for d in sink.items]
        assert "pipelink build" in sink.errors[0].message
