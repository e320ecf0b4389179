"""Verify: trust the contracts, then check the linked cubin. What the kernel really uses is read from
its `.nv.info` attributes and compared with the allocation, the contracts and the device. Where the
kernel uses what no contract declares, each component is linked alone (conformance.py's probe, only
then: a clean link runs none) to say whose code it is."""
from __future__ import annotations

from dataclasses import replace

from ..authoring.header import marker_symbol
from ..core.diagnostics import DiagnosticSink
from ..core.targets import TARGETS
from ..formats.cubin import CubinError, KernelInfo, global_variables, read_cubin
from .allocate import Allocation
from ..authoring.conformance import MATH_SUBROUTINE, spills_in_streaming_loops, stray_barrier_ids
from .resolve import Resolved


def verify_cubin(cubin: bytes, r: Resolved, a: Allocation, arch: str, sink: DiagnosticSink) -> KernelInfo | None:
    target = TARGETS[arch]
    try:
        kernels = read_cubin(cubin)
        variables = global_variables(cubin)
    except CubinError as exc:
        sink.error("PL073", f"cannot read the linked cubin: {exc}")
        return None
    info = kernels.get(r.name)
    if info is None:
        sink.error("PL073", f"the linked cubin has no kernel '{r.name}' (it has: {', '.join(kernels) or 'none'})")
        return None
    # A marker left undefined is zero-filled by nvJitLink (NOBITS): a stale component build.
    for comp in objects_of(r):
        marker = marker_symbol(comp.contract)
        section = variables.get(marker, (None, 0))[0]
        if section is not None and section.startswith(".nv.global") and not section.endswith(".init"):
            sink.error("PL049", f"{comp.obj.path if comp.obj else comp.name}: not compiled against this contract "
                       f"(hash {comp.contract.hash[:16]}): the link found no {marker}, so the object was built "
                       "against another version of it", comp.contract.at("/"))
    if a.registers and info.registers > a.registers:
        sink.error("PL073", f"the kernel uses {info.registers} registers per thread; the contracts allow "
                   f"{a.registers}")
    if info.registers * a.block_threads > target.regs_per_sm:
        sink.error("PL073", f"{info.registers} registers x {a.block_threads} threads exceeds an SM's "
                   f"{target.regs_per_sm}")
    probes = _Probes(objects_of(r), arch)
    if info.frame_bytes or info.max_stack_bytes:
        who = probes.blame(lambda c, u, _: u.local_bytes, lambda c, u, _: f"{u.local_bytes} bytes")
        sink.warning("PL073", f"the kernel spills or uses a stack: {info.frame_bytes} bytes of frame, "
                     f"{info.max_stack_bytes} of stack per thread" + _hot_spills(cubin)
                     + _alone(who, "uses local memory"),
                     _where(who, "/registers"), hint="lower a component's register pressure, "
                     "or raise registers.max_per_thread where the block size allows")
    if info.static_smem_bytes:
        who = probes.blame(lambda c, u, _: u.static_smem_bytes, lambda c, u, _: f"{u.static_smem_bytes} bytes")
        sink.warning("PL073", f"components declare {info.static_smem_bytes} bytes of static __shared__ memory "
                     "outside the linker's arena" + _alone(who, "declares its own __shared__ memory"),
                     _where(who, "/smem"), hint="declare them as smem buffers in the contract")
    if info.static_smem_bytes + a.smem_bytes > target.smem_per_block:
        sink.error("PL073", f"static {info.static_smem_bytes} + dynamic {a.smem_bytes} bytes of shared memory "
                   f"exceed {target.smem_per_block}")
    expected = expected_barrier_count(a)
    from .allocate import group_barrier_ids
    expected = max([expected, *(ids.stop for ids in group_barrier_ids(r, a).values())])  # the glue's own
    # A component with a copy per instance of its role picks its barrier id at run time (base +
    # copy), so ptxas reserves every id: expected, and harmless at one block per SM.
    runtime_ids = any(a.copies.get(c.name, 1) > 1 and c.contract.barriers.named for c in objects_of(r))
    if info.num_barriers is not None and info.num_barriers > expected and not runtime_ids:
        who = probes.blame(lambda c, u, ids: u.computed_barrier_ids or stray_barrier_ids(c, u, ids),
                           lambda c, u, ids: "computes an id at run time" if u.computed_barrier_ids else
                           "uses id " + ", ".join(map(str, stray_barrier_ids(c, u, ids))))
        sink.warning("PL073", f"the kernel uses {info.num_barriers} named barriers but the allocation assigned ids "
                     f"below {expected}: " + ("barrier ids were not link-time constants (16 means ptxas could not "
                                               "see them)" if info.num_barriers == 16 else
                                               "a component uses an id its contract does not declare")
                     + _alone(who, "does so"), _where(who, "/barriers"),
                     hint="use the header's bar_<name>()/sync_<name>() and declare hard-coded ids")
    callees = [n for n in info.subroutines if not n.startswith(MATH_SUBROUTINE)]
    if info.calls and callees:
        who = probes.blame(lambda c, u, _: u.callees, lambda c, u, _: "calls " + ", ".join(u.callees))
        sink.warning("PL073", f"the kernel still calls {', '.join(callees)}: a component was not inlined "
                     "(__noinline__, -G, or an object without LTO-IR); linking is then not free"
                     + _alone(who, "keeps a call"), _where(who, who[0][0].contract.entry_pointer if who else ""))
        from .collect import warn_other_abi
        warn_other_abi(objects_of(r), arch, sink)  # the cause, where it is an object built by another pipelink
    return info


class _Probes:
    """Each component linked alone, on demand: a problem in the fused kernel gets a name."""

    def __init__(self, components, arch: str):
        self.components, self.arch, self.results = components, arch, None

    def blame(self, test, say) -> list[tuple[object, str]]:
        """(component, what its probe shows) for each component whose probe passes `test`."""
        if self.results is None:
            from .. import toolchain
            from ..authoring.conformance import probe
            self.results = []
            for comp in self.components:
                try:
                    result = probe(comp, self.arch) if comp.obj is not None else None
                except toolchain.ToolchainError:  # no nvdisasm: the problem is still reported, unnamed
                    result = None
                if result is not None and result.usage is not None:
                    self.results.append((comp, result))
        return [(comp, say(comp.contract, res.usage, res.plan.barrier_ids)) for comp, res in self.results
                if test(comp.contract, res.usage, res.plan.barrier_ids)]


def _hot_spills(cubin: bytes) -> str:
    """Where the spills are paid: inside loops that stream, every iteration, or only at tasks' starts."""
    from .. import toolchain
    try:
        hot = spills_in_streaming_loops(toolchain.disassemble(cubin))
    except toolchain.ToolchainError:  # no nvdisasm: the spill is still reported
        return ""
    if not hot:
        return " (no local loads inside a loop that streams: paid per task, not per iteration)"
    return (f" ({sum(n for _, _, n in hot)} local loads inside {len(hot)} loop(s) that stream: paid every "
            "iteration)")


def _alone(who, verb: str) -> str:
    """`; linked alone, 'a' (a.o) declares its own __shared__ memory (1024 bytes)`."""
    if not who:
        return ""
    return "; linked alone, " + ", ".join(f"'{comp.name}' ({comp.obj.path}) {verb} ({what})"
                                         for comp, what in who)


def _where(who, pointer: str):
    return who[0][0].contract.at(pointer) if who else None


def expected_barrier_count(a: Allocation) -> int:
    """Highest barrier id the kernel may use, plus one (id 0 is __syncthreads)."""
    ids = [bid + a.copies.get(comp, 1) - 1 for (comp, _), bid in a.barrier_id.items()] + list(a.hardcoded_ids)
    return max(ids, default=0) + 1


def objects_of(r: Resolved) -> list:
    """Each object once, as compiled: a component called several times is one object with one contract."""
    seen, out = set(), []
    for comp in r.components:
        if comp.code.name not in seen:
            seen.add(comp.code.name)
            out.append(replace(comp, contract=comp.code, base=None))
    return out
