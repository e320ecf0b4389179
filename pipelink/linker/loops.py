"""The `loops` pass: does a component's hot loop come out of the link as it comes out alone?

A fused kernel has one register allocation. What one component keeps live (loads it holds in registers,
per-thread values LTO hoists out of the task loop) is pressure in every other component's loops, and
ptxas then recomputes there what it kept before: the MoE Hopper expert's gate/up loop went from 523
instructions alone to 630 in the layer kernel, because of the combine's 32 register-held loads
(docs/architecture.md). Each component is linked alone, as a kernel of its own with the link's schedule
and dispatch (a standalone link: its events dropped, the link's values of what it consumes), else where
that link fails (an unwired port) into conformance's bare probe kernel; its streaming loops are matched
with the kernel's by their streaming instructions, and the lengths compared. (The bare probe takes its tile
from the block index, with no task loop: ptxas can fold there what no persistent kernel lets it, and the
MoE Hopper expert's down loop came out 242 instructions in the probe, 290 in both its own persistent
kernel and the layer.)"""
from __future__ import annotations

from .. import toolchain
from ..core.diagnostics import DiagnosticSink
from ..authoring.conformance import LoopGrowth, loop_growth, probe, streaming_loops
from .resolve import Resolved
from .verify import objects_of

# A loop this much longer in the kernel than alone (and by at least MIN_EXTRA instructions) is reported.
GROWTH_WARN = 0.15
MIN_EXTRA = 16


def compare_loops(r: Resolved, cubin: bytes, arch: str, kernel_info, sink: DiagnosticSink, link_alone=None) -> str:
    """The link map's section on streaming loops; PL183 for each loop that grew past GROWTH_WARN.
    `kernel_info`: the kernel's KernelInfo (its registers, its machine code); `link_alone(component, pipeline spec)`: the passes run on
    that one component, (cubin, kernel name) or None (without it, the bare probe only)."""
    try:
        kernel = streaming_loops(toolchain.disassemble(cubin))
    except toolchain.ToolchainError as exc:  # no nvdisasm: say so, the link itself is fine
        sink.warning("PL183", f"cannot compare the streaming loops: {exc.message}")
        return ""
    alone, used, unlinked, code, probed = {}, {}, [], {}, []
    components = {c.name: c for c in objects_of(r)}
    for name, comp in components.items():
        own = own_kernel_loops(r, comp, link_alone) if link_alone is not None else None
        if own is not None:
            alone[name], used[name], code[name] = own
            continue
        result = probe(comp, arch) if comp.obj is not None else None
        if result is None or result.usage is None:
            unlinked.append(name)
        else:
            alone[name], used[name] = list(result.loops), result.usage.registers
            probed.append(name)
    growths = loop_growth(alone, kernel)
    for g in growths:
        if g.growth > GROWTH_WARN and g.linked - g.loop.instructions >= MIN_EXTRA:
            sink.warning("PL183", f"{g.component}'s streaming loop ({g.loop.describe()}) is {g.linked} instructions "
                         f"in this kernel and {g.loop.instructions} linked alone (+{g.growth:.0%}); alone it used "
                         f"{used[g.component]} registers, the kernel uses {kernel_info.registers}: the kernel has one register "
                         "allocation, and what other components keep live (or a budget below what it used alone) "
                         "leaves this loop fewer registers, so it recomputes what it kept alone",
                         components[g.component].contract.at("/registers"))
    return render(growths, [n for n in alone if not any(g.component == n for g in growths)], unlinked,
                  code, len(kernel_info.text), probed)


def own_kernel_loops(r: Resolved, comp, link_alone) -> tuple[list, int, int] | None:
    """The streaming loops, registers and code bytes of `comp` linked as a kernel of its own, with the link's schedule
    and dispatch and its values of what the component consumes but does not provide; None where that link
    fails (a port no other component wires, say) or the component has no object."""
    from ..core.pipeline import PipelineSpec
    from ..formats.cubin import CubinError, read_cubin
    if comp.obj is None:
        return None
    geometry = comp.contract.geometry
    given = {k: v for k, v in r.geometry.items() if k in geometry.consumes and k not in geometry.provides}
    spec = PipelineSpec(name=f"{comp.name}_alone", schedule=r.schedule, dispatch=r.dispatch, standalone=True,
                        geometry=given)
    linked = link_alone(comp, spec)
    if linked is None:
        return None
    cubin, kernel = linked
    try:
        info = read_cubin(cubin)[kernel]
        return streaming_loops(toolchain.disassemble(cubin)), info.registers, len(info.text)
    except (CubinError, KeyError, toolchain.ToolchainError):
        return None


def render(growths: list[LoopGrowth], unmatched: list[str], unlinked: list[str], code: dict[str, int] | None = None,
           kernel_code: int | None = None, probed: list[str] = ()) -> str:
    """The map section. `code`: each component's machine code in a kernel of its own, and `kernel_code` the
    fused kernel's, in bytes: a component's task runs its code cold in the instruction cache when the
    other components' tasks ran on the SM in between (the MoE router's picking task, unrolled, spent most
    of its 21 us fetching its code: docs/architecture.md)."""
    lines = ["", "## streaming loops (each component linked as a kernel of its own, and in this kernel)"]
    if not growths:
        lines.append("  none matched")
    for g in growths:
        lines.append(f"  {g.component}: {g.loop.describe()}: {g.loop.instructions} instructions alone, "
                     f"{g.linked} in this kernel ({g.growth:+.0%})")
    if unmatched:
        lines.append("  no loop matched for: " + ", ".join(unmatched))
    if probed:
        lines.append("  alone means the bare probe kernel (no kernel of its own links) for: " + ", ".join(probed))
    if unlinked:
        lines.append("  could not be linked alone: " + ", ".join(unlinked))
    if code and kernel_code:
        alone = ", ".join(f"{n} {b / 1024:.1f}" for n, b in sorted(code.items(), key=lambda kv: -kv[1]))
        lines.append(f"  machine code, KB: this kernel {kernel_code / 1024:.1f}; each component in a kernel of its "
                     f"own: {alone}")
    return "\n".join(lines) + "\n"
