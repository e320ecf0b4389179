"""`pipelink demo`: the shipped components, built, checked, linked, and run where a GPU is."""
from __future__ import annotations

import sys
from pathlib import Path

from ..core.diagnostics import DiagnosticSink, render_all
from ..linker.passes import LinkOptions, link
from .shipped import build_shipped, shipped_pipelines

DEFAULT_PIPELINE = "rowsum"
SHAPES = [(1, 1), (100, 300), (4096, 4096)]


def say(text: str = "") -> None:
    print(text, flush=True)


def run_demo(build_dir: Path) -> int:
    sink = DiagnosticSink()
    say("== building the shipped components")
    objects = {o.stem: str(o) for o in build_shipped(build_dir, sink)}
    if sink.has_errors:
        return _fail(sink)
    results = {}
    for pipe in shipped_pipelines():
        files = [objects[n] for n in pipe.components]
        say(f"\n== pipelink check --set {' '.join(files)}")
        from ..api import run_checks
        (got,), _ = run_checks(files, sink, together=True)
        if sink.has_errors:
            return _fail(sink)
        say(f"ok: {', '.join(c.name for c in got.components)} checked together for {got.target}")
        say(f"== pipelink link --pipeline {pipe.path.relative_to(pipe.path.parent.parent)} {' '.join(files)}")
        from ..core.pipeline import load_pipeline
        spec = load_pipeline(pipe.path, sink)
        result = link(files, LinkOptions(pipeline=spec))
        sink.extend(result.diagnostics)
        if not result.ok:
            return _fail(sink)
        m = result.manifest
        say(f"linked kernel {m.kernel}: {m.block[0]} threads, {m.dynamic_smem} bytes of dynamic smem, "
            f"{m.resources.registers} registers, schedule {m.schedule}")
        results[pipe.name] = result
    say(f"\n== link map of the default pipeline '{DEFAULT_PIPELINE}'")
    say(results[DEFAULT_PIPELINE].link_map)
    return _run_on_gpu(results)


def _run_on_gpu(results) -> int:
    from ..runtime.launch import gpu_available
    if not gpu_available():
        say("== no GPU here: linked and verified, not run")
        return 0
    from .problems import run_and_judge
    worst = 0.0
    for name, result in results.items():
        kernel = result.kernel()
        for M, N in SHAPES:
            err, problem = run_and_judge(kernel, name, M, N, seed=M * 7919 + N)
            ok = err <= problem.tolerance
            say(f"== GPU {name} M={M} N={N}: max relative error {err:.2e} ({'ok' if ok else 'FAIL'})")
            worst = max(worst, err / problem.tolerance)
    return 0 if worst <= 1.0 else 1


def _fail(sink: DiagnosticSink) -> int:
    print(render_all(sink.items), file=sys.stderr)
    return int(sink.exit_code()) or 1
