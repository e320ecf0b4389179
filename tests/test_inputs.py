"""pipelink.formats.inputs: reading objects, archives, fatbins, LTO-IR and cubins without a GPU.

The fixtures are real files built by the pinned nvcc (tests/conftest.py: built_objects).
"""
from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipelink import toolchain

from pipelink.core.diagnostics import Diagnostic, DiagnosticSink, ExitCode, render_all
from pipelink.formats import fatbin
from pipelink.formats.inputs import (FatbinEntry, InputObject, check_entry_symbol, embed_contract, find_contract,
                                     read_bytes, read_input, require_ltoir, sidecar_contract_path)

LTO_OPTIONS = "-ftz=0 -prec_div=1 -prec_sqrt=1 -fmad=1"
DEFAULT_FLAGS = {"ftz": False, "prec_div": True, "prec_sqrt": True, "fmad": True}


def read(path) -> tuple[list[InputObject], DiagnosticSink]:
    sink = DiagnosticSink()
    return read_input(path, sink), sink


def read_one(path) -> InputObject:
    objs, sink = read(path)
    assert not sink.items, render_all(sink.items)
    assert len(objs) == 1
    return objs[0]


def diagnose(path, arch: str = "sm_90") -> DiagnosticSink:
    """What a link for `arch` would say about the file: reading, then the LTO-IR check."""
    objs, sink = read(path)
    for obj in objs:
        require_ltoir(obj, arch, sink)
    return sink


def only(sink: DiagnosticSink, code: str, file) -> Diagnostic:
    assert [d.code for d in sink.items] == [code], render_all(sink.items)
    diag = sink.items[0]
    assert diag.location.file == str(file)
    assert str(file) in diag.message
    return diag


def fatbin_section(path: Path) -> fatbin.ElfSection:
    elf = fatbin.parse_elf(path.read_bytes())
    return next(s for s in elf.sections if s.name == "__nv_relfatbin")


# --- what good inputs hold -------------------------------------------------------------------

def test_dlto_object_holds_compressed_ptx_and_ltoir(built_objects):
    obj = read_one(built_objects["good.o"])
    assert (obj.format, obj.link_kind) == ("host-object", "object")
    assert [(e.kind, e.arch) for e in obj.entries] == [("ptx", "sm_90"), ("ltoir", "sm_90")]
    ptx, ltoir = obj.entries
    assert ptx.options == "--compile-only"
    assert ltoir.options == LTO_OPTIONS
    assert ltoir.compile_flags() == DEFAULT_FLAGS
    assert ptx.compile_flags() == {}
    assert ptx.compressed and ltoir.compressed
    assert not ptx.is_debug() and not ltoir.is_debug()
    assert obj.ltoir_archs() == ["sm_90"]
    assert {"comp_scale", "comp_helper"} <= set(obj.ptx_symbols)
    assert obj.ptx_symbols == sorted(set(obj.ptx_symbols))
    assert obj.embedded_contract is None
    # nvJitLink is given the object's one fatbin, not the host object around it
    assert obj.link_input().kind == "fatbin" and obj.link_input().data == obj.device_fatbin
    assert obj.device_fatbin in obj.data  # the object's __nv_relfatbin section, as nvcc wrote it


@pytest.mark.parametrize("arch", ["sm_90", "sm_90a"])
def test_sm90_ltoir_serves_sm90_and_sm90a_links(built_objects, arch):
    sink = diagnose(built_objects["good.o"], arch)
    assert not sink.items, render_all(sink.items)


def test_uncompressed_object_stores_raw_ltoir(built_objects):
    obj = read_one(built_objects["nocompress.o"])
    assert [(e.kind, e.compressed) for e in obj.entries] == [("ptx", False), ("ltoir", False)]
    assert obj.entries[1].payload.startswith(fatbin.LTOIR_MAGIC)  # the same bytes NVRTC returns
    assert obj.entries[1].options == LTO_OPTIONS
    assert "comp_scale" in obj.ptx_symbols


def test_fast_math_object_for_sm80(built_objects):
    obj = read_one(built_objects["sm80_fast.o"])
    assert obj.ltoir_archs() == ["sm_80"]
    assert obj.entries[-1].compile_flags() == {"ftz": True, "prec_div": False, "prec_sqrt": False, "fmad": True}
    assert not diagnose(built_objects["sm80_fast.o"], "sm_80").items


def test_fatbin_file(built_objects):
    obj = read_one(built_objects["comp.fatbin"])
    assert (obj.format, obj.link_kind) == ("fatbin", "fatbin")
    good = read_one(built_objects["good.o"])
    assert [(e.kind, e.arch, e.options) for e in obj.entries] == [(e.kind, e.arch, e.options) for e in good.entries]
    assert "comp_scale" in obj.ptx_symbols
    assert not diagnose(built_objects["comp.fatbin"]).items


def test_raw_ltoir_from_nvrtc_has_no_arch_and_serves_any(built_objects):
    obj = read_one(built_objects["comp.ltoir"])
    assert (obj.format, obj.link_kind) == ("ltoir", "ltoir")
    assert [(e.kind, e.arch) for e in obj.entries] == [("ltoir", None)]
    assert obj.ltoir_archs() == []
    for arch in ("sm_80", "sm_90", "sm_100"):
        assert require_ltoir(obj, arch, DiagnosticSink())


def test_debug_object_is_flagged_and_its_options_are_found(built_objects):
    # -G headers carry the source file name at 64, which moves the options descriptor to 72.
    obj = read_one(built_objects["debug.o"])
    assert [e.kind for e in obj.entries] == ["cubin", "ptx"]
    assert all(e.flags & fatbin.FLAG_DEBUG and e.is_debug() for e in obj.entries)
    assert obj.entries[1].options.startswith("--compile-only") and "-g" in obj.entries[1].options.split()


def test_archive_yields_its_members(built_objects):
    lib = built_objects["lib.a"]
    objs, sink = read(lib)
    assert not sink.items, render_all(sink.items)
    assert [o.path for o in objs] == [f"{lib}(x.o)", f"{lib}(long_component_name.o)"]
    assert [o.ltoir_archs() for o in objs] == [["sm_90"], ["sm_80"]]
    assert all(o.file == str(lib) and o.link_kind == "object" for o in objs)


def test_archive_member_diagnostics_name_the_member(built_objects):
    lib = built_objects["lib.a"]
    diag = only(diagnose(lib, "sm_90"), "PL012", f"{lib}(long_component_name.o)")
    assert "sm_80 only" in diag.message


def test_cubin_passed_directly(built_objects):
    obj = read_one(built_objects["comp.cubin"])
    assert (obj.format, obj.link_kind) == ("cubin", "cubin")
    assert [(e.kind, e.arch) for e in obj.entries] == [("cubin", "sm_90")]


# --- every bad class gives one located diagnostic with the right code -------------------------

@pytest.mark.parametrize("name, code, exit_code, says", [
    ("host.o", "PL010", ExitCode.LINK, "host code only"),
    ("nolto.o", "PL011", ExitCode.LINK, "holds a cubin and PTX for sm_90 but no LTO-IR"),
    ("comp.cubin", "PL011", ExitCode.LINK, "is a cubin for sm_90"),
    ("sm80_fast.o", "PL012", ExitCode.LINK, "holds LTO-IR for sm_80 only, not for sm_90"),
    ("half.o", "PL005", ExitCode.USAGE, "truncated"),
    ("empty.o", "PL003", ExitCode.USAGE, "empty"),
    ("random.o", "PL004", ExitCode.USAGE, "unrecognized format"),
    ("contract.json", "PL004", ExitCode.USAGE, "looks like JSON"),
])
def test_bad_input_class(built_objects, name, code, exit_code, says):
    sink = diagnose(built_objects[name])
    diag = only(sink, code, built_objects[name])
    assert says in diag.message
    assert sink.exit_code() == exit_code


def test_json_hint_points_to_check(built_objects):
    diag = only(diagnose(built_objects["contract.json"]), "PL004", built_objects["contract.json"])
    assert "pipelink check" in diag.effective_hint


@pytest.mark.parametrize("make", [lambda d: d / "missing.o", lambda d: d])
def test_unreadable_path(tmp_path, make):
    path = make(tmp_path)
    objs, sink = read(path)
    assert objs == []
    only(sink, "PL002", path)
    assert sink.exit_code() == ExitCode.USAGE


def test_object_cut_inside_its_fatbin_section(built_objects, tmp_path):
    good = built_objects["good.o"]
    sec = fatbin_section(good)
    cut = tmp_path / "cut.o"
    cut.write_bytes(good.read_bytes()[: sec.offset + sec.size // 2])
    assert "truncated" in only(diagnose(cut), "PL005", cut).message


def test_fatbin_file_cut(built_objects, tmp_path):
    cut = tmp_path / "cut.fatbin"
    cut.write_bytes(built_objects["comp.fatbin"].read_bytes()[:1000])
    assert "fatbin" in only(diagnose(cut), "PL005", cut).message


@pytest.mark.parametrize("field_offset, value, says", [
    (16 + 8, 1 << 40, "fatbin entry"),        # first entry's payload size: past its container
    (16 + 64, 1 << 20, "options string"),     # first entry's options offset: outside its header
    (8, 1 << 40, "fatbin container"),         # container payload size
])
def test_inconsistent_fatbin_headers(built_objects, tmp_path, field_offset, value, says):
    good = built_objects["good.o"]
    data = bytearray(good.read_bytes())
    sec = fatbin_section(good)
    fmt = "<I" if field_offset == 16 + 64 else "<Q"
    struct.pack_into(fmt, data, sec.offset + field_offset, value)
    bad = tmp_path / "bad.o"
    bad.write_bytes(bytes(data))
    diag = only(diagnose(bad), "PL005", bad)
    assert says in diag.message and "__nv_relfatbin" in diag.message


# --- LTO-IR requirements ---------------------------------------------------------------------

@pytest.mark.parametrize("options, debug", [
    ("-G -ftz=0", True), ("--device-debug", True), ("-g", True),
    ("-generate-line-info -ftz=0", False), (LTO_OPTIONS, False), ("", False),
])
def test_is_debug(options, debug):
    assert FatbinEntry("ltoir", "sm_90", options, False, 0).is_debug() is debug


def test_debug_ltoir_is_refused():
    entry = FatbinEntry("ltoir", "sm_90", "-G " + LTO_OPTIONS, True, 100)
    obj = InputObject("dbg.o", "host-object", "object", b"", [entry], [])
    sink = DiagnosticSink()
    assert not require_ltoir(obj, "sm_90", sink)
    assert "debug" in only(sink, "PL018", "dbg.o").message


@pytest.mark.parametrize("options, flags", [
    ("-ftz=true -prec-div=false --prec_sqrt=1 -fmad=0 -O3",
     {"ftz": True, "prec_div": False, "prec_sqrt": True, "fmad": False}),
    (LTO_OPTIONS, DEFAULT_FLAGS),
    ("--compile-only", {}),
    ("-use_fast_math", {"ftz": True, "prec_div": False, "prec_sqrt": False, "fmad": True}),
    ("--use_fast_math -ftz=0", {"ftz": False, "prec_div": False, "prec_sqrt": False, "fmad": True}),
])
def test_compile_flags_spellings(options, flags):
    assert FatbinEntry("ltoir", "sm_90", options, False, 0).compile_flags() == flags


# --- contracts that travel with an object ----------------------------------------------------

def test_embedded_contract_round_trips(built_objects, tmp_path):
    out = tmp_path / "with_contract.o"
    embed_contract(built_objects["good.o"], b'{"pipelink": 1}', out)
    obj = read_one(out)
    assert obj.embedded_contract == b'{"pipelink": 1}'
    assert obj.entries == read_one(built_objects["good.o"]).entries
    embed_contract(out, b'{"pipelink": 2}', out)  # replaces, in place
    assert read_one(out).embedded_contract == b'{"pipelink": 2}'


def test_embed_contract_without_objcopy(built_objects, tmp_path, monkeypatch):
    monkeypatch.setattr(toolchain, "objcopy_path", lambda: None)
    with pytest.raises(toolchain.ToolchainError):
        embed_contract(built_objects["good.o"], b"{}", tmp_path / "x.o")


def test_embed_contract_into_a_non_object(built_objects, tmp_path):
    with pytest.raises(toolchain.ToolchainError):
        embed_contract(built_objects["contract.json"], b"{}", tmp_path / "x.o")


def test_two_contract_sections(built_objects):
    if "two_contracts.o" not in built_objects:
        pytest.skip("needs gcc")
    objs, sink = read(built_objects["two_contracts.o"])
    assert len(objs) == 1
    assert "2 .pipelink.contract sections" in only(sink, "PL017", built_objects["two_contracts.o"]).message


def test_sidecar_lookup(tmp_path):
    obj = tmp_path / "comp.o"
    assert sidecar_contract_path(obj) is None
    (tmp_path / "comp.contract.json").write_text("{}")
    assert sidecar_contract_path(obj) == tmp_path / "comp.contract.json"
    (tmp_path / "comp.o.contract.json").write_text("{}")
    assert sidecar_contract_path(obj) == tmp_path / "comp.o.contract.json"  # the full name wins
    (tmp_path / "m.o.contract.json").write_text("{}")
    assert sidecar_contract_path(f"{tmp_path / 'lib.a'}(m.o)") == tmp_path / "m.o.contract.json"


def test_find_contract(built_objects, tmp_path):
    plain = tmp_path / "plain.o"
    plain.write_bytes(built_objects["good.o"].read_bytes())
    sink = DiagnosticSink()
    assert find_contract(read_one(plain), sink) is None
    only(sink, "PL013", plain)

    (tmp_path / "plain.contract.json").write_text('{"side": 1}')
    assert find_contract(read_one(plain), DiagnosticSink()) == (b'{"side": 1}', str(tmp_path / "plain.contract.json"))

    embedded = tmp_path / "embedded.o"
    embed_contract(plain, b'{"in": 1}', embedded)
    assert find_contract(read_one(embedded), DiagnosticSink())[0] == b'{"in": 1}'

    (tmp_path / "embedded.o.contract.json").write_text("{}")
    sink = DiagnosticSink()
    assert find_contract(read_one(embedded), sink) is None
    only(sink, "PL017", embedded)


# --- the entry symbol (asks nvJitLink; no GPU) -----------------------------------------------

def test_entry_symbol_defined(built_objects, tmp_path):
    out = tmp_path / "with_contract.o"
    embed_contract(built_objects["good.o"], b"{}", out)  # nvJitLink ignores the contract section
    for path in (built_objects["good.o"], out):
        sink = DiagnosticSink()
        assert check_entry_symbol(read_one(path), "comp_scale", "sm_90", sink)
        assert not sink.items, render_all(sink.items)


def test_entry_symbol_missing_suggests_a_close_name(built_objects):
    sink = DiagnosticSink()
    obj = read_one(built_objects["good.o"])
    assert not check_entry_symbol(obj, "comp_scal", "sm_90", sink, contract_file="comp.json")
    assert [d.code for d in sink.items] == ["PL014"]
    diag = sink.items[0]
    assert diag.location.file == "comp.json" and diag.location.pointer == "/entry/symbol"
    assert diag.related[0].file == obj.path
    assert "did you mean 'comp_scale'" in diag.message


def test_entry_symbol_not_an_identifier(built_objects):
    sink = DiagnosticSink()
    assert not check_entry_symbol(read_one(built_objects["good.o"]), "comp scale()", "sm_90", sink)
    assert [d.code for d in sink.items] == ["PL014"]


def test_unreadable_ltoir_is_pl015():
    sink = DiagnosticSink()
    objs = read_bytes(fatbin.LTOIR_MAGIC + bytes(124), "bogus.ltoir", sink)
    assert not check_entry_symbol(objs[0], "comp_scale", "sm_90", sink)
    diag = only(sink, "PL015", "bogus.ltoir")
    assert "nvvm" in diag.message.lower() or "ERROR" in diag.message


# --- no bytes make the reader raise ----------------------------------------------------------

def _assert_only_diagnostics(data: bytes) -> None:
    sink = DiagnosticSink()
    objs = read_bytes(data, "fuzz.o", sink)
    assert all(isinstance(d, Diagnostic) for d in sink.items)
    assert objs or sink.has_errors
    for obj in objs:
        assert obj.path.startswith("fuzz.o")
        require_ltoir(obj, "sm_90", sink)
        obj.ltoir_archs()
        for e in obj.entries:
            e.compile_flags()
            e.is_debug()
    for d in sink.items:
        assert d.location.file and d.location.file.startswith("fuzz.o")


ELF64_IDENT = b"\x7fELF\x02\x01\x01\x00" + bytes(8)
PREFIXES = [b"", ELF64_IDENT, b"\x7fELF", fatbin.FATBIN_MAGIC_BYTES, fatbin.FATBIN_MAGIC_BYTES + b"\x01\x00\x10\x00",
            fatbin.AR_MAGIC, fatbin.THIN_AR_MAGIC, fatbin.LTOIR_MAGIC, b"{", b"//\n.version 9.0\n.target sm_90\n"]


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(PREFIXES), st.binary(max_size=600))
def test_random_bytes_give_only_diagnostics(prefix, tail):
    _assert_only_diagnostics(prefix + tail)


_MUTATED = {}


def _real_bytes(built_objects, name: str) -> tuple[bytes, int]:
    """A real file's bytes and where its fatbin starts (the bytes worth mutating)."""
    if name not in _MUTATED:
        path = built_objects[name]
        data = path.read_bytes()
        start = fatbin_section(path).offset if name.endswith(".o") else 0
        _MUTATED[name] = (data, start)
    return _MUTATED[name]


@settings(max_examples=200, deadline=None)
@given(name=st.sampled_from(["good.o", "debug.o", "comp.fatbin", "lib.a"]),
       edits=st.lists(st.tuples(st.integers(0, 300), st.integers(0, 255)), max_size=6),
       cut=st.one_of(st.none(), st.integers(0, 1 << 14)),
       data=st.data())
def test_mutated_real_files_give_only_diagnostics(built_objects, name, edits, cut, data):
    original, start = _real_bytes(built_objects, name)
    if name == "lib.a":  # aim at the member headers and the first member's ELF header
        start = data.draw(st.sampled_from([8, 8 + 60, 0]))
    mutated = bytearray(original)
    for pos, byte in edits:
        if start + pos < len(mutated):
            mutated[start + pos] = byte
    if cut is not None:
        mutated = mutated[:cut]
    _assert_only_diagnostics(bytes(mutated))


def test_a_stream_is_read_once_within_a_command_and_afresh_after():
    """A pipe is empty when read again: inside one command (files.reading) its bytes are kept for every later
    read; the next command (a long-lived process using the API) reads the stream anew."""
    import os
    from pipelink.core.files import read_input_bytes, reading

    def pipe_with(data: bytes) -> tuple[str, int]:
        r, w = os.pipe()
        os.write(w, data)
        os.close(w)
        return f"/proc/self/fd/{r}", r

    path, fd = pipe_with(b"first")
    try:
        with reading():
            assert read_input_bytes(path) == b"first"
            assert read_input_bytes(path) == b"first"  # not b"": kept
        assert read_input_bytes(path) == b""  # outside a command: read afresh, and the pipe is drained
    finally:
        os.close(fd)


# --- device code nvJitLink cannot read -------------------------------------------------------

def _crash(how):
    import ctypes
    import os
    import signal
    if how == "segv":
        ctypes.string_at(0)
    if how == "abort":
        os.write(2, b"LLVM ERROR: out of memory\n")
        os.kill(os.getpid(), signal.SIGABRT)
    if how == "print":
        os.write(2, b"error   : Uncompress failed\n")
        raise toolchain.ToolchainError("nvJitLink failed: ERROR 5", "bad input")
    return b"fine"


@pytest.mark.parametrize("how, crashed, says", [
    ("segv", True, "crashed (SIGSEGV)"), ("abort", True, "crashed (SIGABRT)"), ("print", False, "nvJitLink failed")])
def test_a_toolchain_call_that_dies_or_prints_is_an_error_not_a_dead_process(capfd, how, crashed, says):
    """nvJitLink reads the users' objects in a child process: a crash comes back as a ToolchainError (`crashed`),
    and what the library printed is in its log, not on the user's terminal."""
    assert toolchain._isolated(_crash, "none") == b"fine"
    with pytest.raises(toolchain.ToolchainError) as err:
        toolchain._isolated(_crash, how)
    assert err.value.crashed is crashed and says in err.value.message
    assert ("LLVM ERROR" in err.value.log) if how == "abort" else True
    assert ("Uncompress failed" in err.value.log) if how == "print" else True
    assert toolchain.unreadable_device_code(f"{err.value.message}\n{err.value.log}") is (how != "none")
    captured = capfd.readouterr()
    assert captured.out == "" and captured.err == ""


_FORK_HOOKS = """
import os, sys, threading
from concurrent.futures import ThreadPoolExecutor
forking = set()  # as filelock's hooks do: a fork while another thread forks is refused from an audit hook
def before():  # the hooks' own work before a fork: a window in which another thread's fork is refused
    forking.add(threading.get_ident())
    __import__("time").sleep(0.005)
os.register_at_fork(before=before, after_in_parent=lambda: forking.discard(threading.get_ident()))
def audit(event, args):
    if event == "os.fork" and (forking or REFUSE_ALL):
        raise RuntimeError("os.fork is unsafe while filelock is changing descriptor ownership")
REFUSE_ALL = sys.argv[1] == "all"
sys.addaudithook(audit)
from pipelink import toolchain
def call(i):
    return toolchain._isolated(lambda: (__import__("time").sleep(0.02), os.getpid())[1])
with ThreadPoolExecutor(8) as pool:
    pids = list(pool.map(call, range(48)))
print(len(pids), sum(p == os.getpid() for p in pids))
"""


@pytest.mark.parametrize("refuse", ["concurrent", "all"])
def test_toolchain_calls_from_many_threads_survive_a_library_refusing_concurrent_forks(refuse):
    """Components build on several threads, each calling NVRTC and nvJitLink in a forked child. A library's fork
    hooks (filelock's, imported with transformers) raise from os.fork while another thread forks: that broke the
    case study's builds. Forks are one at a time now, and one refused every time runs the call in this process."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", _FORK_HOOKS, refuse], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr
    calls, here = map(int, done.stdout.split())
    assert calls == 48 and here == (48 if refuse == "all" else 0), done.stdout


@pytest.mark.parametrize("at, width, commands", [(3016, 4, ("check", "link")), (1033, 16, ("check",)),
                                                  (1436, 1, ("check",))])
def test_an_object_whose_device_code_is_damaged_is_pl005_in_every_command(shipped_objects, tmp_path, capfd, at, width,
                                                                        commands):
    """Bytes of the LTO-IR's compressed payload overwritten (offsets into the fatbin section, within the first
    entry): nvJitLink's decompressor or NVVM crashed the process (SIGSEGV, an LLVM abort) or printed to stderr.
    Each command says PL005 at the object (exit 2) and writes nothing."""
    from pipelink.cli import main
    good = Path(shipped_objects["tile_load"])
    sec = fatbin_section(good)
    data = bytearray(good.read_bytes())
    start = sec.offset + min(at, sec.size - width)
    data[start:start + width] = bytes(b ^ 0xFF for b in data[start:start + width])
    bad = tmp_path / "bad.o"
    bad.write_bytes(bytes(data))
    argvs = {"check": ["check", str(bad)], "link": ["link", str(bad), "-o", str(tmp_path / "k.cubin"), "--no-cache"]}
    for argv in (argvs[c] for c in commands):
        code = main(argv)
        err = capfd.readouterr().err
        if code == 0:  # a flip the decompressor and NVVM happen to survive: nothing to say
            continue
        assert code == 2 and "error[PL005]" in err and f"--> {bad}" in err and "Traceback" not in err, err
        assert not err.startswith("error   :"), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.o"]


def test_a_sidecar_that_cannot_be_read_or_a_second_that_differs(built_objects, tmp_path):
    """A sidecar that is a directory or a dangling link was taken for none (PL013); two sidecars that differ had
    the second ignored. Now PL002 at the sidecar, and PL017 naming both; two equal sidecars are one contract."""
    plain = tmp_path / "plain.o"
    plain.write_bytes(built_objects["good.o"].read_bytes())
    side = tmp_path / "plain.o.contract.json"
    for make in (lambda: side.mkdir(), lambda: side.symlink_to(tmp_path / "gone.json")):
        make()
        sink = DiagnosticSink()
        assert find_contract(read_one(plain), sink) is None
        assert [(d.code, d.location.file) for d in sink.errors] == [("PL002", str(side))]
        side.rmdir() if side.is_dir() else side.unlink()
    side.write_text('{"a": 1}')
    (tmp_path / "plain.contract.json").write_text('{"a": 1}')
    assert find_contract(read_one(plain), DiagnosticSink()) == (b'{"a": 1}', str(side))
    (tmp_path / "plain.contract.json").write_text('{"a": 2}')
    sink = DiagnosticSink()
    assert find_contract(read_one(plain), sink) is None
    assert [d.code for d in sink.errors] == ["PL017"] and "two sidecar contracts" in sink.errors[0].message


def test_ptx_symbols_scan_in_linear_time():
    """A PTX of many `.visible .func (` lines that never close had each scanned to the end of the text (a 400-byte
    compressed fatbin ran for minutes): now each line is scanned once. The real forms are still found."""
    import time

    from pipelink.formats.fatbin import _PTX_VISIBLE
    text = ".visible .func (\n" * 100000 + ".visible .func  (.param .b32 r) foo(\n.visible .entry bar(\n"
    start = time.monotonic()
    found = _PTX_VISIBLE.findall(text)
    assert found == ["foo", "bar"] and time.monotonic() - start < 5


def test_the_extern_c_functions_of_a_source_are_found_in_linear_time():
    """A misspelt entry's did-you-mean names the source's extern "C" functions (LTO-IR cannot be searched); a
    source of one long run of words does not stall the search."""
    import time
    from pipelink.formats.inputs import source_functions
    text = ('extern "C" __device__ void row_max(pl::Tile tile, const float* x) {}\n'
            'extern "C" __device__ __forceinline__ float* scale_load (int a);\nextern "C" {\n}\n')
    assert source_functions(text) == ["row_max", "scale_load"]
    start = time.perf_counter()
    assert source_functions('extern "C" ' + "a " * 200000) == []
    assert time.perf_counter() - start < 2
