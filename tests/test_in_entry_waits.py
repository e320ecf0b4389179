"""In-entry waits (a contract's `events.waits[].in_entry`): the glue writes the running task's wait contexts and the
entry waits for each element itself, right before it reads what the element guards, so a task starts on the part
of its input that is ready. The contract rules (PL207), the glue and header a link generates, a standalone link
(the wait met at once), and on a GPU a consumer that sums a vector piece by piece while slow producers write it."""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pipelink
from pipelink.cli import main

REPO = Path(__file__).resolve().parent.parent

# The producer: task t writes piece t of v (PIECE values, t * PIECE + j + 1), after sleeping `delay` ns, and
# notifies element t of 'piece'.
FILL_SRC = r"""
#include "piece_fill.pipelink.h"
using namespace pl::piece_fill;

extern "C" __device__ void piece_fill(pl::Tile tile, int* __restrict__ v, int N, int delay) {
  if (thread_rank() == 0)
    for (int slept = 0; slept < delay; slept += 1000) __nanosleep(1000);
  sync_done();
  const int t = tile.coord[0];
  for (int j = (int)thread_rank(); j < PIECE; j += (int)THREADS)
    if (t * PIECE + j < N) v[t * PIECE + j] = t * PIECE + j + 1;
}
"""

FILL = {
    "pipelink_contract": 1, "name": "piece_fill", "version": "1.0.0", "owner": "tests",
    "entry": {"symbol": "piece_fill", "params": [
        {"name": "v", "dtype": "i32", "pointer": True, "shape": ["N"]},
        {"name": "N", "dtype": "i32"}, {"name": "delay", "dtype": "i32"}]},
    "targets": {"archs": ["sm_90"]}, "threads": {"warps": 4}, "registers": {"max_per_thread": 128},
    "barriers": {"named": [{"name": "done", "threads": 128}]},
    "geometry": {"provides": {"PIECE": 8},
                 "tile_sequence": {"grid": ["ceil_div(N, PIECE)"], "order": "row_major",
                                   "distribution": "grid_stride"}},
    "events": {"notifies": [{"name": "piece", "map": "t->t"}]},
}

# The consumer: task m adds up all of v, each thread its pieces, waiting for each piece right before it reads it
# (in its entry); out[m] = (m + 1) * sum. Where the link waits for none (standalone), it reads v at once.
SUM_SRC = r"""
#include "piece_sum.pipelink.h"
using namespace pl::piece_sum;

extern "C" __device__ void piece_sum(pl::Tile tile, const int* __restrict__ v, long long* __restrict__ out, int N,
                                     int M) {
  const int m = tile.coord[0];
  const long long pieces = piece_elements() > 0 ? piece_elements() : (N + PIECE() - 1) / PIECE();
  long long sum = 0;
  for (long long i = thread_rank(); i < pieces; i += THREADS) {
    if (!wait_piece(i)) return;  // a debug build's wait ran out
    for (int j = 0; j < PIECE(); ++j)
      if (i * PIECE() + j < N) sum += __ldcg(v + i * PIECE() + j);
  }
  atomicAdd(reinterpret_cast<unsigned long long*>(out + m), (unsigned long long)(sum * (m + 1)));
}
"""

SUM = {
    "pipelink_contract": 1, "name": "piece_sum", "version": "1.0.0", "owner": "tests",
    "entry": {"symbol": "piece_sum", "params": [
        {"name": "v", "dtype": "i32", "pointer": True, "const": True, "shape": ["N"]},
        {"name": "out", "dtype": "i64", "pointer": True, "shape": ["M"]},
        {"name": "N", "dtype": "i32"}, {"name": "M", "dtype": "i32"}]},
    "targets": {"archs": ["sm_90"]}, "threads": {"warps": 4}, "registers": {"max_per_thread": 128},
    "geometry": {"consumes": {"PIECE": {"min": 1, "max": 64, "default": 8}},
                 "tile_sequence": {"grid": ["M"], "order": "row_major", "distribution": "grid_stride"}},
    "events": {"waits": [{"name": "piece", "map": "m->:", "in_entry": True}]},
}


def contract(base: dict, edit=None) -> dict:
    raw = copy.deepcopy(base)
    if edit:
        edit(raw)
    return raw


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def written(tmp_path, raw: dict) -> Path:
    path = tmp_path / f"{raw['name']}.json"
    path.write_text(json.dumps(raw))
    return path


# --- the contract's rules (PL207) --------------------------------------------------------------------------------

@pytest.mark.parametrize("edit,pointer,words", [
    (lambda c: c["events"]["waits"][0].update(map="m->:,:"), "/events/waits/0/map", "along one axis"),
    (lambda c: c["events"]["waits"][0].update(map="m->range(idx[m], idx[m + 1])"), "/events/waits/0/map",
     "along one axis"),
    (lambda c: c["events"]["waits"][0].update(count="cnt[m]"), "/events/waits/0/count", "device tensor"),
    (lambda c: c["threads"].update(concurrent=True), "/events/waits/0/in_entry", "several to a block"),
])
def test_an_in_entry_wait_the_entry_cannot_make_is_refused(capsys, tmp_path, edit, pointer, words):
    def with_tensors(c):
        c["entry"]["params"][2:2] = [{"name": "idx", "dtype": "i32", "pointer": True, "const": True, "shape": ["M"]},
                                     {"name": "cnt", "dtype": "i32", "pointer": True, "const": True, "shape": ["M"]}]
        edit(c)
    path = written(tmp_path, contract(SUM, with_tensors))
    code, out, err = cli(capsys, "check", path, "--format", "json")
    errors = [d for d in json.loads(out)["diagnostics"] if d["severity"] == "error"]
    assert code == 1 and [d["code"] for d in errors] == ["PL207"], errors
    assert errors[0]["location"]["pointer"] == pointer and words in errors[0]["message"], errors[0]


def test_an_in_entry_wait_on_its_own_notifications_is_refused(capsys, tmp_path):
    def chain(c):
        c["events"]["notifies"] = [{"name": "piece", "map": "m->m"}]
        c["events"]["waits"][0]["map"] = "m->range(max(m - 1, 0), m)"
    code, _, err = cli(capsys, "check", written(tmp_path, contract(SUM, chain)), "--pipeline",
                       written(tmp_path, {"pipeline": 1, "name": "chain"}))
    assert code == 1 and "error[PL207]" in err and "which it notifies itself" in err, err


# --- what a link generates ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("in_entry")
    out = {}
    for raw, src in ((FILL, FILL_SRC), (SUM, SUM_SRC)):
        (tmp / f"{raw['name']}.cu").write_text(src)
        out[raw["name"]] = pipelink.build(tmp / f"{raw['name']}.cu", json.dumps(raw).encode(), tmp / f"{raw['name']}.o")
    return out


def test_the_glue_writes_the_contexts_and_the_header_reads_them(objects):
    from pipelink.authoring.header import generate_header
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.core.model import Source
    from pipelink.core.loader import load_contract_dict

    def header_of(raw):
        sink = DiagnosticSink()
        c = load_contract_dict(copy.deepcopy(raw), Source("c.json"), sink)
        assert c is not None and not sink.errors, [d.render() for d in sink.items]
        return generate_header(c)
    header = header_of(SUM)
    assert "__device__ extern const unsigned pl_piece_sum__waits_at;" in header
    assert "bool wait_piece(long long i) { return pl::in_entry::wait(pl_piece_sum__waits_at, 0, i); }" in header
    assert "long long piece_elements()" in header and "bool met_piece(long long i)" in header
    assert "waits_at" not in header_of(FILL)

    res = pipelink.link([objects["piece_fill"], objects["piece_sum"]],
                        pipeline={"pipeline": 1, "name": "fill_sum", "dispatch": "static"})
    assert res.ok, [d.render() for d in res.diagnostics]
    glue = res.glue
    assert "pl::in_entry::Context* const pl_ctx0" in glue and "->stride = " in glue and "->n = " in glue
    assert "__syncthreads();  // the in-entry wait contexts are written before the entry reads them" in glue \
        or "compute_sync" in glue
    assert "piece_sum waits m->: for 1 in its entry, element by element" in res.link_map
    (at,) = [int(line.split("= ")[1].rstrip("u;")) for line in glue.splitlines()
             if "const unsigned pl_piece_sum__waits_at =" in line]
    assert at > 0
    # the consumer waits for nothing before its entry: no wait_for of 'piece' in the glue
    assert "pl::events::wait_for(" not in glue.split("piece_sum(")[0].split("// the task's in-entry waits")[-1]


def test_a_standalone_link_waits_for_none_of_them(objects):
    res = pipelink.link([objects["piece_sum"]], pipeline={"pipeline": 1, "name": "sum_alone", "standalone": True,
                                                          "schedule": "persistent"})
    assert res.ok, [d.render() for d in res.diagnostics]
    assert "->n = 0ll;  // 'piece': not waited for in this link" in res.glue


# --- on a GPU ------------------------------------------------------------------------------------------------------

RUN = r"""
import json, sys
import torch
import pipelink
out = []
for path in sys.argv[1:]:
    k = pipelink.load(path)
    for N, M, delay, grid in ((1, 1, 0, None), (8, 3, 2000, None), (1001, 7, 3000, None), (4099, 40, 1000, 4),
                              (20000, 300, 500, None)):
        v = torch.full((N,), -7, dtype=torch.int32, device="cuda")  # poisoned: a read before its write shows
        o = torch.full((M,), -1, dtype=torch.int64, device="cuda")
        o.zero_()
        k.launch(v=v, out=o, N=N, M=M, delay=delay, grid=grid)
        torch.cuda.synchronize()
        out.append([path, N, M, delay, grid, o.cpu().tolist(), v.cpu().tolist()[:4]])
    k.unload()
print(json.dumps(out))
"""


@pytest.mark.gpu
def test_a_consumer_reads_each_piece_after_its_producer_wrote_it(objects, tmp_path):
    """Producers sleep before they write; the consumer's tasks start at once on the other CTAs and wait in their
    entry for each piece. Every sum is exact (a piece read before its write would add the poison, -7). Static and
    dynamic dispatch, and the producers' notifications after a release fence (notify_fence acq_rel)."""
    dirs = []
    for dispatch, fence in (("static", "sc"), ("dynamic", "sc"), ("static", "acq_rel")):  # notify_fence too
        res = pipelink.link([objects["piece_fill"], objects["piece_sum"]],
                            pipeline={"pipeline": 1, "name": f"fill_sum_{dispatch}_{fence}", "dispatch": dispatch,
                                      "notify_fence": fence})
        assert res.ok, [d.render() for d in res.diagnostics]
        dirs.append(str(res.save(tmp_path / f"{dispatch}_{fence}").parent))
    (tmp_path / "run.py").write_text(RUN)
    proc = subprocess.run([sys.executable, str(tmp_path / "run.py"), *dirs], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-4000:]
    for path, N, M, delay, grid, sums, head in json.loads(proc.stdout.strip().splitlines()[-1]):
        total = N * (N + 1) // 2
        assert sums == [(m + 1) * total for m in range(M)], (path, N, M, delay, grid, sums[:8])
        assert head == list(range(1, min(N, 4) + 1)), head


def test_an_in_entry_wait_guards_nothing_the_glue_reads(capsys, tmp_path):
    """A later wait's map reads `idx`, which the producer writes in the launch: an in-entry wait on the producer,
    listed before it, does not order that read (the glue reads it before the entry runs): PL086. As a glue wait it
    does."""
    fill = contract(FILL, lambda c: c["entry"]["params"].insert(1, {"name": "idx", "dtype": "i32", "pointer": True,
                                                                      "shape": ["M"]}))
    fill["entry"]["params"].append({"name": "M", "dtype": "i32"})

    def reader(in_entry):
        def edit(c):
            c["entry"]["params"].insert(2, {"name": "idx", "dtype": "i32", "pointer": True, "const": True,
                                            "shape": ["M"]})
            c["events"]["waits"][0]["in_entry"] = in_entry
            c["events"]["waits"].append({"name": "piece2", "map": "m->idx[m]", "count": 1})
        return contract(SUM, edit)
    other = {"pipelink_contract": 1, "name": "piece_two", "version": "1.0.0", "owner": "tests",
             "entry": {"symbol": "piece_two", "params": [{"name": "N", "dtype": "i32"}]},
             "targets": {"archs": ["sm_90"]}, "threads": {"warps": 4}, "registers": {"max_per_thread": 128},
             "geometry": {"tile_sequence": {"grid": ["N"], "order": "row_major", "distribution": "grid_stride"}},
             "events": {"notifies": [{"name": "piece2", "map": "t->t"}]}}
    pipeline = written(tmp_path, {"pipeline": 1, "name": "k"})
    paths = [written(tmp_path, fill), written(tmp_path, other)]
    code, _, err = cli(capsys, "check", *paths, written(tmp_path, reader(True)), "--pipeline", pipeline)
    assert code == 1 and "error[PL086]" in err and "reading 'idx'" in err, err
    code, _, err = cli(capsys, "check", *paths, written(tmp_path, reader(False)), "--pipeline", pipeline)
    assert code == 0, err


def test_inspect_says_which_waits_the_entry_makes(capsys, objects):
    code, out, _ = cli(capsys, "inspect", objects["piece_sum"])
    assert code == 0 and "waits     piece m->: (in the entry, element by element)" in out, out
    code, out, _ = cli(capsys, "inspect", objects["piece_sum"], "--format", "json")
    (c,) = [i["contract"] for i in json.loads(out)["inputs"]]
    assert c["events"]["waits"] == [{"name": "piece", "map": "m->:", "in_entry": True}], c["events"]


def test_a_call_that_renames_the_event_waits_on_its_own(objects):
    """Calls rename events: two producers and two consumers of one component each, each consumer's in-entry wait on
    its own producer's event (the context names that event's counters), and a consumer call whose event no call
    notifies is refused (PL081), not met at once."""
    calls = [{"name": "fill_a", "component": "piece_fill", "bind": {"v": "va"}, "events": {"piece": "piece_a"}},
             {"name": "fill_b", "component": "piece_fill", "bind": {"v": "vb"}, "events": {"piece": "piece_b"}},
             {"name": "sum_a", "component": "piece_sum", "bind": {"v": "va", "out": "oa"}, "events": {"piece": "piece_a"}},
             {"name": "sum_b", "component": "piece_sum", "bind": {"v": "vb", "out": "ob"}, "events": {"piece": "piece_b"}}]
    res = pipelink.link([objects["piece_fill"], objects["piece_sum"]],
                        pipeline={"pipeline": 1, "name": "two", "calls": calls})
    assert res.ok, [d.render() for d in res.diagnostics]
    assert "'piece_a' m->:" in res.glue and "'piece_b' m->:" in res.glue
    assert "sum_a waits m->: for 1 in its entry" in res.link_map and "sum_b waits m->: for 1 in its entry" in res.link_map
    res = pipelink.link([objects["piece_fill"], objects["piece_sum"]],
                        pipeline={"pipeline": 1, "name": "two", "calls": calls[:1] + [dict(calls[2], events={"piece": "nobody"})]})
    assert not res.ok and "PL081" in {d.code for d in res.diagnostics}


@pytest.mark.parametrize("loops,index,first,step,n", [
    ((), "(long long)(tile.coord[0])", "(long long)((long long)(tile.coord[0]))", "0ll", "1ll"),
    ((("a0", "0", "e0_extent_0"),), "a0", "(long long)(0)", "((long long)(0 + 1)) - ((long long)(0))",
     "max((long long)(e0_extent_0) - (long long)(0), 0ll)"),
    ((("a0", "0", "e1_extent_0"),), "(a0) * e1_extent_1 + (long long)(tile.coord[0])",
     "((long long)(0)) * e1_extent_1 + (long long)(tile.coord[0])", None, None),
])
def test_an_axis_is_the_first_element_a_step_and_a_count(loops, index, first, step, n):
    """event_glue._one_axis: element i of a one-axis space is counter first + i * step (the index is affine in the
    loop variable), n of them; a space of no loop is the one element. Evaluated on sample values where given."""
    from pipelink.linker.event_glue import ElementSpace, Loop, _one_axis
    space = ElementSpace(tuple(Loop(*lp) for lp in loops), (), index)
    f, s, count = _one_axis(None, space)
    assert f == first
    if step is not None:
        assert s == f"(long long)({step})" if loops else s == step
        assert count == n
    else:  # a column of a 2-D event: the step is the row length
        env = {"e1_extent_1": 7, "tile": None}
        value = lambda text, c0=3: eval(text.replace("(long long)", "").replace("tile.coord[0]", str(c0)), {}, env)  # noqa: E731
        assert value(f) == 3 and value(s) == 7
