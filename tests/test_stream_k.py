"""Split reductions (stream-K), pure: the launcher's plan, the walk every CTA takes (the glue's C
walk compiled for the host and compared with the Python one), the contract field and its checks
(PL109), the generated glue and manifest. No GPU."""
import itertools
import shutil
import subprocess
from pathlib import Path

import pytest

from hopper_factory import component, epilogue, load, mainloop
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.pipeline import PipelineSpec
from pipelink.linker.allocate import allocate
from pipelink.linker.emit import manifest
from pipelink.linker.glue import generate_glue
from pipelink.linker.resolve import resolve
from pipelink.runtime.launch import Kernel
from pipelink.runtime.streamk import partial_slots, split_k_pieces, stream_k_plan

INCLUDE = Path(__file__).resolve().parent.parent / "pipelink" / "include"


# --- the launcher's plan ------------------------------------------------------------------------

def test_a_last_partial_wave_and_one_whole_wave_before_it_are_split():
    # Qwen3-32B gate/up at M=16, 64x128 tiles: 400 tiles of 80 k-blocks on 132 SMs
    assert stream_k_plan(400, 80, 132) == (132, 136, 1)
    # the down projection at M=16: 40 tiles of 400 k-blocks, fewer tiles than SMs: all split, all SMs
    assert stream_k_plan(40, 400, 132) == (132, 40, 1)


def test_whole_waves_stay_whole():
    assert stream_k_plan(264, 80, 132) == (132, 0, 1)
    assert stream_k_plan(132, 80, 132) == (132, 0, 1)


def test_pieces_stay_long_enough_to_pay_for_their_partials():
    # 3 tiles of 20 blocks: 15 CTAs of 4 blocks each, not 132 CTAs of a fraction of a block
    assert stream_k_plan(3, 20, 132) == (15, 3, 1)
    # 3 tiles of 2 blocks: no piece would be 4 blocks long: one CTA per tile, whole
    assert stream_k_plan(3, 2, 132) == (3, 0, 1)
    assert stream_k_plan(5, 1, 132) == (5, 0, 1)  # one block cannot split


def test_tiles_in_several_rows_are_never_streamed_but_split_in_equal_pieces_where_that_pays():
    # M=1024 down projection, 64x128 tiles: 16 rows of 40, 5 rounds whole or in halves: whole, balanced grid
    assert stream_k_plan(640, 400, 132, rows=16) == (128, 0, 1)
    assert stream_k_plan(640, 400, 132, grid=132, rows=16) == (132, 0, 1)
    # 128x128 tiles: 8 rows of 40, 3 rounds whole, 5 rounds of halves (2.5): split-K in 2 on every SM
    assert stream_k_plan(320, 400, 132, rows=8) == (132, 0, 2)
    # M=128 on 64x128 tiles: 2 rows of 40, one round whole (80 SMs busy), 2 rounds of thirds
    assert stream_k_plan(80, 400, 132, rows=2) == (132, 0, 3)
    # gate/up M=1024 (3200 tiles of 80 blocks): 25 rounds whole, 24.5 in halves: not worth the partials
    assert stream_k_plan(3200, 80, 132, rows=8) == (128, 0, 1)
    assert stream_k_plan(40, 400, 132, rows=1) == (132, 40, 1)


def test_a_clustered_kernel_is_never_split_stream_k():
    """Stream-K's shares start where the CTA before stopped, so a cluster's CTAs would walk different units: a
    kernel in clusters splits in equal pieces (split-K: a cluster's consecutive units are one piece of neighbouring
    tiles) or keeps its tiles whole, as several rows of tiles do."""
    assert stream_k_plan(400, 80, 132) == (132, 136, 1)
    # the single row split in equal pieces instead, as two rows would be
    assert stream_k_plan(400, 80, 132, cluster=2) == stream_k_plan(400, 80, 132, rows=2) == (132, 0, 4)
    assert stream_k_plan(40, 400, 132, cluster=2) == (132, 0, 3)
    assert stream_k_plan(40, 400, 132, grid=132, cluster=4) == (132, 0, 3)
    assert stream_k_plan(3, 20, 132, cluster=2) == (3, 0, 1) and stream_k_plan(3, 20, 132) == (15, 3, 1)
    # the launcher plans so for a kernel whose manifest says it runs in clusters
    r, a, _ = _link()
    doc = dict(manifest(r, a, "sm_90a", b"").to_json(), cluster=[2, 1, 1])
    k = Kernel(doc)
    k.num_sms, k.max_active_blocks_per_sm, k.max_active_clusters = (lambda: 132), (lambda: 1), (lambda: 66)
    # one row of 200 tiles: split-K in 3 pieces on 132 CTAs (66 clusters), where stream-K split its last 200
    assert k.stream_k_plan({"M": 16, "N": 51200, "K": 5120}) == (132, 0, 3)


def test_split_k_pieces_keep_a_minimum_length():
    assert split_k_pieces(80, 400, 132) == 3
    assert split_k_pieces(60, 400, 132) == 2  # halves fit one round: 0.5 of the whole round
    assert split_k_pieces(40, 40, 132) == 2   # thirds would be 14 blocks: below 16
    assert split_k_pieces(40, 31, 132) == 1   # halves of 16 and 15
    assert split_k_pieces(264, 400, 132) == 1  # two whole rounds: nothing to gain


def test_a_callers_grid_is_kept_and_split_only_when_every_cta_is_resident():
    assert stream_k_plan(24, 10, 132, grid=7) == (7, 10, 1)   # 3 rounds of 7 and 3 over: 2 whole rounds, then 10 split
    assert stream_k_plan(24, 10, 132, grid=300) == (300, 0, 1)  # not all resident: pieces could wait on a CTA never run
    assert stream_k_plan(320, 400, 132, grid=300, rows=8) == (300, 0, 1)
    assert stream_k_plan(0, 10, 132) == (1, 0, 1)


# --- the walk -----------------------------------------------------------------------------------

def pieces(tiles: int, blocks: int, grid: int, sk_tiles: int, split: int = 1) -> list[list[tuple[int, int, int, int]]]:
    """Each CTA's units in walk order, (tile, k_begin, k_end, k_first): the walk the glue's
    `stream_k_unit` takes, written out independently as the oracle of these tests."""
    out = []
    if split > 1:
        piece = -(-blocks // split)
        for cta in range(grid):
            units, position = [], 0
            for unit in range(cta, tiles * split, grid):
                p, t = divmod(unit, tiles)
                k_begin, k_end = p * piece, min(blocks, (p + 1) * piece)
                units.append((t, k_begin, k_end, position))
                position += k_end - k_begin
            out.append(units)
        return out
    dp_tiles = tiles - sk_tiles
    sk_blocks = sk_tiles * blocks
    for cta in range(grid):
        units = [(t, 0, blocks, u * blocks) for u, t in enumerate(range(cta, dp_tiles, grid))]
        dp_units = len(units)
        begin, end = sk_blocks * cta // grid, sk_blocks * (cta + 1) // grid
        g = begin
        while g < end:
            k_begin = g % blocks
            k_end = min(blocks, k_begin + (end - g))
            units.append((dp_tiles + g // blocks, k_begin, k_end, dp_units * blocks + g - begin))
            g += k_end - k_begin
        out.append(units)
    return out


CASES = [(400, 80, 132, 136), (40, 400, 132, 40), (24, 10, 7, 10), (3, 20, 15, 3), (5, 3, 11, 5), (9, 7, 4, 9),
         (10, 5, 4, 0), (1, 2, 3, 1), (17, 13, 5, 7), (6, 1, 4, 2)]
# split-K: (tiles, blocks, grid, pieces)
SPLIT_CASES = [(320, 400, 132, 2), (80, 400, 132, 3), (7, 50, 5, 4), (9, 33, 4, 3), (1, 32, 3, 2), (13, 17, 13, 2)]


@pytest.mark.parametrize("tiles, blocks, grid, split", SPLIT_CASES)
def test_the_split_k_walk_covers_every_block_once_and_the_last_piece_gathers_earlier_units(tiles, blocks, grid, split):
    walk = pieces(tiles, blocks, grid, 0, split)
    covered = sorted((t, k) for units in walk for t, kb, ke, _ in units for k in range(kb, ke))
    assert covered == [(t, k) for t in range(tiles) for k in range(blocks)]
    unit_of = {}  # (tile, k_begin) -> the unit's index in the launch (grid-stride, piece-major)
    for cta, units in enumerate(walk):
        position = 0
        for u, (t, kb, ke, first) in enumerate(units):
            assert kb < ke and first == position
            position += ke - kb
            unit_of[(t, kb)] = cta + u * grid
    piece = -(-blocks // split)
    for t in range(tiles):
        last = unit_of[(t, (split - 1) * piece)]
        assert all(unit_of[(t, p * piece)] < last for p in range(split - 1))  # it waits only on earlier units
    assert partial_slots(grid, tiles, 0, split) == tiles * (split - 1)


@pytest.mark.parametrize("tiles, blocks, grid, split", CASES)
def test_the_walk_covers_every_block_once_and_pieces_meet_as_the_glue_expects(tiles, blocks, grid, split):
    walk = pieces(tiles, blocks, grid, split)
    covered = sorted((t, k) for units in walk for t, kb, ke, _ in units for k in range(kb, ke))
    assert covered == [(t, k) for t in range(tiles) for k in range(blocks)]
    stored = {}  # tile -> CTAs that leave a partial for it
    for cta, units in enumerate(walk):
        position, whole = 0, sum(1 for t, *_ in units if t < tiles - split)
        assert all(t < tiles - split for t, *_ in units[:whole])  # whole tiles first
        for u, (t, kb, ke, first) in enumerate(units):
            assert kb < ke and first == position  # the ring position counts the blocks walked before
            position += ke - kb
            if kb != 0:  # a later piece: only a CTA's first split unit, so one slot per CTA is enough
                assert u == whole
                stored.setdefault(t, []).append(cta)
            elif ke != blocks:  # a first piece: the CTA's last unit, waited for after everything else
                assert u == len(units) - 1
    # the first piece's CTA gathers exactly the CTAs that stored a partial for its tile
    sk_blocks, dp_tiles = split * blocks, tiles - split
    for cta, units in enumerate(walk):
        for t, kb, ke, _ in units:
            if kb == 0 and ke != blocks:
                tile_end = (t - dp_tiles + 1) * blocks
                gathered = [c for c in range(cta + 1, grid) if sk_blocks * c // grid < tile_end
                            and sk_blocks * c // grid < sk_blocks * (c + 1) // grid]
                assert gathered == stored.pop(t)
    assert not stored


HARNESS = r"""
#include <cstdio>
#include <algorithm>
struct Dim { unsigned x, y, z; };
static Dim blockIdx, gridDim, threadIdx;
#define __device__
#define __forceinline__ inline
#define __global__
#define __shared__
#define __align__(n)
using std::min;
using std::max;
struct float4 { float x, y, z, w; };
static float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
static void __stcg(float4* p, float4 v) { *p = v; }
static float4 __ldcg(const float4* p) { return *p; }
static void __threadfence() {}
static void __syncwarp() {}
static void __nanosleep(unsigned) {}
template <class T> static T __shfl_sync(unsigned, T v, int) { return v; }
static unsigned __cvta_generic_to_shared(const void*) { return 0; }
#define asm(...) (void)0
#include <pipelink/glue.h>
int main() {
  int tiles, blocks, grid, split, pieces;
  while (std::scanf("%d %d %d %d %d", &tiles, &blocks, &grid, &split, &pieces) == 5) {
    gridDim.x = grid;
    for (unsigned c = 0; c < (unsigned)grid; ++c) {
      blockIdx.x = c;
      const pl::glue::StreamKWalk w = pl::glue::stream_k_walk(tiles, blocks, split, pieces);
      for (int u = 0;; ++u) {
        pl::Tile tile; int t;
        if (!pl::glue::stream_k_unit(w, u, t, tile)) break;
        std::printf("%u %d %d %d %d\n", c, t, tile.k_begin, tile.k_end, tile.k_first);
      }
    }
    std::printf("end\n");
  }
}
"""


def test_the_glues_walk_is_the_plans_walk(tmp_path):
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    (tmp_path / "walk.cpp").write_text(HARNESS)
    exe = tmp_path / "walk"
    subprocess.run([cxx, "-std=c++17", "-w", f"-I{INCLUDE}", str(tmp_path / "walk.cpp"), "-o", str(exe)], check=True,
                   capture_output=True)
    cases = [(*c, 1) for c in CASES] + [(t, b, g, 0, s) for t, b, g, s in SPLIT_CASES]
    cases += [(*c, 1) for c in itertools.product((1, 7, 30), (2, 9), (1, 4, 13), (0, 1, 5)) if c[3] <= c[0]]
    cases += [(t, b, g, 0, s) for t, b, g, s in itertools.product((1, 7, 30), (16, 33, 64), (1, 4, 13), (2, 3, 4))
              if (s - 1) * -(-b // s) < b]
    out = subprocess.run([str(exe)], input="".join(" ".join(map(str, c)) + "\n" for c in cases), text=True,
                         capture_output=True, check=True).stdout.split("end\n")
    for (tiles, blocks, grid, split, n), text in zip(cases, out):
        got = [tuple(map(int, line.split())) for line in text.splitlines()]
        want = [(c, *unit) for c, units in enumerate(pieces(tiles, blocks, grid, split, n)) for unit in units]
        assert got == want, (tiles, blocks, grid, split, n)


# --- the contract and the link ------------------------------------------------------------------

def _reduction(c):
    c["geometry"]["tile_sequence"]["reduction"] = {"blocks": "ceil_div(K, TILE_K)", "port": "acc"}


def _link(ml_edit=_reduction, epi_edit=None):
    sink = DiagnosticSink()
    comps = [component(mainloop(ml_edit)), component(epilogue(epi_edit))]
    r = resolve(comps, PipelineSpec(name="k"), sink)
    a = allocate(r, "sm_90a", sink) if r else None
    return r, a, sink


def codes(sink):
    return [(d.code, d.location.pointer if d.location else None) for d in sink.items if d.severity == "error"]


def test_the_reduction_is_read_into_the_model_and_planned():
    r, a, sink = _link()
    assert not sink.items, [d.render() for d in sink.items]
    sk = r.stream_k
    assert (sk.component, sk.fragment.out_port, sk.group.name, sk.blocks.text) == (
        "ml", "acc", "ml.consumer", "ceil_div(K, TILE_K)")
    assert sk.slot_floats() == 32 + 32 * 8 * 128  # flags, then 8 warps x 32 lanes x 128 floats


@pytest.mark.parametrize("edit, pointer", [
    (lambda c: c["geometry"]["tile_sequence"].update(reduction={"blocks": "ceil_div(K, TILE_K)", "port": "nope"}),
     "/geometry/tile_sequence/reduction/port"),
    (lambda c: (c["geometry"]["tile_sequence"].update(reduction={"blocks": "K", "port": "acc"}),
                c["ports"][0].update(dtype="bf16")), "/geometry/tile_sequence/reduction/port"),
])
def test_a_reduction_port_must_be_an_f32_out_register_port(edit, pointer):
    contract, sink = load(mainloop(edit))
    assert contract is None and ("PL109", pointer) in codes(sink)


def test_a_reduction_over_unknown_names_and_unknown_keys():
    contract, sink = load(mainloop(lambda c: c["geometry"]["tile_sequence"].update(
        reduction={"blocks": "ceil_div(Q, TILE_K)", "port": "acc"})))
    assert contract is None and ("PL029", "/geometry/tile_sequence/reduction/blocks") in codes(sink)
    contract, sink = load(mainloop(lambda c: c["geometry"]["tile_sequence"].update(
        reduction={"blocks": "K", "port": "acc", "split": "always"})))
    assert contract is None and [c for c, _ in codes(sink)] == ["PL020"]


def test_a_reduction_needs_the_entries_form():
    import json
    raw = json.loads((INCLUDE.parent.parent / "contracts" / "tile_axpby.json").read_text())
    raw["geometry"].setdefault("tile_sequence", {"grid": ["1"]})["reduction"] = {"blocks": "1",
                                                                               "port": raw["ports"][0]["name"]}
    contract, sink = load(raw)
    assert contract is None and "PL109" in [c for c, _ in codes(sink)]


def test_partial_sums_nobody_reads():
    sink = DiagnosticSink()
    r = resolve([component(mainloop(_reduction))], PipelineSpec(name="k"), sink)
    assert r is None and ("PL109", "/geometry/tile_sequence/reduction/port") in codes(sink)


def test_the_glue_adds_the_pieces_between_the_mainloop_and_the_epilogue():
    r, a, sink = _link()
    g = generate_glue(r, a)
    assert "float* __restrict__ pl_partials, int pl_stream_k_tiles, int pl_split_k) {" in g
    assert ("const pl::glue::StreamKWalk pl_walk = pl::glue::stream_k_walk(num_tiles, ((K + 64 - 1) / 64), "
            "pl_stream_k_tiles);") in g or "pl::glue::stream_k_walk(num_tiles," in g
    consumer = g[g.index("warps 4-11"):]
    order = [consumer.index(s) for s in (
        "if (!pl::glue::stream_k_unit(pl_walk, it, t, tile)) break;",
        "ml_mma(tile, pl_frag_ml__acc, K);",
        "pl::glue::partial_store<128>(pl_partials, 32800, pl::glue::piece_slot(pl_walk, t, tile), (int)(warp - 4u) % 8, "
        "pl_frag_ml__acc);",
        "continue;",
        "pl::glue::partial_gather<128>(pl_walk, t, pl_partials, 32800, (int)(warp - 4u) % 8, pl_frag_ml__acc);",
        "epi_tile(tile, pl_frag_ml__acc, out, M, N);")]
    assert order == sorted(order)
    producer = g[g.index("warps 0-3"):g.index("warps 4-11")]
    assert "stream_k_unit(pl_walk, it, t, tile)" in producer and "partial_" not in producer


def test_ping_pong_instances_hand_the_next_turn_over_before_waiting_for_pieces():
    def pingpong(c):
        _reduction(c)
        c["threads"] = {"warps": 12, "roles": [{"name": "producer", "warps": 4, "setmaxnreg": 40},
                                               {"name": "consumer", "warps": 4, "setmaxnreg": 232, "instances": 2}]}
        c["geometry"]["provides"]["TILE_N"] = 128

    def epi(c):
        c["threads"] = {"warps": 4, "roles": [{"name": "epilogue", "warps": 4, "warpgroup_aligned": True}]}
        c["geometry"]["consumes"]["TILE_N"] = {"one_of": [128, 256], "default": 128}
    r, a, sink = _link(pingpong, epi)
    assert not sink.items, [d.render() for d in sink.items]
    g = generate_glue(r, a)
    body = g[g.index("const int pl_instance"):]
    assert "for (int it = pl_instance; ; it += 2) {" in body
    order = [body.index(s) for s in ("ml_mma(tile", "the next instance's turn", "partial_store<128>", "partial_gather<128>",
                                     "epi_tile(tile")]
    assert order == sorted(order)
    assert "(int)(warp - 4u) % 4" in body  # the warp inside its instance: both instances use one slot layout


def test_the_link_map_says_how_the_reduction_may_be_split():
    from pipelink.linker.emit import link_map
    r, a, sink = _link()
    text = link_map(r, a, "sm_90a")
    assert ("reduction ceil_div(K, 64) blocks per tile into ml.acc, split by the launcher per shape (stream-K for "
            "one row of tiles, split-K in 2-4 pieces for several, else whole); partial slots of 131200 B, added on "
            "ml.consumer's warps before epi") in text


def test_inspect_says_the_reduction_may_be_split():
    from pipelink.report import manifest_summary, manifest_text
    r, a, sink = _link()
    text = "\n".join(manifest_text("k.json", manifest_summary(manifest(r, a, "sm_90a", b""), b"")))
    assert "reduce   ceil_div(K, 64) blocks per tile, split by the launcher per shape" in text
    assert "(+ 3 from the launcher)" in text


def test_the_manifest_asks_the_launcher_for_partials_and_a_split():
    r, a, sink = _link()
    doc = manifest(r, a, "sm_90a", b"").to_json()
    assert doc["grid_policy"] == "stream_k"
    assert doc["stream_k"] == {"blocks": "ceil_div(K, 64)", "slot_floats": 32800}
    assert [(p["name"], p["implicit"]) for p in doc["params"] if p.get("implicit")] == [
        ("pl_partials", "partials"), ("pl_stream_k_tiles", "stream_k_tiles"), ("pl_split_k", "split_k")]
    k = Kernel(doc)
    assert [p.name for p in k.user_params] == ["a", "M", "N", "K", "out"]
    k.num_sms, k.max_active_blocks_per_sm = (lambda: 132), (lambda: 1)
    assert k.grid_for(M=16, N=51200, K=5120) == 132  # 1 x 200 tiles of 128x256: split 68 + 132 of them
    assert k.stream_k_plan({"M": 16, "N": 51200, "K": 5120}) == (132, 200, 1)
    assert k.stream_k_plan({"M": 1024, "N": 51200, "K": 5120}) == (124, 0, 1)  # 8 rows of 200: whole, 13 rounds
    assert k.stream_k_plan({"M": 1024, "N": 5120, "K": 25600}) == (132, 0, 4)  # 8 rows of 20: 2 rounds whole, 5 of quarters
    k.split_reduction = False
    assert k.stream_k_plan({"M": 16, "N": 51200, "K": 5120}) == (100, 0, 1)  # 2 rounds on 100 CTAs, not 132


def test_the_manifest_of_a_split_kernel_without_both_partial_parameters_is_refused():
    r, a, _ = _link()
    doc = manifest(r, a, "sm_90a", b"").to_json()
    doc["params"] = [p for p in doc["params"] if p.get("implicit") != "stream_k_tiles"]
    with pytest.raises(ValueError, match="split reduction"):
        Kernel(doc)
    doc = manifest(r, a, "sm_90a", b"").to_json()
    del doc["stream_k"]
    with pytest.raises(ValueError, match="stream_k"):
        Kernel(doc)
    doc = manifest(r, a, "sm_90a", b"").to_json()
    doc["stream_k"]["blocks"] = "ceil_div(K,"
    with pytest.raises(ValueError, match="stream_k.blocks"):
        Kernel(doc)
