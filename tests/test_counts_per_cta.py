"""counts_per_cta: a call's whole-call events (every task adds to every element: `after` events, maps onto
':') added once per CTA after its last task of the call, under a static persistent schedule; refused
(PL184) elsewhere. The decode step's glue with and without it is in tests/test_decode_step.py."""
import dataclasses

import pytest

from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.pipeline import load_pipeline
from pipelink.harness.shipped import shipped_pipelines
from pipelink.linker.passes import LinkOptions, run_passes

from contract_factory import shipped_component


def _spec(name, **kw):
    pipe = next(p for p in shipped_pipelines() if p.name == name)
    return pipe, dataclasses.replace(load_pipeline(pipe.path, DiagnosticSink()), **kw)


@pytest.mark.parametrize("name,kw", [("splitk_gemv", {"dispatch": "dynamic"}), ("rowsum", {})])
def test_counts_per_cta_outside_a_static_persistent_schedule_is_refused(name, kw):
    pipe, spec = _spec(name, counts_per_cta=True, **kw)
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=spec),
                     components=[shipped_component(n) for n in pipe.components], until="resolve")
    errors = [d for d in ctx.sink.items if d.severity == "error"]
    assert [d.code for d in errors] == ["PL184"] and "static" in errors[0].hint


def test_a_pipeline_file_takes_counts_per_cta(tmp_path):
    import json
    pipe = next(p for p in shipped_pipelines() if p.name == "splitk_gemv")
    raw = json.loads(pipe.path.read_text())
    raw["counts_per_cta"] = True
    path = tmp_path / "p.json"
    path.write_text(json.dumps(raw))
    assert load_pipeline(path, DiagnosticSink()).counts_per_cta is True
    raw["counts_per_cta"] = "yes"
    path.write_text(json.dumps(raw))
    sink = DiagnosticSink()
    assert load_pipeline(path, sink) is None and sink.has_errors


@pytest.mark.parametrize("name,kw,on", [("splitk_gemv", {}, True), ("splitk_gemv", {"dispatch": "dynamic"}, False),
                                        ("splitk_gemv", {"counts_per_cta": False}, False), ("rowsum", {}, False)])
def test_absent_it_is_on_wherever_the_schedule_allows_it(name, kw, on):
    # None (the default): on under a static persistent schedule, off elsewhere without a diagnostic
    pipe, spec = _spec(name, **kw)
    assert "counts_per_cta" in kw or spec.counts_per_cta is None
    ctx = run_passes(options=LinkOptions(arch="sm_90", pipeline=spec),
                     components=[shipped_component(n) for n in pipe.components], until="resolve")
    assert not [d for d in ctx.sink.items if d.severity == "error"]
    assert ctx.resolved.counts_per_cta is on
