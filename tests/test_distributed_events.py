"""Contracts for a distributed link (one persistent kernel per rank): RANK and WORLD in expressions, and
notifications of another rank's copy of an event (`rank`). The analysis samples worlds of 1..8 ranks: every
rank's tasks send to their destination's copy, each rank's waiters are checked against what reaches its copy.
The pattern is a tensor-parallel GEMM's reduce-scatter: every rank computes a partial of every output tile and
notifies the tile's owner; the owner's reduce task waits for one notification per rank. They link
against NVSHMEM (its headers for the glue, its device library for nvJitLink); without it, PL182. No GPU."""
from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.loader import load_contract_dict
from pipelink.core.model import Component, Source
from pipelink.core.pipeline import load_pipeline_dict
from pipelink.linker.passes import LinkOptions, run_passes

ROWS = "ceil_div(TM, WORLD)"  # output tile rows each rank owns (the last rank may own fewer)


def contract(name: str, grid: list, events: dict, params=None) -> dict:
    return {
        "pipelink_contract": 1, "name": name, "version": "1.0.0", "owner": "tp-team",
        "entry": {"symbol": name, "params": params or [
            {"name": "out", "dtype": "f32", "pointer": True},
            {"name": "TM", "dtype": "i32"}, {"name": "TN", "dtype": "i32"}]},
        "targets": {"archs": ["sm_90"]},
        "threads": {"warps": 4},
        "geometry": {"tile_sequence": {"grid": grid, "order": "row_major", "distribution": "grid_stride"}},
        "events": events,
    }


PARTIAL = contract("tp_partial", ["TM", "TN"], {"notifies": [
    {"name": "tiles", "map": "mn->mn", "shape": ["TM", "TN"], "rank": f"m // {ROWS}"}]})
# The owner's rows: RANK * ROWS .. min(TM, (RANK + 1) * ROWS) - 1.
OWNED = f"max(0, min(TM, (RANK + 1) * {ROWS}) - RANK * {ROWS})"
REDUCE = contract("rs_reduce", [OWNED, "TN"], {"waits": [
    {"name": "tiles", "map": f"mn->(RANK * {ROWS} + m),n", "count": "WORLD"}]})


def load(doc: dict, sink: DiagnosticSink | None = None):
    sink = sink or DiagnosticSink()
    return load_contract_dict(copy.deepcopy(doc), Source(f"{doc['name']}.json"), sink), sink


def codes(sink) -> list[str]:
    return sorted({d.code for d in sink.errors})


def link(partial=PARTIAL, reduce=REDUCE, until="map"):
    comps = []
    for doc in (partial, reduce):
        c, sink = load(doc)
        assert c is not None, [d.render() for d in sink.items]
        comps.append(Component(c, None))
    sink = DiagnosticSink()
    spec = load_pipeline_dict({"pipeline": 1, "name": "tp_rs", "components": ["tp_partial", "rs_reduce"],
                               "schedule": "persistent"}, sink, "p.json")
    assert spec is not None, [d.render() for d in sink.items]
    return run_passes(options=LinkOptions(arch="sm_90", pipeline=spec, cache=False), components=comps, until=until)


def test_rank_and_world_are_names_every_expression_may_use():
    c, sink = load(PARTIAL)
    assert c is not None and not sink.items
    assert str(c.events.notifies[0].rank.text) == f"m // {ROWS}"
    r, sink = load(REDUCE)
    assert r is not None and not sink.items


@pytest.mark.parametrize("where", ["param", "geometry"])
def test_rank_and_world_cannot_be_declared(where):
    doc = copy.deepcopy(PARTIAL)
    if where == "param":
        doc["entry"]["params"].append({"name": "WORLD", "dtype": "i32"})
    else:
        doc["geometry"]["provides"] = {"RANK": 2}
    c, sink = load(doc)
    assert c is None and "PL022" in codes(sink)
    d = next(d for d in sink.errors if d.code == "PL022")
    assert "distributed link" in d.message and d.hint


def test_a_destination_rank_may_use_only_known_names():
    doc = copy.deepcopy(PARTIAL)
    doc["events"]["notifies"][0]["rank"] = "k % WORLD"  # k: no task letter of the map
    c, sink = load(doc)
    assert c is None and "PL029" in codes(sink)
    assert next(d for d in sink.errors if d.code == "PL029").location.pointer == "/events/notifies/0/rank"


def test_the_reduce_scatter_pattern_checks_on_every_sampled_world():
    ctx = link()
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    assert ctx.resolved.events.tensors["tiles"].cross_rank


def test_notifications_that_never_reach_the_owner_are_found():
    bad = copy.deepcopy(PARTIAL)
    bad["events"]["notifies"][0]["rank"] = "0"  # every partial to rank 0: the other owners wait forever
    ctx = link(partial=bad)
    assert "PL083" in codes(ctx.sink)
    d = next(d for d in ctx.sink.errors if d.code == "PL083")
    assert "would never end" in d.message and "RANK=1" in d.message and "WORLD=" in d.message


def test_a_destination_outside_the_world_is_found():
    bad = copy.deepcopy(PARTIAL)
    bad["events"]["notifies"][0]["rank"] = "m"  # a rank per tile row: past the world on most shapes
    ctx = link(partial=bad)
    d = next(d for d in ctx.sink.errors if d.code == "PL084")
    assert "outside the world of" in d.message and d.location.pointer == "/events/notifies/0"


def test_a_wait_on_another_ranks_notifications_needs_its_count():
    auto = copy.deepcopy(REDUCE)
    auto["events"]["waits"][0]["count"] = "auto"  # how many ranks send depends on the world
    ctx = link(reduce=auto)
    assert "PL083" in codes(ctx.sink)
    assert "cannot be derived" in next(d for d in ctx.sink.errors if d.code == "PL083").message


def test_an_owner_that_waits_for_too_few_ranks_is_found():
    early = copy.deepcopy(REDUCE)
    early["events"]["waits"][0]["count"] = "1"
    ctx = link(reduce=early)
    d = next(d for d in ctx.sink.errors if d.code == "PL083")
    assert "before its inputs are complete" in d.message


def test_without_nvshmem_a_distributed_link_is_a_located_diagnostic(monkeypatch):
    from pipelink import toolchain

    def missing():
        raise toolchain.ToolchainError("NVSHMEM (the nvidia-nvshmem-cu13==3.8.0 wheel) was not found")
    monkeypatch.setattr(toolchain, "nvshmem_root", missing)
    ctx = link(until="generate")
    assert codes(ctx.sink) == ["PL182"]
    d = ctx.sink.errors[0]
    assert d.location.pointer == "/geometry/tile_sequence/grid" and "nvidia-nvshmem-cu13" in d.hint
    assert ctx.glue is None


PARTIAL_SRC = r'''
#include "tp_partial.pipelink.h"
// A stand-in for the partial GEMM: writes its tile's slot on the owner rank through NVSHMEM's peer pointer.
#include <nvshmem.h>
extern "C" __device__ void tp_partial(pl::Tile tile, float* __restrict__ out, int TM, int TN) {
  const int owner = tile.coord[0] / ((TM + nvshmem_n_pes() - 1) / nvshmem_n_pes());
  float* peer = static_cast<float*>(nvshmem_ptr(out, owner));
  if (pl_component::thread_rank() == 0 && peer) peer[tile.linear] = 1.0f;
}
'''

REDUCE_SRC = r'''
#include "rs_reduce.pipelink.h"
extern "C" __device__ void rs_reduce(pl::Tile tile, float* __restrict__ out, int TM, int TN) {
  if (pl_component::thread_rank() == 0) out[tile.linear] += 1.0f;
}
'''


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    import json
    import subprocess
    import sys

    from pipelink import toolchain
    d = tmp_path_factory.mktemp("distributed")
    out = {}
    for doc, src in ((PARTIAL, PARTIAL_SRC), (REDUCE, REDUCE_SRC)):
        name = doc["name"]
        (d / f"{name}.cu").write_text(src)
        (d / f"{name}.json").write_text(json.dumps(doc))
        out[name] = d / f"{name}.o"
        proc = subprocess.run([sys.executable, "-m", "pipelink.cli", "build", str(d / f"{name}.cu"), "--contract",
                               str(d / f"{name}.json"), "-I", str(toolchain.nvshmem_root() / "include"),
                               "-o", str(out[name])], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    (d / "p.json").write_text(json.dumps({"pipeline": 1, "name": "tp_rs", "components": ["tp_partial", "rs_reduce"],
                                          "schedule": "persistent"}))
    out["pipeline"] = d / "p.json"
    return out


def test_a_distributed_pipeline_links_with_nvshmem(objects):
    import pipelink
    from pipelink.formats.cubin import read_cubin
    linked = pipelink.link([str(objects["tp_partial"]), str(objects["rs_reduce"])], pipeline=str(objects["pipeline"]))
    assert linked.ok, [d.render() for d in linked.diagnostics]
    glue = linked.glue
    assert "#include <pipelink/remote.h>" in glue
    assert "const int RANK = pl::remote::rank(), WORLD = pl::remote::world();" in glue
    assert "__threadfence_system();" in glue and "pl::remote::add_one(" in glue  # the owner's copy
    assert "pl::events::wait_for<true>(" in glue                                  # read at system scope
    assert "tp_rs" in read_cubin(linked.cubin)
    assert linked.manifest.distributed and linked.manifest.to_json()["distributed"] is True
    from pipelink.runtime.manifest import Manifest
    assert Manifest.from_json(linked.manifest.to_json()).distributed  # the file keeps it


def test_the_launcher_refuses_a_distributed_kernel_until_it_sets_nvshmem_up(objects):
    import pipelink
    from pipelink.runtime.launch import ArgumentError, Kernel
    linked = pipelink.link([str(objects["tp_partial"]), str(objects["rs_reduce"])], pipeline=str(objects["pipeline"]))
    kernel = Kernel(linked.manifest)  # not loaded: the refusal comes before any driver call
    with pytest.raises(ArgumentError, match="distributed link"):
        kernel.prepare(out=None, TM=4, TN=4)


def test_a_distributed_component_links_alone_as_a_sequential_kernel(tmp_path):
    """No events, but its grid uses WORLD: the rank and world are the glue's in every schedule."""
    import json
    import subprocess
    import sys

    import pipelink
    doc = copy.deepcopy(REDUCE)
    doc["events"] = {}
    (tmp_path / "rs_reduce.cu").write_text(REDUCE_SRC)
    (tmp_path / "rs_reduce.json").write_text(json.dumps(doc))
    proc = subprocess.run([sys.executable, "-m", "pipelink.cli", "build", str(tmp_path / "rs_reduce.cu"), "--contract",
                           str(tmp_path / "rs_reduce.json"), "-o", str(tmp_path / "rs_reduce.o")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    linked = pipelink.link([str(tmp_path / "rs_reduce.o")])
    assert linked.ok, [d.render() for d in linked.diagnostics]
    assert linked.manifest.schedule == "sequential" and linked.manifest.distributed
    assert "WORLD = pl::remote::world();" in linked.glue
