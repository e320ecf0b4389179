"""Contracts for a distributed link (one persistent kernel per rank): RANK and WORLD in expressions, and
notifications of another rank's copy of an event (`rank`). The analysis samples worlds of 1..8 ranks: every
rank's tasks send to their destination's copy, each rank's waiters are checked against what reaches its copy.
The pattern is a tensor-parallel GEMM's reduce-scatter: every rank computes a partial of every output tile and
notifies the tile's owner; the owner's reduce task waits for one notification per rank. They link
against NVSHMEM (its headers for the glue, its device library for nvJitLink); without it, PL182. No GPU."""
from __future__ import annotations

import copy

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
            {"name": "parts", "dtype": "f32", "pointer": True},
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


def test_without_nvshmem_a_distributed_link_is_a_located_diagnostic(monkeypatch):
    from pipelink import toolchain

    def missing():
        raise toolchain.ToolchainError("NVSHMEM (the nvidia-nvshmem-cu13==3.8.0 wheel) was not found")
    monkeypatch.setattr(toolchain, "nvshmem_root", missing)
    ctx = link(until="generate")
    assert codes(ctx.sink) == ["PL182"]
    d = ctx.sink.errors[0]
    assert d.location.pointer == "/geometry/tile_sequence/grid" and "nvidia-nvshmem-cu13" in d.hint
    assert ctx.glue is None


PARTIAL_SRC = r'''
#include "tp_partial.pipelink.h"
// A stand-in for the partial GEMM: rank r's partial of output tile (m, n) is r + 1, stored through NVSHMEM's
// peer pointer into the owner's slot parts[r, m, n] (parts: symmetric [WORLD, TM, TN]).
#include <nvshmem.h>
extern "C" __device__ void tp_partial(pl::Tile tile, float* __restrict__ parts, float* __restrict__ out, int TM,
                                      int TN) {
  const int world = nvshmem_n_pes(), me = nvshmem_my_pe(), rows = (TM + world - 1) / world;
  const int m = tile.coord[0], n = tile.coord[1];
  float* peer = static_cast<float*>(nvshmem_ptr(parts, m / rows));
  if (pl_component::thread_rank() == 0 && peer) peer[((long long)me * TM + m) * TN + n] = (float)(me + 1);
}
'''

REDUCE_SRC = r'''
#include "rs_reduce.pipelink.h"
// The owner's reduce: once every rank's partial of tile (m, n) is in (the wait), out[m, n] = their sum.
#include <nvshmem.h>
extern "C" __device__ void rs_reduce(pl::Tile tile, float* __restrict__ parts, float* __restrict__ out, int TM,
                                     int TN) {
  const int world = nvshmem_n_pes(), me = nvshmem_my_pe(), rows = (TM + world - 1) / world;
  const int m = me * rows + tile.coord[0], n = tile.coord[1];
  if (pl_component::thread_rank() == 0) {
    float sum = 0.0f;
    for (int r = 0; r < world; ++r) sum += __ldcv(parts + ((long long)r * TM + m) * TN + n);  // other GPUs wrote them
    out[(long long)m * TN + n] = sum;
  }
}
'''


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    import json
    import subprocess
    import sys

    from pipelink import toolchain
    d = tmp_path_factory.mktemp("distributed")
    out = {}
    for doc, src in ((PARTIAL, PARTIAL_SRC), (REDUCE, REDUCE_SRC)):
        name = doc["name"]
        (d / f"{name}.cu").write_text(src)
        (d / f"{name}.json").write_text(json.dumps(doc))
        out[name] = d / f"{name}.o"
        proc = subprocess.run([sys.executable, "-m", "pipelink.cli", "build", str(d / f"{name}.cu"), "--contract",
                               str(d / f"{name}.json"), "-I", str(toolchain.nvshmem_root() / "include"),
                               "-o", str(out[name])], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    (d / "p.json").write_text(json.dumps({"pipeline": 1, "name": "tp_rs", "components": ["tp_partial", "rs_reduce"],
                                          "schedule": "persistent"}))
    out["pipeline"] = d / "p.json"
    return out


def test_a_distributed_pipeline_links_with_nvshmem(objects):
    import pipelink
    from pipelink.formats.cubin import read_cubin
    linked = pipelink.link([str(objects["tp_partial"]), str(objects["rs_reduce"])], pipeline=str(objects["pipeline"]))
    assert linked.ok, [d.render() for d in linked.diagnostics]
    glue = linked.glue
    assert "#include <pipelink/remote.h>" in glue
    assert "const int RANK = pl::remote::rank(), WORLD = pl::remote::world();" in glue
    assert "__threadfence_system();" in glue and "pl::remote::add_one(" in glue  # the owner's copy
    assert "pl::events::wait_for<true>(" in glue                                  # read at system scope
    assert "tp_rs" in read_cubin(linked.cubin)
    assert linked.manifest.distributed and linked.manifest.to_json()["distributed"] is True
    from pipelink.runtime.manifest import Manifest
    assert Manifest.from_json(linked.manifest.to_json()).distributed  # the file keeps it


def test_the_launcher_loads_a_distributed_kernel_only_once_nvshmem_is_set_up(objects):
    import pipelink
    from pipelink.runtime import nvshmem
    from pipelink.runtime.launch import ArgumentError, Kernel
    linked = pipelink.link([str(objects["tp_partial"]), str(objects["rs_reduce"])], pipeline=str(objects["pipeline"]))
    assert not nvshmem.initialized()
    with pytest.raises(ArgumentError, match="distributed link .* set NVSHMEM up first"):  # before any driver call
        Kernel.load(linked.cubin, linked.manifest)


def test_nvshmem_host_bindings_without_a_gpu():
    from pipelink.runtime import nvshmem
    uid = nvshmem.unique_id()  # the host library loads and makes ids without a device
    assert len(uid) == nvshmem.UNIQUE_ID_BYTES and uid != nvshmem.unique_id()
    with pytest.raises(ValueError, match="rank 2 of a world of 2"):
        nvshmem.init(2, 2, uid)
    with pytest.raises(ValueError, match="unique_id"):
        nvshmem.init(1, 2)  # a world of two needs rank 0's id
    with pytest.raises(ValueError, match="128 bytes"):
        nvshmem.init(0, 2, b"short")
    with pytest.raises(nvshmem.NvshmemError, match="not set up"):
        nvshmem.malloc(64)
    with pytest.raises(ValueError, match="dtype"):
        nvshmem.symmetric((4,), "float32")
    attr = nvshmem._init_attr(3)
    assert attr.version == (2 << 16) + 144 and attr.args.cuda_device_id == 3 and attr.args.uid_args.myrank == -1


def _pinned_nvshmem_or_skip():
    from pipelink import toolchain
    try:
        toolchain.nvshmem_root()
    except toolchain.ToolchainError as exc:  # e.g. only torch's own NVSHMEM, another release
        pytest.skip(f"the pinned NVSHMEM is not on this machine ({exc.message}; PIPELINK_NVSHMEM_HOME)")


def _run_ranks(objects, nproc: int, *extra: str, expect: str = "tp_rs: ok"):
    """tests/distributed_tp_rs.py on `nproc` ranks (one process per GPU; a world of one without torchrun)."""
    import os
    import subprocess
    import sys
    from pathlib import Path
    script = str(Path(__file__).with_name("distributed_tp_rs.py"))
    args = [str(objects["tp_partial"]), str(objects["rs_reduce"]), str(objects["pipeline"]), "6", "40", *extra]
    launcher = [] if nproc == 1 else ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    env = {**os.environ, "NVSHMEM_DISABLE_NVLS": "1", "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
    proc = subprocess.run([sys.executable, *launcher, script, *args], capture_output=True, text=True, env=env,
                          timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert out.count(expect) == nproc, out[-4000:]


# One process, a world of one rank: NVSHMEM set up from the host library, the kernel's module initialized for
# its device library, the event workspace on the symmetric heap, the partial's store through nvshmem_ptr and
# its notification through nvshmemx_signal_op to its own rank, the reduce's system-scope wait; launched twice
# (the workspace's second region, the barrier after each launch). A subprocess: NVSHMEM lives once a process.
@pytest.mark.gpu
def test_a_distributed_kernel_runs_on_nvshmem_in_a_world_of_one(request):
    _pinned_nvshmem_or_skip()
    _run_ranks(request.getfixturevalue("objects"), 1)


@pytest.mark.gpu
def test_a_distributed_kernel_runs_across_every_gpu(request):
    """Every GPU of the machine a rank (torchrun): each owner's tiles hold every rank's partial."""
    torch = pytest.importorskip("torch")
    gpus = torch.cuda.device_count()
    if gpus < 2:
        pytest.skip(f"{gpus} GPU on this machine: the ranks need two or more")
    _pinned_nvshmem_or_skip()
    _run_ranks(request.getfixturevalue("objects"), gpus)


@pytest.mark.gpu
def test_a_remote_wait_that_never_completes_is_reported(request):
    """One rank never launches: in a debug build every other rank's owners give up waiting for its partials
    and the launch raises EventTimeout (which wait, how many notifications it saw) instead of hanging."""
    torch = pytest.importorskip("torch")
    gpus = torch.cuda.device_count()
    if gpus < 2:
        pytest.skip(f"{gpus} GPU on this machine: the ranks need two or more")
    _pinned_nvshmem_or_skip()
    _run_ranks(request.getfixturevalue("objects"), gpus, "--starve", "1", expect="tp_rs: starved ok")


def test_a_distributed_component_links_alone_as_a_sequential_kernel(tmp_path):
    """No events, but its grid uses WORLD: the rank and world are the glue's in every schedule."""
    import json
    import subprocess
    import sys

    import pipelink
    doc = copy.deepcopy(REDUCE)
    doc["events"] = {}
    (tmp_path / "rs_reduce.cu").write_text(REDUCE_SRC)
    (tmp_path / "rs_reduce.json").write_text(json.dumps(doc))
    from pipelink import toolchain
    proc = subprocess.run([sys.executable, "-m", "pipelink.cli", "build", str(tmp_path / "rs_reduce.cu"), "--contract",
                           str(tmp_path / "rs_reduce.json"), "-I", str(toolchain.nvshmem_root() / "include"),
                           "-o", str(tmp_path / "rs_reduce.o")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    linked = pipelink.link([str(tmp_path / "rs_reduce.o")])
    assert linked.ok, [d.render() for d in linked.diagnostics]
    assert linked.manifest.schedule == "sequential" and linked.manifest.distributed
    assert "WORLD = pl::remote::world();" in linked.glue


def _fake_nvshmem(root, version: str):
    major, minor, patch = version.split(".")
    (root / "include" / "non_abi").mkdir(parents=True)
    (root / "lib").mkdir()
    (root / "include" / "nvshmem.h").write_text("")
    (root / "lib" / "libnvshmem_device.a").write_bytes(b"!<arch>\n")
    (root / "lib" / "libnvshmem_host.so.3").write_bytes(b"")
    (root / "include" / "non_abi" / "nvshmem_version.h").write_text(
        f"#define NVSHMEM_VENDOR_MAJOR_VERSION {major}\n#define NVSHMEM_VENDOR_MINOR_VERSION {minor}\n"
        f"#define NVSHMEM_VENDOR_PATCH_VERSION {patch}\n")
    return root


def test_another_packages_nvshmem_is_reported_by_its_release_not_used(tmp_path, monkeypatch):
    # torch brings its own NVSHMEM into the same namespace: its headers are another release's
    from pipelink import toolchain
    from pipelink.core.nvshmem_home import PINNED, nvshmem_version
    from pipelink.runtime import nvshmem
    other = _fake_nvshmem(tmp_path / "other", "3.3.9")
    assert nvshmem_version(other) == "3.3.9"
    monkeypatch.setenv("PIPELINK_NVSHMEM_HOME", str(other))
    with pytest.raises(toolchain.ToolchainError, match=f"release 3.3.9, not the pinned {PINNED}"):
        toolchain.nvshmem_root()
    ctx = link(until="generate")
    assert codes(ctx.sink) == ["PL182"]
    d = ctx.sink.errors[0]
    assert "3.3.9" in d.message and "PIPELINK_NVSHMEM_HOME" in d.hint and ctx.glue is None
    monkeypatch.setattr(nvshmem, "_state", nvshmem._State())  # the host library is looked up again
    with pytest.raises(nvshmem.NvshmemError, match="release 3.3.9"):
        nvshmem.library()


def test_the_pinned_release_is_preferred_among_several(tmp_path, monkeypatch):
    import nvidia

    from pipelink.core import nvshmem_home as home
    from pipelink.core.nvshmem_home import PINNED
    other = _fake_nvshmem(tmp_path / "a" / "nvshmem", "3.3.9")
    pinned = _fake_nvshmem(tmp_path / "b" / "nvshmem", PINNED)
    monkeypatch.delenv("PIPELINK_NVSHMEM_HOME", raising=False)
    monkeypatch.setattr(nvidia, "__path__", [str(other.parent), str(pinned.parent)])
    assert home.nvshmem_home() == pinned
    monkeypatch.setattr(nvidia, "__path__", [str(other.parent)])
    assert home.nvshmem_home() == other  # found, but not the pinned one: the callers say so


def test_symmetric_buffers_describe_themselves_to_kernels_and_torch():
    from pipelink.runtime.nvshmem import Symmetric
    buf = Symmetric(0x7f0000001000, (2, 3, 64), "bf16")
    cai = buf.__cuda_array_interface__
    assert cai["shape"] == (2, 3, 64) and cai["data"] == (0x7f0000001000, False) and cai["strides"] is None
    assert cai["typestr"] == "<V2" and buf.nbytes == 2 * 3 * 64 * 2  # bf16: the launcher's 2-byte void


def test_a_distributed_kernels_extents_see_nvshmems_rank_and_world(objects, monkeypatch):
    # the launcher evaluates sizes (grids, buffer extents, tensor maps) with this process's RANK and WORLD
    import pipelink
    from pipelink.runtime import nvshmem
    from pipelink.runtime.launch import Kernel
    linked = pipelink.link([str(objects["tp_partial"]), str(objects["rs_reduce"])], pipeline=str(objects["pipeline"]))
    kernel = Kernel(linked.manifest)
    values = [None, None, 6, 40]  # parts, out, TM, TN
    assert kernel.shape_env(values) == {"TM": 6, "TN": 40}  # NVSHMEM not set up: nothing to add
    monkeypatch.setattr(nvshmem, "_state", nvshmem._State(rank=1, world=4, device=0))
    assert kernel.shape_env(values) == {"TM": 6, "TN": 40, "RANK": 1, "WORLD": 4}
    assert kernel.total_tiles(**kernel.shape_env(values)) == 6 * 40 + 2 * 40  # the partials, then rank 1's rows


def test_a_wait_in_the_entry_on_another_ranks_notifications_is_refused():
    """An in-entry wait reads its counters at GPU scope (pl::in_entry); other ranks add to these at system scope:
    PL207 at the wait, which the glue makes instead (without in_entry)."""
    in_entry = copy.deepcopy(REDUCE)
    in_entry["events"]["waits"][0]["in_entry"] = True
    ctx = link(reduce=in_entry)
    d = next(d for d in ctx.sink.errors if d.code == "PL207")
    assert "which other ranks notify" in d.message and d.location.pointer == "/events/waits/0"
