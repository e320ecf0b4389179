"""The build cache (authoring/build_cache.py): `pipelink build` of the same inputs gives the same object
without running nvcc; an edited source, included header, contract or option misses; a damaged entry
misses and is rewritten; PIPELINK_CACHE=0 turns it off."""
import json
import shutil
from pathlib import Path

import pytest

from pipelink.authoring import build_cache
from pipelink.authoring.builder import BuildOptions, build_component
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.loader import load_contract_file
from pipelink.harness.shipped import REPO


@pytest.fixture
def cache_root(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("PIPELINK_CACHE_DIR", str(root))
    monkeypatch.delenv("PIPELINK_CACHE", raising=False)
    return root


@pytest.fixture
def component(tmp_path) -> tuple[Path, Path]:
    """seg_silu's source with a header of its own beside it, and its contract."""
    d = tmp_path / "src"
    d.mkdir()
    src = (REPO / "components" / "seg_silu" / "seg_silu.cu").read_text()
    (d / "local.h").write_text("#pragma once\nconstexpr float kLocal = 1.0f;\n")
    (d / "seg_silu.cu").write_text('#include "local.h"\n' + src)
    shutil.copy(REPO / "contracts" / "seg_silu.json", d / "seg_silu.json")
    return d / "seg_silu.cu", d / "seg_silu.json"


def build(source: Path, contract: Path, out: Path, **opts) -> tuple[bytes, list[str]]:
    sink = DiagnosticSink()
    c = load_contract_file(contract, sink)
    o = BuildOptions(**opts)
    assert build_component(c, contract.read_bytes(), source, out, sink, o), [d.render() for d in sink.items]
    return out.read_bytes(), o.nvcc_log


def compiled(log: list[str]) -> bool:
    return not log[-1].startswith("(cached:")


def test_the_same_inputs_hit_and_give_the_same_object(cache_root, component, tmp_path):
    source, contract = component
    first, log1 = build(source, contract, tmp_path / "a.o")
    second, log2 = build(source, contract, tmp_path / "b.o")
    assert compiled(log1) and not compiled(log2) and first == second
    entry = next((cache_root / "build").glob("*/*"))
    deps = [p for p, _ in json.loads((entry / "deps.json").read_text())]
    assert str(source.resolve()) in deps and str((source.parent / "local.h").resolve()) in deps
    assert not any("pipelink-build-" in p for p in deps)  # the generated header is in the key, not a dependency


def test_a_build_from_another_folder_hits_and_its_includes_still_count(cache_root, component, tmp_path,
                                                                        monkeypatch):
    """nvcc runs in the source's folder and names the source by its file name, so the command, and the key, are
    the same from any working folder; the files it read are recorded by their full paths (nvcc lists the header
    beside the source relative to its folder), so an edit of one still misses."""
    source, contract = component
    monkeypatch.chdir(source.parent)
    _, log1 = build(Path(source.name), Path(contract.name), tmp_path / "a.o")
    elsewhere = tmp_path / "x" / "y"
    elsewhere.mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    _, log2 = build(Path("../../src") / source.name, Path("../../src") / contract.name, tmp_path / "b.o")
    assert compiled(log1) and not compiled(log2)
    entry = next((cache_root / "build").glob("*/*"))
    assert str((source.parent / "local.h").resolve()) in [p for p, _ in json.loads((entry / "deps.json").read_text())]
    (source.parent / "local.h").write_text("#pragma once\nconstexpr float kLocal = 2.0f;\n")
    _, log3 = build(Path("../../src") / source.name, Path("../../src") / contract.name, tmp_path / "c.o")
    assert compiled(log3)


@pytest.mark.parametrize("edit", ["source", "included header", "contract", "define"])
def test_an_edited_input_misses(cache_root, component, tmp_path, edit):
    source, contract = component
    build(source, contract, tmp_path / "a.o")
    opts = {}
    if edit == "source":
        source.write_text(source.read_text() + "\n// edited\n")
    elif edit == "included header":
        (source.parent / "local.h").write_text("#pragma once\nconstexpr float kLocal = 2.0f;\n")
    elif edit == "contract":
        doc = json.loads(contract.read_text())
        doc["version"] = "9.9.9"
        contract.write_text(json.dumps(doc))
    else:
        opts = {"defines": ("PIPELINK_TEST_DEFINE=1",)}
    _, log = build(source, contract, tmp_path / "b.o", **opts)
    assert compiled(log)
    _, again = build(source, contract, tmp_path / "c.o", **opts)
    assert not compiled(again)


@pytest.mark.parametrize("damage", ["object", "deps", "meta"])
def test_a_damaged_entry_misses_and_is_rewritten(cache_root, component, tmp_path, damage):
    source, contract = component
    build(source, contract, tmp_path / "a.o")
    entry = next((cache_root / "build").glob("*/*"))
    (entry / {"object": "object.o", "deps": "deps.json", "meta": "meta.json"}[damage]).write_bytes(b"\x00garbage")
    data, log = build(source, contract, tmp_path / "b.o")
    assert compiled(log) and data.startswith(b"\x7fELF")
    again, log = build(source, contract, tmp_path / "c.o")
    assert not compiled(log) and again == data  # two compiles differ in a few bytes: the rewritten entry


def test_turned_off(cache_root, component, tmp_path, monkeypatch):
    monkeypatch.setenv("PIPELINK_CACHE", "0")
    source, contract = component
    build(source, contract, tmp_path / "a.o")
    _, log = build(source, contract, tmp_path / "b.o")
    assert compiled(log) and not (cache_root / "build").exists()


def test_failed_builds_are_not_cached(cache_root, component, tmp_path):
    source, contract = component
    source.write_text(source.read_text() + "\nthis is not C++;\n")
    sink = DiagnosticSink()
    c = load_contract_file(contract, sink)
    assert not build_component(c, contract.read_bytes(), source, tmp_path / "a.o", sink, BuildOptions())
    assert "PL019" in [d.code for d in sink.items] and not (cache_root / "build").exists()


def test_an_unwritable_cache_does_not_fail_the_build(component, tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("PIPELINK_CACHE_DIR", str(blocker / "cache"))
    source, contract = component
    data, log = build(source, contract, tmp_path / "a.o")
    assert compiled(log) and data


def test_make_rules_read_as_nvcc_writes_them():
    text = "out.fatbin : /a/b.cu \\\n /c/with\\ space.h /d/e.h\\\n /f/g.h\n"
    assert build_cache.parse_depfile(text) == ["/a/b.cu", "/c/with space.h", "/d/e.h", "/f/g.h"]
    assert build_cache.parse_depfile("no rule here") == []


@pytest.mark.parametrize("cached", [False, True])
def test_an_object_onto_a_header_the_source_includes_is_refused(cache_root, component, tmp_path, cached):
    """What the source includes is read by the build (nvcc's -MD list, or the cache entry's record of it): `-o`
    onto one of them is PL120 and leaves it as it was, on a compile and on a cache hit alike."""
    src, contract = component
    header = src.parent / "local.h"
    before = header.read_bytes()
    if cached:
        build(src, contract, tmp_path / "first.o")
    sink = DiagnosticSink()
    assert not build_component(load_contract_file(contract, sink), contract.read_bytes(), src, header, sink)
    assert [d.code for d in sink.errors] == ["PL120"] and "which the source includes" in sink.errors[0].message
    assert header.read_bytes() == before


def _with_header_from(component, tmp_path, text):
    """The source includes "mine.h" (not beside it: found through -I); returns the source and contract."""
    source, contract = component
    source.write_text('#include "mine.h"\n' + source.read_text())
    return source, contract


def test_a_relative_include_folder_from_another_folder_misses(cache_root, component, tmp_path, monkeypatch):
    """-I inc from folder X, then from folder Y whose inc/mine.h differs: a miss (the key had held 'inc' as
    spelled, and the recorded X/inc/mine.h was unchanged: Y's object would have been X's)."""
    source, contract = _with_header_from(component, tmp_path, "")
    for folder, value in (("x", "1.0f"), ("y", "2.0f")):
        (tmp_path / folder / "inc").mkdir(parents=True)
        (tmp_path / folder / "inc" / "mine.h").write_text(f"#pragma once\nconstexpr float kMine = {value};\n")
    monkeypatch.chdir(tmp_path / "x")
    _, log_x = build(source, contract, tmp_path / "a.o", include_dirs=("inc",))
    monkeypatch.chdir(tmp_path / "y")
    _, log_y = build(source, contract, tmp_path / "b.o", include_dirs=("inc",))
    assert not log_y[-1].startswith("(cached"), log_y


def test_a_header_created_earlier_in_the_search_misses(cache_root, component, tmp_path):
    """-I a -I b, mine.h only in b; then a/mine.h is created: the compile would read it, so the entry is a miss."""
    source, contract = _with_header_from(component, tmp_path, "")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "mine.h").write_text("#pragma once\n")
    dirs = (str(tmp_path / "a"), str(tmp_path / "b"))
    build(source, contract, tmp_path / "1.o", include_dirs=dirs)
    _, log = build(source, contract, tmp_path / "2.o", include_dirs=dirs)
    assert log[-1].startswith("(cached"), log
    (tmp_path / "a" / "mine.h").write_text('#error "the shadowing header"\n')
    sink = DiagnosticSink()
    c = load_contract_file(contract, sink)
    assert not build_component(c, contract.read_bytes(), source, tmp_path / "3.o", sink, BuildOptions(include_dirs=dirs))
    assert [d.code for d in sink.errors] == ["PL019"] and "the shadowing header" in sink.errors[0].message


@pytest.mark.parametrize("opts, says", [
    ({"include_dirs": ("",)}, "-I '' is empty"), ({"include_dirs": ("a,b",)}, "holds a comma"),
    ({"defines": ("A=1,B=2",)}, "holds a comma"), ({"defines": ("",)}, "is empty"),
    ({"defines": ("1X",)}, "does not start with a macro name")])
def test_an_include_folder_or_define_nvcc_would_split_or_misread_is_pl001(component, tmp_path, opts, says):
    """nvcc splits an option's value at commas (`-D A=1,B=2` had defined two macros) and reads an empty one as no
    input at all (PL019 'No input files'): PL001 at the option, before any compile."""
    source, contract = component
    sink = DiagnosticSink()
    c = load_contract_file(contract, sink)
    assert not build_component(c, contract.read_bytes(), source, tmp_path / "x.o", sink, BuildOptions(**opts))
    assert [d.code for d in sink.errors] == ["PL001"] and says in sink.errors[0].message
    assert sink.errors[0].location.option and not (tmp_path / "x.o").exists()


def test_a_source_that_is_not_utf8_is_refused_before_compiling(component, tmp_path):
    source, contract = component
    source.write_bytes(b"// caf\xe9\n" + source.read_bytes())
    sink = DiagnosticSink()
    o = BuildOptions()
    assert not build_component(load_contract_file(contract, sink), contract.read_bytes(), source, tmp_path / "x.o",
                               sink, o)
    assert [d.code for d in sink.errors] == ["PL002"] and "not UTF-8" in sink.errors[0].message and not o.nvcc_log


def test_a_build_whose_object_lacks_its_entry_is_pl014(component, tmp_path):
    """nvcc compiles a source whose entry is misspelt; the object would have failed only at its first check or
    link. The build asks nvJitLink as the link does: PL014 at the contract's entry.symbol, nothing written."""
    source, contract = component
    sink = DiagnosticSink()
    c = load_contract_file(contract, sink)
    source.write_text(source.read_text().replace(f"void {c.entry.symbol}(", f"void {c.entry.symbol}_v2("))
    assert not build_component(c, contract.read_bytes(), source, tmp_path / "x.o", sink, BuildOptions())
    assert [(d.code, d.location.pointer) for d in sink.errors] == [("PL014", "/entry/symbol")]
    assert f"did you mean '{c.entry.symbol}_v2'?" in sink.errors[0].message  # from the source's extern "C" names
    assert not (tmp_path / "x.o").exists()


def test_a_compile_that_never_ends_is_stopped_at_its_limit(component, tmp_path):
    """A source that #includes /dev/zero keeps nvcc's preprocessor reading for ever: the build stops it (the whole
    process group) at its limit, PL019 with a hint, nothing written, no compiler left running."""
    import subprocess
    import time
    source, contract = component
    source.write_text('#include "/dev/zero"\n' + source.read_text())
    sink = DiagnosticSink()
    start = time.monotonic()
    assert not build_component(load_contract_file(contract, sink), contract.read_bytes(), source, tmp_path / "x.o",
                               sink, BuildOptions(timeout_s=3))
    assert time.monotonic() - start < 60
    assert [d.code for d in sink.errors] == ["PL019"] and "did not finish" in sink.errors[0].message
    assert "/dev/zero" in sink.errors[0].hint and not (tmp_path / "x.o").exists()
    left = subprocess.run(["pgrep", "-f", str(source)], capture_output=True, text=True).stdout.split()
    assert not left, f"compiler processes left running: {left}"


def test_build_timeout_option_defaults_to_build_options(tmp_path):
    """`pipelink build --timeout` says the default BuildOptions holds (one owner: the help text is checked here)."""
    from pipelink.cli import _parser
    text = _parser()._subparsers._group_actions[0].choices["build"].format_help()
    assert f"default: {BuildOptions.timeout_s:g} s" in " ".join(text.split())


def test_a_copy_of_the_generated_header_beside_the_source_is_pl198(component, tmp_path):
    """`#include "x.pipelink.h"` finds a copy beside the source before the header the build generates: the object
    followed the copy's (stale) contract and failed only at check (PL049). Refused at the build, nothing written or
    cached; without the copy the same build passes."""
    from pipelink.authoring.header import generate_header
    source, contract = component
    sink = DiagnosticSink()
    c = load_contract_file(contract, sink)
    copy = source.parent / f"{c.name}.pipelink.h"
    copy.write_text(generate_header(c))
    for _ in range(2):  # the second: not from the cache
        sink = DiagnosticSink()
        assert not build_component(c, contract.read_bytes(), source, tmp_path / "x.o", sink, BuildOptions())
        assert [d.code for d in sink.errors] == ["PL198"] and sink.errors[0].location.file.endswith(copy.name)
        assert not (tmp_path / "x.o").exists()
    copy.unlink()
    build(source, contract, tmp_path / "x.o")


@pytest.mark.parametrize("damage", ["deps deeply nested", "deps a fifo", "a dependency a fifo", "another key"])
def test_a_cache_entry_that_could_block_or_lie_is_a_miss(cache_root, component, tmp_path, damage):
    """Read without bound or trusted under any key, an entry had hung a build (a FIFO), crashed it (RecursionError)
    or handed over another component's object: each is a miss, and the build compiles afresh."""
    import os
    source, contract = component
    first, _ = build(source, contract, tmp_path / "a.o")
    entry = next((cache_root / "build").glob("*/*"))
    if damage == "deps deeply nested":
        (entry / "deps.json").write_text("[" * 100000)
    elif damage == "deps a fifo":
        (entry / "deps.json").unlink()
        os.mkfifo(entry / "deps.json")
    elif damage == "a dependency a fifo":
        deps = json.loads((entry / "deps.json").read_text())
        fifo = tmp_path / "fifo.h"
        os.mkfifo(fifo)
        (entry / "deps.json").write_text(json.dumps(deps + [[str(fifo), "0" * 64]]))
    else:
        meta = json.loads((entry / "meta.json").read_text())
        (entry / "meta.json").write_text(json.dumps(dict(meta, key="0" * 64)))
    again, log = build(source, contract, tmp_path / "b.o")
    assert compiled(log) and again == first


def test_a_file_written_while_the_compile_ran_keeps_the_object_out_of_the_cache(cache_root, component, tmp_path):
    """A header whose mtime is at or after the compile's start may have been read in its earlier form: the object is
    built, not stored (the next build had taken it from the cache with the later header in place)."""
    import os
    import time
    source, contract = component
    later = time.time() + 100
    os.utime(source.parent / "local.h", (later, later))
    _, log = build(source, contract, tmp_path / "a.o")
    assert compiled(log) and not list((cache_root / "build").glob("*/*"))


def test_a_tool_past_its_memory_is_stopped_with_its_children():
    """From /dev/zero the preprocessor's memory grew to the machine's (24 GB) before the time limit: run_bounded
    stops a tool whose process group holds more than its limit, children included."""
    import subprocess
    import sys
    import time

    from pipelink import toolchain
    grow = "import subprocess, sys; subprocess.run([sys.executable, '-c', 'import time; b = bytearray(400 << 20); " \
           "b[::4096] = b\"x\" * len(b[::4096]); time.sleep(60)'])"
    start = time.monotonic()
    with pytest.raises(toolchain.OutOfMemory):
        toolchain.run_bounded([sys.executable, "-c", grow], dict(__import__("os").environ), 120, memory_bytes=200 << 20)
    assert time.monotonic() - start < 30
    left = subprocess.run(["pgrep", "-f", "bytearray\\(400"], capture_output=True, text=True).stdout.split()
    assert not left, left


@pytest.mark.parametrize("created", ["beside the including header", "where __has_include looks"])
def test_a_header_created_where_the_compile_looks_is_a_miss(cache_root, component, tmp_path, created):
    """A quoted #include looks beside the including file first, and __has_include probes names that need not exist:
    a header created there since the entry was stored changes what the compile reads, though no recorded file
    changed (the cache had hit). The folders the compile searched are recorded by their names; an object written
    beside the source is no such change."""
    source, contract = component
    inc = source.parent / "inc"
    (inc / "sub").mkdir(parents=True)
    (inc / "b.h").write_text("#pragma once\nconstexpr int kB = 1;\n")
    (inc / "sub" / "a.h").write_text('#pragma once\n#include "b.h"\n'
                                     '#if __has_include("opt.h")\n#error opt.h\n#endif\n')
    source.write_text('#include "sub/a.h"\n' + source.read_text())
    opts = {"include_dirs": (str(inc),)}
    build(source, contract, tmp_path / "a.o", **opts)
    _, log = build(source, contract, source.parent / "beside.o", **opts)
    assert not compiled(log)  # the object beside the source changed no name an #include means
    if created == "beside the including header":
        (inc / "sub" / "b.h").write_text("#pragma once\nconstexpr int kB = 2;\n")
    else:
        (inc / "sub" / "opt.h").write_text("")
    sink = DiagnosticSink()
    c = load_contract_file(contract, sink)
    o = BuildOptions(**opts)
    ok = build_component(c, contract.read_bytes(), source, tmp_path / "b.o", sink, o)
    assert compiled(o.nvcc_log)  # compiled afresh: with opt.h the compile fails, as it must
    assert ok == (created == "beside the including header")


def test_a_misspelt_load_entry_is_pl014_at_the_build_and_the_link(tmp_path):
    """The conformance probe calls a component's entry, not its load entry: a contract naming a load entry the
    source spells otherwise had built and checked clean, then failed the link with nvJitLink's unlocated log.
    The build asks for every entry the contract names (PL014 at /entry/load, nothing written), and the link does
    for an object built elsewhere (PL014 at the contract's field, not PL074)."""
    import pipelink
    linear = REPO / "case_studies" / "llama32_1b_decode" / "linear"
    d = tmp_path / "linear"
    shutil.copytree(linear, d, ignore=shutil.ignore_patterns("__pycache__"))
    source, contract = d / "gemv_residual_lr.cu", d / "gemv_residual_lr.json"
    source.write_text(source.read_text().replace("void gemv_residual_lr_load(", "void gemv_residual_lr_loads("))
    sink = DiagnosticSink()
    assert not build_component(load_contract_file(contract, sink), contract.read_bytes(), source, tmp_path / "x.o",
                               sink, BuildOptions(archs=("sm_90",)))
    assert [(d.code, d.location.pointer) for d in sink.errors] == [("PL014", "/entry/load")], \
        [d.render() for d in sink.items]
    assert "gemv_residual_lr_load'" in sink.errors[0].message and not (tmp_path / "x.o").exists()
    # the object as a team's own nvcc builds it, its sidecar contract misspelling the load entry: the link's input
    # pass refuses it there (it had failed in nvJitLink, PL074, naming no contract)
    from comp_contract import build_elsewhere
    raw = json.loads(contract.read_text())
    raw["entry"]["load"] = "gemv_residual_lr_loads"
    contract.write_text(json.dumps(raw))
    obj = build_elsewhere(d, contract, (linear / "gemv_residual_lr.cu").read_text())
    result = pipelink.link([str(obj)], pipelink.LinkOptions(arch="sm_90"))
    errors = [d for d in result.diagnostics if d.severity == "error"]
    assert [(d.code, d.location.pointer) for d in errors] == [("PL014", "/entry/load")], \
        [d.render() for d in result.diagnostics]


def test_a_contract_whose_parameters_disagree_with_the_source_points_at_them(component, tmp_path):
    """The contract says N is i64, the source takes int: nvcc refuses two declarations of the entry. PL019 keeps
    nvcc's words and adds the contract's entry.params as the related place, with a hint (it had named the source
    alone)."""
    source, contract = component
    raw = json.loads(contract.read_text())
    raw["entry"]["params"][2]["dtype"] = "i64"
    contract.write_text(json.dumps(raw))
    sink = DiagnosticSink()
    assert not build_component(load_contract_file(contract, sink), contract.read_bytes(), source, tmp_path / "x.o",
                               sink, BuildOptions(archs=("sm_90",)))
    [d] = sink.errors
    assert d.code == "PL019" and d.related and d.related[0].pointer == "/entry/params", d.render()
    assert "entry.params" in d.hint and "seg_silu" in d.hint


def test_a_build_links_each_targets_probe_once(component, tmp_path, monkeypatch):
    """The build probes the object for each target, then checks it as `check` does, probe and all: that check's
    probe is the one the build already ran (it had been linked again, the contract read back from the object
    keying the process's probes apart from the one read from its file)."""
    from pipelink import toolchain
    from pipelink.api import check_objects
    from pipelink.authoring import conformance
    monkeypatch.setattr(conformance, "_PROBES", {})
    monkeypatch.setenv("PIPELINK_CACHE", "off")
    links = []
    link = toolchain.nvjitlink_link
    monkeypatch.setattr(toolchain, "nvjitlink_link", lambda inputs, options: links.append(options) or link(inputs, options))
    source, contract = component
    sink = DiagnosticSink()
    assert build_component(load_contract_file(contract, sink), contract.read_bytes(), source, tmp_path / "x.o", sink,
                           BuildOptions(), check_object=check_objects), [d.render() for d in sink.items]
    assert sorted(o[0] for o in links) == ["-arch=sm_90", "-arch=sm_90a"], links
