"""Checks over a set of contracts: pure functions, no toolchain."""

import pytest

from contract_factory import base_contract, dumps
from pipelink.core.checks import check_set, common_targets, smem_lower_bound
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.loader import load_contract_bytes
from pipelink.core.model import Source


def contract(name, **changes):
    raw = base_contract(name=name, entry=dict(base_contract()["entry"], symbol=f"{name}_entry"))
    for key, value in changes.items():
        raw[key] = value
    sink = DiagnosticSink()
    c = load_contract_bytes(dumps(raw), Source(f"{name}.json"), sink)
    assert c is not None, [d.render() for d in sink.items]
    return c


def small(name, **changes):
    """A minimal contract with nothing to clash."""
    raw = {"pipelink_contract": 1, "name": name, "version": "1.0.0", "entry": {"symbol": f"{name}_entry"},
           "targets": {"archs": ["sm_90"]}, "threads": {"warps": 4}}
    raw.update(changes)
    sink = DiagnosticSink()
    c = load_contract_bytes(dumps(raw), Source(f"{name}.json"), sink)
    assert c is not None, [d.render() for d in sink.items]
    return c


def check(*contracts, arch=None):
    sink = DiagnosticSink()
    target = check_set(list(contracts), sink, arch)
    return target, sink


def codes(sink):
    return [d.code for d in sink.items]


def test_compatible_set():
    target, sink = check(small("a"), small("b"))
    assert target == "sm_90" and sink.items == []


def test_duplicate_names_and_symbols():
    a = small("a")
    b = small("a")
    c = small("c", entry={"symbol": "a_entry"})
    _, sink = check(a, b, c)
    # a and b are one contract given twice: one PL047 saying so, not a PL048 for its entry as well
    assert sorted(codes(sink)) == ["PL047", "PL048"]
    assert "given twice, with the same contract" in next(d for d in sink.items if d.code == "PL047").message
    other = small("a", version="1.0.1")
    _, sink = check(a, other)
    assert sorted(codes(sink)) == ["PL047", "PL048"]  # two contracts of one name: the name and the entry clash


def test_flags_disagree_names_both_sides():
    a = small("a", targets={"archs": ["sm_90"], "compile_flags": {"ftz": False}})
    b = small("b", targets={"archs": ["sm_90"], "compile_flags": {"ftz": False}})
    c = small("c", targets={"archs": ["sm_90"], "compile_flags": {"ftz": True, "fmad": False}})
    _, sink = check(a, b, c)
    (d,) = sink.items
    assert d.code == "PL040" and d.location.component == "c"
    assert "'c' is compiled with ftz=true, fmad=false but 'a' with ftz=false, fmad=true" in d.message
    assert d.related[0].component == "a"


@pytest.mark.parametrize("archs,expected", [
    ([["sm_90"], ["sm_90"]], ["sm_90", "sm_90a"]),
    ([["sm_90"], ["sm_90a"]], ["sm_90a"]),
    ([["sm_80"], ["sm_90"]], []),
    ([["sm_90", "sm_100"], ["sm_100"]], ["sm_100", "sm_100a"]),
])
def test_common_targets(archs, expected):
    cs = [small(f"c{i}", targets={"archs": a}) for i, a in enumerate(archs)]
    assert common_targets(cs) == expected


def test_no_common_target():
    _, sink = check(small("a", targets={"archs": ["sm_80"]}), small("b", targets={"archs": ["sm_90a"]}))
    assert codes(sink) == ["PL041"]
    assert "'a' (sm_80) and 'b' (sm_90a) share no target" in sink.items[0].message


def test_requested_target_not_supported():
    target, sink = check(small("a"), small("b", targets={"archs": ["sm_90a"]}), arch="sm_89")
    assert target is None and codes(sink) == ["PL041", "PL041"]
    _, sink = check(small("a"), arch="sm_42")
    assert codes(sink) == ["PL034"]


def test_smem_over_the_limit_counts_scratch_once_per_phase():
    big = {"buffers": [{"name": "a", "bytes": 120 * 1024}, {"name": "s1", "bytes": 60 * 1024, "lifetime": "scratch",
                                                             "phase": "p1"}]}
    other = {"buffers": [{"name": "s2", "bytes": 50 * 1024, "lifetime": "scratch", "phase": "p2"},
                         {"name": "b", "bytes": 60 * 1024}]}
    a, b = small("a", smem=big), small("b", smem=other)
    lb = smem_lower_bound([a, b], {})
    assert (lb.persistent, lb.scratch) == (180 * 1024, 60 * 1024)  # phases share: max, not sum
    _, sink = check(a, b)
    assert codes(sink) == ["PL042"]
    assert "227" not in sink.items[0].message and str(227 * 1024) in sink.items[0].message
    _, sink = check(a, b, arch="sm_90")
    assert codes(sink) == ["PL042"]


def test_smem_counts_ports_with_stages_and_geometry():
    c = small("p", ports=[{"name": "o", "direction": "out", "dtype": "bf16", "tile": ["T", 64], "stages": "S"}],
              geometry={"provides": {"T": 128, "S": 4}})
    assert smem_lower_bound([c], c.geometry_env()).ports == 128 * 64 * 2 * 4


def test_smem_limit_depends_on_target():
    c = small("a", smem={"buffers": [{"name": "a", "bytes": 120 * 1024}]}, targets={"archs": ["sm_89", "sm_90"]})
    assert codes(check(c, arch="sm_90")[1]) == []
    assert codes(check(c, arch="sm_89")[1]) == ["PL042"]


def test_hardcoded_barrier_clash_and_too_many_barriers():
    a = small("a", barriers={"hardcoded_ids": [1, 2, 3, 4, 5, 6, 7]})  # like CUTLASS
    b = small("b", barriers={"hardcoded_ids": [7], "named": [{"name": f"n{i}", "threads": 128} for i in range(9)]})
    _, sink = check(a, b)
    assert sorted(codes(sink)) == ["PL044", "PL045"]


def test_geometry_provided_twice_and_out_of_range():
    p1 = small("p1", geometry={"provides": {"TILE": 64}})
    p2 = small("p2", geometry={"provides": {"TILE": 128}})
    cons = small("cons", geometry={"consumes": {"TILE": {"max": 32}}})
    _, sink = check(p1, p2, cons)
    assert sorted(codes(sink)) == ["PL050", "PL051"]
    d = next(d for d in sink.items if d.code == "PL051")
    assert "'cons' accepts TILE in [1, 32], but 'p1' provides 64" in d.message


def test_registers_and_threads_over_target():
    c = small("a", registers={"max_per_thread": 255}, threads={"warps": 8})
    assert codes(check(c)[1]) == []  # 255 x 256 threads fits an SM


def test_roles_a_single_entry_component_cannot_have_are_found_by_checking_it_alone():
    """A single entry has no per-role registers (setmaxnreg: PL078), and a warpgroup-aligned role after warps that are
    not whole warpgroups never starts on one (the link places such a component on a warpgroup boundary): PL070. Both
    had passed `pipelink check` and failed at the link, with these codes at these fields."""
    from pipelink.core.pipeline import PipelineSpec
    from pipelink.core.model import Component
    from pipelink.linker.passes import LinkOptions, run_passes
    threads = {"warps": 8, "roles": [{"name": "p", "warps": 4, "setmaxnreg": 64}, {"name": "q", "warps": 4}]}
    nreg = small("nreg", targets={"archs": ["sm_90a"]}, threads=threads)
    roles = [{"name": "a", "warps": 2}, {"name": "b", "warps": 4, "warpgroup_aligned": True}, {"name": "c", "warps": 2}]
    aligned = small("aligned", threads={"warps": 8, "roles": roles})
    for c, expected in ((nreg, ("PL078", "/threads/roles/0/setmaxnreg")), (aligned, ("PL070", "/threads/roles/1"))):
        _, sink = check(c)
        assert [(d.code, d.location.pointer) for d in sink.errors] == [expected], [d.render() for d in sink.items]
        ctx = run_passes(options=LinkOptions(pipeline=PipelineSpec(name="k")), components=[Component(c, None)],
                         until="allocate")
        assert [(d.code, d.location.pointer) for d in ctx.sink.errors] == [expected]
    assert "would start at warp 2" in check(aligned)[1].errors[0].message
    roles[0]["warps"], roles[2]["warps"] = 4, 0  # whole warpgroups before it: fine
    roles.pop()
    assert codes(check(small("fine", threads={"warps": 8, "roles": roles}))[1]) == []


def test_a_prefetch_or_load_entry_named_as_another_components_entry_is_pl048_at_its_field():
    a = small("a")
    b = small("b", entry={"symbol": "b_entry", "prefetch": "a_entry"})
    _, sink = check(a, b)
    assert [(d.code, d.location.component, d.location.pointer) for d in sink.items] == [("PL048", "b", "/entry/prefetch")]
    assert sink.items[0].related[0].pointer == "/entry/symbol"
