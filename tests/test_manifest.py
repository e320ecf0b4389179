"""The manifest: one typed record written by the link and read, validated, by everything else; the
launcher ABI of persistent kernels (implicit parameters, workspace layout) defined once."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from pipelink.runtime.manifest import (IMPLICIT_PARAMS, MANIFEST_VERSION, WORKSPACE, EventRecord, Manifest, ManifestError,
                                       ParamSpec, workspace_header)

REPO = Path(__file__).resolve().parent.parent

PERSISTENT = {
    "manifest": 2, "pipelink": "0.1.0", "kernel": "chain", "target": "sm_90", "schedule": "persistent",
    "block": [128, 1, 1], "dynamic_smem": 1024,
    "params": [{"name": "x", "dtype": "f32", "pointer": True, "const": True},
               {"name": "M", "dtype": "i32", "pointer": False, "const": False}]
    + [{"name": p.name, "dtype": p.dtype, "pointer": p.pointer, "const": False, "implicit": p.kind}
       for p in IMPLICIT_PARAMS],
    "tiles": ["(ceil_div(M, 32)) + (ceil_div(M, 32))"], "tile_order": "row_major", "distribution": "grid_stride",
    "geometry": {"TM": 32},
    "components": [{"name": "a", "version": "1.0.0", "contract_hash": "0123456789abcdef", "object": "a.o"}],
    "wires": [{"from": "a.out", "to": "b.in", "kind": "zero_copy", "explicit": False}],
    "cubin_sha256": "ab" * 32,
    "tasks": {"a": "(ceil_div(M, 32))", "b": "(ceil_div(M, 32))"}, "dispatch": "dynamic",
    "workspace": {"header_words": 16, "task_counter_word": 8, "debug": False,
                  "events": [{"name": "e", "shape": ["ceil_div(M, 32)"], "notified_by": ["a i->i"],
                              "waited_by": ["b i->i"]}]},
    "resources": {"registers": 40, "frame_bytes": 0, "static_smem": 0, "named_barriers": 1},
}


def test_the_json_form_round_trips_in_the_order_it_was_always_written():
    m = Manifest.from_json(copy.deepcopy(PERSISTENT))
    assert json.dumps(m.to_json()) == json.dumps(PERSISTENT)  # same keys, same order
    assert Manifest.from_json(m.to_json()) == m
    assert m.persistent and [p.name for p in m.user_params] == ["x", "M"]
    assert m.workspace.events[0].words({"M": 100}) == 4 and m.tile_exprs[0].evaluate({"M": 64}) == 4


def test_roles_round_trip():
    roles = [{"name": "ml.producer", "warps": [0, 3], "instances": 1, "members": ["ml.producer"], "registers": 40,
              "setmaxnreg": True},
             {"name": "ml.consumer", "warps": [4, 11], "instances": 2, "members": ["ml.consumer", "epi.epilogue"],
              "registers": 232, "setmaxnreg": True}]
    m = Manifest.from_json(dict(copy.deepcopy(PERSISTENT), roles=roles))
    assert m.roles[1].members == ("ml.consumer", "epi.epilogue") and m.to_json()["roles"] == roles
    assert "roles" not in Manifest.from_json(PERSISTENT).to_json()


def test_a_cluster_round_trips():
    doc = dict(copy.deepcopy(PERSISTENT), cluster=[2, 1, 1])
    m = Manifest.from_json(doc)
    assert m.cluster == (2, 1, 1) and m.to_json()["cluster"] == [2, 1, 1] and Manifest.from_json(m.to_json()) == m
    assert Manifest.from_json(PERSISTENT).cluster is None and "cluster" not in Manifest.from_json(PERSISTENT).to_json()


def test_a_minimal_manifest_takes_defaults():
    m = Manifest.from_json({"kernel": "k", "block": [256]})
    assert m.block == (256, 1, 1) and m.dynamic_smem == 0 and m.params == () and m.version == MANIFEST_VERSION
    assert m.workspace is None and not m.persistent and m.describes(b"any cubin")


@pytest.mark.parametrize("change, words", [
    (lambda m: m.update(manifest=99), "version 99.*newer pipelink"),
    (lambda m: m.update(manifest=True), "manifest version True"),
    (lambda m: m["resources"].update(named_barriers="one"), "'resources'"),
    (lambda m: m.update(manifest=1), "unknown implicit kind .region_words."),
    (lambda m: m.update(colour="red"), "unknown field.*'colour'"),
    (lambda m: m["params"][0].update(shape=[1]), "unknown field.*'shape'"),
    (lambda m: m.update(schedule="eager"), "'schedule' must be one of"),
    (lambda m: m.update(dispatch="random"), "'dispatch'"),
    (lambda m: m.update(geometry={"TM": "32"}), "'geometry' must map names to integers"),
    (lambda m: m.update(cubin_sha256="XYZ"), "cubin_sha256"),
    (lambda m: m["wires"][0].pop("kind"), "wires\\[0\\] lacks 'kind'"),
    (lambda m: m["components"][0].update(version=1), "components\\[0\\]"),
    (lambda m: m["workspace"].update(task_counter_word=3), "task counter at word 3"),
    (lambda m: m["workspace"]["events"][0].update(shape=["M +"]), "event 'e' has a bad shape"),
    (lambda m: m.update(resources={"registers": "many"}), "'resources'"),
    (lambda m: m.update(tiles=["M ** 2"]), "bad tile expression"),
    (lambda m: m.update(kernel=""), "kernel's name"),
    (lambda m: m.update(cluster=[2, 2, 1]), "'cluster' must be \\[n, 1, 1\\]"),
    (lambda m: m.update(cluster=[16, 1, 1]), "'cluster'"),
    (lambda m: m.update(cluster=[0, 1, 1]), "'cluster'"),
    (lambda m: m.update(cluster=2), "'cluster'"),
    (lambda m: m.update(roles=[{"name": "r"}]), "roles\\[0\\] lacks"),
    (lambda m: m.update(roles=[{"name": "r", "warps": [3, 0], "instances": 1, "members": ["a.r"], "registers": 40,
                                "setmaxnreg": False}]), "roles\\[0\\]: a name"),
    (lambda m: m.update(roles=[{"name": "r", "warps": [0, 3], "instances": 1, "members": "a.r", "registers": 40,
                                "setmaxnreg": False}]), "roles\\[0\\]: a name"),
    (lambda m: m.update(roles={"name": "r"}), "'roles' must be a list"),
])
def test_every_field_is_validated_on_read(change, words):
    doc = copy.deepcopy(PERSISTENT)
    change(doc)
    with pytest.raises(ManifestError, match=words):
        Manifest.from_json(doc)


def test_the_records_are_frozen():
    m = Manifest.from_json(copy.deepcopy(PERSISTENT))
    with pytest.raises(AttributeError):
        m.kernel = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        m.params[0].dtype = "f64"  # type: ignore[misc]


def test_the_c_header_is_generated_from_the_python_layout():
    """include/pipelink/workspace.h is what workspace_header() writes (regenerate it after changing WORKSPACE)."""
    assert (REPO / "pipelink" / "include" / "pipelink" / "workspace.h").read_text() == workspace_header()
    events_h = (REPO / "pipelink" / "include" / "pipelink" / "events.h").read_text()
    assert "#include <pipelink/workspace.h>" in events_h and "struct Timeout" not in events_h
    fields = re.findall(r"unsigned long long (\w+);", workspace_header())
    assert tuple(fields) == WORKSPACE.report


def test_the_glue_and_the_manifest_declare_the_same_implicit_parameters():
    """One definition: the glue's kernel parameters and the manifest's implicit ones come from IMPLICIT_PARAMS."""
    from types import SimpleNamespace

    from pipelink.linker.glue import kernel_params
    r = SimpleNamespace(params=[], specialize={}, schedule="persistent", stream_k=None)
    assert kernel_params(r) == ["unsigned long long* __restrict__ pl_workspace", "unsigned long long pl_region_words"]
    r = SimpleNamespace(params=[], specialize={}, schedule="warp_specialized", stream_k=object())
    assert kernel_params(r) == ["float* __restrict__ pl_partials", "int pl_stream_k_tiles", "int pl_split_k"]
    kinds = {p.implicit for p in Manifest.from_json(copy.deepcopy(PERSISTENT)).params if p.implicit}
    assert kinds == {p.kind for p in IMPLICIT_PARAMS}


def test_a_param_spec_describes_itself():
    assert ParamSpec("x", "f32", True, True).describe() == "const f32*"
    assert ParamSpec("M", "i32", False, False).is_shape
    assert EventRecord("e", ("M * 2",)).words({"M": 3}) == 6


def _leaves(doc, path=()):
    """Every place in a JSON document: (path, value), containers included."""
    yield path, doc
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        yield from _leaves(v, (*path, k))


WRONG_VALUES = [{}, [], None, 1.5, True, "x", -1, 2**70, [[]], {"a": {}}]


@pytest.mark.parametrize("wrong", WRONG_VALUES, ids=repr)
def test_any_field_of_any_type_is_read_or_refused_as_a_bad_manifest(wrong):
    """Each place of a real manifest given each wrong JSON type in turn: read, or ManifestError (PL009 where the
    commands read it). A TypeError from an unhashable value had been `pipelink inspect`'s exit 3."""
    for path, _ in list(_leaves(PERSISTENT))[1:]:
        doc = copy.deepcopy(PERSISTENT)
        at = doc
        for k in path[:-1]:
            at = at[k]
        at[path[-1]] = copy.deepcopy(wrong)
        try:
            Manifest.from_json(doc)
        except ManifestError:
            pass
