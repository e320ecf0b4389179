"""Event planning and its link-time analysis: pure, over contracts."""
import json
from pathlib import Path


from pipelink.diagnostics import DiagnosticSink
from pipelink.glue import generate_glue
from pipelink.allocate import allocate
from pipelink.loader import load_contract_bytes
from pipelink.model import Source
from pipelink.pipeline import PipelineSpec
from pipelink.resolve import resolve

from contract_factory import shipped_component

REPO = Path(__file__).resolve().parent.parent
comp = shipped_component


def run(comps, dispatch="static"):
    sink = DiagnosticSink()
    r = resolve(comps, PipelineSpec(name="k", dispatch=dispatch), sink)
    return r, sink


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
    r, sink = run([comp("tile_silu_store"), comp("tile_axpby")], dispatch="dynamic")
    assert not sink.items
    a = allocate(r, "sm_90", sink)
    glue = generate_glue(r, a)
    assert "atomicAdd(pl_workspace + 8, 1ull) - pl_task_base" in glue and "pl::events::wait_for" in glue
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
    sink = DiagnosticSink()
    resolve(splitk() + [tl, tt], PipelineSpec(name="k", schedule="persistent"), sink)
    assert "PL085" in codes(sink)


def test_data_dependent_maps_plan_and_generate():
    comps = [comp("moe_scatter"), comp("moe_expert"), comp("moe_combine")]
    r, sink = run(comps, dispatch="dynamic")
    assert not sink.items, [d.render() for d in sink.items]
    assert r.events.order == ["moe_scatter", "moe_expert", "moe_combine"]
    a = allocate(r, "sm_90", sink)
    glue = generate_glue(r, a)
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

    r, sink = run([comp("moe_scatter", scatter), comp("moe_expert"), comp("moe_combine", combine)], dispatch="dynamic")
    assert not sink.items, [d.render() for d in sink.items]
    glue = generate_glue(r, allocate(r, "sm_90", sink))
    body = glue[glue.index("// moe_combine"):]
    # waits run in the contract's order: the guard's wait comes before anything reads slot
    first_wait = body.index("wait_for(")
    assert "'scattered'" not in body[:first_wait] and first_wait < body.index("slot[")
    scattered = r.events.order and list(r.events.tensors).index("scattered")
    assert body[first_wait:].startswith(f"wait_for(e{scattered} +")


def test_a_negative_gathered_index_names_no_event():
    r, sink = run([comp("moe_scatter"), comp("moe_expert"), comp("moe_combine")], dispatch="dynamic")
    glue = generate_glue(r, allocate(r, "sm_90", sink))
    assert "a0_at >= 0; a0_at = -1" in glue  # the run-once guard around a gathered event index


def test_a_fixed_wait_is_met_once_per_cta_and_a_per_task_one_every_time():
    from pipelink.event_glue import task_invariant
    from pipelink.events import Side
    from pipelink.expr import parse
    from pipelink.indexmap import parse_map

    def side(m, count=None):
        return Side("c", parse_map(m), (), parse(count) if count else None, "p")
    assert task_invariant(side("t->0", "ceil_div(T, 64)"))      # one element, a count over shapes only
    assert not task_invariant(side("t->t"))                     # the element moves with the task
    assert not task_invariant(side("t->0", "t + 1"))            # so does the count
    assert not task_invariant(side("t->:"))                     # many elements
    assert not task_invariant(side("t->topk[t, :]"))            # read on the device
    # the case study's combine: 'placed' is waited once per CTA, the gathered 'done' by every task
    from pipelink.collect import Component
    comps = []
    for team in ("router", "dispatch", "expert", "combine"):
        path = REPO / "case_studies" / "moe_four_owners" / team / f"{team}.json"
        sink = DiagnosticSink()
        comps.append(Component(load_contract_bytes(path.read_bytes(), Source(path.name), sink), None))
    r, sink = run(comps, dispatch="dynamic")
    assert not sink.items, [d.render() for d in sink.items]
    body = generate_glue(r, allocate(r, "sm_90", sink)).split("// moe_combine\n")[1]
    guard, placed, done = body.index("if (!pl_ready_3_0)"), body.index("wait_for(e2 +"), body.index("wait_for(e4 +")
    assert guard < placed < done and body.index("pl_ready_3_0 = true;") > done
    assert body[placed:done].count("if (!pl_ready") == 0  # nothing guards the per-task wait
