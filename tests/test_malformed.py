"""Malformed input, one regression test per finding: the JSON reader's limits and refusals (every JSON
input goes through it), and the pipeline file's schema."""
import json
from types import SimpleNamespace

import pytest

from pipelink.core import jsonread, validate

from pipelink.cli import _parser, main
from pipelink.core.diagnostics import CODES, DiagnosticSink
from pipelink.core.jsonread import JSONError, MAX_BYTES, MAX_DEPTH, parse
from pipelink.core.loader import load_contract_bytes
from pipelink.core.model import Source
from pipelink.core.pipeline import DISPATCHES, SCHEDULES, load_pipeline
from pipelink.harness.shipped import REPO, shipped_pipelines
from pipelink.linker.passes import cache

ROWSUM = REPO / "pipelines" / "rowsum.json"
ROWSUM_CONTRACTS = [str(REPO / "contracts" / f"{n}.json") for n in ("tile_load", "tile_transform", "block_rowsum")]
CASE_PIPELINE = REPO / "case_studies" / "moe_four_owners" / "integration" / "moe.pipeline.json"


def refused(data: bytes) -> JSONError:
    with pytest.raises(JSONError) as info:
        parse(data)
    return info.value


# --- the reader ----------------------------------------------------------------------------------

def test_reads_what_json_reads():
    doc = b'{"a": [1, -2, 0.5, 1e3, true, false, null], "s": "\\u00e9\\ud83d\\ude00\\n", "o": {}}'
    assert parse(doc) == json.loads(doc)
    assert parse(b"[18446744073709551615, -9223372036854775808]") == [2**64 - 1, -2**63]


def test_empty_and_whitespace():
    assert refused(b"").code == "PL003"
    e = refused(b" \n\t")
    assert e.code == "PL003" and (e.line, e.column) == (1, 1)


def test_size_limit(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b'{"a": "' + b"x" * MAX_BYTES + b'"}')
    with pytest.raises(JSONError) as info:
        jsonread.read_bytes(big)
    assert info.value.code == "PL130"
    assert refused(b" " * (MAX_BYTES + 1)).code == "PL130"
    assert f"{MAX_BYTES // 2**20} MiB" in CODES["PL130"].hint


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 10_000, 1_000_000])
def test_nesting_limit_without_recursion(depth):
    e = refused(b"[" * depth + b"]" * depth)
    assert e.code == "PL131" and (e.line, e.column) == (1, MAX_DEPTH + 1)
    assert f"{MAX_DEPTH} deep" in CODES["PL131"].hint


def test_nesting_at_the_limit_is_read():
    assert parse(b'{"k": ' * (MAX_DEPTH - 1) + b"[]" + b"}" * (MAX_DEPTH - 1)) is not None


@pytest.mark.parametrize("number", [b"9" * 5000, b"-" + b"9" * 5000, str(2**64).encode(), str(-2**63 - 1).encode(),
                                    b"1e999", b"-1e400"])
def test_numbers_out_of_range(number):
    e = refused(b'{\n  "n": ' + number + b"\n}")
    assert e.code == "PL132" and (e.line, e.column, e.pointer) == (2, 8, "/n")
    assert len(e.message) < 200


@pytest.mark.parametrize("word", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_infinity_are_not_json(word):
    e = refused(b'[1, ' + word + b"]")
    assert e.code == "PL006" and e.column == 5 and "not a JSON number" in e.message


def test_not_utf8_is_located():
    e = refused(b'{\n  "name": "caf\xe9"\n}')
    assert e.code == "PL006" and (e.line, e.column) == (2, 15) and "0xe9" in e.message


def test_bom():
    e = refused(b'\xef\xbb\xbf{"a": 1}')
    assert e.code == "PL006" and (e.line, e.column) == (1, 1) and "byte order mark" in e.message


@pytest.mark.parametrize("text", [b'["\\ud800"]', b'["x\\udc00"]', b'{"\\ud83d": 1}'])
def test_lone_surrogates(text):
    e = refused(text)
    assert e.code == "PL006" and "lone surrogate" in e.message and e.line == 1


def test_control_character_in_a_string():
    e = refused(b'{"a": "line\nbreak"}')
    assert e.code == "PL006" and (e.line, e.column, e.pointer) == (1, 12, "/a") and "U+000A" in e.message


def test_duplicate_keys_at_any_depth():
    e = refused(b'{"a": {"b": 1,\n "b": 2}}')
    assert e.code == "PL006" and (e.line, e.column, e.pointer) == (2, 2, "/a") and "'b' appears twice" in e.message


@pytest.mark.parametrize("text", [b'{"a": [1, 2', b'{"a": "abc', b'{"a": 1} x', b'[1,]', b'{"a" 1}', b"[01]", b"[.5]"])
def test_syntax_errors_are_located(text):
    e = refused(text)
    assert e.code == "PL006" and e.line == 1 and e.column is not None


def test_floats_are_read_and_left_to_the_schemas():
    assert parse(b"[4.0, -0.0, 1E2]") == [4.0, -0.0, 100.0]  # where an integer goes, the schema refuses 4.0


# --- every JSON input uses it --------------------------------------------------------------------

HOSTILE = {
    "deep": b"[" * 100_000,
    "huge int": b'{"pipelink_contract": ' + b"1" * 5000 + b"}",
    "duplicate key": b'{"name": "a", "name": "b"}',
    "bom": b'\xef\xbb\xbf{}',
    "surrogate": b'{"name": "\\udfff"}',
}


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_contracts(kind):
    sink = DiagnosticSink()
    assert load_contract_bytes(HOSTILE[kind], Source("c.json"), sink) is None
    (d,) = sink.items
    assert d.exit_code == 2 and d.location.file == "c.json" and d.location.line is not None


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_pipeline_files_on_the_command_line(kind, tmp_path, capsys):
    p = tmp_path / "p.json"
    p.write_bytes(HOSTILE[kind])
    assert main(["check", *ROWSUM_CONTRACTS, "--pipeline", str(p), "--map", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"--> {p}:1:" in err
    assert sorted(x.name for x in tmp_path.iterdir()) == ["p.json"]


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_a_json_file_is_a_contract_whatever_it_holds(kind, tmp_path, capsys):
    p = tmp_path / "c.json"
    p.write_bytes(HOSTILE[kind])
    assert main(["check", str(p)]) == 2
    err = capsys.readouterr().err
    assert f"--> {p}:1:" in err and "PL004" not in err


@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_damaged_cache_entries_miss(kind, link_cache_dir):
    key = kind.encode().hex().ljust(64, "0")[:64]
    from pipelink.runtime.manifest import Manifest
    good = SimpleNamespace(cubin=b"\x7fELF", manifest=Manifest("k", (32, 1, 1), cubin_sha256=cache._sha256(b"\x7fELF")),
                           link_map="", link_picture="", glue="", monolithic=None, diagnostics=[])
    entry = cache.store(key, good)
    assert cache.load(key) is not None
    (entry / "manifest.json").write_bytes(HOSTILE[kind])
    assert cache.load(key) is None and not entry.exists()


# --- pipeline files: the schema --------------------------------------------------------------------

def pipeline_doc(tmp_path, **fields):
    doc = json.loads(ROWSUM.read_text())
    doc.update(fields)
    for k in [k for k, v in fields.items() if v is ...]:
        del doc[k]
    p = tmp_path / "p.json"
    p.write_text(json.dumps(doc))
    sink = DiagnosticSink()
    return load_pipeline(p, sink), sink


def located(sink):
    return [(d.code, d.location.pointer) for d in sink.items]


@pytest.mark.parametrize("path", [*(p.path for p in shipped_pipelines()), CASE_PIPELINE], ids=lambda p: p.name)
def test_shipped_pipelines_are_valid(path):
    sink = DiagnosticSink()
    assert load_pipeline(path, sink) is not None and not sink.items
    assert validate.violations(validate.PIPELINE_SCHEMA, json.loads(path.read_text())) == []


def test_schema_is_versioned_installed_and_linked():
    s = validate.schema(validate.PIPELINE_SCHEMA)
    assert s["$schema"].endswith("2020-12/schema") and s["$id"].endswith("/pipeline/v1.json")
    assert json.loads((REPO / "pipelines" / "pipeline-v1.schema.json").read_text()) == s
    assert s["additionalProperties"] is False


def test_the_command_line_offers_the_schema_choices():
    link = _parser()._subparsers._group_actions[0].choices["link"]
    choices = {a.dest: tuple(a.choices) for a in link._actions if a.choices}
    assert choices["schedule"] == SCHEDULES and choices["dispatch"] == DISPATCHES
    s = validate.schema(validate.PIPELINE_SCHEMA)["properties"]
    assert tuple(s["schedule"]["enum"]) == SCHEDULES and tuple(s["dispatch"]["enum"]) == DISPATCHES


@pytest.mark.parametrize("key", ["wire", "schedul", "Wires", "kernel"])
def test_unknown_keys_are_refused(key, tmp_path):
    spec, sink = pipeline_doc(tmp_path, **{key: ["tile_load.tile -> tile_transform.src"]})
    assert spec is None and located(sink) == [("PL133", "")] and repr(key) in sink.items[0].message
    assert sink.items[0].exit_code == 2


@pytest.mark.parametrize("wires", [None, 3, "a.b -> c.d", {"a": "b"}])
def test_wires_of_another_type(wires, tmp_path, capsys):
    spec, sink = pipeline_doc(tmp_path, wires=wires)
    assert spec is None and located(sink) == [("PL133", "/wires")]
    assert main(["check", *ROWSUM_CONTRACTS, "--pipeline", str(tmp_path / "p.json")]) == 2


@pytest.mark.parametrize("wire", [None, 7, ["a.b", "c.d"], "", "x" * 301])
def test_a_wire_that_is_not_a_wire_string(wire, tmp_path):
    spec, sink = pipeline_doc(tmp_path, wires=["tile_load.tile -> tile_transform.src", wire])
    assert spec is None and located(sink) == [("PL133", "/wires/1")]


def test_repeated_keys(tmp_path):
    p = tmp_path / "p.json"
    p.write_text('{"pipeline": 1,\n "schedule": "sequential",\n "schedule": "persistent"}')
    sink = DiagnosticSink()
    assert load_pipeline(p, sink) is None
    (d,) = sink.items
    assert d.code == "PL006" and (d.location.line, d.location.column) == (3, 2) and "'schedule'" in d.message


@pytest.mark.parametrize("field, value, pointer", [
    ("pipeline", 2, "/pipeline"), ("pipeline", True, "/pipeline"), ("name", "1kernel", "/name"),
    ("name", "k" * 65, "/name"), ("components", ["tile_load", "tile_load"], "/components"),
    ("components", ["tile load"], "/components/0"), ("schedule", "sequentail", "/schedule"),
    ("schedule", None, "/schedule"), ("dispatch", "greedy", "/dispatch"), ("debug_events", "yes", "/debug_events"),
    ("specialize", {"M": 64.0}, "/specialize/M"), ("specialize", {"M": 2**63}, "/specialize/M"),
    ("specialize", {"not an ident": 1}, "/specialize"), ("description", "x" * 5000, "/description"),
    ("geometry", {"TILE_M": "64"}, "/geometry/TILE_M"), ("geometry", {"TILE_M": 2**31}, "/geometry/TILE_M"),
    ("geometry", [64], "/geometry"),
    ("components", [f"c{i}" for i in range(65)], "/components"),
])
def test_schema_violations_are_located(field, value, pointer, tmp_path):
    spec, sink = pipeline_doc(tmp_path, **{field: value})
    assert spec is None and located(sink) == [("PL133", pointer)]


def test_all_violations_at_once(tmp_path):
    spec, sink = pipeline_doc(tmp_path, schedule="x", dispatch="y", wire=[])
    assert spec is None and sorted(located(sink)) == [("PL133", ""), ("PL133", "/dispatch"), ("PL133", "/schedule")]


def test_every_field_reaches_the_spec(tmp_path):
    spec, sink = pipeline_doc(tmp_path, schedule="sequential", dispatch="dynamic", debug_events=True,
                              specialize={"M": 64}, name="k")
    assert not sink.items
    assert (spec.name, spec.schedule, spec.dispatch, spec.debug_events, spec.specialize) == (
        "k", "sequential", "dynamic", True, {"M": 64})
    assert [str(w) for w in spec.wires] == ["tile_load.tile -> tile_transform.src",
                                            "tile_transform.dst -> block_rowsum.tile"]
    assert spec.wires[1].where.pointer == "/wires/1"


def test_not_a_pipeline_file(tmp_path):
    for doc in ([], {"name": "x"}, json.loads((REPO / "contracts" / "tile_load.json").read_text())):
        (tmp_path / "p.json").write_text(json.dumps(doc))
        sink = DiagnosticSink()
        assert load_pipeline(tmp_path / "p.json", sink) is None
        assert located(sink) == [("PL001", "")]


# --- semantic errors after the schema stay as they were, now located -------------------------------

def test_a_wire_that_does_not_parse(tmp_path):
    spec, sink = pipeline_doc(tmp_path, wires=["tile_load.tile"])
    assert spec is None and located(sink) == [("PL001", "/wires/0")]


def test_a_wire_to_a_missing_component_names_the_wire(tmp_path, capsys):
    pipeline_doc(tmp_path, wires=["tile_load.tile -> nobody.src"])
    assert main(["check", *ROWSUM_CONTRACTS, "--pipeline", str(tmp_path / "p.json"), "--format", "json"]) == 1
    (d,) = json.loads(capsys.readouterr().out)["diagnostics"]
    assert d["code"] == "PL062" and d["location"] == {"file": str(tmp_path / "p.json"), "pointer": "/wires/0"}


def test_a_wire_to_a_missing_port_points_at_both(tmp_path, capsys):
    pipeline_doc(tmp_path, wires=["tile_load.tile -> tile_transform.nope"])
    assert main(["check", *ROWSUM_CONTRACTS, "--pipeline", str(tmp_path / "p.json"), "--format", "json"]) == 1
    (d,) = json.loads(capsys.readouterr().out)["diagnostics"]
    assert d["code"] == "PL062" and d["location"]["pointer"] == "/ports"
    assert d["related"] == [{"file": str(tmp_path / "p.json"), "pointer": "/wires/0"}]


def test_a_wire_to_a_global_memory_port_says_those_are_not_wired(tmp_path, capsys):
    """block_rowsum's `out` is a declared gmem port: the wire points at it and says why it is no wire's end (the hint
    had said 'its out ports: none')."""
    pipeline_doc(tmp_path, wires=["tile_load.tile -> tile_transform.src", "block_rowsum.out -> tile_transform.src"])
    assert main(["check", *ROWSUM_CONTRACTS, "--pipeline", str(tmp_path / "p.json"), "--format", "json"]) == 1
    found = [d for d in json.loads(capsys.readouterr().out)["diagnostics"] if d["code"] == "PL062"]
    assert found and found[0]["code"] == "PL062" and found[0]["location"]["pointer"].startswith("/ports/")
    assert "global-memory port" in found[0]["hint"]


@pytest.mark.parametrize("value, want", [
    (2**31 - 32, (0, [])), (2**31 - 1, (1, [("PL032", "/geometry/tile_sequence/grid/0")])),
    (2**31, (2, [("PL001", "/specialize/M")])), (-2**31, (2, [("PL001", "/specialize/M")])),
    (-2**31 - 1, (2, [("PL001", "/specialize/M")]))])
def test_a_specialized_value_fits_its_parameters_dtype(tmp_path, capsys, value, want):
    """M is an i32: a value past it had been baked in wrapped, with the manifest saying otherwise. (-2^31 fits, and
    makes the tile extent ceil_div(M, TILE_M) negative: PL001 too, no launch could use it. 2^31 - 1 fits, and the
    glue's (M + TILE_M - 1) / TILE_M wraps in int: PL032 at the extent.)"""
    pipeline_doc(tmp_path, specialize={"M": value})
    code = main(["check", *ROWSUM_CONTRACTS, "--pipeline", str(tmp_path / "p.json"), "--format", "json"])
    out = json.loads(capsys.readouterr().out)["diagnostics"]
    assert (code, sorted({(d["code"], d["location"]["pointer"]) for d in out})) == want, out


def test_specializing_a_missing_parameter_points_into_the_file(tmp_path, capsys):
    pipeline_doc(tmp_path, specialize={"Q": 4})
    assert main(["check", *ROWSUM_CONTRACTS, "--pipeline", str(tmp_path / "p.json"), "--format", "json"]) == 2
    (d,) = json.loads(capsys.readouterr().out)["diagnostics"]
    assert d["code"] == "PL001" and d["location"]["pointer"] == "/specialize/Q"


@pytest.mark.parametrize("value", ["9" * 5000, str(2**63), "x", ""])
def test_specialize_on_the_command_line_has_the_schema_range(value, tmp_path, capsys):
    assert main(["link", *ROWSUM_CONTRACTS, "--pipeline", str(ROWSUM), "--specialize", f"M={value}",
                 "-o", str(tmp_path / "k.cubin")]) == 2
    err = capsys.readouterr().err
    assert "error[PL001]: --specialize" in err and len(err) < 1000 and not list(tmp_path.iterdir())


def test_a_document_breaking_the_schema_a_million_times_reports_the_first_hundred(tmp_path, capsys):
    """Every violation had been found and printed (a 6 MB pipeline of bad wires ran for minutes and printed a
    gigabyte): the first MAX_VIOLATIONS are reported, then one line saying more follow."""
    from pipelink.core.validate import MAX_VIOLATIONS
    (tmp_path / "p.json").write_text(json.dumps({"pipeline": 1, "wires": [1] * 50000}))
    assert main(["check", *ROWSUM_CONTRACTS, "--pipeline", str(tmp_path / "p.json"), "--format", "json"]) == 2
    found = json.loads(capsys.readouterr().out)["diagnostics"]
    assert len(found) == MAX_VIOLATIONS + 1 and "more problems follow" in found[-1]["message"]


def test_a_field_that_is_not_taken_names_the_nearest_one_or_its_level():
    """An unknown field: the nearest name the object takes ('invocaton' -> 'invocation'), or that it is a
    top-level field put inside another object (a contract's `loader` inside `entry`), or the fields it takes."""
    import json
    from pipelink.core import validate
    from pathlib import Path
    raw = json.loads((Path(__file__).resolve().parent.parent / "contracts" / "tile_load.json").read_text())
    raw["entry"]["invocaton"] = "per_tile"
    raw["entry"]["loader"] = {"slot_bytes": 16, "slots": 1}
    raw["zzz"] = 1
    said = dict(validate.violations(validate.CONTRACT_SCHEMA, raw))
    assert "'invocaton' is not a field here (did you mean 'invocation'?)" in said["/entry"]
    assert "'loader' is a top-level field, not one of this object's" in said["/entry"]
    assert said[""].startswith("'zzz' is not a field here (fields: $schema, barriers,")
    said = dict(validate.violations(validate.PIPELINE_SCHEMA, {"pipeline": 1, "loader_l": "evict_first"}))
    assert said[""] == "'loader_l' is not a field here (did you mean 'loader_l2'?)"


def test_an_empty_components_list_is_refused():
    """`"components": []` lists none of the inputs (the docs say every input must be listed): PL133 at the field;
    the inputs' order is the field left out."""
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.core.pipeline import load_pipeline_dict
    sink = DiagnosticSink()
    assert load_pipeline_dict({"pipeline": 1, "components": []}, sink, "p.json") is None
    assert [(d.code, d.location.pointer) for d in sink.errors] == [("PL133", "/components")]
    assert load_pipeline_dict({"pipeline": 1}, DiagnosticSink(), "p.json").components == ()


def test_warps_of_an_unknown_name_without_roles_is_one_diagnostic():
    """threads.warps "four" with no roles: one PL029 at /threads/warps, not a second at the implied role's
    /threads/roles/0/warps, which the file does not have."""
    import json
    from pathlib import Path
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.core.loader import load_contract_dict
    from pipelink.core.model import Source
    raw = json.loads((Path(__file__).resolve().parent.parent / "contracts" / "tile_load.json").read_text())
    raw["threads"]["warps"] = "four"
    raw["threads"].pop("roles", None)
    sink = DiagnosticSink()
    assert load_contract_dict(raw, Source("c.json"), sink) is None
    assert [(d.code, d.location.pointer) for d in sink.errors] == [("PL029", "/threads/warps")], \
        [d.render() for d in sink.items]


def test_names_the_header_derives_do_not_collide():
    """Buffers 'a' and 'a_bytes' (smem_a_bytes names both), and geometry MAIN_WARPS beside the implied role
    'main', had passed check and failed the build at the generated header: PL022 at the contract."""
    import json
    from pathlib import Path
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.core.loader import load_contract_dict
    from pipelink.core.model import Source
    base = json.loads((Path(__file__).resolve().parent.parent / "contracts" / "block_rowsum.json").read_text())
    raw = json.loads(json.dumps(base))
    buf = raw["smem"]["buffers"][0]
    raw["smem"]["buffers"].append(dict(buf, name=buf["name"] + "_bytes"))
    sink = DiagnosticSink()
    assert load_contract_dict(raw, Source("c.json"), sink) is None
    assert [(d.code, d.location.pointer) for d in sink.errors] == [("PL022", "/smem/buffers/1/name")]
    raw = json.loads(json.dumps(base))
    raw["threads"].pop("roles", None)
    raw["geometry"].setdefault("provides", {})["MAIN_WARPS"] = 4
    sink = DiagnosticSink()
    assert load_contract_dict(raw, Source("c.json"), sink) is None
    assert ("PL022", "/geometry/provides/MAIN_WARPS") in [(d.code, d.location.pointer) for d in sink.errors]
