"""Verify reads what the linked kernel really uses and says where it differs from the plan."""
import json

from pipelink.api import run_checks
from pipelink.cli import main
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.pipeline import load_pipeline
from pipelink.harness.shipped import REPO
from pipelink.linker.passes import LinkOptions, link

from comp_contract import build_elsewhere


def _write(folder, name, source):
    (folder / f"{name}.cu").write_text(source)
    return folder / f"{name}.cu"


def _build(tmp_path, name, source, edit=None):
    raw = json.loads((REPO / "contracts" / f"{name}.json").read_text())
    if edit:
        edit(raw)
    (tmp_path / f"{name}.json").write_text(json.dumps(raw))
    (tmp_path / f"{name}.cu").write_text(source)
    obj = tmp_path / f"{name}.o"
    assert main(["build", str(tmp_path / f"{name}.cu"), "--contract", str(tmp_path / f"{name}.json"), "-o", str(obj),
                 "--arch", "sm_90"]) == 0
    return obj


def _check(obj):
    """`pipelink check` on the object alone: its conformance probe."""
    sink = DiagnosticSink()
    run_checks([str(obj)], sink, together=True)
    return sink.items


def _names(d, obj) -> bool:
    return "'tile_transform'" in d.message and str(obj) in d.message and d.location.component == "tile_transform"


def _link(shipped_objects, **replace):
    spec = load_pipeline(REPO / "pipelines" / "rowsum.json", DiagnosticSink())
    names = ["tile_load", "tile_transform", "block_rowsum"]
    return link([str(replace.get(n, shipped_objects[n])) for n in names], LinkOptions(pipeline=spec, cache=False))


def test_barrier_id_that_is_not_a_constant_is_reported(shipped_objects, tmp_path):
    """A component that computes a barrier id at run time makes ptxas reserve all 16."""
    source = """#include "tile_transform.pipelink.h"
using namespace pl::tile_transform;
extern "C" __device__ void tile_transform(pl::Tile tile, float scale) {
  const float* src = port_src();
  float* dst = port_dst();
  for (int i = thread_rank(); i < TILE_M() * TILE_N(); i += THREADS) dst[i] = src[i] * scale;
  pl::barrier_sync(1 + (tile.linear & 1), THREADS);  // an id the contract does not declare, not a constant
}
"""
    obj = _build(tmp_path, "tile_transform", source)
    result = _link(shipped_objects, tile_transform=obj)
    assert result.ok
    warnings = [d for d in result.diagnostics if d.severity == "warning" and d.code == "PL073"]
    assert any("barrier ids were not link-time constants" in d.message and _names(d, obj) and
               "computes an id at run time" in d.message for d in warnings), [d.render() for d in result.diagnostics]
    (d,) = _check(obj)
    assert (d.code, d.severity) == ("PL142", "warning") and _names(d, obj) and "at run time" in d.message


def test_static_shared_memory_is_refused_by_build_link_and_check(shipped_objects, tmp_path):
    source = """#include "tile_transform.pipelink.h"
using namespace pl::tile_transform;
extern "C" __device__ void tile_transform(pl::Tile tile, float scale) {
  __shared__ float own[256];  // bytes the linker cannot see or share
  const float* src = port_src();
  float* dst = port_dst();
  own[threadIdx.x] = scale;
  for (int i = thread_rank(); i < TILE_M() * TILE_N(); i += THREADS) dst[i] = src[i] * own[(i + 1) % 128];
}
"""
    (tmp_path / "refused").mkdir()
    assert main(["build", str(_write(tmp_path / "refused", "tile_transform", source)), "--contract",
                 str(REPO / "contracts" / "tile_transform.json"), "-o", str(tmp_path / "refused" / "t.o")]) == 1
    obj = build_elsewhere(tmp_path, REPO / "contracts" / "tile_transform.json", source)
    result = _link(shipped_objects, tile_transform=obj)  # no record in the object: the link probes it, as check does
    assert not result.ok and [d.code for d in result.diagnostics if d.severity == "error"] == ["PL140"], \
        [d.render() for d in result.diagnostics]
    assert _names(result.diagnostics[0], obj) and "1024 bytes" in result.diagnostics[0].message
    (d,) = _check(obj)
    assert (d.code, d.severity) == ("PL140", "error") and _names(d, obj) and "1024 bytes" in d.message


def test_noinline_component_is_reported(shipped_objects, tmp_path):
    source = """#include "tile_transform.pipelink.h"
using namespace pl::tile_transform;
__device__ __noinline__ float twice(float v) { return 2.0f * v; }
extern "C" __device__ void tile_transform(pl::Tile tile, float scale) {
  const float* src = port_src();
  float* dst = port_dst();
  for (int i = thread_rank(); i < TILE_M() * TILE_N(); i += THREADS) dst[i] = twice(src[i]) * scale;
}
"""
    obj = _build(tmp_path, "tile_transform", source)
    result = _link(shipped_objects, tile_transform=obj)
    assert result.ok
    assert any("still calls" in d.message and "twice" in d.message and _names(d, obj) for d in result.diagnostics), \
        [d.render() for d in result.diagnostics]
    (d,) = _check(obj)
    assert (d.code, d.severity) == ("PL145", "warning") and _names(d, obj) and "_Z5twicef" in d.message
