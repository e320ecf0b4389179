"""Calls: one component called several times with bound parameters, a block of calls repeated per layer.

The components are the Llama decode team contracts, read bare (no objects): resolve, allocate and the
glue run as for a link; one test compiles the glue with NVRTC.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.loader import load_contract_dict
from pipelink.core.model import Component, Source
from pipelink.core.pipeline import load_pipeline_dict
from pipelink.linker.calls import rename_expr, rename_map
from pipelink.linker.passes import LinkOptions, run_passes

DECODE = Path(__file__).resolve().parents[1] / "case_studies" / "llama32_1b_decode"
CONTRACTS = {"rmsnorm": "norm/rmsnorm.json", "gemv_residual": "linear/gemv_residual.json",
             "gemv_swiglu": "linear/gemv_swiglu.json", "lm_head": "linear/lm_head.json",
             "argmax_merge": "linear/argmax_merge.json"}

# A decoder's MLP half, repeated per layer, then the greedy head.
MLP_LAYERS = {
    "pipeline": 1, "name": "mlp_layers", "layers": "NL",
    "calls": [
        {"name": "mlp_norm", "component": "rmsnorm", "per_layer": True, "stacked": ["weight"],
         "bind": {"weight": "norm_w"}, "after_previous_layer": ["down"]},
        {"name": "gate_up", "component": "gemv_swiglu", "per_layer": True, "stacked": ["w"],
         "bind": {"w": "w_gu", "x": "xn", "K": "H"}, "after": ["mlp_norm"]},
        {"name": "down", "component": "gemv_residual", "per_layer": True, "stacked": ["w"],
         "bind": {"w": "w_down", "x": "h", "r": "x", "y": "x", "N": "H", "K": "I"}, "after": ["gate_up"]},
        {"name": "final_norm", "component": "rmsnorm", "bind": {"weight": "final_w"}, "after": ["down"]},
        {"name": "lm_head", "bind": {"w": "w_lm", "x": "xn", "part": "head_part", "K": "H"},
         "after": ["final_norm"]},
        {"name": "argmax_merge", "bind": {"part": "head_part"}},
    ]}


def components(names=tuple(CONTRACTS), edit=None):
    out = []
    for name in names:
        raw = json.loads((DECODE / CONTRACTS[name]).read_text())
        if edit:
            edit(name, raw)
        sink = DiagnosticSink()
        c = load_contract_dict(raw, Source(str(DECODE / CONTRACTS[name])), sink)
        assert c is not None, [d.render() for d in sink.items]
        out.append(Component(c, None))
    return out


def run(doc, comps=None, until="generate", **spec_edits):
    sink = DiagnosticSink()
    spec = load_pipeline_dict(doc, sink, "p.json")
    assert spec is not None, [d.render() for d in sink.items]
    from dataclasses import replace
    spec = replace(spec, **spec_edits)
    return run_passes(options=LinkOptions(arch="sm_90", pipeline=spec, cache=False),
                      components=comps if comps is not None else components(), until=until)


def codes(ctx):
    return sorted({d.code for d in ctx.sink.errors})


def edited(**changes):
    doc = copy.deepcopy(MLP_LAYERS)
    for name, fields in changes.items():
        call = next(c for c in doc["calls"] if c["name"] == name)
        call.update(fields)
        for k in [k for k, v in fields.items() if v is None]:
            del call[k]
    return doc


def test_rename_expressions_and_maps():
    assert rename_expr("ceil_div(N, GEMV_ROWS) * B", {"N": "H", "B": "BB"}) == "ceil_div(H, GEMV_ROWS) * BB"
    assert rename_expr("ceil_div(N, 8)", {"ceil_div": "x"}) == "ceil_div(N, 8)"   # a function keeps its name
    assert rename_expr("1e5 + K", {"e5": "no", "K": "H"}) == "1e5 + H"
    assert rename_expr(64, {"K": "H"}) == 64
    # task letters stay; the tensors a map reads are parameters
    assert rename_map("ik->topk[i, :]", {"topk": "routes", "i": "no"}) == "ik->routes[i, :]"
    assert rename_map("bhs->bh", {"b": "x"}) == "bhs->bh"


def test_layers_plan_glue_and_manifest():
    ctx = run(MLP_LAYERS, until="generate")
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    r = ctx.resolved
    assert [c.name for c in r.components] == ["mlp_norm", "gate_up", "down", "final_norm", "lm_head", "argmax_merge"]
    assert r.calls.per_layer == ("mlp_norm", "gate_up", "down")
    params = {p.name: p for p in r.params}
    # one tensor per kernel parameter: stacked weights hold NL copies, the layer count is a parameter
    assert [str(e) for e in params["w_gu"].shapes[0]] == ["(NL) * (2 * I)", "H"]
    assert params["NL"].dtype == "i32" and not params["NL"].pointer
    assert "N" not in params and "K" not in params   # bound to H and I
    glue = ctx.glue
    assert "for (int pl_layer = 0; pl_layer < (int)(NL); ++pl_layer) {" in glue
    # the object's entry, called with the call's arguments; a stacked one at its layer's copy
    assert "gemv_residual(tile, (w_down + (long long)pl_layer * (long long)(H) * (long long)(I)), h, x, x, B, H, I);" in glue
    assert glue.count('extern "C" __device__ void rmsnorm(') == 1   # one object, called twice
    # rmsnorm's own event `normed` is waited by nobody: dropped
    assert "normed" not in {t for t in r.events.tensors}
    assert set(r.events.tensors) == {"pl_after_mlp_norm", "pl_after_gate_up", "pl_after_down",
                                      "pl_after_final_norm", "partials"}
    assert "pl_layer > 0 && !pl_previous_0_2" in glue   # the next layer's norm waits for down
    # static dispatch: the flag is a bool of the call's task loop, not a value live across the layer loop
    assert glue.index("bool pl_previous_0_2 = false;") < glue.index("for (int t = (int)blockIdx.x; t < c0_tasks")
    from pipelink.linker.emit import manifest
    m = manifest(r, ctx.allocation, "sm_90", b"")   # what the launcher reads (the cubin aside)
    assert m.tasks["gate_up"].startswith("(NL) * ") and not m.tasks["lm_head"].startswith("(NL)")
    shapes = {e.name: e.shape for e in m.workspace.events}
    assert shapes["pl_after_down"] == ("NL", "1")       # one copy of the counters per layer
    assert shapes["pl_after_final_norm"] == ("1",) and shapes["partials"][0] != "NL"


def test_link_map_shows_the_layer_loop():
    ctx = run(MLP_LAYERS, until="map")
    m = ctx.link_map
    assert "  layer loop, NL times:\n    mlp_norm: grid [B] row_major (calls rmsnorm; per layer: norm_w; after down of " \
           "the layer before)" in m
    assert "  final_norm: grid [B] row_major (calls rmsnorm)" in m
    assert "pl_after_down[1], one copy per layer (NL): down notifies" in m
    assert "mlp_norm of the next layer waits for all of it" in m  # the glue's wait: it had shown no waiter
    assert "int NL  (the layer loop: how many layers run)" in m   # it had shown no user, '()'


def test_calls_share_the_components_resources():
    ctx = run(MLP_LAYERS, until="allocate")
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    a = ctx.allocation
    # the second call of a component has the first one's buffers and barrier ids: one code, one placement
    assert a.buffer_offset[("down", "xs")] == a.buffer_offset[("down", "xs")]
    for first, other in (("mlp_norm", "final_norm"),):
        for (comp, what), value in a.barrier_id.items():
            if comp == first:
                assert a.barrier_id[(other, what)] == value
        for (comp, what), value in a.buffer_offset.items():
            if comp == first:
                assert a.buffer_offset[(other, what)] == value
    # and the glue defines each of the component's constants once
    ctx = run(MLP_LAYERS)
    assert ctx.glue.count("pl_rmsnorm__warp_begin = ") == 1
    assert "pl_final_norm__" not in ctx.glue


@pytest.mark.parametrize("dispatch", ["static", "dynamic"])
def test_glue_compiles(dispatch):
    ctx = run(MLP_LAYERS, until="compile", dispatch=dispatch)
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    assert ctx.glue_ltoir


@pytest.mark.parametrize("dispatch", ["static", "dynamic"])
def test_met_waits_are_remembered_per_call_or_per_layer(dispatch):
    """A task-invariant wait is met once per CTA and layer. Static dispatch walks a call's tasks of a layer one
    after another: its flags are bools of that call's loop, none live across the layer loop. Dynamic dispatch
    interleaves the calls in one claim loop: its flags are declared before it and hold the layer they were met in."""
    from pipelink.linker.event_glue import flags_per_call
    ctx = run(MLP_LAYERS, until="generate", dispatch=dispatch)
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    glue, r = ctx.glue, ctx.resolved
    assert flags_per_call(r) == (dispatch == "static")
    layer_loop = glue.index("for (int pl_layer = 0;") if dispatch == "static" else glue.index("while (true) {")
    carried = [ln for ln in glue[:layer_loop].splitlines() if "pl_ready_" in ln or "pl_previous_" in ln]
    if dispatch == "static":
        assert not carried, carried
        assert "bool pl_ready_1_0 = false;" in glue[layer_loop:] and "pl_ready_1_0 = true;" in glue
        assert "pl_layer > 0 && !pl_previous_0_2" in glue
    else:
        assert "int pl_ready_1_0 = -1;" in "\n".join(carried) and "pl_ready_1_0 = pl_layer;" in glue
        assert "int pl_previous_0_2 = 0;" in "\n".join(carried) and "pl_previous_0_2 != pl_layer" in glue


@pytest.mark.parametrize("dispatch", ["static", "dynamic"])
def test_a_call_after_the_loop_waits_for_nothing_when_no_layer_ran(dispatch):
    """NL = 0 is a launch (the layers' time against the rest's): the last layer's counters would be layer -1's,
    before the event's first, and the producers ran no task. The wait reads layer 0's copy and counts to 0."""
    ctx = run(MLP_LAYERS, until="compile", dispatch=dispatch)
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    waits = [ln for ln in ctx.glue.splitlines() if "pl::events::wait_for(" in ln]
    guarded = [ln for ln in waits if "<= 0 ? 0u" in ln]
    assert len(guarded) == 1, waits  # final_norm's wait on down's last layer; the layers' own waits unchanged
    assert "((int)(NL) > 0 ? (int)(NL) - 1 : 0) * e" in guarded[0] and "((int)(NL) <= 0 ? 0u : (unsigned)(" in guarded[0]
    assert ctx.glue_ltoir


@pytest.mark.parametrize("dispatch", ["static", "dynamic"])
def test_a_task_knows_when_it_continues_its_call_on_the_cta(dispatch):
    """tile.continues: 1 only when the CTA's previous task was of the same call and layer (a call's tasks
    on a CTA may keep an operand in scratch). Static: every task of the call's walk but the CTA's first;
    dynamic: the previous claim's call and layer, so two calls of one component (or one call in two layers)
    never continue each other."""
    ctx = run(MLP_LAYERS, until="compile", dispatch=dispatch)
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    glue = ctx.glue
    order = list(ctx.resolved.events.order)
    n = len(order)
    if dispatch == "static":
        assert glue.count("tile.continues = (t != (int)blockIdx.x);") == n
        assert "pl_last_call" not in glue
    else:
        assert "int pl_last_call = -1;" in glue
        for k, name in enumerate(order):
            key = f"(pl_layer * {n} + {k})"
            body = glue[glue.index(f"{{  // {name}"):]
            body = body[:body.index("continue;")]
            assert f"tile.continues = (pl_last_call == {key});" in body
            assert body.rstrip().endswith(f"pl_last_call = {key};")
        # the calls outside the layer loop see layer 0, the layered ones their own: keys never meet
        assert "const int pl_layer = 0;  // outside the layer loop" in glue
    assert ctx.glue_ltoir


def test_a_lone_component_continues_its_walk_and_a_pair_does_not():
    """A sequential kernel of one component walks its tiles with nothing between them: any but the CTA's
    first continues. Two components in one tile loop share scratch bytes: neither may rely on it."""
    CONTRACTS.setdefault("gemv_bf16", "linear/gemv_bf16.json")
    try:
        pairs = ((["gemv_residual"], True), (["gemv_bf16", "gemv_residual"], False))
        linked = [(run({"pipeline": 1, "name": "alone", "components": names, "schedule": "sequential"},
                       components(tuple(names)), until="generate"), expected) for names, expected in pairs]
    finally:
        del CONTRACTS["gemv_bf16"]
    for ctx, expected in linked:
        assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
        assert ("tile.continues = (it != 0);" in ctx.glue) == expected


def test_a_fixed_layer_count():
    doc = dict(MLP_LAYERS, layers=3)
    ctx = run(doc)
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    assert "pl_layer < (int)(3)" in ctx.glue and "NL" not in {p.name for p in ctx.resolved.params}


@pytest.mark.parametrize("doc, code, words", [
    (edited(gate_up={"component": "gemv_bf16"}), "PL175", "not an input"),
    (edited(gate_up={"bind": {"w": "w_gu", "x": "xn", "K": "H", "bogus": "z"}}), "PL175", "no parameter"),
    (edited(gate_up={"stacked": ["K"]}), "PL175", "no pointer parameter"),
    (edited(mlp_norm={"events": {"nope": "x"}}), "PL175", "renames event"),
    (edited(final_norm={"bind": {"weight": "norm_w"}}), "PL175", "stacked by one of"),
    (edited(gate_up={"after": ["down"]}), "PL176", "comes later"),
    (edited(gate_up={"after": ["nobody"]}), "PL176", "no call"),
    (edited(gate_up={"per_layer": None, "stacked": None}), "PL176", "not consecutive"),
    (edited(final_norm={"after_previous_layer": ["down"]}), "PL176", "not per_layer"),
    (edited(mlp_norm={"after_previous_layer": ["final_norm"]}), "PL176", "no per-layer call"),
    (dict(MLP_LAYERS, layers=None), "PL176", "how many layers"),
    (edited(down={"after": None}), "PL178", "nothing orders 'down' after 'gate_up'"),
    (edited(mlp_norm={"after_previous_layer": None}), "PL178", "nothing orders a layer after the one before it"),
    (edited(final_norm={"after": None}), "PL178", "'final_norm' reads 'x', which 'down' writes"),
    (dict(MLP_LAYERS, wires=["a.b -> c.d"]), "PL176", "no wires"),
    (dict(MLP_LAYERS, calls=MLP_LAYERS["calls"][:-1]), "PL176", "not called"),
    (dict(MLP_LAYERS, calls=MLP_LAYERS["calls"] + [dict(MLP_LAYERS["calls"][-1])]), "PL176", "two calls"),
])
def test_bad_calls(doc, code, words):
    doc = {k: v for k, v in doc.items() if v is not None}
    ctx = run(doc)
    assert code in codes(ctx), [d.render() for d in ctx.sink.items]
    rendered = "\n".join(d.render() for d in ctx.sink.errors)
    assert words in rendered
    assert all(d.location is not None for d in ctx.sink.errors if d.code == code)


def test_a_waited_event_notified_by_two_calls_is_ambiguous():
    # gemv_normed-style wait on the norm's event: three rmsnorm calls notify `normed`
    def waits_normed(name, raw):
        if name == "gemv_swiglu":
            raw["events"] = {"waits": [{"name": "normed", "map": "i->0"}]}
    ctx = run(MLP_LAYERS, components(edit=waits_normed))
    assert "PL176" in codes(ctx)
    assert "ambiguous" in "\n".join(d.render() for d in ctx.sink.errors)
    # renamed per call, the wait is on one call's event, per layer
    doc = edited(mlp_norm={"events": {"normed": "normed_mlp"}}, gate_up={"events": {"normed": "normed_mlp"}})
    ctx = run(doc, components(edit=waits_normed))
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    assert "normed_mlp" in ctx.resolved.events.tensors


def test_stacked_extents_must_agree():
    doc = copy.deepcopy(MLP_LAYERS)
    doc["calls"].insert(3, {"name": "down2", "component": "gemv_residual", "per_layer": True, "stacked": ["w"],
                            "bind": {"w": "w_down", "x": "h", "r": "x", "y": "x"}, "after": ["down"]})
    ctx = run(doc)
    assert "PL175" in codes(ctx)
    assert "different extents per layer" in "\n".join(d.render() for d in ctx.sink.errors)


def test_cli_check_reports_a_bad_call(tmp_path, capsys):
    from pipelink.cli import main
    doc = edited(gate_up={"after": ["down"]})
    p = tmp_path / "p.json"
    p.write_text(json.dumps(doc))
    rc = main(["check", *(str(DECODE / f) for f in CONTRACTS.values()), "--pipeline", str(p)])
    err = capsys.readouterr().err
    assert rc == 1 and "PL176" in err and "Traceback" not in err


def with_prefetch(name, raw):
    if name in ("gemv_residual", "gemv_swiglu"):
        raw["entry"]["prefetch"] = name + "_prefetch"
        raw["entry"].pop("carry", None)
        raw.setdefault("barriers", {})["mbarriers"] = [{"name": "loaded", "count": 2}]


@pytest.mark.parametrize("dispatch", ["static", "dynamic"])
def test_prefetch_entries_start_loading_before_the_waits(dispatch):
    ctx = run(MLP_LAYERS, components(edit=with_prefetch), until="compile", dispatch=dispatch)
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    glue = ctx.glue
    # one count per object: gemv_residual's two calls share its slots
    assert glue.count("int pl_iteration_") == 2
    assert 'extern "C" __device__ void gemv_residual_prefetch(pl::Tile tile' in glue
    body = glue[glue.index("{  // down"):]
    prefetch, wait, main = (body.index("gemv_residual_prefetch(tile"), body.index("wait_for("),
                            body.index("gemv_residual(tile"))
    assert prefetch < wait < main          # loading starts before the task waits
    assert "mbarrier_init" in glue          # the component's own mbarriers, before any task
    if dispatch == "static":                 # and the next task of the call while this one waits and runs
        assert "tile.iteration = pl_iteration_" in glue and "const int t = t_next;" in body[:main]
        ahead = body[body.index("const int t = t_next;"):main]
        assert "tile.continues = 1;" in ahead  # the next task's tile says it continues the call, as it will
    else:
        assert "t_next" not in glue


def with_carry(name, raw):
    if name == "gemv_residual":
        raw["entry"]["prefetch"], raw["entry"]["carry"] = "gemv_residual_prefetch", 8


@pytest.mark.parametrize("dispatch", ["static", "dynamic"])
def test_carried_words_go_from_the_prefetch_to_the_entry(dispatch):
    """entry.carry: the glue gives each task its words, the prefetch fills them before the task waits and the
    entry takes them; a carry is the task's own, so no prefetch runs for the CTA's next task."""
    ctx = run(MLP_LAYERS, components(edit=with_carry), until="compile", dispatch=dispatch)
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    glue = ctx.glue
    body = glue[glue.index("{  // down"):]
    body = body[:body.index("{  // final_norm")]
    decl, prefetch, wait, main = (body.index("unsigned pl_carry[8];"), body.index("gemv_residual_prefetch(tile"),
                                  body.index("wait_for("), body.index("gemv_residual(tile"))
    assert decl < prefetch < wait < main
    assert body[prefetch:].split(";")[0].endswith(", pl_carry)") and body[main:].split(";")[0].endswith(", pl_carry)")
    assert "t_next" not in glue and body.count("gemv_residual_prefetch(tile") == 1
    assert 'void gemv_residual_prefetch(pl::Tile tile' in glue and "unsigned* __restrict__ carry)" in glue
    assert "pl_carry" not in glue[glue.index("{  // gate_up"):glue.index("{  // down")]  # gemv_swiglu carries nothing
    assert ctx.glue_ltoir


def test_a_carry_needs_a_prefetch_and_says_its_size():
    from pipelink.authoring.header import generate_header
    raw = json.loads((DECODE / CONTRACTS["gemv_residual"]).read_text())
    raw["entry"].pop("prefetch", None)
    raw["entry"]["carry"] = 8
    sink = DiagnosticSink()
    load_contract_dict(raw, Source("c.json"), sink)
    assert [(d.code, d.location.pointer) for d in sink.errors] == [("PL177", "/entry/carry")]
    raw["entry"]["prefetch"] = "gemv_residual_prefetch"
    sink = DiagnosticSink()
    c = load_contract_dict(raw, Source("c.json"), sink)
    assert c is not None and not sink.errors
    header = generate_header(c)
    assert "constexpr int CARRY_WORDS = 8;" in header
    assert header.count("unsigned* __restrict__ carry)") == 2  # the entry and its prefetch


def test_deal_continue_starts_each_call_where_the_last_one_ended():
    """deal "continue": one running position over every call's tasks (the static walk as one sequence dealt
    round-robin): each call's first task on the CTA after the one that ran the previous call's last."""
    ctx = run(MLP_LAYERS, until="compile", deal="continue")
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    glue, n = ctx.glue, len(ctx.resolved.events.order)
    assert glue.count("unsigned pl_deal = 0u;") == 1
    for k in range(n):
        first = glue.index(f"const int pl_first_{k} = (int)((blockIdx.x + gridDim.x - pl_deal) % gridDim.x);")
        walk = glue.index(f"for (int t = pl_first_{k}; t < c{k}_tasks; t += gridDim.x)")
        moved = glue.index(f"pl_deal = (pl_deal + (unsigned)c{k}_tasks) % gridDim.x;")
        assert first < walk < moved
        assert f"tile.continues = (t != pl_first_{k});" in glue
    assert "t = blockIdx.x;" not in glue and ctx.glue_ltoir
    # restart (the default) keeps the walk as it was: every call from CTA 0
    assert "pl_deal" not in run(MLP_LAYERS).glue


@pytest.mark.parametrize("ns", [0, 256])
def test_wait_backoff_is_the_glues_to_set(ns):
    """wait_backoff_ns: the glue defines events.h's sleep between two reads of a counter before the header; the
    default (64) leaves the glue as it was."""
    ctx = run(MLP_LAYERS, until="compile", wait_backoff_ns=ns)
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    define = f"#define PL_WAIT_BACKOFF_NS {ns}u"
    assert ctx.glue.index(define) < ctx.glue.index("#include <pipelink/events.h>") and ctx.glue_ltoir
    assert "PL_WAIT_BACKOFF_NS" not in run(MLP_LAYERS).glue


@pytest.mark.parametrize("edits", [{"dispatch": "dynamic"}, {"schedule": "sequential"}])
def test_deal_outside_a_static_walk(edits):
    doc = {"pipeline": 1, "name": "one", "components": ["gemv_residual"], "schedule": "persistent", "deal": "continue"}
    doc.update(edits)
    ctx = run(doc, components(("gemv_residual",)), until="resolve")
    assert codes(ctx) == ["PL187"]


def test_prefetch_misuse():
    def per_cta(name, raw):
        if name == "gemv_residual":
            raw["entry"]["prefetch"] = "gemv_residual"
    sink = DiagnosticSink()
    raw = json.loads((DECODE / CONTRACTS["gemv_residual"]).read_text())
    raw["entry"]["prefetch"] = "gemv_residual"
    assert load_contract_dict(raw, Source("c.json"), sink) is None or sink.errors
    assert "PL177" in {d.code for d in sink.errors}
    raw["entry"]["prefetch"], raw["entry"]["invocation"] = "p", "per_cta"
    sink = DiagnosticSink()
    load_contract_dict(raw, Source("c.json"), sink)
    assert "PL177" in {d.code for d in sink.errors}
    # a sequential kernel calls it right before the entry; a warp-specialized one cannot
    comps = components(("gemv_residual",), edit=with_prefetch)
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=load_pipeline_dict(
        {"pipeline": 1, "schedule": "sequential"}, DiagnosticSink()), cache=False), components=comps, until="generate")
    assert not ctx.sink.errors and ctx.glue.index("gemv_residual_prefetch(tile") < ctx.glue.index("gemv_residual(tile")
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=load_pipeline_dict(
        {"pipeline": 1, "schedule": "warp_specialized"}, DiagnosticSink()), cache=False), components=comps,
        until="resolve")
    assert "PL177" in codes(ctx)


@pytest.mark.parametrize("calls", [
    [{"name": "a", "bogus": 1}],                       # an unknown key is an error, not a silent default
    [{"name": "a", "bind": {"x": 3}}],                 # a kernel parameter is a name
    [{"name": "1a"}],                                  # not an identifier
    [],                                                # calls, if given, are some
])
def test_malformed_calls_are_schema_errors(tmp_path, capsys, calls):
    from pipelink.cli import main
    p = tmp_path / "p.json"
    p.write_text(json.dumps({"pipeline": 1, "layers": "NL", "calls": calls}))
    rc = main(["check", *(str(DECODE / f) for f in CONTRACTS.values()), "--pipeline", str(p)])
    err = capsys.readouterr().err
    assert rc == 2 and "PL133" in err and "/calls" in err and "Traceback" not in err



@pytest.mark.parametrize("edit, pointer", [
    (lambda doc: doc["calls"][1]["bind"].update(x="t"), "/calls/1/bind/x"),            # a local of the glue
    (lambda doc: doc["calls"][1]["bind"].update(x="gemv_swiglu"), "/calls/1/bind/x"),  # the call's own entry
    (lambda doc: doc["calls"][1]["bind"].update(x="rmsnorm"), "/calls/1/bind/x"),      # another call's entry
    (lambda doc: doc.update(layers="lm_head"), "/layers")])
def test_a_kernel_parameter_the_pipeline_names_badly_is_pl188_at_its_field(edit, pointer):
    """A bind target or `layers` that the glue declares itself or that is an entry symbol: PL188 at the pipeline's
    field, by the passes `pipelink check --pipeline` runs (it had been located at a contract's parameter, and
    check had passed a glue local)."""
    doc = copy.deepcopy(MLP_LAYERS)
    edit(doc)
    ctx = run(doc, until="generate")
    errors = [d for d in ctx.sink.errors if d.code == "PL188"]
    assert [(d.location.file, d.location.pointer) for d in errors] == [("p.json", pointer)], \
        [d.render() for d in ctx.sink.items]


def test_check_with_a_pipeline_finds_a_bind_to_a_name_of_the_glue():
    import pipelink
    doc = copy.deepcopy(MLP_LAYERS)
    doc["calls"][1]["bind"]["x"] = "t"
    with pytest.raises(pipelink.PipelinkError) as err:
        pipelink.check([str(DECODE / p) for p in CONTRACTS.values()], pipeline=doc)
    assert [(d.code, d.location.pointer) for d in err.value.diagnostics if d.severity == "error"] == \
        [("PL188", "/calls/1/bind/x")]


def test_a_specialized_layer_count_below_one_and_layers_without_calls():
    """specialize NL (the pipeline's layers) = 0: the per-layer calls never run (PL194); below 0 no launch can
    pass (PL001); `layers` in a pipeline without calls does nothing (PL193)."""
    ctx = run(MLP_LAYERS, until="resolve", specialize={"NL": 0})
    assert [(d.code, d.severity, d.location.pointer) for d in ctx.sink.items] == [("PL194", "warning", "/specialize/NL")]
    ctx = run(MLP_LAYERS, until="resolve", specialize={"NL": -1})
    assert [(d.code, d.location.pointer) for d in ctx.sink.errors] == [("PL001", "/specialize/NL")]
    assert not run(MLP_LAYERS, until="resolve", specialize={"NL": 16}).sink.items
    from pipelink.core.pipeline import PipelineSpec
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=PipelineSpec(name="k", layers=4, source="p.json")),
                     components=components(("rmsnorm",)), until="resolve")
    assert [(d.code, d.location.pointer) for d in ctx.sink.items] == [("PL193", "/layers")]


@pytest.mark.parametrize("layers, specialize, races", [(1, {}, False), ("NL", {"NL": 1}, False), (2, {}, True),
                                                       ("NL", {}, True)])
def test_one_layer_has_no_next_layer_to_race_with(layers, specialize, races):
    """Without after_previous_layer, a layer's calls race with the next layer's (PL178); a layer count the link
    fixes at 1 (a number, or the count specialized) has no next layer: no error."""
    doc = copy.deepcopy(MLP_LAYERS)
    doc["layers"] = layers
    doc["calls"][0].pop("after_previous_layer")
    ctx = run(doc, until="resolve", specialize=specialize)
    assert ("PL178" in codes(ctx)) == races, [d.render() for d in ctx.sink.items]
