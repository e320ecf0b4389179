"""Names a contract or pipeline gives to what becomes C++ (core/identifiers.py): refused on the contract, at the
name, before a build or a link meets them; and where only the compiler can tell (a name the toolkit's headers
declare), its error turned into a diagnostic at the name."""
from __future__ import annotations

import copy
import json

import pytest

from pipelink.core import identifiers
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.loader import load_contract_dict
from pipelink.core.model import Source
from pipelink.harness.shipped import REPO

TEMPLATE = REPO / "examples" / "component-template"


def _saxpy() -> dict:
    raw = json.loads((TEMPLATE / "contracts" / "saxpy.json").read_text())
    raw.pop("ports")
    return raw


@pytest.mark.parametrize("name, kind, says", [
    ("x__y", "part", "C++ reserves"), ("_Tile", "whole", "C++ reserves"), ("_tile", "whole", None),
    ("int", "whole", "keyword"), ("int", "part", None), ("threadIdx", "whole", "built-in"), ("pl", "whole", "built-in"),
    ("main", "global", "entry point"), ("main", "whole", None), ("_", "global", "PTX"), ("saxpy", "global", None),
    ("Tile", "namespace", "pipelink's type pl::Tile"), ("Tile", "whole", None), ("ring", "namespace", "reopen it"),
    ("warp_index", "namespace", "redeclare"), ("saxpy", "namespace", None), ("int", "namespace", "keyword"),
    ("PL_COMPONENT_ABI", "whole", "pipelink's headers"), ("PL_COMPONENT_ABI", "part", None)])
def test_the_rules_are_a_pure_function_of_the_name_and_its_use(name, kind, says):
    why = identifiers.problem(name, kind)
    assert (why is None) if says is None else (says in why)


CASES = {  # each: a change to the template's contract, the code and the JSON pointer it is reported at
    "component keyword": (lambda c: c.update(name="class"), "PL188", "/name"),
    "component reserved": (lambda c: c.update(name="a__b"), "PL188", "/name"),
    "component a member of pl": (lambda c: c.update(name="warp_index"), "PL188", "/name"),
    "component a namespace of pl": (lambda c: c.update(name="glue"), "PL188", "/name"),
    "symbol the header's alias": (lambda c: c["entry"].update(symbol="pl_component"), "PL188", "/entry/symbol"),
    "geometry a pipelink macro": (lambda c: c["geometry"].setdefault("provides", {}).update(PL_COMPONENT_ABI=1),
                                  "PL188", "/geometry/provides/PL_COMPONENT_ABI"),
    "symbol keyword": (lambda c: c["entry"].update(symbol="for"), "PL188", "/entry/symbol"),
    "symbol main": (lambda c: c["entry"].update(symbol="main"), "PL188", "/entry/symbol"),
    "param keyword": (lambda c: c["entry"]["params"][0].update(name="float"), "PL188", "/entry/params/0/name"),
    "param tile": (lambda c: c["entry"]["params"][0].update(name="tile"), "PL188", "/entry/params/0/name"),
    "param is the symbol": (lambda c: c["entry"]["params"][2].update(name="saxpy"), "PL188", "/entry/params/2/name"),
    "role reserved": (lambda c: c["threads"].update(roles=[{"name": "x__warp_begin", "warps": 4}]), "PL188",
                      "/threads/roles/0/name"),
    "roles spelled alike": (lambda c: c["threads"].update(roles=[{"name": "p", "warps": 2}, {"name": "P", "warps": 2}]),
                            "PL022", "/threads/roles/1/name"),
    "geometry keyword": (lambda c: c["geometry"].setdefault("consumes", {}).update({"int": {"min": 1}}), "PL188",
                         "/geometry/consumes/int"),
    "geometry a header function": (lambda c: c["geometry"].setdefault("consumes", {}).update(
        {"warp_begin": {"min": 1}}), "PL022", "/geometry/consumes/warp_begin"),
    "geometry a role's function": (lambda c: (c["threads"].update(roles=[{"name": "ld", "warps": 4}]),
                                              c["geometry"].setdefault("consumes", {}).update({"ld_instance": {"min": 1}})),
                                   "PL022", "/geometry/consumes/ld_instance"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_name_the_generated_code_cannot_take_is_refused_at_the_name(case):
    change, code, pointer = CASES[case]
    raw = _saxpy()
    raw.setdefault("geometry", {})
    change(raw)
    sink = DiagnosticSink()
    assert load_contract_dict(copy.deepcopy(raw), Source("c.json"), sink) is None
    assert [(d.code, d.location.pointer) for d in sink.errors] == [(code, pointer)], [d.render() for d in sink.errors]


def test_the_template_and_every_shipped_contract_pass():
    for path in [TEMPLATE / "contracts" / "saxpy.json", *sorted((REPO / "contracts").glob("*.json"))]:
        raw = json.loads(path.read_text())
        if "pipelink_contract" not in raw:
            continue
        sink = DiagnosticSink()
        assert load_contract_dict(raw, Source(str(path)), sink) is not None, [d.render() for d in sink.items]


def test_compiler_errors_that_quote_a_name_are_read_back():
    log = ('k_glue.cu(18): error: more than one instance of overloaded function "printf" has "C" linkage\n'
           '  extern "C" __global__ void printf(int N) {\n1 error detected in the compilation of "k_glue.cu".')
    assert set(identifiers.named_in_errors(log)) == {"printf", "C"}


def test_a_kernel_named_as_a_toolkit_function_is_pl077_at_the_name(tmp_path, capsys):
    """No list can hold every name the CUDA headers declare: NVRTC's error quoting the kernel's name is turned into
    PL077 at the pipeline's /name instead of PL075 (a bug in the glue)."""
    from pipelink.cli import main
    obj = tmp_path / "saxpy.o"
    assert main(["build", str(TEMPLATE / "src" / "saxpy.cu"), "--contract", str(TEMPLATE / "contracts" / "saxpy.json"),
                 "-o", str(obj)]) == 0
    pipe = tmp_path / "p.json"
    pipe.write_text(json.dumps({"pipeline": 1, "name": "printf"}))
    capsys.readouterr()
    assert main(["link", str(obj), "--pipeline", str(pipe), "-o", str(tmp_path / "k.cubin"), "--no-cache"]) == 1
    err = capsys.readouterr().err
    assert "error[PL077]" in err and "CUDA headers declare" in err and f"--> {pipe}, at /name" in err, err
    assert "PL075" not in err and "PL008" not in err and not (tmp_path / "k.cubin").exists()


def test_an_entry_named_as_a_toolkit_function_is_pl188_at_its_symbol(tmp_path, capsys):
    from pipelink.cli import main
    raw = _saxpy()
    raw["entry"]["symbol"] = "sqrtf"
    (tmp_path / "c.json").write_text(json.dumps(raw))
    src = (TEMPLATE / "src" / "saxpy.cu").read_text().replace("void saxpy(", "void sqrtf(")
    (tmp_path / "c.cu").write_text(src)
    code = main(["build", str(tmp_path / "c.cu"), "--contract", str(tmp_path / "c.json"), "-o", str(tmp_path / "c.o")])
    err = capsys.readouterr().err
    assert code == 1 and "error[PL188]" in err and "entry symbol 'sqrtf'" in err and "at /entry/symbol" in err, err
    assert not (tmp_path / "c.o").exists()


def test_a_kernel_parameter_named_as_another_components_entry_is_a_clash_in_the_link():
    """Component c's parameter `d`, linked with component d: inside the kernel the parameter hides d's function."""
    from pipelink.linker.names import clashes
    glue = 'extern "C" __global__ void k(float* x, int d) {\n  pl::Tile tile;\n  c(tile, x, d);\n  d(tile, x);\n}'
    assert clashes(glue, "k", ["x", "d"], ["c", "d"]) == [
        ("kernel parameter", "d", "an entry symbol of the link: inside the kernel the parameter would hide the function")]


def test_kernel_parameters_a_pipeline_names_are_checked_at_the_pipelines_field():
    """`layers` and a call's `bind` name kernel parameters: a reserved or keyword name is PL188 at that field
    (the link had blamed the contract's parameter, or passed check and failed the link)."""
    from pipelink.core.pipeline import load_pipeline_dict
    doc = {"pipeline": 1, "name": "k", "layers": "pl_layers", "calls": [
        {"name": "a", "component": "rmsnorm", "per_layer": True, "bind": {"weight": "int", "x": "x_in"}}]}
    sink = DiagnosticSink()
    assert load_pipeline_dict(doc, sink, "p.json") is None
    assert [(d.code, d.location.pointer) for d in sink.errors] == [("PL188", "/layers"), ("PL188", "/calls/0/bind/weight")]
    doc["layers"], doc["calls"][0]["bind"]["weight"] = "NL", "w"
    assert load_pipeline_dict(doc, DiagnosticSink(), "p.json") is not None


@pytest.mark.parametrize("kernel, param, code, at", [
    ("NULL", "scale", "PL077", "/name"), ("assert", "scale", "PL077", "/name"),
    ("CUDART_VERSION", "scale", "PL077", "/name")])
def test_a_name_the_cuda_headers_define_as_a_macro_is_named(kernel, param, code, at):
    """A macro's name never reaches the compiler's errors (it is expanded first, and the errors then quote other,
    innocent names): the link asks NVRTC which names are macros after the glue's includes and reports those
    alone, never PL075 (a bug in the glue)."""
    from contract_factory import shipped_component
    from pipelink.core.pipeline import PipelineSpec
    from pipelink.linker.passes import LinkOptions, run_passes
    comps = [shipped_component("tile_load"),
             shipped_component("tile_transform", lambda c: c["entry"]["params"][0].update(name=param)),
             shipped_component("block_rowsum")]
    spec = PipelineSpec(name=kernel, source="p.json")
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=spec), components=comps, until="compile")
    errors = [d for d in ctx.sink.items if d.severity == "error"]
    assert [d.code for d in errors] == [code] and "is a macro the CUDA headers define" in errors[0].message, \
        [d.render() for d in errors]
    assert errors[0].location.pointer == at


@pytest.mark.parametrize("where, name", [("param", "CUDART_VERSION"), ("symbol", "assert")])
def test_a_contract_name_the_cuda_headers_define_as_a_macro_is_named_in_build(tmp_path, capsys, where, name):
    """In `pipelink build` too a macro's name reaches nvcc expanded (`int 13000`): the build asks nvcc which of the
    contract's names are macros after the header's and the source's includes, and reports PL188 at each, not
    PL019 at the source; nothing is written."""
    from pipelink.cli import main
    raw = _saxpy()
    src = (TEMPLATE / "src" / "saxpy.cu").read_text()
    if where == "param":
        raw["entry"]["params"][2]["name"] = name  # the scalar a
        src = src.replace("float a,", f"float {name},").replace("a * x[k]", f"{name} * x[k]")
        pointer = "/entry/params/2"
    else:
        raw["entry"]["symbol"] = name
        src = src.replace("void saxpy(", f"void {name}(")
        pointer = "/entry/symbol"
    (tmp_path / "c.json").write_text(json.dumps(raw))
    (tmp_path / "c.cu").write_text(src)
    code = main(["build", str(tmp_path / "c.cu"), "--contract", str(tmp_path / "c.json"), "-o", str(tmp_path / "c.o")])
    err = capsys.readouterr().err
    assert code == 1 and "error[PL188]" in err and f"'{name}' is a macro" in err and f"at {pointer}" in err, err
    assert "PL019" not in err and not (tmp_path / "c.o").exists()


@pytest.mark.parametrize("name", ["INFINITY", "HUGE_VALF", "M_PI", "INT_MAX", "FLT_MAX"])
def test_a_parameter_named_as_a_toolkit_macro_is_pl188(name):
    """`float INFINITY` is expanded to a parameter of function type (`float (__builtin_inff())`): it compiled,
    linked, and called through a float. A macro the toolkit's headers define is no name for a parameter."""
    import json
    from pathlib import Path
    from pipelink.core import identifiers
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.core.loader import load_contract_dict
    from pipelink.core.model import Source
    assert "macro" in identifiers.problem(name, "whole")
    assert identifiers.problem("INF", "whole") is None and identifiers.problem(name, "part") is None
    raw = json.loads((Path(__file__).resolve().parent.parent / "contracts" / "tile_transform.json").read_text())
    raw["entry"]["params"][0]["name"] = name
    sink = DiagnosticSink()
    assert load_contract_dict(raw, Source("c.json"), sink) is None
    assert ("PL188", "/entry/params/0/name") in [(d.code, d.location.pointer) for d in sink.errors]
