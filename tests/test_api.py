"""The top-level Python API: pipelink.check / build / link / load, every form of input, every error as a
PipelinkError with located diagnostics, save/load without a GPU, and nothing written on failure."""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest

import pipelink
import pipelink.api  # the schema test reads pipelink.api.load_pipeline, whichever test ran first
from pipelink import LinkOptions, PipelinkError, PipelineSpec
from pipelink.core.diagnostics import DiagnosticSink

REPO = Path(__file__).resolve().parent.parent
ROWSUM = REPO / "pipelines" / "rowsum.json"
NAMES = ("tile_load", "tile_transform", "block_rowsum")


@pytest.fixture(scope="module")
def objects(shipped_objects) -> list[Path]:
    return [shipped_objects[n] for n in NAMES]


@pytest.fixture(scope="module")
def linked(objects):
    return pipelink.link(objects, pipeline=ROWSUM, raise_on_error=True)


def codes(exc: PipelinkError) -> list[str]:
    return [d.code for d in exc.diagnostics if d.severity == "error"]


def test_package_functions_are_not_shadowed_by_submodules():
    import pipelink.authoring.builder  # noqa: F401  the modules behind build and check have names of their own
    import pipelink.core.checks  # noqa: F401
    assert callable(pipelink.check) and callable(pipelink.build) and pipelink.check.__module__ == "pipelink"


# --- every form of input ------------------------------------------------------------------------

def test_link_input_forms(objects, linked):
    from cuda.core import ObjectCode
    data = [p.read_bytes() for p in objects]
    forms = {
        "str": [str(p) for p in objects],
        "bytes and pairs": [data[0], (NAMES[1], data[1]), bytearray(data[2])],
        "ObjectCode": [ObjectCode.from_object(data[0], name="tile_load.o"), ObjectCode.from_object(str(objects[1])),
                       objects[2]],
        "generator": (p for p in objects),
    }
    for what, inputs in forms.items():
        result = pipelink.link(inputs, pipeline=json.loads(ROWSUM.read_text()), raise_on_error=True)
        assert result.cubin == linked.cubin, what


def test_backwards_compatible_link(objects):
    result = pipelink.link(objects, LinkOptions(pipeline=PipelineSpec(name="rowsum", schedule="sequential")))
    assert result.ok and result.manifest.kernel == "rowsum"


def test_check_forms(objects):
    alone = pipelink.check([objects[0], ("tile_transform.o", objects[1].read_bytes())])
    assert [c.name for c in alone.components] == list(NAMES[:2]) and alone.link_map is None
    together = pipelink.check(objects, pipeline=json.loads(ROWSUM.read_text()))
    assert together.target == "sm_90" and "kernel rowsum" in together.link_map
    assert pipelink.check(REPO / "contracts" / "tile_load.json").components[0].name == "tile_load"


def test_unsupported_input_type_is_a_type_error(objects):
    with pytest.raises(TypeError, match=r"input 1 is a int; pipelink takes a path .*bytes.*ObjectCode"):
        pipelink.link([objects[0], 42])
    with pytest.raises(TypeError, match="a path, a dict or a PipelineSpec"):
        pipelink.check(objects, pipeline=["rowsum"])


# --- errors: one exception, located diagnostics ------------------------------------------------


def test_no_inputs_wrong_options_and_a_mapping_are_said_plainly(objects):
    """An empty list (a glob that matched nothing) is a located PL001, not an IndexError; options that are
    not a LinkOptions and a dict of inputs (whose keys alone would be read) are TypeErrors that say so."""
    result = pipelink.link([])
    assert not result.ok and [d.code for d in result.diagnostics] == ["PL001"]
    assert "no inputs" in result.diagnostics[0].message
    with pytest.raises(PipelinkError, match="no inputs"):
        pipelink.link([], raise_on_error=True)
    with pytest.raises(PipelinkError, match="no inputs"):
        pipelink.check([])
    with pytest.raises(TypeError, match="LinkOptions"):
        pipelink.link(objects, options="fast")
    with pytest.raises(TypeError, match="mapping"):
        pipelink.check({str(objects[0]): 1})


@pytest.mark.parametrize("field,value,pointer", [
    ("schedule", "bogus", "/schedule"), ("dispatch", "bogus", "/dispatch"), ("profile_tasks", -1, "/profile_tasks"),
    ("profile_tasks", "8", "/profile_tasks"), ("specialize", {"M": "64"}, "/specialize/M"),
    ("wires", "tile_load.tile -> tile_transform.src", "/wires"), ("components", "tile_load", "/components"),
    ("wait_backoff_ns", -5, "/wait_backoff_ns"), ("deal", "sideways", "/deal"),
])
def test_a_pipeline_spec_built_in_python_meets_the_files_schema(objects, field, value, pointer):
    """A PipelineSpec skips the file's reader: each field is held to the schema a file is (PL133 at the field's
    pointer), through pipeline= and LinkOptions(pipeline=) alike, never an AttributeError deep in a pass."""
    spec = dataclasses.replace(pipelink.api.load_pipeline(ROWSUM, DiagnosticSink()), **{field: value})
    for result in (pipelink.link(objects, pipeline=spec), pipelink.link(objects, LinkOptions(pipeline=spec))):
        assert not result.ok and result.diagnostics[0].code == "PL133", result.diagnostics
        assert result.diagnostics[0].location.pointer == pointer
    with pytest.raises(PipelinkError, match="PL133"):
        pipelink.check(objects, pipeline=spec)


def test_a_pipeline_spec_takes_wires_as_the_file_writes_them(objects, linked):
    spec = PipelineSpec(name="rowsum", components=NAMES,
                        wires=("tile_load.tile -> tile_transform.src", "tile_transform.dst -> block_rowsum.tile"))
    assert pipelink.link(objects, pipeline=spec, raise_on_error=True).cubin == linked.cubin

def test_missing_file(tmp_path):
    missing = str(tmp_path / "nope.o")
    with pytest.raises(PipelinkError) as info:
        pipelink.check([missing])
    assert codes(info.value) == ["PL002"] and info.value.diagnostics[0].location.file == missing
    result = pipelink.link([missing])  # link reports in its result unless asked to raise
    assert not result.ok and result.diagnostics[0].code == "PL002"
    with pytest.raises(PipelinkError, match="PL002"):
        pipelink.link([missing], raise_on_error=True)


def test_bad_bytes():
    with pytest.raises(PipelinkError) as info:
        pipelink.check([("bad.o", b"\x00not an object")])
    assert codes(info.value) == ["PL004"] and info.value.diagnostics[0].location.file == "bad.o"
    with pytest.raises(PipelinkError) as info:
        pipelink.link([b""], raise_on_error=True)
    assert codes(info.value) == ["PL003"] and info.value.diagnostics[0].location.file == "<input 0>"


@pytest.mark.parametrize("doc, pointer", [
    ({"pipeline": 1, "name": "rowsum", "schedule": "sideways"}, "/schedule"),
    ({"pipeline": 1, "wires": ["tile_load.tile <- x"]}, "/wires/0"),
    ({"pipeline": 1, "specialize": {"M": float("nan")}}, ""),
    ({"pipeline": 1, "specialize": {"M": 2**70}}, "/specialize/M"),
])
def test_bad_pipeline_dict(objects, tmp_path, doc, pointer):
    with pytest.raises(PipelinkError) as info:
        pipelink.check(objects, pipeline=doc)
    d = info.value.diagnostics[0]
    assert d.location.file == "<pipeline>" and d.location.pointer == pointer
    result = pipelink.link(objects, pipeline=doc)
    assert not result.ok and result.diagnostics == info.value.diagnostics
    with pytest.raises(PipelinkError):
        result.kernel()
    with pytest.raises(PipelinkError):
        result.save(tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_failed_link_raises_and_writes_nothing(objects, tmp_path):
    with pytest.raises(PipelinkError) as info:  # tile_transform alone has an unconnected input
        pipelink.link(objects[1:2], raise_on_error=True)
    assert "PL060" in codes(info.value)
    assert list(tmp_path.iterdir()) == []


# --- save and load ------------------------------------------------------------------------------

def test_save_load_round_trip(linked, tmp_path):
    cubin = linked.save(tmp_path / "k")
    assert cubin == tmp_path / "k" / "rowsum.cubin"
    assert sorted(p.name for p in (tmp_path / "k").iterdir()) == ["rowsum.cubin", "rowsum.json", "rowsum.map"]
    for path in (tmp_path / "k", cubin):
        image = pipelink.load(path, device=None)
        assert image.cubin == linked.cubin and image.manifest == linked.manifest
    assert (tmp_path / "k" / "rowsum.map").read_text() == linked.link_map


def test_load_errors(linked, tmp_path):
    with pytest.raises(PipelinkError, match="PL002"):
        pipelink.load(tmp_path, device=None)  # no cubin
    linked.save(tmp_path)
    (tmp_path / "rowsum.json").write_text(json.dumps(dict(linked.manifest.to_json(), cubin_sha256="0" * 64)))
    with pytest.raises(PipelinkError, match="PL035"):
        pipelink.load(tmp_path, device=None)
    (tmp_path / "rowsum.json").write_text('{"kernel": 7}')
    with pytest.raises(PipelinkError, match="PL009"):
        pipelink.load(tmp_path, device=None)
    (tmp_path / "rowsum.json").unlink()
    with pytest.raises(PipelinkError, match="PL002"):
        pipelink.load(tmp_path / "rowsum.cubin", device=None)
    shutil.copy(tmp_path / "rowsum.cubin", tmp_path / "other.cubin")
    with pytest.raises(PipelinkError, match="PL001"):
        pipelink.load(tmp_path, device=None)


def test_save_never_overwrites_an_input(objects, tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    inputs = [shutil.copy(p, d / p.name) for p in objects]
    pipeline = shutil.copy(ROWSUM, d / "rowsum.json")  # where the manifest would go
    result = pipelink.link(inputs, pipeline=pipeline, raise_on_error=True)
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    with pytest.raises(PipelinkError) as info:
        result.save(d)
    assert codes(info.value) == ["PL120"]
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before


# --- build --------------------------------------------------------------------------------------

def test_build(tmp_path):
    contract = REPO / "contracts" / "tile_load.json"
    source = REPO / "components" / "tile_load" / "tile_load.cu"
    out = pipelink.build(source, ("tile_load.json", contract.read_bytes()), tmp_path / "tile_load.o")
    assert out.is_file() and pipelink.check(out).components[0].name == "tile_load"
    bad = json.loads(contract.read_text())
    bad["threads"]["warps"] = "four"
    with pytest.raises(PipelinkError) as info:
        pipelink.build(source, json.dumps(bad).encode(), tmp_path / "bad.o")
    assert info.value.diagnostics[0].location.file == "<contract>" and info.value.diagnostics[0].location.pointer
    with pytest.raises(PipelinkError, match="PL002"):
        pipelink.build(source, tmp_path / "missing.json", tmp_path / "bad.o")
    assert not (tmp_path / "bad.o").exists()
    # a contract given as bytes names no file: its display name may be the output's (it was refused, PL120)
    named = tmp_path / "named.o"
    assert pipelink.build(source, (str(named), contract.read_bytes()), named).is_file()
    for timeout in (0, -1, True, "5", float("nan")):
        with pytest.raises(PipelinkError, match="PL001"):
            pipelink.build(source, contract, tmp_path / "t.o", timeout_s=timeout)


# --- the README's snippet -----------------------------------------------------------------------

def readme_snippet() -> str:
    text = (REPO / "README.md").read_text()
    section = text[text.index("## From Python"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_snippet_links_and_saves(shipped_objects, tmp_path, monkeypatch):
    """The README's "From Python" code, in a folder laid out as after ./scripts/demo, up to the GPU."""
    (tmp_path / "build" / "components").mkdir(parents=True)
    for name in NAMES:
        shutil.copy(shipped_objects[name], tmp_path / "build" / "components" / f"{name}.o")
    shutil.copytree(REPO / "pipelines", tmp_path / "pipelines")
    monkeypatch.chdir(tmp_path)
    code = readme_snippet()
    link_part = code[:code.index("kernel = pipelink.load(")]
    assert "pipelink.link(" in link_part and ".save(" in link_part
    scope: dict = {}
    exec(compile(link_part, "README.md", "exec"), scope)
    assert scope["result"].ok
    saved = re.search(r'pipelink\.load\("([^"]+)"\)', code).group(1)
    assert pipelink.load(saved, device=None).manifest.kernel == "rowsum"


@pytest.mark.parametrize("call", [
    lambda o, r: pipelink.link(5), lambda o, r: pipelink.link([None]), lambda o, r: pipelink.link([("n.o", 5)]),
    lambda o, r: pipelink.link(o, pipeline=[]), lambda o, r: pipelink.check(5),
    lambda o, r: pipelink.build(None, contract="c.json", output="o.o"),
    lambda o, r: pipelink.build("s.cu", contract={"a": 1}, output="o.o"),
    lambda o, r: r.save(None), lambda o, r: r.save(b"/tmp/k"), lambda o, r: pipelink.load(5, device=None),
    lambda o, r: pipelink.load(b"k.cubin", device=None)], ids=range(11))
def test_an_argument_of_the_wrong_type_is_a_pipelink_error_and_a_type_error(objects, linked, call):
    """The API's promise: bad input raises PipelinkError (here PL001); being a TypeError too, it is caught as one."""
    with pytest.raises(pipelink.PipelinkError) as err:
        call([str(p) for p in objects], linked)
    assert isinstance(err.value, TypeError) and [d.code for d in err.value.diagnostics] == ["PL001"]


NUL, SURROGATE = "/tmp/a\x00b", "/tmp/\ud800.json"
SOURCE, CONTRACT = str(REPO / "components/tile_load/tile_load.cu"), str(REPO / "contracts/tile_load.json")


@pytest.mark.parametrize("call, says", [
    (lambda o, r, t: pipelink.link([NUL]), "NUL byte"), (lambda o, r, t: pipelink.check([NUL]), "NUL byte"),
    (lambda o, r, t: pipelink.link(o, pipeline=NUL), "NUL byte"),
    (lambda o, r, t: pipelink.link(o, pipeline=SURROGATE), "no file name can hold"),
    (lambda o, r, t: pipelink.build(NUL, CONTRACT, t / "x.o"), "the source"),
    (lambda o, r, t: pipelink.build(SOURCE, NUL, t / "x.o"), "the contract"),
    (lambda o, r, t: pipelink.build(SOURCE, CONTRACT, NUL), "the output"),
    (lambda o, r, t: pipelink.build(SOURCE, CONTRACT, t / "x.o", archs="sm_90"), "archs=['sm_90'] for one"),
    (lambda o, r, t: pipelink.build(SOURCE, CONTRACT, t / "x.o", include_dirs="/tmp"), "a list of strings"),
    (lambda o, r, t: pipelink.build(SOURCE, CONTRACT, t / "x.o", archs=["sm_999"]), "unknown target 'sm_999'"),
    (lambda o, r, t: pipelink.check(o, arch=90), "unknown target 90"),
    (lambda o, r, t: pipelink.load(NUL, device=None), "NUL byte"),
    (lambda o, r, t: pipelink.load(t, device="cuda"), "device ordinal"),
    (lambda o, r, t: r.save(""), "empty path"), (lambda o, r, t: r.save(SURROGATE), "no file name can hold"),
], ids=range(15))
def test_an_argument_no_path_or_option_can_be_is_pl001(objects, linked, tmp_path, call, says):
    """A path no system call takes (a NUL byte, a lone surrogate), a string where a list belongs (not read
    character by character), an unknown target, a device that is no ordinal: PL001 before anything runs, never
    a ValueError or UnicodeError from deep inside; nothing written."""
    with pytest.raises(pipelink.PipelinkError) as err:
        call([str(p) for p in objects], linked, tmp_path)
    assert [d.code for d in err.value.diagnostics] == ["PL001"] and says in str(err.value), str(err.value)
    assert not (tmp_path / "x.o").exists()


def test_a_manifest_given_for_the_kernel_is_pl004(linked, tmp_path):
    cubin = linked.save(tmp_path)
    with pytest.raises(pipelink.PipelinkError) as err:
        pipelink.load(cubin.with_suffix(".json"), device=None)
    assert [d.code for d in err.value.diagnostics] == ["PL004"] and "not a cubin" in str(err.value)
    assert pipelink.load(tmp_path, device=None).manifest.kernel == "rowsum"


@pytest.mark.parametrize("field", ["geometry", "specialize", "wires", "calls", "components", "loader_slots",
                                   "dispatch", "standalone", "name"])
def test_a_pipeline_spec_field_of_none_is_pl133_at_the_field(objects, field):
    """None where a field's default is no None (a dict, a list, an int, a string) had been skipped as 'absent' by the
    schema check and crashed the link (AttributeError, TypeError) or linked with None: PL133 at the field."""
    from pipelink.core.pipeline import PipelineSpec
    result = pipelink.link([str(p) for p in objects], pipeline=PipelineSpec(**{field: None}))
    assert [(d.code, d.location.pointer) for d in result.diagnostics] == [("PL133", f"/{field}")], \
        [d.render() for d in result.diagnostics]


def test_link_options_may_name_the_pipeline_by_path_or_dict(objects, tmp_path):
    """LinkOptions(pipeline=...) takes what link(pipeline=...) takes (a path or a dict had crashed the link)."""
    from pipelink.linker.passes import LinkOptions
    inputs = [str(p) for p in objects]
    pipe = REPO / "pipelines" / "rowsum.json"
    assert pipelink.link(inputs, options=LinkOptions(pipeline=str(pipe))).manifest.kernel == "rowsum"
    assert pipelink.link(inputs, options=LinkOptions(pipeline=json.loads(pipe.read_text()))).ok
    missing = pipelink.link(inputs, options=LinkOptions(pipeline=str(tmp_path / "none.json")))
    assert [d.code for d in missing.diagnostics] == ["PL002"]


def test_link_options_and_specs_of_the_wrong_type_are_usage_errors():
    """A LinkOptions field of the wrong type is a PipelinkUsageError (PL001, a TypeError) when it is made: it had
    crashed the link deep inside (arch=['x'], pipeline=None) or been taken as the default (arch='', optimize=None).
    A PipelineSpec's empty list where a map goes (or the reverse) meets the schema (PL133), not `.items()`."""
    import pipelink
    from pipelink.core.diagnostics import PipelinkUsageError
    from pipelink.core.pipeline import PipelineSpec, spec_document
    from pipelink.linker.passes import LinkOptions
    for bad in ({"arch": ["sm_90"]}, {"arch": b"sm_90"}, {"arch": ""}, {"pipeline": None}, {"optimize": None},
                {"monolithic": Path("x")}, {"cache": 1}):
        with pytest.raises(PipelinkUsageError) as info:
            LinkOptions(**bad)
        assert info.value.diagnostics[0].code == "PL001" and isinstance(info.value, TypeError)
    assert spec_document(PipelineSpec(specialize=[]))["specialize"] == []
    assert spec_document(PipelineSpec(components={}))["components"] == {}
    assert "specialize" not in spec_document(PipelineSpec(specialize={}))
    with pytest.raises(pipelink.PipelinkError) as info:
        pipelink.check([str(Path(pipelink.__file__).parent.parent / "contracts" / "tile_load.json")],
                       pipeline=PipelineSpec(geometry=[]))
    assert [d.code for d in info.value.diagnostics] == ["PL133"]


@pytest.mark.parametrize("field, value, code", [
    ("after", ["a"], None), ("bind", {"partial": "p2"}, None), ("after", "a", "PL133"), ("after", None, "PL133"),
    ("bind", (("M",),), "PL133"), ("events", ["partials"], "PL133"), ("after_previous_layer", "a", "PL133")])
def test_a_call_spec_takes_lists_and_dicts_and_refuses_other_kinds(field, value, code):
    """A CallSpec written in Python with a list or a dict where the file's reader makes tuples links as the file
    would; a string or None where a list goes is PL133 at the field (a TypeError or ValueError had come from
    deep in the link)."""
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.core.pipeline import CallSpec, PipelineSpec, checked_spec
    spec = PipelineSpec(calls=(CallSpec(name="a", component="splitk_partial"),
                               CallSpec(name="b", component="splitk_reduce", **{field: value})))
    sink = DiagnosticSink()
    got = checked_spec(spec, sink)
    if code is None:
        assert got is not None and not sink.items
        assert all(isinstance(getattr(got.calls[1], f), tuple) for f in ("after", "bind", "events", "stacked"))
    else:
        assert got is None and [(d.code, d.location.pointer) for d in sink.errors] == [(code, f"/calls/1/{field}")]


@pytest.mark.parametrize("fields", [dict(given=[1]), dict(extra=5), dict(source=3)])
def test_a_pipeline_specs_own_bookkeeping_of_the_wrong_type_is_pl001(fields):
    import pipelink
    from pipelink.core.pipeline import PipelineSpec
    result = pipelink.link([str(REPO / "contracts" / "tile_load.json")], pipeline=PipelineSpec(**fields))
    assert [d.code for d in result.diagnostics] == ["PL001"]


def test_check_takes_together_as_a_bool():
    import pipelink
    with pytest.raises(pipelink.PipelinkError) as err:
        pipelink.check([str(REPO / "contracts" / "tile_load.json")], together="no")
    assert isinstance(err.value, TypeError) and err.value.diagnostics[0].code == "PL001"


@pytest.mark.parametrize("device", ["a", -1, True, 1.0])
def test_loading_a_kernel_on_a_device_that_is_no_ordinal_is_pl001_before_the_driver(device):
    """LinkResult.kernel(device='a') had reached the driver (PL196, cuInit failed on a machine without one)."""
    from pipelink.runtime.launch import Kernel
    with pytest.raises(TypeError) as err:
        Kernel.load(b"", {}, device)
    assert err.value.diagnostics[0].code == "PL001"


def test_build_issues_its_notes_through_warnings_as_it_does_its_warnings(tmp_path):
    """seg_silu's contract lists sm_90 and sm_90a; built for sm_90 only, the build says (PL199, a note) that an sm_90a
    link takes its sm_90 IR. The command prints it; the API had dropped it. It comes as a pipelink.PipelinkNote, not
    a PipelinkWarning (werror=True leaves it be), again on a cached build."""
    import warnings
    contract = REPO / "contracts" / "seg_silu.json"
    source = REPO / "components" / "seg_silu" / "seg_silu.cu"
    for out, werror in (("a.o", False), ("b.o", True)):  # b.o: the build cache's copy of a.o's
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert pipelink.build(source, contract, tmp_path / out, archs=["sm_90"], werror=werror) == tmp_path / out
        notes = [w.message for w in caught if isinstance(w.message, pipelink.PipelinkNote)]
        assert [(m.diagnostic.code, m.diagnostic.severity) for m in notes] == [("PL199", "note")], out
        assert "note[PL199]" in str(notes[0]) and "at /targets/archs/1" in str(notes[0])
        assert not any(isinstance(w.message, pipelink.PipelinkWarning) for w in caught)
        assert (tmp_path / out).is_file()
