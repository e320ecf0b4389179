"""`pipelink check`'s probe pass: each object linked alone into a probe kernel and held against its contract
(the probe and the comparison: authoring/conformance.py); an object that does not link alone is explained symbol by
symbol (collect.py)."""
from __future__ import annotations

from ..authoring.conformance import ProbeResult, compare, probe
from .. import toolchain
from ..core.diagnostics import DiagnosticSink, Location


def check_conformance(comp, arch: str, sink: DiagnosticSink) -> ProbeResult | None:
    """`pipelink check`'s probe of one object: a good object is linked once and compared with its
    contract; one that does not link alone is explained symbol by symbol (entry, marker)."""
    from .collect import probe_symbols
    try:
        result = probe(comp, arch)
    except toolchain.ToolchainError as exc:
        sink.error("PL008", f"cannot probe {comp.obj.path}: {exc.message}", Location(file=comp.obj.path))
        return None
    if result.usage is None:
        before = len(sink.errors)
        probe_symbols(comp, arch, sink)
        if len(sink.errors) == before:
            sink.error("PL074", f"{comp.obj.path}: component '{comp.name}' does not link alone into a probe kernel "
                       f"calling its entry:\n{result.log}", comp.contract.at(comp.contract.entry_pointer),
                       related=(Location(file=comp.obj.path),))
        return None
    compare(comp.contract, comp.obj.path, result.usage, result.plan.barrier_ids, sink)
    return result
