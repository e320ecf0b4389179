"""The loader role: components with a load entry (`entry.load`, `loader`) get one loader warp a CTA that walks
the CTA's tasks in their static order ahead of their waits and fills one shared-memory ring, which the entries
drain. On the CPU: the contract checks (PL185), where the schedule allows it (PL186), the allocation (ring, its
mbarriers, the extra warp) and the glue (the loader's walk, the compute warps' own barrier), compiled by NVRTC.
The linked decode step with the `_lr` GEMVs is tests/test_decode_step.py's; on a GPU,
tests/test_gpu_decode_rings.py."""
from __future__ import annotations

import json
import re

import pytest

from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.loader import load_contract_dict
from pipelink.core.model import Source
from pipelink.core.pipeline import load_pipeline_dict
from pipelink.linker.passes import LinkOptions, run_passes
from test_calls import CONTRACTS, DECODE, MLP_LAYERS, codes, components, run


def with_loader(name, raw):
    """gemv_residual and gemv_swiglu load their W through the ring: 16 rows x 512 columns a slot."""
    if name in ("gemv_residual", "gemv_swiglu"):
        raw["entry"]["load"] = name + "_load"
        raw["loader"] = {"slot_bytes": 16 * (512 * 2 + 64), "slots": "ceil_div(B, GEMV_BATCH) * ceil_div(K, 512)"}


def test_the_loader_walks_the_tasks_ahead_of_their_waits():
    ctx = run(dict(MLP_LAYERS, loader_slots=5), components(edit=with_loader), until="compile")
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    a, glue = ctx.allocation, ctx.glue
    # one warp more than the components' 8; the ring (5 slots of the one slot size) and its 2 x 5 mbarriers
    assert a.block_threads == 288
    ring = next(p for p in a.smem if p.item.key == "buffer pl_glue.ring")
    assert ring.item.size == 5 * 16 * 1088 and ring.offset % 128 == 0
    assert next(p for p in a.smem if p.item.key == "mbarrier pl_glue.ring_bars").item.size == 16 * 5 + 8
    assert "pl_ring__slots = 5u;" in glue and "pl_ring__slot_bytes = 17408u;" in glue and "pl_ring__ahead = 0u;" in glue
    assert 'extern "C" __device__ void gemv_residual_load(pl::Tile tile' in glue
    loader = glue[glue.index("// the loader warp"):glue.index("int pl_ring_pos = 0;  // the next task's")]
    compute = glue[glue.index("int pl_ring_pos = 0;  // the next task's"):]
    # the loader calls the load entries in the compute warps' task order, and waits on no event
    assert [m.group(1) for m in re.finditer(r"(gemv_\w+)_load\(tile", loader)] == ["gemv_swiglu", "gemv_residual"]
    assert "wait_for(" not in loader and "__syncthreads" not in loader
    assert "for (int pl_layer = 0;" in loader and "ring_slots" in loader
    # the compute warps meet without the loader: no __syncthreads after the branch, 256 threads at barrier 0
    assert "__syncthreads" not in compute and "pl::glue::compute_sync<256>()" in compute
    assert "pl_i += 256" in compute and "pl_i += 288" not in compute
    # each loading task's ring position is set before its waits, and moves on by its slots after it
    down = compute[compute.index("{  // down"):]
    assert down.index("tile.ring = pl_ring_pos;") < down.index("wait_for(") < down.index("gemv_residual(tile")
    assert down.index("gemv_residual(tile") < down.index("pl_ring_pos += c")
    # the manifest keeps each loading component's slots a task, for the launcher to check over runtime values
    from pipelink.linker.emit import manifest
    m = manifest(ctx.resolved, a, "sm_90", b"")
    assert m.ring_slots == {"gate_up": "ceil_div(B, 8) * ceil_div(H, 512)", "down": "ceil_div(B, 8) * ceil_div(I, 512)"}
    # a debug abort stops the loader too (it would wait on slots nobody frees)
    ctx = run(dict(MLP_LAYERS, debug_events=True), components(edit=with_loader), until="generate")
    assert "{ pl::ring::leave(); return; }" in ctx.glue


def test_without_load_entries_the_glue_is_unchanged():
    plain = run(MLP_LAYERS, components(), until="generate").glue
    assert "loader" not in plain and "pl_ring" not in plain and "compute_sync" not in plain


def test_a_load_entry_alone_links_persistent():
    comps = components(("gemv_residual",), edit=with_loader)
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=load_pipeline_dict({"pipeline": 1}, DiagnosticSink()),
                                         cache=False), components=comps, until="generate")
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    assert ctx.resolved.schedule == "persistent" and ctx.allocation.block_threads == 288


@pytest.mark.parametrize("schedule,dispatch", [("sequential", "static"), ("persistent", "dynamic")])
def test_a_load_entry_needs_a_static_persistent_schedule(schedule, dispatch):
    comps = components(("gemv_residual",), edit=with_loader)
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=load_pipeline_dict(
        {"pipeline": 1, "schedule": schedule, "dispatch": dispatch}, DiagnosticSink()), cache=False),
        components=comps, until="resolve")
    assert "PL186" in codes(ctx)
    (d,) = [d for d in ctx.sink.errors if d.code == "PL186"]
    # the pipeline's setting that made the schedule is named beside the load entry
    assert [r.pointer for r in d.related] == ["/dispatch" if dispatch == "dynamic" else "/schedule"], d.render()


def test_a_default_the_pipeline_file_leaves_is_located_at_the_file():
    """A diagnostic about a field the file does not write (loader_slots left at 4) points at the file, not at a
    pointer to nothing; a field it writes, or one set off its default in Python, at the field."""
    import dataclasses
    spec = load_pipeline_dict({"pipeline": 1}, DiagnosticSink(), "p.json")
    assert (spec.at("/loader_slots").file, spec.at("/loader_slots").pointer) == ("p.json", "")
    spec = load_pipeline_dict({"pipeline": 1, "loader_slots": 4}, DiagnosticSink(), "p.json")
    assert spec.at("/loader_slots").pointer == "/loader_slots"
    assert dataclasses.replace(spec, deal="continue").at("/deal").pointer == "/deal"


def test_a_loading_component_has_the_blocks_warps():
    def fewer(name, raw):
        with_loader(name, raw)
        if name == "gemv_residual":
            raw["threads"]["warps"] = 4
            for b in raw.get("barriers", {}).get("named", []):
                b["threads"] = 128
    ctx = run(MLP_LAYERS, components(edit=fewer), until="resolve")
    assert "PL186" in codes(ctx)


@pytest.mark.parametrize("edit,what", [
    (lambda raw: raw.pop("loader"), "without `loader`"),
    (lambda raw: raw["entry"].pop("load"), "without entry.load"),
    (lambda raw: raw["entry"].update(load=raw["entry"]["symbol"]), "is also the entry"),
    (lambda raw: raw["loader"].update(slot_bytes=1000), "not a multiple of 16"),
    (lambda raw: raw["entry"].update(invocation="per_cta"), "needs a per_tile entry"),
])
def test_loader_misuse(edit, what):
    raw = json.loads((DECODE / CONTRACTS["gemv_residual"]).read_text())
    with_loader("gemv_residual", raw)
    edit(raw)
    sink = DiagnosticSink()
    load_contract_dict(raw, Source("c.json"), sink)
    errors = [d for d in sink.errors if d.code == "PL185"]
    assert errors and what in errors[0].message, [d.render() for d in sink.items]


# Each loader and load-ahead field of a pipeline, with values its schema refuses: PL133 at the field.
SCHEMA_REFUSES = [
    *(("load_ahead_when", v) for v in ["always", 1, None]),
    *(("load_ahead_gap_ns", v) for v in [-1, 1000001, 1.5, "2000", None]),
    *(("load_ahead", v) for v in [-1, 17, 1.5, "2"]),
    *(("loader_in_flight_behind_until", v) for v in ["released", 1, None, True]),
    *(("loader_in_flight_behind", v) for v in [-1, 65, 1.5, "2"]),
    *(("loader_l2", v) for v in ["evict_last", "", 1, None]),
    *(("loader_in_flight", v) for v in [-1, 65, 1.5, "2"]),
]


@pytest.mark.parametrize("field,value", SCHEMA_REFUSES)
def test_the_loader_fields_are_checked_by_the_schema(field, value):
    sink = DiagnosticSink()
    assert load_pipeline_dict(dict(MLP_LAYERS, **{field: value}), sink, "p.json") is None
    assert [d.code for d in sink.errors] == ["PL133"] and f"/{field}" in sink.errors[0].render()


def test_loader_slots_is_checked_by_the_schema():
    sink = DiagnosticSink()
    assert load_pipeline_dict(dict(MLP_LAYERS, loader_slots=1), sink, "p.json") is None
    assert sink.errors


def with_loader_ahead(name, raw):
    """with_loader, and gemv_swiglu's load entry also asks L2 for a task's data when called with tile.ahead."""
    with_loader(name, raw)
    if name == "gemv_swiglu":
        raw["loader"]["ahead"] = True


def test_load_ahead_asks_l2_for_the_ctas_later_tasks_of_the_call():
    ctx = run(dict(MLP_LAYERS, load_ahead=3), components(edit=with_loader_ahead), until="compile")
    assert not ctx.sink.items, [d.render() for d in ctx.sink.items]
    assert ctx.resolved.loader.ahead == 3
    glue = ctx.glue
    assert "pl_ring__ahead = 3u;" in glue  # load entries see it (a long task asks L2 for its slots past the ring's)
    loader = glue[glue.index("// the loader warp"):glue.index("int pl_ring_pos = 0;  // the next task's")]
    compute = glue[glue.index("int pl_ring_pos = 0;  // the next task's"):]
    # only the component whose loader says ahead is called ahead, in the loader, before its ring load, and only
    # while the slot of the task's first ring position is not free: one task at a time past the last one asked,
    # up to 3 on, none past the call's tasks
    swiglu = loader[loader.index("// gate_up"):loader.index("// down")]
    assert swiglu.count("gemv_swiglu_load(tile") == 2 and "tile.ahead = 1;" in swiglu
    assert swiglu.index("tile.ahead = 1;") < swiglu.index("tile.ring = pl_ring_pos;")
    assert re.search(r"int pl_asked_(\d+) = -1;.*\n.*for \(int t = .*// gate_up\n", loader)
    assert re.search(r"while \(pl_asked_(\d+) \+ \(int\)gridDim\.x <= t \+ 3 \* \(int\)gridDim\.x && "
                     r"pl_asked_\1 \+ \(int\)gridDim\.x < c\d+_tasks && !pl::ring::free_now\(pl_ring_pos\)\)", swiglu)
    residual = loader[loader.index("// down"):]
    assert residual.count("gemv_residual_load(tile") == 1 and "tile.ahead" not in residual
    assert "tile.ahead" not in compute
    # the link map says what the loader does
    from pipelink.linker.emit import link_map
    m = link_map(ctx.resolved, ctx.allocation, "sm_90")
    assert "loader warp: a ring of 4 slots of 17408 B, filled for gate_up, down; L2 asked for up to 3 tasks on " \
           "while the ring is full (load_ahead) for gate_up" in m, m
    # without load_ahead the glue is the one before
    plain = run(MLP_LAYERS, components(edit=with_loader_ahead), until="generate")
    assert "tile.ahead" not in plain.glue and "pl_asked" not in plain.glue
    assert "L2 asked" not in link_map(plain.resolved, plain.allocation, "sm_90")


def test_load_ahead_without_a_component_that_loads_ahead_warns():
    ctx = run(dict(MLP_LAYERS, load_ahead=2), components(edit=with_loader), until="generate")
    assert [d.code for d in ctx.sink.items] == ["PL189"] and not ctx.sink.errors
    assert ctx.sink.items[0].severity == "warning"
    assert ctx.resolved.loader.ahead == 0 and "tile.ahead" not in ctx.glue


def test_load_ahead_when_call_behind_asks_only_while_the_ring_holds_an_earlier_calls_slots():
    """load_ahead_when call_behind: the loader notes its ring position at the call's first task on the CTA, and asks
    ahead only while the slot it waits for was last filled before that (the compute warps are still in an earlier
    call); the rest of the walk is the ring_full one's."""
    from pipelink.linker.emit import link_map
    ctx = run(dict(MLP_LAYERS, load_ahead=3, load_ahead_when="call_behind"), components(edit=with_loader_ahead),
              until="compile")
    assert not ctx.sink.items, [d.render() for d in ctx.sink.items]
    assert ctx.resolved.loader.ahead_behind
    loader = ctx.glue[ctx.glue.index("// the loader warp"):ctx.glue.index("int pl_ring_pos = 0;  // the next task's")]
    swiglu = loader[loader.index("const int pl_call_pos_"):loader.index("// down")]
    k = re.search(r"const int pl_call_pos_(\d+) = pl_ring_pos;", swiglu).group(1)
    assert re.search(rf"int pl_asked_{k} = -1;.*\n.*const int pl_call_pos_{k} = pl_ring_pos;.*\n.*for \(int t = .*"
                     r"// gate_up\n", loader)
    assert f"pl_asked_{k} + (int)gridDim.x < c{k}_tasks && pl_ring_pos - 4 < pl_call_pos_{k} && " \
           "!pl::ring::free_now(pl_ring_pos))" in swiglu
    assert "L2 asked for up to 3 tasks on while the ring is full of an earlier call's slots (load_ahead_when " \
           "call_behind) (load_ahead) for gate_up" in link_map(ctx.resolved, ctx.allocation, "sm_90")
    # ring_full, written or not, is the walk of test_load_ahead_asks_l2_for_the_ctas_later_tasks_of_the_call
    full = run(dict(MLP_LAYERS, load_ahead=3, load_ahead_when="ring_full"), components(edit=with_loader_ahead),
               until="generate")
    assert "pl_call_pos" not in full.glue and not full.resolved.loader.ahead_behind
    assert full.glue == run(dict(MLP_LAYERS, load_ahead=3), components(edit=with_loader_ahead), until="generate").glue


def test_load_ahead_when_without_load_ahead_warns():
    ctx = run(dict(MLP_LAYERS, load_ahead_when="call_behind"), components(edit=with_loader_ahead), until="generate")
    assert [d.code for d in ctx.sink.items] == ["PL193"] and ctx.sink.items[0].severity == "warning"
    assert "/load_ahead_when" in ctx.sink.items[0].render() and "pl_call_pos" not in ctx.glue


def test_load_ahead_gap_ns_pauses_before_each_request_ahead():
    """load_ahead_gap_ns G: in the loop that asks L2 ahead, before each request the loader waits G ns or until the
    slot it waits for is free (then it leaves the loop and fills the slot); the rest of the walk unchanged."""
    from pipelink.linker.emit import link_map
    ctx = run(dict(MLP_LAYERS, load_ahead=3, load_ahead_when="call_behind", load_ahead_gap_ns=4000),
              components(edit=with_loader_ahead), until="compile")
    assert not ctx.sink.items, [d.render() for d in ctx.sink.items]
    assert ctx.resolved.loader.ahead_gap_ns == 4000
    loader = ctx.glue[ctx.glue.index("// the loader warp"):ctx.glue.index("int pl_ring_pos = 0;  // the next task's")]
    swiglu = loader[loader.index("// gate_up"):loader.index("// down")]
    # the pause is the loop's first statement, before the task asked moves on
    assert re.search(r"!pl::ring::free_now\(pl_ring_pos\)\) \{\n\s*if \(pl::ring::pause_unless_free\(pl_ring_pos, "
                     r"4000u\)\) break;.*\n\s*pl_asked_\d+ \+= \(int\)gridDim\.x;", swiglu), swiglu
    assert "pause_unless_free" not in loader[loader.index("// down"):]
    assert ", each request after a pause of 4000 ns (load_ahead_gap_ns) (load_ahead) for gate_up" in \
        link_map(ctx.resolved, ctx.allocation, "sm_90")
    # 0, written or not, is the walk without the pause
    unpaced = run(dict(MLP_LAYERS, load_ahead=3, load_ahead_when="call_behind", load_ahead_gap_ns=0),
                  components(edit=with_loader_ahead), until="generate")
    assert "pause_unless_free" not in unpaced.glue and not unpaced.sink.items
    assert unpaced.glue == run(dict(MLP_LAYERS, load_ahead=3, load_ahead_when="call_behind"),
                               components(edit=with_loader_ahead), until="generate").glue


def test_load_ahead_gap_ns_without_load_ahead_warns():
    ctx = run(dict(MLP_LAYERS, load_ahead_gap_ns=2000), components(edit=with_loader_ahead), until="generate")
    assert [d.code for d in ctx.sink.items] == ["PL193"] and ctx.sink.items[0].severity == "warning"
    assert "/load_ahead_gap_ns" in ctx.sink.items[0].render() and "pause_unless_free" not in ctx.glue
    assert ctx.resolved.loader.ahead_gap_ns == 0


@pytest.mark.parametrize("in_flight,copies", [(0, 5), (1, 1), (2, 2), (4, 4), (5, 5), (9, 5)])
def test_loader_in_flight_caps_the_copies_on_their_way(in_flight, copies):
    """loader_in_flight F below the ring's slots: the load entries' acquire waits for the copy issued F slots before
    to land (pl_ring__in_flight, folded into pl::ring::acquire); 0, or the slots or more, caps nothing (the
    constant is the slot count, and the wait folds away). The link map says so where it caps."""
    from pipelink.linker.emit import link_map
    ctx = run(dict(MLP_LAYERS, loader_slots=5, loader_in_flight=in_flight), components(edit=with_loader),
              until="generate")
    assert not ctx.sink.items, [d.render() for d in ctx.sink.items]
    assert ctx.resolved.loader.copies_in_flight == copies
    assert f"pl_ring__in_flight = {copies}u;" in ctx.glue and "pl_ring__slots = 5u;" in ctx.glue
    capped = "at most" in link_map(ctx.resolved, ctx.allocation, "sm_90")
    assert capped == (copies < 5)
    if capped:
        assert f"at most {copies} slots' copies in flight (loader_in_flight)" in link_map(ctx.resolved, ctx.allocation,
                                                                                           "sm_90")


@pytest.mark.parametrize("in_flight,behind,cap,behind_cap", [(0, 0, 5, 5), (2, 0, 2, 2), (0, 1, 5, 1), (2, 1, 2, 1),
                                                             (2, 2, 2, 2), (0, 9, 5, 5)])
def test_loader_in_flight_behind_paces_the_refills_of_the_call_before(in_flight, behind, cap, behind_cap):
    """loader_in_flight_behind B: where a call's slots last held the call before's data (its first `slots` positions
    on the CTA), acquire waits for the copy issued B slots before; the loader writes where that ends at each call's
    first task (pl::ring::refills_until) into a word after the ring's barriers. Where B caps as loader_in_flight does
    (0, equal, or the slots or more), nothing of it is in the kernel: the two constants are one, the word and the
    writes are not there, the layout is the one without it."""
    from pipelink.linker.emit import link_map
    ctx = run(dict(MLP_LAYERS, loader_slots=5, loader_in_flight=in_flight, loader_in_flight_behind=behind),
              components(edit=with_loader), until="generate")
    assert not ctx.sink.items, [d.render() for d in ctx.sink.items]
    loader = ctx.resolved.loader
    assert (loader.copies_in_flight, loader.copies_in_flight_behind) == (cap, behind_cap)
    assert f"pl_ring__in_flight = {cap}u;" in ctx.glue and f"pl_ring__in_flight_behind = {behind_cap}u;" in ctx.glue
    paced = behind_cap != cap
    assert ("pl::ring::refills_until(pl_ring_pos + 5);" in ctx.glue) == paced
    assert ctx.glue.count("pl::ring::refills_until(") == (2 if paced else 0)  # gate_up's and down's first tasks
    bars = next(p.item for p in ctx.allocation.smem if p.item.key == "mbarrier pl_glue.ring_bars")
    assert bars.size == 16 * 5 + 8 + (8 if paced else 0)
    text = link_map(ctx.resolved, ctx.allocation, "sm_90")
    assert (f"at most {behind_cap} where a call refills the slots of the call before (loader_in_flight_behind)"
            in text) == paced


@pytest.mark.parametrize("until,flag", [("call_slots", 0), ("first_release", 1)])
def test_loader_in_flight_behind_until_ends_the_pacing_at_the_first_release(until, flag):
    """loader_in_flight_behind_until first_release: pl_ring__behind_until_release is 1, so acquire paces a call's
    refills only until the compute warps have released the call's first slot on the CTA (pl::ring::released on its
    empty barrier), asked again while it waits; the link map says so. call_slots, the default: 0, and the pacing
    runs through the call's first loader_slots positions, as before the field."""
    from pipelink.linker.emit import link_map
    ctx = run(dict(MLP_LAYERS, loader_slots=5, loader_in_flight=2, loader_in_flight_behind=1,
                   loader_in_flight_behind_until=until), components(edit=with_loader), until="generate")
    assert not ctx.sink.items, [d.render() for d in ctx.sink.items]
    assert ctx.resolved.loader.paces_until_release == bool(flag)
    assert f"pl_ring__behind_until_release = {flag}u;" in ctx.glue
    assert "pl::ring::refills_until(pl_ring_pos + 5);" in ctx.glue  # the word the test reads is there either way
    text = link_map(ctx.resolved, ctx.allocation, "sm_90")
    assert ("until the call's first slot is released (loader_in_flight_behind_until)" in text) == bool(flag)


def test_loader_in_flight_behind_until_without_pacing_is_a_warning():
    """first_release where no refill is paced (loader_in_flight_behind 0, or a cap no tighter than the rest's)
    changes nothing: PL193 at the field, and the constant stays 0."""
    for fields in ({}, {"loader_in_flight": 2, "loader_in_flight_behind": 2}):
        ctx = run(dict(MLP_LAYERS, loader_slots=5, loader_in_flight_behind_until="first_release", **fields),
                  components(edit=with_loader), until="generate")
        assert [(d.code, d.severity) for d in ctx.sink.items] == [("PL193", "warning")], fields
        assert "/loader_in_flight_behind_until" in ctx.sink.items[0].render()
        assert "pl_ring__behind_until_release = 0u;" in ctx.glue


@pytest.mark.parametrize("policy,flag", [("normal", 0), ("evict_first", 1)])
def test_loader_l2_sets_the_copies_cache_hint(policy, flag):
    """loader_l2 evict_first: pl_ring__evict_first is 1 and pl::ring::copy takes the cache-hinted bulk copy (LTO
    keeps one branch); the link map says so. normal, the default: 0, and nothing said."""
    from pipelink.linker.emit import link_map
    ctx = run(dict(MLP_LAYERS, loader_l2=policy), components(edit=with_loader), until="generate")
    assert not ctx.sink.items, [d.render() for d in ctx.sink.items]
    assert ctx.resolved.loader.evict_first == bool(flag)
    assert f"pl_ring__evict_first = {flag}u;" in ctx.glue
    text = link_map(ctx.resolved, ctx.allocation, "sm_90")
    assert ("copies hint L2 evict_first (loader_l2)" in text) == bool(flag)
    # the map's warps list the loader warp after the compute warps
    warps = text.split("## warps")[1].split("##")[0]
    assert "  8-8    pl_glue (loader for gate_up, down 8-8)" in warps, warps


def test_loader_ahead_is_a_boolean():
    raw = json.loads((DECODE / CONTRACTS["gemv_residual"]).read_text())
    with_loader("gemv_residual", raw)
    raw["loader"]["ahead"] = "yes"
    sink = DiagnosticSink()
    assert load_contract_dict(raw, Source("c.json"), sink) is None
    assert sink.errors and "/loader/ahead" in sink.errors[0].render()


def test_a_task_profile_has_the_loaders_records_too():
    """With profile_tasks the loader's lane 0 writes a record for each task it loads: the component's index with
    the profile's loader flag, the task numbered as the compute side numbers it, stamped when its L2 requests
    ahead are out and when the load entry returns; without a profile, none of it."""
    from pipelink.runtime.profile import LOADER_FLAG
    ctx = run(dict(MLP_LAYERS, load_ahead=2, profile_tasks=4096), components(edit=with_loader_ahead), until="compile")
    assert not ctx.sink.items, [d.render() for d in ctx.sink.items]
    glue = ctx.glue
    loader = glue[glue.index("// the loader warp"):glue.index("int pl_ring_pos = 0;  // the next task's")]
    compute = glue[glue.index("int pl_ring_pos = 0;  // the next task's"):]
    names = [c.name for c in ctx.resolved.components]
    for call in ("gate_up", "down"):
        part = loader[loader.index(f"// {call}\n"):]
        begin = re.search(r"pl_lrecord = threadIdx\.x == 256u \? pl::profile::begin\(pl_profile_ring, &pl_profile_next, "
                          r"4096ull, pl_profile_launch_id, (\d+)u, \(long long\)pl_layer \* \(long long\)c\d+_tasks \+ t, "
                          r"reinterpret_cast<unsigned long long\*>\(pl::dynamic_smem\(\) \+ \d+u \+ 16u \* \(15\)\)\)", part)
        assert begin and int(begin.group(1)) == names.index(call) | LOADER_FLAG, (call, part[:600])
        stamps = [m.start() for m in re.finditer(r"pl::profile::stamp\(pl_lrecord, [234]\)", part)]
        ring = part.index("tile.ring = pl_ring_pos;")
        load = part.index(f"{'gemv_swiglu' if call == 'gate_up' else 'gemv_residual'}_load(tile, ", ring)
        assert len(stamps) >= 3 and stamps[0] < ring < load < stamps[1] < stamps[2]
    if "// ask L2 ahead" in loader[loader.index("// gate_up\n"):]:
        gate_up = loader[loader.index("// gate_up\n"):loader.index("// down\n")]
        assert gate_up.index("// ask L2 ahead") < gate_up.index("pl::profile::stamp(pl_lrecord, 2)")
    assert "pl_lrecord" not in compute
    plain = run(dict(MLP_LAYERS, load_ahead=2), components(edit=with_loader_ahead), until="generate")
    assert "pl_lrecord" not in plain.glue


def test_a_ring_too_large_for_shared_memory_is_located_at_loader_slots():
    """PL042 where the largest buffer is the loader's ring: at the pipeline's loader_slots, with the hint to use
    fewer (it had named the first component's /smem)."""
    ctx = run(dict(MLP_LAYERS, loader_slots=64), components(edit=with_loader), until="allocate")
    (d,) = [d for d in ctx.sink.errors if d.code == "PL042"]
    assert d.location.pointer == "/loader_slots" and "fewer loader_slots (64 slots" in d.hint, d.render()


def test_a_slot_sized_over_consumed_geometry_says_why_it_cannot_be():
    """slot_bytes sees provided geometry only: one over a consumed value is PL029 naming it as consumed (the hint
    had said 'names visible here: none; declare geometry in geometry.provides/consumes')."""
    raw = json.loads((DECODE / CONTRACTS["gemv_residual"]).read_text())
    with_loader("gemv_residual", raw)
    raw["geometry"]["consumes"] = {"SLOT_K": {"min": 16, "default": 512}}
    raw["loader"]["slot_bytes"] = "16 * SLOT_K"
    sink = DiagnosticSink()
    assert load_contract_dict(raw, Source("c.json"), sink) is None
    (d,) = sink.errors
    assert d.code == "PL029" and "geometry this contract consumes" in d.message and d.location.pointer == "/loader/slot_bytes"


def test_slots_per_task_that_the_link_makes_zero_are_pl032():
    """`loader.slots` over geometry alone is the same at every launch: zero or below is refused at the link."""
    def zero_slots(name, raw):
        with_loader(name, raw)
        if "loader" in raw:
            raw["loader"]["slots"] = "GEMV_BATCH - GEMV_BATCH"
    ctx = run(MLP_LAYERS, components(edit=zero_slots), until="resolve")
    found = [d for d in ctx.sink.errors if d.code == "PL032"]
    assert found and found[0].location.pointer == "/loader/slots", [d.render() for d in ctx.sink.items]


def test_syncthreads_beside_a_loader_warp_is_pl071():
    """The loader warp walks the tasks ahead and never meets the compute warps' barrier 0: a component that calls
    __syncthreads in a kernel with one would hang. PL071 at its uses_syncthreads."""
    def with_sync(name, raw):
        with_loader(name, raw)
        if name == "rmsnorm":
            raw["threads"]["uses_syncthreads"] = True
    ctx = run(MLP_LAYERS, components(edit=with_sync), until="resolve")
    found = [d for d in ctx.sink.errors if d.code == "PL071"]
    assert found and found[0].location.pointer == "/threads/uses_syncthreads", [d.render() for d in ctx.sink.items]
