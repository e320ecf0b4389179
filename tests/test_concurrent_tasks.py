"""threads.concurrent: a component whose tasks need fewer warps than the fused block runs several of them
at once in a persistent kernel with dynamic dispatch, one per group of its warps (each group with its own
waits, barrier and notifications). CPU: the contract rule (PL181), the decision, the header, the glue and
the link map. GPU: the shipped MoE dispatch pipeline with a one-warp concurrent combine against float64."""
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contract_factory import base_contract, dumps
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.loader import load_contract_bytes
from pipelink.core.model import Source, Threads
from pipelink.core.pipeline import load_pipeline
from pipelink.harness.shipped import shipped_pipelines
from pipelink.linker.allocate import MAX_TASK_GROUPS, concurrent_tasks
from pipelink.linker.passes import LinkOptions, link

REPO = Path(__file__).resolve().parents[1]


def load(doc: dict):
    sink = DiagnosticSink()
    return load_contract_bytes(dumps(doc), Source("c.json"), sink), sink


def lean(**overrides) -> dict:
    """The test contract without shared memory, barriers or ports: what a concurrent component may be."""
    doc = base_contract(**overrides)
    for key in ("smem", "barriers", "ports"):
        if key not in overrides:
            doc.pop(key)
    return doc


def codes(sink) -> list[str]:
    return [d.code for d in sink.items]


def test_concurrent_tasks_may_not_hold_anything_block_wide():
    ok, sink = load(lean(threads={"warps": 1, "concurrent": True}))
    assert ok is not None and ok.threads.concurrent and not sink.items
    for threads, extra in [({"warps": 1, "concurrent": True, "uses_syncthreads": True}, {}),
                           ({"warps": 1, "concurrent": True},
                            {"smem": {"buffers": [{"name": "s", "bytes": 256, "lifetime": "scratch"}]}}),
                           ({"warps": 1, "concurrent": True},
                            {"barriers": {"named": [{"name": "b", "threads": 32}]}})]:
        c, sink = load(lean(threads=threads, **extra))
        assert c is None and "PL181" in codes(sink), [d.render() for d in sink.items]
        d = next(d for d in sink.items if d.code == "PL181")
        assert d.location.pointer == "/threads/concurrent" and d.hint


def test_how_many_tasks_a_block_runs_at_once():
    one, two = Threads(1, (), False, concurrent=True), Threads(2, (), False, concurrent=True)
    assert concurrent_tasks(one, 4, "persistent", "dynamic", False, False) == 4
    assert concurrent_tasks(two, 4, "persistent", "dynamic", False, False) == 2
    assert concurrent_tasks(two, 5, "persistent", "dynamic", False, False) == 2  # the fifth warp idles
    assert concurrent_tasks(one, 32, "persistent", "dynamic", False, False) == MAX_TASK_GROUPS  # barrier ids
    # one at a time: not declared, a task as wide as the block, a static walk, calls, a prefetch entry
    assert concurrent_tasks(Threads(1, (), False), 4, "persistent", "dynamic", False, False) == 1
    assert concurrent_tasks(Threads(4, (), False, concurrent=True), 4, "persistent", "dynamic", False, False) == 1
    assert concurrent_tasks(one, 4, "persistent", "static", False, False) == 1
    assert concurrent_tasks(one, 4, "sequential", "static", False, False) == 1
    assert concurrent_tasks(one, 4, "persistent", "dynamic", True, False) == 1
    assert concurrent_tasks(one, 4, "persistent", "dynamic", False, True) == 1


def test_a_concurrent_header_ranks_threads_within_the_warp_group():
    from pipelink.authoring.header import generate_header
    c, _ = load(lean(threads={"warps": 1, "concurrent": True}))
    text = generate_header(c)
    assert "(pl::warp_index() - " in text and "/ (1) * (1)" in text
    plain, _ = load(lean(threads={"warps": 1}))
    assert "pl::warp_index() - " not in generate_header(plain).split("warp_begin() {")[1].split("}")[0]


@pytest.fixture(scope="module")
def concurrent_combine(tmp_path_factory) -> Path:
    """The shipped moe_combine, its contract saying one warp, concurrent: the same source (it strides by
    THREADS from thread_rank())."""
    d = tmp_path_factory.mktemp("concurrent")
    doc = json.loads((REPO / "contracts" / "moe_combine.json").read_text())
    doc["threads"] = {"warps": 1, "concurrent": True}
    contract = d / "moe_combine.json"
    contract.write_text(json.dumps(doc, indent=2))
    out = d / "moe_combine.o"
    proc = subprocess.run([sys.executable, "-m", "pipelink.cli", "build", str(REPO / "components" / "moe_combine" /
                           "moe_combine.cu"), "--contract", str(contract), "--arch", "sm_90", "-o", str(out)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out


def link_moe(objects: dict, combine: Path, **changes):
    pipe = next(p for p in shipped_pipelines() if p.name == "moe_dispatch")
    spec = dataclasses.replace(load_pipeline(pipe.path, DiagnosticSink()), **changes)
    inputs = [str(combine if n == "moe_combine" else objects[n]) for n in pipe.components]
    result = link(inputs, LinkOptions(pipeline=spec))
    assert result.ok, [d.render() for d in result.diagnostics]
    return result


def test_the_glue_runs_four_combine_tasks_a_claim(shipped_objects, concurrent_combine):
    linked = link_moe(shipped_objects, concurrent_combine)
    assert "moe_combine: grid [T] row_major; 4 tasks a block at once, one per group of 1 warps" in linked.link_map
    glue = linked.glue
    assert "const int c2_claims = (c2_tasks + 3) / 4;" in glue
    assert "pl::glue::group_sync<4>(pl_group, 32u);" in glue
    assert "pl::glue::group_and<4>(" in glue  # its waits meet at the group's barrier, not the block's
    assert linked.manifest.resources.named_barriers == 5  # ids 0..4: constants, not all sixteen
    assert "__syncthreads_or" not in glue  # only a debug build leaves on a group's timeout
    assert linked.link_map.count("tasks a block at once") == 1  # the block's other components: one a claim
    # static dispatch walks the tasks one at a time: the same object links and runs one combine a block
    static = link_moe(shipped_objects, concurrent_combine, dispatch="static")
    assert "tasks a block at once" not in static.link_map and "group_sync" not in static.glue


@pytest.mark.parametrize("changes", [{"debug_events": True}, {"profile_tasks": 4096}], ids=["debug", "profile"])
def test_concurrent_tasks_link_with_debug_waits_and_task_profiles(shipped_objects, concurrent_combine, changes):
    linked = link_moe(shipped_objects, concurrent_combine, **changes)
    assert "4 tasks a block at once" in linked.link_map
    if "debug_events" in changes:
        assert "if (__syncthreads_or(!pl_ok)) return;" in linked.glue
    else:
        assert "pl_gtid == 0 ? pl::profile::begin(" in linked.glue


MOE_SHAPES = [(1, 64, 8, 2), (16, 64, 8, 2), (129, 512, 64, 8), (1024, 2048, 128, 8), (4097, 256, 16, 4)]


@pytest.mark.gpu
@pytest.mark.parametrize("debug", [False, True], ids=["plain", "debug"])
def test_concurrent_combine_against_float64(shipped_objects, concurrent_combine, debug):
    """Four combine tasks a block at once, each with its own data-dependent waits: fresh routing (also
    skewed), ragged token counts, several grids, repeated launches, against float64."""
    import torch

    from pipelink.harness.problems import max_error, moe_problem
    kernel = link_moe(shipped_objects, concurrent_combine, debug_events=debug).kernel()
    try:
        for T, H, E, TOPK in MOE_SHAPES:
            for skew in (0.0, 4.0):
                for grid in (None, 1, 3):
                    seed = int.from_bytes(os.urandom(4), "little")
                    problem = moe_problem(T, H, seed, E=E, TOPK=TOPK, skew=skew)
                    kernel.launch(**problem.args, **({"grid": grid} if grid else {}))
                    torch.cuda.synchronize()
                    err = max_error(problem)
                    assert err <= problem.tolerance, \
                        f"T={T} H={H} E={E} TOPK={TOPK} skew={skew} grid={grid} seed={seed}: {err}"
    finally:
        kernel.unload()


@pytest.mark.gpu
def test_concurrent_tasks_are_each_profiled_once(shipped_objects, concurrent_combine):
    """With a task profile, each group's first thread records its own task: every combine task once, its
    stamps in order, each after the expert rows it waits for began to be notified; the results correct."""
    import torch

    from pipelink.harness.problems import max_error, moe_problem
    kernel = link_moe(shipped_objects, concurrent_combine, profile_tasks=1 << 16).kernel()
    try:
        T, H, E, TOPK = 1027, 512, 64, 8
        seed = int.from_bytes(os.urandom(4), "little")
        problem = moe_problem(T, H, seed, E=E, TOPK=TOPK)
        kernel.launch(**problem.args)
        torch.cuda.synchronize()
        assert max_error(problem) <= problem.tolerance, seed
        records = kernel.task_profile()
        combine = sorted(r.task for r in records if r.component == "moe_combine")
        assert combine == list(range(T)), seed  # each of the T tasks once, none of the idle groups'
        assert all(r.start <= r.ready <= r.done <= r.notified for r in records)
    finally:
        kernel.unload()


def test_the_task_groups_barriers_are_the_glues_own(shipped_objects, concurrent_combine):
    """A concurrent component's task groups sync on named barriers 1..G the glue gives them: the link map lists
    them, and the kernel's barrier count is not taken for a component's undeclared id (a false PL073 had warned
    where no component declared ids up to G)."""
    linked = link_moe(shipped_objects, concurrent_combine)
    section = linked.link_map.split("## named barriers")[1].split("##")[0]
    assert all(f"moe_combine task group {g} of 4 (glue" in section for g in range(4)), section
    assert not [d for d in linked.diagnostics if d.code == "PL073"], [d.render() for d in linked.diagnostics]
