"""The command line as the tools around it expect: --version, each component alone by default, --werror,
SARIF, the pre-commit hook, `config --cflags`, what `link` says, and help text for every option."""
import io
import json
import re
import shlex
from pathlib import Path

import pytest

from comp_contract import COMP_CONTRACT
from pipelink import __version__, toolchain
from pipelink.cli import _parser, main
from pipelink.core.diagnostics import CODES
from pipelink.harness.shipped import REPO

ROWSUM = ["tile_load", "tile_transform", "block_rowsum"]


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def write(path: Path, doc: dict) -> Path:
    path.write_text(json.dumps(doc))
    return path


def component(name: str, **changes) -> dict:
    return dict(COMP_CONTRACT, name=name, entry=dict(COMP_CONTRACT["entry"], symbol=name), **changes)


def smem(size: int) -> dict:
    return {"buffers": [{"name": "buf", "bytes": size, "align": 16}]}


# --- --version -----------------------------------------------------------------------------------

def test_version_names_pipelink_and_the_toolchain_it_found(capsys):
    code, out, _ = run(capsys, "--version")
    lines = out.splitlines()
    assert code == 0 and lines[0] == f"pipelink {__version__} (CUDA toolchain pinned at {toolchain.PINNED_CUDA})"
    assert lines[1] == f"nvcc {toolchain.nvcc_version()} ({toolchain.nvcc_path()})"
    assert lines[1].startswith(f"nvcc {toolchain.PINNED_CUDA}.")
    assert lines[2] == f"NVRTC {toolchain.PINNED_CUDA}" and lines[3] == f"nvJitLink {toolchain.PINNED_CUDA}"


def test_version_says_which_tool_is_missing(capsys, monkeypatch):
    def missing(root=None):
        raise toolchain.ToolchainError("nvcc from the nvidia-cuda-nvcc==13.0.88 wheel was not found")
    monkeypatch.setattr(toolchain, "nvcc_version", missing)
    code, out, _ = run(capsys, "--version")
    assert code == 0 and "nvcc not available (nvcc from the nvidia-cuda-nvcc==13.0.88 wheel was not found)" in out


# --- check: each component alone, or --set ------------------------------------------------------

def test_unrelated_components_are_checked_one_by_one(capsys, tmp_path):
    """Each fits alone; together they need more shared memory than a block has (PL042)."""
    a = write(tmp_path / "a.json", component("a", smem=smem(150000)))
    b = write(tmp_path / "b.json", component("b", smem=smem(150000)))
    code, out, err = run(capsys, "check", a, b)
    assert code == 0 and "ok: 2 components checked one by one: a, b for sm_90" in out, err
    code, _, err = run(capsys, "check", "--set", a, b)
    assert code == 1 and "error[PL042]" in err


def test_one_by_one_a_broken_file_does_not_hide_the_others(capsys, tmp_path):
    bad = write(tmp_path / "bad.json", component("bad", threads={"warps": 0}))
    big = write(tmp_path / "big.json", component("big", smem=smem(300000)))
    code, _, err = run(capsys, "check", bad, big)
    assert code == 1 and "error[PL020]" in err and "error[PL042]" in err
    code, _, err = run(capsys, "check", "--set", bad, big)  # the set stops at the contracts pass
    assert code == 1 and "error[PL020]" in err and "PL042" not in err


def test_one_by_one_components_may_share_names_and_targets_differ(capsys, tmp_path):
    """A folder may hold two builds of one component, for different targets."""
    first = write(tmp_path / "first.json", component("same"))
    second = write(tmp_path / "second.json", component("same", targets={"archs": ["sm_90a"]}))
    code, out, _ = run(capsys, "check", "--format", "json", first, second)
    doc = json.loads(out)
    assert code == 0 and doc["together"] is False and doc["target"] is None
    assert [(c["name"], c["target"]) for c in doc["components"]] == [("same", "sm_90"), ("same", "sm_90a")]
    code, out, _ = run(capsys, "check", first, second)
    assert code == 0 and "checked one by one: same for sm_90; same for sm_90a" in out
    code, _, err = run(capsys, "check", "--set", first, second)
    assert code == 1 and "error[PL047]" in err


def test_a_pipeline_checks_the_set(capsys):
    contracts = [REPO / "contracts" / f"{n}.json" for n in ROWSUM]
    code, out, err = run(capsys, "check", *contracts, "--pipeline", REPO / "pipelines" / "rowsum.json")
    assert code == 0 and "checked together: tile_load, tile_transform, block_rowsum for sm_90" in out, err


# --- --werror and SARIF on a component whose only finding is a warning ---------------------------

WARN_CONTRACT = {
    "pipelink_contract": 1, "name": "warn", "version": "1.0.0",
    "entry": {"symbol": "warn", "params": [{"name": "x", "dtype": "f32", "pointer": True},
                                           {"name": "n", "dtype": "i32"}]},
    "targets": {"archs": ["sm_90"]}, "threads": {"warps": 1},
    "geometry": {"tile_sequence": {"grid": ["ceil_div(n, 32)"]}},
}

WARN_SOURCE = """#include "warn.pipelink.h"
__device__ __noinline__ float twice(float v) { return 2.0f * v; }  // a call LTO keeps: a warning
extern "C" __device__ void warn(pl::Tile tile, float* x, int n) {
  const int i = tile.coord[0] * 32 + (int)(threadIdx.x % 32);
  if (i < n) x[i] = twice(x[i]);
}
"""


@pytest.fixture(scope="module")
def warn_object(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("warn")
    write(d / "warn.json", WARN_CONTRACT)
    (d / "warn.cu").write_text(WARN_SOURCE)
    assert main(["build", str(d / "warn.cu"), "--contract", str(d / "warn.json"), "-o", str(d / "warn.o")]) == 0
    return d / "warn.o"


def test_werror_fails_check_on_a_warning(capsys, warn_object):
    code, out, err = run(capsys, "check", warn_object)
    assert code == 0 and "warning[PL145]" in err and "ok: 1 component checked: warn for sm_90" in out
    code, out, err = run(capsys, "check", "--werror", warn_object)
    assert code == 1 and "error[PL145]" in err and "[--werror]" in err and "warning[" not in err and "ok:" not in out
    code, out, _ = run(capsys, "check", "--werror", "--format", "json", warn_object)
    doc = json.loads(out)
    assert code == 1 and not doc["ok"] and doc["diagnostics"][0]["severity"] == "error"


def test_werror_fails_link_on_a_warning_and_writes_nothing(capsys, warn_object, tmp_path):
    cubin = tmp_path / "k.cubin"
    code, _, err = run(capsys, "link", warn_object, "-o", cubin, "--werror")
    assert code == 1 and "error[PL073]" in err and "[--werror]" in err
    assert not cubin.exists() and not cubin.with_suffix(".json").exists()
    code, out, err = run(capsys, "link", warn_object, "-o", cubin)
    assert code == 0 and "warning[PL073]" in err and f"linked {cubin}" in out and cubin.exists()


def _assert_sarif(doc: dict) -> list[dict]:
    """The parts of SARIF 2.1.0 that code-scanning tools require; returns the results."""
    assert doc["version"] == "2.1.0" and doc["$schema"].endswith("sarif-2.1.0.json")
    (run_,) = doc["runs"]
    driver = run_["tool"]["driver"]
    assert driver["name"] == "pipelink" and driver["version"] == __version__
    ids = [r["id"] for r in driver["rules"]]
    assert len(ids) == len(set(ids))
    for rule in driver["rules"]:
        assert rule["shortDescription"]["text"] == CODES[rule["id"]].title
        assert rule["help"]["text"] == CODES[rule["id"]].hint
    for result in run_["results"]:
        assert result["ruleId"] == ids[result["ruleIndex"]]
        assert result["level"] in ("error", "warning", "note") and result["message"]["text"]
        assert result["locations"], "code-scanning uploads refuse a result without a location in a file"
        for loc in result["locations"] + result.get("relatedLocations", []):
            uri = loc["physicalLocation"]["artifactLocation"]["uri"]
            assert uri and not re.search(r"[\s\[\]]", uri)  # a URI reference: brackets and spaces escaped
    return run_["results"]


def test_sarif_for_a_set_problem(capsys, tmp_path):
    a = write(tmp_path / "a.json", component("a", barriers={"hardcoded_ids": [1, 2]}))
    b = write(tmp_path / "b b.json", component("b", barriers={"hardcoded_ids": [2]}))
    code, out, _ = run(capsys, "check", "--set", "--format", "sarif", a, b)
    (result,) = _assert_sarif(json.loads(out))
    assert code == 1 and result["ruleId"] == "PL045" and result["level"] == "error"
    assert "barrier id 2 is hard-coded by both 'a' and 'b'" in result["message"]["text"]
    (where,) = result["locations"]
    assert where["physicalLocation"]["artifactLocation"]["uri"] == "file://" + str(b).replace(" ", "%20")
    assert where["properties"] == {"pointer": "/barriers/hardcoded_ids/0", "component": "b"}
    assert result["relatedLocations"][0]["properties"]["pointer"] == "/barriers/hardcoded_ids/1"


def test_sarif_levels_and_exit_codes_follow_the_other_formats(capsys, warn_object, tmp_path):
    code, out, _ = run(capsys, "check", "--format", "sarif", warn_object)
    (result,) = _assert_sarif(json.loads(out))
    assert code == 0 and result["ruleId"] == "PL145" and result["level"] == "warning"
    code, out, _ = run(capsys, "check", "--format", "sarif", "--werror", warn_object)
    assert code == 1 and _assert_sarif(json.loads(out))[0]["level"] == "error"
    code, out, _ = run(capsys, "check", "--format", "sarif", tmp_path / "missing.o")
    assert code == 2 and _assert_sarif(json.loads(out))[0]["ruleId"] == "PL002"
    code, out, _ = run(capsys, "check", "--format", "sarif", REPO / "contracts" / "tile_load.json")
    assert code == 0 and _assert_sarif(json.loads(out)) == []


def test_sarif_report_and_a_map_cannot_share_stdout(capsys):
    contracts = [REPO / "contracts" / f"{n}.json" for n in ROWSUM]
    code, out, _ = run(capsys, "check", *contracts, "--pipeline", REPO / "pipelines" / "rowsum.json", "--map", "-",
                       "--format", "sarif")
    (result,) = _assert_sarif(json.loads(out))
    assert code == 2 and result["ruleId"] == "PL122" and "the --format sarif report" in result["message"]["text"]
    # located in no file: shown against the pipeline file
    (where,) = result["locations"]
    assert where["physicalLocation"]["artifactLocation"]["uri"].endswith("pipelines/rowsum.json")


def test_sarif_result_without_a_file_is_shown_against_the_first_input():
    from pipelink.core.diagnostics import Diagnostic, Location, sarif_log
    diags = [Diagnostic("PL001", "m", Location(option="--specialize")), Diagnostic("PL047", "m", Location(component="k"))]
    for result, kept in zip(sarif_log(diags, "0", "objs/a.o")["runs"][0]["results"], ("option", "component")):
        (where,) = result["locations"]
        assert where["physicalLocation"] == {"artifactLocation": {"uri": "objs/a.o"}} and kept in where["properties"]
    # with no input to name (a command line that did not parse) there is no file to show it against
    (where,) = sarif_log(diags[:1], "0")["runs"][0]["results"][0]["locations"]
    assert "physicalLocation" not in where


def test_sarif_for_a_command_line_that_did_not_parse_names_a_file_it_gave(capsys):
    """A usage error (an unknown option) still gives code scanning a file: the first the command line names."""
    contract = REPO / "contracts" / "tile_load.json"
    code, out, _ = run(capsys, "check", "--format", "sarif", "--no-such-option", contract)
    (result,) = _assert_sarif(json.loads(out))
    assert code == 2 and result["ruleId"] == "PL001"
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith("contracts/tile_load.json")


# --- the pre-commit hook -------------------------------------------------------------------------

def _hooks() -> list[dict]:
    """.pre-commit-hooks.yaml read as the flat list of mappings it is (no YAML library needed)."""
    hooks = []
    for line in (REPO / ".pre-commit-hooks.yaml").read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, _, value = line.strip().removeprefix("- ").partition(":")
        if line.startswith("- "):
            hooks.append({})
        value = value.strip()
        hooks[-1][key.strip()] = value[1:-1] if value[:1] in "'\"" and value else value
    return hooks


def test_pre_commit_hook_runs_check_on_contracts_and_objects():
    (hook,) = _hooks()
    assert hook["id"] == "pipelink-check" and hook["entry"] == "pipelink check"
    assert hook["pass_filenames"] == "true" and hook["language"] == "python"
    files, exclude = re.compile(hook["files"]), re.compile(hook["exclude"])
    picked = lambda name: files.search(name) and not exclude.search(name)  # noqa: E731
    for name in ("contracts/ring_dot.json", "ring_dot.o", "ring_dot.o.contract.json", "lib.a", "k.ltoir", "k.fatbin"):
        assert picked(name), name
    for name in ("ring_dot.cu", "ring_dot.h", "README.md", "k.cubin", "a.json.bak", "pipelines/rowsum.json",
                 "package.json", "contracts/contract-v1.schema.json"):
        assert not picked(name), name
    command = shlex.split(hook["entry"])
    assert command[0] == "pipelink" and _parser().parse_args(command[1:] + ["x.o"]).command == "check"


# --- config --------------------------------------------------------------------------------------

def test_config_cflags_are_what_build_compiles_with(capsys):
    from pipelink.authoring.builder import BuildOptions, cutlass_include_dir, nvcc_command, pipelink_include_dir
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.core.loader import load_contract_file
    code, out, _ = run(capsys, "config", "--cflags")
    flags = shlex.split(out)
    assert code == 0 and len(out.splitlines()) == 1
    assert flags[0] == f"-I{pipelink_include_dir()}" and "--expt-relaxed-constexpr" in flags
    assert all(f"-I{d}" in flags for d in toolchain.cuda_include_dirs())
    if cutlass_include_dir() is not None:
        assert f"-I{cutlass_include_dir()}" in flags
    c = load_contract_file(str(REPO / "contracts" / "tile_load.json"), DiagnosticSink())
    cmd = nvcc_command(c, Path("x.cu"), Path("x.o"), Path("hdr"), BuildOptions())
    at = cmd.index(flags[0])
    assert cmd[at:at + len(flags)] == flags


def test_config_include_dir(capsys):
    from pipelink.authoring.builder import pipelink_include_dir
    code, out, _ = run(capsys, "config", "--include-dir")
    assert code == 0 and out == f"{pipelink_include_dir()}\n"
    assert (Path(out.strip()) / "pipelink").is_dir()


def test_config_needs_a_question(capsys):
    code, _, err = run(capsys, "config")
    assert code == 2 and "error[PL001]" in err and "--cflags" in err


def test_config_without_a_toolchain_is_pl008(capsys, monkeypatch):
    def missing():
        raise toolchain.ToolchainError("the nvidia CUDA wheels are not installed")
    monkeypatch.setattr(toolchain, "cuda_include_dirs", missing)
    code, out, err = run(capsys, "config", "--cflags")
    assert code == 2 and out == "" and "error[PL008]" in err


# --- link: the wires it chose, and the cache -----------------------------------------------------

def test_link_prints_its_wires_and_a_cache_hit(capsys, shipped_objects, tmp_path):
    objects = [shipped_objects[n] for n in ROWSUM]
    cubin = tmp_path / "rowsum.cubin"
    argv = ["link", *objects, "--wire", "tile_load.tile=tile_transform.src", "-o", cubin]
    code, out, err = run(capsys, *argv, "--no-cache")
    assert code == 0, err
    assert out.splitlines() == [
        "wire tile_load.tile -> tile_transform.src (explicit, zero_copy)",
        "wire tile_transform.dst -> block_rowsum.tile (auto, zero_copy)",
        out.splitlines()[-1]]
    assert out.splitlines()[-1].startswith(f"linked {cubin}: kernel pipelink_fused")
    run(capsys, *argv)  # fills the cache
    code, again, _ = run(capsys, *argv)
    assert code == 0 and again.splitlines()[:2] == out.splitlines()[:2]
    assert again.splitlines()[-1].startswith(f"linked {cubin} (cached): kernel pipelink_fused")
    manifest = json.loads(cubin.with_suffix(".json").read_text())
    assert manifest["wires"][1] == {"from": "tile_transform.dst", "to": "block_rowsum.tile", "kind": "zero_copy",
                                    "explicit": False}


# --- every option says what it does ---------------------------------------------------------------

def _subcommands() -> list[str]:
    sub = next(a for a in _parser()._actions if a.dest == "command")
    return list(sub.choices)


def _undescribed(help_text: str) -> list[str]:
    """Option and argument lines of argparse's help that carry no description: the invocation alone on its
    line, and the next line not an indented continuation."""
    lines = help_text.splitlines()
    missing, in_options = [], False
    for i, line in enumerate(lines):
        if line.endswith(":") and not line.startswith(" "):
            in_options = line in ("options:", "optional arguments:", "positional arguments:")
            continue
        if not in_options or not re.match(r"  \S", line):
            continue
        described = re.search(r"\S\s{2,}\S", line.strip()) is not None
        continued = i + 1 < len(lines) and re.match(r" {5,}\S", lines[i + 1]) is not None
        if not described and not continued:
            missing.append(line.strip())
    return missing


def test_the_help_parser_sees_a_missing_description():
    assert _undescribed("options:\n  -h, --help  show help\n  --bare\n  --long-option-name {a,b}\n"
                        "                        described below\n") == ["--bare"]


@pytest.mark.parametrize("command", [None, *_subcommands()])
def test_every_option_has_a_description(capsys, command):
    code, out, _ = run(capsys, *([command] if command else []), "--help")
    assert code == 0 and ("options:" in out or "optional arguments:" in out)
    assert _undescribed(out) == []


def test_build_without_a_toolchain_is_pl008_and_writes_nothing(capsys, monkeypatch, tmp_path):
    """Any command that reaches for a toolchain that is not there says PL008 (a usage problem), not 'internal error'."""
    monkeypatch.setenv("PIPELINK_CUDA_HOME", str(tmp_path / "no-cuda"))
    toolchain.cuda_root.cache_clear()  # found once per process: forget the real one for this test
    monkeypatch.setattr(toolchain, "cuda_root", toolchain.cuda_root.__wrapped__)
    out = tmp_path / "c.o"
    code, stdout, err = run(capsys, "build", str(REPO / "components" / "tile_load" / "tile_load.cu"),
                            "--contract", str(REPO / "contracts" / "tile_load.json"), "-o", str(out))
    assert code == 2 and stdout == "" and "error[PL008]" in err and "internal error" not in err
    assert "no bin/nvcc" in err and not out.exists()


def test_link_takes_geometry_the_components_consume(capsys, shipped_objects, tmp_path):
    """--geometry gives a consumed name the value of the layer the component comes from; a malformed one is a
    usage error, a name a component provides a located link error, and neither writes a file."""
    out = tmp_path / "softmax.cubin"
    code, _, err = run(capsys, "link", shipped_objects["row_softmax"], "--geometry", "TILE_M=64", "-o", out, "--no-cache")
    assert code == 0, err
    assert json.loads(out.with_suffix(".json").read_text())["geometry"]["TILE_M"] == 64
    bad = tmp_path / "bad.cubin"
    for arg in ("TILE_M", "TILE_M=x", "TILE_M=99999999999", "1X=3"):
        code, _, err = run(capsys, "link", shipped_objects["row_softmax"], "--geometry", arg, "-o", bad)
        assert code == 2 and "error[PL001]" in err and "--geometry" in err and not bad.exists(), arg
    objects = [shipped_objects[n] for n in ROWSUM]
    code, _, err = run(capsys, "link", *objects, "--geometry", "TILE_N=256", "-o", bad, "--no-cache")
    assert code == 1 and "error[PL180]" in err and "'tile_load' provides" in err and not bad.exists()


@pytest.mark.parametrize("fmt", ["json", "sarif"])
def test_a_usage_error_still_gives_the_asked_document_on_stdout(capsys, fmt):
    """A tool reading --format json|sarif from stdout gets its document for a command line it could not run."""
    from pipelink.cli import main
    assert main(["link", f"--format={fmt}", "x.o", "--profile-tasks", "abc"]) == 2
    doc = json.loads(capsys.readouterr().out)
    codes = [d["code"] for d in doc["diagnostics"]] if fmt == "json" else [r["ruleId"] for r in doc["runs"][0]["results"]]
    assert codes == ["PL001"]


# --- the console script --------------------------------------------------------------------------------------

_INTERRUPT_WHILE_IMPORTING = """
import builtins, sys
real_import = builtins.__import__
def importing(name, *args, **kwargs):
    if name == "cli" or name.endswith("pipelink.cli"):
        raise KeyboardInterrupt  # Ctrl-C arriving while the CLI's modules load
    return real_import(name, *args, **kwargs)
builtins.__import__ = importing
from pipelink.__main__ import main
sys.exit(main())
"""


def test_the_console_script_is_the_guarded_launcher_and_runs():
    """`pipelink` is pipelink.__main__:main, which `python -m pipelink` runs too."""
    import subprocess
    import sys
    import tomllib
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"pipelink": "pipelink.__main__:main"}
    proc = subprocess.run([sys.executable, "-m", "pipelink", "--version"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0 and __version__ in proc.stdout, proc.stderr


def test_ctrl_c_while_the_cli_imports_ends_with_130_and_no_traceback():
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-c", _INTERRUPT_WHILE_IMPORTING], capture_output=True, text=True,
                          cwd=REPO)
    assert proc.returncode == 130 and proc.stdout == "" and proc.stderr == "", proc.stderr


def test_build_says_what_check_warns_of(capsys, tmp_path):
    """The build probes the object it made: what check would warn of (a call LTO keeps, PL145) is said at the
    build too, once for all targets, and the object is written; --werror makes it an error and writes nothing."""
    write(tmp_path / "warn.json", dict(WARN_CONTRACT, targets={"archs": ["sm_90", "sm_90a"]}))
    (tmp_path / "warn.cu").write_text(WARN_SOURCE)
    code, out, err = run(capsys, "build", tmp_path / "warn.cu", "--contract", tmp_path / "warn.json",
                         "-o", tmp_path / "warn.o")
    assert code == 0 and err.count("warning[PL145]") == 1 and (tmp_path / "warn.o").exists(), err
    code, out, err = run(capsys, "build", "--werror", tmp_path / "warn.cu", "--contract", tmp_path / "warn.json",
                         "-o", tmp_path / "w2.o")
    assert code == 1 and "error[PL145]" in err and not (tmp_path / "w2.o").exists(), err
    code, out, err = run(capsys, "build", tmp_path / "warn.cu", "--contract", tmp_path / "warn.json",
                         "-o", tmp_path / "again.o")
    assert code == 0 and "built " in out and " (cached) (" in out, out  # a build cache hit says so
    # the API: the warning through Python's warnings (again on a cached build), werror=True refuses
    import warnings
    import pipelink
    for out in ("w3.o", "w4.o"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            pipelink.build(tmp_path / "warn.cu", tmp_path / "warn.json", tmp_path / out)
        said = [w.message for w in caught if isinstance(w.message, pipelink.PipelinkWarning)]
        assert [m.diagnostic.code for m in said] == ["PL145"] and (tmp_path / out).exists(), out
    with pytest.raises(pipelink.PipelinkError) as info:
        pipelink.build(tmp_path / "warn.cu", tmp_path / "warn.json", tmp_path / "w5.o", werror=True)
    assert [d.code for d in info.value.diagnostics] == ["PL145"] and not (tmp_path / "w5.o").exists()


def test_a_path_the_system_refuses_is_pl002_not_a_traceback(capsys, tmp_path):
    """A name longer than the file system takes (ENAMETOOLONG from a Path.exists deep inside): exit 2, PL002 naming
    it (shortened), from the command line and the API alike (it had been a raw traceback)."""
    import pipelink
    long_source = tmp_path / ("z" * 300 + ".cu")
    code, out, err = run(capsys, "build", long_source, "--contract", REPO / "contracts" / "tile_load.json",
                         "-o", tmp_path / "b.o")
    assert code == 2 and "error[PL002]" in err and "File name too long" in err and "..." in err, err
    with pytest.raises(pipelink.PipelinkError) as info:
        pipelink.build(str(long_source), str(REPO / "contracts" / "tile_load.json"), str(tmp_path / "b.o"))
    assert info.value.diagnostics[0].code == "PL002" and info.value.exit_code == 2
    with pytest.raises(pipelink.PipelinkError) as info:
        pipelink.load(str(tmp_path / ("k" * 300)), device=None)
    assert info.value.diagnostics[0].code == "PL002"


def test_a_closed_stderr_does_not_end_the_command(tmp_path):
    """Started with stderr closed (`2>&-`), a command that runs nvJitLink still answers by its exit code (it had
    ended with an internal error, exit 3, flushing a stderr that was None)."""
    import subprocess
    import sys
    obj = tmp_path / "x.o"
    assert main(["build", str(REPO / "components" / "tile_load" / "tile_load.cu"), "--contract",
                 str(REPO / "contracts" / "tile_load.json"), "-o", str(obj)]) == 0
    proc = subprocess.run([sys.executable, "-m", "pipelink", "check", str(obj)], stderr=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, text=True, close_fds=True,
                          preexec_fn=lambda: __import__("os").close(2))
    assert proc.returncode == 0 and "ok: 1 component checked" in proc.stdout, proc.stdout


def test_an_input_named_in_bytes_that_are_not_utf8_links_and_maps(capsys, tmp_path, shipped_objects):
    """A file name of arbitrary bytes (valid on Linux) reaches the link map, the cache entry and the picture as
    Python's surrogate escapes: written back as the name's own bytes (it had ended exit 3, UnicodeEncodeError)."""
    import os
    import shutil
    odd = os.fsdecode(os.fsencode(str(tmp_path)) + b"/bad\xff\xfe.o")
    shutil.copy(shipped_objects["tile_load"], odd)
    pipeline = REPO / "pipelines" / "rowsum.json"
    code, out, err = run(capsys, "link", odd, shipped_objects["tile_transform"], shipped_objects["block_rowsum"],
                         "--pipeline", pipeline, "-o", tmp_path / "k.cubin", "--map", tmp_path / "k.map")
    assert code == 0 and (tmp_path / "k.cubin").exists(), err
    assert (tmp_path / "k.map").exists()
    code, out, err = run(capsys, "check", odd, shipped_objects["tile_transform"], shipped_objects["block_rowsum"],
                         "--pipeline", pipeline, "--map", tmp_path / "k.svg")
    assert code == 0, err


def test_check_takes_the_schedule_and_dispatch_link_would_be_told(capsys, shipped_objects):
    """`check --schedule persistent` says before the link what `link --schedule persistent` would refuse (it had
    no such option: PL001), located at the option; --dispatch likewise; both imply --set."""
    objs = [shipped_objects[n] for n in ("tile_load", "tile_transform", "block_rowsum")]
    code, out, err = run(capsys, "check", *objs, "--pipeline", REPO / "pipelines" / "rowsum.json",
                         "--schedule", "persistent")
    assert code == 1 and "error[PL085]" in err and "option --schedule persistent" in err, err
    code, out, err = run(capsys, "check", *objs, "--pipeline", REPO / "pipelines" / "rowsum.json")
    assert code == 0, err


@pytest.mark.parametrize("args", [("link", "x.o", "-o", "a.cubin", "--output", "b.cubin"),
                                  ("link", "x.o", "--arch", "sm_90", "--arch=sm_100a"),
                                  ("link", "x.o", "--pipeline", "p.json", "--pipeline", "q.json"),
                                  ("check", "c.json", "--format", "json", "--format", "text"),
                                  ("build", "x.cu", "--contract", "a.json", "--contract", "b.json", "-o", "x.o")])
def test_an_option_given_twice_with_two_values_is_a_usage_error(capsys, monkeypatch, tmp_path, args):
    """A single-valued option given twice with different values: exit 2 naming both, before any input is read
    and with nothing written (argparse would have kept the last one silently)."""
    monkeypatch.chdir(tmp_path)
    assert main(list(args)) == 2
    out, err = capsys.readouterr()
    said = err + out  # the text report on stderr, or the asked document (the first --format) on stdout
    assert "PL001" in said and "given twice" in said and "PL002" not in said, said
    assert not list(tmp_path.iterdir())


def test_an_option_given_twice_with_one_value_is_taken(capsys, shipped_objects, tmp_path):
    """The same value twice (a wrapper adding what the user wrote) links as once."""
    out = tmp_path / "k.cubin"
    assert main(["link", str(shipped_objects["row_softmax"]), "-o", str(out), "--output", str(out), "--no-cache"]) == 0
    assert out.exists()


@pytest.mark.parametrize("command", ["build", "link", "check"])
def test_every_failing_command_ends_with_its_error_count(capsys, tmp_path, command):
    """A failure's last line on stderr counts its errors, for every command (only check's had)."""
    raw = json.loads((REPO / "contracts" / "tile_load.json").read_text())
    raw["entry"]["invocaton"] = "per_tile"
    contract = tmp_path / "c.json"
    contract.write_text(json.dumps(raw))
    argv = {"build": ["build", str(REPO / "components" / "tile_load" / "tile_load.cu"), "--contract", str(contract),
                      "-o", str(tmp_path / "x.o")],
            "link": ["link", str(contract), "-o", str(tmp_path / "k.cubin")],
            "check": ["check", str(contract)]}[command]
    assert main(argv) in (1, 2)
    err = capsys.readouterr().err
    assert err.rstrip().splitlines()[-1] == f"{err.count('error[')} error" + ("s" if err.count("error[") != 1 else "")


@pytest.mark.parametrize("alias", ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"])
def test_an_output_named_by_a_path_to_stdout_counts_as_stdout(shipped_objects, tmp_path, alias):
    """`--map /dev/fd/1` beside the --format json report (or `-o -`) put two things in one stream, exit 0; the
    file stdout writes to is stdout however it is named: PL122, exit 2, nothing written."""
    import subprocess
    import sys
    objects = [str(shipped_objects[n]) for n in ("tile_load", "tile_transform", "block_rowsum")]
    pipeline = str(REPO / "pipelines" / "rowsum.json")
    for argv in (["check", *objects, "--pipeline", pipeline, "--map", alias, "--format", "json"],
                 ["link", *objects, "--pipeline", pipeline, "-o", "-", "--manifest", alias, "--no-cache"]):
        proc = subprocess.run([sys.executable, "-m", "pipelink", *argv], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, cwd=tmp_path, timeout=300)
        said = proc.stdout.decode(errors="replace") + proc.stderr.decode(errors="replace")
        assert proc.returncode == 2 and "PL122" in said, said[-2000:]
        assert b"\x7fELF" not in proc.stdout
    # stdout redirected to a file, and an output naming that file: the same
    with open(tmp_path / "out.txt", "wb") as f:
        proc = subprocess.run([sys.executable, "-m", "pipelink", "check", *objects, "--pipeline", pipeline, "--map",
                               str(tmp_path / "out.txt"), "--format", "json"], stdout=f, stderr=subprocess.PIPE,
                              cwd=tmp_path, timeout=300)
    assert proc.returncode == 2 and "PL122" in (tmp_path / "out.txt").read_text()


def test_a_document_asked_of_a_closed_stdout_is_pl007():
    """--format json with stdout closed (`>&-`) had exit 0 and no document anywhere: the document asked for
    cannot be given, PL007 on stderr, exit 2."""
    import os
    import subprocess
    import sys
    proc = subprocess.run([sys.executable, "-m", "pipelink", "check", str(REPO / "contracts" / "tile_load.json"),
                           "--format", "json"], stderr=subprocess.PIPE, text=True, cwd=REPO,
                          preexec_fn=lambda: os.close(1), timeout=120)
    assert proc.returncode == 2 and "error[PL007]" in proc.stderr and "stdout is closed" in proc.stderr


@pytest.mark.parametrize("argv", [["link", "x.o", "--pipeline", "missing.json"], ["link", "x.o", "--specialize", "M=x"],
                                  ["link", "x.o", "--wire", "="]])
def test_every_json_document_says_ok(capsys, tmp_path, monkeypatch, argv):
    """A link that stopped while reading its options or pipeline gave {"diagnostics": [...]} without "ok"."""
    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--format", "json"]) == 2
    assert json.loads(capsys.readouterr().out)["ok"] is False


def test_sarif_locates_a_result_by_this_commands_input_only(capsys, monkeypatch):
    """A usage error names no input: its result is not shown against an earlier command's input in the same
    process (the main input was kept from one command to the next)."""
    contracts = [REPO / "contracts" / f"{n}.json" for n in ROWSUM]
    run(capsys, "check", *contracts, "--pipeline", REPO / "pipelines" / "rowsum.json", "--map", "-", "--format", "sarif")
    code, out, _ = run(capsys, "check", "--format", "sarif", "--no-such-option", "x.json")
    (result,) = json.loads(out)["runs"][0]["results"]
    assert code == 2 and result["ruleId"] == "PL001" and "rowsum" not in json.dumps(result), result
    # a pipeline read from stdin is no file: the first input file is the one shown
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO((REPO / "pipelines" / "rowsum.json").read_bytes())))
    code, out, _ = run(capsys, "check", *contracts, "--pipeline", "-", "--map", "-", "--format", "sarif")
    (result,) = _assert_sarif(json.loads(out))
    assert code == 2 and result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith(
        f"contracts/{ROWSUM[0]}.json"), result
