"""Role-structured contracts (`params` + `entries`, roles with setmaxnreg, register ports, tensor-map
parameters, warps over geometry, grouped order, cluster): each bad input is a located diagnostic."""
import pytest

from hopper_factory import epilogue, load, mainloop
from pipelink.core.checks import check_set
from pipelink.core.diagnostics import DiagnosticSink


def test_the_small_contracts_load():
    ml, sink = load(mainloop())
    assert not sink.items
    assert [(e.name, e.role, e.invocation, e.args) for e in ml.entries] == [
        ("init", "*", "per_cta", ("a",)), ("load", "producer", "per_tile", ("a", "K")),
        ("mma", "consumer", "per_tile", ("acc", "K"))]
    assert ml.symbols == ("ml_init", "ml_load", "ml_mma")
    assert [(r.name, r.warps, r.setmaxnreg, r.warpgroup_aligned) for r in ml.threads.roles] == [
        ("producer", 4, 40, True), ("consumer", 8, 232, True)]  # setmaxnreg implies warpgroup-aligned
    a = ml.param("a")
    assert a.tensor_map.swizzle == "128B" and a.tensor_map.oob_fill == "zero" and not a.is_shape
    assert [e.text for e in a.tensor_map.box] == ["TILE_M", "TILE_K"]
    assert ml.port("acc").fragment == "sm90_gmma_acc" and ml.port("acc").role == "consumer"
    assert ml.geometry.tile_sequence.order == "grouped" and ml.geometry.tile_sequence.group == 8
    epi, sink = load(epilogue())
    assert not sink.items
    assert (epi.threads.warps, epi.threads.warps_expr.text) == (8, "TILE_M // 16")  # the default's value
    assert epi.threads.roles[0].warps == 8


# (which contract, edit, [(code, pointer)], a word of the first message)
CASES = {
    # entries
    "entry_on_unknown_role": (
        "ml", lambda c: c["entries"][1].update(role="loader"), [("PL101", "/entries/1/role")], "'loader'"),
    "entry_takes_unknown_name": (
        "ml", lambda c: c["entries"][1]["params"].append("lda"), [("PL029", "/entries/1/params/2")], "'lda'"),
    "star_entry_per_tile": (
        "ml", lambda c: c["entries"][0].pop("invocation"), [("PL101", "/entries/0/invocation")], "per_cta"),
    "register_port_taken_by_the_wrong_role": (
        "ml", lambda c: c["entries"][1]["params"].append("acc"), [("PL101", "/entries/1/params/2")],
        "lives in role 'consumer'"),
    "register_port_taken_per_cta": (
        "ml", lambda c: c["entries"][2].update(invocation="per_cta"), [("PL101", "/entries/2/params/0")],
        "not per_tile"),
    "register_port_taken_by_no_entry": (
        "ml", lambda c: c["entries"][2].update(params=["K"]), [("PL101", "/ports/0")], "taken by no entry"),
    "two_entries_one_symbol": (
        "ml", lambda c: c["entries"][2].update(symbol="ml_load"), [("PL022", "/entries/2/symbol")], "ml_load"),
    "two_entries_one_name": (
        "ml", lambda c: c["entries"][2].update(name="load"), [("PL022", "/entries/2/name")], "'load'"),
    "entry_and_entries": (
        "ml", lambda c: c.update(entry={"symbol": "ml_main"}), [("PL020", "")], "not both"),
    "params_without_entries": (
        "ml", lambda c: (c.pop("entries"), c.update(entry={"symbol": "ml_main"})), [("PL020", "")], "go with 'entries'"),
    "neither_entry_nor_entries": (
        "ml", lambda c: (c.pop("entries"), c.pop("params")), [("PL020", "")], "needs 'entry'"),
    "entry_role_not_an_ident": (
        "ml", lambda c: c["entries"][1].update(role="a b"), [("PL020", "/entries/1/role")], ""),
    # roles and registers
    "setmaxnreg_role_not_whole_warpgroups": (
        "ml", lambda c: (c["threads"]["roles"][0].update(warps=2), c["threads"].update(warps=10)),
        [("PL024", "/threads/roles/0/warps")], "multiple of 4"),
    "setmaxnreg_not_a_step_of_8": (
        "ml", lambda c: c["threads"]["roles"][1].update(setmaxnreg=230), [("PL025", "/threads/roles/1/setmaxnreg")],
        "steps of 8"),
    "setmaxnreg_without_an_a_target": (
        "ml", lambda c: c["targets"].update(archs=["sm_90"]),
        [("PL025", "/threads/roles/0/setmaxnreg"), ("PL025", "/threads/roles/1/setmaxnreg")], "sm_90"),
    # register ports
    "register_port_without_fragment": (
        "ml", lambda c: c["ports"][0].pop("fragment"), [("PL106", "/ports/0/fragment")], "needs 'fragment'"),
    "register_port_without_role": (
        "ml", lambda c: c["ports"][0].pop("role"), [("PL106", "/ports/0/role")], "needs 'role'"),
    "register_port_without_tile": (
        "ml", lambda c: c["ports"][0].pop("tile"), [("PL106", "/ports/0/tile")], "needs 'tile'"),
    "register_port_with_stages": (
        "ml", lambda c: c["ports"][0].update(stages=2), [("PL106", "/ports/0/stages")], "one stage"),
    "register_port_with_param": (
        "ml", lambda c: c["ports"][0].update(param="a"), [("PL106", "/ports/0/param")], "'param'"),
    "register_port_on_unknown_role": (
        "ml", lambda c: c["ports"][0].update(role="mma_wg"), [("PL101", "/ports/0/role")], "'mma_wg'"),
    "smem_port_with_fragment": (
        "ml", lambda c: c["ports"].append({"name": "s", "direction": "out", "dtype": "f32", "tile": [64],
                                           "fragment": "sm90_gmma_acc"}),
        [("PL106", "/ports/1/fragment")], "only reg ports"),
    "gmem_port_with_role": (
        "epi", lambda c: c["ports"].append({"name": "o", "direction": "out", "space": "gmem", "dtype": "bf16",
                                            "param": "out", "tile": [64], "role": "epilogue"}),
        [("PL106", "/ports/1/role")], "only reg ports"),
    "unknown_fragment_layout": (
        "ml", lambda c: c["ports"][0].update(fragment="sm80_mma_acc"), [("PL020", "/ports/0/fragment")], ""),
    # tensor maps
    "box_over_256": (
        "ml", lambda c: c["geometry"]["provides"].update(TILE_M=512),
        [("PL105", "/params/0/tensor_map/box/0")], "exceeds the TMA's 256"),
    "box_inner_bytes_not_16": (
        "ml", lambda c: c["params"][0]["tensor_map"].update(box=["TILE_M", 36], swizzle="none"),
        [("PL105", "/params/0/tensor_map/box/1")], "72 bytes, not a multiple of 16"),
    "box_inner_wider_than_swizzle": (
        "ml", lambda c: c["params"][0]["tensor_map"].update(box=["TILE_M", 128]),
        [("PL105", "/params/0/tensor_map/box/1")], "wider than its 128B swizzle"),
    "box_inner_wider_than_a_64B_swizzle": (
        "ml", lambda c: c["params"][0]["tensor_map"].update(swizzle="64B"),
        [("PL105", "/params/0/tensor_map/box/1")], "128 bytes, wider than its 64B swizzle"),
    "box_rank_differs_from_shape": (
        "ml", lambda c: c["params"][0]["tensor_map"].update(box=["TILE_K"]),
        [("PL105", "/params/0/tensor_map/box")], "rank-2 shape but a rank-1 box"),
    "tensor_map_declared_as_pointer": (
        "ml", lambda c: c["params"][0].update(pointer=True), [("PL105", "/params/0/pointer")], "descriptor"),
    "box_of_zero": (
        "ml", lambda c: c["params"][0]["tensor_map"].update(box=["TILE_M - 128", "TILE_K"]),
        [("PL032", "/params/0/tensor_map/box/0")], "must be positive"),
    "box_over_a_runtime_shape": (
        "ml", lambda c: c["params"][0]["tensor_map"].update(box=["M", "TILE_K"]),
        [("PL029", "/params/0/tensor_map/box/0")], "'M'"),
    "tensor_map_shape_unknown_name": (
        "ml", lambda c: c["params"][0]["tensor_map"].update(shape=["M", "LDA"]),
        [("PL029", "/params/0/tensor_map/shape/1")], "'LDA'"),
    "unknown_swizzle": (
        "ml", lambda c: c["params"][0]["tensor_map"].update(swizzle="256B"),
        [("PL020", "/params/0/tensor_map/swizzle")], ""),
    # warps over geometry
    "warps_do_not_parse": (
        "epi", lambda c: c["threads"].update(warps="TILE_M / 16"), [("PL028", "/threads/warps")], "operator"),
    "warps_name_unknown": (
        "epi", lambda c: c["threads"]["roles"][0].update(warps="WG * 4"),
        [("PL029", "/threads/roles/0/warps")], "'WG'"),
    "warps_name_without_a_value": (
        "epi", lambda c: c["geometry"]["consumes"]["TILE_M"].pop("default"),
        [("PL029", "/threads/warps"), ("PL029", "/threads/roles/0/warps")], "without a value"),
    "warps_evaluate_to_zero": (
        "epi", lambda c: (c["threads"].update(warps="TILE_M // 256"),
                          c["threads"]["roles"][0].update(warps="TILE_M // 256")),
        [("PL032", "/threads/warps"), ("PL032", "/threads/roles/0/warps")], "must be positive"),
    "warps_divide_by_zero": (
        "epi", lambda c: c["threads"].update(warps="TILE_M // (TILE_M - 128)"), [("PL028", "/threads/warps")],
        "division by zero"),
    "warps_over_32": (
        "epi", lambda c: (c["threads"].update(warps="TILE_M // 2"), c["threads"]["roles"][0].update(warps="TILE_M // 2")),
        [("PL023", "/threads/warps"), ("PL023", "/threads/roles/0/warps")], "at most 32"),
    "warps_expressions_do_not_add_up": (
        "epi", lambda c: c["threads"].update(warps="TILE_M // 8"), [("PL023", "/threads/warps")], "add up to 8"),
    "warps_expression_not_whole_warpgroups": (
        "epi", lambda c: (c["threads"].update(warps="TILE_M // 64"), c["threads"]["roles"][0].update(warps="TILE_M // 64")),
        [("PL024", "/threads/roles/0/warps")], "2 warps"),
    "warps_empty_string": (
        "epi", lambda c: c["threads"].update(warps=""), [("PL020", "/threads/warps")], ""),
    # tile order and cluster
    "group_without_grouped_order": (
        "ml", lambda c: c["geometry"]["tile_sequence"].update(order="row_major"),
        [("PL020", "/geometry/tile_sequence/group")], "grouped"),
    "group_of_zero": (
        "ml", lambda c: c["geometry"]["tile_sequence"].update(group=0), [("PL020", "/geometry/tile_sequence/group")], ""),
    "cluster_over_8_ctas": (
        "ml", lambda c: c.update(cluster={"dims": [4, 4]}), [("PL107", "/cluster/dims")], "8 CTAs"),
    "cluster_rank_4": (
        "ml", lambda c: c.update(cluster={"dims": [1, 1, 1, 1]}), [("PL020", "/cluster/dims")], ""),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_role_structured_contract(case):
    which, edit, expected, word = CASES[case]
    raw = (mainloop if which == "ml" else epilogue)(edit)
    contract, sink = load(raw)
    assert contract is None
    assert [(d.code, d.location.pointer) for d in sink.items] == expected, [d.render() for d in sink.items]
    d = sink.items[0]
    assert word in d.message, d.message
    assert d.location.file == "c.json" and d.effective_hint and d.exit_code == 1
    if d.code != "PL020":
        assert d.location.component == raw["name"]


def test_register_ports_need_the_entries_form():
    raw = epilogue(lambda c: (c.pop("entries"), c.pop("params"),
                              c.update(entry={"symbol": "epi_tile", "params": [{"name": "M", "dtype": "i32"}]})))
    contract, sink = load(raw)
    assert contract is None
    assert [(d.code, d.location.pointer) for d in sink.items] == [("PL106", "/ports/0")]
    assert "`entries` form" in sink.items[0].message


def test_a_fine_contract_with_every_new_field_loads():
    def everything(c):
        c["cluster"] = {"dims": [2, 1]}
        c["params"][0]["tensor_map"]["oob_fill"] = "nan"
        c["params"][0]["tensor_map"]["swizzle"] = "none"
        c["params"][0]["tensor_map"]["box"] = ["TILE_M", "TILE_K * 2"]  # 256 bytes: fine without swizzle
    ml, sink = load(mainloop(everything))
    assert not sink.items, [d.render() for d in sink.items]
    assert ml.cluster == (2, 1) and ml.param("a").tensor_map.oob_fill == "nan"


def _check(*raws):
    sink = DiagnosticSink()
    contracts = []
    for i, raw in enumerate(raws):
        c, s = load(raw, f"c{i}.json")
        assert c is not None, [d.render() for d in s.items]
        contracts.append(c)
    target = check_set(contracts, sink)
    return target, sink


def test_two_components_disagree_on_the_cluster():
    target, sink = _check(mainloop(lambda c: c.update(cluster={"dims": [2]})),
                          epilogue(lambda c: c.update(cluster={"dims": [4]})))
    (d,) = sink.items
    assert (d.code, d.location.file, d.location.pointer) == ("PL107", "c1.json", "/cluster/dims")
    assert "[4]" in d.message and "'ml' one of [2]" in d.message
    assert d.related[0].file == "c0.json" and d.related[0].pointer == "/cluster/dims"


def test_one_cluster_shape_however_spelled():
    target, sink = _check(mainloop(lambda c: c.update(cluster={"dims": [2]})),
                          epilogue(lambda c: c.update(cluster={"dims": [2, 1, 1]})))
    assert not sink.items and target == "sm_90a"


def test_entry_symbols_are_unique_across_components():
    target, sink = _check(mainloop(), epilogue(lambda c: c["entries"][0].update(symbol="ml_mma")))
    (d,) = sink.items
    assert (d.code, d.location.file, d.location.pointer) == ("PL048", "c1.json", "/entries/0/symbol")
    assert "'ml_mma'" in d.message and d.related[0].pointer == "/entries/2/symbol"


# --- what one contract's roles need in any kernel: `check` of the contract alone, as its link would say ---------

def _link(*raws):
    """The link's passes over contracts alone, up to the allocation (its role groups and register pool)."""
    from hopper_factory import component
    from pipelink.core.pipeline import PipelineSpec
    from pipelink.linker.passes import LinkOptions, run_passes
    ctx = run_passes(options=LinkOptions(pipeline=PipelineSpec(name="k")), components=[component(r) for r in raws],
                     until="allocate")
    return [(d.code, d.location.file, d.location.pointer) for d in ctx.sink.errors]


@pytest.mark.parametrize("edit, code, pointer, word", [
    # two warpgroups and a producer, every role at 256: 98304 registers, whatever else the kernel holds
    (lambda c: [r.update(setmaxnreg=256) for r in c["threads"]["roles"]], "PL100", "/threads/roles", "98304"),
    (lambda c: c["threads"]["roles"][1].update(setmaxnreg=248, instances=2, warps=4), "PL100", "/threads/roles",
     "ml.consumer 8 warps x 248"),  # a role's copies count
    # the producer runs with its 40 registers in any kernel: the component's cap of 64 cannot hold there
    (lambda c: c.update(registers={"max_per_thread": 64}), "PL104", "/registers/max_per_thread",
     "role 'producer' runs on warps with 40 (its setmaxnreg)")])
def test_role_registers_that_fit_no_kernel_are_found_by_checking_the_contract_alone(edit, code, pointer, word):
    """Such a contract had passed `pipelink check` and failed at its link; check says it with the link's code."""
    raw = mainloop(edit)
    target, sink = _check(raw)
    assert [(d.code, d.location.pointer) for d in sink.errors] == [(code, pointer)], [d.render() for d in sink.items]
    assert word in sink.errors[0].message
    assert _link(raw, epilogue()) == [(code, "ml.json", pointer)]  # a link meets the same, at its check pass


def test_role_registers_the_link_decides_are_left_to_it():
    """A role without setmaxnreg takes the share the link's block leaves it, unknown to one contract: the producer
    keeps 168 registers beside these consumers only in this link (the pool does not fit), which check cannot say."""
    def no_setmaxnreg(c):
        c["threads"]["roles"][0].pop("setmaxnreg")
        c["threads"]["roles"][0]["warpgroup_aligned"] = True
    target, sink = _check(mainloop(no_setmaxnreg))
    assert not sink.items and target == "sm_90a"
    assert _link(mainloop(no_setmaxnreg), epilogue()) == [("PL100", "ml.json", "/threads/roles")]
    target, sink = _check(mainloop(), epilogue())
    assert not sink.items


# --- the entries form's own JSON pointers (`/entries/<i>/...`, `/params/<i>`), never `/entry/...` ----------------

def _generate(*comps):
    from pipelink.core.pipeline import PipelineSpec
    from pipelink.linker.passes import LinkOptions, run_passes
    ctx = run_passes(options=LinkOptions(pipeline=PipelineSpec(name="k")), components=list(comps), until="generate")
    return ctx.sink.errors


def test_a_parameter_clash_points_at_both_declarations():
    from hopper_factory import component
    (d,) = _generate(component(mainloop()), component(epilogue(lambda c: c["params"][1].update(dtype="i64"))))
    assert (d.code, d.location.file, d.location.pointer) == ("PL069", "epi.json", "/params/1")
    assert [(r.file, r.pointer) for r in d.related] == [("ml.json", "/params/1")]  # had been /entry/params


@pytest.mark.parametrize("form", ["entries", "entry"])
def test_an_entry_symbol_the_glue_declares_is_pl188_at_its_field(form):
    """The link had crashed here (exit 3) for either form, and pointed at /entry/symbol for the entries form."""
    from contract_factory import shipped_component
    from hopper_factory import component
    if form == "entries":
        comps, at = [component(mainloop(lambda c: c["entries"][2].update(symbol="tile"))), component(epilogue())], \
            ("ml.json", "/entries/2/symbol")
    else:
        comps = [shipped_component("tile_load"), shipped_component("tile_transform",
                                                                   lambda c: c["entry"].update(symbol="tile")),
                 shipped_component("block_rowsum")]
        at = ("tile_transform.json", "/entry/symbol")
    errors = _generate(*comps)
    assert [(d.code, d.location.file, d.location.pointer) for d in errors] == [("PL188", *at)]
    assert "entry symbol 'tile'" in errors[0].message


def test_a_call_the_probe_finds_is_pl145_at_the_entries():
    from pipelink.authoring.conformance import Usage, compare
    usage = Usage(registers=32, local_bytes=0, static_smem_bytes=0, barrier_ids=frozenset(),
                  computed_barrier_ids=False, callees=("helper",))
    for raw, pointer in ((mainloop(), "/entries"), (epilogue(lambda c: (c.pop("entries"), c.pop("params"), c.pop(
            "ports"), c.update(entry={"symbol": "epi_tile"}))), "/entry")):
        c, _ = load(raw)
        sink = DiagnosticSink()
        compare(c, "c.o", usage, {}, sink)
        assert [(d.code, d.location.pointer) for d in sink.items] == [("PL145", pointer)]


class _Object:
    path = "ml.o"

    def link_input(self):
        return None


def test_the_probe_of_an_object_asks_for_every_entry_at_its_field(monkeypatch):
    """Every entry of the entries form is probed (only the first had been, at /entry/symbol), and one missing is
    PL014 at its own /entries/<i>/symbol."""
    from pipelink import toolchain
    from pipelink.core.model import Component
    from pipelink.linker import collect
    asked = []
    monkeypatch.setattr(toolchain, "probe_entry_and_marker", lambda inp, symbols, marker, arch: asked.append(symbols))

    def check_entry_symbol(obj, symbol, arch, sink, pointer, contract_file):
        if symbol == "ml_mma":
            sink.error("PL014", f"no '{symbol}'", collect.Location(file=contract_file, pointer=pointer))
            return False
        return True
    monkeypatch.setattr(collect, "check_entry_symbol", check_entry_symbol)
    c, _ = load(mainloop())
    sink = DiagnosticSink()
    collect.probe_symbols(Component(c, _Object()), "sm_90a", sink)
    assert asked == [["ml_init", "ml_load", "ml_mma"]]
    assert [(d.code, d.location.pointer) for d in sink.items] == [("PL014", "/entries/2/symbol")]


def test_an_object_that_does_not_link_alone_is_pl074_at_the_entries(monkeypatch):
    from pipelink.authoring.conformance import Probe, ProbeResult
    from pipelink.core.model import Component
    from pipelink.linker import collect, conformance
    monkeypatch.setattr(conformance, "probe", lambda comp, arch: ProbeResult(None, Probe("", {}), "log"))
    monkeypatch.setattr(collect, "probe_symbols", lambda comp, arch, sink: None)
    c, _ = load(mainloop())
    sink = DiagnosticSink()
    conformance.check_conformance(Component(c, _Object()), "sm_90a", sink)
    assert [(d.code, d.location.pointer) for d in sink.items] == [("PL074", "/entries")]
