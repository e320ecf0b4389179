"""Contracts for a distributed link (one persistent kernel per rank): RANK and WORLD in expressions, and
notifications of another rank's copy of an event (`rank`). The analysis samples worlds of 1..8 ranks: every
rank's tasks send to their destination's copy, each rank's waiters are checked against what reaches its copy.
The pattern is a tensor-parallel GEMM's reduce-scatter: every rank computes a partial of every output tile and
notifies the tile's owner; the owner's reduce task waits for one notification per rank. Linking such
contracts is refused (PL182) until the NVSHMEM glue exists. Pure: no objects, no GPU."""
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


def test_linking_a_distributed_pipeline_is_refused_with_a_located_diagnostic():
    ctx = link(until="generate")
    assert codes(ctx.sink) == ["PL182"]
    d = ctx.sink.errors[0]
    assert d.location.pointer == "/geometry/tile_sequence/grid" and d.hint and ctx.glue is None
