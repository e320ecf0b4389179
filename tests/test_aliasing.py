"""One tensor bound to a written parameter and another of one call (PL200), and the contract's `may_alias`
that allows an in-place update (PL201 where it is wrong). No GPU: contracts alone, the passes up to the glue.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.loader import load_contract_dict
from pipelink.core.model import Component, Source
from pipelink.core.pipeline import load_pipeline_dict
from pipelink.linker.passes import LinkOptions, run_passes

DECODE = Path(__file__).resolve().parents[1] / "case_studies" / "llama32_1b_decode"


def contract(params, name="scale") -> dict:
    """A small persistent component: y = f(x) over N elements."""
    return {"pipelink_contract": 1, "name": name, "version": "1.0.0",
            "entry": {"symbol": name, "params": copy.deepcopy(params)},
            "targets": {"archs": ["sm_90"]}, "threads": {"warps": 4},
            "geometry": {"tile_sequence": {"grid": ["ceil_div(N, 512)"], "order": "row_major",
                                           "distribution": "grid_stride"}}}


X = {"name": "x", "dtype": "f32", "pointer": True, "const": True}
Y = {"name": "y", "dtype": "f32", "pointer": True}
N = {"name": "N", "dtype": "i32"}
IN_PLACE = [X, dict(Y, may_alias=["x"]), N]
APART = [X, Y, N]


def pipeline(bind, component="scale") -> dict:
    return {"pipeline": 1, "name": "k", "calls": [{"name": "first", "component": component, "bind": {"y": "out"}},
                                                  {"name": "again", "component": component, "bind": bind,
                                                   "after": ["first"]}]}


def load(raw) -> tuple:
    sink = DiagnosticSink()
    return load_contract_dict(copy.deepcopy(raw), Source("c.json"), sink), sink


def link_until_glue(raws, doc):
    sink = DiagnosticSink()
    spec = load_pipeline_dict(doc, sink, "p.json")
    assert spec is not None, [d.render() for d in sink.items]
    comps = []
    for raw in raws:
        c, s = load(raw)
        assert c is not None, [d.render() for d in s.items]
        comps.append(Component(c, None))
    return run_passes(options=LinkOptions(arch="sm_90", pipeline=spec, cache=False), components=comps,
                      until="generate")


# ---- the decision, pure ---------------------------------------------------------------------------------------

def params_of(raw):
    c, sink = load(raw)
    assert c is not None, [d.render() for d in sink.items]
    return c.entry.params


@pytest.mark.parametrize("params, bind, found", [
    (APART, {"x": "t", "y": "t"}, [("t", "y", "x", False)]),           # written + read, undeclared
    (IN_PLACE, {"x": "t", "y": "t"}, []),                               # declared
    (APART, {"x": "y"}, [("y", "y", "x", False)]),                      # y keeps its own name
    (APART, {"x": "a", "y": "b"}, []),                                  # two tensors
    ([X, dict(X, name="z"), N], {"x": "t", "z": "t"}, []),              # two read-only: nothing is written
    ([Y, dict(Y, name="z"), N], {"y": "t", "z": "t"}, [("t", "y", "z", True)]),  # two written: never
    ([X, dict(Y, may_alias=["x"]), dict(Y, name="z", may_alias=["x"]), N], {"x": "t", "y": "t", "z": "t"},
     [("t", "y", "z", True)]),                                          # both may alias x, not each other
    ([X, dict(X, name="w"), dict(Y, may_alias=["x"]), N], {"x": "t", "w": "t", "y": "t"},
     [("t", "y", "w", False)]),                                         # declared for x, not for w
    ([X, Y, N, dict(N, name="K")], {"N": "H", "K": "H"}, []),           # scalars are values, not tensors
])
def test_which_bindings_share_a_tensor_undeclared(params, bind, found):
    from pipelink.core.aliasing import undeclared_sharing
    got = undeclared_sharing(params_of(contract(params)), bind)
    assert [(s.tensor, s.written, s.other, s.other_writes) for s in got] == found


@pytest.mark.parametrize("params, pointer, words", [
    ([X, dict(Y, may_alias=["q"]), N], "/entry/params/1/may_alias/0", "no parameter"),
    ([X, dict(Y, may_alias=["y"]), N], "/entry/params/1/may_alias/0", "itself"),
    ([X, dict(Y, may_alias=["x", "N"]), N], "/entry/params/1/may_alias/1", "not a pointer"),
    ([X, dict(Y, may_alias=["z"]), dict(Y, name="z"), N], "/entry/params/1/may_alias/0", "writes too"),
    ([dict(X, dtype="bf16"), dict(Y, may_alias=["x"]), N], "/entry/params/1/may_alias/0", "one element type"),
    ([dict(X, may_alias=["y"]), Y, N], "/entry/params/0/may_alias", "only a written pointer"),
    ([X, Y, dict(N, may_alias=["x"])], "/entry/params/2/may_alias", "not a pointer"),
])
def test_a_bad_declaration_is_pl201_at_its_entry(params, pointer, words):
    c, sink = load(contract(params))
    assert c is None
    (d,) = sink.errors
    assert d.code == "PL201" and d.location.pointer == pointer and words in d.message, d.render()
    assert d.hint


def test_a_bad_declaration_in_the_entries_form_is_located_in_params():
    raw = json.loads((Path(__file__).resolve().parents[1] / "contracts" / "epi_bias_residual.json").read_text())
    assert raw["params"][0]["name"] == "y" and "tensor_map" in raw["params"][0]
    raw["params"][0]["may_alias"] = ["residual"]   # a tensor map the TMA writes: outside the rule
    c, sink = load(raw)
    assert c is None and [d.code for d in sink.errors] == ["PL201"]
    assert sink.errors[0].location.pointer == "/params/0/may_alias" and "a tensor map" in sink.errors[0].message


def test_the_schema_takes_a_list_of_names():
    for value in ([], ["x", "x"], "x", [3]):
        c, sink = load(contract([X, dict(Y, may_alias=value), N]))
        assert c is None and {d.code for d in sink.errors} == {"PL020"}, value


def test_the_header_declares_a_declared_pair_without_restrict():
    from pipelink.authoring.header import entry_prototype
    c, _ = load(contract([X, dict(X, name="w"), dict(Y, may_alias=["x"]), N]))
    assert entry_prototype(c) == ('extern "C" __device__ void scale(pl::Tile tile, const float* x, '
                                  'const float* __restrict__ w, float* y, int N)')
    c, _ = load(contract(APART))
    assert "const float* __restrict__ x, float* __restrict__ y" in entry_prototype(c)


# ---- the link ---------------------------------------------------------------------------------------------------

def test_a_link_refuses_one_tensor_on_a_written_and_a_read_parameter():
    ctx = link_until_glue([contract(APART)], pipeline({"x": "out", "y": "out"}))
    (d,) = ctx.sink.errors
    assert d.code == "PL200" and d.location.file == "p.json" and d.location.pointer == "/calls/1/bind/y"
    assert "'again' binds 'out' to 'y'" in d.message and "'x'" in d.message
    assert '"may_alias": ["x"] on parameter \'y\'' in d.hint and "bind another tensor" in d.hint
    assert ctx.glue is None and ctx.resolved is None


def test_located_at_the_other_bind_entry_where_the_written_one_keeps_its_name():
    ctx = link_until_glue([contract(APART)], pipeline({"x": "y"}))
    assert [(d.code, d.location.pointer) for d in ctx.sink.errors] == [("PL200", "/calls/1/bind/x")]


def test_two_written_parameters_on_one_tensor_are_refused_even_when_each_may_alias():
    params = [X, dict(Y, may_alias=["x"]), dict(Y, name="z", may_alias=["x"]), N]
    ctx = link_until_glue([contract(params)], pipeline({"x": "t", "y": "t", "z": "t"}))
    (d,) = ctx.sink.errors
    assert d.code == "PL200" and "both writes" in d.message and d.location.pointer == "/calls/1/bind/y"


@pytest.mark.parametrize("params", [IN_PLACE, [dict(Y, may_alias=["x"]), X, N]])  # the written one first, too
def test_a_declared_in_place_call_links(params):
    ctx = link_until_glue([contract(params)], pipeline({"x": "out", "y": "out"}))
    assert not ctx.sink.errors, [d.render() for d in ctx.sink.items]
    assert "scale(tile, out, out, N);" in ctx.glue or "scale(tile, out, out, N)" in ctx.glue
    # the call is one parameter, written; the other call keeps both
    again = next(c for c in ctx.resolved.components if c.name == "again")
    assert [(p.name, p.const) for p in again.contract.entry.params if p.pointer] == [("out", False)]
    first = next(c for c in ctx.resolved.components if c.name == "first")
    assert {p.name: p.may_alias for p in first.contract.entry.params if p.pointer} == {"x": (), "out": ("x",)}


def test_decode_residual_in_place_needs_its_declaration():
    """The decode MLP's down projection adds the residual into the stream it reads (r and y both x):
    gemv_residual's contract allows it; the same contract without may_alias is refused."""
    from test_calls import MLP_LAYERS, components, run

    def strip(name, raw):
        for p in raw["entry"]["params"]:
            p.pop("may_alias", None)
    assert not run(MLP_LAYERS).sink.errors
    ctx = run(MLP_LAYERS, components(edit=strip), until="resolve")
    assert [(d.code, d.location.pointer) for d in ctx.sink.errors] == [("PL200", "/calls/2/bind/y")]


# ---- the commands -----------------------------------------------------------------------------------------------

def write(tmp_path, params, bind):
    c, p = tmp_path / "scale.json", tmp_path / "p.json"
    c.write_text(json.dumps(contract(params), indent=2))
    p.write_text(json.dumps(pipeline(bind), indent=2))
    return str(c), str(p)


@pytest.mark.parametrize("command", ["check", "link"])
def test_the_commands_refuse_it_with_exit_1_at_the_bind_entry(tmp_path, capsys, command):
    from pipelink.cli import main
    c, p = write(tmp_path, APART, {"x": "out", "y": "out"})
    out = tmp_path / "k.cubin"
    rc = main([command, c, "--pipeline", p, "--format", "json", *(["-o", str(out)] if command == "link" else [])])
    captured = capsys.readouterr()
    assert rc == 1 and "Traceback" not in captured.err
    diags = json.loads(captured.out)["diagnostics"]
    found = [d for d in diags if d["code"] == "PL200"]
    assert found and found[0]["location"]["file"] == p and found[0]["location"]["pointer"] == "/calls/1/bind/y"
    assert {d["code"] for d in diags if d["severity"] == "error"} == {"PL200"}
    assert sorted(f.name for f in tmp_path.iterdir()) == ["p.json", "scale.json"]   # nothing written


def test_check_accepts_the_declared_call(tmp_path, capsys):
    from pipelink.cli import main
    c, p = write(tmp_path, IN_PLACE, {"x": "out", "y": "out"})
    rc = main(["check", c, "--pipeline", p])
    assert rc == 0, capsys.readouterr().err


def test_check_refuses_a_bad_declaration_with_exit_1(tmp_path, capsys):
    from pipelink.cli import main
    c, p = write(tmp_path, [X, dict(Y, may_alias=["q"]), N], {"x": "out", "y": "out"})
    for args in ([c], [c, "--pipeline", p]):
        rc = main(["check", *args])
        err = capsys.readouterr().err
        assert rc == 1 and "PL201" in err and "at /entry/params/1/may_alias/0" in err and "Traceback" not in err


# ---- every pipeline the repository ships ------------------------------------------------------------------------

def _contracts_by_name() -> dict:
    root = Path(__file__).resolve().parents[1]
    out = {}
    for path in [*root.glob("contracts/*.json"), *root.glob("case_studies/**/*.json"), *root.glob("examples/**/*.json")]:
        raw = json.loads(path.read_text())
        if isinstance(raw, dict) and "pipelink_contract" in raw:
            out.setdefault(raw["name"], []).append(path)
    return out


def _shipped_call_pipelines() -> list[Path]:
    root = Path(__file__).resolve().parents[1]
    paths = [*root.glob("pipelines/*.json"), *root.glob("case_studies/**/*.json")]
    docs = {p: json.loads(p.read_text()) for p in paths}
    return sorted(p for p, doc in docs.items() if isinstance(doc, dict) and "pipeline" in doc and "calls" in doc)


def test_every_shipped_call_binds_tensors_the_contracts_allow():
    from pipelink.core.aliasing import undeclared_sharing
    by_name = _contracts_by_name()
    pipelines = _shipped_call_pipelines()
    assert len(pipelines) >= 8
    for path in pipelines:
        for call in json.loads(path.read_text())["calls"]:
            for contract_path in by_name[call.get("component", call["name"])]:
                params = params_of(json.loads(contract_path.read_text()))
                assert not undeclared_sharing(params, call.get("bind", {})), (path, call["name"], contract_path)


# --- inspect shows the declaration --------------------------------------------------------------

def test_inspect_shows_may_alias_in_text_and_json(tmp_path, capsys):
    """The written parameter's may_alias had shown only as a missing __restrict__: the text says it, the JSON has it
    on each parameter (a const one: aliased_by), in the entry and the entries form alike."""
    from pipelink.cli import main
    entries = dict(contract([]), params=copy.deepcopy(IN_PLACE),
                   threads={"warps": 4, "roles": [{"name": "r", "warps": 4}]}, entries=[{"name": "work", "symbol": "scale_work", "role": "r", "params": ["x", "y", "N"]}])
    del entries["entry"]
    for raw, name in ((contract(IN_PLACE), "a.json"), (entries, "b.json")):
        (tmp_path / name).write_text(json.dumps(raw))
        assert main(["inspect", str(tmp_path / name)]) == 0
        out = capsys.readouterr().out
        assert "  may_alias y may share a tensor with x (an in-place update): declared without __restrict__" in out
        assert main(["inspect", "--format", "json", str(tmp_path / name)]) == 0
        params = json.loads(capsys.readouterr().out)["inputs"][0]["contract"]["params"]
        assert [(p["name"], p["decl"], p["may_alias"], p["aliased_by"]) for p in params] == [
            ("x", "const float* x", [], ["y"]), ("y", "float* y", ["x"], []), ("N", "int N", [], [])]
    (tmp_path / "c.json").write_text(json.dumps(contract(APART)))
    assert main(["inspect", str(tmp_path / "c.json")]) == 0
    assert "  may_alias " not in capsys.readouterr().out
    assert main(["inspect", "--format", "json", str(tmp_path / "c.json")]) == 0
    params = json.loads(capsys.readouterr().out)["inputs"][0]["contract"]["params"]
    assert [(p["decl"], p["may_alias"]) for p in params] == [("const float* __restrict__ x", []),
                                                             ("float* __restrict__ y", []), ("int N", [])]
