"""What a contract declares that only some targets have (a role's setmaxnreg: sm_90a, sm_100a; a cluster, a
tensor-map parameter: sm_90 on) is checked against the target checked, linked or built for, not against any
target the contract lists: told a target without it (--arch), check, link and build refuse the component at the
field (PL025, PL204); unless told one, they take the first target that has it."""
import json

import pytest

from hopper_factory import component, epilogue, mainloop
from pipelink.authoring.builder import BuildOptions, build_component
from pipelink.cli import main
from pipelink.core.checks import check_set
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.loader import load_contract_bytes
from pipelink.core.model import Source
from pipelink.core.pipeline import PipelineSpec
from pipelink.linker.passes import LinkOptions, run_passes


def archs(*names):
    return lambda c: c["targets"].update(archs=list(names))


def no_setmaxnreg(c):
    for r in c["threads"]["roles"]:
        r.pop("setmaxnreg", None)


def check(components, arch=None):
    sink = DiagnosticSink()
    return check_set([c.contract for c in components], sink, arch), sink


def errors(sink):
    return [(d.code, d.location.file, d.location.pointer) for d in sink.items if d.severity == "error"]


def small(name, **changes):
    """A single-entry component (no object) with `changes` to its contract."""
    return component({"pipelink_contract": 1, "name": name, "version": "1.0.0", "entry": {"symbol": f"{name}_entry"},
                      "targets": {"archs": ["sm_90"]}, "threads": {"warps": 4}, **changes})


ROLES = [("PL025", "ml.json", "/threads/roles/0/setmaxnreg"), ("PL025", "ml.json", "/threads/roles/1/setmaxnreg")]


# --- setmaxnreg -----------------------------------------------------------------------------------

def test_setmaxnreg_roles_are_refused_for_a_target_without_it_though_the_contract_lists_one_with_it():
    ml = component(mainloop(archs("sm_90", "sm_90a")))
    target, sink = check([ml], "sm_90")
    assert errors(sink) == ROLES
    d = sink.items[0]
    assert d.message == ("role 'producer' of 'ml' uses setmaxnreg, which sm_90 does not have (sm_90a and sm_100a "
                         "have it)")
    assert "--arch sm_90a" in d.effective_hint and "drop sm_90 from the contract's targets.archs" in d.effective_hint
    for arch in ("sm_90a", "sm_100a"):
        assert not check([component(mainloop(archs("sm_90", "sm_90a", "sm_100a")))], arch)[1].items


def test_the_default_target_is_the_first_with_setmaxnreg():
    """Base archs come first unless a component declares what they lack: its arch-specific sibling then."""
    target, sink = check([component(mainloop(archs("sm_90", "sm_90a")))])
    assert (target, sink.items) == ("sm_90a", [])
    target, sink = check([component(mainloop(lambda c: (archs("sm_90", "sm_90a")(c), no_setmaxnreg(c))))])
    assert (target, sink.items) == ("sm_90", [])
    # a set: the plain component goes into the sm_90a link through its sm_90 IR
    target, sink = check([component(mainloop(archs("sm_90", "sm_90a"))), component(epilogue(archs("sm_90")))])
    assert (target, sink.items) == ("sm_90a", [])


def test_the_link_refuses_setmaxnreg_for_a_target_without_it_before_writing_the_glue():
    """`link --arch sm_90` (and `check --pipeline`): the same refusal, and no glue with setmaxnreg for sm_90."""
    comps = [component(mainloop(archs("sm_90", "sm_90a"))), component(epilogue(archs("sm_90", "sm_90a")))]
    for arch in ("sm_90", None):
        ctx = run_passes(options=LinkOptions(arch=arch, pipeline=PipelineSpec(name="k")), components=comps,
                         until="generate")
        if arch == "sm_90":
            assert errors(ctx.sink) == ROLES and ctx.glue is None
        else:
            assert not ctx.sink.errors and ctx.target == "sm_90a"
            assert "setmaxnreg.inc.sync.aligned.u32 232" in ctx.glue


# --- clusters and tensor maps ---------------------------------------------------------------------

def test_a_cluster_needs_sm90_or_later():
    c = small("cl", targets={"archs": ["sm_80", "sm_90"]}, cluster={"dims": [2]})
    target, sink = check([c])
    assert (target, sink.items) == ("sm_90", [])
    _, sink = check([c], "sm_80")
    assert errors(sink) == [("PL204", "cl.json", "/cluster")]
    assert sink.items[0].message == ("'cl' assumes a thread-block cluster of [2], which sm_80 does not have (sm_90 "
                                     "and later have clusters)")
    assert "--arch sm_90" in sink.items[0].effective_hint


def test_a_tensor_map_parameter_needs_sm90_or_later():
    ml = component(mainloop(lambda c: (archs("sm_80", "sm_90")(c), no_setmaxnreg(c))))
    target, sink = check([ml])
    assert (target, sink.items) == ("sm_90", [])
    _, sink = check([ml], "sm_80")
    assert errors(sink) == [("PL204", "ml.json", "/params/0/tensor_map")]
    assert "parameter 'a' of 'ml' is a tensor map, which sm_80 does not have" in sink.items[0].message


def test_with_no_target_that_has_it_the_first_is_refused_and_the_hint_says_which_would_do():
    target, sink = check([small("cl", targets={"archs": ["sm_80"]}, cluster={"dims": [2]})])
    assert target == "sm_80" and [d.code for d in sink.items] == ["PL204"]
    assert "list a target that has it (sm_90 and later have clusters)" in sink.items[0].effective_hint


# --- through the toolchain: build, check (alone, --set, --pipeline) and link --------------------------

CONTRACT = {
    "pipelink_contract": 1, "name": "rs", "version": "1.0.0",
    "params": [{"name": "x", "dtype": "f32", "pointer": True}, {"name": "N", "dtype": "i32"}],
    "entries": [{"name": "load", "symbol": "rs_load", "role": "producer", "params": ["x", "N"]},
                {"name": "work", "symbol": "rs_work", "role": "consumer", "params": ["x", "N"]}],
    "targets": {"archs": ["sm_90", "sm_90a"]},
    "threads": {"warps": 8, "roles": [{"name": "producer", "warps": 4, "setmaxnreg": 40},
                                      {"name": "consumer", "warps": 4, "setmaxnreg": 232}]},
    "geometry": {"provides": {"TILE": 128}, "tile_sequence": {"grid": ["ceil_div(N, TILE)"]}},
}

SOURCE = """#include PIPELINK_HEADER
extern "C" __device__ void rs_load(pl::Tile tile, float* x, int N) {}
extern "C" __device__ void rs_work(pl::Tile tile, float* x, int N) {
  const int i = tile.coord[0] * 128 + threadIdx.x % 128;
  if (i < N) x[i] += 1.0f;
}
"""


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


@pytest.fixture(scope="module")
def rs(tmp_path_factory):
    """A role-structured component whose roles use setmaxnreg, its contract listing sm_90 and sm_90a; its object
    holds LTO-IR for both, built as one's own nvcc would build it (without the build's check of the object)."""
    d = tmp_path_factory.mktemp("setmaxnreg")
    (d / "rs.cu").write_text(SOURCE)
    raw = json.dumps(CONTRACT).encode()
    (d / "rs.json").write_bytes(raw)
    (d / "rs.pipeline.json").write_text(json.dumps({"pipeline": 1, "name": "rs_kernel", "components": ["rs"]}))
    sink = DiagnosticSink()
    contract = load_contract_bytes(raw, Source(str(d / "rs.json")), sink)
    with pytest.MonkeyPatch.context() as mp:  # not into the build cache: a build's hit there is not checked again
        mp.setenv("PIPELINK_CACHE", "0")
        assert build_component(contract, raw, d / "rs.cu", d / "rs.o", sink, BuildOptions()), \
            [x.render() for x in sink.items]
    return d


def refused_at_the_roles(capsys, file, *argv):
    code, _, err = run(capsys, *argv)
    assert code == 1, err
    assert f"--> {file}, at /threads/roles/0/setmaxnreg, component 'rs'" in err, err
    assert f"--> {file}, at /threads/roles/1/setmaxnreg, component 'rs'" in err
    assert "error[PL025]: role 'consumer' of 'rs' uses setmaxnreg, which sm_90 does not have" in err
    assert "hint: check, link and build with --arch sm_90a (the contract lists it)" in err
    assert "PL074" not in err and "ptxas" not in err  # no toolchain error


def build(capsys, rs, output, *argv):
    return run(capsys, "build", rs / "rs.cu", "--contract", rs / "rs.json", "-o", rs / output, *argv)


def test_build_without_arch_checks_for_sm90a(capsys, rs):
    """It had checked the object for sm_90, whose probe failed in ptxas (PL074)."""
    code, out, err = build(capsys, rs, "default.o")
    assert code == 0 and "built" in out, err


def test_build_for_sm90_is_refused_at_the_roles(capsys, rs):
    """It had failed in ptxas (PL074)."""
    refused_at_the_roles(capsys, rs / "rs.json", "build", rs / "rs.cu", "--contract", rs / "rs.json",
                         "-o", rs / "rs90.o", "--arch", "sm_90")
    assert not (rs / "rs90.o").exists()


def test_build_for_sm90a_alone(capsys, rs):
    """It had been PL012 (build for sm_90 too: the target check takes unless told)."""
    code, out, err = build(capsys, rs, "rs90a.o", "--arch", "sm_90a")
    assert code == 0 and "built" in out, err


HOW = pytest.mark.parametrize("how", [(), ("--set",), ("--pipeline", "rs.pipeline.json")],
                              ids=["alone", "set", "pipeline"])
WHAT = pytest.mark.parametrize("what", ["rs.json", "rs.o"])


def _how(rs, how):
    return tuple(rs / h if h.endswith(".json") else h for h in how)


@HOW
@WHAT
def test_check_takes_sm90a_unless_told(capsys, rs, how, what):
    """It had taken sm_90: the contract passed, the object failed in ptxas (PL074)."""
    code, out, err = run(capsys, "check", rs / what, *_how(rs, how))
    assert code == 0 and "for sm_90a" in out, err


@HOW
@WHAT
def test_check_for_sm90_is_refused_at_the_roles(capsys, rs, how, what):
    """The contract had passed, the object had failed in ptxas (PL074)."""
    file = f"{rs / what}[.pipelink.contract]" if what.endswith(".o") else rs / what
    refused_at_the_roles(capsys, file, "check", rs / what, *_how(rs, how), "--arch", "sm_90")


def test_link_takes_sm90a_unless_told(capsys, rs, tmp_path):
    """It had taken sm_90 and failed in ptxas (PL074)."""
    code, out, err = run(capsys, "link", rs / "rs.o", "-o", tmp_path / "k.cubin", "--emit-glue", tmp_path / "k.cu")
    assert code == 0 and "linked" in out, err
    assert "setmaxnreg.dec.sync.aligned.u32 232" in (tmp_path / "k.cu").read_text()  # from 255 at entry


def test_link_for_sm90_is_refused_at_the_roles(capsys, rs, tmp_path):
    """It had failed in ptxas (PL074)."""
    refused_at_the_roles(capsys, f"{rs / 'rs.o'}[.pipelink.contract]",
                         "link", rs / "rs.o", "-o", tmp_path / "k90.cubin", "--arch", "sm_90")
    assert not (tmp_path / "k90.cubin").exists()
