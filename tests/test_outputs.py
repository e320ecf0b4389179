"""Never lose a user's file: what every command writes is checked against what it reads and against its
other outputs before anything runs; names are validated whole; diagnostics show untrusted text
safely; a closed stdout ends quietly. CPU only: every refusal here comes before any toolchain call."""
import ast
import json
import os
import pty
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from comp_contract import COMP_CONTRACT
from pipelink.cli import main
from pipelink.core.diagnostics import CODES, Diagnostic, DiagnosticSink, Location
from pipelink.harness.shipped import REPO

PACKAGE = REPO / "pipelink"


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def cli(*argv, cwd=None, **kw):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "pipelink.cli", *map(str, argv)], cwd=cwd, env=env, **kw)


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A folder holding what a user links: a pipeline file, objects (never read: every refusal comes
    first), a contract."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(REPO / "pipelines" / "rowsum.json", "rowsum.json")
    for name in ("tile_load.o", "tile_transform.o", "block_rowsum.o", "my.o"):
        Path(name).write_bytes(b"an object the user cares about " + name.encode())
    Path("tile.json").write_text(json.dumps(COMP_CONTRACT))
    return tmp_path


def _snapshot(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


def _refused(capsys, folder, code, *argv):
    before = _snapshot(folder)
    got, out, err = run(capsys, *argv)
    assert got == 2, err
    assert f"error[{code}]" in err and "= hint: " in err, err
    assert _snapshot(folder) == before  # nothing written, nothing replaced
    return err


# --- outputs never clobber inputs ------------------------------------------------------------------

def test_link_manifest_would_replace_the_pipeline_file(capsys, work):
    err = _refused(capsys, work, "PL120", "link", "--pipeline", "rowsum.json", "tile_load.o", "tile_transform.o",
                   "block_rowsum.o", "-o", "rowsum.cubin")
    assert "the manifest rowsum.json" in err and "the pipeline file rowsum.json" in err
    assert "--manifest PATH" in err


def test_link_manifest_would_replace_a_contract(capsys, work):
    err = _refused(capsys, work, "PL120", "link", "tile.json", "my.o", "-o", "tile.cubin")
    assert "would overwrite input tile.json" in err


def test_link_cubin_would_replace_an_input_object(capsys, work):
    err = _refused(capsys, work, "PL120", "link", "my.o", "tile_load.o", "-o", "my.o")
    assert "the cubin my.o (-o) would overwrite input my.o" in err


def test_link_map_and_manifest_are_one_file(capsys, work):
    err = _refused(capsys, work, "PL121", "link", "my.o", "-o", "k.cubin", "--map", "k.json")
    assert "--manifest PATH" in err


def test_the_manifest_and_the_cubin_named_as_one_file_say_it_once(capsys, work):
    """-o out/q.json names the cubin where the manifest goes by default: one hint that says both ways out (it had
    repeated 'name the cubin differently')."""
    err = _refused(capsys, work, "PL121", "link", "my.o", "-o", "q.json", "--map", "q.map", "--manifest", "q.json")
    assert err.count("name the cubin differently") == 1 and "--manifest PATH" in err, err


def test_link_output_would_replace_a_sidecar_contract(capsys, work):
    Path("my.o.contract.json").write_text(json.dumps(COMP_CONTRACT))
    err = _refused(capsys, work, "PL120", "link", "my.o", "--emit-glue", "my.o.contract.json")
    assert "the sidecar contract my.o.contract.json of my.o" in err


def test_link_output_would_replace_an_archive_members_sidecar(capsys, work):
    data = b"member bytes"
    header = f"{'m.o/':<16}{0:<12}{0:<6}{0:<6}{644:<8}{len(data):<10}`\n".encode()
    Path("lib.a").write_bytes(b"!<arch>\n" + header + data)
    Path("m.o.contract.json").write_text(json.dumps(COMP_CONTRACT))
    err = _refused(capsys, work, "PL120", "link", "lib.a", "--map", "m.o.contract.json")
    assert "of lib.a" in err


def test_links_to_an_input_are_caught(capsys, work):
    os.symlink("rowsum.json", "soft.map")
    os.link("my.o", "hard.map")
    for alias in ("soft.map", "hard.map"):
        _refused(capsys, work, "PL120", "link", "--pipeline", "rowsum.json", "my.o", "--map", alias)
    _refused(capsys, work, "PL120", "link", "my.o", "-o", str(work / "sub" / ".." / "my.o"))


def test_output_that_is_a_directory_is_refused_before_the_link(capsys, work):
    os.mkdir("out")
    err = _refused(capsys, work, "PL007", "link", "my.o", "-o", "out")
    assert "is a directory" in err


def test_check_map_would_replace_the_pipeline_file(capsys, work):
    _refused(capsys, work, "PL120", "check", "tile.json", "--pipeline", "rowsum.json", "--map", "rowsum.json")


def test_header_would_replace_its_contract(capsys, work):
    err = _refused(capsys, work, "PL120", "header", "tile.json", "-o", "tile.json")
    assert "the contract tile.json" in err


def test_build_would_replace_its_source_or_contract(capsys, work):
    Path("comp.cu").write_text('extern "C" __device__ void comp_scale(float* x, int n) {}\n')
    _refused(capsys, work, "PL120", "build", "comp.cu", "--contract", "tile.json", "-o", "comp.cu")
    _refused(capsys, work, "PL120", "build", "comp.cu", "--contract", "tile.json", "-o", "tile.json")


# --- stdout ----------------------------------------------------------------------------------------

def test_one_output_at_most_goes_to_stdout(capsys, work):
    _refused(capsys, work, "PL122", "link", "my.o", "-o", "-", "--map", "-")
    got, out, _ = run(capsys, "link", "my.o", "-o", "-", "--format", "json")
    assert got == 2 and "PL122" in out and "--format json report" in out
    got, out, _ = run(capsys, "check", "tile.json", "--pipeline", "rowsum.json", "--map", "-", "--format", "json")
    assert got == 2 and [d["code"] for d in json.loads(out)["diagnostics"]] == ["PL122"]


def test_header_to_stdout(capsys, work):
    got, out, _ = run(capsys, "header", "tile.json", "-o", "-")
    assert got == 0 and out.startswith("// comp.pipelink.h")


def test_binary_output_to_a_terminal_is_refused(tmp_path):
    """Through a pseudo-terminal: the refusal comes before the link reads anything."""
    for argv in (["link", "missing.o", "-o", "-"],
                 ["build", "missing.cu", "--contract", REPO / "contracts" / "tile_load.json", "-o", "-"]):
        leader, follower = pty.openpty()
        try:
            proc = cli(*argv, cwd=tmp_path, stdout=follower, stderr=subprocess.PIPE, text=True)
        finally:
            os.close(follower)
            os.close(leader)
        assert proc.returncode == 2 and "error[PL123]" in proc.stderr, proc.stderr
        assert list(tmp_path.iterdir()) == []


def test_closed_stdout_ends_quietly(tmp_path):
    """`pipelink inspect ... | head`: the reader has gone; exit 141, no traceback, no internal error."""
    contract = tmp_path / "c.json"
    contract.write_text(json.dumps(COMP_CONTRACT))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "pipelink.cli", "inspect", *[contract] * 200],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.stdout.close()  # before pipelink writes a byte
    err = proc.stderr.read().decode()
    assert proc.wait() == 141 and err == ""


# --- how files are written -------------------------------------------------------------------------

def test_outputs_get_the_usual_mode(capsys, work):
    old = os.umask(0o027)
    try:
        got, _, err = run(capsys, "header", "tile.json", "-o", "comp.pipelink.h")
    finally:
        os.umask(old)
    assert got == 0, err
    assert stat.S_IMODE(os.stat("comp.pipelink.h").st_mode) == 0o640


def test_writes_are_all_or_nothing(tmp_path):
    from pipelink.formats.outputs import write_outputs
    sink = DiagnosticSink()
    (tmp_path / "missing").write_text("")  # a file where b.map's folder would be
    assert not write_outputs({str(tmp_path / "a.cubin"): b"x", str(tmp_path / "missing" / "b.map"): b"y"}, sink)
    assert [d.code for d in sink.items] == ["PL007"] and "b.map" in sink.items[0].message
    assert [p.name for p in tmp_path.iterdir()] == ["missing"]  # neither a.cubin nor a temporary file



def test_a_symbolic_link_is_written_through(capsys, work):
    """`-o link.h` where link.h -> real.h: real.h gets the header and the link stays a link (the staged
    file goes beside real.h, not beside the link)."""
    os.mkdir("elsewhere")
    Path("elsewhere/real.h").write_text("old")
    os.symlink("elsewhere/real.h", "link.h")
    got, _, err = run(capsys, "header", "tile.json", "-o", "link.h")
    assert got == 0, err
    assert os.path.islink("link.h") and Path("elsewhere/real.h").read_text().startswith("// comp.pipelink.h")
    assert sorted(os.listdir("elsewhere")) == ["real.h"]


def test_a_fifo_is_written_to_not_replaced(tmp_path):
    """What is not a regular file (a FIFO here; /dev/null alike) is written to in place: replacing it by a
    file would leave its reader waiting and, for /dev/null as root, break the machine."""
    import threading
    fifo = tmp_path / "out.h"
    os.mkfifo(fifo)
    got = {}
    reader = threading.Thread(target=lambda: got.setdefault("data", fifo.read_bytes()), daemon=True)
    reader.start()
    contract = tmp_path / "c.json"
    contract.write_text(json.dumps(COMP_CONTRACT))
    proc = cli("header", contract, "-o", fifo, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    reader.join(timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and got["data"].startswith(b"// comp.pipelink.h")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.json", "out.h"]


def test_special_files_are_recognised():
    from pipelink.formats.outputs import special_file
    assert special_file("/dev/null") and not special_file(__file__) and not special_file("/no/such/file")


def test_an_unwritable_folder_is_a_located_refusal(tmp_path, monkeypatch):
    import tempfile
    from pipelink.formats.outputs import write_outputs

    def refuse(*_, **__):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    sink = DiagnosticSink()
    target = tmp_path / "k.cubin"
    assert not write_outputs({str(target): b"x"}, sink)
    [d] = sink.items
    assert d.code == "PL007" and "Permission denied" in d.message and "renamed" in d.hint
    assert list(tmp_path.iterdir()) == []

# --- build runs check's contract checks -------------------------------------------------------------

def test_build_refuses_what_check_refuses(capsys, work):
    Path("comp.cu").write_text('extern "C" __device__ void comp_scale(float* x, int n) {}\n')
    Path("big.json").write_text(json.dumps(dict(COMP_CONTRACT, smem={"buffers": [{"name": "big",
                                                                                   "bytes": 300000}]})))
    checked, _, check_err = run(capsys, "check", "big.json")
    built, _, build_err = run(capsys, "build", "comp.cu", "--contract", "big.json", "-o", "comp.o")
    assert checked == built == 1
    first = lambda err: err.splitlines()[0]  # noqa: E731
    assert first(check_err) == first(build_err) and first(build_err).startswith("error[PL042]")
    assert not Path("comp.o").exists()


# --- identifiers are matched whole --------------------------------------------------------------------

def test_names_ending_in_a_newline_are_refused(capsys, work):
    Path("nl.json").write_text(json.dumps(dict(COMP_CONTRACT, name="comp\n")))
    got, _, err = run(capsys, "check", "nl.json")
    assert got == 1 and "error[PL020]" in err and "at /name" in err
    doc = json.loads(Path("rowsum.json").read_text())
    Path("nl_pipeline.json").write_text(json.dumps(dict(doc, name="rowsum\n")))
    got, _, err = run(capsys, "link", "my.o", "--pipeline", "nl_pipeline.json")
    assert got == 2 and "error[PL133]" in err and "does not match" in err and "at /name" in err
    got, _, err = run(capsys, "link", "my.o", "--name", "kernel\n")
    assert got == 2 and "error[PL001]" in err and "--name" in err


def test_event_maps_are_one_line():
    """A map's text is quoted in comments of the generated glue: a line break would end the comment."""
    from pipelink.core.indexmap import MapError, parse_map
    assert parse_map("ij->i").rank == 1
    for bad in ("ij->i\n#error boom\n,j", "i->i\n", "i->i # note", "i->\x1bi"):
        with pytest.raises(MapError, match="one line"):
            parse_map(bad)


def test_every_schema_pattern_matches_whole_strings():
    from pipelink.core.loader import schema
    from pipelink.core.validate import _python_pattern
    patterns = []

    def walk(node):
        if isinstance(node, dict):
            if isinstance(node.get("pattern"), str):
                patterns.append(node["pattern"])
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(schema())
    samples = ["comp", "1.0.0", "1.2.3-rc.1", "sm_90", "sm_90a"]
    assert patterns
    for p in patterns:
        good = [s for s in samples if _python_pattern(p).search(s)]
        assert good, p
        for s in good:
            for bad in (s + "\n", s + "\r\n", s + "\n\n"):
                assert not _python_pattern(p).search(bad), (p, bad)


def test_no_regex_in_the_package_is_anchored_with_dollar():
    """Python's `$` also matches before a final newline: the package matches whole strings with
    fullmatch (or `\\Z`); `$` only with re.M, where lines are meant."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"):
                continue
            args = node.args
            if args and isinstance(args[0], ast.Constant) and isinstance(args[0].value, str) \
                    and args[0].value.rstrip(")").endswith("$") and not any(
                        "M" in ast.unparse(a) for a in args[1:] + [k.value for k in node.keywords]):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


# --- diagnostics show untrusted text safely ------------------------------------------------------------

def test_diagnostics_escape_control_characters_and_shorten_long_values(capsys, work):
    name = "\x1b[31m\x07\x00" + "a" * 1024 * 1024  # under the JSON reader's 2 MiB
    Path("evil.json").write_text(json.dumps(dict(COMP_CONTRACT, name=name)))
    for fmt in ("text", "json"):
        got, out, err = run(capsys, "check", "evil.json", "--format", fmt)
        shown = out + err
        assert got == 1 and len(shown) < 4000
        assert not any(ch in shown for ch in "\x1b\x07\x00")
        assert "(1048583 characters)" in shown  # ESC [ 3 1 m BEL NUL and the a's
        if fmt == "json":
            assert "\\\\x1b[31m" in out  # the escape survives as text; JSON adds its own backslash
        else:
            assert "component '\\x1b[31m\\x07\\x00aaaa" in err


def test_diagnostic_rendering_is_safe_in_one_place():
    d = Diagnostic("PL001", "line one\nline two \x1b[2J \u202e", Location(file="bad\nname\x1b.o", component="c\x00"))
    text = d.render()
    assert "line one\nline two \\x1b[2J \\u202e" in text and "bad\\nname\\x1b.o" in text and "'c\\x00'" in text
    doc = d.to_json()
    assert doc["location"] == {"file": "bad\\nname\\x1b.o", "component": "c\\x00"}
    long = Diagnostic("PL002", f"cannot read {'p' * 5000}", Location(file="q" * 5000))
    assert "... (5000 characters)" in long.render() and len(long.render()) < 400


# --- the docs say what the code does --------------------------------------------------------------------

def test_every_code_reported_as_a_warning_is_documented_as_one():
    warned = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "warning" \
                    and node.args and isinstance(node.args[0], ast.Constant):
                warned.add(node.args[0].value)
    assert "PL073" in warned
    assert [c for c in sorted(warned) if not CODES[c].warning] == []
    doc = (REPO / "docs" / "diagnostics.md").read_text()
    assert "| PL073 | 1 or 0 |" in doc and "a warning when it spills" in doc


def test_every_code_reported_as_a_note_is_documented_as_one():
    """A note (exit 0, --werror or not) has a code that is nothing else, and its row says exit 0."""
    said: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                    "note", "warning", "error") and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str) and node.args[0].value in CODES:
                said.setdefault(node.args[0].value, set()).add(node.func.attr)
    notes = {c for c, how in said.items() if "note" in how}
    assert notes == {c for c in CODES if CODES[c].note} == {"PL199"}
    assert all(said[c] == {"note"} for c in notes)
    doc = (REPO / "docs" / "diagnostics.md").read_text()
    assert "| PL199 | 0 |" in doc


def test_a_cubin_written_into_a_fifo_has_no_manifest_beside_it(tmp_path, shipped_objects):
    """`-o /dev/null` had left /dev/null.json: beside a device or a FIFO is no place for a file. The manifest
    goes where --manifest says, else nowhere."""
    import threading
    fifo = tmp_path / "k.cubin"
    os.mkfifo(fifo)
    got = {}
    reader = threading.Thread(target=lambda: got.setdefault("data", fifo.read_bytes()), daemon=True)
    reader.start()
    objs = [str(shipped_objects[n]) for n in ("tile_load", "tile_transform", "block_rowsum")]
    proc = cli("link", *objs, "--pipeline", REPO / "pipelines/rowsum.json", "-o", fifo, "--no-cache", cwd=tmp_path,
               capture_output=True, text=True, timeout=300)
    reader.join(timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert got["data"][:4] == b"\x7fELF" and sorted(p.name for p in tmp_path.iterdir()) == ["k.cubin"]


def test_an_output_name_as_long_as_the_filesystem_takes_is_written(tmp_path, capsys):
    """The staging file beside it is named from a cut of the name: a 255-byte name is written, not refused."""
    contract = tmp_path / "c.json"
    contract.write_text(json.dumps(COMP_CONTRACT))
    out = tmp_path / ("h" * 253 + ".h")
    got, _, err = run(capsys, "header", contract, "-o", out)
    assert got == 0, err
    assert out.read_text().startswith("// comp.pipelink.h") and sorted(p.name for p in tmp_path.iterdir()) == [
        "c.json", out.name]


def test_paths_that_are_no_utf8_are_written_and_named(tmp_path, capsys):
    """A name's bytes need not be UTF-8 (the locale's surrogates stand for them): the staging name, the SARIF URI
    and nvJitLink's input name take them as they are; exit 3 before."""
    contract = tmp_path / "c.json"
    contract.write_text(json.dumps(COMP_CONTRACT))
    folder = os.fsdecode(os.fsencode(str(tmp_path)) + b"/bad\xff\xfe")
    os.mkdir(folder)
    out = os.path.join(folder, os.fsdecode(b"h\xff.h"))
    got, _, err = run(capsys, "header", contract, "-o", out)
    assert got == 0, err
    assert os.listdir(os.fsencode(folder)) == [b"h\xff.h"]
    got, sarif, _ = run(capsys, "check", out, "--format", "sarif")
    assert got == 2 and json.loads(sarif)["runs"][0]["results"][0]["ruleId"] == "PL004"


@pytest.mark.parametrize("extra", [["-o", "-", "--manifest", "mf.json"], ["-o", "k.cubin", "--map", "-"]])
def test_a_full_stdout_is_pl007_and_leaves_none_of_the_outputs(tmp_path, shipped_objects, extra):
    """`link -o - --manifest M > /dev/full` had written M for a cubin never written, and exited 3: stdout is now
    written before any file is renamed into place, and its failure is PL007 (exit 2)."""
    objs = [str(shipped_objects[n]) for n in ("tile_load", "tile_transform", "block_rowsum")]
    with open("/dev/full", "wb") as full:
        proc = cli("link", *objs, "--pipeline", REPO / "pipelines/rowsum.json", *extra, "--no-cache", cwd=tmp_path,
                   stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    assert proc.returncode == 2 and "error[PL007]: cannot write stdout" in proc.stderr, proc.stderr
    assert "internal error" not in proc.stderr and list(tmp_path.iterdir()) == []


def test_a_report_on_a_full_or_closed_stdout(tmp_path, shipped_objects):
    """inspect's report into a full device: PL007, exit 2; with stdout closed the report is dropped (exit 0)."""
    with open("/dev/full", "wb") as full:
        proc = cli("inspect", shipped_objects["tile_load"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert proc.returncode == 2 and "PL007" in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    proc = cli("inspect", shipped_objects["tile_load"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
               timeout=120, preexec_fn=lambda: os.close(1))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_a_set_of_outputs_is_renamed_into_place_under_its_folders_lock(tmp_path):
    """Two commands writing one cubin and its manifest: each renames its set while it holds the folder's flock,
    so the other's set lands before or after it, whole. Here the lock is held elsewhere: nothing is renamed
    until it is released, then both files are."""
    import fcntl
    import threading
    import time
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.formats.outputs import write_outputs
    folder = os.open(tmp_path, os.O_RDONLY)
    fcntl.flock(folder, fcntl.LOCK_EX)
    done = []
    writer = threading.Thread(target=lambda: done.append(write_outputs(
        {str(tmp_path / "k.cubin"): b"cubin", str(tmp_path / "k.json"): b"{}"}, DiagnosticSink())))
    writer.start()
    time.sleep(0.3)
    assert not (tmp_path / "k.cubin").exists() and not (tmp_path / "k.json").exists() and not done
    os.close(folder)  # releases the lock
    writer.join(10)
    assert done == [True] and (tmp_path / "k.cubin").read_bytes() == b"cubin" and (tmp_path / "k.json").exists()


def test_an_output_under_a_file_is_refused_before_the_work(tmp_path, capsys):
    """-o F/x.o where F is a file: PL007 naming F before anything is compiled (it had been nvcc's whole build,
    then 'File exists')."""
    from pipelink.cli import main
    from pipelink.harness.shipped import REPO
    (tmp_path / "afile").write_text("")
    t = REPO / "examples" / "component-template"
    code = main(["build", str(t / "src" / "saxpy.cu"), "--contract", str(t / "contracts" / "saxpy.json"), "-v",
                 "-o", str(tmp_path / "afile" / "deep" / "x.o")])
    out, err = capsys.readouterr()
    assert code == 2 and "error[PL007]" in err and f"{tmp_path / 'afile'} is a file, not a folder" in err, err
    assert "nvcc" not in out  # nothing compiled
    assert (tmp_path / "afile").read_text() == ""


def test_an_outputs_missing_folders_are_made_only_when_every_file_is_written(tmp_path):
    """Every command makes the folders its outputs name (build did, link and header refused, PL007); a set that
    fails leaves no folder it made behind."""
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.formats.outputs import write_outputs
    sink = DiagnosticSink()
    assert write_outputs({str(tmp_path / "a" / "b" / "k.cubin"): b"1"}, sink)
    assert (tmp_path / "a" / "b" / "k.cubin").read_bytes() == b"1"
    (tmp_path / "file").write_text("x")
    sink = DiagnosticSink()
    assert not write_outputs({str(tmp_path / "new" / "deep" / "k.cubin"): b"1",
                              str(tmp_path / "file" / "sub" / "k.json"): b"2"}, sink)
    assert [d.code for d in sink.errors] == ["PL007"]
    assert not (tmp_path / "new").exists() and (tmp_path / "file").read_text() == "x"


def test_folders_made_before_the_path_grew_too_long_are_removed(tmp_path):
    """An output 2100 folders deep: mkdir succeeds until the path passes what the system takes, then fails; the
    folders made before it are removed (they had been left, about 2000 of them)."""
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.formats.outputs import write_outputs
    sink = DiagnosticSink()
    assert not write_outputs({str(tmp_path / "nd") + "/d" * 2100 + "/k.cubin": b"1"}, sink)
    assert [d.code for d in sink.errors] == ["PL007"] and not (tmp_path / "nd").exists()


def test_an_output_that_names_a_folder_or_a_looping_link_is_pl007(tmp_path):
    """`-o x/` had written a file x; `-o loop1` (loop1 -> loop2 -> loop1) had replaced the link by a file."""
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.formats.outputs import Output, check_outputs
    os.symlink(tmp_path / "loop2", tmp_path / "loop1")
    os.symlink(tmp_path / "loop1", tmp_path / "loop2")
    for path, says in ((str(tmp_path / "x") + os.sep, "names a folder"), (str(tmp_path / "loop1"), "leads back")):
        sink = DiagnosticSink()
        assert not check_outputs([Output(path, "the cubin", "-o")], [], sink)
        assert [d.code for d in sink.errors] == ["PL007"] and says in sink.errors[0].message
    assert not (tmp_path / "x").exists() and os.path.islink(tmp_path / "loop1")


def test_no_manifest_is_placed_beside_a_path_under_dev():
    """-o /dev/stdout with stdout redirected to a file: the path resolves to a regular file, but a manifest beside
    it would be /dev/stdout.json, a new file in /dev. Nothing is placed beside /dev or /proc paths."""
    import argparse
    from pipelink.cli import _link_outputs
    args = argparse.Namespace(output="/dev/stdout", manifest=None, map=None, emit_glue=None, emit_monolithic=None)
    assert set(_link_outputs(args, "k")) == {"cubin"}
    args.output = "out/k.cubin"
    assert _link_outputs(args, "k")["manifest"].path == "out/k.json"


def test_an_output_inside_another_output_is_pl121(capsys, work):
    """--map k.cubin/m.html beside -o k.cubin: the map's folder would be the cubin. Refused before anything is made
    (it had made k.cubin a folder, then said it could not write the cubin: 'Is a directory')."""
    err = _refused(capsys, work, "PL121", "link", "my.o", "-o", "sub/k.cubin", "--map", "sub/k.cubin/m.html")
    assert "the link map (--map) would be written inside the cubin" in err or "inside the cubin" in err, err
    assert not Path("sub").exists()
