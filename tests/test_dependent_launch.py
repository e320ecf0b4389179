"""Programmatic dependent launch, without a GPU: the pipeline field and its flag, the glue's grid
waits, the manifest, the launch configuration the launcher hands cuLaunchKernelEx, and PL165 where the
target has no griddepcontrol. The launches themselves: tests/test_gpu_dependent_launch.py."""
import dataclasses
import json

import pytest

from pipelink.cli import main
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.pipeline import load_pipeline, load_pipeline_dict
from pipelink.harness.shipped import shipped_pipelines
from pipelink.linker.passes import LinkOptions, link
from pipelink.runtime.launch import Kernel, dependent_launch_config
from pipelink.runtime.manifest import Manifest

PIPELINES = {p.name: p for p in shipped_pipelines()}


def linked(objects, name, arch=None, **spec_fields):
    pipe = PIPELINES[name]
    spec = dataclasses.replace(load_pipeline(pipe.path, DiagnosticSink()), **spec_fields)
    return link([str(objects[n]) for n in pipe.components], LinkOptions(arch=arch, pipeline=spec, cache=False))


def test_the_pipeline_file_asks_for_it():
    sink = DiagnosticSink()
    spec = load_pipeline_dict({"pipeline": 1, "name": "k", "dependent_launch": True}, sink)
    assert spec is not None and spec.dependent_launch, [d.render() for d in sink.items]
    sink = DiagnosticSink()
    assert load_pipeline_dict({"pipeline": 1, "name": "k", "dependent_launch": "yes"}, sink) is None
    assert [d.code for d in sink.items] == ["PL133"]


def test_the_glue_waits_for_the_grid_before_and_the_manifest_says_how_to_launch(shipped_objects):
    plain = linked(shipped_objects, "tile_chain")
    result = linked(shipped_objects, "tile_chain", dependent_launch=True)
    assert result.ok, [d.render() for d in result.diagnostics]
    assert "griddepcontrol" not in plain.glue and not plain.manifest.dependent_launch
    body = result.glue[result.glue.index("__global__"):]
    # before anything the kernel reads: the first thing after the stale-build check
    assert body.index("griddepcontrol.launch_dependents") < body.index("griddepcontrol.wait") < body.index("pl_launch")
    doc = result.manifest.to_json()
    assert doc["dependent_launch"] is True and Manifest.from_json(doc).dependent_launch
    assert Kernel(doc).manifest.dependent_launch
    with pytest.raises(ValueError, match="dependent_launch"):
        Manifest.from_json(dict(doc, dependent_launch="yes"))


def test_an_arch_without_griddepcontrol_is_pl165():
    from contract_factory import shipped_component
    from pipelink.linker.allocate import allocate
    from pipelink.linker.resolve import resolve

    def sm80(c):
        c["targets"]["archs"] = ["sm_80", "sm_90"]
    comps = [shipped_component(n, sm80) for n in PIPELINES["rowsum"].components]
    sink = DiagnosticSink()
    spec = dataclasses.replace(load_pipeline(PIPELINES["rowsum"].path, sink), dependent_launch=True)
    r = resolve(comps, spec, sink)
    assert allocate(r, "sm_80", sink) is None and [d.code for d in sink.items] == ["PL165"]
    for arch in ("sm_90", "sm_100", "sm_120a"):  # sm_100 and sm_120 had been read as 10 and 12: PL165
        sink = DiagnosticSink()
        assert allocate(r, arch, sink) is not None and not sink.items, arch


def test_the_cli_flag(shipped_objects, tmp_path, capsys):
    pipe = PIPELINES["rowsum"]
    out = tmp_path / "rowsum.cubin"
    assert main(["link", "--pipeline", str(pipe.path), *(str(shipped_objects[n]) for n in pipe.components),
                 "-o", str(out), "--dependent-launch", "--no-cache"]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "rowsum.json").read_text())["dependent_launch"] is True


def test_the_launch_configuration():
    drv = pytest.importorskip("cuda.bindings.driver")
    config = dependent_launch_config(drv, (7, 2, 1), (384, 1, 1), 229504, 0)
    assert (config.gridDimX, config.gridDimY, config.gridDimZ) == (7, 2, 1)
    assert (config.blockDimX, config.blockDimY, config.blockDimZ, config.sharedMemBytes) == (384, 1, 1, 229504)
    assert config.numAttrs == 1
    attr = config.attrs[0]
    assert attr.id == drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    assert attr.value.programmaticStreamSerializationAllowed == 1
