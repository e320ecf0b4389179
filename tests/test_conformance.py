"""Conformance: a component's code against its own contract. The decisions are pure (a contract and
a Usage in, diagnostics out); one real component, built with `pipelink build`, breaks every rule."""
import json

import pytest

from pipelink.api import run_checks
from pipelink.cli import main
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.loader import load_contract_bytes
from pipelink.core.model import ParamRange, Source
from pipelink.authoring.conformance import (Usage, compare, probe_plan, probe_value, sass_barriers,
                                         spills_in_streaming_loops)

BAD_CONTRACT = {
    "pipelink_contract": 1, "name": "bad", "version": "1.0.0",
    "entry": {"symbol": "bad", "params": [{"name": "x", "dtype": "f32", "pointer": True},
                                          {"name": "n", "dtype": "i32"}]},
    "targets": {"archs": ["sm_90"]}, "threads": {"warps": 4}, "registers": {"max_per_thread": 16},
}

# Everything the contract does not declare, in one component (one nvcc build).
BAD_SOURCE = """#include "bad.pipelink.h"
using namespace pl::bad;
__device__ __noinline__ float twice(float v) { return 2.0f * v; }
extern "C" __device__ void bad(pl::Tile tile, float* x, int n) {
  __shared__ float own[128];     // the linker cannot see or place these bytes
  float local[256];              // indexed at run time: local memory
  for (int i = 0; i < n; ++i) local[i & 255] = x[i];
  own[thread_rank() % 128] = local[x[0] > 0 ? n & 255 : 0];
  __syncthreads();               // barrier 0, undeclared
  pl::barrier_sync(5, THREADS);  // id 5, declared nowhere
  x[thread_rank()] = twice(own[(thread_rank() + 1) % 128]);
}
"""


def contract(**changes):
    raw = dict(json.loads(json.dumps(BAD_CONTRACT)), **changes)
    sink = DiagnosticSink()
    c = load_contract_bytes(json.dumps(raw).encode(), Source("bad.json"), sink)
    assert c is not None, [d.render() for d in sink.items]
    return c


def usage(**changes):
    base = dict(registers=16, local_bytes=0, static_smem_bytes=0, barrier_ids=frozenset(), computed_barrier_ids=False,
                callees=())
    return Usage(**dict(base, **changes))


def diagnose(c, u, assigned=None):
    sink = DiagnosticSink()
    compare(c, "bad.o", u, assigned or {}, sink)
    return [(d.code, d.severity) for d in sink.items], sink.items


# --- pure decisions ------------------------------------------------------------------------------

def test_a_conforming_component_says_nothing():
    c = contract(barriers={"hardcoded_ids": [3], "named": [{"name": "ready", "threads": 128}]},
                 threads={"warps": 4, "uses_syncthreads": True})
    assert diagnose(c, usage(barrier_ids=frozenset({0, 3, 15})), {"ready": 15})[0] == []


def test_own_shared_memory_is_an_error():
    codes, items = diagnose(contract(), usage(static_smem_bytes=512))
    assert codes == [("PL140", "error")]
    d = items[0]
    assert "'bad' (bad.o) declares 512 bytes of __shared__ memory of its own" in d.message and "bad.json" in d.message
    assert d.location.component == "bad" and d.location.pointer == "/smem" and d.related[0].file == "bad.o"


def test_registers_over_the_contract_are_a_warning():
    assert diagnose(contract(), usage(registers=40))[0] == [("PL141", "warning")]
    assert diagnose(contract(registers={}), usage(registers=200))[0] == []  # no limit declared


def test_undeclared_barrier_id_is_an_error():
    c = contract(barriers={"hardcoded_ids": [3], "named": [{"name": "ready", "threads": 128}]})
    codes, items = diagnose(c, usage(barrier_ids=frozenset({3, 5, 15})), {"ready": 15})
    assert codes == [("PL142", "error")] and "uses named barrier id 5," in items[0].message


def test_barrier_id_computed_at_run_time_is_a_warning():
    assert diagnose(contract(), usage(computed_barrier_ids=True))[0] == [("PL142", "warning")]


def test_syncthreads_needs_the_contract_to_say_so():
    codes, items = diagnose(contract(), usage(barrier_ids=frozenset({0})))
    assert codes == [("PL143", "error")] and items[0].location.pointer == "/threads"
    assert diagnose(contract(threads={"warps": 4, "uses_syncthreads": True}), usage(barrier_ids=frozenset({0})))[0] == []


def test_local_memory_and_calls_are_warnings():
    assert diagnose(contract(), usage(local_bytes=1024))[0] == [("PL144", "warning")]
    codes, items = diagnose(contract(), usage(callees=("_Z5twicef",)))
    assert codes == [("PL145", "warning")] and "_Z5twicef" in items[0].message


def test_sass_barriers():
    sass = """
        /*00e0*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*00f0*/                   BAR.SYNC.DEFER_BLOCKING 0x3, 0x80 ;
        /*0100*/                   BAR.ARV 0x5, 0x40 ;
        /*0170*/              @P1  BAR.RED.POPC.DEFER_BLOCKING 0x7, 0x80, P0 ;
        /*0240*/                   BAR.RED.AND.DEFER_BLOCKING 0x0, P0 ;
        /*0250*/                   WARPSYNC.ALL ;
    """
    assert sass_barriers(sass) == (frozenset({0, 3, 5, 7}), False)
    assert sass_barriers("BAR.SYNC.DEFER_BLOCKING R0, 0x80 ;") == (frozenset(), True)


SASS_LOOPS = """
.L_x_0:
        /*0000*/                   LDL R2, [R1+0x8] ;
.L_x_1:
        /*0010*/                   LDGSTS.E.BYPASS.128 [R4], desc[UR6][R6.64] ;
        /*0020*/                   LDL R3, [R1+0x10] ;
        /*0030*/                   HMMA.16816.F32.BF16 R8, R12, R14, R8 ;
        /*0040*/              @P0 BRA `(.L_x_1) ;
.L_x_2:
        /*0050*/                   LDG.E.64.STRONG.GPU R2, desc[UR4][R4.64] ;
        /*0060*/                   LDL R3, [R1+0x18] ;
        /*0070*/                   NANOSLEEP 0x40 ;
        /*0080*/              @P1 BRA `(.L_x_2) ;
.L_x_3:
        /*0090*/                   LDG.E.128 R8, desc[UR4][R4.64] ;
        /*00a0*/                   FFMA R2, R8, R9, R2 ;
        /*00b0*/              @P2 BRA `(.L_x_3) ;
        /*00c0*/              @P3 BRA `(.L_x_0) ;
"""


def test_spills_in_streaming_loops():
    """Only the innermost loop that streams and loads from local memory counts: not the task loop around
    it (which reloads a spill once per task), not an event's polling (it sleeps), not a streaming loop
    without local loads."""
    assert spills_in_streaming_loops(SASS_LOOPS) == [(3, 7, 1)]  # lines of .L_x_1 and its branch back
    assert spills_in_streaming_loops(SASS_LOOPS.replace("        /*0020*/                   LDL R3, [R1+0x10] ;\n", "")) == []
    assert spills_in_streaming_loops("") == []


def test_probe_plan_gives_named_barriers_the_highest_free_ids():
    c = contract(barriers={"hardcoded_ids": [15, 1], "named": [{"name": "a", "threads": 128},
                                                                {"name": "b", "threads": 64}]},
                 geometry={"consumes": {"T": {"min": 5, "multiple_of": 4}}})
    plan = probe_plan(c)
    assert plan.barrier_ids == {"a": 14, "b": 13}
    assert "pl_bad__geom__T = 8;" in plan.source and "bad(tile, x, n);" in plan.source


def test_the_probe_hands_a_carry_from_the_prefetch_to_the_entry():
    # entry.carry: the entry takes the words its prefetch filled, as the glue calls them; a probe calling the entry
    # with the parameters alone does not compile (PL074 on a correct component)
    c = contract(entry={"symbol": "bad", "invocation": "per_tile", "prefetch": "bad_ahead", "carry": 2,
                        "params": BAD_CONTRACT["entry"]["params"]})
    src = probe_plan(c).source
    body = src[src.index("pl_out[0]"):]
    decl, ahead, entry = (body.index("unsigned pl_carry[2];"), body.index("bad_ahead(tile, x, n, pl_carry);"),
                          body.index("bad(tile, x, n, pl_carry);"))
    assert decl < ahead < entry


CARRY_CONTRACT = {
    "pipelink_contract": 1, "name": "ahead", "version": "1.0.0",
    "entry": {"symbol": "ahead", "invocation": "per_tile", "prefetch": "ahead_prefetch", "carry": 1,
              "params": [{"name": "x", "dtype": "f32", "pointer": True, "const": True, "shape": ["n"]},
                         {"name": "y", "dtype": "f32", "pointer": True, "shape": ["n"]},
                         {"name": "n", "dtype": "i32"}]},
    "targets": {"archs": ["sm_90"]}, "threads": {"warps": 1},
}
CARRY_SOURCE = """#include "ahead.pipelink.h"
extern "C" __device__ void ahead_prefetch(pl::Tile tile, const float* __restrict__ x, float* __restrict__ y, int n,
                                          unsigned* __restrict__ carry) {
  const int i = tile.linear * 32 + (int)threadIdx.x;
  carry[0] = i < n ? __float_as_uint(__ldg(x + i)) : 0u;  // a constant input, loaded before the task waits
}
extern "C" __device__ void ahead(pl::Tile tile, const float* __restrict__ x, float* __restrict__ y, int n,
                                 unsigned* __restrict__ carry) {
  const int i = tile.linear * 32 + (int)threadIdx.x;
  if (i < n) y[i] = 2.0f * __uint_as_float(carry[0]);
}
"""


def test_a_component_that_carries_words_passes_check(tmp_path):
    (tmp_path / "ahead.json").write_text(json.dumps(CARRY_CONTRACT))
    (tmp_path / "ahead.cu").write_text(CARRY_SOURCE)
    obj = tmp_path / "ahead.o"
    assert main(["build", str(tmp_path / "ahead.cu"), "--contract", str(tmp_path / "ahead.json"), "-o", str(obj)]) == 0
    sink = DiagnosticSink()
    run_checks([str(obj)], sink)
    assert not sink.errors, [d.render() for d in sink.items]


@pytest.mark.parametrize("rng,value", [(ParamRange(default=32, min=1), 32), (ParamRange(min=5, multiple_of=4), 8),
                                       (ParamRange(one_of=(64, 16), max=32), 16), (ParamRange(min=5, max=6,
                                                                                              multiple_of=4), None)])
def test_probe_value(rng, value):
    assert probe_value(rng) == value


# --- a real component that breaks every rule -----------------------------------------------------

@pytest.fixture(scope="module")
def bad_check(tmp_path_factory):
    """The bad component as a team building it with its own nvcc would ship it (`pipelink config --cflags`, the
    header, a sidecar contract): `pipelink build` refuses it (test below), `check` says everything that is wrong."""
    from comp_contract import build_elsewhere
    d = tmp_path_factory.mktemp("bad")
    (d / "bad.json").write_text(json.dumps(BAD_CONTRACT))
    obj = build_elsewhere(d, d / "bad.json", BAD_SOURCE)
    sink = DiagnosticSink()
    run_checks([str(obj)], sink, together=True)
    return obj, {(d.code, d.severity): d for d in sink.items}, sink


def test_build_refuses_what_check_refuses(tmp_path, capsys):
    """`pipelink build` probes the object it made: the errors `check` would give (its own __shared__, a stray
    barrier id, an undeclared __syncthreads) refuse the build, nothing written; its warnings are said too, once."""
    (tmp_path / "bad.json").write_text(json.dumps(BAD_CONTRACT))
    (tmp_path / "bad.cu").write_text(BAD_SOURCE)
    assert main(["build", str(tmp_path / "bad.cu"), "--contract", str(tmp_path / "bad.json"), "-o",
                 str(tmp_path / "bad.o")]) == 1
    err = capsys.readouterr().err
    assert all(f"error[{code}]" in err for code in ("PL140", "PL142", "PL143")), err
    assert err.count("warning[PL144]") == 1 and not (tmp_path / "bad.o").exists()


def _named(d, obj):
    return "'bad'" in d.message and str(obj) in d.message and d.location.component == "bad" and \
        d.related[0].file == str(obj)


def test_check_finds_own_shared_memory(bad_check):
    obj, found, _ = bad_check
    d = found[("PL140", "error")]
    assert _named(d, obj) and "512 bytes" in d.message


def test_check_finds_registers_over_the_contract(bad_check):
    obj, found, _ = bad_check
    assert _named(found[("PL141", "warning")], obj)


def test_check_finds_an_undeclared_barrier_id(bad_check):
    obj, found, _ = bad_check
    d = found[("PL142", "error")]
    assert _named(d, obj) and "barrier id 5," in d.message


def test_check_finds_undeclared_syncthreads(bad_check):
    obj, found, _ = bad_check
    assert _named(found[("PL143", "error")], obj)


def test_check_finds_local_memory(bad_check):
    obj, found, _ = bad_check
    assert _named(found[("PL144", "warning")], obj)


def test_check_finds_a_call_left_after_lto(bad_check):
    obj, found, _ = bad_check
    d = found[("PL145", "warning")]
    assert _named(d, obj) and "_Z5twicef" in d.message


def test_check_of_the_bad_component_exits_1(bad_check, capsys):
    obj, found, sink = bad_check
    assert len(sink.items) == 6 and int(sink.exit_code()) == 1
    assert main(["check", str(obj)]) == 1
    assert "Traceback" not in capsys.readouterr().err


def test_shipped_components_conform(shipped_objects):
    for path in shipped_objects.values():  # one at a time: not every pair of them may share a kernel
        sink = DiagnosticSink()
        run_checks([str(path)], sink, together=True)
        assert sink.items == [], [d.render() for d in sink.items]


def test_the_link_holds_each_object_to_its_builds_record(shipped_objects):
    """A `pipelink build` object carries its probe's record (.pipelink.usage): the link holds it against the contract
    without probing again. ring_dot's record saying it calls __syncthreads (as if its code did) refuses the
    warp-specialized link with PL143, where it had linked and would hang; a record made for another contract or other
    device code is not used; as built, the link passes."""
    import dataclasses

    from pipelink.core.model import Component
    from pipelink.linker.collect import read_components
    from pipelink.linker.passes import LinkOptions, run_passes
    from pipelink.core.pipeline import load_pipeline
    from pipelink.harness.shipped import REPO
    sink = DiagnosticSink()
    comps = read_components([str(shipped_objects["ring_load"]), str(shipped_objects["ring_dot"])], sink)
    spec = load_pipeline(REPO / "pipelines" / "ring_gemv.json", sink)
    dot = comps[1]
    record = json.loads(dot.obj.embedded_usage)
    assert record["contract"] == dot.contract.hash and "sm_90" in record["archs"]

    def with_record(edit):
        doc = json.loads(json.dumps(record))
        edit(doc)
        obj = dataclasses.replace(dot.obj, embedded_usage=json.dumps(doc).encode())
        ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=spec), components=[comps[0], Component(dot.contract, obj)],
                         until="conform")
        return [d.code for d in ctx.sink.errors]

    assert with_record(lambda doc: None) == []
    assert with_record(lambda doc: doc["archs"]["sm_90"].update(barrier_ids=[0])) == ["PL143"]
    assert with_record(lambda doc: doc["archs"]["sm_90"].update(static_smem_bytes=512)) == ["PL140"]
    assert with_record(lambda doc: (doc["archs"]["sm_90"].update(barrier_ids=[0]), doc.update(contract="0" * 64))) == []
    assert with_record(lambda doc: (doc["archs"]["sm_90"].update(barrier_ids=[0]), doc.update(fatbin="0" * 64))) == []
    from pipelink.authoring.conformance import recorded_usage
    nested = dataclasses.replace(dot.obj, embedded_usage=b"[" * 100000)  # forged: read as no record, no crash
    assert recorded_usage(dot.contract, nested, "sm_90") is None


def test_an_object_without_a_record_is_probed_once_for_the_link(bad_check, tmp_path, monkeypatch):
    """An object built with one's own nvcc has no record: the link probes it as check does (its __syncthreads found),
    keeps the finding in the cache folder and in the process, and does not link it alone again."""
    from pipelink.authoring import conformance
    from pipelink.linker.collect import read_components
    monkeypatch.setenv("PIPELINK_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PIPELINK_CACHE", raising=False)
    monkeypatch.setattr(conformance, "_PROBED", {})
    obj, _, _ = bad_check
    (comp,) = read_components([str(obj)], DiagnosticSink())
    assert comp.obj.embedded_usage is None
    usage, _ = conformance.usage_for_link(comp.contract, comp.obj, "sm_90")
    assert 0 in usage.barrier_ids and usage.static_smem_bytes
    assert len(list((tmp_path / "cache" / "probe").glob("*/*.json"))) == 1

    def no_probe(*_):
        raise AssertionError("probed again")
    monkeypatch.setattr(conformance, "probe", no_probe)
    assert conformance.usage_for_link(comp.contract, comp.obj, "sm_90")[0] == usage  # from the process
    monkeypatch.setattr(conformance, "_PROBED", {})
    assert conformance.usage_for_link(comp.contract, comp.obj, "sm_90")[0] == usage  # from the cache folder
