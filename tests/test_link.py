"""The link end to end on the shipped components: cubins, attributes, determinism, the one-unit
control, golden link maps, and the conflicts that must be rejected. No GPU needed."""
import json
import os
from pathlib import Path

import pytest

from pipelink.cli import main
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.pipeline import load_pipeline
from pipelink.formats.cubin import read_cubin
from pipelink.formats.inputs import embed_contract
from pipelink.harness.shipped import REPO, shipped_pipelines
from pipelink.linker.monolithic import compare_text
from pipelink.linker.passes import LinkOptions, link
from pipelink.linker.verify import MATH_SUBROUTINE

PIPELINES = {p.name: p for p in shipped_pipelines()}
GOLDEN = Path(__file__).parent / "golden"


def link_shipped(objects, name, extra=(), **files):
    pipe = PIPELINES[name]
    sink = DiagnosticSink()
    spec = load_pipeline(pipe.path, sink)
    inputs = [str(files.get(n, objects[n])) for n in pipe.components]
    # no cache: tests read result.context (allocation, nvjitlink_options), and a second link must really link
    return link(inputs, LinkOptions(pipeline=spec, monolithic=True, cache=False), extra=extra)


@pytest.fixture(scope="module")
def linked(shipped_objects):
    """Every shipped pipeline linked, with its one-unit control (the optional `control` pass)."""
    return {name: link_shipped(shipped_objects, name, extra=("control",)) for name in PIPELINES}


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_link_produces_a_verified_kernel(linked, name):
    result = linked[name]
    assert result.ok, [d.render() for d in result.diagnostics]
    assert not [d for d in result.diagnostics if d.severity == "warning"], [d.render() for d in result.diagnostics]
    info = read_cubin(result.cubin)[name]
    m = result.manifest
    assert m.kernel == name
    # a register budget is the kernel's __maxnreg__, which excludes __launch_bounds__
    assert info.max_threads is None if result.context.allocation.registers else m.block[0] == info.max_threads[0]
    assert info.registers <= result.context.allocation.registers
    assert info.frame_bytes == 0 and info.static_smem_bytes == 0
    # nothing left uninlined but the compiler's own math subroutines (IEEE division's slow path)
    assert all(n.startswith(MATH_SUBROUTINE) for n in info.subroutines)
    assert m.dynamic_smem > 0 and m.cubin_sha256


def test_rowsum_uses_only_syncthreads(linked):
    info = read_cubin(linked["rowsum"].cubin)["rowsum"]
    assert info.num_barriers == 1


def test_identical_inputs_give_identical_cubins(shipped_objects, linked):
    again = link_shipped(shipped_objects, "ring_gemv")
    assert again.cubin == linked["ring_gemv"].cubin


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_one_unit_control_gives_the_same_machine_code(linked, name):
    """The same sources and glue compiled as one translation unit (by nvcc, as `pipelink build`
    compiles the components): byte-identical kernel .text."""
    result = linked[name]
    cmp = compare_text(result.cubin, result.context.control_cubin, name)
    assert cmp["linked_bytes"] > 1000
    assert cmp["identical"], cmp


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_golden_link_map(linked, name):
    """The link map is stable: same inputs, same layout. PIPELINK_UPDATE_GOLDEN=1 rewrites it."""
    golden = GOLDEN / f"{name}.map"
    text = linked[name].link_map
    if os.environ.get("PIPELINK_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_cli_link_writes_cubin_manifest_map(shipped_objects, tmp_path, capsys):
    pipe = PIPELINES["rowsum"]
    out = tmp_path / "rowsum.cubin"
    code = main(["link", "--pipeline", str(pipe.path), *(str(shipped_objects[n]) for n in pipe.components),
                 "-o", str(out), "--map", str(tmp_path / "rowsum.map"), "--emit-monolithic",
                 str(tmp_path / "one.cu"), "--emit-glue", str(tmp_path / "glue.cu"), "-v", "--time", "--no-cache"])
    o, err = capsys.readouterr()
    assert code == 0, err
    assert "linked" in o and "pass resolve" in err and "wire tile_load.tile -> tile_transform.src (explicit, zero_copy)" in o
    manifest = json.loads((tmp_path / "rowsum.json").read_text())
    assert manifest["params"][0] == {"name": "x", "dtype": "f32", "pointer": True, "const": True}
    assert manifest["tiles"] == ["ceil_div(M, 32)", "ceil_div(N, 128)"]
    assert (tmp_path / "rowsum.map").read_text().startswith("# pipelink link map: kernel rowsum")
    assert "namespace pl_unit_block_rowsum" in (tmp_path / "one.cu").read_text()

    # inspect reads the manifest written next to the cubin: how to call the kernel
    assert main(["inspect", str(out)]) == 0
    o, _ = capsys.readouterr()
    assert "call     rowsum(const f32* x, i32 M, i32 N, f32 scale, f32* out)" in o
    assert "tiles ceil_div(M, 32) * ceil_div(N, 128)" in o
    assert main(["inspect", "--format", "json", str(out)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inputs"][0]["manifest"]["matches_cubin"] is True
    # blocks an SM and the L1 they leave, from the manifest's block and smem and the cubin's registers
    res = doc["inputs"][0]["manifest"]["residency"]
    assert res["target"] == manifest["target"] and res["blocks_per_sm"] >= 1 and res["limited_by"]
    assert res["shared_per_sm"] + res["l1_bytes"] == 256 * 1024
    assert f"resident {res['blocks_per_sm']} block" in o and f"L1 data cache {res['l1_bytes'] // 1024} KB" in o

    manifest["cubin_sha256"] = "0" * 64  # a manifest from another link
    (tmp_path / "rowsum.json").write_text(json.dumps(manifest))
    assert main(["inspect", str(out)]) == 0
    o, err = capsys.readouterr()
    assert "(written for another cubin)" in o and "warning[PL035]" in err
    other = tmp_path / "other.json"
    other.write_text(json.dumps(manifest))
    assert main(["inspect", str(out), "--manifest", str(other)]) == 0  # the cubin's name, not the manifest's
    assert f"{other} was written for another cubin than {out.name}" in capsys.readouterr().err

    (tmp_path / "rowsum.json").write_text(json.dumps({"kernel": "rowsum", "block": [0]}))  # not a manifest
    assert main(["inspect", str(out)]) == 2
    assert "error[PL009]" in capsys.readouterr().err


def _variant(tmp_path, name, edit, source=None):
    """A component rebuilt with an edited contract (and, if given, its own source): a team's change."""
    raw = json.loads((REPO / "contracts" / f"{name}.json").read_text())
    edit(raw)
    cpath = tmp_path / f"{name}.json"
    cpath.write_text(json.dumps(raw))
    src = REPO / "components" / name / f"{name}.cu"
    if source is not None:
        src = tmp_path / f"{name}.cu"
        src.write_text(source)
    obj = tmp_path / f"{name}.o"
    assert main(["build", str(src), "--contract", str(cpath), "-o", str(obj), "--arch", "sm_90"]) == 0
    return obj


def _link_fails(shipped_objects, tmp_path, pipeline, code, *variants):
    files = {name: path for name, path in variants}
    out = tmp_path / "out.cubin"
    pipe = PIPELINES[pipeline]
    argv = ["link", "--pipeline", str(pipe.path), "-o", str(out), "--map", str(tmp_path / "out.map")]
    argv += [str(files.get(n, shipped_objects[n])) for n in pipe.components]
    rc = main(argv)
    assert rc == 1
    assert not out.exists() and not (tmp_path / "out.map").exists() and not (tmp_path / "out.json").exists()
    result = link_shipped(shipped_objects, pipeline, **files)
    assert code in [d.code for d in result.diagnostics], [d.render() for d in result.diagnostics]
    return result


def test_conflict_hardcoded_barrier_ids(shipped_objects, tmp_path):
    a = _variant(tmp_path, "ring_load", lambda c: c.update(barriers={"hardcoded_ids": [3]}))
    (tmp_path / "b").mkdir()
    b = _variant(tmp_path / "b", "ring_dot", lambda c: c.update(barriers={"hardcoded_ids": [3]}))
    _link_fails(shipped_objects, tmp_path, "ring_gemv", "PL045", ("ring_load", a), ("ring_dot", b))


def test_conflict_smem_over_the_limit(shipped_objects, tmp_path):
    """A contract whose ports alone exceed the device: `pipelink build` refuses it, as `check` does, so
    the object carries it only by hand (objcopy); the link refuses it too."""
    raw = json.loads((REPO / "contracts" / "ring_load.json").read_text())
    raw["geometry"]["provides"].update(STAGES=8, TILE_N=1024)
    cpath, obj = tmp_path / "ring_load.json", tmp_path / "ring_load.o"
    cpath.write_text(json.dumps(raw))
    assert main(["build", str(REPO / "components/ring_load/ring_load.cu"), "--contract", str(cpath),
                 "-o", str(obj), "--arch", "sm_90"]) == 1 and not obj.exists()
    embed_contract(shipped_objects["ring_load"], json.dumps(raw).encode(), obj)
    _link_fails(shipped_objects, tmp_path, "ring_gemv", "PL042", ("ring_load", obj))


def test_conflict_dtype_on_a_wire(shipped_objects, tmp_path):
    def bf16(c):
        c["ports"][0]["dtype"] = "bf16"
    source = """#include "ring_dot.pipelink.h"
using namespace pl::ring_dot;
extern "C" __device__ void ring_dot(pl::Tile tile, const float* __restrict__ w, float* __restrict__ out, int M, int N) {
  const __nv_bfloat16* t = port_tiles(tile.stage);
  if (pl::lane_index() == 0) out[tile.linear] = __bfloat162float(t[0]) * w[0];
}
"""
    obj = _variant(tmp_path, "ring_dot", bf16, source)
    _link_fails(shipped_objects, tmp_path, "ring_gemv", "PL063", ("ring_dot", obj))


def test_conflict_tile_order(shipped_objects, tmp_path):
    obj = _variant(tmp_path, "ring_dot", lambda c: c["geometry"]["tile_sequence"].update(order="col_major"))
    _link_fails(shipped_objects, tmp_path, "ring_gemv", "PL067", ("ring_dot", obj))


def test_conflict_geometry_outside_consumer_range(shipped_objects, tmp_path):
    obj = _variant(tmp_path, "ring_load", lambda c: c["geometry"]["provides"].update(TILE_N=2048, STAGES=1))
    _link_fails(shipped_objects, tmp_path, "ring_gemv", "PL051", ("ring_load", obj))


def test_conflict_stale_component_build(shipped_objects, tmp_path):
    raw = json.loads((REPO / "contracts" / "tile_transform.json").read_text())
    raw["geometry"]["consumes"]["TILE_M"]["max"] = 128
    stale = tmp_path / "tile_transform.o"
    embed_contract(shipped_objects["tile_transform"], json.dumps(raw).encode(), stale)
    result = _link_fails(shipped_objects, tmp_path, "rowsum", "PL049", ("tile_transform", stale))
    assert "not compiled against this contract" in result.diagnostics[0].message


def test_missing_entry_symbol_is_explained_after_the_link_fails(shipped_objects, tmp_path):
    """The link runs no probe for good objects; when nvJitLink fails, probes say which object lacks what."""
    raw = json.loads((REPO / "contracts" / "tile_transform.json").read_text())
    raw["entry"]["symbol"] = "tile_transform_v2"
    obj = tmp_path / "tile_transform.o"
    embed_contract(shipped_objects["tile_transform"], json.dumps(raw).encode(), obj)
    result = link_shipped(shipped_objects, "rowsum", tile_transform=obj)
    codes = [d.code for d in result.diagnostics if d.severity == "error"]
    assert codes == ["PL014"], [d.render() for d in result.diagnostics]
    assert "'tile_transform_v2'" in result.diagnostics[0].message


def test_inspect_a_linked_cubin(linked, tmp_path, capsys):
    cubin = tmp_path / "rowsum.cubin"
    cubin.write_bytes(linked["rowsum"].cubin)
    assert main(["inspect", str(cubin)]) == 0
    out = capsys.readouterr().out
    assert "kernel   rowsum: " in out and "at most 128 registers" in out and "contract" not in out
    assert main(["inspect", "--format", "json", str(cubin)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inputs"][0]["kernels"]["rowsum"]["static_smem"] == 0


@pytest.mark.parametrize("manifest", [b"[" * 100_000, b'{"manifest": ' + b"9" * 5000 + b"}", b'{"a": 1, "a": 2}',
                                      b"\xef\xbb\xbf{}", b'{"kernel": "k\\udc00"}', "schedule 5", "geometry [1]"])
def test_inspect_refuses_a_malformed_manifest(linked, tmp_path, capsys, manifest):
    """K.json goes through the JSON reader, then the launcher's checks: located diagnostics, exit 2."""
    cubin = tmp_path / "rowsum.cubin"
    cubin.write_bytes(linked["rowsum"].cubin)
    if isinstance(manifest, str):  # the real manifest with one field of another type
        field, value = manifest.split()
        manifest = json.dumps(dict(linked["rowsum"].manifest.to_json(), **{field: json.loads(value)})).encode()
    (tmp_path / "rowsum.json").write_bytes(manifest)
    assert main(["inspect", str(cubin)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"--> {tmp_path / 'rowsum.json'}" in err


def test_an_object_built_against_another_component_abi_is_named(shipped_objects, tmp_path):
    """Every object built against a generated header defines pl_<name>__abi__<N> for the component.h it was
    compiled with; verify asks for it where the kernel kept a call, and names an object that lacks it (PL190).
    Here the shipped block_rowsum object under a contract of another name: its code defines the marker of
    'block_rowsum', not of 'block_rowsum_v2', as an object from before the marker defines none."""
    from pipelink.authoring.header import abi_marker_symbol, component_abi, generate_header
    from pipelink.linker.collect import read_components, warn_other_abi
    raw = json.loads((REPO / "contracts" / "block_rowsum.json").read_text())
    sink = DiagnosticSink()
    good = read_components([str(shipped_objects["block_rowsum"])], sink)
    assert abi_marker_symbol(good[0].contract) == f"pl_block_rowsum__abi__{component_abi()}"
    assert "PL_ABI_MARKER(pl_block_rowsum__abi__);" in generate_header(good[0].contract)
    raw["name"] = "block_rowsum_v2"
    renamed = tmp_path / "block_rowsum_v2.o"
    embed_contract(shipped_objects["block_rowsum"], json.dumps(raw).encode(), renamed)
    for comps, stale in ((good, False), (read_components([str(renamed)], sink), True)):
        found = DiagnosticSink()
        warn_other_abi(comps, "sm_90", found)
        assert [d.code for d in found.items] == (["PL190"] if stale else []), [d.render() for d in found.items]
        if stale:
            assert f"defines no pl_block_rowsum_v2__abi__{component_abi()}" in found.items[0].message
            assert found.items[0].severity == "warning" and "rebuild" in found.items[0].hint
