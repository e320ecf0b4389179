"""Link the shipped pipelines and run each once on a small ragged problem: a target for
compute-sanitizer (memcheck, racecheck, synccheck) on the GPU machine.

    compute-sanitizer --tool racecheck python3 scripts/sanitize.py BUILD_DIR
"""
import sys
from pathlib import Path

from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.pipeline import load_pipeline
from pipelink.harness.problems import run_and_judge
from pipelink.harness.shipped import build_shipped, shipped_pipelines
from pipelink.linker.passes import LinkOptions, link

build = Path(sys.argv[1] if len(sys.argv) > 1 else "build/components")
sink = DiagnosticSink()
objects = {o.stem: str(o) for o in build_shipped(build, sink, log=lambda *_: None)}
assert not sink.has_errors, [d.render() for d in sink.items]
failed = 0
for pipe in shipped_pipelines():
    result = link([objects[n] for n in pipe.components], LinkOptions(pipeline=load_pipeline(pipe.path, sink)))
    assert result.ok, [d.render() for d in result.diagnostics]
    kernel = result.kernel()
    for grid in (None, 2):
        err, problem = run_and_judge(kernel, pipe.name, 77, 1000, seed=1234, grid=grid)
        ok = err <= problem.tolerance
        failed += not ok
        print(f"{pipe.name} grid={grid}: max error {err:.2e} {'ok' if ok else 'FAIL'}")
sys.exit(1 if failed else 0)
