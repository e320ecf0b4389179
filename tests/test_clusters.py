"""A component that declares a thread-block cluster walks its tiles in step with its cluster's other CTAs: a tile
count of whole clusters (PL202, on sampled shapes; the launcher checks each launch's), a walk that keeps step
(PL203: not blocked tiles, not dynamic dispatch, no wait on its own tasks), `deal: continue` moving on in whole
clusters; code that executes the cluster barrier only where every thread of the block runs it (PL206: the probe
reads it from the SASS). CPU only: contracts read bare, the link's passes short of compiling (one compiles the glue
with NVRTC; components that sync their cluster are built and probed with the pinned toolchain). The launcher's refusal is in
tests/test_launch.py, stream-K's in tests/test_stream_k.py, the kernels on a GPU in tests/test_gpu.py."""
from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest

from contract_factory import shipped_component
from hopper_factory import component, epilogue, mainloop
from pipelink.cli import main
from pipelink.core.expr import parse
from pipelink.core.pipeline import PipelineSpec
from pipelink.linker.clusters import not_whole_clusters, step_breaker, tile_count
from pipelink.linker.glue import deal_step
from pipelink.linker.passes import PASSES, LinkOptions, run_passes
from test_calls import MLP_LAYERS, components as decode_components, run as run_calls

REPO = Path(__file__).resolve().parent.parent
PADDED = "ceil_div(ceil_div(M, TILE_M), 2) * 2"


def walk(padded=False, distribution=None, n=2):
    """An edit of a contract that walks the kernel's tiles beside a clustered one (the same sequence)."""
    def edit(c):
        seq = c["geometry"]["tile_sequence"]
        if padded:
            seq["grid"][0] = f"ceil_div(ceil_div(M, TILE_M), {n}) * {n}"
        if distribution:
            seq["distribution"] = distribution
    return edit


def clustered(n=2, padded=False, distribution=None):
    """An edit of a contract: it declares a cluster of n CTAs (its grid padded to whole clusters, its distribution)."""
    walked = walk(padded, distribution, n)

    def edit(c):
        c["cluster"] = {"dims": [n]}
        walked(c)
    return edit


def rowsum(load=None, rowsum_=None):
    return [shipped_component("tile_load", load), shipped_component("tile_transform"),
            shipped_component("block_rowsum", rowsum_)]


def passes(comps, until="generate", extra=(), **spec):
    return run_passes(options=LinkOptions(arch=spec.pop("arch", "sm_90"), pipeline=PipelineSpec(name="k", **spec),
                                          cache=False), components=comps, until=until, extra=extra)


def errors(ctx):
    return [(d.code, Path(d.location.file or "").name, d.location.pointer, d.location.option)
            for d in ctx.sink.items if d.severity == "error"]


def write(tmp_path, name, edit=None) -> Path:
    raw = json.loads((REPO / "contracts" / f"{name}.json").read_text())
    if edit:
        edit(raw)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(raw))
    return path


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


# A component that meets its cluster's other CTA at every tile: a cluster barrier, then each CTA hands its task
# to the other through distributed shared memory and waits until the other's has arrived (what a multicast
# load's arrivals or an exchange of partial sums do), then stores the task it received. A CTA whose peer walks
# fewer tiles waits for it forever. Tiles past T take part in the exchange and store nothing.
CLUSTER_SWAP_SRC = r"""
#include "cluster_swap.pipelink.h"
using namespace pl::cluster_swap;

extern "C" __device__ void cluster_swap(pl::Tile tile, int* __restrict__ out, int T) {
  unsigned rank, box = (unsigned)__cvta_generic_to_shared(smem_box<unsigned>());
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  // the CTA's first tile: nothing handed over yet (the other CTA hands over only after the barrier below)
  if (!tile.continues && thread_rank() == 0) asm volatile("st.shared::cta.u32 [%0], %1;" :: "r"(box), "r"(0u) : "memory");
  // every CTA of the cluster is at this tile: the other has read what this one handed it at the last one
  asm volatile("barrier.cluster.arrive.release;" ::: "memory");
  asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
  if (thread_rank() == 0) {
    unsigned theirs, got = 0;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(theirs) : "r"(box), "r"(rank ^ 1u));
    asm volatile("st.release.cluster.shared::cluster.u32 [%0], %1;" :: "r"(theirs), "r"((unsigned)tile.linear + 1u)
                 : "memory");
    while (got == 0) {  // the other CTA's task, handed over at this tile
      asm volatile("ld.acquire.cluster.shared::cta.u32 %0, [%1];" : "=r"(got) : "r"(box) : "memory");
      if (got == 0) __nanosleep(64);
    }
    asm volatile("st.shared::cta.u32 [%0], %1;" :: "r"(box), "r"(0u) : "memory");  // for the next tile's
    if (tile.linear < T) out[tile.linear] = (int)got - 1;  // a tile past the data stores nothing
  }
}
"""

CLUSTER_SWAP = {
    "pipelink_contract": 1, "name": "cluster_swap", "version": "1.0.0", "owner": "tests",
    "entry": {"symbol": "cluster_swap", "params": [{"name": "out", "dtype": "i32", "pointer": True},
                                                   {"name": "T", "dtype": "i32"}]},
    "targets": {"archs": ["sm_90", "sm_90a"],
                "compile_flags": {"ftz": False, "prec_div": True, "prec_sqrt": True, "fmad": True}},
    "threads": {"warps": 4}, "registers": {"max_per_thread": 128},
    "smem": {"buffers": [{"name": "box", "bytes": 16, "align": 16}]},
    "cluster": {"dims": [2]},
    "geometry": {"tile_sequence": {"grid": ["ceil_div(T, 2) * 2"], "order": "row_major",
                                   "distribution": "grid_stride"}},
}

# A call of another component before the clustered one, of any task count: with `deal: continue` the clustered
# call starts where it ended, on a whole cluster.
TICK_SRC = r"""
#include "tick.pipelink.h"
using namespace pl::tick;

extern "C" __device__ void tick(pl::Tile tile, int* __restrict__ marks, int U) {
  if (thread_rank() == 0) marks[tile.linear] += 1;
}
"""

TICK = {
    "pipelink_contract": 1, "name": "tick", "version": "1.0.0", "owner": "tests",
    "entry": {"symbol": "tick", "params": [{"name": "marks", "dtype": "i32", "pointer": True},
                                           {"name": "U", "dtype": "i32"}]},
    "targets": CLUSTER_SWAP["targets"], "threads": {"warps": 4}, "registers": {"max_per_thread": 128},
    "geometry": {"tile_sequence": {"grid": ["U"], "order": "row_major", "distribution": "grid_stride"}},
}


# --- the rule: a clustered walk's tile count is whole clusters (PL202) ------------------------------------------

def test_a_grid_that_is_not_whole_clusters_is_refused_by_check(capsys, tmp_path):
    """`pipelink check --pipeline` runs the link's decisions: the rowsum pipeline with tile_load declaring a
    cluster of 2 over its unpadded grid (one tile at M = N = 1: the cluster's other CTA finds none) is PL202 at
    the grid, the cluster beside it; exit 1."""
    contracts = [write(tmp_path, "tile_load", clustered()), write(tmp_path, "tile_transform"),
                 write(tmp_path, "block_rowsum")]
    code, _, err = cli(capsys, "check", *contracts, "--pipeline", REPO / "pipelines" / "rowsum.json")
    assert code == 1 and "error[PL202]" in err, err
    assert "'tile_load' declares a cluster of 2 CTAs" in err and "is 1 at M=1, N=1, not a multiple of 2" in err
    assert f"--> {contracts[0]}, at /geometry/tile_sequence/grid" in err
    assert f">>> also {contracts[0]}, at /cluster" in err
    assert "ceil_div(ceil_div(M, TILE_M), 2) * 2" in err  # the hint pads the first extent
    code, out, _ = cli(capsys, "check", *contracts, "--pipeline", REPO / "pipelines" / "rowsum.json",
                       "--format", "json")
    (d,) = [d for d in json.loads(out)["diagnostics"] if d["severity"] == "error"]
    assert code == 1 and d["code"] == "PL202" and d["location"]["pointer"] == "/geometry/tile_sequence/grid"
    assert d["location"]["file"] == str(contracts[0]) and d["related"][0]["pointer"] == "/cluster"


def test_a_padded_grid_is_accepted_and_the_manifest_carries_its_count(capsys, tmp_path):
    contracts = [write(tmp_path, "tile_load", clustered(padded=True)), write(tmp_path, "tile_transform"),
                 write(tmp_path, "block_rowsum", walk(padded=True))]
    code, out, err = cli(capsys, "check", *contracts, "--pipeline", REPO / "pipelines" / "rowsum.json")
    assert code == 0, err
    ctx = passes(rowsum(clustered(padded=True), walk(padded=True)))
    assert not ctx.sink.items, [d.render() for d in ctx.sink.items]
    assert "__cluster_dims__(2, 1, 1)" in ctx.glue
    from pipelink.linker.emit import manifest
    m = manifest(ctx.resolved, ctx.allocation, "sm_90", b"")
    assert m.cluster == (2, 1, 1)
    assert m.cluster_tiles == {"tile_load": "(ceil_div(ceil_div(M, 32), 2) * 2) * (ceil_div(N, 128))"}
    assert m.to_json()["cluster_tiles"] == m.cluster_tiles and type(m).from_json(m.to_json()) == m
    # a kernel without a cluster, or with a cluster of one CTA, has nothing to check
    plain = passes(rowsum())
    assert "cluster_tiles" not in manifest(plain.resolved, plain.allocation, "sm_90", b"").to_json()
    one = passes(rowsum(clustered(n=1)))
    assert not one.sink.items and not manifest(one.resolved, one.allocation, "sm_90", b"").cluster_tiles


def test_the_check_is_a_pass_of_its_own():
    names = [name for name, _ in PASSES]
    assert names.index("resolve") < names.index("clusters") < names.index("allocate")
    ctx = passes(rowsum(clustered()), until="clusters")
    assert [name for name, _ in ctx.timings][-1] == "clusters" and ctx.allocation is None
    assert [e[0] for e in errors(ctx)] == ["PL202"]
    assert [e[0] for e in errors(passes(rowsum(clustered()), until="resolve"))] == []  # resolve alone: not yet


def test_a_clustered_component_of_four_ctas_and_other_schedules():
    """Whole clusters of the cluster's size; the warp-specialized and role-structured schedules walk the kernel's
    tiles grid-stride like the sequential one, so the rule is the same there."""
    ctx = passes(rowsum(lambda c: (clustered(n=4)(c), walk(padded=True)(c)), walk(padded=True)))
    assert [e[0] for e in errors(ctx)] == ["PL202"]  # padded to 2, not to 4
    assert "not a multiple of 4" in ctx.sink.errors[0].message
    assert not passes(rowsum(clustered(n=4, padded=True), walk(padded=True, n=4))).sink.items
    ring = [shipped_component("ring_load", clustered()), shipped_component("ring_dot")]
    assert [e[:3] for e in errors(passes(ring))] == [("PL202", "ring_load.json", "/geometry/tile_sequence/grid")]
    # a role-structured mainloop (its consumer in two instances walks a grid-stride sequence too)
    ml = component(mainloop(lambda c: c.update(cluster={"dims": [2]})))
    ctx = run_passes(options=LinkOptions(arch="sm_90a", pipeline=PipelineSpec(name="k"), cache=False),
                     components=[ml, component(epilogue())], until="generate")
    assert [e[:3] for e in errors(ctx)] == [("PL202", "ml.json", "/geometry/tile_sequence/grid")]

    def pad(c):
        c["cluster"] = {"dims": [2]}
        c["geometry"]["tile_sequence"]["grid"][0] = PADDED
    ctx = run_passes(options=LinkOptions(arch="sm_90a", pipeline=PipelineSpec(name="k"), cache=False),
                     components=[component(mainloop(pad)), component(epilogue())], until="generate")
    assert not errors(ctx) and "__cluster_dims__(2, 1, 1)" in ctx.glue


def test_whole_clusters_decided_on_sampled_shapes():
    grid = (parse("ceil_div(M, TILE_M)"), parse("ceil_div(N, TILE_N)"))
    assert not_whole_clusters(grid, 2, {"TILE_M": 32, "TILE_N": 128}) == ({"M": 1, "N": 1}, 1)
    padded = (parse("ceil_div(ceil_div(M, TILE_M), 2) * 2"), parse("ceil_div(N, TILE_N)"))
    assert not_whole_clusters(padded, 2, {"TILE_M": 32, "TILE_N": 128}) is None
    assert not_whole_clusters(padded, 4, {"TILE_M": 32, "TILE_N": 128}) is not None
    # a count the link fixes is checked exactly: a specialized value, the geometry
    assert not_whole_clusters((parse("ceil_div(M, TILE_M)"),), 2, {"TILE_M": 32, "M": 64}) is None
    assert not_whole_clusters((parse("ceil_div(M, TILE_M)"),), 2, {"TILE_M": 32, "M": 65}) == ({}, 3)
    # a distributed grid is sampled on the worlds of the event analysis, every rank of each
    assert not_whole_clusters((parse("WORLD"),), 2, {}) == ({"WORLD": 1}, 1)
    assert not_whole_clusters((parse("2 * WORLD + RANK - RANK"),), 2, {}) is None
    assert tile_count((parse("M"), parse("N // K")), {"M": 3, "N": 8, "K": 0}) is None  # a zero divisor: not a count
    assert tile_count((parse("M"), parse("N")), {"M": 3, "N": -1}) is None
    assert tile_count((), {}) == 1


# --- walks that cannot keep step (PL203) -------------------------------------------------------------------

def test_blocked_tiles_are_refused():
    """A CTA's chunk of ceil(T / G) consecutive tiles can end inside a cluster (6 tiles on 4 CTAs: 2, 2, 2, 0):
    PL203 at the kernel's distribution, even where the count is whole clusters."""
    ctx = passes(rowsum(clustered(padded=True, distribution="blocked"), walk(padded=True, distribution="blocked")))
    assert errors(ctx) == [("PL203", "tile_load.json", "/geometry/tile_sequence/distribution", None)]
    assert ctx.sink.errors[0].related[0].pointer == "/cluster" and "grid_stride" in ctx.sink.errors[0].hint
    assert step_breaker(ctx.resolved) == "blocked"
    # blocked tiles of a kernel that declares no cluster are as before
    assert not passes(rowsum(walk(distribution="blocked"), walk(distribution="blocked"))).sink.errors
    # a role-structured kernel's role groups each walk the kernel's tiles the same way
    ml = component(mainloop(clustered(padded=True, distribution="blocked")))
    ctx = run_passes(options=LinkOptions(arch="sm_90a", pipeline=PipelineSpec(name="k"), cache=False),
                     components=[ml, component(epilogue())], until="clusters")
    assert errors(ctx) == [("PL203", "ml.json", "/geometry/tile_sequence/distribution", None)]


def mlp(edit=None, **spec_edits):
    """The Llama decode MLP calls (tests/test_calls.py), gate_up's component declaring a cluster of 2 and its grid
    padded to whole clusters."""
    def clustered_swiglu(name, raw):
        if name == "gemv_swiglu":
            raw["cluster"] = {"dims": [2]}
            raw["geometry"]["tile_sequence"]["grid"] = ["ceil_div(ceil_div(I, SWIGLU_COLS), 2) * 2"]
        if edit:
            edit(name, raw)
    return run_calls(MLP_LAYERS, decode_components(edit=clustered_swiglu), **spec_edits)


def test_dynamic_dispatch_is_refused():
    ctx = mlp(dispatch="dynamic", until="resolve")
    assert not ctx.sink.errors and step_breaker(ctx.resolved) == "dynamic"
    ctx = mlp(dispatch="dynamic", until="clusters")
    assert errors(ctx) == [("PL203", "p.json", "/dispatch", None)]  # the pipeline's field
    assert ctx.sink.errors[0].related[0].pointer == "/cluster" and '"dispatch": "static"' in ctx.sink.errors[0].hint
    assert not mlp(until="clusters").sink.errors  # static dispatch keeps step


def test_a_clustered_chain_is_refused():
    """block_scan waits on its own tasks (task i on task i - 1): with a cluster, task i - 1 may run on the same
    cluster in the same round, at the cluster's barrier waiting for task i."""
    def scan(padded):
        def edit(c):
            c["cluster"] = {"dims": [2]}
            if padded:
                c["geometry"]["tile_sequence"]["grid"] = ["ceil_div(ceil_div(N, TILE), 2) * 2"]
        return edit
    ctx = passes([shipped_component("block_scan", scan(True))], schedule="persistent", until="clusters")
    assert errors(ctx) == [("PL203", "block_scan.json", "/events/waits/0", None)], [d.render() for d in ctx.sink.items]
    assert "'carried'" in ctx.sink.errors[0].message
    # unpadded too: both problems at once
    ctx = passes([shipped_component("block_scan", scan(False))], schedule="persistent", until="clusters")
    assert sorted(e[0] for e in errors(ctx)) == ["PL202", "PL203"]
    assert not passes([shipped_component("block_scan")], schedule="persistent", until="clusters").sink.errors


# --- persistent calls ----------------------------------------------------------------------------------

def test_calls_that_do_not_declare_the_cluster_are_unconstrained():
    """Only gate_up's component declares the cluster: its grid must be whole clusters, the norms' (B tasks) and
    the other GEMVs' need not be; the manifest asks the launcher to check gate_up's count alone."""
    ctx = mlp(until="generate")
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    from pipelink.linker.emit import manifest
    m = manifest(ctx.resolved, ctx.allocation, "sm_90", b"")
    assert m.cluster == (2, 1, 1) and m.cluster_tiles == {"gate_up": "(ceil_div(ceil_div(I, 8), 2) * 2)"}

    def unpadded(name, raw):
        if name == "gemv_swiglu":
            raw["geometry"]["tile_sequence"]["grid"] = ["ceil_div(I, SWIGLU_COLS)"]
    ctx = mlp(unpadded, until="clusters")
    assert [e[:3] for e in errors(ctx)] == [("PL202", "gemv_swiglu.json", "/geometry/tile_sequence/grid")]
    d = ctx.sink.errors[0]
    assert "'gate_up' declares a cluster of 2 CTAs" in d.message and "I=1" in d.message
    assert [r.pointer for r in d.related] == ["/cluster", "/calls/1"]  # the call in the pipeline


def test_deal_continue_moves_on_in_whole_clusters():
    """deal "continue" starts each call on the CTA after the previous call's last task; in a clustered kernel on
    the next whole cluster, so the CTAs of a cluster take consecutive tasks of one round (a call of 3 tasks on
    clusters of 2 would start the next at CTA 3, the second CTA of a cluster). NVRTC compiles the glue."""
    ctx = mlp(deal="continue", until="compile")
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    glue, n = ctx.glue, len(ctx.resolved.events.order)
    assert deal_step(ctx.resolved) == 2 and ctx.glue_ltoir
    for k in range(n):
        first = glue.index(f"const int pl_first_{k} = (int)((blockIdx.x + gridDim.x - pl_deal) % gridDim.x);")
        moved = glue.index(f"pl_deal = (pl_deal + ((unsigned)c{k}_tasks + 1u) / 2u * 2u) % gridDim.x;")
        assert first < moved
    assert "pl_deal = (pl_deal + (unsigned)c" not in glue
    # without a cluster the deal moves on task by task, as before
    plain = run_calls(MLP_LAYERS, until="generate", deal="continue")
    assert deal_step(plain.resolved) == 1 and "pl_deal = (pl_deal + (unsigned)c0_tasks) % gridDim.x;" in plain.glue
    assert "/ 2u * 2u" not in plain.glue


def c_to_python(text: str) -> str:
    """The glue's unsigned C arithmetic on small non-negative values as Python: casts and suffixes dropped, `/`
    as `//`."""
    text = re.sub(r"\((unsigned|int)\)", "", text)
    return re.sub(r"\b(\d+)u\b", r"\1", text).replace("/", "//")


@functools.cache
def glue_deal(n: int):
    """What the glue of a kernel in clusters of n CTAs (gate_up's component declaring them) says, for call 0, of
    a CTA's first task and of where the deal moves on: Python functions of (blockIdx.x, gridDim.x, pl_deal) and
    of (pl_deal, the call's tasks, gridDim.x), read from the generated text."""
    def clustered_swiglu(name, raw):
        if name == "gemv_swiglu" and n > 1:
            raw["cluster"] = {"dims": [n]}
            raw["geometry"]["tile_sequence"]["grid"] = [f"ceil_div(ceil_div(I, SWIGLU_COLS), {n}) * {n}"]
    ctx = run_calls(MLP_LAYERS, decode_components(edit=clustered_swiglu), deal="continue")
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    first = re.search(r"const int pl_first_0 = (.*);", ctx.glue).group(1)
    moved = re.search(r"pl_deal = (.*) % gridDim.x;", ctx.glue).group(1)
    first_of = eval(f"lambda blockIdx_x, gridDim_x, pl_deal: {c_to_python(first).replace('.', '_')}")
    move = eval(f"lambda pl_deal, c0_tasks, gridDim_x: ({c_to_python(moved)}) % gridDim_x")
    return first_of, move


def dealt(counts, grid, n):
    """Each call's tasks on each CTA, as the glue of a kernel in clusters of n CTAs deals them with deal
    "continue" (n = 1: a kernel without a cluster, as every kernel was dealt before)."""
    first_of, move = glue_deal(n)
    deal, out = 0, []
    for count in counts:
        out.append([list(range(first_of(b, grid, deal), count, grid)) for b in range(grid)])
        deal = move(deal, count, grid)
    return out


def in_step(per_cta, grid, n) -> bool:
    """Every cluster's CTAs make the same trips, the k-th of them on tasks t with t % n the CTA's rank in the
    cluster (blockIdx.x % n) and t - rank the same: one round of neighbouring tasks."""
    for b0 in range(0, grid, n):
        ctas = per_cta[b0:b0 + n]
        if len({len(t) for t in ctas}) != 1:
            return False
        if any([t[k] for t in ctas] != list(range(ctas[0][k], ctas[0][k] + n)) or ctas[0][k] % n
               for k in range(len(ctas[0]))):
            return False
    return True


@pytest.mark.parametrize("calls", [[(3, False), (6, True)], [(1, False), (2, True), (7, False), (4, True)],
                                   [(6, True), (6, True)], [(5, False), (5, False), (8, True)]])
@pytest.mark.parametrize("grid,n", [(4, 2), (8, 4), (6, 2), (8, 2)])
def test_the_dealt_walk_keeps_every_clustered_call_in_step(calls, grid, n):
    """The glue's static walk with deal "continue", run in Python from the glue's own arithmetic: the calls of a
    component that declares the cluster have whole clusters of tasks (PL202), the others any count. Dealt on in
    whole clusters every clustered call is in step; restarting at CTA 0 too; dealt on task by task, as a kernel
    without a cluster is (and every kernel was), not always."""
    counts = [-(-c // n) * n if clustered_ else c for c, clustered_ in calls]
    for per_cta, (_, clustered_) in zip(dealt(counts, grid, n), calls):
        assert not clustered_ or in_step(per_cta, grid, n), (counts, grid, n, per_cta)
    restart = [[list(range(b, c, grid)) for b in range(grid)] for c in counts]
    assert all(in_step(per_cta, grid, n) for per_cta, (_, cl) in zip(restart, calls) if cl)
    if (calls, grid, n) == ([(3, False), (6, True)], 4, 2):  # 6 tasks from CTA 3: CTA 0 walks 1 and 5, CTA 1 walks 2
        assert dealt(counts, grid, 1)[1][:2] == [[1, 5], [2]] and not in_step(dealt(counts, grid, 1)[1], grid, n)


# --- the component's own code: built as the kernel compiles it ----------------------------------------------

def test_the_probe_compiles_a_clustered_component_in_clusters(tmp_path):
    """`pipelink build` probes the object alone in a kernel of its own; without the contract's __cluster_dims__ the
    compiler lowers barrier.cluster.wait with a block barrier after it (BAR.SYNC 0), which read as a __syncthreads
    the contract does not declare (PL143): a component that syncs its cluster could not be built."""
    import pipelink
    from pipelink.authoring.conformance import probe_plan
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.core.loader import load_contract_bytes
    from pipelink.core.model import Source
    contract = load_contract_bytes(json.dumps(CLUSTER_SWAP).encode(), Source("cluster_swap.json"), DiagnosticSink())
    assert "__launch_bounds__(128, 1) __cluster_dims__(2, 1, 1) " in probe_plan(contract).source
    plain = load_contract_bytes(json.dumps(TICK).encode(), Source("tick.json"), DiagnosticSink())
    assert "__cluster_dims__" not in probe_plan(plain).source
    (tmp_path / "cluster_swap.cu").write_text(CLUSTER_SWAP_SRC)
    obj = pipelink.build(tmp_path / "cluster_swap.cu", json.dumps(CLUSTER_SWAP).encode(), tmp_path / "cluster_swap.o")
    linked = pipelink.link([obj], pipeline={"pipeline": 1, "name": "swap_seq"})
    assert linked.ok and linked.manifest.cluster_tiles == {"cluster_swap": "(ceil_div(T, 2) * 2)"}
    assert linked.manifest.resources.named_barriers in (None, 1)  # the glue's __syncthreads only


# --- the cluster barrier meets every thread of the block (PL206) ---------------------------------------------

# cluster_swap's cluster barrier written with cooperative groups, and a component that declares the cluster and
# meets it through distributed shared memory alone (a store to its peer's shared memory, then its own flag),
# without the cluster barrier.
CG_SYNC_SRC = r"""
#include "cg_sync.pipelink.h"
#include <cooperative_groups.h>
using namespace pl::cg_sync;

extern "C" __device__ void cg_sync(pl::Tile tile, int* __restrict__ out, int T) {
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  cluster.sync();
  if (thread_rank() == 0 && tile.linear < T) out[tile.linear] = (int)cluster.block_rank();
}
"""

CLUSTER_PUT_SRC = r"""
#include "cluster_put.pipelink.h"
using namespace pl::cluster_put;

extern "C" __device__ void cluster_put(pl::Tile tile, int* __restrict__ out, int T) {
  unsigned rank, theirs, box = (unsigned)__cvta_generic_to_shared(smem_box<unsigned>());
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  if (thread_rank() == 0) {
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(theirs) : "r"(box), "r"(rank ^ 1u));
    asm volatile("st.release.cluster.shared::cluster.u32 [%0], %1;" :: "r"(theirs), "r"((unsigned)tile.linear + 1u)
                 : "memory");
    if (tile.linear < T) out[tile.linear] = (int)rank;
  }
}
"""


def _contract(name, warps=4, cluster=True, smem=True):
    c = json.loads(json.dumps(CLUSTER_SWAP))
    c.update(name=name, threads={"warps": warps})
    c["entry"]["symbol"] = name
    if not cluster:
        c.pop("cluster")
    if not smem:
        c.pop("smem")
    return c


@pytest.fixture(scope="module")
def cluster_objects(tmp_path_factory):
    """Objects built with the pinned toolchain (no GPU): name -> path."""
    import pipelink
    tmp = tmp_path_factory.mktemp("clusterbar")
    wide_src = TICK_SRC.replace("tick", "wide_tick")
    wide = dict(json.loads(json.dumps(TICK)), name="wide_tick", threads={"warps": 8})
    wide["entry"]["symbol"] = "wide_tick"
    # a component that walks cluster_swap's tiles (a warp-specialized kernel's components walk the same)
    peer_src = TICK_SRC.replace("tick", "peer").replace("int U", "int T")
    peer = dict(json.loads(json.dumps(TICK)), name="peer", geometry=CLUSTER_SWAP["geometry"])
    peer["entry"] = {"symbol": "peer", "params": [{"name": "marks", "dtype": "i32", "pointer": True},
                                                  {"name": "T", "dtype": "i32"}]}
    out = {}
    for name, src, contract in (("cluster_swap", CLUSTER_SWAP_SRC, CLUSTER_SWAP), ("tick", TICK_SRC, TICK),
                                ("wide_tick", wide_src, wide), ("peer", peer_src, peer),
                                ("cg_sync", CG_SYNC_SRC, _contract("cg_sync", smem=False)),
                                ("cluster_put", CLUSTER_PUT_SRC, _contract("cluster_put"))):
        (tmp / f"{name}.cu").write_text(src)
        out[name] = pipelink.build(tmp / f"{name}.cu", json.dumps(contract).encode(), tmp / f"{name}.o")
    return out


def read(objects, *names):
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.linker.collect import read_components
    sink = DiagnosticSink()
    comps = read_components([str(objects[n]) for n in names], sink)
    assert not sink.errors, [d.render() for d in sink.items]
    return comps


def where(location):
    return Path(location.file or "").name, location.pointer


def calls(*names, **spec):
    return dict(dict(dispatch="static", calls=[{"name": n, "component": n} for n in names]), **spec)


def test_the_probe_reads_the_cluster_barrier_from_the_sass(cluster_objects):
    """barrier.cluster.arrive / wait and cooperative groups' cluster sync are UCGABAR_ARV and UCGABAR_WAIT in the
    SASS; the error barrier before a cluster-scope release (CGAERRBAR) is not the barrier. The build's record says
    it, and the link reads it from there."""
    from pipelink.authoring.conformance import recorded_usage, sass_cluster_barrier
    assert sass_cluster_barrier("        /*0100*/                   UCGABAR_ARV ;\n")
    assert sass_cluster_barrier("        /*0110*/                   UCGABAR_WAIT ;\n")
    assert not sass_cluster_barrier("        /*00f0*/                   CGAERRBAR ;\n        BAR.SYNC 0x0 ;\n")
    comps = read(cluster_objects, "cluster_swap", "cg_sync", "cluster_put", "tick", "peer")
    found = {c.name: recorded_usage(c.contract, c.obj, "sm_90")[0].cluster_barrier for c in comps}
    assert found == {"cluster_swap": True, "cg_sync": True, "cluster_put": False, "tick": False, "peer": False}
    assert all(json.loads(c.obj.embedded_usage)["usage"] == 3 for c in comps)


def test_a_cluster_barrier_on_a_block_of_its_warps_alone_links(cluster_objects):
    """Alone (sequential), and in a persistent kernel beside another component of as many warps: every thread of
    the block runs the component's code, so every one arrives."""
    for name in ("cluster_swap", "cg_sync"):
        ctx = passes(read(cluster_objects, name), until="clusters")
        assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
        assert ctx.usage[name].cluster_barrier
    ctx = passes(read(cluster_objects, "tick", "cluster_swap"), until="allocate", **calls("tick", "cluster_swap"))
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    assert ctx.allocation.block_warps == 4


def test_a_cluster_barrier_beside_a_wider_component_is_refused(cluster_objects, capsys, tmp_path):
    """wide_tick (8 warps) makes the block 8 warps; cluster_swap's entry runs on the first 4, the others wait at
    the block barrier after it and never arrive at the cluster's: PL206 at cluster_swap's threads, the object and
    what widens the block beside it. `pipelink check --pipeline` says the same."""
    for name in ("cluster_swap", "cg_sync"):
        ctx = passes(read(cluster_objects, "wide_tick", name), until="clusters", **calls("wide_tick", name))
        assert errors(ctx) == [("PL206", f"{name}.o[.pipelink.contract]", "/threads", None)], \
            [d.render() for d in ctx.sink.items]
        d = ctx.sink.errors[0]
        assert f"'{name}' executes the cluster barrier" in d.message
        assert "4 warps past its 4 (the block has 8 compute warps for 'wide_tick')" in d.message
        assert [where(x) for x in d.related] == [(f"{name}.o", None), ("<PipelineSpec>", "/calls/1"),
                                                 ("wide_tick.o[.pipelink.contract]", "/threads/warps")]
        assert "mbarriers in shared or distributed shared memory" in d.effective_hint
        assert "own arrival count (128 threads a CTA)" in d.effective_hint
    pipeline = tmp_path / "p.json"  # check's probe finds the same, without the build's record
    pipeline.write_text(json.dumps({"pipeline": 1, "name": "k", **calls("wide_tick", "cluster_swap")}))
    code, _, err = cli(capsys, "check", cluster_objects["wide_tick"], cluster_objects["cluster_swap"], "--pipeline",
                       pipeline)
    assert code == 1 and "error[PL206]: 'cluster_swap' executes the cluster barrier" in err, err
    ctx = passes(read(cluster_objects, "wide_tick", "cluster_swap"), until="clusters", extra=("probe",),
                 **calls("wide_tick", "cluster_swap"))
    assert [e[0] for e in errors(ctx)] == ["PL206"] and ctx.usage["cluster_swap"].cluster_barrier


def test_a_cluster_barrier_in_a_warp_specialized_kernel_is_refused(cluster_objects):
    """Each component runs on its own warps at once: peer's never run cluster_swap's code."""
    ctx = passes(read(cluster_objects, "cluster_swap", "peer"), until="clusters", schedule="warp_specialized")
    assert errors(ctx) == [("PL206", "cluster_swap.o[.pipelink.contract]", "/threads", None)], \
        [d.render() for d in ctx.sink.items]
    d = ctx.sink.errors[0]
    assert "the warps of 'peer' (4 warps), which run their own tile loop at the same time" in d.message
    assert [where(x) for x in d.related] == [("cluster_swap.o", None), ("peer.o[.pipelink.contract]", "/threads"),
                                             ("", "/schedule")]  # the pipeline's field


def test_a_clustered_component_without_the_cluster_barrier_links_anywhere(cluster_objects):
    """cluster_put declares the cluster and meets its peer through distributed shared memory only: beside a wider
    component, or in a warp-specialized kernel, nothing waits for warps that never arrive."""
    ctx = passes(read(cluster_objects, "wide_tick", "cluster_put"), until="clusters", **calls("wide_tick", "cluster_put"))
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    assert not ctx.usage["cluster_put"].cluster_barrier
    ctx = passes(read(cluster_objects, "cluster_put", "peer"), until="clusters", schedule="warp_specialized")
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]


def test_a_cluster_barrier_beside_a_loader_warp_is_refused(cluster_objects):
    """A load entry puts a loader warp after the compute warps; it walks the tasks ahead on its own."""
    from hopper_factory import component as bare
    loader = bare({"pipelink_contract": 1, "name": "ld", "version": "1.0.0",
                   "entry": {"symbol": "ld_entry", "load": "ld_load",
                             "params": [{"name": "marks", "dtype": "i32", "pointer": True}, {"name": "T", "dtype": "i32"}]},
                   "targets": {"archs": ["sm_90"]}, "threads": {"warps": 4},
                   "loader": {"slot_bytes": 1024, "slots": 1},
                   "geometry": {"tile_sequence": {"grid": ["T"], "order": "row_major", "distribution": "grid_stride"}}})
    comps = [loader] + read(cluster_objects, "cluster_swap")
    ctx = passes(comps, until="clusters", **calls("ld", "cluster_swap"))
    assert errors(ctx) == [("PL206", "cluster_swap.o[.pipelink.contract]", "/threads", None)], \
        [d.render() for d in ctx.sink.items]
    d = ctx.sink.errors[0]
    assert "the loader warp, which walks the CTA's tasks ahead on its own (load entries of 'ld')" in d.message
    assert ("ld.json", "/entry/load") in [where(x) for x in d.related]


def test_a_cluster_barrier_in_a_role_structured_kernel():
    """The mainloop's roles are every role group (the epilogue joins its consumer's): its cluster barrier meets
    every warp. The epilogue's runs on the consumer group only, and the producer's warps never arrive."""
    from pipelink.authoring.conformance import Usage
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.linker.clusters import check_cluster_barriers

    def pad(c):
        c["cluster"] = {"dims": [2]}
        c["geometry"]["tile_sequence"]["grid"][0] = PADDED
    spec = PipelineSpec(name="k")
    ctx = run_passes(options=LinkOptions(arch="sm_90a", pipeline=spec, cache=False),
                     components=[component(mainloop(pad)), component(epilogue())], until="clusters")
    assert not ctx.sink.errors

    def refused(name):
        sink = DiagnosticSink()
        usage = Usage(16, 0, 0, frozenset(), False, (), cluster_barrier=True)
        check_cluster_barriers(ctx.resolved, {name: usage}, spec, sink)
        return sink.errors
    assert refused("ml") == []
    (d,) = refused("epi")
    assert d.code == "PL206" and where(d.location) == ("epi.json", "/threads")
    assert "the warps of role group ml.producer (4 warps)" in d.message
    assert [where(x) for x in d.related] == [("ml.json", "/threads/roles/0")]


# A role-structured mainloop (hopper_factory's, clustered) that syncs its cluster once, in its per-CTA init entry run
# by every thread of the block before the roles split (CUTLASS's cluster sync after its mbarriers' init), or in its
# consumer role's entry; beside an epilogue with a role group of its own (no fragment joins it to the consumer's).
CLUSTER_SYNC = 'asm volatile("barrier.cluster.arrive.release.aligned;\\n\\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");'
ROLE_ML_SRC = r"""
#include "ml.pipelink.h"
using namespace pl::ml;

extern "C" __device__ void ml_init(const pl::TensorMap* a) {
  if (threadIdx.x == 0) smem_bars()[0] = 0;
  asm volatile("" :: "l"(a) : "memory");
  INIT_SYNC
}
extern "C" __device__ void ml_load(pl::Tile tile, const pl::TensorMap* a, int K) { smem_tiles()[tile.coord[0]] = K; }
extern "C" __device__ void ml_mma(pl::Tile tile, float* __restrict__ acc, int K) {
  MMA_SYNC
  for (int i = 0; i < port_acc_elements; ++i) acc[i] = (float)(K + i + (int)tile.linear);
}
"""


def _own_group(c):
    """The epilogue without the fragment: its role is a group of its own, beside the mainloop's."""
    c["ports"] = []
    c["entries"][0]["params"] = ["out", "M", "N"]


@pytest.fixture(scope="module")
def role_objects(tmp_path_factory):
    """The mainloop built with the pinned toolchain, its cluster barrier in `init` or in `mma`: where -> path."""
    import pipelink

    def pad(c):
        c["cluster"] = {"dims": [2]}
        c["geometry"]["tile_sequence"]["grid"][0] = PADDED
    out = {}
    for where_, init, mma in (("init", CLUSTER_SYNC, ""), ("mma", "", CLUSTER_SYNC)):
        tmp = tmp_path_factory.mktemp(f"role_{where_}")
        (tmp / "ml.cu").write_text(ROLE_ML_SRC.replace("INIT_SYNC", init).replace("MMA_SYNC", mma))
        out[where_] = pipelink.build(tmp / "ml.cu", json.dumps(mainloop(pad)).encode(), tmp / "ml.o")
    return out


def test_the_probe_tells_which_entry_runs_the_cluster_barrier(role_objects):
    """The entries are inlined into one probe kernel; a second probe calls each in a kernel of its own, and the
    build's record says which entries (contract order: init, load, mma) run the barrier."""
    from pipelink.authoring.conformance import entry_kernel, probe_plan, recorded_usage
    found = {}
    for where_, path in role_objects.items():
        (ml,) = read({where_: path}, where_)
        usage, _ = recorded_usage(ml.contract, ml.obj, "sm_90a")
        assert usage.cluster_barrier and json.loads(ml.obj.embedded_usage)["usage"] == 3
        found[where_] = usage.cluster_barrier_entries
        source = probe_plan(ml.contract, per_entry=True).source
        assert all(f" {entry_kernel(i)}(" in source for i in range(3)) and "__pipelink_probe(" not in source
    assert found == {"init": (0,), "mma": (2,)}


def test_a_cluster_barrier_in_the_per_cta_entry_of_every_thread_links_beside_other_roles(role_objects):
    """Every thread of the block runs the init entries before the roles split: the epilogue's warps arrive too."""
    comps = read(role_objects, "init") + [component(epilogue(_own_group))]
    ctx = passes(comps, until="clusters", arch="sm_90a")
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    assert [g.name for g in ctx.resolved.roles.groups] == ["ml.producer", "ml.consumer", "epi.epilogue"]
    assert ctx.usage["ml"].cluster_barrier_entries == (0,)


def test_a_cluster_barrier_in_a_role_entry_is_refused_at_that_entry(role_objects):
    """The consumer's entry runs on its warps; the epilogue's group never runs the mainloop's code."""
    comps = read(role_objects, "mma") + [component(epilogue(_own_group))]
    ctx = passes(comps, until="clusters", arch="sm_90a")
    assert errors(ctx) == [("PL206", "ml.o[.pipelink.contract]", "/entries/2", None)], \
        [d.render() for d in ctx.sink.items]
    d = ctx.sink.errors[0]
    assert "'ml' executes the cluster barrier in its entry 'mma'" in d.message and "role 'consumer'" in d.message
    assert "the warps of role group epi.epilogue (8 warps)" in d.message
    assert 'a per-CTA entry of role "*"' in d.effective_hint
    ctx = passes(read(role_objects, "mma"), until="clusters", arch="sm_90a")  # alone: its own roles are every group
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
