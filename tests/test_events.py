"""Event planning and its link-time analysis: pure, over contracts."""
import json
from pathlib import Path

import pytest

from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.loader import load_contract_bytes
from pipelink.core.model import Source
from pipelink.core.pipeline import PipelineSpec
from pipelink.linker.passes import LinkOptions, run_passes

from contract_factory import shipped_component

REPO = Path(__file__).resolve().parent.parent
comp = shipped_component


def linked(comps, until="generate", **spec):
    """The link's passes over components already read, from check to `until`."""
    return run_passes(options=LinkOptions(arch="sm_90", pipeline=PipelineSpec(name="k", **spec)), components=comps,
                      until=until)


def run(comps, dispatch="static"):
    ctx = linked(comps, until="resolve", dispatch=dispatch)
    return ctx.resolved, ctx.sink


def codes(sink):
    return sorted(d.code for d in sink.items if d.severity == "error")


def splitk(**edits):
    return [comp("splitk_partial", edits.get("partial")), comp("splitk_reduce", edits.get("reduce"))]


def test_split_k_plan():
    r, sink = run(splitk())
    assert not sink.items and r.schedule == "persistent"
    t = r.events.tensors["partials"]
    assert [str(e) for e in t.shape] == ["ceil_div(M, ROWS)"]          # derived from the projection
    assert t.count_c(lambda n: n) == "((K + KCHUNK - 1) / KCHUNK)"     # one notification per K chunk
    assert r.events.order == ["splitk_partial", "splitk_reduce"]


def test_tile_chain_plan_and_glue():
    ctx = linked([comp("tile_silu_store"), comp("tile_axpby")], dispatch="dynamic")
    a, sink, glue = ctx.allocation, ctx.sink, ctx.glue
    assert not sink.items
    assert "atomicAdd(pl_workspace + 8, 1ull), (unsigned long long)total_tasks)" in glue
    assert "pl::events::wait_for" in glue and "pl_task_base" not in glue
    assert "add_one" in glue
    assert a.block_warps == 4  # tasks of both components run one at a time on the same warps


def test_order_follows_events_not_the_list():
    r, sink = run(list(reversed(splitk())))
    assert not sink.items and r.events.order == ["splitk_partial", "splitk_reduce"]


def test_seeded_bug_producer_notifies_one_time_too_few():
    """The producer walks floor(K / KCHUNK) chunks; the reducer expects ceil: one too few when ragged."""
    r, sink = run(splitk(partial=lambda c: c["geometry"]["tile_sequence"].update(
        grid=["ceil_div(M, ROWS)", "K // KCHUNK"]), reduce=lambda c: c["events"]["waits"][0].update(
        count="ceil_div(K, KCHUNK)")))
    assert codes(sink) == ["PL083"]
    d = sink.items[0]
    assert "waits for 1 notifications of 'partials'[0], but the producers send 0" in d.message
    assert "the wait would never end" in d.message and d.location.component == "splitk_reduce"


def test_too_many_notifications_start_too_early():
    r, sink = run(splitk(reduce=lambda c: c["events"]["waits"][0].update(count=1)))
    assert codes(sink) == ["PL083"]
    assert "it would start before its inputs are complete" in sink.items[0].message


def test_cycle():
    def also_waits(c):
        c["events"]["waits"] = [{"name": "back", "map": "ik->i"}]

    def also_notifies(c):
        c["events"]["notifies"] = [{"name": "back", "map": "i->i"}]
    _, sink = run(splitk(partial=also_waits, reduce=also_notifies))
    assert codes(sink) == ["PL080"]
    assert "splitk_partial (partials) -> splitk_reduce (back) -> splitk_partial" in sink.items[0].message


def test_waiting_for_nobody_and_rank_mismatch():
    _, sink = run([comp("splitk_reduce")])
    assert codes(sink) == ["PL081"]
    _, sink = run(splitk(reduce=lambda c: c["events"]["waits"][0].update(map="i->i, 0")))
    assert "PL082" in codes(sink)


def test_index_out_of_range():
    def wrong_shape(c):
        c["events"]["notifies"][0].update(map="ik->k", shape=["ceil_div(M, ROWS)"])
    _, sink = run(splitk(partial=wrong_shape))
    assert "PL084" in codes(sink)


def test_underivable_count_must_be_given():
    _, sink = run(splitk(partial=lambda c: c["events"]["notifies"][0].update(map="ik->i//2", shape=["M"])))
    assert "PL083" in codes(sink)
    assert "cannot be derived" in next(d.message for d in sink.items if d.code == "PL083")


def test_smem_wire_between_persistent_components_is_refused():
    tl = comp("tile_load")
    tt = comp("tile_transform")
    sink = linked(splitk() + [tl, tt], until="resolve", schedule="persistent").sink
    assert "PL085" in codes(sink)


def test_data_dependent_maps_plan_and_generate():
    comps = [comp("moe_scatter"), comp("moe_expert"), comp("moe_combine")]
    ctx = linked(comps, dispatch="dynamic")
    r, sink, glue = ctx.resolved, ctx.sink, ctx.glue
    assert not sink.items, [d.render() for d in sink.items]
    assert r.events.order == ["moe_scatter", "moe_expert", "moe_combine"]
    assert "topk[((long long)(tile.coord[0])) * (long long)(TOPK) + a0_1]" in glue   # i->topk[i,:]
    assert "(unsigned)(counts[(long long)(tile.coord[0])])" in glue                  # count read per task
    assert "max((long long)(offsets[(long long)((tile.coord[0] + 1))]) - pl_lo0, 0ll)" in glue  # range(...)
    assert "pl_i += 128" in glue  # the block's threads share the elements


def test_data_dependent_count_must_be_explicit_and_tensors_shaped():
    _, sink = run([comp("moe_scatter"), comp("moe_expert", lambda c: c["events"]["waits"][0].update(count="auto")),
                   comp("moe_combine")])
    assert "PL083" in codes(sink)
    sink = DiagnosticSink()
    raw = json.loads((REPO / "contracts" / "moe_scatter.json").read_text())
    del raw["entry"]["params"][1]["shape"]
    assert load_contract_bytes(json.dumps(raw).encode(), Source("s.json"), sink) is None
    assert [d.code for d in sink.items] == ["PL029"]


def _scatter_writes_slot(c):
    next(p for p in c["entry"]["params"] if p["name"] == "slot")["const"] = False


def test_map_reading_a_tensor_written_in_the_launch_needs_an_earlier_wait():
    """moe_combine's wait t->slot[t,:] reads `slot`; if moe_scatter writes slot in the same launch, nothing
    orders that read after moe_scatter: it may see the previous launch's values (PL086)."""
    comps = [comp("moe_scatter", _scatter_writes_slot), comp("moe_expert"), comp("moe_combine")]
    _, sink = run(comps, dispatch="dynamic")
    assert codes(sink) == ["PL086"], [d.render() for d in sink.items]
    assert "'moe_combine' waits on 'row_done'" in sink.items[0].message and "'slot'" in sink.items[0].message


def test_an_earlier_wait_on_the_writer_orders_the_read():
    def scatter(c):
        _scatter_writes_slot(c)
        c["events"]["notifies"].append({"name": "scattered", "map": "i->:", "shape": [1]})

    def combine(c):
        c["events"]["waits"].insert(0, {"name": "scattered", "map": "t->0", "count": "auto"})

    ctx = linked([comp("moe_scatter", scatter), comp("moe_expert"), comp("moe_combine", combine)], dispatch="dynamic")
    r, sink, glue = ctx.resolved, ctx.sink, ctx.glue
    assert not sink.items, [d.render() for d in sink.items]
    body = glue[glue.index("// moe_combine"):]
    # waits run in the contract's order: the guard's wait comes before anything reads slot
    first_wait = body.index("wait_for(")
    assert "'scattered'" not in body[:first_wait] and first_wait < body.index("slot[")
    scattered = r.events.order and list(r.events.tensors).index("scattered")
    assert body[first_wait:].startswith(f"wait_for(e{scattered} +")


def test_a_negative_gathered_index_names_no_event():
    glue = linked([comp("moe_scatter"), comp("moe_expert"), comp("moe_combine")], dispatch="dynamic").glue
    assert "a0_at >= 0; a0_at = -1" in glue  # the run-once guard around a gathered event index


def test_a_fixed_wait_is_met_once_per_cta_and_a_per_task_one_every_time():
    from pipelink.core.expr import parse
    from pipelink.core.indexmap import parse_map
    from pipelink.linker.events import task_invariant
    from pipelink.linker.events import Side

    def side(m, count=None):
        return Side("c", parse_map(m), (), parse(count) if count else None, "p")
    assert task_invariant(side("t->0", "ceil_div(T, 64)"))      # one element, a count over shapes only
    assert not task_invariant(side("t->t"))                     # the element moves with the task
    assert not task_invariant(side("t->0", "t + 1"))            # so does the count
    assert not task_invariant(side("t->:"))                     # many elements
    assert not task_invariant(side("t->topk[t, :]"))            # read on the device
    # the case study's combine: 'placed' is waited once per CTA, the gathered 'done' by every task
    from pipelink.core.model import Component
    comps = []
    for team in ("router", "dispatch", "expert", "combine"):
        path = REPO / "case_studies" / "moe_four_owners" / team / f"{team}.json"
        sink = DiagnosticSink()
        comps.append(Component(load_contract_bytes(path.read_bytes(), Source(path.name), sink), None))
    ctx = linked(comps, dispatch="dynamic")
    assert not ctx.sink.items, [d.render() for d in ctx.sink.items]
    body = ctx.glue.split("// moe_combine\n")[1]
    import re
    evt = {name: f"e{j}" for j, name in enumerate(re.findall(r"// event '(\w+)'", ctx.glue))}  # in region order
    assert {"placed", "done"} <= set(evt), evt
    guard = body.index("if (!pl_ready_3_0)")
    placed, done = body.index(f"wait_for({evt['placed']} +"), body.index(f"wait_for({evt['done']} +")
    assert guard < placed < done and body.index("pl_ready_3_0 = true;") > done
    assert body[placed:done].count("if (!pl_ready") == 0  # nothing guards the per-task wait


# --- affine ranges are affine; maps read from the device are bounded -----------------------------

def test_affine_range_wait_is_checked_like_any_affine_map():
    """`i->range(i - 1, i + 2)` reads no device data: task 0 waits on element -1 (PL084)."""
    count = "ceil_div(K, KCHUNK)"
    _, sink = run(splitk(reduce=lambda c: c["events"]["waits"][0].update(map="i->range(i - 1, i + 2)", count=count)))
    assert codes(sink) == ["PL084"], [d.render() for d in sink.items]
    assert "'splitk_reduce' task (0,) waits on 'partials'[-1] outside its shape" in sink.items[0].message


def test_affine_range_counts_are_exact():
    window = lambda count: lambda c: c["events"]["waits"][0].update(map="i->range(i, i + 1)", count=count)  # noqa: E731
    _, sink = run(splitk(reduce=window("ceil_div(K, KCHUNK)")))
    assert not sink.items, [d.render() for d in sink.items]
    _, sink = run(splitk(reduce=window("ceil_div(K, KCHUNK) + 1")))
    assert codes(sink) == ["PL083"] and "the wait would never end" in sink.items[0].message


def test_affine_range_notifier_out_of_range():
    _, sink = run(splitk(partial=lambda c: c["events"]["notifies"][0].update(map="ik->range(i, i + 2)",
                                                                            shape=["ceil_div(M, ROWS)"]),
                         reduce=lambda c: c["events"]["waits"][0].update(count="ceil_div(K, KCHUNK)")))
    assert "PL084" in codes(sink)
    d = next(d for d in sink.items if d.code == "PL084")
    assert "'splitk_partial' task" in d.message and "notifies 'partials'" in d.message


def _case_study(edits=None):
    from pipelink.core.model import Component
    comps = []
    for team in ("router", "dispatch", "expert", "combine"):
        raw = json.loads((REPO / "case_studies" / "moe_four_owners" / team / f"{team}.json").read_text())
        if edits and team in edits:
            edits[team](raw)
        sink = DiagnosticSink()
        c = load_contract_bytes(json.dumps(raw).encode(), Source(f"{team}.json"), sink)
        assert c is not None, [d.render() for d in sink.items]
        comps.append(Component(c, None))
    return comps


def test_unmeetable_count_on_a_map_read_from_the_device():
    """combine waits for 7 notifications of each element pair_tile names, but expert's `i->i` sends one
    to each element: no value of pair_tile can make the wait end."""
    def seven(c):
        c["events"]["waits"][1]["count"] = 7
    _, sink = run(_case_study({"combine": seven}), dispatch="dynamic")
    assert codes(sink) == ["PL083"], [d.render() for d in sink.items]
    d = sink.items[0]
    assert d.location.component == "moe_combine"
    assert "waits for 7 notifications of each 'done' element it reads through 'tc->pair_tile[t, :]'" in d.message
    assert "at most 1 can reach any element" in d.message and "the wait would never end" in d.message
    _, sink = run(_case_study(), dispatch="dynamic")   # the count of 1 it ships with is possible
    assert not sink.items, [d.render() for d in sink.items]


def test_notifications_of_a_gathering_notifier_are_bounded():
    """moe_scatter's `i->topk[i,:]` sends at most T x TOPK notifications to one expert (every slot of
    every token naming it): a fixed count above that can never be met; one at it might be."""
    def count(value):
        return lambda c: c["events"]["waits"][0].update(count=value)
    comps = lambda value: [comp("moe_scatter"), comp("moe_expert", count(value)), comp("moe_combine")]  # noqa: E731
    _, sink = run(comps("T * TOPK + 1"), dispatch="dynamic")
    assert codes(sink) == ["PL083"], [d.render() for d in sink.items]
    assert "but at most" in sink.items[0].message and "moe_scatter 'i->topk[i,:]'" in sink.items[0].message
    _, sink = run(comps("T * TOPK"), dispatch="dynamic")
    assert not sink.items, [d.render() for d in sink.items]


def test_a_range_read_from_the_device_sends_at_most_one_per_task():
    """moe_expert's `e->range(offsets[e], offsets[e+1])` reaches a row at most once per expert task."""
    def combine(value):
        def edit(c):
            c["entry"]["params"].append({"name": "E", "dtype": "i32"})
            c["events"]["waits"][0]["count"] = value
        return edit
    _, sink = run([comp("moe_scatter"), comp("moe_expert"), comp("moe_combine", combine("E + 1"))], dispatch="dynamic")
    assert codes(sink) == ["PL083"] and "at most" in sink.items[0].message
    _, sink = run([comp("moe_scatter"), comp("moe_expert"), comp("moe_combine", combine("E"))], dispatch="dynamic")
    assert not sink.items, [d.render() for d in sink.items]


def test_affine_side_of_a_data_dependent_event_is_still_range_checked():
    """expert notifies `done` through `i->i`, shape given too small: out of range whatever pair_tile holds."""
    def small_shape(c):
        c["events"]["notifies"][0]["shape"] = ["E"]
    _, sink = run(_case_study({"expert": small_shape}), dispatch="dynamic")
    assert "PL084" in codes(sink), [d.render() for d in sink.items]


def test_link_map_says_a_device_count_is_not_checked():
    from pipelink.linker.emit import DEVICE_COUNT_NOTE
    text = linked([comp("moe_scatter"), comp("moe_expert"), comp("moe_combine")], until="map",
                  dispatch="dynamic").link_map
    lines = [line for line in text.splitlines() if DEVICE_COUNT_NOTE in line]
    assert lines == [f"    moe_expert waits e->e for counts[e]: {DEVICE_COUNT_NOTE}"]
    assert "count read from the device: not checked at link time; --debug-events reports a wait that is never met" \
        in DEVICE_COUNT_NOTE


def test_debug_events_bound_every_wait():
    """--debug-events gives every generated wait its spin bound: waits on fixed elements, on gathered
    elements, once-per-CTA waits and waits whose count is read from the device."""
    import re
    from pipelink.linker.glue import DEBUG_SPIN_BOUND
    comps = _case_study()
    glue = linked(comps, dispatch="dynamic", debug_events=True).glue
    calls = re.findall(r"wait_for\(e\d+ \+ .*?, (\(unsigned\)\(.*?\)), pl_epoch, (\w+),", glue)
    assert len(calls) == sum(len(c.contract.events.waits) for c in comps) == 6  # the router's chain too
    assert {bound for _, bound in calls} == {f"{DEBUG_SPIN_BOUND}ull"}
    assert any("tile_rows[" in count for count, _ in calls)  # the count read from the device


def test_only_the_notifying_threads_fence():
    """After a task's barrier, the threads that move a count fence before their adds; no block-wide fence
    (it stalled every warp after every task). One element: the thread that takes it; a loop: the threads
    the loop deals elements to."""
    import re
    for comps in (splitk(), [comp("moe_scatter"), comp("moe_expert"), comp("moe_combine")]):
        glue = linked(comps, dispatch="dynamic").glue
        lines = glue.splitlines()
        adds = [i for i, line in enumerate(lines) if "pl::events::add_one(" in line]
        assert adds
        assert not [ln for ln in lines if ln.strip() == "__threadfence();  // the task's writes are visible to every CTA before any count moves"]
        fences = [i for i, ln in enumerate(lines) if re.search(r"^\s*if \(.*threadIdx\.x.*\) __threadfence\(\);", ln)]
        assert fences
        for i in adds:  # every add has a conditional fence before it, after the task's barrier
            f = max(j for j in fences if j < i)
            b = max(j for j, ln in enumerate(lines[:f]) if "__syncthreads();  // the task's writes are done" in ln)
            assert b < f < i


def test_notifier_condition_matches_the_dealing():
    from pipelink.linker.event_glue import ElementSpace, Loop, notifier_condition
    one = ElementSpace((), (), "0")
    assert notifier_condition(one, 256, 3) == "threadIdx.x == 3u"
    assert notifier_condition(one, 256, 259) == "threadIdx.x == 3u"
    two = ElementSpace((Loop("a", "0", "(long long)(B)"), Loop("b", "lo", "hi")), (), "a")
    assert notifier_condition(two, 256, 0) == \
        "(long long)threadIdx.x < (long long)((long long)(B)) * max((long long)(hi) - (long long)(lo), 0ll)"


def test_a_standalone_link_drops_the_events():
    """splitk_reduce waits on splitk_partial's partials: alone it is refused, standalone it links with no waits."""
    ctx = linked([comp("splitk_reduce")], until="resolve")
    assert "PL081" in codes(ctx.sink)
    (d,) = [d for d in ctx.sink.items if d.code == "PL081"]
    assert "'partials', which no component notifies" in d.message and "--standalone" in d.hint
    ctx = linked([comp("splitk_reduce")], standalone=True)
    assert not codes(ctx.sink), [d.render() for d in ctx.sink.items]
    assert ctx.resolved.events is None or not ctx.resolved.events.tensors
    assert "wait_for" not in ctx.glue and "add_one" not in ctx.glue


def test_a_standalone_link_keeps_a_chain():
    """block_scan waits on its own `carried` events (task i on task i - 1): alone it is a kernel of its own,
    and the chain must stay in it, or a task reads a carry its predecessor has not written yet."""
    ctx = linked([comp("block_scan")], standalone=True)
    assert not codes(ctx.sink), [d.render() for d in ctx.sink.items]
    assert set(ctx.resolved.events.tensors) == {"carried"}
    assert "wait_for" in ctx.glue and "add_one" in ctx.glue
    assert ctx.resolved.schedule == "persistent"


def test_a_standalone_link_keeps_the_events_between_its_components():
    """splitk_partial -> splitk_reduce split into a launch of their own: the partials event joins two of the
    link's components, so it stays (dropped, the reduce would read unwritten partials)."""
    ctx = linked([comp("splitk_partial"), comp("splitk_reduce")], standalone=True)
    assert not codes(ctx.sink), [d.render() for d in ctx.sink.items]
    assert set(ctx.resolved.events.tensors) == {"partials"}
    assert "wait_for" in ctx.glue and "add_one" in ctx.glue


def test_only_kernels_with_a_register_hungry_component_hold_their_sizes():
    """The persistent glue reads its launch sizes (task counts, event extents and bases) from shared memory
    only where a component asks for HOLD_SIZES_AT_REGISTERS or more (the MoE layer's expert, 255: in registers
    they made its wgmma loop spill); the arena's glue words grow by one per held size. At 128 they stay in
    registers, the glue as before."""
    from dataclasses import replace
    from pipelink.core.model import Component
    from pipelink.linker.allocate import GLUE_FLAG_BYTES, HOLD_SIZES_AT_REGISTERS
    comps = []
    for team in ("router", "dispatch", "expert", "combine"):
        path = REPO / "case_studies" / "moe_four_owners" / team / f"{team}.json"
        comps.append(Component(load_contract_bytes(path.read_bytes(), Source(path.name), DiagnosticSink()), None))
    assert max(c.contract.max_registers for c in comps) >= HOLD_SIZES_AT_REGISTERS
    held = linked(comps, dispatch="dynamic")
    assert "pl_held" in held.glue and "int const volatile& c0_tasks" in held.glue
    words = held.glue.count("*reinterpret_cast<")  # one store per held size, one read-only view each
    assert words > 0
    flags = [p.item for p in held.allocation.smem if p.item.key == "buffer pl_glue.flags"][0]
    assert flags.size > GLUE_FLAG_BYTES
    assert "launch sizes (task counts, event extents and bases) read from shared memory" in \
        linked(comps, dispatch="dynamic", until="map").link_map
    modest = [replace(c, contract=replace(c.contract, max_registers=min(c.contract.max_registers or 128, 128)))
              for c in comps]
    plain = linked(modest, dispatch="dynamic")
    assert "pl_held" not in plain.glue and "const int c0_tasks" in plain.glue
    assert "launch sizes" not in linked(modest, dispatch="dynamic", until="map").link_map
    flags = [p.item for p in plain.allocation.smem if p.item.key == "buffer pl_glue.flags"][0]
    assert flags.size == GLUE_FLAG_BYTES


def test_a_tensor_a_map_reads_is_read_inside_its_declared_extents():
    """moe_expert's `e->range(offsets[e], offsets[e+1])` reads offsets[E] at its last task: declared with E
    extents instead of E + 1, the glue would read past what the launcher checks the argument holds (PL084 at the
    notify, naming the tensor and the task); as shipped it is inside."""
    def short_offsets(c):
        for p in c["entry"]["params"]:
            if p["name"] == "offsets":
                p["shape"] = [p["shape"][0].replace("+ 1", "").strip() or "E"]
    _, sink = run([comp("moe_scatter"), comp("moe_expert", short_offsets), comp("moe_combine")], dispatch="dynamic")
    found = [d for d in sink.items if d.code == "PL084"]
    assert found and "reads 'offsets'[" in found[0].message and "outside the shape its contract gives" in \
        found[0].message, [d.render() for d in sink.items]
    assert found[0].location.component == "moe_expert" and found[0].location.pointer.startswith("/events/notifies/")
    _, sink = run([comp("moe_scatter"), comp("moe_expert"), comp("moe_combine")], dispatch="dynamic")
    assert not sink.items, [d.render() for d in sink.items]


def test_a_specialized_value_is_not_sampled():
    """A fixed count that holds at the specialized K (the only K the kernel is launched with) links; sampled over K
    as well it had been refused (PL083 'at K=1'). Without the specialization it is refused, as before."""
    fixed = lambda c: c["events"]["waits"][0].update(count="2")  # noqa: E731  ceil_div(2048, KCHUNK 1024)
    ctx = linked(splitk(reduce=fixed), until="resolve", specialize={"K": 2048})
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    ctx = linked(splitk(reduce=fixed), until="resolve")
    assert [d.code for d in ctx.sink.errors] == ["PL083"]


def test_a_window_far_past_the_event_is_refused_at_once():
    """block_scan waiting on `i->range(0, 2147483647)`: the window was enumerated element by element on every
    sampled shape before it met the shape (minutes); clamped to the shape, one element outside stands for the rest."""
    import time
    start = time.monotonic()
    _, sink = run([comp("block_scan", lambda c: c["events"]["waits"][0].update(map="i->range(0, 2147483647)"))])
    assert "PL084" in codes(sink) and time.monotonic() - start < 30, [d.render() for d in sink.items]


def test_components_that_share_a_written_tensor_without_an_event_between_them_race():
    """A persistent link of components (no calls): the reduction that reads the partials with its wait removed
    would run its tasks beside the partial products' on other CTAs and read partials not yet written. PL178 at the
    reader's parameter, the writer's as the related place; with the wait, nothing."""
    def no_waits(raw):
        raw["events"].pop("waits")
    r, sink = run([comp("splitk_partial"), comp("splitk_reduce", no_waits)])
    errors = [d for d in sink.items if d.severity == "error"]
    assert [d.code for d in errors] == ["PL178"], [d.render() for d in sink.items]
    text = errors[0].render()
    assert "nothing orders 'splitk_reduce' after 'splitk_partial'" in text
    assert "'splitk_reduce' writes 'partial', which 'splitk_partial' writes" in text  # its contract: not const
    assert "splitk_reduce.json" in text and "/entry/params/" in text and "splitk_partial.json" in text
    assert "wait on an event that 'splitk_partial' notifies" in text
    # two components that only read a tensor they share do not race; the shipped pair is ordered by its event
    r, sink = run(splitk())
    assert not sink.items


def test_a_negative_grid_extent_is_refused_at_the_grid_not_at_a_waiter():
    """`-N` tasks is no grid: the sampled shapes find it negative and say so at the component's grid (it had been
    reported as a waiter's index outside the event's shape [-1], located at the waiter)."""
    def negative(raw):
        raw["geometry"]["tile_sequence"]["grid"][0] = "0 - ceil_div(M, ROWS)"
    r, sink = run([comp("splitk_partial", negative), comp("splitk_reduce")])
    errors = [d for d in sink.items if d.severity == "error"]
    assert [(d.code, d.location.pointer) for d in errors] == [("PL032", "/geometry/tile_sequence/grid/0")], \
        [d.render() for d in sink.items]
    assert "splitk_partial.json" in errors[0].render() and "never negative" in errors[0].message


@pytest.mark.parametrize("wait_map, code", [("i->i // (M - M)", "PL031"), ("i->i // (K // 9999999)", "PL031"),
                                            ("i->range(i + 1, i)", "PL083"), ("i->range(i, i)", "PL083")])
def test_a_map_that_does_nothing_at_every_sampled_shape_is_refused(wait_map, code):
    """A wait map whose first task divides by zero at every sampled shape (a device fault at every launch), or
    whose window is empty for every task (a wait that orders nothing, so the race check trusted an order that
    was not there), had checked and linked clean."""
    def edit(c):
        c["events"]["waits"][0]["map"] = wait_map
        c["events"]["waits"][0]["count"] = 1
    r, sink = run(splitk(reduce=edit))
    assert code in [d.code for d in sink.errors], [d.render() for d in sink.items]
    d = next(d for d in sink.errors if d.code == code)
    assert d.location.pointer == "/events/waits/0", d.render()
