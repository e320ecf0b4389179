"""An sm_90a component must not carry sm_90 LTO-IR (PL108): `-arch=sm_90a -dlto` writes both, and a
link that takes the sm_90 IR compiles the sm_90a-only paths (wgmma, setmaxnreg) to traps."""
import json
from dataclasses import replace

import pytest

from pipelink.api import run_checks
from pipelink.authoring.builder import BuildOptions, build_component
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.loader import load_contract_bytes
from pipelink.core.model import Source
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
