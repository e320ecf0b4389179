"""An sm_90a component must not carry sm_90 LTO-IR (PL108): `-arch=sm_90a -dlto` writes both, and a
link that takes the sm_90 IR compiles the sm_90a-only paths (wgmma, setmaxnreg) to traps. A component whose
contract lists sm_90 and sm_90a goes into an sm_90a link from its sm_90 IR (what nvJitLink does), said (PL199)."""
import json
from dataclasses import replace

import pytest

from pipelink.api import run_checks
from pipelink.authoring.builder import BuildOptions, build_component
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.loader import load_contract_bytes
from pipelink.core.model import Source
from pipelink.core.targets import TARGETS
from pipelink.linker.collect import read_components, verify_object

SOURCE = """#include PIPELINK_HEADER
extern "C" __device__ void tiny_entry(float* x, int n) { for (int i = 0; i < n; ++i) x[i] += 1.0f; }
"""

CONTRACT = {
    "pipelink_contract": 1, "name": "tiny", "version": "1.0.0",
    "entry": {"symbol": "tiny_entry", "invocation": "per_cta",
              "params": [{"name": "x", "dtype": "f32", "pointer": True}, {"name": "n", "dtype": "i32"}]},
    "targets": {"archs": ["sm_90a"], "compile_flags": {"ftz": False, "prec_div": True, "prec_sqrt": True,
                                                        "fmad": True}},
    "threads": {"warps": 1},
}


BOTH = ["-gencode=arch=compute_90,code=lto_90"]


@pytest.fixture(scope="module")
def objects(tmp_path_factory):
    """tiny built by `pipelink build` (lto_90a only), and the same with sm_90 LTO-IR added."""
    d = tmp_path_factory.mktemp("arch_specific")
    (d / "tiny.cu").write_text(SOURCE)
    raw = json.dumps(CONTRACT).encode()
    (d / "tiny.json").write_bytes(raw)
    sink = DiagnosticSink()
    contract = load_contract_bytes(raw, Source(str(d / "tiny.json")), sink)
    out = {}
    for name, extra in (("good.o", []), ("both.o", BOTH)):
        # without the object check `pipelink build` hands in, both.o is made as one's own nvcc would make it
        assert build_component(contract, raw, d / "tiny.cu", d / name, sink, BuildOptions(extra_nvcc=extra)), \
            [x.render() for x in sink.items]
        out[name] = str(d / name)
    out["dir"] = d
    return out


def test_pipelink_build_refuses_family_ir_beside_arch_specific_ir(objects):
    """An nvcc option that adds sm_90 LTO-IR to an sm_90a component: check refuses the object (PL108), so the
    build does too, and writes nothing."""
    d = objects["dir"]
    raw = (d / "tiny.json").read_bytes()
    sink = DiagnosticSink()
    contract = load_contract_bytes(raw, Source(str(d / "tiny.json")), sink)
    from pipelink.api import check_objects
    assert not build_component(contract, raw, d / "tiny.cu", d / "refused.o", sink, BuildOptions(extra_nvcc=BOTH),
                               check_object=check_objects)
    assert [x.code for x in sink.errors] == ["PL108"] and not (d / "refused.o").exists()


def _component(path):
    sink = DiagnosticSink()
    (comp,) = read_components([path], sink)
    assert not sink.items
    return comp


def test_pipelink_build_writes_the_arch_specific_ir_only(objects):
    comp = _component(objects["good.o"])
    assert comp.obj.ltoir_archs() == ["sm_90a"]
    sink = DiagnosticSink()
    verify_object(comp, "sm_90a", sink)
    assert not sink.items


def test_family_ir_beside_arch_specific_ir_is_refused(objects):
    comp = _component(objects["both.o"])
    assert comp.obj.ltoir_archs() == ["sm_90", "sm_90a"]
    sink = DiagnosticSink()
    (result,), _ = run_checks([objects["both.o"]], sink, together=True)  # what `pipelink check` and the link run
    assert result.target == "sm_90a"
    (d,) = sink.items
    assert d.code == "PL108" and d.exit_code == 1
    assert d.location.pointer == "/targets/archs/0" and d.location.component == "tiny"
    assert d.location.file.endswith("both.o[.pipelink.contract]")
    assert "carries LTO-IR for sm_90 besides sm_90a" in d.message and "would trap" in d.message
    assert d.related[0].file == objects["both.o"]
    assert "lto_90a only" in d.effective_hint


def test_a_contract_that_also_targets_the_family_takes_both(objects):
    comp = _component(objects["both.o"])
    contract = comp.contract
    both = replace(contract, targets=replace(contract.targets, archs=("sm_90", "sm_90a")))
    sink = DiagnosticSink()
    verify_object(replace(comp, contract=both), "sm_90a", sink)
    assert not sink.items


# --- a link for sm_90a takes sm_90 LTO-IR where the contract lists sm_90 ------------------------------------------

PATHS = """#include PIPELINK_HEADER
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
extern "C" __device__ int tiny_path_sm90a = 1;  // where an sm_90a-only path (wgmma, setmaxnreg) would be
extern "C" __device__ void tiny_entry(float* x, int n) { x[0] += tiny_path_sm90a; }
#else
extern "C" __device__ int tiny_path_sm90 = 1;
extern "C" __device__ void tiny_entry(float* x, int n) { x[0] += tiny_path_sm90; }
#endif
"""


@pytest.fixture(scope="module")
def family(tmp_path_factory):
    """tiny, its contract listing sm_90 and sm_90a, built by `pipelink build --arch sm_90` (lto_90 only) and without
    --arch (lto_90 and lto_90a)."""
    from pipelink.api import check_objects
    d = tmp_path_factory.mktemp("family")
    (d / "tiny.cu").write_text(PATHS)
    doc = json.loads(json.dumps(CONTRACT))
    doc["targets"]["archs"] = ["sm_90", "sm_90a"]
    raw = json.dumps(doc).encode()
    (d / "tiny.json").write_bytes(raw)
    out = {"dir": d}
    for name, archs in (("sm90.o", ("sm_90",)), ("all.o", None)):
        sink = DiagnosticSink()
        contract = load_contract_bytes(raw, Source(str(d / "tiny.json")), sink)
        assert build_component(contract, raw, d / "tiny.cu", d / name, sink, BuildOptions(archs=archs),
                               check_object=check_objects), [x.render() for x in sink.items]
        out[name], out[f"{name} said"] = str(d / name), sink.items
    return out


def test_nvjitlink_links_family_ir_into_an_arch_specific_link(family, objects):
    """The toolchain fact the rule rests on (docs/toolchain.md): nvJitLink links sm_90 LTO-IR into an sm_90a link and
    the cubin is an sm_90a one, but the component's code is its sm_90 code (its __CUDA_ARCH_FEAT_SM90_ALL path is
    not there); given sm_90 and sm_90a IR it takes the sm_90a IR. sm_90a IR does not go into an sm_90 link."""
    from pipelink import toolchain
    glue = 'extern "C" __device__ void tiny_entry(float*, int);\n' \
           'extern "C" __global__ void k(float* x) { tiny_entry(x, 1); }\n'

    def link(obj, arch):
        comp = _component(obj)
        ir = toolchain.nvrtc_to_ltoir(glue, "k.cu", [f"-arch={arch}", "-dlto", "-rdc=true"])
        cubin = toolchain.nvjitlink_link([toolchain.LinkInput("ltoir", ir, "k"), comp.obj.link_input()],
                                         [f"-arch={arch}", "-lto"]).cubin
        target = next(line.split()[-1] for line in toolchain.disassemble(cubin).splitlines() if ".target" in line)
        return target, {s for s in toolchain.defined_symbols(cubin) if s.startswith("tiny_path_")}

    assert link(family["sm90.o"], "sm_90a") == ("sm_90a", {"tiny_path_sm90"})
    assert link(family["all.o"], "sm_90a") == ("sm_90a", {"tiny_path_sm90a"})
    assert link(family["all.o"], "sm_90") == ("sm_90", {"tiny_path_sm90"})
    with pytest.raises(toolchain.ToolchainError, match="INVALID_INPUT"):  # good.o: lto_90a only
        link(objects["good.o"], "sm_90")


def _notes(sink):
    return [d for d in sink.items if d.severity == "note"]


def test_an_arch_specific_link_from_family_ir_is_accepted_and_said(family):
    """`check --arch sm_90a` (and the link) takes an object that holds sm_90 IR only, its contract listing sm_90 and
    sm_90a: nvJitLink links it. It says so (PL199, a note at the target the object has no IR for): the kernel gets
    the component's sm_90 code, without its sm_90a paths."""
    sink = DiagnosticSink()
    (result,), _ = run_checks([family["sm90.o"]], sink, "sm_90a")
    assert result.target == "sm_90a" and not sink.errors
    (d,) = sink.items
    assert d.code == "PL199" and d.severity == "note" and d.exit_code == 0
    assert d.location.pointer == "/targets/archs/1" and d.location.component == "tiny"
    assert d.related[0].file == family["sm90.o"]
    assert "holds LTO-IR for sm_90, not for sm_90a, which contract 'tiny' also lists" in d.message and "__CUDA_ARCH_FEAT_SM90_ALL" in d.message
    assert "build it for sm_90a too" in d.effective_hint
    for obj, arch in ((family["sm90.o"], "sm_90"), (family["sm90.o"], None), (family["all.o"], "sm_90a")):
        sink = DiagnosticSink()
        run_checks([obj], sink, arch)
        assert not sink.items, (obj, arch, [x.render() for x in sink.items])


def test_a_contract_without_the_arch_specific_target_promises_no_such_code(family):
    """A contract that lists sm_90 alone: its sm_90 IR is all its code, and an sm_90a link of it leaves nothing out."""
    comp = _component(family["sm90.o"])
    only = replace(comp, contract=replace(comp.contract, targets=replace(comp.contract.targets, archs=("sm_90",))))
    sink = DiagnosticSink()
    verify_object(only, "sm_90a", sink)
    assert not sink.items


def test_a_build_for_the_family_target_says_what_the_arch_specific_links_take(family):
    """`pipelink build --arch sm_90` of a contract listing sm_90a too checks the object for sm_90a as well (what
    check and link take it for) and says so; without --arch nothing is left out and nothing is said."""
    assert [(d.code, d.severity, d.location.pointer) for d in family["sm90.o said"]] == \
        [("PL199", "note", "/targets/archs/1")]
    assert family["all.o said"] == []


FAMILIES = [(t.base, t.arch) for t in TARGETS.values() if t.base != t.arch]


def test_every_family_is_covered():
    assert FAMILIES == [("sm_90", "sm_90a"), ("sm_100", "sm_100a"), ("sm_120", "sm_120a")]


@pytest.mark.parametrize("base, specific", FAMILIES[1:])
def test_nvjitlink_links_family_ir_into_the_other_arch_specific_links(tmp_path, base, specific):
    """As for sm_90a (above): the family's IR goes into the arch-specific link without its arch-specific path; the
    arch-specific IR does not go into the family's link."""
    import subprocess

    from pipelink import toolchain
    num = base[3:]
    (tmp_path / "f.cu").write_text(PATHS.replace("#include PIPELINK_HEADER", "").replace("SM90", f"SM{num}"))
    glue = 'extern "C" __device__ void tiny_entry(float*, int);\n' \
           'extern "C" __global__ void k(float* x) { tiny_entry(x, 1); }\n'

    def link(ir_arch, link_arch):
        fatbin = tmp_path / f"{ir_arch}.fatbin"
        n = ir_arch[3:]
        subprocess.run([str(toolchain.nvcc_path()), "-fatbin", "-rdc=true", f"-gencode=arch=compute_{n},code=lto_{n}",
                        "f.cu", "-o", fatbin.name], cwd=tmp_path, env=toolchain.nvcc_env(), check=True)
        ir = toolchain.nvrtc_to_ltoir(glue, "k.cu", [f"-arch={link_arch}", "-dlto", "-rdc=true"])
        cubin = toolchain.nvjitlink_link([toolchain.LinkInput("ltoir", ir, "k"),
                                          toolchain.LinkInput("fatbin", fatbin.read_bytes(), fatbin.name)],
                                         [f"-arch={link_arch}", "-lto"]).cubin
        return {s for s in toolchain.defined_symbols(cubin) if s.startswith("tiny_path_")}

    assert link(base, specific) == {"tiny_path_sm90"}  # the source's names: the family's path
    assert link(specific, specific) == {"tiny_path_sm90a"}
    with pytest.raises(toolchain.ToolchainError, match="INVALID_INPUT"):
        link(specific, base)


@pytest.mark.parametrize("base, specific", FAMILIES)
def test_the_note_for_every_family(family, base, specific):
    """The rule (PL199) by the object's entries and the contract's targets, for each family."""
    from pipelink.linker.collect import family_ir_only
    comp = _component(family["sm90.o"])

    def said(archs, ir, arch):
        obj = replace(comp.obj, entries=[replace(e, arch=ir) for e in comp.obj.entries])
        contract = replace(comp.contract, targets=replace(comp.contract.targets, archs=archs))
        sink = DiagnosticSink()
        family_ir_only(replace(comp, contract=contract, obj=obj), arch, sink)
        return [(d.code, d.severity, d.location.pointer) for d in sink.items]

    assert said((base, specific), base, specific) == [("PL199", "note", "/targets/archs/1")]
    assert said((specific, base), base, specific) == [("PL199", "note", "/targets/archs/0")]
    assert said((base, specific), base, base) == []
    assert said((base,), base, specific) == []   # no arch-specific code promised
    assert said((base, specific), specific, specific) == []
    assert said((base, specific), None, specific) == []  # raw LTO-IR: its arch is not known
