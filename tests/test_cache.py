"""The link cache: a hit gives the same outputs without a pass; anything that shapes the output misses;
damaged entries heal; the cache can be turned off. No GPU needed."""
import dataclasses
import json
import os
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipelink import toolchain

from pipelink.cli import main
from pipelink.core.diagnostics import Diagnostic, DiagnosticSink, Location
from pipelink.core.pipeline import PipelineSpec, WireSpec, load_pipeline
from pipelink.harness.shipped import REPO
from pipelink.linker.passes import cache
from pipelink.linker.passes import LinkOptions, link

ROWSUM = REPO / "pipelines" / "rowsum.json"


@pytest.fixture
def cache_root(tmp_path, monkeypatch) -> Path:
    """A cache of this test alone."""
    root = tmp_path / "cache"
    monkeypatch.setenv("PIPELINK_CACHE_DIR", str(root))
    monkeypatch.delenv("PIPELINK_CACHE", raising=False)
    return root


@pytest.fixture
def rowsum_inputs(shipped_objects, tmp_path) -> list[str]:
    """Copies of the rowsum components, so a test may change their bytes."""
    d = tmp_path / "objects"
    d.mkdir()
    spec = load_pipeline(ROWSUM, DiagnosticSink())
    return [str(shutil.copy(shipped_objects[n], d / f"{n}.o")) for n in spec.components]


def rowsum_options(**kw) -> LinkOptions:
    spec = load_pipeline(ROWSUM, DiagnosticSink())
    spec = dataclasses.replace(spec, **{name: kw.pop(name) for name in ("dispatch", "schedule", "debug_events")
                                        if name in kw})
    return LinkOptions(pipeline=spec, **kw)


def entries(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("??/*") if p.is_dir())


def pass_names(result) -> list[str]:
    return [name for name, _ in result.timings]


def test_miss_then_hit_gives_the_same_outputs_without_a_pass(cache_root, rowsum_inputs):
    first = link(rowsum_inputs, rowsum_options(monolithic=True))
    assert first.ok and not first.context.cache_hit
    assert pass_names(first)[:11] == ["read", "check", "conform", "resolve", "clusters", "allocate", "generate",
                                      "compile", "link", "verify", "emit"]
    [entry] = entries(cache_root)
    assert {p.name for p in entry.iterdir()} == {"kernel.cubin", "manifest.json", "link.map", "link.svg", "glue.cu",
                                                 "monolithic.cu", "diagnostics.json", "sha256.json"}

    again = link(rowsum_inputs, rowsum_options(monolithic=True))
    assert again.ok and again.context.cache_hit
    assert pass_names(again) == ["cache"]  # no pass ran
    assert again.cubin == first.cubin and again.manifest == first.manifest and again.link_map == first.link_map
    assert again.link_picture == first.link_picture and again.link_picture.startswith("<svg")
    assert again.glue == first.glue and again.monolithic == first.monolithic
    assert again.diagnostics == first.diagnostics
    ctx = again.context
    assert ctx.resolved is None and ctx.allocation is None and ctx.cubin == first.cubin and ctx.target == "sm_90"


def test_a_changed_input_byte_misses(cache_root, rowsum_inputs):
    assert not link(rowsum_inputs, rowsum_options()).context.cache_hit
    with open(rowsum_inputs[1], "ab") as f:
        f.write(b"\0")  # past the ELF's last section: readers do not notice, the key must
    changed = link(rowsum_inputs, rowsum_options())
    assert changed.ok and not changed.context.cache_hit
    assert len(entries(cache_root)) == 2


def test_the_key_covers_sidecars_and_paths(rowsum_inputs, tmp_path):
    opts = rowsum_options()
    key = cache.link_key(rowsum_inputs, opts)
    sidecar = Path(rowsum_inputs[0] + ".contract.json")
    sidecar.write_text("{}")
    assert cache.link_key(rowsum_inputs, opts) != key  # the read pass would now see the sidecar
    sidecar.unlink()
    assert cache.link_key(rowsum_inputs, opts) == key
    # the same bytes elsewhere: the manifest records each object's path, so it is another link
    moved = tmp_path / "elsewhere.o"
    shutil.copy(rowsum_inputs[0], moved)
    assert cache.link_key([str(moved), *rowsum_inputs[1:]], opts) != key


def test_archive_members_sidecars_are_in_the_key(rowsum_inputs, tmp_path):
    import subprocess
    lib = tmp_path / "objects" / "lib.a"
    subprocess.run(["ar", "rcs", str(lib), *rowsum_inputs], check=True)
    key = cache.link_key([str(lib)], rowsum_options())
    (tmp_path / "objects" / "tile_load.o.contract.json").write_text("{}")  # next to the archive: lib.a(tile_load.o)
    assert cache.link_key([str(lib)], rowsum_options()) != key


def _pipeline(kw):
    return lambda o: dataclasses.replace(o, pipeline=dataclasses.replace(o.pipeline, **kw(o.pipeline)))


CHANGES = {
    "arch": lambda o: dataclasses.replace(o, arch="sm_90a"),
    "monolithic": lambda o: dataclasses.replace(o, monolithic=True),
    "optimize": lambda o: dataclasses.replace(o, optimize=False),
    "name": _pipeline(lambda p: {"name": "other"}),
    "components": _pipeline(lambda p: {"components": p.components[::-1]}),
    "wires": _pipeline(lambda p: {"wires": p.wires[:1]}),
    "wire ports": _pipeline(lambda p: {"wires": (dataclasses.replace(p.wires[0], in_port="other"), *p.wires[1:])}),
    "schedule": _pipeline(lambda p: {"schedule": "warp_specialized"}),
    "dispatch": _pipeline(lambda p: {"dispatch": "dynamic"}),
    "debug_events": _pipeline(lambda p: {"debug_events": True}),
    "specialize": _pipeline(lambda p: {"specialize": dict(p.specialize, N=4096)}),
    "geometry": _pipeline(lambda p: {"geometry": dict(p.geometry, TILE_K=64)}),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_every_option_is_in_the_key(rowsum_inputs, change):
    opts = rowsum_options()
    key = cache.link_key(rowsum_inputs, opts)
    assert cache.link_key(rowsum_inputs, CHANGES[change](opts)) != key


def test_where_the_pipeline_came_from_is_not_in_the_key(rowsum_inputs):
    opts = rowsum_options()
    key = cache.link_key(rowsum_inputs, opts)
    moved = dataclasses.replace(
        opts.pipeline, source="/elsewhere/rowsum.json", extra={"description": "moved"},
        wires=tuple(WireSpec(w.producer, w.out_port, w.consumer, w.in_port, text=w.text.replace(" ", ""))
                    for w in opts.pipeline.wires))  # spelled differently, the same wire
    assert cache.link_key(rowsum_inputs, dataclasses.replace(opts, pipeline=moved, cache=False)) == key


def test_the_key_covers_every_field_by_construction():
    """The key is every field of the frozen options, recursively, but those marked NOT_IN_KEY: a field
    added later is in the key unless it says otherwise, and an option of a type the key cannot spell
    fails loudly instead of being left out."""
    opts = rowsum_options()
    doc = cache.options_doc(opts)
    left_out = {f.name for f in dataclasses.fields(LinkOptions) if f.name not in doc}
    assert left_out == {"cache"}
    assert {f.name for f in dataclasses.fields(PipelineSpec)} - set(doc["pipeline"]) == {"source", "extra", "given"}
    assert set(doc["pipeline"]["wires"][0]) == {"type", "producer", "out_port", "consumer", "in_port"}

    @dataclasses.dataclass(frozen=True)
    class Newer(LinkOptions):
        tuning: float = 0.5
        hook: object = None
    assert cache.options_doc(Newer(pipeline=opts.pipeline))["tuning"] == 0.5
    with pytest.raises(TypeError, match="cannot key a link on a function"):
        cache.options_doc(Newer(pipeline=opts.pipeline, hook=lambda: None))
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.arch = "sm_90a"  # type: ignore[misc]


def test_only_the_modules_that_decide_the_output_are_in_the_key():
    """Editing the launcher, the CLI or the reports keeps every cached link; editing a pass does not."""
    modules = set(cache.link_modules())
    assert {"linker.passes", "linker.resolve", "linker.allocate", "linker.glue", "linker.event_glue", "linker.emit",
            "runtime.manifest", "toolchain", "linker.verify", "linker.picture", "linker.monolithic", "linker.collect",
            "core.checks", "linker.cache", "authoring.header", "formats.inputs", "core.model"} <= modules
    assert not modules & {"runtime.launch", "runtime.workspace", "runtime.driver", "runtime.torch", "runtime.scalars", "cli",
                          "api", "report", "formats.outputs", "harness.demo", "harness.shipped"}
    assert all(cache._module_file(m) is not None for m in modules)


@pytest.mark.parametrize("kw", [{"arch": "sm_90a"}, {"dispatch": "dynamic"}], ids=["arch", "dispatch"])
def test_a_changed_option_misses(cache_root, rowsum_inputs, kw):
    assert link(rowsum_inputs, rowsum_options()).ok
    other = link(rowsum_inputs, rowsum_options(**kw))
    assert other.ok and not other.context.cache_hit
    assert link(rowsum_inputs, rowsum_options(**kw)).context.cache_hit


def test_a_changed_toolchain_or_linker_misses(cache_root, rowsum_inputs, monkeypatch):
    assert link(rowsum_inputs, rowsum_options()).ok
    real = toolchain.nvjitlink_version()
    monkeypatch.setattr(toolchain, "nvjitlink_version", lambda: (real[0], real[1] + 1))
    newer = link(rowsum_inputs, rowsum_options())
    assert newer.ok and not newer.context.cache_hit
    key = cache.link_key(rowsum_inputs, rowsum_options())
    monkeypatch.setattr(toolchain, "nvrtc_version", lambda: (99, 0))
    assert cache.link_key(rowsum_inputs, rowsum_options()) != key
    key = cache.link_key(rowsum_inputs, rowsum_options())
    monkeypatch.setattr(cache, "source_hash", lambda: "an edited linker")
    assert cache.link_key(rowsum_inputs, rowsum_options()) != key


DAMAGE = {
    "missing cubin": lambda d: (d / "kernel.cubin").unlink(),
    "bad manifest": lambda d: (d / "manifest.json").write_text("{\"manifest\": 1,"),
    "truncated cubin": lambda d: (d / "kernel.cubin").write_bytes((d / "kernel.cubin").read_bytes()[:100]),
    "bad diagnostics": lambda d: (d / "diagnostics.json").write_text('[{"code": "PL999"}]'),
    # files handed on as they are (--map, --emit-glue): their bytes are checked against the entry's digests
    "truncated map": lambda d: (d / "link.map").write_bytes((d / "link.map").read_bytes()[:100]),
    "edited picture": lambda d: (d / "link.svg").write_text((d / "link.svg").read_text().replace("<", "[", 1)),
    "edited glue": lambda d: (d / "glue.cu").write_text((d / "glue.cu").read_text() + "\n// edited"),
    "missing digests": lambda d: (d / "sha256.json").unlink(),
    # what could block or exhaust the reader: a file nested past the JSON reader's depth, a FIFO
    "deeply nested digests": lambda d: (d / "sha256.json").write_text("[" * 100000),
    "digests a fifo": lambda d: ((d / "sha256.json").unlink(), os.mkfifo(d / "sha256.json")),
    "cubin a fifo": lambda d: ((d / "kernel.cubin").unlink(), os.mkfifo(d / "kernel.cubin")),
    # an entry stored under another key (moved, or two entries swapped) is no hit
    "another key": lambda d: (d / "sha256.json").write_text(
        (d / "sha256.json").read_text().replace('"key": "', '"key": "0', 1)),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_entry_misses_and_is_rewritten(cache_root, rowsum_inputs, damage):
    first = link(rowsum_inputs, rowsum_options())
    [entry] = entries(cache_root)
    DAMAGE[damage](entry)
    healed = link(rowsum_inputs, rowsum_options())
    assert healed.ok and not healed.context.cache_hit and healed.cubin == first.cubin
    assert (healed.link_map, healed.link_picture, healed.glue) == (first.link_map, first.link_picture, first.glue)
    assert entries(cache_root) == [entry] and (entry / "kernel.cubin").read_bytes() == first.cubin
    assert link(rowsum_inputs, rowsum_options()).context.cache_hit
    assert not list(cache_root.glob(".*"))  # nothing left aside


def test_storing_twice_leaves_one_good_entry(cache_root, rowsum_inputs):
    """Two processes that missed together both store; the second rename loses and is discarded."""
    result = link(rowsum_inputs, rowsum_options())
    key = cache.link_key(rowsum_inputs, rowsum_options())
    assert cache.store(key, result) is None  # the link already stored it
    assert cache.store(key, result) is None
    assert len(entries(cache_root)) == 1 and not list(cache_root.glob(".tmp-*"))
    assert cache.load(key).cubin == result.cubin


def test_warnings_are_replayed(cache_root):
    warning = Diagnostic("PL073", "the kernel spills", Location(file="a.o", component="c", line=3), severity="warning",
                         related=(Location(pointer="/registers"),))
    custom = Diagnostic("PL073", "x", hint="a hint of its own", severity="note")
    assert Diagnostic.from_json(warning.to_json()) == warning and Diagnostic.from_json(custom.to_json()) == custom
    from pipelink.runtime.manifest import Manifest
    fake = SimpleNamespace(cubin=b"\x7fELF", manifest=Manifest("k", (32, 1, 1), target="sm_90",
                                                               cubin_sha256=cache._sha256(b"\x7fELF")),
                           link_map="map", link_picture="<svg/>", glue="glue", monolithic=None, diagnostics=[warning, custom])
    assert cache.store("ab" * 32, fake) == cache_root / "ab" / ("ab" * 32)
    assert cache.load("ab" * 32).diagnostics == [warning, custom]


def test_turned_off(cache_root, rowsum_inputs, monkeypatch):
    off = link(rowsum_inputs, rowsum_options(cache=False))
    assert off.ok and not cache_root.exists()
    assert link(rowsum_inputs, rowsum_options()).ok  # stores
    again = link(rowsum_inputs, rowsum_options(cache=False))
    assert not again.context.cache_hit and again.context.resolved is not None
    monkeypatch.setenv("PIPELINK_CACHE", "0")
    assert not link(rowsum_inputs, rowsum_options()).context.cache_hit
    assert "cache" not in pass_names(link(rowsum_inputs, rowsum_options()))


def test_unreadable_inputs_skip_the_cache(cache_root, rowsum_inputs, tmp_path):
    missing = [*rowsum_inputs[:2], str(tmp_path / "nowhere.o")]
    assert cache.link_key(missing, rowsum_options()) is None
    result = link(missing, rowsum_options())
    assert [d.code for d in result.diagnostics] == ["PL002"]
    truncated = tmp_path / "bad.a"
    truncated.write_bytes(b"!<arch>\nshort")
    assert cache.link_key([str(truncated)], rowsum_options()) is None
    assert link([str(truncated)], rowsum_options()).diagnostics[0].code == "PL005"


def test_failed_links_are_not_cached(cache_root, rowsum_inputs):
    result = link(rowsum_inputs[:2], rowsum_options())  # block_rowsum missing from the pipeline
    assert not result.ok and not cache_root.exists()


def test_an_unwritable_cache_does_not_fail_the_link(rowsum_inputs, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("PIPELINK_CACHE_DIR", str(blocker / "cache"))
    assert link(rowsum_inputs, rowsum_options()).ok


def test_cli_second_link_comes_from_the_cache(cache_root, rowsum_inputs, tmp_path, capsys):
    def run(*extra):
        out = tmp_path / "out.cubin"
        code = main(["link", "--pipeline", str(ROWSUM), *rowsum_inputs, "-o", str(out), "--time", "-v", *extra])
        _, err = capsys.readouterr()
        assert code == 0, err
        return out.read_bytes(), json.loads(out.with_suffix(".json").read_text()), err

    cubin, manifest, err = run()
    assert "pass resolve" in err
    cubin2, manifest2, err = run()
    assert "pass cache" in err and "pass resolve" not in err and "from the link cache" in err
    assert cubin2 == cubin and manifest2 == manifest
    _, _, err = run("--no-cache")
    assert "pass resolve" in err and "pass cache" not in err


def test_an_input_replaced_during_the_link_keeps_the_entry_out(cache_root, rowsum_inputs):
    """An input written or moved into place while the link ran (its mtime or ctime at or after the link began: a
    rebuild of the object) may be another version than the one the key read: the link stands, nothing is stored."""
    later = time.time() + 100
    os.utime(rowsum_inputs[1], (later, later))
    assert link(rowsum_inputs, rowsum_options()).ok
    assert entries(cache_root) == []
    os.utime(rowsum_inputs[1], (later - 200, later - 200))
    assert link(rowsum_inputs, rowsum_options()).ok and len(entries(cache_root)) == 1


def test_a_cache_root_the_system_cannot_look_into_is_no_cache():
    """PIPELINK_CACHE_DIR of 6000 characters (ENAMETOOLONG where the entry is looked for) had failed the whole
    link with PL002; a cache that cannot be used is a miss, and nothing is stored."""
    from pipelink.linker import cache
    root = Path("x/" * 3000)
    assert cache.load("0" * 64, root=root) is None
