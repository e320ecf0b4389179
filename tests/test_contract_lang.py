"""The contract language's later forms, decided without a GPU: grids that differ (an inner loop of
tiles, tiles over runtime extents), chains inside one component, clamped index maps, declared port
alignment, buffer sizes the launcher checks, and what the register cap does."""
from __future__ import annotations

import json

import pytest

from pipelink.authoring.header import generate_header
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.indexmap import MapError, parse_map
from pipelink.core.loader import load_contract_bytes
from pipelink.core.model import Source
from pipelink.core.pipeline import PipelineSpec
from pipelink.linker.allocate import allocate
from pipelink.linker.emit import link_map, manifest
from pipelink.linker.events import task_coords
from pipelink.linker.glue import generate_glue
from pipelink.linker.resolve import resolve
from pipelink.runtime.buffers import buffer_problem
from pipelink.runtime.launch import ArgumentError, Kernel

from contract_factory import base_contract, dumps, shipped_component as comp


def codes(sink):
    return sorted(d.code for d in sink.items if d.severity == "error")


def run(comps, schedule=None, dispatch="static", wires=()):
    from pipelink.core.pipeline import WireSpec
    sink = DiagnosticSink()
    spec = PipelineSpec(name="k", schedule=schedule, dispatch=dispatch,
                        wires=tuple(WireSpec(*w.replace(" -> ", ".").split("."), w) for w in wires))
    return resolve(comps, spec, sink), sink


def load(c):
    sink = DiagnosticSink()
    return load_contract_bytes(dumps(c), Source("c.json"), sink), sink


def pointers(sink):
    return sorted((d.code, d.location.pointer) for d in sink.items)


# --- clamped index maps ---------------------------------------------------------------------------

def test_clamps_and_sizes_in_affine_terms():
    m = parse_map("i->range(max(i - 1, 0), min(i + 2, ceil_div(N, TILE)))")
    assert m.kind == "window" and m.names == {"N", "TILE"} and not m.tensors
    m = parse_map("ij->min(i + 1, T - 1), j")
    assert m.kind == "one_to_one" and m.names == {"T"}


@pytest.mark.parametrize("bad", ["i->min(i)", "i->max(i, 0, 1)", "i->k + 1", "i->topk[min(i, 3)]",
                                 "i->abs(i)", "i->min(i, key=1)"])
def test_clamp_forms_refused(bad):
    with pytest.raises(MapError):
        parse_map(bad)


def test_map_names_must_be_sizes_the_contract_declares():
    def edit(c):
        c["events"]["notifies"][0]["map"] = "i->min(i, B - 1)"
    contract, sink = load(base_contract())
    assert contract is not None
    bad = base_contract()
    edit(bad)
    contract, sink = load(bad)
    assert contract is None and pointers(sink) == [("PL029", "/events/notifies/0/map")]
    assert "names visible here" in sink.items[0].effective_hint


def stencil(edit=None):
    return [comp("seg_silu"), comp("stencil3", edit)]


def test_clamped_halo_links_and_its_glue_clamps():
    r, sink = run(stencil())
    assert not sink.items, [d.render() for d in sink.items]
    glue = generate_glue(r, allocate(r, "sm_90", sink))
    assert "((tile.coord[0] - 1)) > (0)" in glue            # max(i - 1, 0)
    assert "((N + 1024 - 1) / 1024)" in glue                 # ceil_div(N, TILE) with TILE's link value


def test_unclamped_halo_leaves_the_tensor():
    r, sink = run(stencil(lambda c: c["events"]["waits"][0].update(map="i->range(i - 1, i + 2)")))
    assert codes(sink) == ["PL084"]
    assert "task (0,) waits on 'ready'[-1]" in sink.items[0].message


def test_a_clamp_that_waits_twice_on_one_element_is_still_counted():
    # min(i + 1, T - 1) names the last element twice for the last task: the count is checked per element
    r, sink = run(stencil(lambda c: c["events"]["waits"][0].update(
        map="i->range(i, min(i + 2, ceil_div(N, TILE)))", count=2)))
    assert codes(sink) == ["PL083"]


# --- chains inside one component --------------------------------------------------------------------

def scan(edit=None):
    return [comp("block_scan", edit)]


@pytest.mark.parametrize("dispatch", ["static", "dynamic"])
def test_a_chain_on_earlier_tasks_links(dispatch):
    r, sink = run(scan(), dispatch=dispatch)
    assert not sink.items, [d.render() for d in sink.items]
    assert r.events.order == ["block_scan"]
    glue = generate_glue(r, allocate(r, "sm_90", sink))
    assert glue.count("wait_for(e0") == 1 and glue.count("add_one(e0") == 1


def test_a_task_waiting_on_itself_never_starts():
    r, sink = run(scan(lambda c: c["events"]["waits"][0].update(map="i->i")))
    assert codes(sink) == ["PL170"]
    assert "task (0,) waits on 'carried'[0], which its own task (0,) notifies, walked with it" in sink.items[0].message


def test_a_task_waiting_on_a_later_one_never_starts():
    r, sink = run(scan(lambda c: c["events"]["waits"][0].update(map="i->range(i + 1, min(i + 2, ceil_div(N, TILE)))")))
    assert codes(sink) == ["PL170"]
    assert "walked after it" in sink.items[0].message


def test_the_unclamped_chain_waits_before_the_first_task():
    r, sink = run(scan(lambda c: c["events"]["waits"][0].update(map="i->i - 1", count=1)))
    assert codes(sink) == ["PL084"]


def test_a_chain_through_device_data_cannot_be_ordered():
    def edit(c):
        c["entry"]["params"].append({"name": "prev", "dtype": "i32", "pointer": True, "const": True,
                                     "shape": ["ceil_div(N, TILE)"]})
        c["events"]["waits"][0].update(map="i->prev[i]", count=1)
    r, sink = run(scan(edit))
    assert codes(sink) == ["PL171"]


def test_a_chain_follows_the_walk_order():
    # (i, j - 1) is walked before (i, j) row-major; a snake walks odd rows backwards
    def grid2(c, order):
        c["geometry"]["tile_sequence"].update(grid=[3, "ceil_div(N, TILE)"], order=order)
        c["events"]["notifies"][0]["map"] = "ij->i, j"
        c["events"]["waits"][0].update(map="ij->i, range(max(j - 1, 0), j)", count="auto")
    r, sink = run(scan(lambda c: grid2(c, "row_major")))
    assert not sink.items, [d.render() for d in sink.items]
    r, sink = run(scan(lambda c: grid2(c, "snake")))
    assert codes(sink) == ["PL170"] and "task (1, 0) waits on 'carried'[1, 0]" not in sink.items[0].message


def test_another_components_cycle_is_still_a_cycle():
    def back(c):
        c["events"]["notifies"] = [{"name": "back", "map": "i->i"}]

    def waits_back(c):
        c["events"]["waits"] = [{"name": "back", "map": "i->i"}]
    r, sink = run([comp("seg_silu", waits_back), comp("stencil3", back)])
    assert "PL080" in codes(sink)


@pytest.mark.parametrize("order,extents,expected", [
    ("row_major", (2, 3), [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]),
    ("col_major", (2, 3), [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]),
    ("snake", (2, 3), [(0, 0), (0, 1), (0, 2), (1, 2), (1, 1), (1, 0)]),
    ("grouped", (3, 2), [(0, 0), (1, 0), (0, 1), (1, 1), (2, 0), (2, 1)]),
])
def test_task_coords_walk_as_the_glue_decodes(order, extents, expected):
    got = [task_coords(order, extents, t, group=2) for t in range(len(expected))]
    assert got == expected


# --- grids that differ: an inner loop of tiles ------------------------------------------------------

def softmax(store=None, softmax_edit=None, load_edit=None):
    return [comp("tile_load", load_edit), comp("tile_store", store), comp("row_softmax", softmax_edit)]


SOFTMAX_WIRES = ["tile_load.tile -> tile_store.tile"]


def test_a_row_block_consumer_after_2d_tiles_links_with_an_inner_loop():
    r, sink = run(softmax(), wires=SOFTMAX_WIRES)
    assert not sink.items, [d.render() for d in sink.items]
    assert r.schedule == "sequential" and r.tiles_owner == "row_softmax"
    assert [str(e) for e in r.inner_grid("tile_load")] == ["ceil_div(N, TILE_N)"]
    assert r.inner_grid("tile_store") and not r.inner_grid("row_softmax")
    a = allocate(r, "sm_90", sink)
    glue = generate_glue(r, a)
    inner, softmax_step = glue.index("pl_inner < inner_tiles_0"), glue.index("row_softmax(tile, y, M, N);")
    assert inner < glue.index("tile_load(tile, x, M, N);") < glue.index("tile_store(tile, y, M, N);") < softmax_step
    assert "tile.coord[1] = rest % inner_tiles_0;" in glue
    m = manifest(r, a, "sm_90", b"").to_json()
    assert m["tiles"] == ["ceil_div(M, 32)"]           # the grid: row blocks, each CTA walks a row's tiles
    assert "inner loop of tile_load: [ceil_div(N, 128)] row_major in each tile" in link_map(r, a, "sm_90")


def test_an_undeclared_component_runs_with_what_it_is_wired_to():
    comps = [comp("tile_load"), comp("tile_transform"), comp("tile_store"), comp("row_softmax")]
    r, sink = run(comps, wires=["tile_load.tile -> tile_transform.src", "tile_transform.dst -> tile_store.tile"])
    assert not sink.items, [d.render() for d in sink.items]
    assert r.inner_grid("tile_transform")


def test_grids_that_differ_need_the_sequential_schedule():
    r, sink = run(softmax(), schedule="warp_specialized", wires=SOFTMAX_WIRES)
    assert "PL067" in codes(sink)
    d = next(d for d in sink.items if d.code == "PL067")
    assert "a 2-d grid against a 1-d one" in d.message and "inner loop" in d.effective_hint


def test_nested_leading_dimensions_must_be_the_kernels_grid():
    r, sink = run(softmax(softmax_edit=lambda c: c["geometry"]["tile_sequence"].update(
        grid=["ceil_div(M, 2 * TILE_M)"])), wires=SOFTMAX_WIRES)
    assert codes(sink) == ["PL067", "PL067"]
    assert "leading dimensions differ" in sink.items[0].message


def test_a_nested_grid_walks_row_major():
    r, sink = run(softmax(store=lambda c: c["geometry"]["tile_sequence"].update(order="col_major"),
                          load_edit=lambda c: c["geometry"]["tile_sequence"].update(order="col_major")),
                  wires=SOFTMAX_WIRES)
    assert "PL067" in codes(sink) and "row-major" in sink.items[0].message


def test_a_shared_memory_tile_does_not_leave_the_inner_loop():
    def one_d(c):
        c["geometry"]["tile_sequence"]["grid"] = ["ceil_div(M, TILE_M)"]
    comps = [comp("tile_load"), comp("tile_transform"), comp("block_rowsum", one_d)]
    r, sink = run(comps, wires=["tile_load.tile -> tile_transform.src", "tile_transform.dst -> block_rowsum.tile"])
    assert codes(sink) == ["PL172"]
    assert sink.items[0].location.component == "block_rowsum"


def test_gmem_tiles_may_span_runtime_extents_smem_tiles_may_not():
    c = base_contract()
    c["ports"][0]["tile"] = ["TILE_M", "M"]     # gmem: a whole row block
    assert load(c)[0] is not None
    c["ports"][1]["tile"] = ["TILE_M", "M"]     # smem: sized at link time
    contract, sink = load(c)
    assert contract is None and pointers(sink) == [("PL029", "/ports/1/tile/1")]


# --- declared port alignment -------------------------------------------------------------------------

@pytest.mark.parametrize("port,align,pointer", [
    (1, 48, "/ports/1/align"),     # not a power of two
    (1, 2048, "/ports/1/align"),   # more than a shared-memory placement promises
    (0, 2, "/ports/0/align"),      # below one f32 of a gmem port
])
def test_bad_port_alignment(port, align, pointer):
    c = base_contract()
    c["ports"][port]["align"] = align
    contract, sink = load(c)
    assert contract is None and pointers(sink) == [("PL173", pointer)]


def raw_contract(name):
    from pathlib import Path
    return json.loads((Path(__file__).resolve().parent.parent / "contracts" / f"{name}.json").read_text())


def test_a_register_port_has_no_alignment():
    raw = raw_contract("epi_swiglu")
    reg = next(i for i, p in enumerate(raw["ports"]) if p.get("space") == "reg")
    raw["ports"][reg]["align"] = 16
    contract, sink = load(raw)
    assert contract is None and ("PL173", f"/ports/{reg}/align") in pointers(sink)


def test_a_consumers_alignment_places_the_producers_tile():
    r, sink = run(softmax(), wires=SOFTMAX_WIRES)
    a = allocate(r, "sm_90", sink)
    placed = next(p for p in a.smem if p.item.key == "port tile_load.tile")
    assert placed.item.align == 256 and placed.offset % 256 == 0 and a.arena_align == 256
    glue = generate_glue(r, a)
    assert "% 256u) __trap();" in glue                       # the arena's base is checked once
    header = generate_header(comp("tile_store").contract)
    assert "constexpr unsigned port_tile_align = 256;" in header
    assert "constexpr unsigned port_y_align = 16;" in header


def test_shipped_sequential_glue_has_no_alignment_check():
    r, sink = run([comp("tile_load"), comp("tile_transform"), comp("block_rowsum")])
    assert "__trap();\n" in generate_glue(r, allocate(r, "sm_90", sink))  # the marker check only
    assert "smem_address" not in generate_glue(r, allocate(r, "sm_90", sink))


# --- buffer sizes the launcher checks -----------------------------------------------------------------

class Array:
    """A device array as the launcher reads it (`__cuda_array_interface__`)."""

    def __init__(self, shape, ptr=0x7F0000010000, typestr="<f4"):
        self.__cuda_array_interface__ = {"data": (ptr, False), "typestr": typestr, "shape": shape, "strides": None,
                                         "version": 3}


PARAMS = [{"name": "y", "dtype": "f32", "pointer": True, "const": False, "shapes": [["M", "N"]], "align": 16},
          {"name": "M", "dtype": "i32", "pointer": False, "const": False},
          {"name": "N", "dtype": "i32", "pointer": False, "const": False}]


def test_a_buffer_too_small_is_refused_before_the_launch():
    why = buffer_problem("k", PARAMS, {"y": Array((3, 4))}, {"M": 4, "N": 4})
    assert why == ("argument 'y' of kernel 'k' holds 12 elements; its contract declares [M, N] = [4, 4], 16 elements "
                   "for M=4, N=4: the kernel would reach past its end")
    assert buffer_problem("k", PARAMS, {"y": Array((16,))}, {"M": 4, "N": 4}) is None   # any shape of enough elements


def test_a_misaligned_buffer_is_refused():
    why = buffer_problem("k", PARAMS, {"y": Array((16,), ptr=0x7F0000010004)}, {"M": 4, "N": 4})
    assert "not 16-byte aligned" in why
    # a raw address has no size, but its alignment is checked
    assert buffer_problem("k", PARAMS, {"y": 0x7F0000010000}, {"M": 4, "N": 4}) is None
    assert "not 16-byte aligned" in buffer_problem("k", PARAMS, {"y": 0x7F0000010008}, {"M": 4, "N": 4})


def test_every_components_view_of_a_buffer_must_fit():
    params = [dict(PARAMS[0], shapes=[["M"], ["ceil_div(M, 64)", "64"]], align=None), PARAMS[1]]
    assert buffer_problem("k", params, {"y": Array((100,))}, {"M": 100}) is not None   # the padded view needs 128
    assert buffer_problem("k", params, {"y": Array((128,))}, {"M": 100}) is None


def test_the_launcher_checks_through_prepare():
    r, sink = run(softmax(), wires=SOFTMAX_WIRES)
    m = manifest(r, allocate(r, "sm_90", sink), "sm_90", b"").to_json()
    assert next(p for p in m["params"] if p["name"] == "y") == {
        "name": "y", "dtype": "f32", "pointer": True, "const": False, "shapes": [["M", "N"]], "align": 16}
    k = Kernel(m)
    x = Array((8, 300), ptr=0x7F0000100000)
    k.prepare(x=x, y=Array((8, 300)), M=8, N=300, grid=1)
    with pytest.raises(ArgumentError, match="holds 2399 elements"):
        k.prepare(x=x, y=Array((2399,)), M=8, N=300, grid=1)


def test_a_workspace_size_is_declared_like_any_buffer():
    r, sink = run(scan())
    m = manifest(r, allocate(r, "sm_90", sink), "sm_90", b"").to_json()
    carry = next(p for p in m["params"] if p["name"] == "carry")
    assert carry["shapes"] == [["ceil_div(N, 1024)"]]
    why = buffer_problem("k", m["params"], {"carry": Array((2,), typestr="<i4")}, {"N": 3000})
    assert "holds 2 elements" in why and "3 elements" in why


def test_a_tensor_map_has_no_shape_of_its_own():
    raw = raw_contract("hopper_gemm_64x128")
    tmap = next(i for i, p in enumerate(raw["params"]) if "tensor_map" in p)
    raw["params"][tmap]["shape"] = ["M", "K"]
    contract, sink = load(raw)
    assert contract is None and ("PL174", f"/params/{tmap}/shape") in pointers(sink)


# --- the register cap of a single-entry component --------------------------------------------------

def test_the_tightest_cap_is_the_kernels_budget():
    r, sink = run(softmax(softmax_edit=lambda c: c["registers"].update(max_per_thread=64)), wires=SOFTMAX_WIRES)
    a = allocate(r, "sm_90", sink)
    assert a.registers == 64
    assert generate_glue(r, a).count("__maxnreg__(64)") == 1


def test_no_cap_leaves_the_kernel_to_the_launch_bounds():
    def uncapped(c):
        c.pop("registers", None)
    r, sink = run([comp(n, uncapped) for n in ("tile_load", "tile_transform", "block_rowsum")])
    a = allocate(r, "sm_90", sink)
    assert a.registers is None and "__launch_bounds__(128, 1)" in generate_glue(r, a)


# --- each new field's bad input, at the schema and in the semantic checks -------------------------

@pytest.mark.parametrize("edit,expected", [
    (lambda c: c["ports"][1].update(align=0), ("PL020", "/ports/1/align")),               # the schema: 1..4096
    (lambda c: c["ports"][0].update(align="16"), ("PL020", "/ports/0/align")),
    (lambda c: c["ports"][0].update(align=8192), ("PL020", "/ports/0/align")),
    (lambda c: c["entry"]["params"][0].update(shape=["M", "B"]), ("PL029", "/entry/params/0/shape/1")),
    (lambda c: c["entry"]["params"][2].update(shape=["M"]), ("PL020", "/entry/params/2/shape")),  # not a pointer
    (lambda c: c["entry"]["params"][0].update(shape=[]), ("PL020", "/entry/params/0/shape")),
    (lambda c: c["events"]["notifies"][0].update(map="i->min(i, )"), ("PL031", "/events/notifies/0/map")),
    (lambda c: c["events"]["notifies"][0].update(map="i->max(i - 1)"), ("PL031", "/events/notifies/0/map")),
    (lambda c: c["ports"][0].update(tile=["TILE_M", "B"]), ("PL029", "/ports/0/tile/1")),  # gmem: only declared sizes
])
def test_bad_input_is_located(edit, expected):
    c = base_contract()
    edit(c)
    contract, sink = load(c)
    assert contract is None and expected in pointers(sink), pointers(sink)
    assert all(d.exit_code == 1 and d.effective_hint for d in sink.items)


@pytest.mark.parametrize("bad", [{"shapes": "M"}, {"shapes": [["M", None]]}, {"align": True}, {"align": 0}])
def test_a_malformed_manifest_entry_is_a_clear_error(bad):
    params = [dict(PARAMS[0], **bad), PARAMS[1], PARAMS[2]]
    assert "malformed" in buffer_problem("k", params, {"y": Array((16,))}, {"M": 4, "N": 4})


def test_grouped_walks_in_bands_of_different_heights_differ():
    """Two components walking `grouped` with group 8 and 4 visit the tiles in different orders: PL067's
    difference, not the same walk (only rank, order, distribution and grid had been compared)."""
    from pipelink.core.expr import parse
    from pipelink.core.model import TileSequence
    from pipelink.linker.resolve import _sequence_difference
    grid = (parse("ceil_div(M, 128)"), parse("ceil_div(N, 128)"))
    a = TileSequence(grid, "grouped", "grid_stride", "/geometry/tile_sequence", group=8)
    b = TileSequence(grid, "grouped", "grid_stride", "/geometry/tile_sequence", group=4)
    assert _sequence_difference(a, b, {}) == "grouped in bands of 4 against bands of 8"
    assert _sequence_difference(a, a, {}) is None
