"""The `pipelink` command end to end on real objects: what users see, and exit codes."""
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from comp_contract import COMP_CONTRACT, write_sidecar
from pipelink.cli import main
from pipelink.formats.inputs import embed_contract

ROWSUM = ["tile_load", "tile_transform", "block_rowsum"]
RING = ["ring_load", "ring_dot"]


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


# --- success -------------------------------------------------------------------------------------

@pytest.mark.parametrize("names", [ROWSUM, RING], ids=["rowsum", "ring"])
def test_check_shipped_pipeline(capsys, shipped_objects, names):
    code, out, err = run(capsys, "check", "--set", *(shipped_objects[n] for n in names))
    assert code == 0, err
    assert f"ok: {len(names)} components checked together: {', '.join(names)} for sm_90" in out


def test_check_json(capsys, shipped_objects):
    code, out, _ = run(capsys, "check", "--set", "--format", "json", *(shipped_objects[n] for n in RING))
    doc = json.loads(out)
    assert code == 0 and doc["ok"] and doc["together"] and doc["target"] == "sm_90" and doc["diagnostics"] == []
    assert [c["name"] for c in doc["components"]] == RING
    assert doc["components"][1]["roles"][0]["warpgroup_aligned"] is True


def test_check_for_sm90a(capsys, shipped_objects):
    code, out, _ = run(capsys, "check", "--arch", "sm_90a", *(shipped_objects[n] for n in ROWSUM))
    assert code == 0 and "checked one by one: tile_load, tile_transform, block_rowsum for sm_90a" in out


def test_check_bare_contracts(capsys):
    from pipelink.harness.shipped import REPO
    code, out, _ = run(capsys, "check", "--set", *(REPO / "contracts" / f"{n}.json" for n in ROWSUM))
    assert code == 0 and "checked together: tile_load, tile_transform, block_rowsum for sm_90" in out


def test_check_as_a_pipeline_runs_the_link_decisions_without_objects(capsys, tmp_path):
    """--pipeline: wires, geometry, events and allocation over contracts alone (what CI can know)."""
    from pipelink.harness.shipped import REPO
    case = REPO / "case_studies" / "moe_four_owners"
    teams = ["router", "dispatch", "expert", "combine"]
    contracts = [case / t / f"{t}.json" for t in teams]
    pipeline = case / "integration" / "moe.pipeline.json"
    code, out, _ = run(capsys, "check", *contracts, "--pipeline", pipeline, "--map", tmp_path / "moe.map")
    assert code == 0 and "4 components" in out
    text = (tmp_path / "moe.map").read_text()  # what the link would decide, before any build
    assert "moe_expert.stages" in text and "moe_expert waits i->i for tile_rows[i] (read on the device)" in text
    code, _, err = run(capsys, "check", *contracts, "--map", tmp_path / "x.map")
    assert code == 2 and "--map needs --pipeline" in err and not (tmp_path / "x.map").exists()
    # without its first wait, the combine reads pair_tile before the dispatch has written it
    bad = json.loads(contracts[3].read_text())
    bad["events"]["waits"] = bad["events"]["waits"][1:]
    (tmp_path / "combine.json").write_text(json.dumps(bad))
    code, _, err = run(capsys, "check", *contracts[:3], tmp_path / "combine.json", "--pipeline", pipeline)
    assert code == 1 and "PL086" in err
    # the set alone (no pipeline) cannot know: the event analysis belongs to the link
    assert run(capsys, "check", "--set", *contracts[:3], tmp_path / "combine.json")[0] == 0


def test_check_given_a_pipeline_file_says_so(capsys):
    from pipelink.harness.shipped import REPO
    code, _, err = run(capsys, "check", REPO / "pipelines" / "rowsum.json")
    assert code == 2 and "PL001" in err and "pipeline file, not a contract" in err and "--pipeline" in err


def test_inspect_text(capsys, shipped_objects):
    code, out, _ = run(capsys, "inspect", shipped_objects["block_rowsum"])
    assert code == 0
    assert "host-object, 2 fatbin entries" in out
    assert "ltoir  sm_90 " in out and "ltoir  sm_90a" in out and "-ftz=0 -prec_div=1" in out
    assert "contract block_rowsum 1.0.0 (reduction-team)" in out
    assert "smem      reduce_temp: 64 bytes, align 16, scratch (phase reduce)" in out


def test_inspect_json(capsys, shipped_objects, built_objects):
    code, out, _ = run(capsys, "inspect", "--format", "json", shipped_objects["ring_dot"], built_objects["good.o"])
    doc = json.loads(out)
    assert code == 0
    ring, good = doc["inputs"]
    assert ring["contract"]["entry"]["symbol"] == "ring_dot" and ring["embedded_contract"]
    assert {e["kind"] for e in good["entries"]} == {"ptx", "ltoir"} and "comp_scale" in good["symbols"]
    assert good["contract"] is None


def test_header_command(capsys, tmp_path):
    from pipelink.harness.shipped import REPO
    out_file = tmp_path / "ring_dot.pipelink.h"
    code, _, _ = run(capsys, "header", REPO / "contracts" / "ring_dot.json", "-o", out_file)
    assert code == 0
    assert 'extern "C" __device__ void ring_dot(pl::Tile tile, const float* __restrict__ w' in out_file.read_text()


def test_build_command(capsys, tmp_path):
    from pipelink.harness.shipped import REPO
    out_file = tmp_path / "t.o"
    code, out, err = run(capsys, "build", REPO / "components/tile_transform/tile_transform.cu", "--contract",
                         REPO / "contracts/tile_transform.json", "-o", out_file, "--arch", "sm_90")
    assert code == 0, err
    assert "built" in out and out_file.is_file()
    code, out, _ = run(capsys, "inspect", out_file)
    assert "ltoir  sm_90 " in out and "sm_90a" not in out.split("contract")[0]


def test_build_output_gets_the_usual_mode(capsys, tmp_path):
    """Not mkstemp's 0600: 0666 less the umask, as any new file."""
    from pipelink.harness.shipped import REPO
    out_file = tmp_path / "t.o"
    old = os.umask(0o002)
    try:
        code, _, err = run(capsys, "build", REPO / "components/tile_transform/tile_transform.cu", "--contract",
                           REPO / "contracts/tile_transform.json", "-o", out_file, "--arch", "sm_90")
    finally:
        os.umask(old)
    assert code == 0, err
    assert stat.S_IMODE(out_file.stat().st_mode) == 0o664


def test_link_manifest_moved_with_its_option(capsys, shipped_objects, tmp_path, monkeypatch):
    """`-o rowsum.cubin` beside `rowsum.json` (the pipeline): --manifest moves the manifest away."""
    from pipelink.harness.shipped import REPO
    monkeypatch.chdir(tmp_path)
    shutil.copy(REPO / "pipelines" / "rowsum.json", "rowsum.json")
    objects = [shipped_objects[n] for n in ROWSUM]
    old = os.umask(0o027)
    try:
        code, out, err = run(capsys, "link", "--pipeline", "rowsum.json", *objects, "-o", "rowsum.cubin",
                             "--manifest", "rowsum.manifest.json")
    finally:
        os.umask(old)
    assert code == 0, err
    assert Path("rowsum.json").read_bytes() == (REPO / "pipelines" / "rowsum.json").read_bytes()
    assert json.loads(Path("rowsum.manifest.json").read_text())["kernel"] == "rowsum"
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()} == {
        "rowsum.json": 0o644, "rowsum.cubin": 0o640, "rowsum.manifest.json": 0o640}


def test_link_cubin_to_stdout(shipped_objects, tmp_path):
    """`-o -`: the cubin on stdout, the summary on stderr, the manifest as <kernel>.json."""
    from pipelink.harness.shipped import REPO
    proc = subprocess.run([sys.executable, "-m", "pipelink.cli", "link", "--pipeline", REPO / "pipelines/rowsum.json",
                           *(shipped_objects[n] for n in ROWSUM), "-o", "-"], cwd=tmp_path, capture_output=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 0, proc.stderr.decode()
    assert proc.stdout.startswith(b"\x7fELF") and b": kernel rowsum" in proc.stderr and b"linked -" in proc.stderr
    assert b"wire tile_load.tile -> tile_transform.src (explicit, zero_copy)" in proc.stderr
    assert json.loads((tmp_path / "rowsum.json").read_text())["kernel"] == "rowsum"



def test_inputs_through_pipes_are_read_once(shipped_objects, tmp_path):
    """A shell's `<(...)`, a pipe into /dev/stdin: a stream is empty when read again, and link and check read
    an input more than once (contract or object, sidecars, the link cache's key). Each is read once."""
    from pipelink.harness.shipped import REPO
    subs = " ".join(f"<(cat {shipped_objects[n]})" for n in ROWSUM)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(["bash", "-c", f"{sys.executable} -m pipelink.cli link --pipeline "
                                         f"<(cat {REPO / 'pipelines/rowsum.json'}) {subs} -o k.cubin"],
                          cwd=tmp_path, capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "k.cubin").read_bytes().startswith(b"\x7fELF")
    contract = (REPO / "contracts/tile_load.json").read_bytes()
    for command in ("check", "inspect"):
        proc = subprocess.run([sys.executable, "-m", "pipelink.cli", command, "/dev/stdin"], input=contract,
                              capture_output=True, env=env)
        assert proc.returncode == 0, proc.stderr.decode()
        assert b"tile_load" in proc.stdout


def test_an_endless_input_is_refused_at_the_limit(capsys, monkeypatch):
    """/dev/zero never ends: read up to the limit, then a located refusal (exit 2), not a hang."""
    from pipelink.core import files
    monkeypatch.setattr(files, "MAX_INPUT_BYTES", 1 << 20)
    for command in ("check", "inspect", "link"):
        code, _, err = run(capsys, command, "/dev/zero")
        assert code == 2 and "error[PL002]" in err and "larger than 1 MiB" in err, err


def test_build_compile_error_writes_nothing(capsys, tmp_path):
    from pipelink.harness.shipped import REPO
    src = tmp_path / "broken.cu"
    src.write_text('#include "tile_transform.pipelink.h"\nextern "C" __device__ void tile_transform(pl::Tile t, '
                   'int wrong) {}\n')
    out_file = tmp_path / "broken.o"
    code, _, err = run(capsys, "build", src, "--contract", REPO / "contracts/tile_transform.json", "-o", out_file)
    assert code == 1 and "error[PL019]" in err and "tile_transform" in err
    assert not out_file.exists() and list(tmp_path.iterdir()) == [src]


def test_a_compile_error_names_the_files_as_the_command_gave_them(capsys, tmp_path, monkeypatch):
    """nvcc runs in the source's folder; its messages still name the source by the path given (for an editor or
    a CI annotation), not by its file name alone."""
    from pipelink.harness.shipped import REPO
    (tmp_path / "comp").mkdir()
    (tmp_path / "comp" / "broken.cu").write_text('#include PIPELINK_HEADER\nextern "C" __device__ int helper() '
                                                  '{ int x = ; return x; }\n')
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "build", "comp/broken.cu", "--contract", REPO / "contracts/tile_transform.json",
                       "-o", "broken.o")
    assert code == 1 and "error[PL019]" in err
    assert "comp/broken.cu(2): error" in err and 'compilation of "comp/broken.cu"' in err, err


@pytest.mark.parametrize("name, text, says", [
    ("c(2).cu", 'extern "C" __device__ int helper() { int x = ; return x; }\n', "comp/c(2).cu(2): error"),
    # a macro that breaks the generated header: its lines carry its own name, no file beside the source
    ("hdr.cu", "#define WARPS 3\n", "\n    tile_transform.pipelink.h("),
], ids=["parentheses", "generated-header"])
def test_a_compile_error_names_only_files_that_are_there(capsys, tmp_path, monkeypatch, name, text, says):
    """A source name with parentheses is put back as given too, and the generated header, which lives in a scratch
    folder, is not named as if it were beside the source (comp/tile_transform.pipelink.h had been shown)."""
    from pipelink.authoring.builder import _paths_as_given
    from pipelink.harness.shipped import REPO
    (tmp_path / "comp").mkdir()
    (tmp_path / "comp" / name).write_text("#include <pipelink/component.h>\n" + text + "#include PIPELINK_HEADER\n")
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, "build", f"comp/{name}", "--contract", REPO / "contracts/tile_transform.json",
                       "-o", "x.o", "--arch", "sm_90")
    assert code == 1 and "error[PL019]" in err and says in err, err
    assert "comp/tile_transform.pipelink.h" not in err and f'compilation of "comp/{name}"' in err, err
    # a name like another system's (a drive letter) is no file here: left as nvcc gave it
    assert _paths_as_given("C:\\x\\y.cu(3): error: e", Path("comp") / name) == "C:\\x\\y.cu(3): error: e"


# --- every class of bad input: a located diagnostic, a hint, exit 1 or 2, no traceback ------------

@pytest.mark.parametrize("command", ["check", "link", "build"])
def test_an_unknown_target_on_the_command_line_is_a_usage_error(capsys, shipped_objects, tmp_path, command):
    """--arch names a target pipelink does not know: exit 2 before any input is read, nothing written (a
    contract naming one stays a contract problem, PL034)."""
    from pipelink.harness.shipped import REPO
    out = tmp_path / "out.bin"
    args = {"check": [shipped_objects["tile_load"]],
            "link": [shipped_objects["tile_load"], "-o", out],
            "build": [REPO / "components/tile_transform/tile_transform.cu", "--contract",
                      REPO / "contracts/tile_transform.json", "-o", out]}[command]
    code, _, err = run(capsys, command, *args, "--arch", "sm_99")
    assert code == 2 and "error[PL001]" in err and "unknown target 'sm_99'" in err and "sm_90a" in err
    assert not out.exists()


def _bad(capsys, path, code, exit_code, *more):
    got, out, err = run(capsys, "check", path, *more)
    assert got == exit_code, err
    assert f"error[{code}]" in err, err
    assert str(path.name) in err
    assert "= hint: " in err
    return err


def test_empty_file(capsys, built_objects):
    _bad(capsys, built_objects["empty.o"], "PL003", 2)


def test_random_bytes(capsys, built_objects):
    _bad(capsys, built_objects["random.o"], "PL004", 2)


def test_truncated_object(capsys, built_objects):
    _bad(capsys, built_objects["half.o"], "PL005", 2)


def test_text_file_as_object(capsys, tmp_path):
    p = tmp_path / "notes.o"
    p.write_text("these are my notes\n")
    assert "looks like text" in _bad(capsys, p, "PL004", 2)


def test_json_file_as_object(capsys, tmp_path):
    p = tmp_path / "comp.o"
    p.write_text(json.dumps(COMP_CONTRACT))
    assert "looks like JSON" in _bad(capsys, p, "PL004", 2)


def test_host_only_object(capsys, built_objects):
    _bad(capsys, built_objects["host.o"], "PL010", 1)


def test_object_without_ltoir(capsys, built_objects):
    err = _bad(capsys, built_objects["nolto.o"], "PL011", 1)
    assert "-dlto" in err


def test_object_for_another_arch(capsys, built_objects, tmp_path):
    obj = tmp_path / "sm80.o"
    shutil.copy(built_objects["sm80_fast.o"], obj)
    write_sidecar(obj, targets={"archs": ["sm_90"], "compile_flags": {"ftz": True, "prec_div": False,
                                                                       "prec_sqrt": False, "fmad": True}})
    err = _bad(capsys, obj, "PL012", 1)
    assert "LTO-IR for sm_80 only, not for sm_90" in err


def test_object_without_contract(capsys, built_objects):
    _bad(capsys, built_objects["good.o"], "PL013", 1)


def test_entry_symbol_not_in_object(capsys, built_objects, tmp_path):
    obj = tmp_path / "comp.o"
    shutil.copy(built_objects["good.o"], obj)
    write_sidecar(obj, entry={"symbol": "comp_scal"})
    got, _, err = run(capsys, "check", obj)
    assert got == 1 and "error[PL014]" in err and "did you mean 'comp_scale'" in err
    assert "at /entry/symbol" in err and "comp.o.contract.json" in err


def test_invalid_json_contract(capsys, tmp_path):
    p = tmp_path / "c.json"
    p.write_text('{"name": "x",\n "version": }')
    err = _bad(capsys, p, "PL006", 2)
    assert "c.json:2:" in err


def test_schema_violation_with_pointer(capsys, tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps(dict(COMP_CONTRACT, threads={"warps": 0})))
    err = _bad(capsys, p, "PL020", 1)
    assert "at /threads/warps" in err


def test_flags_differ_between_components(capsys, shipped_objects, tmp_path):
    """A real build of tile_transform with -ftz=true next to the shipped tile_load."""
    from pipelink.harness.shipped import REPO
    contract = json.loads((REPO / "contracts/tile_transform.json").read_text())
    contract["targets"]["compile_flags"]["ftz"] = True
    cpath = tmp_path / "tile_transform_ftz.json"
    cpath.write_text(json.dumps(contract))
    obj = tmp_path / "tile_transform_ftz.o"
    code, _, err = run(capsys, "build", REPO / "components/tile_transform/tile_transform.cu", "--contract", cpath,
                       "-o", obj, "--arch", "sm_90")
    assert code == 0, err
    code, out, _ = run(capsys, "inspect", obj)
    assert "-ftz=1" in out
    got, _, err = run(capsys, "check", "--set", shipped_objects["tile_load"], obj)
    assert got == 1 and "error[PL040]" in err and "'tile_transform' is compiled with ftz=true but 'tile_load' with ftz=false" in err


def test_object_flags_differ_from_its_contract(capsys, shipped_objects, tmp_path):
    from pipelink.harness.shipped import REPO
    contract = json.loads((REPO / "contracts/tile_load.json").read_text())
    contract["targets"]["compile_flags"]["fmad"] = False
    obj = tmp_path / "tile_load.o"
    embed_contract(shipped_objects["tile_load"], json.dumps(contract).encode(), obj)
    got, _, err = run(capsys, "check", obj)
    assert got == 1 and "error[PL016]" in err and "fmad: contract false, object true" in err


def test_stale_build(capsys, shipped_objects, tmp_path):
    """The object was compiled against one contract and ships with an edited one."""
    from pipelink.harness.shipped import REPO
    contract = json.loads((REPO / "contracts/tile_transform.json").read_text())
    contract["geometry"]["consumes"]["TILE_N"]["max"] = 512
    obj = tmp_path / "tile_transform.o"
    embed_contract(shipped_objects["tile_transform"], json.dumps(contract).encode(), obj)
    got, _, err = run(capsys, "check", obj)
    assert got == 1 and "error[PL049]" in err and "not compiled against this contract" in err


def test_barrier_clash_between_components(capsys, tmp_path):
    a = dict(COMP_CONTRACT, name="a", entry={"symbol": "a"}, barriers={"hardcoded_ids": [1, 2]})
    b = dict(COMP_CONTRACT, name="b", entry={"symbol": "b"}, barriers={"hardcoded_ids": [2]})
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    got, _, err = run(capsys, "check", "--set", pa, pb)
    assert got == 1 and "error[PL045]: barrier id 2 is hard-coded by both 'a' and 'b'" in err
    assert ">>> also " in err and "a.json" in err


def test_usage_errors(capsys, tmp_path):
    got, _, err = run(capsys, "check")
    assert got == 2 and "error[PL001]" in err
    got, _, err = run(capsys, "frobnicate")
    assert got == 2 and "error[PL001]" in err
    got, _, err = run(capsys, "check", tmp_path / "missing.o")
    assert got == 2 and "error[PL002]" in err and "missing.o" in err
    got, _, err = run(capsys, "check", tmp_path)
    assert got == 2 and "error[PL002]" in err


def test_usage_error_over_link_error(capsys, built_objects):
    """Unreadable input (2) outranks a contract problem (1) when both occur."""
    got, _, err = run(capsys, "check", built_objects["empty.o"], built_objects["good.o"])
    assert got == 2 and "PL003" in err


def test_console_script_has_no_traceback(built_objects):
    proc = subprocess.run([sys.executable, "-m", "pipelink.cli", "check", str(built_objects["random.o"])],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "error[PL004]" in proc.stderr and "Traceback" not in proc.stderr


def test_build_says_why_it_cannot_read_the_source(capsys, tmp_path):
    """A missing source, a folder, a pipe (nvcc reads the source by path, its #includes beside it): each
    a located PL002 that says which, exit 2, nothing written."""
    from pipelink.harness.shipped import REPO
    fifo = tmp_path / "src.cu"
    os.mkfifo(fifo)
    out = tmp_path / "k.o"
    for source, why in ((tmp_path / "missing.cu", "it does not exist"), (tmp_path, "it is a directory"),
                        (fifo, "not a regular file")):
        code, _, err = run(capsys, "build", source, "--contract", REPO / "contracts/tile_load.json", "-o", out)
        assert code == 2 and "error[PL002]" in err and why in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.cu"]


@pytest.mark.parametrize("argv", [
    ["link", "a.o", "-o", ""], ["link", "a.o", "--pipeline", ""], ["link", "a.o", "--manifest", ""],
    ["link", "a.o", "--map", ""], ["link", "a.o", "--emit-glue", ""], ["link", ""], ["check", ""],
    ["check", "a.json", "--pipeline", ""], ["inspect", ""], ["header", ""], ["header", "c.json", "-o", ""],
    ["build", "", "--contract", "c.json", "-o", "k.o"], ["build", "s.cu", "--contract", "c.json", "-o", ""],
])
def test_an_empty_path_is_a_usage_error(capsys, tmp_path, monkeypatch, argv):
    """`-o "$OUT"` with OUT unset: refused (exit 2, PL001), where it used to mean the default name, no
    pipeline at all (a different kernel), or the current folder."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run(capsys, *argv)
    assert code == 2 and "error[PL001]" in err and "an empty path" in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_toolkit_that_is_not_there_is_no_glue_bug(shipped_objects, capsys, monkeypatch, tmp_path):
    """PIPELINK_CUDA_HOME naming no toolkit: the link says so (PL008, exit 2), not that NVRTC refused the
    generated glue (PL075, 'a bug in pipelink')."""
    from pipelink import toolchain
    from pipelink.harness.shipped import REPO
    monkeypatch.setenv("PIPELINK_CUDA_HOME", str(tmp_path / "no-toolkit"))
    toolchain.cuda_root.cache_clear()
    try:
        code, _, err = run(capsys, "link", "--pipeline", REPO / "pipelines/rowsum.json",
                           *(shipped_objects[n] for n in ROWSUM), "-o", tmp_path / "k.cubin", "--no-cache")
    finally:
        monkeypatch.delenv("PIPELINK_CUDA_HOME")
        toolchain.cuda_root.cache_clear()
    assert code == 2 and "error[PL008]" in err and "PIPELINK_CUDA_HOME" in err and "PL075" not in err, err
    assert not (tmp_path / "k.cubin").exists()


@pytest.mark.parametrize("name,why", [("t", "the generated glue declares"), ("rest", "the generated glue declares"),
                                      ("pl_epoch", "the generated glue declares"), ("int", "C++ keyword"),
                                      ("threadIdx", "CUDA built-in")])
def test_a_parameter_the_glue_would_shadow_or_not_compile_is_refused(capsys, built_objects, tmp_path, name, why):
    """The glue's task loop declares `t` (the task index): a component parameter `t` was shadowed by it and
    received the task index instead of the caller's value, silently. Such names, C++ keywords and CUDA
    built-ins are PL188 at the parameter, before anything is compiled or written."""
    obj = tmp_path / "comp.o"
    shutil.copy(built_objects["good.o"], obj)
    write_sidecar(obj, entry={"symbol": "comp_scale", "params": [{"name": "x", "dtype": "f32", "pointer": True},
                                                                 {"name": name, "dtype": "i32"}]},
                  geometry={"tile_sequence": {"grid": [4], "order": "row_major", "distribution": "grid_stride"}})
    code, _, err = run(capsys, "link", obj, "-o", tmp_path / "k.cubin", "--no-cache")
    assert code == 1 and "error[PL188]" in err and f"parameter '{name}'" in err and why in err, err
    assert "at /entry/params/1/name" in err
    assert not (tmp_path / "k.cubin").exists()


def test_declared_locals_are_read_from_the_glue():
    from pipelink.linker.names import clashes, declared_locals
    body = """{
      // a comment that names undefined things: int gone;
      unsigned long long* const e7 = pl_events + 0ll;
      for (int t = blockIdx.x, it = 0; t < n; t += gridDim.x, ++it) {
        pl::Tile tile;
        int rest = t;
        comp(tile, &a, x, n);
        return;
      }
    }"""
    assert declared_locals(body) == {"e7", "t", "it", "tile", "rest"}
    glue = 'extern "C" __global__ void k(float* x, int it, int n, int pl_mine) ' + body
    assert [(kind, name) for kind, name, _ in clashes(glue, "k", ["x", "it", "n", "pl_mine"], ["comp", "class"])] == [
        ("kernel parameter", "it"), ("kernel parameter", "pl_mine"), ("entry symbol", "class")]


def test_a_kernel_named_as_a_keyword_is_refused(capsys, shipped_objects, tmp_path):
    from pipelink.harness.shipped import REPO
    code, _, err = run(capsys, "link", "--pipeline", REPO / "pipelines/rowsum.json",
                       *(shipped_objects[n] for n in ROWSUM), "-o", tmp_path / "k.cubin", "--name", "int", "--no-cache")
    assert code == 1 and "error[PL077]" in err and "C++ keyword" in err and "PL075" not in err, err
    assert "--> option --name int" in err and "rowsum.json" not in err.split("PL077")[1], err  # not the file's /name


def test_a_value_from_an_option_is_located_at_the_option(capsys, shipped_objects, tmp_path):
    """--profile-tasks on a pipeline that is not persistent: PL179 names the option, not the pipeline file
    (which does not hold it); the same in SARIF, in the location's property bag."""
    from pipelink.harness.shipped import REPO
    argv = ["link", "--pipeline", REPO / "pipelines/rowsum.json", *(shipped_objects[n] for n in ROWSUM),
            "-o", tmp_path / "k.cubin", "--profile-tasks", "64", "--no-cache"]
    code, _, err = run(capsys, *argv)
    assert code == 1 and "error[PL179]" in err and "--> option --profile-tasks 64" in err, err
    code, out, _ = run(capsys, *argv, "--format", "sarif")
    (result,) = json.loads(out)["runs"][0]["results"]
    assert result["ruleId"] == "PL179" and result["locations"][0]["properties"] == {"option": "--profile-tasks 64"}


@pytest.mark.parametrize("pipe,names,value", [("rowsum", ROWSUM, "64"), ("ring_gemv", RING, "3")])
def test_a_link_specialized_for_a_shape_links(capsys, shipped_objects, tmp_path, pipe, names, value):
    """`--specialize M=V` declares the constant in the glue under the parameter's name: that is no clash with a
    local of the glue (PL188 had refused every specialized parameter)."""
    from pipelink.harness.shipped import REPO
    out = tmp_path / "k.cubin"
    code, _, err = run(capsys, "link", "--pipeline", REPO / f"pipelines/{pipe}.json", *(shipped_objects[n] for n in names),
                       "--specialize", f"M={value}", "-o", out, "--no-cache", "--emit-monolithic", tmp_path / "k.cu")
    assert code == 0, err
    assert json.loads((tmp_path / "k.json").read_text())["specialized"] == {"M": int(value)}
    assert f"M = {value};  // specialized at link time" in (tmp_path / "k.cu").read_text()


def test_an_input_wired_from_two_producers_is_refused(capsys, shipped_objects, tmp_path):
    """The last of two wires into one input had won silently (the other producer's output never read, the map
    listing both): PL192 at the second wire, naming the first."""
    pipe = tmp_path / "two.json"
    pipe.write_text(json.dumps({"pipeline": 1, "name": "rowsum", "schedule": "sequential", "components": ROWSUM,
                                "wires": ["tile_load.tile -> tile_transform.src", "tile_transform.dst -> block_rowsum.tile",
                                          "tile_load.tile -> block_rowsum.tile"]}))
    objs = [shipped_objects[n] for n in ROWSUM]
    code, _, err = run(capsys, "check", *objs, "--pipeline", pipe)
    assert code == 1 and "error[PL192]" in err and "at /wires/2" in err and "also" in err and "at /wires/1" in err, err
    code, _, err = run(capsys, "link", *objs, "--wire", "tile_load.tile=block_rowsum.tile", "--wire",
                       "tile_transform.dst=block_rowsum.tile", "-o", tmp_path / "k.cubin", "--no-cache")
    assert code == 1 and "error[PL192]" in err and not (tmp_path / "k.cubin").exists(), err


def test_an_object_where_json_belongs_is_pl004(capsys, shipped_objects, tmp_path):
    """A contract or pipeline argument given an object: PL004 naming what was expected (it had been PL006, a byte
    that is no UTF-8)."""
    obj = shipped_objects["tile_load"]
    code, _, err = run(capsys, "header", obj, "-o", tmp_path / "h.h")
    assert code == 2 and "error[PL004]" in err and "not a contract" in err, err
    code, _, err = run(capsys, "link", obj, "--pipeline", obj, "-o", tmp_path / "k.cubin")
    assert code == 2 and "error[PL004]" in err and "not a pipeline" in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_cycle_of_wires_is_located_at_the_wires(capsys, shipped_objects, tmp_path):
    """PL068 named the cycle's components only: now at the pipeline's wire (a self-wire here)."""
    pipe = tmp_path / "self.json"
    pipe.write_text(json.dumps({"pipeline": 1, "components": ROWSUM, "schedule": "sequential",
                                "wires": ["tile_transform.dst -> tile_transform.src",
                                          "tile_transform.dst -> block_rowsum.tile"]}))
    code, _, err = run(capsys, "check", *(shipped_objects[n] for n in ROWSUM), "--pipeline", pipe)
    assert code == 1 and "error[PL068]" in err and f"--> {pipe}, at /wires/0" in err, err


def test_a_build_interrupted_during_nvcc_leaves_no_files_behind(tmp_path):
    """Ctrl-C while nvcc compiles a component: exit 130, and neither pipelink's scratch directory nor nvcc's
    intermediate files (tmpxft_*, which nvcc puts in TMPDIR and does not remove when it is killed) are left."""
    import signal
    import time
    from pipelink.harness.shipped import REPO
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch), PIPELINK_CACHE="0")
    out_file = tmp_path / "t.o"
    proc = subprocess.Popen([sys.executable, "-m", "pipelink", "build",
                             REPO / "components/tile_transform/tile_transform.cu", "--contract",
                             REPO / "contracts/tile_transform.json", "-o", out_file, "--arch", "sm_90"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while not list(scratch.rglob("tmpxft_*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the build ended before nvcc wrote a file"
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: to pipelink and nvcc alike
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert list(scratch.iterdir()) == [] and not out_file.exists()


def test_two_builds_of_one_component_are_byte_identical(tmp_path):
    """A build is reproducible without the build cache: the scratch folder's random name (where the generated
    header lies) must not reach the object; nvcc derives its module id from the compile's line markers."""
    from pipelink.harness.shipped import REPO
    env = dict(os.environ, PIPELINK_CACHE="0")
    outs = []
    for i in range(2):
        out = tmp_path / f"t{i}.o"
        proc = subprocess.run([sys.executable, "-m", "pipelink", "build",
                               REPO / "components/tile_transform/tile_transform.cu", "--contract",
                               REPO / "contracts/tile_transform.json", "-o", out, "--arch", "sm_90"],
                              env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


def test_a_build_from_another_folder_is_byte_identical(tmp_path):
    """The same inputs give the same object from any working folder: nvcc puts the source's path as it is given
    into the LTO-IR, so `tile_transform.cu` in its folder and `../../tile_transform.cu` from another had differed."""
    from pipelink.harness.shipped import REPO
    source = REPO / "components/tile_transform/tile_transform.cu"
    elsewhere = tmp_path / "a" / "b"
    elsewhere.mkdir(parents=True)
    env = dict(os.environ, PIPELINK_CACHE="0", PYTHONPATH=str(REPO))  # the cache would hand the second the first's
    outs = []
    for i, (cwd, spelt) in enumerate([(source.parent, source.name), (elsewhere, os.path.relpath(source, elsewhere))]):
        out = tmp_path / f"t{i}.o"
        proc = subprocess.run([sys.executable, "-m", "pipelink", "build", spelt, "--contract",
                               os.path.relpath(REPO / "contracts/tile_transform.json", cwd), "-o", out,
                               "--arch", "sm_90"], cwd=cwd, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


# tile_transform with an #include beside it and functions and a variable of internal linkage: nvcc names those
# after a hash of the source's full path (its module id)
_MOVED_SOURCE = """#include "tile_transform.pipelink.h"
#include "../inc/scale.h"
using namespace pl::tile_transform;
static __device__ float peak;
namespace { __device__ float silu(float v) { return v / (1.0f + __expf(-v)); } }
static __device__ float scaled(float v, float s) { return silu(v) * s * kScale; }
extern "C" __device__ void tile_transform(pl::Tile tile, float scale) {
  const float* src = port_src();
  float* dst = port_dst();
  for (int i = thread_rank(); i < TILE_M() * TILE_N(); i += THREADS) dst[i] = scaled(src[i], scale) + peak;
}
"""


def test_a_source_copied_to_another_folder_builds_the_same_object(tmp_path, monkeypatch):
    """The same source, contract and options give the same object wherever the source sits: nvcc ran in the source's
    folder, and its full path (the module id that names internal symbols) and that folder (the compile's working
    folder) had reached the LTO-IR, so a component copied or checked out elsewhere built other bytes."""
    from pipelink.authoring.builder import BuildOptions, build_component
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.core.loader import load_contract_file
    from pipelink.harness.shipped import REPO
    monkeypatch.setenv("PIPELINK_CACHE", "0")
    contract_file = REPO / "contracts/tile_transform.json"
    contract = load_contract_file(contract_file, DiagnosticSink())
    outs = []
    for i, folder in enumerate([tmp_path / "a" / "comp", tmp_path / "b" / "other" / "deeper"]):
        folder.mkdir(parents=True)
        (folder.parent / "inc").mkdir()
        (folder.parent / "inc" / "scale.h").write_text("#pragma once\nconstexpr float kScale = 0.5f;\n")
        (folder / "x.cu").write_text(_MOVED_SOURCE)
        sink = DiagnosticSink()
        assert build_component(contract, contract_file.read_bytes(), folder / "x.cu", tmp_path / f"x{i}.o", sink,
                               BuildOptions(archs=("sm_90",))), [d.render() for d in sink.items]
        outs.append((tmp_path / f"x{i}.o").read_bytes())
    assert outs[0] == outs[1]


# --- build writes nothing that check would refuse -------------------------------------------------

SEG_SILU_CONTRACT = json.loads((Path(__file__).resolve().parents[1] / "contracts" / "seg_silu.json").read_text())
SEG_SILU_SOURCE = (Path(__file__).resolve().parents[1] / "components" / "seg_silu" / "seg_silu.cu").read_text()


def _older_header() -> str:
    """seg_silu's header generated from an earlier version of its contract (another TILE)."""
    from pipelink.authoring.header import generate_header
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.core.loader import load_contract_dict
    from pipelink.core.model import Source
    older = json.loads(json.dumps(SEG_SILU_CONTRACT))
    older["geometry"]["provides"]["TILE"] = 512
    return generate_header(load_contract_dict(older, Source("seg_silu_v0.json"), DiagnosticSink()))


def _marker_off(d: Path) -> None:
    (d / "seg_silu.cu").write_text("#define PL_NO_CONTRACT_MARKER\n" + SEG_SILU_SOURCE)


def _header_copy(d: Path) -> None:  # a kept copy of an older generated header, under another name and folder
    (d / "old").mkdir()
    (d / "old" / "seg_silu_v0.h").write_text(_older_header())
    (d / "seg_silu.cu").write_text(SEG_SILU_SOURCE.replace('"seg_silu.pipelink.h"', '"old/seg_silu_v0.h"'))


def _sidecar(d: Path) -> None:  # the contract named as the object's sidecar: check reads two contracts
    (d / "out.contract.json").write_text(json.dumps(SEG_SILU_CONTRACT))


@pytest.mark.parametrize("setup, args, code, exit_code, says", [
    (None, ["--arch", "sm_90a"], "PL012", 1, "not for sm_90, the contract's target"),
    (None, ["-D", "PL_NO_CONTRACT_MARKER"], "PL001", 2, "drops the contract marker"),
    (None, ["-D", 'PIPELINK_HEADER="seg_silu_v0.h"'], "PL001", 2, "names another header"),
    (None, ["-o", "{d}/out.json"], "PL001", 2, "reads a .json file as a contract"),
    (_marker_off, [], "PL049", 1, "defines no 'pl_seg_silu__contract__"),
    (_header_copy, [], "PL198", 1, "old/seg_silu_v0.h, a copy of the header generated from contract 'seg_silu'"),
    (_sidecar, [], "PL017", 1, "also has the sidecar"),
], ids=["arch-subset", "define-marker-off", "define-header", "json-name", "source-marker-off", "header-copy",
        "sidecar"])
def test_a_build_check_would_refuse_fails_and_keeps_the_previous_output(capsys, tmp_path, setup, args, code,
                                                                         exit_code, says):
    """`pipelink build` had written objects that `pipelink check` and `link` then refused (a target the contract
    promises left out, the marker switched off, an older header's copy included, a sidecar beside the output):
    the build refuses them with a located diagnostic and a hint, and the output it would replace is untouched."""
    d = tmp_path / "src"
    d.mkdir()
    (d / "seg_silu.cu").write_text(SEG_SILU_SOURCE)
    (d / "seg_silu.json").write_text(json.dumps(SEG_SILU_CONTRACT))
    if setup:
        setup(d)
    args = [a.format(d=d) for a in args]
    out = Path(args[args.index("-o") + 1]) if "-o" in args else d / "out.o"
    out.write_bytes(b"the previous build")
    before = sorted(p.name for p in d.iterdir())
    got, _, err = run(capsys, "build", d / "seg_silu.cu", "--contract", d / "seg_silu.json",
                      *([] if "-o" in args else ["-o", out]), *args)
    assert got == exit_code and f"error[{code}]" in err and says in err and "= hint: " in err, err
    assert out.read_bytes() == b"the previous build" and sorted(p.name for p in d.iterdir()) == before


def test_a_build_for_the_family_target_goes_into_arch_specific_links_and_says_so(capsys, tmp_path):
    """seg_silu's contract lists sm_90 and sm_90a; built with --arch sm_90, the object holds sm_90 LTO-IR only.
    nvJitLink links that into an sm_90a kernel (the component's sm_90 code), so `check --arch sm_90a` and `link
    --arch sm_90a` take the object, and they and the build say so: PL199, a note at the target, with a hint (exit 0,
    --werror or not). For its other targets nothing is said."""
    d = tmp_path
    (d / "seg_silu.cu").write_text(SEG_SILU_SOURCE)
    (d / "seg_silu.json").write_text(json.dumps(SEG_SILU_CONTRACT))
    got, _, err = run(capsys, "build", d / "seg_silu.cu", "--contract", d / "seg_silu.json", "-o", d / "s.o",
                      "--arch", "sm_90", "--werror")
    assert got == 0 and (d / "s.o").is_file(), err
    assert "note[PL199]: " in err and "at /targets/archs/1" in err and "= hint: build it for sm_90a too" in err, err
    for argv, says in ((["--arch", "sm_90a"], True), ([], False), (["--arch", "sm_90"], False)):
        got, out, err = run(capsys, "check", d / "s.o", *argv, "--werror")
        assert got == 0 and ("note[PL199]: " in err) == says, (argv, err)
        assert f"seg_silu for {argv[1] if argv else 'sm_90'}" in out
    got, out, err = run(capsys, "check", d / "s.o", "--arch", "sm_90a", "--format", "json")
    (note,) = json.loads(out)["diagnostics"]
    assert got == 0 and (note["code"], note["severity"]) == ("PL199", "note"), out
    got, _, err = run(capsys, "link", d / "s.o", "--arch", "sm_90a", "-o", d / "k.cubin", "--no-cache", "--werror")
    assert got == 0 and "note[PL199]: " in err and (d / "k.cubin").is_file(), err


def test_a_build_refuses_what_check_refuses_with_checks_words(capsys, tmp_path, monkeypatch):
    """The object a source that switches its marker off makes: check refuses it (PL049); the build, which checks
    what it made as check does, says the same of it and writes nothing. Without that last step (the object as
    the build had written it) check's words are the build's."""
    from pipelink.authoring import builder
    d = tmp_path
    (d / "seg_silu.json").write_text(json.dumps(SEG_SILU_CONTRACT))
    _marker_off(d)
    got, _, said = run(capsys, "build", d / "seg_silu.cu", "--contract", d / "seg_silu.json", "-o", d / "x.o")
    assert got == 1 and not (d / "x.o").exists(), said
    monkeypatch.setattr(builder, "_checks_clean", lambda *a, **k: True)
    got, _, err = run(capsys, "build", d / "seg_silu.cu", "--contract", d / "seg_silu.json", "-o", d / "x.o")
    assert got == 0, err
    got, _, checked = run(capsys, "check", d / "x.o")
    assert got == 1
    line = next(line for line in checked.splitlines() if line.startswith("error["))
    assert line.startswith("error[PL049]: ") and line in said.splitlines(), (line, said)


def test_a_cached_object_is_checked_under_its_new_name(capsys, tmp_path):
    """An object from the build cache is refused where check would refuse it under the name it is written to
    (a sidecar contract beside it), though the same build to another name passed."""
    (tmp_path / "seg_silu.cu").write_text(SEG_SILU_SOURCE)
    (tmp_path / "seg_silu.json").write_text(json.dumps(SEG_SILU_CONTRACT))
    got, _, err = run(capsys, "build", tmp_path / "seg_silu.cu", "--contract", tmp_path / "seg_silu.json",
                      "-o", tmp_path / "a.o")
    assert got == 0, err
    _sidecar(tmp_path)
    got, out, err = run(capsys, "build", tmp_path / "seg_silu.cu", "--contract", tmp_path / "seg_silu.json",
                        "-o", tmp_path / "out.o")
    assert got == 1 and "error[PL017]" in err and not (tmp_path / "out.o").exists(), out + err


@pytest.mark.parametrize("options, code, says, at", [
    (["--wire", "a.b=c.d"], 1, "error[PL062]", "option --wire a.b=c.d"),
    (["--wire", "tile_load.tile=block_rowsum.tile"], 1, "error[PL192]", "option --wire tile_load.tile=block_rowsum.tile"),
    (["--wire", "foo"], 2, "cannot read wire 'foo'", "option --wire foo"),
    (["--specialize", "M=abc"], 2, "write NAME=INTEGER", "option --specialize M=abc"),
    (["--specialize", "M=1_000"], 2, "write NAME=INTEGER", "option --specialize M=1_000"),
    (["--specialize", "M=1", "--specialize", "M=2"], 2, "gives M twice: 1 and 2", "option --specialize M=2"),
    (["--geometry", "A=x"], 2, "write NAME=INTEGER", "option --geometry A=x"),
    (["--profile-tasks", "-1"], 2, "give a number of task records", "option --profile-tasks -1"),
    (["--name", ""], 2, "is not a C identifier", "option --name ''"),
])
def test_an_options_bad_value_is_located_at_the_option(capsys, shipped_objects, tmp_path, options, code, says, at):
    """Every problem with a value given on the command line names that option (text, JSON and SARIF), whether
    the CLI reads it (PL001, exit 2) or the link finds it (exit 1)."""
    from pipelink.harness.shipped import REPO
    argv = ["link", "--pipeline", REPO / "pipelines/rowsum.json", *(shipped_objects[n] for n in ROWSUM),
            "-o", tmp_path / "k.cubin", "--no-cache", *options]
    got, _, err = run(capsys, *argv)
    assert got == code and says in err and f"--> {at}" in err, err
    got, out, _ = run(capsys, *argv, "--format", "sarif")
    first = json.loads(out)["runs"][0]["results"][0]
    assert first["locations"][0]["properties"]["option"] == at.removeprefix("option ")
    assert not (tmp_path / "k.cubin").exists()


def test_a_wire_the_pipeline_already_has_is_the_same_wire(capsys, shipped_objects, tmp_path):
    from pipelink.harness.shipped import REPO
    code, _, err = run(capsys, "link", "--pipeline", REPO / "pipelines/rowsum.json",
                       *(shipped_objects[n] for n in ROWSUM), "-o", tmp_path / "k.cubin", "--no-cache",
                       "--wire", "tile_load.tile=tile_transform.src", "--wire", "tile_load.tile->tile_transform.src")
    assert code == 0, err


def test_pipelinks_other_documents_given_as_a_contract_say_what_they_are(capsys, shipped_objects, tmp_path):
    """A link's manifest (K.json) or a JSON Schema where a contract goes: one PL001 naming what it is, not the
    contract schema's flood of PL020."""
    from pipelink.harness.shipped import REPO
    code, _, err = run(capsys, "link", "--pipeline", REPO / "pipelines/rowsum.json",
                       *(shipped_objects[n] for n in ROWSUM), "-o", tmp_path / "k.cubin")
    assert code == 0, err
    for command, doc, says in (("inspect", tmp_path / "k.json", "a linked kernel's manifest"),
                               ("check", tmp_path / "k.json", "a linked kernel's manifest"),
                               ("check", REPO / "pipelink/schema/contract-v1.schema.json", "a JSON Schema")):
        code, _, err = run(capsys, command, doc)
        assert code == 2 and err.count("error[") == 1 and f"this is {says}" in err and "PL020" not in err, err


def test_what_a_schedule_from_an_option_cannot_do_names_the_option(capsys, shipped_objects, tmp_path):
    """--schedule persistent on rowsum (shared-memory wires, no tile sequence of its own): each diagnostic stays
    at the contract it is about and names the option that chose the schedule as its related location."""
    from pipelink.harness.shipped import REPO
    code, _, err = run(capsys, "link", "--pipeline", REPO / "pipelines/rowsum.json",
                       *(shipped_objects[n] for n in ROWSUM), "-o", tmp_path / "k.cubin", "--no-cache",
                       "--schedule", "persistent")
    assert code == 1 and "error[PL085]" in err and "error[PL072]" in err, err
    assert err.count(">>> also option --schedule persistent") == err.count("error[")


def test_a_contract_alone_given_to_link_is_pl010(capsys, tmp_path):
    """`check` takes a bare contract; a link needs the object: PL010 at the contract, exit 1, nothing written (it
    had been an internal error, exit 3), and from Python a failed result."""
    import pipelink
    from pipelink.harness.shipped import REPO
    contract = REPO / "examples/component-template/contracts/saxpy.json"
    code, _, err = run(capsys, "link", contract, "-o", tmp_path / "k" / "x.cubin", "--no-cache")
    assert code == 1 and "error[PL010]" in err and f"--> {contract}, at /name" in err and "pipelink build" in err, err
    assert not (tmp_path / "k").exists()
    result = pipelink.link([str(contract)])
    assert not result.ok and [d.code for d in result.diagnostics if d.severity == "error"] == ["PL010"]


@pytest.mark.parametrize("args", [["--profile-tasks", "\u0661\u0660"], ["--profile-tasks", " 10"],
                                  ["--specialize", "M= 5"], ["--geometry", "TILE_N =64"]])
def test_an_integer_option_takes_decimal_ascii_digits_as_written(capsys, tmp_path, args):
    """int() had taken other scripts' digits and surrounding spaces for --profile-tasks (and the value of
    --specialize a space before it): PL001, exit 2, nothing written."""
    from pipelink.harness.shipped import REPO
    code, _, err = run(capsys, "link", REPO / "examples/component-template/contracts/saxpy.json", *args,
                       "-o", tmp_path / "k.cubin")
    assert code == 2 and "error[PL001]" in err and not (tmp_path / "k.cubin").exists(), err


@pytest.mark.parametrize("field, doc", [("pipeline", {"pipeline": 1.0}), ("pipelink_contract", None)])
def test_a_format_version_written_as_a_float_is_refused(capsys, tmp_path, field, doc):
    from pipelink.harness.shipped import REPO
    contract = json.loads((REPO / "examples/component-template/contracts/saxpy.json").read_text())
    if doc is None:
        contract["pipelink_contract"] = 1.0
    (tmp_path / "c.json").write_text(json.dumps(contract))
    (tmp_path / "p.json").write_text(json.dumps(doc or {"pipeline": 1}))
    code, _, err = run(capsys, "check", tmp_path / "c.json", "--pipeline", tmp_path / "p.json")
    assert code in (1, 2) and f"at /{field}" in err and "not of type 'integer'" in err, err


def test_inspect_shows_a_line_break_in_a_contract_field_escaped(capsys, tmp_path):
    """A contract's owner holding a line break had printed a forged diagnostic line of its own."""
    from pipelink.harness.shipped import REPO
    doc = json.loads((REPO / "examples/component-template/contracts/saxpy.json").read_text())
    doc["owner"] = "team\nerror[PL045]: forged\n  --> elsewhere.json"
    (tmp_path / "c.json").write_text(json.dumps(doc))
    code, out, _ = run(capsys, "inspect", tmp_path / "c.json")
    assert code == 0 and "team\\nerror[PL045]: forged" in out
    assert not any(line.startswith("error[") for line in out.splitlines()), out


def test_sarif_names_the_file_by_its_bytes_and_an_objects_section_apart(capsys, tmp_path):
    """The URI had been built from the escaped text shown (`bad\\x07.json` -> bad%5Cx07.json) and had kept an
    object's `[.pipelink.contract]`; JSON output had carried a lone surrogate for a name that is not UTF-8."""
    from pipelink.harness.shipped import REPO
    doc = json.loads((REPO / "examples/component-template/contracts/saxpy.json").read_text())
    doc["threads"]["warps"] = 99
    for name in ("bad\x07.json", os.fsdecode(b"lat\xe9.json")):
        (tmp_path / name).write_text(json.dumps(doc))
    code, out, _ = run(capsys, "check", tmp_path / "bad\x07.json", "--format", "sarif")
    uri = json.loads(out)["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
    assert code == 1 and uri.endswith("/bad%07.json"), uri
    code, out, _ = run(capsys, "check", tmp_path / os.fsdecode(b"lat\xe9.json"), "--format", "json")
    json.loads(out.encode("utf-8"))  # strict: no lone surrogate
    assert "lat\ufffd.json" in out or "lat\\ufffd.json" in out
    from pipelink.core.diagnostics import Diagnostic, Location, sarif_log
    log = sarif_log([Diagnostic("PL013", "m", Location(file="/x/k.o[.pipelink.contract]", pointer="/a"))], "0")
    where = log["runs"][0]["results"][0]["locations"][0]
    assert where["physicalLocation"]["artifactLocation"]["uri"] == "file:///x/k.o"
    assert where["properties"] == {"pointer": "/a", "section": ".pipelink.contract"}


def test_config_with_stdout_closed_is_pl007():
    """Its printed line is all config makes: with stdout closed it had exited 0 having written nothing."""
    proc = subprocess.run([sys.executable, "-m", "pipelink", "config", "--cflags"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, pass_fds=(), preexec_fn=lambda: os.close(1))
    assert proc.returncode == 2 and "PL007" in proc.stderr, proc.stderr


@pytest.mark.parametrize("value", ["0", "-5", "1.5", "\u0661"])
def test_build_timeout_is_whole_seconds_at_least_one(capsys, tmp_path, value):
    from pipelink.harness.shipped import REPO
    code, _, err = run(capsys, "build", REPO / "components/seg_silu/seg_silu.cu", "--contract",
                       REPO / "contracts/seg_silu.json", "-o", tmp_path / "x.o", "--timeout", value)
    assert code == 2 and "error[PL001]" in err and "--timeout" in err and not (tmp_path / "x.o").exists(), err


def test_a_manifest_written_elsewhere_is_named_to_inspect_and_load(capsys, shipped_objects, tmp_path):
    """`link --pipeline k.json -o k.cubin --manifest m.json`: k.json beside the cubin is the pipeline file. inspect
    shows the cubin alone with a warning (it had failed, PL009, exit 2) and takes --manifest; load takes manifest=."""
    import shutil

    import pipelink
    from pipelink.harness.shipped import REPO
    shutil.copy(REPO / "pipelines/rowsum.json", tmp_path / "k.json")
    code, _, err = run(capsys, "link", "--pipeline", tmp_path / "k.json", *(shipped_objects[n] for n in ROWSUM),
                       "-o", tmp_path / "k.cubin", "--manifest", tmp_path / "m.json")
    assert code == 0, err
    code, out, err = run(capsys, "inspect", tmp_path / "k.cubin")
    assert code == 0 and "warning[PL009]" in err and "a pipeline file, not its manifest" in err, err
    code, out, err = run(capsys, "inspect", tmp_path / "k.cubin", "--manifest", tmp_path / "m.json")
    assert code == 0 and "launch   block" in out and not err, err
    code, _, err = run(capsys, "inspect", tmp_path / "k.cubin", tmp_path / "k.cubin", "--manifest", tmp_path / "m.json")
    assert code == 2 and "error[PL001]" in err
    with pytest.raises(pipelink.PipelinkError, match="manifest=PATH"):
        pipelink.load(tmp_path / "k.cubin", None)
    assert pipelink.load(tmp_path / "k.cubin", None, manifest=tmp_path / "m.json").manifest.kernel


# --- inspect of the entries form ----------------------------------------------------------------

def _role_structured(tmp_path) -> tuple[Path, Path]:
    """A mainloop (two instances of its consumer role, a 2-CTA cluster, a tensor map) and an epilogue taking its
    accumulator fragment, as contract files; the owner holds an escape sequence, shown escaped."""
    from hopper_factory import epilogue, mainloop

    def ml(c):
        c["owner"] = "gemm\x1b[31m-team"
        c["cluster"] = {"dims": [2]}
        c["threads"]["roles"][1].update(warps=4, instances=2)
        c["params"][0]["tensor_map"]["oob_fill"] = "nan"
    paths = tmp_path / "ml.json", tmp_path / "epi.json"
    for path, doc in zip(paths, (mainloop(ml), epilogue())):
        path.write_text(json.dumps(doc))
    return paths


ENTRIES_TEXT = [
    "  params    const pl::TensorMap* a, int M, int N, int K",
    "  entry     init: ml_init(const pl::TensorMap* a)  [per_cta, every thread, before the roles split]",
    "  entry     load: ml_load(const pl::TensorMap* a, int K)  [per_tile, role producer]",
    "  entry     mma: ml_mma(float* __restrict__ acc, int K)  [per_tile, role consumer]",
    "  tensormap a: bf16[M, K], box [TILE_M, TILE_K], swizzle 128B, oob fill nan",
    "  threads   12 warps: producer 4 (warpgroup) setmaxnreg 40, consumer 4 x 2 instances (warpgroup) setmaxnreg 232",
    "  registers setmaxnreg roles take 64512 of an SM's 65536 at one block per SM: producer 4 warps x 40 + consumer 8 "
    "warps x 232",
    "  cluster   2 x 1 x 1 CTAs",
    "  port      out acc: reg f32[TILE_M, TILE_N] fragment sm90_gmma_acc, from role consumer (entry mma) to the role "
    "that joins it (4B/elem)",
    "  tiles     grid [ceil_div(M, TILE_M), ceil_div(N, TILE_N)] grouped in bands of 8, grid_stride",
]
EPILOGUE_TEXT = [
    "  params    __nv_bfloat16* __restrict__ out, int M, int N",
    "  entry     tile: epi_tile(float* __restrict__ acc, __nv_bfloat16* __restrict__ out, int M, int N)  [per_tile, "
    "role epilogue]",
    "  threads   TILE_M // 16 (8 at the defaults) warps: epilogue TILE_M // 16 (8 at the defaults) (warpgroup)",
    "  port      in  acc: reg f32[TILE_M, TILE_N] fragment sm90_gmma_acc, to role epilogue (entry tile), which joins "
    "the role holding it (4B/elem)",
]


def test_inspect_text_shows_every_entry_role_register_port_and_tensor_map_of_the_entries_form(capsys, tmp_path):
    """It had shown the first entry's symbol with every parameter, no role, instance, fragment or tensor map."""
    ml, epi = _role_structured(tmp_path)
    code, out, _ = run(capsys, "inspect", ml, epi)
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("contract ml 1.0.0 (gemm\\x1b[31m-team)"), out
    assert "\x1b" not in out
    for line in ENTRIES_TEXT + EPILOGUE_TEXT:
        assert line in lines, f"{line!r} not in\n{out}"


def test_inspect_json_carries_the_facts_of_the_entries_form(capsys, tmp_path):
    ml, epi = _role_structured(tmp_path)
    code, out, _ = run(capsys, "inspect", "--format", "json", ml, epi)
    doc = json.loads(out)
    c, e = (i["contract"] for i in doc["inputs"])
    assert code == 0 and c["form"] == "entries" and e["form"] == "entries"
    assert c["entry"]["symbol"] == "ml_init"  # the keys of the single-entry form stay
    assert [(x["name"], x["symbol"], x["role"], x["invocation"], x["args"], x["register_ports"]) for x in c["entries"]] == [
        ("init", "ml_init", "*", "per_cta", ["a"], []), ("load", "ml_load", "producer", "per_tile", ["a", "K"], []),
        ("mma", "ml_mma", "consumer", "per_tile", ["acc", "K"], ["acc"])]
    assert c["entries"][2]["params"] == ["float* __restrict__ acc", "int K"]
    assert c["params"][0] == {"name": "a", "dtype": "bf16", "pointer": False, "const": False,
                              "decl": "const pl::TensorMap* a", "shape": None,
                              "tensor_map": {"shape": ["M", "K"], "box": ["TILE_M", "TILE_K"], "swizzle": "128B",
                                             "oob_fill": "nan"}, "may_alias": [], "aliased_by": []}
    assert [(r["name"], r["warps"], r["instances"], r["setmaxnreg"]) for r in c["roles"]] == [
        ("producer", 4, 1, 40), ("consumer", 4, 2, 232)]
    assert c["register_pool"] == {"roles": [{"name": "producer", "warps": 4, "setmaxnreg": 40},
                                            {"name": "consumer", "warps": 8, "setmaxnreg": 232}],
                                  "registers": 64512, "regs_per_sm": 65536}
    assert c["cluster"] == [2, 1, 1] and c["geometry"]["tile_sequence"]["group"] == 8
    port = c["ports"][0]
    assert (port["space"], port["fragment"], port["role"], port["entries"]) == ("reg", "sm90_gmma_acc", "consumer", ["mma"])
    assert (e["ports"][0]["direction"], e["ports"][0]["role"], e["ports"][0]["entries"]) == ("in", "epilogue", ["tile"])
    assert e["warps_expr"] == "TILE_M // 16" and e["roles"][0]["warps_expr"] == "TILE_M // 16"
    assert e["register_pool"] is None and e["cluster"] is None


def test_inspect_shows_the_entries_form_of_an_objects_embedded_contract(capsys, tmp_path):
    """What `pipelink build` embeds is shown as a contract file is, indented under the object."""
    ml, _ = _role_structured(tmp_path)
    (tmp_path / "h.c").write_text("int host_only(int a) { return a + 1; }\n")
    subprocess.run(["gcc", "-c", "h.c", "-o", "h.o"], cwd=tmp_path, check=True)
    embed_contract(tmp_path / "h.o", ml.read_bytes(), tmp_path / "ml.o")
    code, out, _ = run(capsys, "inspect", tmp_path / "ml.o")
    assert code == 0
    for line in ENTRIES_TEXT:
        assert "  " + line in out.splitlines(), f"{line!r} not in\n{out}"
    code, out, _ = run(capsys, "inspect", "--format", "json", tmp_path / "ml.o")
    contract = json.loads(out)["inputs"][0]["contract"]
    assert [x["symbol"] for x in contract["entries"]] == ["ml_init", "ml_load", "ml_mma"]


def test_inspect_of_a_single_entry_contract_is_unchanged(capsys):
    """The entries form's lines are its own: a single entry's contract reads as it always did."""
    from pipelink.harness.shipped import REPO
    code, out, _ = run(capsys, "inspect", REPO / "contracts/tile_transform.json")
    assert code == 0
    assert out.splitlines()[1:] == [
        "  from      " + str(REPO / "contracts/tile_transform.json"),
        "  entry     tile_transform(float scale)  [per_tile]",
        "  targets   sm_90, sm_90a  ftz=0 prec_div=1 prec_sqrt=1 fmad=1",
        "  threads   4 warps: main 4; <= 128 regs/thread",
        "  port      in  src: smem f32[TILE_M, TILE_N] row_major x1 stages (4B/elem)",
        "  port      out dst: smem f32[TILE_M, TILE_N] row_major x1 stages (4B/elem)",
        "  geometry  provides -; consumes TILE_M in [1, 256], TILE_N in [32, 1024] and a multiple of 32"]
    code, out, _ = run(capsys, "inspect", "--format", "json", REPO / "contracts/tile_transform.json")
    c = json.loads(out)["inputs"][0]["contract"]
    assert c["form"] == "entry" and c["entries"] == [] and c["cluster"] is None and c["register_pool"] is None
    assert c["entry"] == {"symbol": "tile_transform", "invocation": "per_tile", "params": ["float scale"]}


def test_an_entry_argument_naming_a_gmem_port_is_its_parameter(capsys, tmp_path):
    """A gmem port may share its parameter's name: an entry taking it takes the parameter (const and all), not a
    register fragment. inspect had listed it among the register ports, and the header had declared it `float*`,
    dropping the const the source's definition keeps (the build then failed, PL019)."""
    from hopper_factory import epilogue

    from pipelink.authoring.header import entry_point_prototype
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.core.loader import load_contract_dict
    from pipelink.core.model import Source
    doc = epilogue()
    doc["params"].append({"name": "bias", "dtype": "f32", "pointer": True, "const": True})
    doc["entries"][0]["params"].append("bias")
    doc["ports"].append({"name": "bias", "direction": "in", "space": "gmem", "dtype": "f32", "param": "bias",
                         "tile": ["TILE_N"]})
    (tmp_path / "epi.json").write_text(json.dumps(doc))
    code, out, _ = run(capsys, "inspect", "--format", "json", tmp_path / "epi.json")
    [entry] = json.loads(out)["inputs"][0]["contract"]["entries"]
    assert code == 0 and entry["register_ports"] == ["acc"], entry
    assert entry["params"][-1] == "const float* __restrict__ bias", entry
    c = load_contract_dict(doc, Source("epi.json"), DiagnosticSink())
    assert entry_point_prototype(c, c.entries[0]).endswith("int N, const float* __restrict__ bias)")
