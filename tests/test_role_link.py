"""Role-structured links, pure: role groups, warp placement, the register pool, the generated glue
(setmaxnreg per group, fragments in registers, tensor-map parameters, the grouped tile order), the
header of the entries form and the link-time checks of fragments, warps and boxes. No toolchain."""
import dataclasses
import re
from pathlib import Path

import pytest

from contract_factory import shipped_component
from hopper_factory import component, epilogue, mainloop
from pipelink.authoring.header import entry_prototype, generate_header
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.pipeline import PipelineSpec, parse_wire
from pipelink.linker.emit import _param_spec
from pipelink.linker.glue import _tile_from
from pipelink.linker.passes import LinkOptions, run_passes
from pipelink.linker.resolve import resolve

REPO = Path(__file__).resolve().parent.parent


def run(comps, wires=(), schedule=None, arch="sm_90a"):
    """The link's passes from check to generate, over components already read."""
    spec = PipelineSpec(name="k", wires=tuple(parse_wire(w, DiagnosticSink()) for w in wires), schedule=schedule)
    return run_passes(options=LinkOptions(arch=arch, pipeline=spec), components=comps, until="generate")


def link_ctx(ml=None, epi=None, **kw):
    return run([component(mainloop(ml)), component(epilogue(epi))], **kw)


def link(ml=None, epi=None, **kw):
    ctx = link_ctx(ml, epi, **kw)
    return ctx.resolved, ctx.allocation, ctx.sink


def errors(sink):
    return [(d.code, d.location.file, d.location.pointer) for d in sink.items if d.severity == "error"]


# --- role groups and warps -----------------------------------------------------------------------

def test_the_epilogue_joins_the_role_holding_its_fragment():
    r, a, sink = link()
    assert not sink.items, [d.render() for d in sink.items]
    assert r.schedule == "warp_specialized"  # entries imply it
    groups = [(g.name, [(m.component, m.role) for m in g.members], g.warps, g.setmaxnreg) for g in r.roles.groups]
    assert groups == [("ml.producer", [("ml", "producer")], 4, 40),
                      ("ml.consumer", [("ml", "consumer"), ("epi", "epilogue")], 8, 232)]
    (f,) = r.roles.fragments
    assert (f.producer, f.out_port, f.consumer, f.in_port, f.elements, f.ctype, f.role) == (
        "ml", "acc", "epi", "acc", 128 * 256 // 256, "float", "consumer")
    assert [(comp, e.name) for comp, e in r.roles.init] == [("ml", "init")]
    # warps: the producer warpgroup first, then the consumer warpgroups, the epilogue on the same warps
    assert a.group_begin == {"ml.producer": 0, "ml.consumer": 4} and a.block_warps == 12
    assert a.role_begin == {("ml", "producer"): 0, ("ml", "consumer"): 4, ("epi", "epilogue"): 4}
    assert a.warp_begin == {"ml": 0, "epi": 4}


def test_the_register_pool_at_one_block_per_sm():
    _, a, _ = link()
    assert a.entry_registers == 65536 // 384 // 8 * 8 == 168  # what __launch_bounds__(384, 1) leaves each thread
    assert a.group_registers == {"ml.producer": 40, "ml.consumer": 232}
    assert 32 * (4 * 40 + 8 * 232) <= 65536


def test_a_role_without_setmaxnreg_keeps_the_entry_count():
    _, _, sink = link(ml=lambda c: c["threads"]["roles"][0].pop("setmaxnreg"))
    # the producer keeps its 168, so the consumers cannot grow to 232
    assert errors(sink) == [("PL100", "ml.json", "/threads/roles")]
    assert "ml.producer 4 warps x 168" in sink.items[0].message
    ctx = link_ctx(ml=lambda c: (c["threads"]["roles"][0].pop("setmaxnreg"),
                                 c["threads"]["roles"][1].update(setmaxnreg=160)))
    assert not ctx.sink.items and ctx.allocation.group_registers == {"ml.producer": 168, "ml.consumer": 160}
    g = ctx.glue
    producer = g[g.index("warps 0-3"):g.index("warps 4-11")]
    assert "setmaxnreg" not in producer
    assert 'setmaxnreg.dec.sync.aligned.u32 160;");  // 168 at entry -> 160' in g


def test_a_pool_that_does_not_fit():
    _, _, sink = link(ml=lambda c: c["threads"]["roles"][1].update(setmaxnreg=256))
    assert errors(sink) == [("PL100", "ml.json", "/threads/roles")]
    assert "4 warps x 40; ml.consumer 8 warps x 256" in sink.items[0].message
    assert "over the 65536" in sink.items[0].message


def test_a_joining_role_cannot_ask_for_other_registers():
    _, _, sink = link(epi=lambda c: c["threads"]["roles"][0].update(setmaxnreg=200))
    assert errors(sink) == [("PL100", "epi.json", "/threads/roles/0/setmaxnreg")]
    assert "setmaxnreg 200" in sink.items[0].message and "which set 232" in sink.items[0].message


def test_a_component_cap_above_its_roles_registers():
    _, _, sink = link(epi=lambda c: c.update(registers={"max_per_thread": 240}))
    assert errors(sink) == [("PL104", "epi.json", "/registers/max_per_thread")]
    assert "up to 240" in sink.items[0].message and "with 232 (ml.consumer)" in sink.items[0].message
    _, _, sink = link(epi=lambda c: c.update(registers={"max_per_thread": 232}))
    assert not sink.items


def test_a_joining_role_with_other_warps():
    _, _, sink = link(epi=lambda c: (c["threads"].update(warps="TILE_M // 32"),
                                     c["threads"]["roles"][0].update(warps="TILE_M // 32")))
    assert errors(sink) == [("PL103", "epi.json", "/threads/roles/0")]
    d = sink.items[0]
    assert "has 4 warps" in d.message and "has 8" in d.message
    assert (d.related[0].file, d.related[0].pointer) == ("ml.json", "/threads/roles/1")


def test_a_role_taking_fragments_from_two_roles():
    def two_consumers(c):
        c["threads"]["warps"] = 20
        c["threads"]["roles"][1]["setmaxnreg"] = 112  # 32 x (4 x 40 + 16 x 112) fits the SM
        c["threads"]["roles"].append({"name": "consumer2", "warps": 8, "setmaxnreg": 112})
        c["ports"].append(dict(c["ports"][0], name="acc2", role="consumer2"))
        c["entries"].append({"name": "mma2", "symbol": "ml_mma2", "role": "consumer2", "params": ["acc2"]})

    def two_inputs(c):
        c["ports"].append(dict(c["ports"][0], name="acc2"))
        c["entries"][0]["params"].append("acc2")
    _, _, sink = link(ml=two_consumers, epi=two_inputs, wires=["ml.acc=epi.acc", "ml.acc2=epi.acc2"])
    assert errors(sink) == [("PL103", "epi.json", "/threads/roles/0")]
    assert "takes fragments from two roles (ml.consumer and ml.consumer2)" in sink.items[0].message


def test_roles_of_one_component_split_over_groups_lose_their_warp_range():
    # The epilogue's first role runs on its own warps, its second joins the mainloop's consumers:
    # the component's roles are no longer one contiguous range.
    def two_roles(c):
        c["threads"] = {"warps": 12, "roles": [{"name": "side", "warps": 4},
                                               {"name": "epilogue", "warps": 8, "warpgroup_aligned": True}]}
        c["entries"].append({"name": "side", "symbol": "epi_side", "role": "side", "params": []})
    _, _, sink = link(ml=lambda c: c["threads"]["roles"][1].update(setmaxnreg=160), epi=two_roles)
    assert errors(sink) == [("PL070", "epi.json", "/threads/roles/1")]
    assert "must be contiguous" in sink.items[0].message


def test_entries_cannot_mix_with_a_single_entry_component():
    comps = [component(mainloop()), component(epilogue()), shipped_component("tile_transform")]
    sink = run(comps).sink
    assert ("PL078", "tile_transform.json", "/entry") in errors(sink)
    assert any("does not mix" in d.message for d in sink.items)
    _, _, sink = link(schedule="sequential")
    assert [d.code for d in sink.items] == ["PL078"] and sink.items[0].location.pointer == "/schedule"


def test_setmaxnreg_is_taken_in_role_structured_kernels():
    """The single-entry form still refuses per-role setmaxnreg (PL078); the entries form applies it."""
    _, _, sink = link()
    assert not sink.items


# --- fragments on a wire -------------------------------------------------------------------------

def test_fragment_dtype_differs():
    _, _, sink = link(epi=lambda c: c["ports"][0].update(dtype="bf16"), wires=["ml.acc=epi.acc"])
    assert errors(sink) == [("PL063", "epi.json", "/ports/0")]
    assert "'ml' produces f32, 'epi' expects bf16" in sink.items[0].message
    _, _, sink = link(epi=lambda c: c["ports"][0].update(dtype="bf16"))  # no f32 register output left to pick
    assert errors(sink) == [("PL060", "epi.json", "/ports/0")]
    assert "no other component has a register bf16 output" in sink.items[0].message


def test_fragment_tile_differs():
    _, _, sink = link(epi=lambda c: c["ports"][0].update(tile=["TILE_M", 128]))
    assert errors(sink) == [("PL064", "epi.json", "/ports/0")]
    assert "[TILE_M=128, TILE_N=256]" in sink.items[0].message and "[TILE_M=128, 128]" in sink.items[0].message


def test_fragment_layout_differs():
    # The schema knows one layout today; a second one (or a consumer reading another) is PL102.
    ml, epi = component(mainloop()), component(epilogue())
    port = dataclasses.replace(epi.contract.ports[0], fragment="sm90_gmma_acc_transposed")
    epi = dataclasses.replace(epi, contract=dataclasses.replace(epi.contract, ports=(port,)))
    sink = run([ml, epi]).sink
    assert errors(sink) == [("PL102", "epi.json", "/ports/0")]
    assert "holds layout sm90_gmma_acc, 'epi' reads sm90_gmma_acc_transposed" in sink.items[0].message


def test_fragment_that_does_not_split_over_the_role():
    small = lambda c: c["ports"][0].update(tile=[16, 8])  # noqa: E731  128 elements over 256 threads
    _, _, sink = link(ml=small, epi=small)
    assert errors(sink) == [("PL102", "ml.json", "/ports/0")]
    assert "16x8 tile does not split evenly over the 256 threads" in sink.items[0].message


def test_register_port_wired_to_shared_memory():
    def smem_in(c):
        c["ports"][0] = {"name": "acc", "direction": "in", "dtype": "f32", "tile": ["TILE_M", "TILE_N"]}
        c["entries"][0]["params"].remove("acc")
    _, _, sink = link(epi=smem_in, wires=["ml.acc=epi.acc"])
    assert errors(sink) == [("PL062", "epi.json", "/ports/0")]
    assert "joins a reg port to a smem port" in sink.items[0].message


def test_a_shared_memory_wire_between_role_structured_components_is_refused():
    # The glue synchronizes role groups through nothing but register fragments: a ring here would race.
    def out(c):
        c["ports"].append({"name": "s", "direction": "out", "dtype": "f32", "tile": [64, 64], "stages": 2})

    def inp(c):
        c["ports"].append({"name": "s", "direction": "in", "dtype": "f32", "tile": [64, 64], "stages": 2})
    _, _, sink = link(ml=out, epi=inp)
    assert errors(sink) == [("PL078", "epi.json", "/ports/1")]  # not PL066: the fragment is no 1-stage ring
    d = sink.items[0]
    assert "hands a shared-memory tile" in d.message and d.related[0].pointer == "/ports/1"


def test_the_kernel_name_must_not_be_any_entry_symbol():
    sink = DiagnosticSink()
    resolve([component(mainloop()), component(epilogue())], PipelineSpec(name="ml_mma"), sink)
    assert [d.code for d in sink.items] == ["PL077"] and "an entry symbol of 'ml'" in sink.items[0].message


# --- warps and boxes at the link's geometry ------------------------------------------------------

def _wide(c):
    c["geometry"]["consumes"]["TILE_M"] = {"min": 16, "max": 1024, "default": 128}


def _no_box(c):  # a box that does not follow TILE_M
    c["params"][0]["tensor_map"]["box"] = [64, "TILE_K"]


def test_warps_over_geometry_take_the_links_values():
    ml64 = lambda c: (_no_box(c), c["geometry"]["provides"].update(TILE_M=64),  # noqa: E731
                      c["threads"].update(warps=8), c["threads"]["roles"][1].update(warps=4))
    r, a, sink = link(ml=ml64)
    assert not sink.items
    assert r.component("epi").contract.threads.warps == 4 and a.block_warps == 8
    assert re.search(r"port_acc_elements\(\) \{ return \(TILE_M\(\)\) \* \(TILE_N\(\)\) / \(32 \* \(\(TILE_M\(\) / 16\)\)\); \}",
                     generate_header(r.component("epi").contract))


@pytest.mark.parametrize("tile_m, warps, expected, word", [
    (1024, "TILE_M // 16", [("PL023", "/threads/warps"), ("PL023", "/threads/roles/0/warps")], "is 64"),
    (16, "TILE_M // 16", [("PL024", "/threads/roles/0/warps")], "is 1; a warpgroup-aligned"),
    (64, "1024 // (TILE_M - 64)", [("PL028", "/threads/warps"), ("PL028", "/threads/roles/0/warps")],
     "division by zero"),
])
def test_warps_that_do_not_hold_at_the_links_geometry(tile_m, warps, expected, word):
    def epi(c):
        _wide(c)
        c["threads"]["warps"] = c["threads"]["roles"][0]["warps"] = warps
    def ml(c):  # its tiles sized apart from TILE_M: the check pass's smem bound stays clear of the warps
        _no_box(c)
        c["geometry"]["provides"].update(TILE_M=tile_m)
        c["smem"]["buffers"][0]["bytes"] = "64 * TILE_K * 2 * STAGES"
    _, _, sink = link(ml=ml, epi=epi)
    assert [(d.code, d.location.pointer) for d in sink.items] == expected, [d.render() for d in sink.items]
    assert all(d.location.file == "epi.json" for d in sink.items)
    assert word in sink.items[0].message and f"TILE_M={tile_m}" in sink.items[0].message


def test_a_box_over_consumed_geometry_is_checked_at_the_links_value():
    def epi(c):
        c["geometry"]["consumes"]["TILE_N"] = {"min": 16, "max": 1024, "default": 128}
        c["params"][0] = {"name": "out", "dtype": "bf16", "tensor_map": {"shape": ["M", "N"], "box": [64, "TILE_N"]}}
    _, _, sink = link(ml=lambda c: c["geometry"]["provides"].update(TILE_N=512), epi=epi)
    assert errors(sink) == [("PL105", "epi.json", "/params/0/tensor_map/box/1")]
    assert "box extent 512 exceeds the TMA's 256 at this link's geometry (TILE_N=512)" in sink.items[0].message
    r, _, sink = link(epi=epi)  # TILE_N=256: 512 bytes, no swizzle: fine
    assert not sink.items
    doc = _param_spec(r.params[-1], r.geometry).to_json()
    assert doc["tensor_map"] == {"shape": ["M", "N"], "box": [64, 256], "swizzle": "none", "oob_fill": "zero"}


# --- the glue -----------------------------------------------------------------------------------

def glue(**kw):
    ctx = link_ctx(**kw)
    assert not ctx.sink.items, [d.render() for d in ctx.sink.items]
    return ctx.glue


def test_glue_of_a_role_structured_kernel():
    g = glue()
    body = g[g.index('extern "C" __global__'):]
    assert body.startswith('extern "C" __global__ void __launch_bounds__(384, 1) k('
                           "const __grid_constant__ pl::TensorMap a, int M, int N, int K, "
                           "__nv_bfloat16* __restrict__ out) {")
    order = [body.index(s) for s in (
        "if (pl::glue::smem_address(pl::dynamic_smem()) % 1024u) __trap();",  # a 1024-aligned buffer
        "  ml_init(&a);  // ml.init",                                         # '*': every thread, per CTA
        "  __syncthreads();",                                                 # one barrier
        "  if (warp < 4u) {  // warps 0-3: ml.producer",
        'asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");  // 168 at entry -> 40',
        "ml_load(tile, &a, K);  // ml.load",
        "  if (warp >= 4u && warp < 12u) {  // warps 4-11: ml.consumer, epi.epilogue",
        'asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");  // 168 at entry -> 232',
        "float pl_frag_ml__acc[128];  // ml.acc -> epi.acc, in registers",
        "ml_mma(tile, pl_frag_ml__acc, K);  // ml.mma",
        "epi_tile(tile, pl_frag_ml__acc, out, M, N);  // epi.tile")]
    assert order == sorted(order)
    assert body.count("__syncthreads()") == 1 and body.count("for (int t = blockIdx.x") == 2
    assert body.count("return;") == 2
    # the fragment lives inside the tile loop of its role's branch, nowhere else
    consumer = body[body.index("warps 4-11"):]
    assert consumer.index("for (int t") < consumer.index("float pl_frag_ml__acc") < consumer.index("return;")


def test_setmaxnreg_moves_down_when_the_entry_share_is_larger():
    # 8 warps: 65536 / 256 leaves 255 at entry (the per-thread maximum); both groups give registers back
    g = glue(ml=lambda c: (c["geometry"]["provides"].update(TILE_M=64), _no_box(c),
                           c["threads"].update(warps=8), c["threads"]["roles"][1].update(warps=4)))
    assert "__launch_bounds__(256, 1)" in g
    assert 'setmaxnreg.dec.sync.aligned.u32 40;");  // 255 at entry -> 40' in g
    assert 'setmaxnreg.dec.sync.aligned.u32 232;");  // 255 at entry -> 232' in g
    assert "setmaxnreg.inc" not in g


def test_no_setmaxnreg_where_no_role_asks_or_the_count_is_the_entry_share():
    g = glue(ml=lambda c: [r.pop("setmaxnreg") for r in c["threads"]["roles"]])
    assert "setmaxnreg" not in g and "__launch_bounds__(384, 1)" in g
    # 16 warps: 65536 / 512 = 128 at entry; a role asking for 128 needs no instruction
    g = glue(ml=lambda c: (c["threads"].update(warps=16), c["threads"]["roles"][0].update(warps=8, setmaxnreg=128),
                           c["threads"]["roles"][1].update(setmaxnreg=128)))
    assert "__launch_bounds__(512, 1)" in g and "setmaxnreg" not in g


def clustered(c):
    """The mainloop declares a cluster of 2, its tiles padded to whole clusters (PL202: tests/test_clusters.py)."""
    c.update(cluster={"dims": [2]})
    c["geometry"]["tile_sequence"]["grid"][0] = "ceil_div(ceil_div(M, TILE_M), 2) * 2"


def test_cluster_dims_reach_the_kernel():
    g = glue(ml=clustered, epi=lambda c: c.update(cluster={"dims": [2, 1, 1]}))
    assert "__launch_bounds__(384, 1) __cluster_dims__(2, 1, 1) k(" in g


def test_the_arena_check_follows_the_largest_alignment():
    g = glue(ml=lambda c: [b.update(align=16) for b in c["smem"]["buffers"]])
    assert "if (pl::glue::smem_address(pl::dynamic_smem()) % 128u) __trap();" in g  # the arena's own 128
    g = glue(ml=lambda c: c["smem"]["buffers"][1].update(align=512))
    assert "% 1024u) __trap();" in g


# --- the grouped tile order ----------------------------------------------------------------------

def _as_python(lines: list[str]) -> str:
    """The C statements `_tile_from` generates, as Python (non-negative ints: `/` is floor division)."""
    out = []
    for line in lines:
        for stmt in filter(None, (s.strip() for s in line.split(";"))):
            if stmt == "pl::Tile tile":
                continue
            m = re.fullmatch(r"if \((.*)\) (.*)", stmt)
            cond = None
            if m:
                cond, stmt = m.groups()
            stmt = re.sub(r"^(const )?int ", "", stmt).replace("tile.", "tile_").replace("/=", "//=")
            stmt = re.sub(r"(?<![/])/(?![/=])", "//", stmt)
            stmt = re.sub(r"tile_coord\[(\d)\]", r"coord[\1]", stmt)
            out.append(f"if {cond.replace('tile.coord', 'coord')}:\n    {stmt}" if cond else stmt)
    return "\n".join(out)


def _walk(order: str, extents: tuple[int, int], group: int = 8) -> list[tuple[int, int]]:
    code = _as_python(_tile_from(order, 2, "tiles_", "it", "0", "", group))
    seen = []
    for t in range(extents[0] * extents[1]):
        env = {"t": t, "it": 0, "tiles_0": extents[0], "tiles_1": extents[1], "coord": [None] * 3, "min": min}
        exec(code, env)
        assert env["coord"][2] == 0
        seen.append((env["coord"][0], env["coord"][1]))
    return seen


@pytest.mark.parametrize("extents", [(1, 1), (1, 7), (7, 1), (8, 3), (9, 5), (16, 16), (17, 2), (3, 40), (100, 3)])
@pytest.mark.parametrize("group", [1, 3, 8])
def test_grouped_order_is_a_bijection_onto_the_grid(extents, group):
    seen = _walk("grouped", extents, group)
    assert sorted(seen) == [(i, j) for i in range(extents[0]) for j in range(extents[1])]
    # inside a band of `group` rows the rows move fastest
    rows = min(group, extents[0])
    assert seen[:rows] == [(i, 0) for i in range(rows)]


def test_grouped_order_walks_bands_of_rows():
    seen = _walk("grouped", (5, 3), 2)
    assert seen == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2),   # band of rows 0-1
                    (2, 0), (3, 0), (2, 1), (3, 1), (2, 2), (3, 2),   # rows 2-3
                    (4, 0), (4, 1), (4, 2)]                           # the last band is short


@pytest.mark.parametrize("order, expected", [
    ("row_major", [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]),
    ("col_major", [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]),
    ("snake", [(0, 0), (0, 1), (0, 2), (1, 2), (1, 1), (1, 0)]),
])
def test_the_other_orders_through_the_same_evaluator(order, expected):
    assert _walk(order, (2, 3)) == expected


# --- the header of the entries form --------------------------------------------------------------

def test_header_of_the_entries_form():
    ml = component(mainloop()).contract
    h = generate_header(ml)
    assert entry_prototype(ml).split(";\n") == [
        'extern "C" __device__ void ml_init(const pl::TensorMap* a)',
        'extern "C" __device__ void ml_load(pl::Tile tile, const pl::TensorMap* a, int K)',
        'extern "C" __device__ void ml_mma(pl::Tile tile, float* __restrict__ acc, int K)']
    assert h.rstrip().endswith(entry_prototype(ml) + ";")
    assert "#include <pipelink/fragment.h>" in h
    assert "constexpr int port_acc_elements = 128;  // per thread, layout sm90_gmma_acc" in h
    assert "namespace pl_component = ::pl::ml;" in h
    assert "constexpr unsigned PRODUCER_WARPS = 4;" in h and "constexpr unsigned CONSUMER_WARPS = 8;" in h
    assert "port_acc(" not in h  # a register port has no shared memory
    epi = component(epilogue()).contract
    h = generate_header(epi)
    assert 'extern "C" __device__ void epi_tile(pl::Tile tile, float* __restrict__ acc, ' \
           '__nv_bfloat16* __restrict__ out, int M, int N);' in h
    assert "__device__ __forceinline__ unsigned WARPS() { return (TILE_M() / 16); }" in h
    assert "__device__ __forceinline__ unsigned EPILOGUE_WARPS() { return (TILE_M() / 16); }" in h
    assert "namespace pl_component = ::pl::epi;" in h


def test_manifest_declares_tensor_maps_for_the_launcher():
    r, _, _ = link()
    docs = {p.name: _param_spec(p, r.geometry).to_json() for p in r.params}
    assert docs["a"] == {"name": "a", "dtype": "bf16", "pointer": False, "const": False,
                         "tensor_map": {"shape": ["M", "K"], "box": [128, 64], "swizzle": "128B", "oob_fill": "zero"}}
    assert "tensor_map" not in docs["out"]


def test_the_shipped_hopper_pipelines_resolve():
    for gemm, epi in (("hopper_gemm_128x256", "epi_swiglu"), ("hopper_gemm_64x128", "epi_bias_residual"),
                      ("hopper_gemm_128x256", "epi_store_bf16")):
        ctx = run([shipped_component(gemm), shipped_component(epi)])
        r, a, sink = ctx.resolved, ctx.allocation, ctx.sink
        assert not sink.items, [d.render() for d in sink.items]
        assert a.arena_align == 1024 and [g.setmaxnreg for g in r.roles.groups] == [40, 232]


# --- the sm90_gmma_acc layout, as pipelink/fragment.h defines it ---------------------------------

def _fragment_functions(tm: int, tn: int, wg: int):
    """row(i, role_thread) and col(i, role_thread) of `Sm90GmmaAcc<tm, tn, wg>`, read from the header
    and evaluated as Python (unsigned, non-negative: `/` is floor division)."""
    text = (REPO / "pipelink" / "include" / "pipelink" / "fragment.h").read_text()
    body = text[text.index("struct Sm90GmmaAcc"):text.index("};", text.index("struct Sm90GmmaAcc"))]
    consts = {"TM": tm, "TN": tn, "WG": wg, "kPerBlock": tn // 2, "kBlocks": tm // (64 * wg)}

    def function(name):
        m = re.search(r"static int " + name + r"\(int i, unsigned role_thread\) \{(.*?)\n  \}", body, re.S)
        code = []
        for stmt in (s.strip() for s in m.group(1).split(";") if s.strip()):
            stmt = re.sub(r"^const (unsigned|int) ", "", stmt).replace("return ", "result = ")
            for part in stmt.split(", ") if "result" not in stmt else [stmt]:  # `v = ..., mb = ...`
                code.append(re.sub(r"(?<![/])/(?![/])", "//", part))
        compiled = compile("\n".join(code), name, "exec")

        def call(i, role_thread):
            env = dict(consts, i=i, role_thread=role_thread)
            exec(compiled, env)
            return env["result"]
        return call
    return function("row"), function("col")


@pytest.mark.parametrize("tm, tn, wg", [(64, 128, 1), (128, 256, 2), (128, 128, 1), (64, 8, 1), (128, 64, 2),
                                        (256, 16, 1)])
def test_sm90_gmma_acc_covers_the_tile_once(tm, tn, wg):
    row, col = _fragment_functions(tm, tn, wg)
    threads, per_thread = 128 * wg, tm * tn // (128 * wg)
    held = [(row(i, t), col(i, t)) for t in range(threads) for i in range(per_thread)]
    assert sorted(held) == [(r, c) for r in range(tm) for c in range(tn)]
    # as the header's comment says: element i = mb*(TN/2) + v -> row 64*WG*mb + 64w + 16q + l/4 + 8*((v/2) % 2),
    # column 8*(v/4) + 2*(l%4) + v%2
    for t in (0, 37, 127, threads - 1):
        q, lane = (t % 128) // 32, t % 32
        for i in range(per_thread):
            mb, v = divmod(i, tn // 2)
            assert row(i, t) == 64 * wg * mb + 64 * (t // 128) + 16 * q + lane // 4 + 8 * ((v // 2) % 2)
            assert col(i, t) == 8 * (v // 4) + 2 * (lane % 4) + v % 2


def test_entries_header_compiles_against_definitions(tmp_path):
    """A component defining its entries with the header's signatures, using the fragment layout."""
    from pipelink import toolchain
    from pipelink.authoring.builder import pipelink_include_dir
    ml = component(mainloop()).contract
    (tmp_path / "ml.pipelink.h").write_text(generate_header(ml))
    src = """#include "ml.pipelink.h"
using namespace pl_component;
extern "C" __device__ void ml_init(const pl::TensorMap* a) { asm volatile("" :: "l"(a)); }
extern "C" __device__ void ml_load(pl::Tile tile, const pl::TensorMap* a, int K) { smem_tiles()[tile.coord[0]] = K; }
extern "C" __device__ void ml_mma(pl::Tile tile, float* __restrict__ acc, int K) {
  const unsigned t = threadIdx.x - 32u * consumer_warp_begin();
  for (int i = 0; i < port_acc_elements; ++i)
    acc[i] = pl::frag::Sm90GmmaAcc<TILE_M, TILE_N, 2>::row(i, t) * TILE_N + pl::frag::Sm90GmmaAcc<TILE_M, TILE_N, 2>::col(i, t) + K;
}
"""
    toolchain.nvrtc_to_ltoir(src, "ml.cu", ["-arch=sm_90a", "-dlto", "-rdc=true", "-std=c++17",
                                            f"-I{tmp_path}", f"-I{pipelink_include_dir()}",
                                            *(f"-I{d}" for d in toolchain.cuda_include_dirs())])
    bad = src.replace("float* __restrict__ acc, int K", "float* __restrict__ acc")
    with pytest.raises(toolchain.ToolchainError):
        toolchain.nvrtc_to_ltoir(bad, "ml.cu", ["-arch=sm_90a", "-dlto", "-rdc=true", "-std=c++17",
                                                f"-I{tmp_path}", f"-I{pipelink_include_dir()}",
                                                *(f"-I{d}" for d in toolchain.cuda_include_dirs())])


# --- instances of a role (ping-pong) ---------------------------------------------------------------

def _pingpong(c):
    c["threads"] = {"warps": 12, "roles": [{"name": "producer", "warps": 4, "setmaxnreg": 40},
                                           {"name": "consumer", "warps": 4, "setmaxnreg": 232, "instances": 2}]}
    c["geometry"]["provides"]["TILE_N"] = 128


def _epi_per_warpgroup(c):
    c["threads"] = {"warps": 4, "roles": [{"name": "epilogue", "warps": 4, "warpgroup_aligned": True}]}
    c["smem"] = {"buffers": [{"name": "stage", "bytes": 16384, "align": 1024}]}
    c["barriers"] = {"named": [{"name": "stage", "threads": 128}]}
    c["geometry"]["consumes"]["TILE_N"] = {"one_of": [128, 256], "default": 128}


def test_instances_give_a_joining_component_a_copy_of_its_resources():
    r, a, sink = link(_pingpong, _epi_per_warpgroup)
    assert not errors(sink), [d.render() for d in sink.items]
    (prod, cons) = r.roles.groups
    assert (cons.name, cons.warps, cons.instances) == ("ml.consumer", 4, 2)
    assert a.block_warps == 12 and a.group_begin == {"ml.producer": 0, "ml.consumer": 4}
    assert a.copies == {"ml": 1, "epi": 2}  # the mainloop's producer is shared: one copy of its ring
    stage = next(p for p in a.smem if p.item.key == "buffer epi.stage")
    assert stage.item.size == 2 * 16384 and a.smem_stride[("epi", "stage")] == 16384 and stage.offset % 1024 == 0
    first = a.barrier_id[("epi", "stage")]
    assert first >= 1 and first + 1 not in a.hardcoded_ids  # two consecutive ids, one per copy
    # registers: both instances count
    assert 32 * (4 * 40 + 8 * 232) <= 65536


def test_instances_take_turns_in_the_generated_glue():
    ctx = link_ctx(_pingpong, _epi_per_warpgroup)
    a, glue = ctx.allocation, ctx.glue
    off = a.turn_mbar["ml.consumer"]
    assert f"pl::glue::mbarrier_init({off}u, 128u);" in glue and f"pl::glue::mbarrier_init({off + 8}u, 128u);" in glue
    body = glue[glue.index("const int pl_instance"):]
    assert "t = blockIdx.x + pl_instance * gridDim.x, it = pl_instance; t < num_tiles; t += 2 * gridDim.x, it += 2" in body
    wait, mma, arrive, epi = (body.index(s) for s in ("mbarrier_wait(", "ml_mma(", "mbarrier_arrive(", "epi_tile("))
    assert wait < mma < arrive < epi  # the mainloop in turn, the epilogue while the other instance computes
    # the parity each instance waits for: instance 1's j-th turn follows instance 0's j-th; instance 0's follows 1's (j-1)-th
    expr = re.search(r"\(unsigned\)\((.*)\)\);", body[wait:]).group(1)
    parity = lambda it, inst: eval(expr.replace("pl_instance == 0", str(int(inst == 0))).replace("pl_instance", str(inst))
                                   .replace("it", str(it)).replace("/", "//"))  # noqa: E731
    assert [parity(it, it % 2) for it in range(1, 9)] == [0, 0, 1, 1, 0, 0, 1, 1]


def test_a_joining_role_cannot_declare_instances():
    def epi(c):
        _epi_per_warpgroup(c)
        c["threads"]["roles"][0]["instances"] = 2
        c["threads"]["warps"] = 8
    _, _, sink = link(_pingpong, epi)
    assert ("PL103", "epi.json", "/threads/roles/0/instances") in errors(sink)


def test_instances_need_the_entries_form_and_add_up():
    from hopper_factory import load
    c, sink = load(mainloop(lambda c: c["threads"]["roles"][1].update(instances=2)))
    assert c is None and any(d.code == "PL023" and "2 x 8" in d.message for d in sink.items)


def test_role_structured_manifests_ask_for_a_balanced_grid():
    from pipelink.linker.emit import manifest
    r, a, sink = link()
    doc = manifest(r, a, "sm_90a", b"\0")
    assert doc.grid_policy == "balanced"


def test_a_cluster_reaches_the_kernel_and_the_manifest():
    from pipelink.linker.emit import manifest
    ctx = link_ctx(clustered, lambda c: c.update(cluster={"dims": [2, 1, 1]}))
    assert not errors(ctx.sink)
    assert "__cluster_dims__(2, 1, 1)" in ctx.glue
    assert manifest(ctx.resolved, ctx.allocation, "sm_90a", b"\0").cluster == (2, 1, 1)
    assert manifest(*link()[:2], "sm_90a", b"\0").cluster is None


def test_a_cluster_over_two_grid_dimensions_is_refused():
    from hopper_factory import load
    c, sink = load(mainloop(lambda c: c.update(cluster={"dims": [2, 2]})))
    assert c is None and [(d.code, d.location.pointer) for d in sink.items] == [("PL107", "/cluster/dims")]
    assert "one" in sink.items[0].message and "declare [4]" in sink.items[0].hint


def test_inspect_shows_a_role_structured_kernels_tensor_maps_cluster_and_register_wire():
    """A linked kernel's manifest, as `pipelink inspect K.cubin` shows it: what the launcher encodes for each tensor
    map, the cluster the grid is made of, and the fragment handed from the mainloop to the epilogue."""
    from pipelink.linker.emit import manifest
    from pipelink.report import manifest_summary, manifest_text
    r, a, sink = link(ml=clustered, epi=lambda c: c.update(cluster={"dims": [2]}))
    assert not sink.items, [d.render() for d in sink.items]
    m = manifest_summary(manifest(r, a, "sm_90a", b""), b"")
    lines = manifest_text("k.json", m)
    for line in ("    cluster  2 x 1 x 1 CTAs (the grid is whole clusters)",
                 "    cluster  ml walks (ceil_div(ceil_div(M, 128), 2) * 2) * (ceil_div(N, 256)) tiles in step: whole "
                 "clusters at every launch",
                 "    tensormap a: bf16[M, K], box [128, 64], swizzle 128B, oob fill zero",
                 "    wire     ml.acc -> epi.acc (auto, fragment)"):
        assert line in lines, "\n".join(lines)
    assert [ln.split(",")[0] for ln in lines if ln.startswith("    component")] == ["    component ml 1.0.0",
                                                                                   "    component epi 1.0.0"]
    assert m["tensor_maps"] == [{"name": "a", "dtype": "bf16", "shape": ["M", "K"], "box": [128, 64],
                                 "swizzle": "128B", "oob_fill": "zero"}]
    assert m["cluster"] == [2, 1, 1] and [c["name"] for c in m["components"]] == ["ml", "epi"]
    assert m["wires"] == [{"from": "ml.acc", "to": "epi.acc", "kind": "fragment", "explicit": False}]
    # each group of warps, who runs on it and its registers (the setmaxnreg budgets the link chose)
    assert [ln for ln in lines if ln.startswith("    role")] == [
        "    role     warps 0-3: ml.producer; 40 registers a thread (setmaxnreg)",
        "    role     warps 4-11: ml.consumer, epi.epilogue; 232 registers a thread (setmaxnreg)"]
    assert m["roles"][1] == {"name": "ml.consumer", "warps": [4, 11], "instances": 1,
                             "members": ["ml.consumer", "epi.epilogue"], "registers": 232, "setmaxnreg": True}
