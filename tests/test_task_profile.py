"""The task profile (`profile_tasks`): the glue's records, the manifest field, the decoding and summary of
the ring (CPU), and the records of real launches (GPU)."""
import dataclasses
import struct

import pytest

from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.pipeline import load_pipeline
from pipelink.harness.shipped import shipped_pipelines
from pipelink.linker.passes import LinkOptions, link, run_passes
from pipelink.runtime import profile
from pipelink.runtime.manifest import Manifest

from contract_factory import shipped_component


def _spec(name, **kw):
    pipe = next(p for p in shipped_pipelines() if p.name == name)
    return pipe, dataclasses.replace(load_pipeline(pipe.path, DiagnosticSink()), **kw)


@pytest.mark.parametrize("dispatch", ["static", "dynamic"])
def test_glue_stamps_every_task_only_when_asked(dispatch):
    pipe, spec = _spec("splitk_gemv", dispatch=dispatch)
    comps = [shipped_component(n) for n in pipe.components]
    plain = run_passes(options=LinkOptions(arch="sm_90", pipeline=spec), components=comps, until="generate").glue
    assert "pl::profile" not in plain and "pl_profile_ring" not in plain
    spec = dataclasses.replace(spec, profile_tasks=4096)
    glue = run_passes(options=LinkOptions(arch="sm_90", pipeline=spec), components=comps, until="generate").glue
    assert 'extern "C" __device__ unsigned long long pl_profile_ring[4096 * pl::profile::kWords];' in glue
    lines = glue.splitlines()
    begins = [i for i, ln in enumerate(lines) if "pl::profile::begin(pl_profile_ring" in ln]
    assert len(begins) == len(pipe.components)  # one per component's task body
    for k, i in enumerate(begins):  # its stamps in order, the third after the task's barrier
        # the launch's tag from the module's own count (a workspace the launcher replaced starts its count
        # again), then the component's index in the manifest's list
        # and thread 0's slot claim in the glue's shared memory (claimer 0, zeroed before any task)
        assert f"pl_profile_launch_id, {k}u, t, reinterpret_cast<unsigned long long*>(pl::dynamic_smem() + " in lines[i]
        nxt = begins[k + 1] if k + 1 < len(begins) else len(lines)
        body = lines[i:nxt]
        at = {w: next(j for j, ln in enumerate(body) if f"pl::profile::stamp(pl_record, {w});" in ln) for w in (2, 3, 4)}
        done = next(j for j, ln in enumerate(body) if "__syncthreads();  // the task's writes are done" in ln)
        assert at[2] < done < at[3] < at[4]
    read = next(j for j, ln in enumerate(lines) if "const unsigned long long pl_profile_launch_id =" in ln)
    moved = [j for j, ln in enumerate(lines) if "atomicExch(&pl_profile_launch, pl_profile_launch_id + 1ull);" in ln]
    assert read < begins[0] and len(moved) == 1 and moved[0] > begins[-1]  # the last CTA out moves it on
    cleared = [j for j, ln in enumerate(lines) if "[threadIdx.x] = 0ull;" in ln and "pl::dynamic_smem()" in ln]
    barrier = next(j for j, ln in enumerate(lines) if j > cleared[0] and ln.strip() == "__syncthreads();")
    assert len(cleared) == 1 and cleared[0] < barrier < begins[0]  # the claims start empty, before any record


@pytest.mark.parametrize("dispatch", ["static", "dynamic"])
def test_components_find_the_running_tasks_record_for_their_marks_only_in_a_profiled_link(dispatch):
    from pipelink.authoring.header import symbol_prefix
    from pipelink.linker.allocate import GLUE_FLAG_BYTES, held_words, profile_record_offset
    from pipelink.linker.glue import constant_values
    pipe, spec = _spec("splitk_gemv", dispatch=dispatch)
    comps = [shipped_component(n) for n in pipe.components]
    plain = run_passes(options=LinkOptions(arch="sm_90", pipeline=spec), components=comps, until="generate")
    values = constant_values(plain.resolved, plain.allocation)
    assert all(values[f"{symbol_prefix(c)}profile_mark"] == 0 for c in comps)  # the marks fold away
    spec = dataclasses.replace(spec, profile_tasks=4096)
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=spec), components=comps, until="generate")
    at = profile_record_offset(ctx.resolved, ctx.allocation)
    flags = ctx.allocation.buffer_offset[("pl_glue", "flags")]
    assert at == flags + GLUE_FLAG_BYTES + 8 * held_words(ctx.resolved)  # after the flags and held sizes
    from pipelink.linker.allocate import PROFILE_CLAIMERS, profile_claim_offset
    assert [profile_claim_offset(ctx.resolved, ctx.allocation, c) for c in (0, PROFILE_CLAIMERS - 1)] == \
        [at + 8, at + 8 + 16 * (PROFILE_CLAIMERS - 1)]  # the claims after the record word, inside the glue's buffer
    (glue_words,) = [p for p in ctx.allocation.smem if p.item.key == "buffer pl_glue.flags"]
    assert glue_words.end >= at + 8 + 16 * PROFILE_CLAIMERS
    values = constant_values(ctx.resolved, ctx.allocation)
    assert all(values[f"{symbol_prefix(c)}profile_mark"] == at + 1 for c in comps)
    lines = ctx.glue.splitlines()
    begins = [i for i, ln in enumerate(lines) if "pl::profile::begin(pl_profile_ring" in ln]
    for i in begins:  # thread 0 keeps each task's record where the marks look, right after taking it
        assert lines[i + 1].strip() == (f"if (threadIdx.x == 0) *reinterpret_cast<unsigned long long**>("
                                        f"pl::dynamic_smem() + {at}u) = pl_record;")


def test_profile_outside_a_persistent_kernel_is_refused():
    pipe, spec = _spec("rowsum", profile_tasks=64)
    assert spec.schedule != "persistent"
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=spec),
                     components=[shipped_component(n) for n in pipe.components], until="resolve")
    assert [d.code for d in ctx.sink.items if d.severity == "error"] == ["PL179"]


@pytest.mark.parametrize("calls,refused", [(128, False), (129, True)])
def test_profile_of_more_components_than_a_record_names_is_refused(calls, refused):
    """A record names its component (call) in 7 bits beside the loader flag: 128 calls profile, 129 do not
    (PL191, at the pipeline's profile_tasks), and without profile_tasks 129 link as before."""
    from test_calls import components, run
    doc = {"pipeline": 1, "name": "many_norms", "calls": [
        {"name": f"norm{i}", "component": "rmsnorm", **({"after": [f"norm{i - 1}"]} if i else {})}
        for i in range(calls)]}
    comps = components(("rmsnorm",))
    ctx = run(doc, comps, until="resolve", profile_tasks=4096)
    errors = [d for d in ctx.sink.items if d.severity == "error"]
    assert [d.code for d in errors] == (["PL191"] if refused else []), [d.render() for d in errors]
    if refused:
        assert f"this kernel has {calls} components (calls), the record names 128" in errors[0].message
        assert errors[0].location.pointer == "/profile_tasks"
        assert not [d for d in run(doc, comps, until="resolve").sink.items if d.severity == "error"]


def test_the_manifest_carries_the_ring_size(shipped_objects):
    pipe, spec = _spec("tile_chain", profile_tasks=1000)
    result = link([str(shipped_objects[n]) for n in pipe.components], LinkOptions(pipeline=spec))
    assert result.ok, [d.render() for d in result.diagnostics]
    m = result.manifest
    assert m.profile_tasks == 1000 and m.to_json()["profile_tasks"] == 1000
    assert Manifest.from_json(m.to_json()).profile_tasks == 1000
    from pipelink.formats.cubin import global_variables
    names = global_variables(result.cubin)
    assert {"pl_profile_ring", "pl_profile_next", "pl_profile_launch"} <= set(names)
    plain = link([str(shipped_objects[n]) for n in pipe.components],
                 LinkOptions(pipeline=dataclasses.replace(spec, profile_tasks=0)))
    assert "profile_tasks" not in plain.manifest.to_json()
    assert "pl_profile_ring" not in global_variables(plain.cubin)


@pytest.mark.parametrize("bad", [0, -3, "many", True, 1.5])
def test_a_manifest_with_a_bad_ring_size_is_refused(shipped_objects, bad):
    from pipelink.runtime.manifest import ManifestError
    pipe, spec = _spec("tile_chain", profile_tasks=16)
    doc = link([str(shipped_objects[n]) for n in pipe.components], LinkOptions(pipeline=spec)).manifest.to_json()
    doc["profile_tasks"] = bad
    with pytest.raises(ManifestError, match="profile_tasks"):
        Manifest.from_json(doc)


def test_a_pipeline_file_with_a_bad_ring_size_is_refused(tmp_path):
    from pipelink.core.diagnostics import DiagnosticSink
    for bad in (-1, 1 << 25, "8"):
        path = tmp_path / "p.json"
        path.write_text('{"pipeline": 1, "profile_tasks": %s}' % (f'"{bad}"' if isinstance(bad, str) else bad))
        sink = DiagnosticSink()
        assert load_pipeline(path, sink) is None and sink.has_errors, bad


def test_pipeline_file_and_cli_take_the_ring_size(tmp_path, shipped_objects, capsys):
    from pipelink.cli import main
    pipe = next(p for p in shipped_pipelines() if p.name == "splitk_gemv")
    objs = [str(shipped_objects[n]) for n in pipe.components]
    out = tmp_path / "k.cubin"
    assert main(["link", *objs, "--pipeline", str(pipe.path), "--profile-tasks", "512", "-o", str(out)]) == 0
    import json
    assert json.loads((tmp_path / "k.json").read_text())["profile_tasks"] == 512
    assert main(["link", *objs, "--pipeline", str(pipe.path), "--profile-tasks", "-1", "-o", str(out)]) == 2
    assert "PL001" in capsys.readouterr().err


def _ring(records, capacity, comps):
    data = bytearray(capacity * profile.WORDS * 8)
    for n, (launch, comp, sm, task, stamps) in enumerate(records):
        word0 = (launch << 48) | (comps.index(comp) << 40) | (sm << 32) | task
        struct.pack_into("<5Q", data, (n % capacity) * profile.WORDS * 8, word0, *stamps)
    return bytes(data)


def test_decode_keeps_the_latest_launch_and_summarize_splits_the_time():
    comps = ["producer", "consumer"]
    recs = [(6, "producer", 0, 0, (0, 0, 0, 0))] * 2 + [
        (7, "producer", 3, 0, (1000, 1000, 5000, 5500)),
        (7, "producer", 4, 1, (1000, 1200, 4200, 4300)),
        (7, "consumer", 3, 0, (5600, 9000, 10000, 10100))]
    got = profile.decode(_ring(recs, 8, comps), len(recs), 8, comps)
    assert [(r.component, r.task, r.sm) for r in got] == [("producer", 0, 3), ("producer", 1, 4), ("consumer", 0, 3)]
    span, sms, per = profile.summarize(got)
    assert span == pytest.approx(9.1) and sms == 2
    assert [c.component for c in per] == ["producer", "consumer"]
    assert per[0].wait_us == pytest.approx(0.2) and per[0].run_us == pytest.approx(7.0)
    assert per[1].wait_us == pytest.approx(3.4) and per[1].notify_us == pytest.approx(0.1)
    assert "3 tasks on 2 SMs over 9.1 us" in profile.render(got)


def _rec(component, task, start, ready, done, notified):
    return profile.TaskRecord(launch=1, component=component, task=task, sm=0, start=start, ready=ready, done=done,
                              notified=notified)


def test_phases_split_layered_calls_by_layer_and_measure_the_hand_offs():
    # two layers of a -> b (2 tasks a layer each, layer-major task numbers), then c once after the loop
    recs = []
    for layer in range(2):
        base = layer * 10_000
        recs += [_rec("a", 2 * layer + i, base, base + 100 * i, base + 1000, base + 1100 + 100 * i) for i in range(2)]
        recs += [_rec("b", 2 * layer + i, base + 1200, base + 1500 + 50 * i, base + 3000, base + 3200 + i) for i in range(2)]
    recs.append(_rec("c", 0, 20_000, 20_500, 21_000, 21_100))
    ps = profile.phases(recs, 2, {"a", "b"})
    assert [(p.component, p.layer) for p in ps] == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("c", -1)]
    a0, b0 = ps[0], ps[1]
    assert (a0.ready_us, a0.done_us) == (0.0, 1.2)          # first waits met, last notification
    assert (b0.ready_us, b0.done_us) == (1.5, 3.201)
    text = profile.render_phases(ps)
    rows = {line.split()[0]: line.split()[1:] for line in text.splitlines()[1:3]}
    assert rows["a"] == ["2", "1.20", "6.80"]                 # a of layer 1 starts 6.8 us after b of layer 0
    assert rows["b"] == ["2", "1.70", "0.30"]                 # b waits 0.3 us past a's last notification
    assert text.splitlines()[-1].endswith("median 10.00 us")
    with pytest.raises(ValueError, match="not 2 layers"):
        profile.phases(recs + [_rec("a", 4, 0, 0, 0, 0)], 2, {"a", "b"})
    assert profile.phases([], 2, {"a"}) == [] and profile.render_phases([]) == "no layered components"


def test_tails_measure_how_long_the_slowest_cta_holds_a_call():
    # grid 3; a: 2 layers of 6 tasks (CTA t % 3 runs tasks t and t + 3 of its layer), c: 4 tasks once after
    ends_a = {0: [1000, 1100, 1200, 2000, 1300, 1400], 1: [11000, 11000, 11000, 11000, 11000, 11600]}
    recs = [_rec("a", 6 * layer + t, 0, 0, 0, e) for layer, es in ends_a.items() for t, e in enumerate(es)]
    recs += [_rec("c", t, 0, 0, 0, e) for t, e in enumerate([20_000, 20_100, 20_200, 20_900])]
    got = profile.tails(recs, 2, {"a"}, 3)
    # layer 0: CTAs end at 2000, 1300, 1400 (median 1400): 0.6 us; layer 1: 11000, 11000, 11600: 0.6 us
    assert got["a"] == (0.6, 0.6, 3)
    # c: CTA 0 ran tasks 0 and 3 (last 20900), CTAs 1 and 2 end at 20100, 20200: 20900 - 20200
    assert got["c"] == (0.7, 0.7, 3)
    text = profile.render_tails(got)
    assert text.splitlines()[1].split() == ["a", "3", "0.60", "0.60"]


def test_sm_speeds_find_the_sms_that_stream_slower_in_every_call():
    # grid 2 on SMs 7 and 9; a: 2 layers of 6 tasks (tasks 0 and 1 of a layer each CTA's first), c: 6 tasks once
    def rec(component, task, sm, run_ns):
        return profile.TaskRecord(launch=1, component=component, task=task, sm=sm, start=0, ready=0, done=run_ns,
                                  notified=run_ns)
    runs_a = {7: 1000, 9: 1500}
    recs = [rec("a", 6 * layer + t, (7, 9)[t % 2], (50_000 if t < 2 else runs_a[(7, 9)[t % 2]] + 10 * layer))
            for layer in range(2) for t in range(6)]
    recs += [rec("c", t, (7, 9)[t % 2], (9000 if t < 2 else (2000, 2600)[t % 2] + t)) for t in range(6)]
    got = profile.sm_speeds(recs, 2, {"a"}, 2)
    # the first tasks (50 us, 9 us) are left out; SM 7's later a tasks ran 1000, 1000, 1010, 1010 ns
    assert got == {"a": {7: 1.005, 9: 1.505}, "c": {7: 2.003, 9: 2.604}}
    assert profile.rank_correlation(got["a"], got["c"]) is None  # two SMs say nothing
    three = {"a": {1: 1.0, 2: 2.0, 3: 3.0}, "c": {1: 5.0, 2: 6.0, 3: 7.0, 4: 1.0}, "d": {1: 3.0, 2: 2.0, 3: 1.0}}
    assert profile.rank_correlation(three["a"], three["c"]) == pytest.approx(1.0)  # over SMs 1-3 only
    assert profile.rank_correlation(three["a"], three["d"]) == pytest.approx(-1.0)
    assert profile.rank_correlation({1: 1.0, 2: 1.0, 3: 1.0}, three["a"]) is None
    text = profile.render_sm_speeds(three, slowest=2)
    assert text.splitlines()[1].split() == ["a", "3", "1.00", "2.00", "3.00", "3.000", "3", "2"]
    assert "rank correlation of the SMs' speeds, a and c: 1.00" in text
    assert "rank correlation of the SMs' speeds, a and d: -1.00" in text


def test_decode_refuses_a_ring_the_launch_overran():
    comps = ["c"]
    recs = [(1, "c", 0, t, (t, t, t, t)) for t in range(10)]
    with pytest.raises(ValueError, match="larger profile_tasks"):
        profile.decode(_ring(recs, 4, comps), len(recs), 4, comps)
    assert len(profile.decode(_ring(recs[:3], 4, comps), 3, 4, comps)) == 3


def test_decode_skips_the_claimed_slots_a_launch_left_unused():
    """Recording threads claim slots a chunk at a time (pl::profile::begin), so a launch's slots interleave
    threads' chunks and end in slots nothing wrote (zeros) or that still hold an older launch's record: decode
    keeps the latest launch's records, in the order they started."""
    comps = ["a", "b"]
    zero = (0, "a", 0, 0, (0, 0, 0, 0))
    recs = [  # launch 4's chunk of 3 slots for SM 1, launch 5's chunks of 3 for SM 0 and SM 1
        (4, "a", 1, 0, (100, 110, 120, 130)), zero, zero,
        (5, "b", 0, 2, (900, 950, 990, 999)), (5, "a", 0, 0, (500, 510, 520, 530)), zero,
        (5, "a", 1, 1, (600, 610, 620, 630)), (4, "b", 1, 1, (140, 150, 160, 170)), zero]
    data = bytearray(_ring(recs, 16, comps))
    for n, rec in enumerate(recs):  # the zero rows: all-zero slots, as never written
        if rec is zero:
            struct.pack_into("<5Q", data, n * profile.WORDS * 8, 0, 0, 0, 0, 0)
    got = profile.decode(bytes(data), len(recs), 16, comps)
    assert [(r.launch, r.component, r.task, r.sm) for r in got] == [(5, "a", 0, 0), (5, "a", 1, 1), (5, "b", 2, 0)]


@pytest.mark.gpu
@pytest.mark.parametrize("name,dispatch", [("splitk_gemv", "static"), ("splitk_gemv", "dynamic"),
                                           ("tile_chain", "dynamic")])
def test_a_launch_records_each_task_once_in_order(shipped_objects, name, dispatch):
    """Run on the GPU: every task of the launch once, its stamps in order, consumers' waits met after
    their producers' notifications began; the results still correct."""
    import os
    from pipelink.harness.problems import run_and_judge
    pipe, spec = _spec(name, dispatch=dispatch, profile_tasks=1 << 16)
    result = link([str(shipped_objects[n]) for n in pipe.components], LinkOptions(pipeline=spec))
    assert result.ok, [d.render() for d in result.diagnostics]
    kernel = result.kernel()
    try:
        for M, N in ((33, 129), (1000, 4099)):
            seed = int.from_bytes(os.urandom(4), "little")
            err, problem = run_and_judge(kernel, name, M, N, seed)
            assert err <= problem.tolerance, (M, N, seed, err)
            records = kernel.task_profile()
            assert records
            per = {}
            for r in records:
                assert r.start <= r.ready <= r.done <= r.notified, r
                per.setdefault(r.component, []).append(r.task)
            for comp, tasks in per.items():
                assert sorted(tasks) == list(range(len(tasks))), comp  # each task once
            assert set(per) == set(pipe.components)
    finally:
        kernel.unload()


def test_first_and_later_tells_a_ctas_first_task_of_a_call_from_the_rest():
    # grid 2: tasks 0 and 1 of each layer are their CTAs' first, 2 and 3 later ones; c is not layered
    recs = []
    for layer in range(2):
        recs += [_rec("a", 4 * layer + t, 0, 0, 3000 if t < 2 else 1000, 0) for t in range(4)]
    recs.append(_rec("c", 0, 0, 0, 500, 0))
    split = profile.first_and_later(recs, 2, {"a"}, grid=2)
    assert split == {"a": (3.0, 1.0, 4, 4)}
    text = profile.render_first_and_later(split)
    assert text.splitlines()[1].split() == ["a", "4", "3.00", "4", "1.00"]
    assert profile.first_and_later(recs, 2, {"a"}, grid=4) == {"a": (2.0, None, 8, 0)}
    assert "-" in profile.render_first_and_later(profile.first_and_later(recs, 2, {"a"}, grid=4)).splitlines()[1]


def test_decode_reads_the_marks_and_marks_tells_where_first_and_later_tasks_spend_their_time():
    comps = ["gemv"]
    data = bytearray(8 * profile.WORDS * 8)
    # one layer of 3 tasks on a grid of 2: tasks 0 and 1 are their CTAs' first, task 2 a later one
    rows = [(0, (0, 1000, 5000, 5100), (1800, 3000, 0, 0, 0, 0)),
            (1, (0, 1000, 7000, 7100), (2200, 3400, 0, 0, 0, 0)),
            (2, (5100, 5200, 8000, 8100), (0, 6000, 0, 0, 0, 0))]
    for n, (task, stamps, marks) in enumerate(rows):
        struct.pack_into(f"<{profile.WORDS}Q", data, n * profile.WORDS * 8, (9 << 48) | task, *stamps, *marks)
    recs = profile.decode(bytes(data), len(rows), 8, comps)
    assert profile.MARKS == 6 and recs[0].marks == (1800, 3000, 0, 0, 0, 0)
    got = profile.marks(recs, 1, {"gemv"}, 2)
    n, at, run = got["gemv"]["first"]
    assert n == 2 and at[0] == pytest.approx(1.0) and at[1] == pytest.approx(2.2) and at[2] is None
    assert run == pytest.approx(5.0)  # (4.0 + 6.0) / 2
    n, at, run = got["gemv"]["later"]
    assert n == 1 and at[0] is None and at[1] == pytest.approx(0.8) and run == pytest.approx(2.8)
    text = profile.render_marks(got)
    assert "2 first" in text and "1 later" in text and "mark 5" in text
    assert profile.render_marks({}) == "no component stamped profile marks"


def test_the_runtime_reads_records_as_wide_as_the_device_writes_them():
    import re
    from pathlib import Path
    import pipelink
    header = (Path(pipelink.__file__).parent / "include" / "pipelink" / "profile_record.h").read_text()
    marks = int(re.search(r"constexpr int kProfileMarks = (\d+);", header).group(1))
    first = int(re.search(r"constexpr int kProfileFirstMark = (\d+);", header).group(1))
    assert (profile.MARKS, profile.WORDS) == (marks, first + marks)


def test_the_loaders_records_are_told_apart_and_set_against_the_tasks():
    """A record whose component byte has the loader flag is the loader's (linker/glue.py _loader_record): the
    summaries read the tasks' records only, loader_leads() the loader's against them. Two layers of a 2-task call
    on two SMs: the loader issued layer 0's copies 1.0 and 0.5 us before its tasks started, layer 1's task 3
    0.5 us after (late), having waited 3.0 us for a slot."""
    comps = ["embed", "gemv"]
    flag = profile.LOADER_FLAG
    data = bytearray(16 * profile.WORDS * 8)
    rows = [  # (component byte, sm, task, start, ready, done, notified)
        (1, 0, 0, 2000, 2100, 4000, 4100), (1, 1, 1, 2000, 2100, 4000, 4100),
        (1, 0, 2, 9000, 9100, 12000, 12100), (1, 1, 3, 9000, 9100, 12000, 12100),
        (1 | flag, 0, 0, 0, 0, 1000, 1000), (1 | flag, 1, 1, 500, 500, 1500, 1500),
        (1 | flag, 0, 2, 4000, 4000, 7500, 7500), (1 | flag, 1, 3, 6000, 6100, 9500, 9500),
        (0, 0, 0, 0, 100, 1900, 2000)]
    for n, (byte, sm, task, *stamps) in enumerate(rows):
        struct.pack_into("<5Q", data, n * profile.WORDS * 8, (3 << 48) | (byte << 40) | (sm << 32) | task, *stamps)
    recs = profile.decode(bytes(data), len(rows), 16, comps)
    assert sum(r.loader for r in recs) == 4 and len(recs) == 9
    assert [r.start for r in recs] == sorted(r.start for r in recs)  # in the order they started
    assert {r.component for r in recs} == {"embed", "gemv"}
    span, sms, per = profile.summarize(recs)
    assert [(c.component, c.tasks) for c in per] == [("embed", 1), ("gemv", 4)] and span == pytest.approx(12.1)
    assert profile.render(recs).startswith("5 tasks on 2 SMs")
    assert [p.component for p in profile.phases(recs, 2, {"gemv"})] == ["embed", "gemv", "gemv"]
    (lead,) = profile.loader_leads(recs, 2, {"gemv"})
    assert lead.component == "gemv" and lead.tasks == 4
    # per layer, the loader's time in its load entries per SM: (1.0 + 1.0) / 2 and (3.5 + 3.5) / 2
    assert lead.blocked_us == pytest.approx((1.0 + 3.5) / 2)
    # leads 1.0, 0.5, 1.5, -0.5: median 0.75; one task of four late
    assert lead.lead_us == pytest.approx(0.75) and lead.late == pytest.approx(0.25)
    text = profile.render_loader_leads([lead])
    assert "loader blocked us" in text and "25.0%" in text
    assert profile.loader_leads([r for r in recs if not r.loader], 2, {"gemv"}) == []
    assert profile.render_loader_leads([]).startswith("no loader records")


def test_loader_issue_bins_the_copies_a_layer_sends_beside_the_calls_it_runs():
    """Three layers of 10 us: a (the loader's call, 2 tasks a layer) runs 0-3 us into each, b (no loader) 3-9 us.
    In layer 1, the only inner one, the loader sends layer 2's two tasks of a at 4.2 and 4.3 us (1 MB each: 2 MB
    in the bin from 4.0 us, 4 TB/s) while b runs, and nothing else: 2 MB over the layer's 10 us, 0.2 TB/s."""
    recs, flag = [], {"loader": True}
    for layer in range(3):
        base = layer * 10_000
        recs += [_rec("a", 2 * layer + i, base, base, base + 2500, base + 3000) for i in range(2)]
        recs += [_rec("b", layer, base + 3000, base + 3200, base + 8800, base + 9000)]
    recs += [profile.TaskRecord(1, "a", 4 + i, 0, 14_000, 14_000, 14_200 + 100 * i, 14_200 + 100 * i, **flag)
             for i in range(2)]
    recs += [profile.TaskRecord(1, "a", i, 0, 0, 0, 0, 0, **flag) for i in range(4)]  # before layer 1: not counted
    bins, mean = profile.loader_issue(recs, 3, {"a", "b"}, {"a": 2_000_000}, bin_us=0.5)
    assert len(bins) == 20 and mean == pytest.approx(0.2)
    assert [b.t_us for b in bins[:3]] == [0.0, 0.5, 1.0]
    assert {i: b.tb_per_s for i, b in enumerate(bins) if b.tb_per_s} == {8: pytest.approx(4.0)}
    assert bins[0].running == ("a",) and bins[8].running == ("b",) and bins[19].running == ()
    assert bins[5].running == ("a",) and bins[6].running == ("b",)  # a ends at 3.0 us, b's waits met at 3.2
    text = profile.render_loader_issue(bins, mean)
    assert "0.20 TB/s over the layer" in text
    assert [line.split()[:3] for line in text.splitlines() if "####" in line] == [["4.00", "4.00", "#" * 20]]
    assert profile.loader_issue([r for r in recs if not r.loader], 3, {"a", "b"}, {"a": 1}) == ([], 0.0)
    assert profile.render_loader_issue([], 0.0).startswith("no loader records")
