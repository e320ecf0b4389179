"""Contract loading: schema, semantic checks, located diagnostics, never an exception."""
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contract_factory import base_contract, dumps
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.loader import load_contract_bytes, load_contract_file, schema
from pipelink.core.model import Source

REPO = Path(__file__).resolve().parent.parent


def load(c, name="c.json"):
    sink = DiagnosticSink()
    contract = load_contract_bytes(c if isinstance(c, bytes) else dumps(c), Source(name), sink)
    return contract, sink


def codes(sink):
    return [(d.code, d.location.pointer) for d in sink.items]


def test_base_contract_loads():
    c, sink = load(base_contract())
    assert sink.items == [] and c is not None
    assert c.threads.roles[0].warpgroup_aligned
    assert c.buffers[0].bytes.evaluate(c.geometry_env()) == 64 * 128 * 4
    assert c.geometry.consumes["TILE_N"].admits(64) and not c.geometry.consumes["TILE_N"].admits(48)
    assert c.shape_params().keys() == {"M"}
    assert len(c.hash) == 64


def test_hash_ignores_prose_only():
    a, _ = load(base_contract())
    b, _ = load(base_contract(description="other words", owner="someone else"))
    d, _ = load(base_contract(version="1.0.1"))
    assert a.hash == b.hash
    assert a.hash != d.hash


@pytest.mark.parametrize("path", sorted((REPO / "contracts").glob("*.json")), ids=lambda p: p.name)
def test_shipped_contracts_load(path):
    if path.name.endswith(".schema.json"):
        pytest.skip("the schema itself")
    sink = DiagnosticSink()
    assert load_contract_file(path, sink) is not None, sink.items


def test_schema_is_versioned_and_installed():
    s = schema()
    assert s["$schema"].endswith("2020-12/schema")
    assert s["$id"].endswith("/v1.json")
    shipped = json.loads((REPO / "contracts" / "contract-v1.schema.json").read_text())
    assert shipped == s


# --- unreadable and malformed input ---------------------------------------------------------

def test_empty():
    _, sink = load(b"  \n")
    assert codes(sink) == [("PL003", None)]


def test_invalid_json_has_line_and_column():
    _, sink = load(b'{\n  "name": "x",\n  "version": 1.0.0\n}')
    (d,) = sink.items
    assert d.code == "PL006" and d.location.line == 3 and d.location.column == 17
    assert d.exit_code == 2


def test_not_utf8():
    _, sink = load(b'{"name": "\xff"}')
    assert [d.code for d in sink.items] == ["PL006"]


def test_duplicate_key():
    _, sink = load(b'{"name": "a", "name": "b"}')
    (d,) = sink.items
    assert d.code == "PL006" and "'name' appears twice" in d.message


def test_not_an_object():
    _, sink = load(b"[1, 2]")
    assert codes(sink) == [("PL020", "")]


def test_future_format_version():
    _, sink = load(base_contract(pipelink_contract=2))
    assert codes(sink) == [("PL021", "/pipelink_contract")]


def test_missing_file(tmp_path):
    sink = DiagnosticSink()
    assert load_contract_file(tmp_path / "nope.json", sink) is None
    assert [d.code for d in sink.items] == ["PL002"]


# --- schema violations: every one, each with its pointer -------------------------------------

def test_schema_violations_all_reported_with_pointers():
    c = base_contract()
    c["threads"]["warps"] = 0
    c["smem"]["buffers"][0]["align"] = "big"
    c["ports"][1]["direction"] = "sideways"
    c["unknown_field"] = True
    del c["entry"]["symbol"]
    c, sink = load(c)
    assert c is None
    got = codes(sink)
    assert all(code == "PL020" for code, _ in got)
    assert {p for _, p in got} == {"", "/entry", "/threads/warps", "/smem/buffers/0/align", "/ports/1/direction"}
    assert all(d.location.file == "c.json" and d.exit_code == 1 for d in sink.items)


def test_float_is_not_an_integer():
    _, sink = load(base_contract(threads={"warps": 8.0, "roles": [{"name": "a", "warps": 8}]}))
    assert codes(sink) == [("PL020", "/threads/warps")]


def test_zero_size_is_a_schema_violation():
    c = base_contract()
    c["smem"]["buffers"][1]["bytes"] = 0
    _, sink = load(c)
    assert codes(sink) == [("PL020", "/smem/buffers/1/bytes")]


def test_geometry_values_past_the_int_range_are_schema_violations():
    """Geometry reaches the code as `constexpr int` (the generated header): 2^32 + 512 had built as 512 while the
    link computed with the whole value (one task for any N). Every value a contract gives geometry is an int32;
    an mbarrier's arrival count fits its 20 bits."""
    c = base_contract()
    c["geometry"]["provides"] = {"SEG": 2**32 + 512}
    c["geometry"]["consumes"] = {"TM": {"min": 1, "max": 2**31, "default": 2**40, "one_of": [1, 2**31]}}
    c["barriers"] = {"mbarriers": [{"name": "full", "count": 1 << 20}]}
    _, sink = load(c)
    assert set(codes(sink)) == {("PL020", "/geometry/provides/SEG"), ("PL020", "/geometry/consumes/TM/max"),
                                ("PL020", "/geometry/consumes/TM/default"), ("PL020", "/geometry/consumes/TM/one_of/1"),
                                ("PL020", "/barriers/mbarriers/0/count")}, codes(sink)


def test_compile_flags_description_is_allowed():
    c = base_contract()
    c["targets"]["compile_flags"]["description"] = "nvcc defaults"
    contract, sink = load(c)
    assert contract is not None and not contract.targets.flags.ftz


def test_hash_keeps_geometry_named_like_prose():
    def with_owner(v):
        c = base_contract()
        c["geometry"]["provides"]["owner"] = v
        return c
    a, _ = load(with_owner(1))
    b, _ = load(with_owner(2))
    assert a is not None and a.hash != b.hash


def test_size_neither_int_nor_string():
    c = base_contract()
    c["smem"]["buffers"][0]["bytes"] = 1.5
    _, sink = load(c)
    (d,) = sink.items
    assert d.code == "PL020" and d.location.pointer == "/smem/buffers/0/bytes" and "not a size" in d.message


# --- semantic checks -------------------------------------------------------------------------

def mutate(fn):
    c = base_contract()
    fn(c)
    return load(c)


CASES = {
    "warps_do_not_add_up": (lambda c: c["threads"].update(warps=12), [("PL023", "/threads/warps")]),
    "duplicate_role": (lambda c: c["threads"]["roles"][1].update(name="producer"),
                       [("PL022", "/threads/roles/1/name")]),
    "duplicate_buffer": (lambda c: c["smem"]["buffers"][1].update(name="stage"),
                         [("PL022", "/smem/buffers/1/name")]),
    "barrier_names_shared_namespace": (lambda c: c["barriers"]["mbarriers"][0].update(name="ready"),
                                       [("PL022", "/barriers/1/name")]),
    "duplicate_port": (lambda c: c["ports"][1].update(name="x"), [("PL022", "/ports/1/name")]),
    "duplicate_param": (lambda c: c["entry"]["params"].append({"name": "M", "dtype": "i64"}),
                        [("PL022", "/entry/params/3/name")]),
    "warpgroup_alignment": (lambda c: (c["threads"]["roles"][0].update(warps=6), c["threads"].update(warps=10)),
                            [("PL024", "/threads/roles/0/warps")]),
    "setmaxnreg_value": (lambda c: (c["threads"]["roles"][0].update(setmaxnreg=100),
                                    c["targets"].update(archs=["sm_90a"])), [("PL025", "/threads/roles/0/setmaxnreg")]),
    "setmaxnreg_needs_sm90a": (lambda c: c["threads"]["roles"][0].update(setmaxnreg=240),
                               [("PL025", "/threads/roles/0/setmaxnreg")]),
    "barrier_id_zero": (lambda c: c["barriers"].update(hardcoded_ids=[0]), [("PL026", "/barriers/hardcoded_ids/0")]),
    "barrier_id_16": (lambda c: c["barriers"].update(hardcoded_ids=[16]), [("PL026", "/barriers/hardcoded_ids/0")]),
    "barrier_threads_not_warp_multiple": (lambda c: c["barriers"]["named"][0].update(threads=100),
                                          [("PL027", "/barriers/named/0/threads")]),
    "barrier_threads_over_component": (lambda c: c["barriers"]["named"][0].update(threads=512),
                                       [("PL027", "/barriers/named/0/threads")]),
    "bad_expression": (lambda c: c["smem"]["buffers"][0].update(bytes="TILE_M ** 2"),
                       [("PL028", "/smem/buffers/0/bytes")]),
    "unknown_name_in_size": (lambda c: c["smem"]["buffers"][0].update(bytes="TILE_K * 4"),
                             [("PL029", "/smem/buffers/0/bytes")]),
    "runtime_shape_in_smem_size": (lambda c: c["smem"]["buffers"][0].update(bytes="M * 4"),
                                   [("PL029", "/smem/buffers/0/bytes")]),
    "zero_size": (lambda c: c["smem"]["buffers"][1].update(bytes="TILE_M - 64"), [("PL032", "/smem/buffers/1/bytes")]),
    "one_of_outside_own_range": (lambda c: c["geometry"]["consumes"]["TILE_N"].update(one_of=[48]),
                                 [("PL030", "/geometry/consumes/TILE_N"), ("PL030", "/geometry/consumes/TILE_N/default")]),
    "geometry_named_like_pointer_param": (lambda c: c["geometry"]["provides"].update(x=4),
                                          [("PL022", "/geometry/provides/x")]),
    "geometry_named_like_header_constant": (lambda c: c["geometry"]["provides"].update(WARPS=4),
                                            [("PL022", "/geometry/provides/WARPS")]),
    "output_port_on_const_pointer": (lambda c: c["ports"][0].update(direction="out"), [("PL020", "/ports/0/param")]),
    "align_not_power_of_two": (lambda c: c["smem"]["buffers"][0].update(align=48), [("PL032", "/smem/buffers/0/align")]),
    "scratch_without_phase": (lambda c: c["smem"]["buffers"][1].pop("phase"), [("PL020", "/smem/buffers/1/phase")]),
    "persistent_with_phase": (lambda c: c["smem"]["buffers"][0].update(phase="main"),
                              [("PL020", "/smem/buffers/0/phase")]),
    "range_min_over_max": (lambda c: c["geometry"]["consumes"]["TILE_N"].update(min=512),
                           [("PL030", "/geometry/consumes/TILE_N"), ("PL030", "/geometry/consumes/TILE_N/default")]),
    "provided_and_consumed": (lambda c: c["geometry"]["consumes"].update(TILE_M={"min": 1}),
                              [("PL030", "/geometry/consumes/TILE_M")]),
    "geometry_named_like_runtime_param": (lambda c: c["geometry"]["provides"].update(M=4),
                                          [("PL022", "/geometry/provides/M")]),
    "bad_map": (lambda c: c["events"]["notifies"][0].update(map="i->j"), [("PL031", "/events/notifies/0/map")]),
    "map_rank_vs_grid": (lambda c: c["events"]["notifies"][0].update(map="ij->ij", shape=[1, 1]),
                         [("PL031", "/events/notifies/0/map")]),
    "map_reads_non_pointer": (lambda c: c["events"]["waits"][0].update(map="i->M[i,:]"),
                              [("PL029", "/events/waits/0/map")]),
    # a tensor a map or count reads: one subscript per declared extent (a missing one had read another element,
    # an extra one crashed the link), its extents given, and a count one element
    "map_reads_too_few_subscripts": (lambda c: c["events"]["waits"][0].update(map="i->topk[i]"),
                                     [("PL031", "/events/waits/0/map")]),
    "map_reads_too_many_subscripts": (lambda c: c["events"]["waits"][0].update(map="i->topk[i, 0, 1]"),
                                      [("PL031", "/events/waits/0/map")]),
    "range_reads_too_few_subscripts": (lambda c: c["events"]["waits"][0].update(map="i->range(topk[i], topk[i+1])"),
                                       [("PL031", "/events/waits/0/map")]),
    "count_reads_unshaped": (lambda c: (c["entry"]["params"].append({"name": "cnt", "dtype": "i32", "pointer": True}),
                                        c["events"]["waits"][0].update(map="i->i", count="cnt[i]")),
                             [("PL029", "/events/waits/0/count")]),
    "count_reads_too_many_subscripts": (lambda c: c["events"]["waits"][0].update(map="i->i", count="topk[i, 0, 0]"),
                                        [("PL031", "/events/waits/0/count")]),
    "count_with_arithmetic": (lambda c: c["events"]["waits"][0].update(map="i->i", count="topk[i, 0] + 1"),
                              [("PL031", "/events/waits/0/count")]),
    "count_reads_an_axis": (lambda c: c["events"]["waits"][0].update(map="i->i", count="topk[i, :]"),
                            [("PL031", "/events/waits/0/count")]),
    "event_shape_rank": (lambda c: c["events"]["notifies"][0].update(shape=[1, 2]),
                         [("PL031", "/events/notifies/0/shape")]),
    "registers_over_sm": (lambda c: (c["registers"].update(max_per_thread=255), c["threads"].update(warps=16),
                                     c["threads"]["roles"][1].update(warps=12)),
                          [("PL033", "/registers/max_per_thread")]),
    "unknown_arch": (lambda c: c["targets"].update(archs=["sm_91"]), [("PL034", "/targets/archs/0")]),
    "gmem_port_without_param": (lambda c: c["ports"][0].pop("param"), [("PL020", "/ports/0/param")]),
    "gmem_port_param_not_pointer": (lambda c: c["ports"][0].update(param="M"), [("PL029", "/ports/0/param")]),
    "gmem_port_dtype_mismatch": (lambda c: c["ports"][0].update(dtype="bf16"), [("PL020", "/ports/0/dtype")]),
    "smem_port_without_tile": (lambda c: c["ports"][1].pop("tile"), [("PL020", "/ports/1/tile")]),
    "tile_grid_unknown_name": (lambda c: c["geometry"]["tile_sequence"].update(grid=["B"]),
                               [("PL029", "/geometry/tile_sequence/grid/0")]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_semantic_error(case):
    fn, expected = CASES[case]
    contract, sink = mutate(fn)
    assert contract is None
    assert codes(sink) == expected
    for d in sink.items:
        assert d.location.file == "c.json" and d.location.component == "comp"
        assert d.effective_hint
        assert d.exit_code == 1


def test_many_problems_reported_at_once():
    def fn(c):
        c["threads"]["warps"] = 9
        c["smem"]["buffers"][1]["bytes"] = "TILE_M - 64"
        c["barriers"]["hardcoded_ids"] = [0]
        c["events"]["notifies"][0]["map"] = "nope"
    _, sink = mutate(fn)
    assert {d.code for d in sink.items} == {"PL023", "PL032", "PL026", "PL031"}


def test_rendering_names_file_pointer_and_hint():
    _, sink = mutate(lambda c: c["threads"].update(warps=12))
    text = sink.items[0].render()
    assert text.startswith("error[PL023]: ")
    assert "--> c.json, at /threads/warps, component 'comp'" in text
    assert "= hint: " in text


# --- property: arbitrary documents give diagnostics, never exceptions -------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=25)


def _mutations():
    base = base_contract()
    paths = []

    def walk(node, path):
        paths.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, path + [k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, path + [i])
    walk(base, [])
    return paths[1:]


MUTATION_PATHS = _mutations()


@settings(max_examples=300, deadline=None)
@given(doc=json_values)
def test_random_json_documents_only_diagnose(doc):
    _, sink = load(json.dumps(doc).encode())
    assert sink.has_errors
    assert all(d.code.startswith("PL") for d in sink.items)


@settings(max_examples=300, deadline=None)
@given(path=st.sampled_from(MUTATION_PATHS), value=json_values)
def test_mutated_contracts_only_diagnose(path, value):
    c = base_contract()
    node = c
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    contract, sink = load(c)
    assert (contract is None) == sink.has_errors
    assert all(d.code.startswith("PL") for d in sink.items)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=200))
def test_random_bytes_only_diagnose(data):
    _, sink = load(b"{" + data)
    assert sink.has_errors


def test_every_code_is_documented():
    from pipelink.core.diagnostics import codes_markdown
    assert (REPO / "docs" / "diagnostics.md").read_text() == codes_markdown(), \
        "regenerate: python -m pipelink.core.diagnostics > docs/diagnostics.md"
