"""The `loops` pass: does a component's hot loop come out of the link as it comes out alone?

A fused kernel has one register allocation. What one component keeps live (loads it holds in registers,
per-thread values LTO hoists out of the task loop) is pressure in every other component's loops, and
ptxas then recomputes there what it kept before: the MoE Hopper expert's gate/up loop went from 523
instructions alone to 630 in the layer kernel, because of the combine's 32 register-held loads
(docs/architecture.md). Each component is linked alone (conformance's probe kernel), its streaming loops
are matched with the kernel's by their streaming instructions, and the lengths compared."""
from __future__ import annotations

from .. import toolchain
from ..core.diagnostics import DiagnosticSink
from .conformance import LoopGrowth, loop_growth, probe, streaming_loops
from .resolve import Resolved
from .verify import objects_of

# A loop this much longer in the kernel than alone (and by at least MIN_EXTRA instructions) is reported.
GROWTH_WARN = 0.15
MIN_EXTRA = 16


def compare_loops(r: Resolved, cubin: bytes, arch: str, registers: int, sink: DiagnosticSink) -> str:
    """The link map's section on streaming loops; PL183 for each loop that grew past GROWTH_WARN.
    `registers`: what the kernel uses a thread."""
    try:
        kernel = streaming_loops(toolchain.disassemble(cubin))
    except toolchain.ToolchainError as exc:  # no nvdisasm: say so, the link itself is fine
        sink.warning("PL183", f"cannot compare the streaming loops: {exc.message}")
        return ""
    alone, used, unlinked = {}, {}, []
    components = {c.name: c for c in objects_of(r)}
    for name, comp in components.items():
        result = probe(comp, arch) if comp.obj is not None else None
        if result is None or result.usage is None:
            unlinked.append(name)
        else:
            alone[name], used[name] = list(result.loops), result.usage.registers
    growths = loop_growth(alone, kernel)
    for g in growths:
        if g.growth > GROWTH_WARN and g.linked - g.loop.instructions >= MIN_EXTRA:
            sink.warning("PL183", f"{g.component}'s streaming loop ({g.loop.describe()}) is {g.linked} instructions "
                         f"in this kernel and {g.loop.instructions} linked alone (+{g.growth:.0%}); alone it used "
                         f"{used[g.component]} registers, the kernel uses {registers}: the kernel has one register "
                         "allocation, and what other components keep live (or a budget below what it used alone) "
                         "leaves this loop fewer registers, so it recomputes what it kept alone",
                         components[g.component].contract.at("/registers"))
    return render(growths, [n for n in alone if not any(g.component == n for g in growths)], unlinked)


def render(growths: list[LoopGrowth], unmatched: list[str], unlinked: list[str]) -> str:
    lines = ["", "## streaming loops (each component linked alone, and in this kernel)"]
    if not growths:
        lines.append("  none matched")
    for g in growths:
        lines.append(f"  {g.component}: {g.loop.describe()}: {g.loop.instructions} instructions alone, "
                     f"{g.linked} in this kernel ({g.growth:+.0%})")
    if unmatched:
        lines.append("  no loop matched for: " + ", ".join(unmatched))
    if unlinked:
        lines.append("  could not be linked alone: " + ", ".join(unlinked))
    return "\n".join(lines) + "\n"
