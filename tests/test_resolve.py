"""Resolve and allocate: pure decisions over contracts, no toolchain, no GPU."""
from pathlib import Path

import pytest

from pipelink.authoring.header import constant_symbols
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.pipeline import PipelineSpec, parse_wire
from pipelink.linker.allocate import Lifetime, SmemItem, pack
from pipelink.linker.glue import constant_values
from pipelink.linker.passes import LinkOptions, run_passes

from contract_factory import shipped_component

REPO = Path(__file__).resolve().parent.parent
shipped = shipped_component


def rowsum(**edits):
    return [shipped(n, edits.get(n)) for n in ("tile_load", "tile_transform", "block_rowsum")]


def ring(**edits):
    return [shipped(n, edits.get(n)) for n in ("ring_load", "ring_dot")]


def linked(comps, name="k", wires=(), schedule=None, arch="sm_90", until="allocate"):
    """The link's passes over components already read, from check to `until`."""
    spec = PipelineSpec(name=name, wires=tuple(parse_wire(w, DiagnosticSink()) for w in wires), schedule=schedule)
    return run_passes(options=LinkOptions(arch=arch, pipeline=spec), components=comps, until=until)


def run(comps, name="k", wires=(), schedule=None, arch="sm_90"):
    ctx = linked(comps, name, wires, schedule, arch)
    return ctx.resolved, ctx.allocation, ctx.sink


def codes(sink):
    return sorted(d.code for d in sink.items if d.severity == "error")


# --- resolve -----------------------------------------------------------------------------------

def test_rowsum_wires_itself_zero_copy():
    r, a, sink = run(rowsum())
    assert not sink.items
    assert r.schedule == "sequential" and r.order == ["tile_load", "tile_transform", "block_rowsum"]
    assert [(str(w), w.kind, w.explicit) for w in r.wires] == [
        ("tile_load.tile -> tile_transform.src", "zero_copy", False),
        ("tile_transform.dst -> block_rowsum.tile", "zero_copy", False)]
    assert r.geometry == {"TILE_M": 32, "TILE_N": 128}
    assert [p.name for p in r.params] == ["x", "M", "N", "scale", "out"]


def test_ring_is_warp_specialized():
    r, a, sink = run(ring())
    assert not sink.items and r.schedule == "warp_specialized"
    (w,) = r.wires
    assert (w.kind, w.stages, w.tile) == ("ring", 4, (16, 256))


def test_dtype_mismatch_on_a_wire():
    def bf16(c):
        c["ports"][0]["dtype"] = "bf16"
    _, _, sink = run(rowsum(tile_transform=bf16), wires=["tile_load.tile=tile_transform.src"])
    assert codes(sink) == ["PL063"]
    d = sink.items[0]
    assert "'tile_load' produces f32, 'tile_transform' expects bf16" in d.message
    assert d.location.pointer == "/ports/0" and d.related[0].component == "tile_load"


def test_shape_mismatch_on_a_wire():
    def hardcoded(c):  # the consumer assumed 64 columns instead of consuming TILE_N
        c["ports"][0]["tile"] = ["TILE_M", 64]
    _, _, sink = run(rowsum(tile_transform=hardcoded))
    assert codes(sink) == ["PL064"]
    assert "produces tiles [TILE_M=32, TILE_N=128], 'tile_transform' expects [TILE_M=32, 64]" in sink.items[0].message
    assert "another order" not in sink.items[0].message and "instead of assuming" in sink.items[0].render()


def test_a_transposed_tile_on_a_wire_says_the_order_differs():
    def transposed(c):  # the same names, the other order
        c["ports"][0]["tile"] = ["TILE_N", "TILE_M"]
    _, _, sink = run(rowsum(tile_transform=transposed))
    assert codes(sink) == ["PL064"]
    d = sink.items[0]
    assert "(the same extents in another order)" in d.message and "in the producer's order" in d.render()


def test_layout_mismatch_is_a_copy_in_sequential_and_an_error_in_a_ring():
    def colmajor(c):
        c["ports"][0]["layout"] = "col_major"
    ctx = linked(rowsum(tile_transform=colmajor), until="generate")
    assert not ctx.sink.items and ctx.resolved.wires[0].kind == "relayout"
    glue = ctx.glue
    assert "re-layout for tile_load.tile -> tile_transform.src: row_major -> col_major" in glue
    _, _, sink = run(ring(ring_dot=lambda c: c["ports"][0].update(layout="col_major")))
    assert codes(sink) == ["PL065"]


def test_stage_mismatch():
    _, _, sink = run(ring(ring_dot=lambda c: c["ports"][0].update(stages=2)))
    assert codes(sink) == ["PL066"]


def test_tile_order_mismatch():
    _, _, sink = run(rowsum(block_rowsum=lambda c: c["geometry"]["tile_sequence"].update(order="col_major")))
    assert codes(sink) == ["PL067"]
    assert "order col_major against row_major" in sink.items[0].message


def test_tile_grid_mismatch_found_by_sampling_shapes():
    def other_grid(c):
        c["geometry"]["tile_sequence"]["grid"] = ["ceil_div(M, TILE_M)", "N // TILE_N"]
    _, _, sink = run(rowsum(block_rowsum=other_grid))
    assert codes(sink) == ["PL067"]
    assert "at M=1, N=1" in sink.items[0].message


def test_unconnected_and_unknown_ports():
    _, _, sink = run([shipped("tile_transform"), shipped("block_rowsum")])
    assert "PL060" in codes(sink)
    _, _, sink = run(rowsum(), wires=["tile_load.nope=tile_transform.src"])
    assert codes(sink) == ["PL062"]


def test_ambiguous_auto_wire():
    def second_out(c):
        c["ports"].append({"name": "copy", "direction": "out", "dtype": "f32", "tile": ["TILE_M", "TILE_N"]})
    comps = [shipped("tile_load", second_out), shipped("tile_transform", lambda c: c["ports"].pop(1))]
    _, _, sink = run(comps)
    assert codes(sink) == ["PL061"]
    r, _, sink = run(comps, wires=["tile_load.copy=tile_transform.src"])
    assert not sink.items and r.wires[0].explicit


def test_kernel_name_clash_and_param_clash():
    _, _, sink = run(rowsum(), name="tile_load")
    assert codes(sink) == ["PL077"]
    assert sink.items[0].location.pointer == "/name"
    _, _, sink = run(rowsum(block_rowsum=lambda c: c["entry"]["params"][1].update(dtype="i64")))
    assert codes(sink) == ["PL069"]


def test_syncthreads_component_cannot_run_beside_others():
    _, _, sink = run(ring(ring_dot=lambda c: c["threads"].update(uses_syncthreads=True)))
    assert codes(sink) == ["PL071"]


def test_missing_geometry():
    def no_default(c):
        del c["geometry"]["consumes"]["TILE_N"]["default"]
    _, _, sink = run([shipped("tile_transform", no_default), shipped("block_rowsum")],
                     wires=["tile_transform.dst=block_rowsum.tile"])
    assert "PL052" in codes(sink)


# --- allocate ----------------------------------------------------------------------------------

def test_rowsum_allocation_shares_bytes_across_steps():
    r, a, _ = run(rowsum())
    where = {p.item.key: (p.offset, p.item.size) for p in a.smem}
    assert where["port tile_load.tile"] == (0, 16384)          # steps 1-3
    assert where["port tile_transform.dst"] == (16384, 16384)  # steps 3-5: overlaps the first at step 3
    assert where["buffer block_rowsum.reduce_temp"] == (0, 64)  # step 5 scratch reuses the dead first tile
    assert a.smem_bytes == 32768 and a.block_warps == 4 and a.registers == 128
    assert a.port_offset[("tile_transform", "src")] == a.port_offset[("tile_load", "tile")]  # zero-copy


def test_ring_allocation_and_warps():
    r, a, _ = run(ring())
    assert a.warp_begin == {"ring_dot": 0, "ring_load": 4}  # the warpgroup first, on warp 0
    # ring_load's 64-register cap would allow 6 blocks an SM, but the 64 KB ring allows 3: the kernel takes
    # ring_dot's 128, which keeps those 3 (allocate.kernel_register_budget)
    assert a.block_warps == 5 and a.registers == 128
    off, stride = a.port_offset[("ring_load", "tiles")]
    assert stride == 16 * 256 * 4 and a.port_offset[("ring_dot", "tiles")] == (off, stride)
    full, empty = a.ring_mbars["ring_load.tiles -> ring_dot.tiles"]
    assert full % 8 == 0 and empty % 8 == 0 and abs(full - empty) >= 32


def test_barrier_ids_avoid_hardcoded_ones():
    def named(c, n):
        c["barriers"] = {"named": [{"name": f"b{i}", "threads": 32} for i in range(n)]}
    comps = [shipped("ring_load", lambda c: named(c, 2)),
             shipped("ring_dot", lambda c: c.update(barriers={"hardcoded_ids": [1, 2, 3, 4, 5, 6, 7]}))]
    _, a, sink = run(comps)
    assert not sink.items
    assert a.barrier_id == {("ring_load", "b0"): 8, ("ring_load", "b1"): 9}


def test_smem_over_the_limit_after_sharing():
    _, _, sink = run(ring(ring_load=lambda c: c["geometry"]["provides"].update(STAGES=8, TILE_M=256),
                          ring_dot=lambda c: c["geometry"]["consumes"]["TILE_M"].update(max=256)))
    assert codes(sink) == ["PL042"]  # the check pass's lower bound: the ring's stages alone exceed the device
    assert "need at least 2097152 bytes of shared memory (persistent 0, scratch 0, ports 2097152" in sink.items[0].message


def test_pack_is_first_fit_and_respects_lifetimes_and_alignment():
    always = Lifetime(None)
    s1, s2 = Lifetime(frozenset({1})), Lifetime(frozenset({2}))
    items = [SmemItem("a", "buffer", "x", 100, 16, s1), SmemItem("b", "buffer", "x", 50, 64, s2),
             SmemItem("c", "buffer", "x", 10, 8, always)]
    placed = {p.item.key: p.offset for p in pack(items)}
    assert placed == {"a": 0, "b": 0, "c": 104}  # b reuses a's bytes; c lives always, after both
    same_owner = [SmemItem("p", "buffer", "x", 64, 16, Lifetime(frozenset({0}), "x", "load")),
                  SmemItem("q", "buffer", "x", 64, 16, Lifetime(frozenset({0}), "x", "reduce")),
                  SmemItem("r", "buffer", "y", 64, 16, Lifetime(frozenset({0}), "y", "reduce"))]
    placed = {p.item.key: p.offset for p in pack(same_owner)}
    assert placed["p"] == placed["q"] == 0 and placed["r"] == 64  # phases of one component share


def test_allocation_is_deterministic():
    wires = ["tile_load.tile=tile_transform.src", "tile_transform.dst=block_rowsum.tile"]
    a1 = run(rowsum(), wires=wires)[1]
    a2 = run(list(reversed(rowsum())), wires=wires)[1]
    assert [(p.item.key, p.offset) for p in a1.smem] == [(p.item.key, p.offset) for p in a2.smem]


def test_every_constant_gets_a_value():
    for comps in (rowsum(), ring()):
        r, a, _ = run(comps)
        values = constant_values(r, a)
        for c in r.components:
            assert set(constant_symbols(c.contract)) <= values.keys()


def test_unsupported_requests_are_refused_not_ignored():
    def setmaxnreg(c):
        c["threads"]["roles"][0]["setmaxnreg"] = 232
        c["targets"]["archs"] = ["sm_90a"]
    _, _, sink = run(ring(ring_dot=setmaxnreg), arch="sm_90a")
    assert codes(sink) == ["PL078"]
    _, _, sink = run(rowsum(tile_load=lambda c: c["geometry"]["tile_sequence"].update(distribution="queue"),
                            block_rowsum=lambda c: c["geometry"]["tile_sequence"].update(distribution="queue")))
    assert codes(sink) == ["PL078"]


def test_events_need_the_persistent_schedule():
    def events(c):
        c["events"] = {"notifies": [{"name": "done", "map": "ij->ij"}]}
    _, _, sink = run(rowsum(block_rowsum=events), schedule="sequential")
    assert codes(sink) == ["PL078"]


def test_a_component_between_rings_of_different_depths_is_refused():
    def deep(c):
        c["ports"][1]["stages"] = 4
    def shallow(c):
        c["ports"][0]["stages"] = 4
    comps = rowsum(tile_transform=deep, block_rowsum=shallow)
    _, _, sink = run(comps, schedule="warp_specialized")
    assert codes(sink) == ["PL066"]
    assert "sits on rings of 1 and 4 stages" in sink.items[0].message


# --- a pipeline's geometry: what the other components of a larger layer provide ------------------

def test_pipeline_geometry_sets_what_no_component_of_the_link_provides():
    """Linked alone, row_softmax takes the layer's TILE_M from the pipeline instead of its default; the glue
    folds that value in."""
    comps = [shipped("row_softmax")]
    spec = PipelineSpec(name="k", geometry={"TILE_M": 64})
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=spec), components=comps, until="generate")
    assert not ctx.sink.has_errors, [d.render() for d in ctx.sink.items]
    assert ctx.resolved.geometry == {"TILE_M": 64}
    assert constant_values(ctx.resolved, ctx.allocation)["pl_row_softmax__geom__TILE_M"] == 64
    alone = run_passes(options=LinkOptions(arch="sm_90", pipeline=PipelineSpec(name="k")), components=comps,
                       until="resolve")
    assert alone.resolved.geometry == {"TILE_M": 32}


def test_pipeline_geometry_refuses_provided_unconsumed_and_out_of_range_names():
    def errors(comps, geometry):
        spec = PipelineSpec(name="k", geometry=geometry, source="layer.pipeline.json")
        sink = run_passes(options=LinkOptions(arch="sm_90", pipeline=spec), components=comps, until="resolve").sink
        return [(d.code, d.location.pointer if d.location else None, d.message) for d in sink.items
                if d.severity == "error"]
    provided = errors(rowsum(), {"TILE_N": 256})  # tile_load provides it
    assert [(c, p) for c, p, _ in provided] == [("PL180", "/geometry/TILE_N")] and "'tile_load' provides" in provided[0][2]
    unknown = errors([shipped("tile_transform"), shipped("block_rowsum")], {"TILE_Q": 4})
    assert [(c, p) for c, p, _ in unknown] == [("PL180", "/geometry/TILE_Q")] and "no component" in unknown[0][2]
    out_of_range = errors([shipped("tile_transform"), shipped("block_rowsum")], {"TILE_N": 100})  # multiple of 32
    assert "PL051" in [c for c, _, _ in out_of_range]


def test_a_misspelt_pipeline_geometry_name_is_pointed_at_the_name_it_missed():
    """PL180's hint lists what the pipeline may set, the names it sets itself included (it had said 'nothing' once a
    correctly spelt name was set beside the typo), and the nearest one; the link map says the pipeline set it."""
    comps = [shipped("tile_transform"), shipped("block_rowsum")]
    spec = PipelineSpec(name="k", geometry={"TILE_N": 64, "TIEL_N": 2}, source="layer.pipeline.json")
    sink = run_passes(options=LinkOptions(arch="sm_90", pipeline=spec), components=comps, until="resolve").sink
    [d] = [d for d in sink.items if d.severity == "error"]
    assert d.code == "PL180" and d.location.pointer == "/geometry/TIEL_N"
    assert d.hint.startswith("did you mean TILE_N?") and "may set: " in d.hint and "TILE_N" in d.hint.split("may set: ")[1]
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=PipelineSpec(name="k", geometry={"TILE_M": 64})),
                     components=[shipped("row_softmax")], until="generate")
    from pipelink.linker.emit import link_map
    text = link_map(ctx.resolved, ctx.allocation, "sm_90")
    assert "TILE_M = 64  (set by the pipeline; consumed by" in text, text[text.index("## geometry"):][:300]
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=PipelineSpec(name="k")),
                     components=[shipped("row_softmax")], until="generate")
    assert "TILE_M = 32  (default; consumed by" in link_map(ctx.resolved, ctx.allocation, "sm_90")


# --- where a pipeline's value came from ---------------------------------------------------------

def test_a_value_is_located_where_it_was_given():
    """A pipeline's field is located at the option that set it (`given`, as the CLI records it), else at the
    pipeline file's field, else at the field alone (a PipelineSpec built in Python)."""
    spec = PipelineSpec(source="p.json", given={"/profile_tasks": "--profile-tasks 64", "/specialize/M": "--specialize M=4"})
    assert spec.at("/profile_tasks").render() == "option --profile-tasks 64"
    assert spec.at("/specialize/M").option == "--specialize M=4" and spec.at("/specialize/M").file is None
    assert spec.at("/specialize/N") == spec.at("/specialize/N").__class__(file="p.json", pointer="/specialize/N")
    assert PipelineSpec().at("/deal").render() == "at /deal"


def test_the_default_kernel_name_clashing_is_located_at_the_components_symbol():
    """No pipeline file, no --name: the kernel is pipelink_fused; a component whose entry symbol that is gets
    PL077 at its contract's symbol, with the hint to give a name."""
    comps = rowsum(block_rowsum=lambda c: c["entry"].update(symbol="pipelink_fused"))
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=PipelineSpec()), components=comps, until="resolve")
    (d,) = [d for d in ctx.sink.items if d.severity == "error"]
    assert d.code == "PL077" and "(the default)" in d.message and "--name" in d.hint
    assert (d.location.file, d.location.pointer) == ("block_rowsum.json", "/entry/symbol")


def test_a_schema_violation_from_an_option_is_located_at_the_option():
    from pipelink.core.pipeline import checked_spec
    sink = DiagnosticSink()
    assert checked_spec(PipelineSpec(loader_slots=0, given={"/loader_slots": "--loader-slots 0"}), sink) is None
    (d,) = sink.items
    assert d.code == "PL133" and d.location.option == "--loader-slots 0" and d.location.file is None
    sink = DiagnosticSink()
    assert checked_spec(PipelineSpec(loader_slots=0), sink) is None
    assert (sink.items[0].location.file, sink.items[0].location.pointer) == ("<PipelineSpec>", "/loader_slots")


def test_a_setting_with_no_effect_on_the_kernel_is_pl193():
    """dispatch on a kernel that is not persistent, loader_slots, loader_in_flight or loader_l2 where no component loads:
    a warning at the setting (the option that gave it, or the file's field); nothing when the pipeline leaves
    them alone."""
    spec = PipelineSpec(name="k", dispatch="dynamic", given={"/dispatch": "--dispatch dynamic"})
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=spec), components=rowsum(), until="resolve")
    (d,) = ctx.sink.items
    assert (d.code, d.severity, d.location.option) == ("PL193", "warning", "--dispatch dynamic"), d.render()
    spec = PipelineSpec(name="k", source="p.json", loader_in_flight=2, extra={"loader_in_flight": 2})
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=spec), components=rowsum(), until="resolve")
    assert [(d.code, d.location.pointer) for d in ctx.sink.items] == [("PL193", "/loader_in_flight")]
    spec = PipelineSpec(name="k", source="p.json", loader_in_flight_behind=1, extra={"loader_in_flight_behind": 1})
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=spec), components=rowsum(), until="resolve")
    assert [(d.code, d.location.pointer) for d in ctx.sink.items] == [("PL193", "/loader_in_flight_behind")]
    spec = PipelineSpec(name="k", source="p.json", loader_in_flight_behind_until="first_release",
                        extra={"loader_in_flight_behind_until": "first_release"})
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=spec), components=rowsum(), until="resolve")
    assert [(d.code, d.location.pointer) for d in ctx.sink.items] == [("PL193", "/loader_in_flight_behind_until")]
    spec = PipelineSpec(name="k", source="p.json", loader_l2="evict_first", extra={"loader_l2": "evict_first"})
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=spec), components=rowsum(), until="resolve")
    assert [(d.code, d.location.pointer) for d in ctx.sink.items] == [("PL193", "/loader_l2")]
    _, _, sink = run(rowsum())
    assert not sink.items


def _resolved(comps, **fields):
    spec = PipelineSpec(name="k", **fields)
    return run_passes(options=LinkOptions(arch="sm_90", pipeline=spec), components=comps, until="resolve")


def splitk():
    return [shipped("splitk_partial"), shipped("splitk_reduce")]


def test_debug_events_and_standalone_without_events_are_pl193():
    """debug_events bounds event waits and standalone drops the events that leave the link: on a kernel with no
    wait (or nothing to drop) each is a PL193 warning at its setting; where they act, nothing."""
    ctx = _resolved(rowsum(), debug_events=True, given={"/debug_events": "--debug-events"})
    (d,) = ctx.sink.items
    assert (d.code, d.severity, d.location.option) == ("PL193", "warning", "--debug-events"), d.render()
    assert "debug_events" in d.message
    ctx = _resolved(splitk(), debug_events=True)
    assert not ctx.sink.items and ctx.resolved.debug_events
    ctx = _resolved(rowsum(), standalone=True, source="p.json", extra={"standalone": True})
    assert [(d.code, d.location.pointer) for d in ctx.sink.items] == [("PL193", "/standalone")]
    ctx = _resolved(splitk(), standalone=True)  # events between its components stay: nothing dropped
    assert [d.code for d in ctx.sink.items] == ["PL193"]
    ctx = _resolved([shipped("splitk_reduce")], standalone=True)  # its wait on the partials is dropped
    assert not [d for d in ctx.sink.items if d.code == "PL193"], [d.render() for d in ctx.sink.items]


def test_a_specialized_value_that_empties_or_negates_a_tile_extent():
    """specialize bakes a value into every launch: where it makes a tile extent negative the launcher refuses every
    launch (PL001, at the option); where it makes one zero, those tasks never run (PL194, a warning)."""
    given = {"/specialize/M": "--specialize M=0"}
    ctx = _resolved(rowsum(), specialize={"M": 0}, given=given)
    (d,) = ctx.sink.items
    assert (d.code, d.severity, d.location.option) == ("PL194", "warning", "--specialize M=0"), d.render()
    assert "ceil_div(M, TILE_M) = 0" in d.message and ctx.resolved is not None
    ctx = _resolved(rowsum(), specialize={"M": -100}, source="p.json")
    (d,) = ctx.sink.items
    assert (d.code, d.severity, d.location.pointer) == ("PL001", "error", "/specialize/M"), d.render()
    assert "ceil_div(M, TILE_M) = -3" in d.message and ctx.resolved is None
    ctx = _resolved(rowsum(), specialize={"M": 100, "N": 7})
    assert not ctx.sink.items and ctx.resolved.specialize == {"M": 100, "N": 7}
    ctx = _resolved(splitk(), specialize={"M": 0})  # persistent: each component's extent, named
    assert ctx.sink.items and all(d.code == "PL194" for d in ctx.sink.items)
    assert "component 'splitk_partial'" in ctx.sink.items[0].message


def test_event_settings_on_a_kernel_without_events_are_pl193():
    """wait_backoff_ns without a wait, counts_per_cta without a whole-call notification: PL193 at the setting; on
    the split-K pair (its reduce waits, its notifications are per element) only counts_per_cta is without effect."""
    ctx = _resolved(rowsum(), wait_backoff_ns=16, source="p.json", extra={"wait_backoff_ns": 16})
    assert [(d.code, d.location.pointer) for d in ctx.sink.items] == [("PL193", "/wait_backoff_ns")]
    ctx = _resolved(splitk(), wait_backoff_ns=16, counts_per_cta=False, source="p.json",
                    extra={"wait_backoff_ns": 16, "counts_per_cta": False})
    assert [(d.code, d.location.pointer) for d in ctx.sink.items] == [("PL193", "/counts_per_cta")], \
        [d.render() for d in ctx.sink.items]


def test_a_divisor_the_links_geometry_makes_zero_is_pl028():
    """`M // (TILE_N - 128)` passes where the contract is read (TILE_N is the link's), and at TILE_N = 128 every
    launch would divide by zero: PL028 at the expression, naming the value."""
    def grid(divisor):
        return lambda c: c["geometry"]["tile_sequence"]["grid"].__setitem__(0, f"ceil_div(M, TILE_M) + M // {divisor}")
    ctx = _resolved(rowsum(block_rowsum=grid("(TILE_N - 128)")))
    (d,) = ctx.sink.errors
    assert d.code == "PL028" and "TILE_N - 128 is 0 at TILE_N = 128" in d.message, d.render()
    assert (d.location.file, d.location.pointer) == ("block_rowsum.json", "/geometry/tile_sequence/grid/0")
    assert "PL028" not in {d.code for d in _resolved(rowsum(block_rowsum=grid("(TILE_N - 64)"))).sink.errors}


def test_a_geometry_value_the_pipeline_gives_outside_a_consumers_range_is_located_at_the_pipeline():
    """PL051 for a value from --geometry (or the file's geometry) is located at the option or field, with the
    consumer's range as the related location (it had named only the contract, with a hint about a provider)."""
    ctx = _resolved([shipped("block_rowsum")], geometry={"TILE_N": 48}, given={"/geometry/TILE_N": "--geometry TILE_N=48"})
    (d,) = [d for d in ctx.sink.errors if d.code == "PL051"]
    assert d.location.option == "--geometry TILE_N=48" and d.related[0].pointer == "/geometry/consumes/TILE_N"
    assert "a multiple of 32" in d.hint, d.render()


@pytest.mark.parametrize("value", [0, -1024])
def test_a_consumed_name_without_a_min_takes_positive_values_only(value):
    """A consumer's range without `min` is "any positive integer" (its description): a pipeline's -1024 had
    linked, a buffer sized -4096 B and a manifest the loader then refused."""
    def no_min(c):
        c["geometry"]["consumes"]["TILE_N"] = {"default": 128}
    ctx = _resolved([shipped("block_rowsum", no_min)], geometry={"TILE_N": value})
    assert [d.code for d in ctx.sink.errors] == ["PL051"], [d.render() for d in ctx.sink.items]
    assert "any positive integer" in ctx.sink.errors[0].message


def test_a_wire_listed_twice_is_one_wire():
    """The file listing a wire twice is that wire (as --wire given twice is), not PL192 'wired from X and from X'."""
    r, _, sink = run(rowsum(), wires=["tile_load.tile -> tile_transform.src", "tile_load.tile = tile_transform.src"])
    assert not sink.errors and [str(w) for w in r.wires if w.explicit] == ["tile_load.tile -> tile_transform.src"]


def test_warps_over_geometry_past_32_are_one_diagnostic_where_the_roles_are_implied():
    """A component without roles has one role of threads.warps: a link that makes its warps 40 is PL023 at
    /threads/warps once, not again at a /threads/roles/0/warps the file does not have."""
    def warps_of_tile_m(c):
        c["threads"]["warps"] = "NW"
        c["geometry"]["consumes"]["NW"] = {"min": 1, "default": 4}
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=PipelineSpec(name="k", geometry={"NW": 40})),
                     components=rowsum(tile_transform=warps_of_tile_m), until="resolve")
    found = [(d.code, d.location.pointer) for d in ctx.sink.errors if d.code == "PL023"]
    assert found == [("PL023", "/threads/warps")], [d.render() for d in ctx.sink.items]


def test_a_misspelt_component_of_the_pipeline_is_one_error_at_its_name():
    """The pipeline's `components` names 'block_rowsun': one PL001 at that entry, pointing at the input it missed
    (it had been two, the second with a generic hint); an input the pipeline leaves out is its own error."""
    comps = [shipped("tile_transform"), shipped("block_rowsum")]

    def errors(names):
        spec = PipelineSpec(name="k", components=names, source="p.json")
        sink = run_passes(options=LinkOptions(arch="sm_90", pipeline=spec), components=comps, until="resolve").sink
        return [d for d in sink.items if d.severity == "error"]
    [d] = errors(["tile_transform", "block_rowsun"])
    assert d.code == "PL001" and d.location.pointer == "/components/1" and "did you mean 'block_rowsum'?" in d.hint
    [d] = errors(["tile_transform"])
    assert d.code == "PL001" and "'block_rowsum' is not in the pipeline" in d.message and "add 'block_rowsum'" in d.hint


def test_a_grid_the_geometry_makes_larger_than_an_int_is_refused():
    """The glue counts tiles in an int: 2^32 + 1 tasks had linked and been written `const int tiles_0 =
    4294967297;` (1 in the kernel). PL032 at the extent; the product of extents too."""
    def grid(*extents):
        def edit(raw):
            raw["geometry"]["tile_sequence"]["grid"] = list(extents)
        return edit
    for extents, pointer in (([2**32 + 1], "/geometry/tile_sequence/grid/0"),
                             (["4 * TILE_M", 2**30], "/geometry/tile_sequence/grid/1")):
        sink = run_passes(options=LinkOptions(arch="sm_90", pipeline=PipelineSpec(name="k")),
                          components=[shipped("row_softmax", grid(*extents))], until="resolve").sink
        errors = [(d.code, d.location.pointer) for d in sink.items if d.severity == "error"]
        assert errors == [("PL032", pointer)], [d.render() for d in sink.items]


def test_a_wire_listed_twice_in_the_pipeline_file_is_one_wire_and_a_warning():
    from pipelink.core.diagnostics import Location
    from pipelink.core.pipeline import parse_wire
    w = "tile_load.tile -> tile_transform.src"
    wires = tuple(parse_wire(w, DiagnosticSink(), Location(file="p.json", pointer=f"/wires/{i}")) for i in (0, 1))
    spec = PipelineSpec(name="k", wires=wires, source="p.json")
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=spec), components=rowsum(), until="resolve")
    assert not ctx.sink.has_errors and len([x for x in ctx.resolved.wires if x.explicit]) == 1
    [d] = [d for d in ctx.sink.items if d.code == "PL193"]
    assert d.severity == "warning" and d.location.pointer == "/wires/1" and "listed twice" in d.message


@pytest.mark.parametrize("m, refused", [(2147483647, True), (2147483616, False)])
def test_a_grid_extent_whose_int_arithmetic_wraps_is_pl032(m, refused):
    """--specialize M=2^31-1 linked `tiles_0 = ((M + 32 - 1) / 32)` in int: it wraps on the device while the
    launcher counted 67108864 tiles. A step of the glue's int arithmetic past 2^31 - 1 is PL032 at the extent."""
    ctx = _resolved(rowsum(), specialize={"M": m})
    over = [d for d in ctx.sink.errors if d.code == "PL032"]
    assert bool(over) == refused, [d.render() for d in ctx.sink.items]
    if refused:
        assert "32-bit int" in over[0].message and "- 1 (ceil_div in C)" in over[0].message


def test_an_expressions_c_int_overflow_is_the_first_step_past_int32():
    from pipelink.core.expr import parse
    assert parse("ceil_div(M, 32)").c_int_overflow({"M": 2147483647}).endswith("= 2147483678")
    assert parse("ceil_div(M, 32)").c_int_overflow({"M": 2147483616}) is None
    assert parse("M * N // 4").c_int_overflow({"M": 70000, "N": 70000}) == "M * N = 4900000000"
    assert parse("M // (N - N)").c_int_overflow({"M": 1, "N": 2}) is None  # a zero divisor: other checks'


def test_a_buffer_size_whose_int_arithmetic_wraps_in_the_header_is_pl032():
    """`TILE_M * 65536 * 65536 // 1048576` is 4096 x TILE_M bytes to the allocator and 0 in the header's int."""
    def wraps(c):
        c["smem"]["buffers"][0]["bytes"] = "TILE_M * 65536 * 65536 // 1048576"
    comps = rowsum(block_rowsum=wraps)
    ctx = _resolved(comps)
    (d,) = [d for d in ctx.sink.errors if d.code == "PL032"]
    assert d.location.pointer == "/smem/buffers/0/bytes" and "TILE_M * 65536 * 65536 = " in d.message, d.render()
