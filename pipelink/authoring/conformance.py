"""Conformance: what a component's code really uses, held against what its contract declares.

`pipelink check` links each object alone into a probe kernel: a `__global__` that calls the entry
once, with every link-time constant defined the way a link would (warps from 0, buffers one after
another, consumed geometry at its default, named barriers on the highest free ids so that an
undeclared literal id, usually a small one, does not meet them). The probe has no register cap,
so it shows what the code asks for. Its cubin says the rest (`cubin.py`: registers, local memory,
static shared memory, calls), and its SASS (the pinned nvdisasm) which barrier ids the code uses.

`compare` is pure: a contract and a `Usage` in, diagnostics out.

  - the component's own `__shared__` memory                      error   PL140
  - more registers than registers.max_per_thread                 warning PL141
  - a named-barrier id neither hard-coded nor assigned            error   PL142
    (an id computed at run time: a warning, it cannot be checked)
  - barrier 0 (`__syncthreads`) without threads.uses_syncthreads  error   PL143
  - local memory (stack, spills)                                 warning PL144
  - calls LTO did not inline                                     warning PL145

It also records what only the link can judge: whether the code executes the cluster-wide barrier
(`barrier.cluster.arrive` / `wait`, `cooperative_groups::this_cluster().sync()`: UCGABAR_ARV and
UCGABAR_WAIT in the SASS), which waits for every thread of the cluster that has not exited. Alone, in
a block of its own warps, that is the component's own threads; the link refuses it where the fused block
has threads that do not run the component's code (PL206, linker/clusters.py). In the `entries` form it
records which entries execute it: LTO inlines them all into the probe kernel, so a component whose probe
shows the barrier is linked once more with one probe kernel for each entry, read section by section
(`entry_barriers`): a barrier in the per-CTA entry every thread runs is not one in a role's.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .. import toolchain
from .header import constant_symbols, entry_prototype, marker_symbol, pipelink_include_dir, symbol_prefix
from ..core.diagnostics import DiagnosticSink, Location
from ..core.expr import ExprError
from ..core.model import DTYPE_BYTES, DTYPE_C, Contract, ParamRange, dtype_includes

PROBE_KERNEL = "__pipelink_probe"
FREE_BARRIER_IDS = range(1, 16)  # 0 is __syncthreads
# The compiler's own math subroutines (IEEE division's slow path) are called, never inlined, in
# the one-unit build too: not a cost of linking, nor the component's doing.
MATH_SUBROUTINE = "$__internal_"


@dataclass(frozen=True)
class Usage:
    """What the probe kernel, the component alone, uses."""
    registers: int
    local_bytes: int                # frame and stack per thread: local arrays, spills
    static_smem_bytes: int          # __shared__ the component declares itself
    barrier_ids: frozenset[int]     # immediate ids of BAR.SYNC / BAR.ARV / BAR.RED
    computed_barrier_ids: bool      # a barrier instruction whose id is a register
    callees: tuple[str, ...]        # functions still called after LTO
    cluster_barrier: bool = False   # executes barrier.cluster (UCGABAR_ARV / UCGABAR_WAIT)
    # The `entries` form: the indexes (in contract order) of the entries whose code executes it, each entry probed
    # in a kernel of its own (`entry_barriers`); None where not told apart (a single entry, or every entry counts).
    cluster_barrier_entries: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Probe:
    source: str
    barrier_ids: dict[str, int]     # named barrier -> the id the probe gave it


def probe_value(rng: ParamRange) -> int | None:
    """The value a consumed geometry name gets in the probe: its default, else the smallest it admits."""
    if rng.default is not None:
        return rng.default
    if rng.one_of is not None:
        return min((v for v in rng.one_of if rng.admits(v)), default=None)
    step = rng.multiple_of or 1
    value = -(-(rng.min or 1) // step) * step
    return value if rng.admits(value) else None


def probe_plan(c: Contract, per_entry: bool = False) -> Probe:
    """The probe's source: the constants, the marker's address (a stale build shows) and one call. `per_entry` (the
    `entries` form): one kernel for each entry instead (`entry_kernel`), each calling that entry alone, so that
    what an entry's code executes is read from its kernel's SASS apart from the others'."""
    p = symbol_prefix(c)
    env = dict(c.geometry.provides)
    values: dict[str, int] = {f"{p}warp_begin": 0}
    for name, rng in c.geometry.consumes.items():
        value = probe_value(rng)
        values[f"{p}geom__{name}"] = value if value is not None else 1
        env[name] = values[f"{p}geom__{name}"]
    begin = 0
    for role in c.threads.roles:
        values[f"{p}role_begin__{role.name}"] = begin
        begin += role.warps

    offset = 0

    def place(nbytes: int, align: int) -> int:
        """One item after another: the offsets only have to be link-time constants, not a packing."""
        nonlocal offset
        offset = -(-offset // align) * align
        at, offset = offset, offset + max(nbytes, 0)
        return at

    for b in c.buffers:
        try:
            nbytes = b.bytes.evaluate(env)
        except ExprError:  # a size over geometry nobody provides: any constant will do
            nbytes = 0
        values[f"{p}smem__{b.name}"] = place(nbytes, b.align)
    for port in c.ports:
        if port.space == "smem":
            try:
                elems = 1
                for e in port.tile:
                    elems *= e.evaluate(env)
                stride = -(-elems * DTYPE_BYTES[port.dtype] // 128) * 128
                stages = port.stages.evaluate(env)
            except ExprError:
                stride, stages = 0, 1
            values[f"{p}port__{port.name}"] = place(stride * stages, 128)
            values[f"{p}port_stride__{port.name}"] = stride
    for m in c.barriers.mbarriers:
        values[f"{p}mbar__{m.name}"] = place(8 * m.count, 8)
    free = [i for i in reversed(FREE_BARRIER_IDS) if i not in c.barriers.hardcoded_ids]
    ids = {b.name: free[k] if k < len(free) else 0 for k, b in enumerate(c.barriers.named)}
    for name, bid in ids.items():
        values[f"{p}bar__{name}"] = bid

    if c.entries:  # alone, every role runs once and the component has one copy of its resources
        values.update({f"{p}role_instances__{role.name}": 1 for role in c.threads.roles})
        values[f"{p}copies"] = 1
        values.update({f"{p}smem_stride__{b.name}": 0 for b in c.buffers})
        values.update({f"{p}mbar_stride__{m.name}": 0 for m in c.barriers.mbarriers})
    values[f"{p}profile_mark"] = 0  # alone: no task profile
    if c.in_entry_waits:
        values[f"{p}waits_at"] = 0  # alone: no producer ran, its in-entry waits are met
    types = constant_symbols(c)
    assert set(types) == set(values), set(types) ^ set(values)
    kernels = []
    if c.entries and per_entry:
        for i in range(len(c.entries)):
            params, body = _entries_body(c, env, only=i)
            kernels.append((entry_kernel(i), params, body))
    elif c.entries:
        params, body = _entries_body(c, env)
    else:
        params = (["pl::Tile tile"] if c.entry.invocation == "per_tile" else []) + [q.c_decl() for q in c.entry.params]
        call = (["tile"] if c.entry.invocation == "per_tile" else []) + [q.name for q in c.entry.params]
        body = [f"  {c.entry.symbol}({', '.join(call)});"]
        if c.entry.carry:  # the prefetch fills the task's words and the entry takes them, as the glue calls both
            call.append("pl_carry")
            body = [f"  unsigned pl_carry[{c.entry.carry}];",
                    f"  {c.entry.prefetch}({', '.join(call)});",
                    f"  {c.entry.symbol}({', '.join(call)});"]
    if not kernels:
        kernels.append((PROBE_KERNEL, params, body))
    src = [f"// pipelink conformance probe: component '{c.name}' alone, its entry called once.",
           "#include <pipelink/component.h>",
           *dtype_includes([q.dtype for q in c.entry.params] + [q.dtype for q in c.ports]),
           'extern "C" {',
           *(f"__device__ extern const {ctype} {sym} = {values[sym]}{'u' if ctype == 'unsigned' else ''};"
             for sym, ctype in types.items()),
           "}",
           f'extern "C" __device__ const unsigned {marker_symbol(c)};',
           entry_prototype(c) + ";"]
    for kernel, params, body in kernels:
        src += [f'extern "C" __global__ void __launch_bounds__({c.threads.count}, 1) {_cluster_dims(c)}'
                f'{kernel}({", ".join(["const void** pl_out"] + params)}) {{',
                f"  pl_out[0] = (const void*)&{marker_symbol(c)};  // kept: the cubin shows whether it is defined",
                *body,
                "}"]
    return Probe("\n".join(src + [""]), ids)


def entry_kernel(index: int) -> str:
    """The kernel of the per-entry probe that calls entry `index` (contract order) alone."""
    return f"{PROBE_KERNEL}_entry{index}"


def _cluster_dims(c: Contract) -> str:
    """The probe kernel's `__cluster_dims__` where the contract declares a cluster, as the linked kernel's: the
    compiler lowers a cluster barrier differently without it (barrier.cluster.wait with a block barrier after it,
    BAR.SYNC 0, which read as a __syncthreads the contract does not declare, PL143)."""
    return f"__cluster_dims__({', '.join(map(str, (list(c.cluster) + [1, 1])[:3]))}) " if c.cluster else ""


def _entries_body(c: Contract, env: dict[str, int], only: int | None = None) -> tuple[list[str], list[str]]:
    """The `entries` form: tensor maps as kernel parameters, then every entry on its role's warps,
    each role with its own register count (setmaxnreg) as a link gives it, fragments in registers. `only`: entry
    `only` (contract order) alone, on its role's warps (every thread for a per-CTA `*` entry)."""
    picked = [e for i, e in enumerate(c.entries) if only is None or i == only]
    params = ["pl::Tile tile"] + [
        f"const __grid_constant__ pl::TensorMap {q.name}" if q.tensor_map is not None else q.c_decl()
        for q in c.entry.params]
    maps = {q.name for q in c.entry.params if q.tensor_map is not None}
    entry_regs = min(255, 65536 // max(c.threads.count, 1) // 8 * 8)
    body = [f"  {e.symbol}({', '.join(_probe_args(c, e, maps))});" for e in picked if e.role == "*"]
    body.append("  const unsigned warp = threadIdx.x / 32;")
    begin = 0
    for role in c.threads.roles:
        if only is not None and not any(e.role == role.name for e in picked):
            begin += role.warps
            continue
        body.append(f"  if (warp >= {begin}u && warp < {begin + role.warps}u) {{  // role {role.name}")
        if role.setmaxnreg is not None and role.setmaxnreg != entry_regs:
            verb = "inc" if role.setmaxnreg > entry_regs else "dec"
            body.append(f'    asm volatile("setmaxnreg.{verb}.sync.aligned.u32 {role.setmaxnreg};");')
        for q in c.ports:
            if q.space == "reg" and q.role == role.name:
                elems = 1
                for e in q.tile:
                    try:
                        elems *= e.evaluate(env)
                    except ExprError:
                        elems *= 1
                body.append(f"    {DTYPE_C[q.dtype]} {q.name}[{max(elems // (32 * role.warps), 1)}];")
        body += [f"    {e.symbol}({', '.join(_probe_args(c, e, maps))});" for e in picked if e.role == role.name]
        body.append("    return;")
        body.append("  }")
        begin += role.warps
    return params, body


def _probe_args(c: Contract, e, maps: set[str]) -> list[str]:
    args = ["tile"] if e.invocation == "per_tile" else []
    return args + [f"&{a}" if a in maps else a for a in e.args]


_BAR = re.compile(r"\bBAR\.(?:SYNC|ARV|RED)\S*\s+([^,;\s]+)")


def sass_barriers(sass: str) -> tuple[frozenset[int], bool]:
    """The immediate ids of the barrier instructions in SASS text, and whether any takes its id
    from a register (`BAR.SYNC.DEFER_BLOCKING 0x3, 0x80`, `BAR.ARV R0, 0x40`, `BAR.RED.POPC ... 0x0, P0`)."""
    ids, computed = set(), False
    for operand in _BAR.findall(sass):
        if operand.startswith("0x") or operand.isdigit():
            ids.add(int(operand, 0))
        else:
            computed = True
    return frozenset(ids), computed


# barrier.cluster.arrive (.release, .relaxed, .aligned or not) and barrier.cluster.wait, which
# cooperative_groups' cluster sync and barrier_arrive / barrier_wait use too: sm_90 and sm_100 print them as
# `UCGABAR_ARV` and `UCGABAR_WAIT` (not CGAERRBAR, the error barrier a cluster-scope fence has before it).
_CLUSTER_BARRIER = re.compile(r"\bU?CGABAR_(?:ARV|WAIT)\w*")


def sass_cluster_barrier(sass: str) -> bool:
    """Whether SASS text executes the cluster-wide barrier (arrive or wait)."""
    return _CLUSTER_BARRIER.search(sass) is not None


_TEXT_SECTION = re.compile(r"^\s*\.section\s+\.text\.([^\s,]+)", re.M)


def sass_sections(sass: str) -> dict[str, str]:
    """SASS text by code section: kernel name -> the SASS of `.text.<kernel>` (a kernel's section holds the
    functions LTO kept out of line for it too)."""
    heads = list(_TEXT_SECTION.finditer(sass))
    return {m.group(1): sass[m.end():heads[k + 1].start() if k + 1 < len(heads) else len(sass)]
            for k, m in enumerate(heads)}


_LABEL = re.compile(r"^(\.L_x_\d+):", re.M)
_BRANCH = re.compile(r"BRA `\((\.L_x_\d+)\)")
# What makes a loop stream: cp.async, tensor-core MMA (mma.sync, wgmma), 16- or 8-byte global loads.
STREAMING_OPS = ("LDGSTS", "HMMA", "HGMMA", "LDG.E.128", "LDG.E.64", "UTMALDG")


_INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")


@dataclass(frozen=True)
class StreamingLoop:
    """An innermost loop of SASS text (a branch back to a label above it, with no such branch inside) that
    streams: its lines, its instructions, how many of each streaming instruction it holds (what tells the
    same loop apart in two links of one component) and its local loads."""
    first: int
    last: int
    instructions: int
    ops: tuple[tuple[str, int], ...]
    local_loads: int

    def describe(self) -> str:
        return ", ".join(f"{n} {op}" for op, n in self.ops)


def streaming_loops(sass: str) -> list[StreamingLoop]:
    """The innermost loops of SASS text that stream. An event's polling (it sleeps) is not streaming."""
    lines = sass.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := _LABEL.match(line))}
    loops = [(labels[m.group(1)], i) for i, line in enumerate(lines)
             if (m := _BRANCH.search(line)) and labels.get(m.group(1), i) < i]
    out = []
    for start, end in loops:
        if any(start <= s and e < end for s, e in loops if (s, e) != (start, end)):
            continue  # not innermost: a task loop, or a phase around its k-steps
        body = lines[start:end + 1]
        opcodes = [m.group(1) for line in body if (m := _INSTRUCTION.search(line))]
        if "NANOSLEEP" in opcodes:
            continue
        ops = tuple((op, n) for op in STREAMING_OPS if (n := sum(o.startswith(op) for o in opcodes)))
        if ops:
            out.append(StreamingLoop(start, end, len(opcodes), ops, sum(o == "LDL" or o.startswith("LDL.")
                                                                         for o in opcodes)))
    return out


def spills_in_streaming_loops(sass: str) -> list[tuple[int, int, int]]:
    """(first line, last line, local loads) of each innermost loop of SASS text that streams and also loads
    from local memory: a spill there is paid every iteration; one at a task's start is not."""
    return [(loop.first, loop.last, loop.local_loads) for loop in streaming_loops(sass) if loop.local_loads]


@dataclass(frozen=True)
class LoopGrowth:
    component: str
    loop: StreamingLoop   # linked alone
    linked: int           # instructions of the kernel's loop with the same streaming instructions (the longest)

    @property
    def growth(self) -> float:
        return self.linked / self.loop.instructions - 1.0


def loop_growth(alone: dict[str, list[StreamingLoop]], kernel: list[StreamingLoop]) -> list[LoopGrowth]:
    """Each component's streaming loops (linked alone) against the fused kernel's loops with the same count of
    each streaming instruction. The kernel's register allocation is one for all its components, so what the
    others keep live can leave a component's loop fewer registers than it had alone, and ptxas then
    recomputes inside it what it kept before. Loops of one component with the same streaming instructions (a
    template instantiated for two ring depths) compare longest with longest. A loop whose streaming
    instructions another component's loop has too, or that no kernel loop has (unrolled or versioned
    differently), is left out: no claim without one owner."""
    owners: dict[tuple, list[tuple[str, StreamingLoop]]] = {}
    for name, loops in alone.items():
        for loop in loops:
            owners.setdefault(loop.ops, []).append((name, loop))
    out = []
    for ops, found in owners.items():
        same = [k.instructions for k in kernel if k.ops == ops]
        if len({name for name, _ in found}) == 1 and same:
            longest = max((loop for _, loop in found), key=lambda loop: loop.instructions)
            out.append(LoopGrowth(found[0][0], longest, max(same)))
    return sorted(out, key=lambda g: (g.component, g.loop.first))


def usage_of(cubin: bytes, sass: str) -> Usage:
    """The probe kernel's use, from its cubin and its SASS. CubinError if the cubin is unreadable."""
    from ..formats.cubin import read_cubin
    info = read_cubin(cubin)[PROBE_KERNEL]
    ids, computed = sass_barriers(sass)
    # LTO names a callee it kept `$<kernel>$<callee>`: the probe kernel's name says nothing.
    callees = tuple(n.removeprefix(f"${PROBE_KERNEL}$") for n in info.subroutines
                    if not n.startswith(MATH_SUBROUTINE)) if info.calls else ()
    return Usage(info.registers, info.frame_bytes + info.max_stack_bytes, info.static_smem_bytes, ids, computed,
                 callees, sass_cluster_barrier(sass))


@dataclass(frozen=True)
class ProbeResult:
    usage: Usage | None       # None: the probe did not link, or the marker is missing
    plan: Probe
    log: str = ""
    loops: tuple[StreamingLoop, ...] = ()  # the component's streaming loops, linked alone


_PROBES: dict[tuple, ProbeResult] = {}  # this process's probes, by contract, device code and target


def probe(comp, arch: str) -> ProbeResult:
    """Link the component alone into the probe kernel and read what it uses. ToolchainError only
    where a tool is missing; a link that fails comes back with usage None and nvJitLink's log. Kept for the
    process: `pipelink build` probes the object it compiles, then checks it as `check` does, which probes it again."""
    import dataclasses
    import hashlib
    # the contract less where it was read from: the build's is its file, check's the object's embedded copy
    key = (repr(dataclasses.replace(comp.contract, source=None)), comp.obj.path,
           hashlib.sha256(comp.obj.link_input().data).hexdigest(), arch)
    if key not in _PROBES:
        if len(_PROBES) >= 32:
            _PROBES.clear()
        _PROBES[key] = _probe(comp, arch)
    return _PROBES[key]


def _probe(comp, arch: str) -> ProbeResult:
    from ..formats.cubin import CubinError
    c = comp.contract
    plan = probe_plan(c)
    options = [f"-arch={arch}", "-dlto", "-rdc=true", "-std=c++17", f"-I{pipelink_include_dir()}",
               *(f"-I{d}" for d in toolchain.cuda_include_dirs()), *c.targets.flags.nvcc_options()]
    try:
        ltoir = toolchain.nvrtc_to_ltoir(plan.source, f"{c.name}_probe.cu", options)
        # the component first, as in the real link (pass_link): its data layout holds for the kernel
        out = toolchain.link_probe([comp.obj.link_input(), toolchain.LinkInput("ltoir", ltoir, f"{c.name}_probe")],
                                   [f"-arch={arch}", "-lto", "-O3"])
    except toolchain.ToolchainError as exc:
        return ProbeResult(None, plan, exc.log or exc.message)
    if marker_symbol(c) not in toolchain.defined_symbols(out.cubin):
        return ProbeResult(None, plan, f"undefined reference to '{marker_symbol(c)}'")
    try:
        sass = toolchain.disassemble(out.cubin)
        usage = usage_of(out.cubin, sass)
    except (CubinError, KeyError) as exc:
        return ProbeResult(None, plan, f"cannot read the probe cubin: {exc}")
    if c.entries and usage.cluster_barrier:
        import dataclasses
        usage = dataclasses.replace(usage, cluster_barrier_entries=entry_barriers(comp, arch, options))
    return ProbeResult(usage, plan, loops=tuple(streaming_loops(sass)))


def entry_barriers(comp, arch: str, options: list[str]) -> tuple[int, ...] | None:
    """The `entries` form: which entries (indexes, contract order) execute the cluster barrier. LTO inlines every
    entry into the probe kernel, where the SASS no longer says whose code an instruction is; so the component is
    linked once more into a probe with one kernel for each entry (`probe_plan(per_entry=True)`), and each kernel's
    section is read on its own. None where that probe does not link or read, or does not say whose the barrier is
    (the link then counts every entry)."""
    c = comp.contract
    plan = probe_plan(c, per_entry=True)
    try:
        ltoir = toolchain.nvrtc_to_ltoir(plan.source, f"{c.name}_entries_probe.cu", options)
        out = toolchain.link_probe([comp.obj.link_input(),
                                    toolchain.LinkInput("ltoir", ltoir, f"{c.name}_entries_probe")],
                                   [f"-arch={arch}", "-lto", "-O3"])
        sections = sass_sections(toolchain.disassemble(out.cubin))
    except toolchain.ToolchainError:
        return None
    kernels = {entry_kernel(i) for i in range(len(c.entries))}
    if not kernels <= sections.keys() or any(sass_cluster_barrier(text) for name, text in sections.items()
                                             if name not in kernels):
        return None  # an entry's kernel missing, or the barrier in a section of no one entry: not told apart
    found = tuple(i for i in range(len(c.entries)) if sass_cluster_barrier(sections[entry_kernel(i)]))
    return found or None  # the whole probe has it: an entry must


def stray_barrier_ids(c: Contract, usage: Usage, assigned: dict[str, int]) -> list[int]:
    """Named-barrier ids the code uses that neither the contract hard-codes nor the probe assigned."""
    return sorted(usage.barrier_ids - set(c.barriers.hardcoded_ids) - set(assigned.values()) - {0})


def compare(c: Contract, obj_path: str, usage: Usage, assigned: dict[str, int], sink: DiagnosticSink) -> None:
    """Each place where the code uses what its contract does not declare, located at the contract
    field that should have declared it, with the object beside it."""
    obj = (Location(file=obj_path),)
    who = f"'{c.name}' ({obj_path})"

    def error(code, message, pointer, hint=None):
        sink.error(code, message, c.at(pointer), hint=hint, related=obj)

    def warning(code, message, pointer, hint=None):
        sink.warning(code, message, c.at(pointer), hint=hint, related=obj)

    if usage.static_smem_bytes:
        error("PL140", f"{who} declares {usage.static_smem_bytes} bytes of __shared__ memory of its own, which "
              f"contract '{c.source.file}' cannot declare: the linker places all shared memory and would not see "
              "these bytes", "/smem")
    per_role = any(r.setmaxnreg is not None for r in c.threads.roles)  # the entry count says nothing then
    if c.max_registers and usage.registers > c.max_registers and not per_role:
        warning("PL141", f"{who} uses {usage.registers} registers per thread alone; contract '{c.source.file}' "
                f"allows {c.max_registers}: capped at that in a link, the code spills", "/registers/max_per_thread")
    stray = stray_barrier_ids(c, usage, assigned)
    if stray:
        error("PL142", f"{who} uses named barrier id{'s' if len(stray) > 1 else ''} {', '.join(map(str, stray))}, "
              f"which contract '{c.source.file}' neither hard-codes (barriers.hardcoded_ids "
              f"{list(c.barriers.hardcoded_ids)}) nor has the linker assign: another component may get "
              f"{'them' if len(stray) > 1 else 'it'}", "/barriers")
    if usage.computed_barrier_ids:
        warning("PL142", f"{who} computes a named-barrier id at run time; contract '{c.source.file}' cannot "
                "say which ids it uses, so nothing checks them", "/barriers",
                hint="use the header's sync_<name>()/arrive_<name>() or a hard-coded literal id")
    if 0 in usage.barrier_ids and not c.threads.uses_syncthreads:
        error("PL143", f"{who} calls __syncthreads (barrier 0), but contract '{c.source.file}' does not set "
              "threads.uses_syncthreads: beside other components it waits for warps that never arrive",
              "/threads")
    if usage.local_bytes:
        warning("PL144", f"{who} uses {usage.local_bytes} bytes of local memory per thread (stack, local arrays "
                f"or spills) even with no register cap, which contract '{c.source.file}' does not show",
                "/registers")
    if usage.callees:
        warning("PL145", f"{who} still calls {', '.join(usage.callees)} after LTO, which contract "
                f"'{c.source.file}' does not show: a call is not free in a fused kernel", c.entry_pointer)


# --- the build's record of the probe ----------------------------------------------------------------------------
# `pipelink build` probes the object it made, for each target, and embeds what the probe found (USAGE_SECTION), so
# the link holds every object against its contract as `check` would, without linking it alone again. A record names
# the contract it was made for and the device code it read: a copy that does not match is not used.

RECORD_VERSION = 3  # 2: cluster_barrier (a record of 1 lacks it: the link probes such an object); 3: which entries


def _fatbin_digest(obj) -> str:
    import hashlib
    return hashlib.sha256(obj.device_fatbin or b"").hexdigest()


def _usage_doc(usage: Usage, assigned: dict[str, int]) -> dict:
    """What a probe found, as JSON: the build's record (by target) and the link's probe cache hold this form."""
    return {"registers": usage.registers, "local_bytes": usage.local_bytes, "static_smem_bytes": usage.static_smem_bytes,
            "barrier_ids": sorted(usage.barrier_ids), "computed_barrier_ids": usage.computed_barrier_ids,
            "callees": list(usage.callees), "cluster_barrier": usage.cluster_barrier,
            "cluster_barrier_entries": None if usage.cluster_barrier_entries is None
            else list(usage.cluster_barrier_entries), "assigned": assigned}


def _usage_from_doc(u: dict) -> tuple[Usage, dict[str, int]]:
    """_usage_doc's value read back; KeyError, TypeError, ValueError or AttributeError for one that is not."""
    usage = Usage(int(u["registers"]), int(u["local_bytes"]), int(u["static_smem_bytes"]),
                  frozenset(int(i) for i in u["barrier_ids"]), bool(u["computed_barrier_ids"]),
                  tuple(str(n) for n in u["callees"]), bool(u["cluster_barrier"]),
                  None if u["cluster_barrier_entries"] is None else tuple(int(i) for i in u["cluster_barrier_entries"]))
    return usage, {str(k): int(v) for k, v in u["assigned"].items()}


def usage_record(c: Contract, obj, results: dict[str, ProbeResult]) -> bytes:
    """The record of the probes of `obj` (by target) for USAGE_SECTION."""
    import json
    archs = {arch: _usage_doc(r.usage, r.plan.barrier_ids) for arch, r in results.items() if r.usage is not None}
    return json.dumps({"usage": RECORD_VERSION, "contract": c.hash, "fatbin": _fatbin_digest(obj), "archs": archs},
                      sort_keys=True).encode()


def recorded_usage(c: Contract, obj, arch: str) -> tuple[Usage, dict[str, int]] | None:
    """(what the code uses, the probe's barrier ids) for `arch` from the object's record, where it has one made for
    this contract and this device code; None otherwise (an object built elsewhere: the link probes it)."""
    from ..core.jsonread import parse
    if obj is None or not obj.embedded_usage:
        return None
    try:  # through the one JSON reader: a forged section nested past its depth is a JSONError, not a RecursionError
        doc = parse(obj.embedded_usage)
        if doc.get("usage") != RECORD_VERSION or doc.get("contract") != c.hash or doc.get("fatbin") != _fatbin_digest(obj):
            return None
        return _usage_from_doc(doc["archs"][arch])
    except (ValueError, KeyError, TypeError, AttributeError):  # damaged or foreign: as if there were none
        return None


_PROBED: dict[str, tuple[Usage, dict[str, int]] | None] = {}  # this process's probes of objects without a record


def usage_for_link(c: Contract, obj, arch: str) -> tuple[Usage, dict[str, int]] | None:
    """What an object's code uses, for the link: its build's record, else (an object built with one's own nvcc) a
    probe of it, kept in this process and in the cache folder (`<root>/probe/`, by its device code, contract, target
    and pipelink's code) so that it is linked alone once. None where it does not link alone (the link says why)."""
    import hashlib
    import json

    from ..core.cache_root import cache_dir, enabled, read_json
    from ..core.model import Component
    recorded = recorded_usage(c, obj, arch)
    if recorded is not None or obj is None:
        return recorded
    from .build_cache import code_hash
    key = hashlib.sha256(json.dumps([_fatbin_digest(obj) if obj.device_fatbin else hashlib.sha256(obj.data).hexdigest(),
                                     c.hash, arch, code_hash()]).encode()).hexdigest()
    if key in _PROBED:
        return _PROBED[key]
    path = cache_dir() / "probe" / key[:2] / f"{key}.json"
    if enabled():
        try:
            doc = read_json(path)  # {"probed": _usage_doc, or null where the object does not link alone}
            found = None if doc["probed"] is None else _usage_from_doc(doc["probed"])
            _PROBED[key] = found
            return found
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass  # not probed yet, or a damaged entry: probe again
    try:
        result = probe(Component(c, obj), arch)
    except toolchain.ToolchainError:  # no nvdisasm: nothing to hold the object to here (`check` says the same)
        return None
    found = (result.usage, result.plan.barrier_ids) if result.usage is not None else None
    _PROBED[key] = found
    if enabled():
        import os
        import tempfile
        doc = {"probed": None if found is None else _usage_doc(*found)}
        try:  # atomic, and an unwritable cache is no error
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".probe-", suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f)
            os.replace(tmp, path)
        except OSError:
            pass
    return found
