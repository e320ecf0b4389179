"""Emit: the manifest (what a launcher needs) and the link map (a plain table anyone can grep)."""
from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass

from typing import TYPE_CHECKING

from .. import __version__
from ..core.expr import Expr, parse, python_ast
from .allocate import HOLD_SIZES_AT_REGISTERS, Allocation, held_words, holds_sizes, task_groups
from .calls import AFTER_EVENT, layered_events
from .events import task_invariant
from ..runtime.manifest import (IMPLICIT_PARAMS, STREAM_K_PARAMS, WORKSPACE, StreamKSpec, ComponentRecord, EventRecord, RoleRecord, Manifest, ParamSpec, Resources,
                                WireRecord, WorkspaceSpec)
from ..runtime.tensormap import TensorMapDecl
from .resolve import Resolved

if TYPE_CHECKING:
    from ..formats.cubin import KernelInfo


def substitute(e: Expr, values: dict[str, int]) -> str:
    """The expression with link-time names replaced by their values: `ceil_div(M, TILE_M)` -> `ceil_div(M, 32)`."""
    class _Sub(ast.NodeTransformer):
        def visit_Name(self, node):
            return ast.copy_location(ast.Constant(values[node.id]), node) if node.id in values else node
    return ast.unparse(_Sub().visit(python_ast(e.text.strip() if isinstance(e.text, str) else str(e))))


def manifest(r: Resolved, a: Allocation, arch: str, cubin: bytes, kernel_info: KernelInfo | None = None) -> Manifest:
    persistent = r.schedule == "persistent"
    params = tuple(_param_spec(p, r.geometry) for p in r.params)
    tiles = tuple(substitute(e, r.geometry) for e in r.tiles.grid)
    tasks, ring_slots, workspace = {}, {}, None
    if persistent:  # every task of every component; the event tensors, sized at launch; the implicit parameters
        plan = r.events
        layers = lambda name: f"({r.calls.layers_c()}) * " if r.calls and r.calls.layered(name) else ""  # noqa: E731
        tasks = {name: layers(name) + " * ".join(f"({substitute(e, r.geometry)})"
                                                 for e in r.component(name).contract.geometry.tile_sequence.grid)
                 for name in plan.order}
        if r.loader is not None:  # a task that fills no slot of the ring, or a negative count, hangs its CTA
            ring_slots = {name: substitute(r.component(name).contract.loader.slots, r.geometry)
                          for name in plan.order if r.component(name).contract.loader is not None}
        tiles = (" + ".join(tasks.values()),)
        params += tuple(ParamSpec(p.name, p.dtype, p.pointer, False, p.kind) for p in IMPLICIT_PARAMS)
        per_layer = layered_events(r.calls, r.events)  # one copy of the counters per layer: a leading extent
        workspace = WorkspaceSpec(
            WORKSPACE.header_words, WORKSPACE.task_counter_word, r.debug_events,
            tuple(EventRecord(t.name, ((str(r.calls.layers_c()),) if t.name in per_layer else ())
                              + tuple(substitute(e, r.geometry) for e in t.shape),
                              tuple(f"{n.component} {n.map.text}" for n in t.notifiers),
                              tuple(f"{w.component} {w.map.text}" for w in t.waiters))
                  for t in plan.tensors.values()))
    stream_k = None
    if r.stream_k is not None:
        stream_k = StreamKSpec(substitute(r.stream_k.blocks, r.geometry), r.stream_k.slot_floats())
        params += tuple(ParamSpec(p.name, p.dtype, p.pointer, False, p.kind) for p in STREAM_K_PARAMS)
    resources = None if kernel_info is None else Resources(
        kernel_info.registers, kernel_info.frame_bytes, kernel_info.static_smem_bytes, kernel_info.num_barriers)
    return Manifest(
        kernel=r.name, block=(a.block_threads, 1, 1), dynamic_smem=a.smem_bytes, params=params, tiles=tiles,
        pipelink=__version__, target=arch, schedule=r.schedule, tile_order=r.tiles.order,
        distribution=r.tiles.distribution, geometry=dict(sorted(r.geometry.items())),
        components=tuple(ComponentRecord(c.name, c.contract.version, c.contract.hash[:16], c.obj.path if c.obj else None)
                         for c in r.components),
        wires=tuple(WireRecord(f"{w.producer}.{w.out_port.name}", f"{w.consumer}.{w.in_port.name}", w.kind, w.explicit)
                    for w in r.wires),
        cubin_sha256=hashlib.sha256(cubin).hexdigest(), specialized=dict(sorted((r.specialize or {}).items())),
        # Every CTA of a role-structured kernel walks its tiles alone (no events): as many CTAs as give each
        # the same number of tiles, so no last round runs on a few CTAs while the rest idle.
        # A split reduction instead: the launcher plans the split per shape (streamk.py).
        grid_policy="stream_k" if r.stream_k is not None else "balanced" if r.roles is not None else None,
        stream_k=stream_k, dependent_launch=r.dependent_launch, distributed=r.distributed is not None,
        tasks=tasks, ring_slots=ring_slots, dispatch=r.dispatch if persistent else None, workspace=workspace, resources=resources,
        profile_tasks=r.profile_tasks, cluster=r.cluster, cluster_tiles=_cluster_tiles(r),
        roles=tuple(RoleRecord(g.name, (g.begin, g.end), g.instances, tuple(g.members), g.registers,
                               g.registers_how.startswith("setmaxnreg")) for g in group_rows(r, a)))


def _cluster_tiles(r: Resolved) -> dict[str, str]:
    """Each component (call) that declares the cluster -> the tile count it walks, over the kernel's integer
    parameters: the launcher refuses a launch that makes it other than whole clusters (clusters.py)."""
    from .clusters import cluster_tiles
    return {name: " * ".join(f"({substitute(e, r.geometry)})" for e in grid) or "1"
            for name, grid in cluster_tiles(r).items()}


def _param_spec(p, geometry: dict[str, int]) -> ParamSpec:
    tmap = None
    if p.tensor_map is not None:  # the launcher encodes it: extents over the shape parameters, box fixed
        t = p.tensor_map
        tmap = TensorMapDecl(tuple(parse(substitute(e, geometry)) for e in t.shape),
                             tuple(e.evaluate(geometry) for e in t.box), t.swizzle, t.oob_fill)
    # the launcher checks the buffer passed holds each of these and has this alignment (buffers.py)
    shapes = tuple(tuple(substitute(e, geometry) for e in shape) for shape in (p.shapes or ()))
    return ParamSpec(p.name, p.dtype, p.pointer, p.const, None, tmap, shapes, p.align or None)


# What the link can say about a count read per task from a device tensor: nothing at link time.
DEVICE_COUNT_NOTE = ("count read from the device: not checked at link time; --debug-events reports a wait that "
                     "is never met")


def _covered(ranges: list[tuple[int, int]]) -> int:
    """Bytes in the union of [begin, end) ranges."""
    total, reach = 0, 0
    for begin, end in sorted(ranges):
        if end > reach:
            total += end - max(begin, reach)
            reach = end
    return total


def _residency_rows(r: Resolved, a: Allocation, arch: str, kernel_info: KernelInfo | None) -> list[str]:
    """Blocks per SM and what limits them: every task of the kernel runs with the block's joint shape (its
    threads, the whole arena and one register budget), so one component's large scratch buffers
    can cut the residency of all the others."""
    from ..core.targets import KB, SMEM_RESERVED_PER_BLOCK, l1_left, residency, target
    t = target(arch)
    registers = kernel_info.registers if kernel_info else a.registers
    if t is None or not registers:
        return []
    smem = a.smem_bytes + (kernel_info.static_smem_bytes if kernel_info else 0)
    blocks, limits = residency(t, a.block_threads, smem, registers)
    limiting = [k for k, v in limits.items() if v == blocks]
    out = ["", f"## residency ({arch}, one SM)",
           f"  {blocks} block{'s' if blocks != 1 else ''} of {a.block_threads} threads: {blocks * a.block_warps} "
           f"of {t.max_warps_per_sm} warps; limited by {' and '.join(limiting)}",
           f"  shared memory {smem} + {SMEM_RESERVED_PER_BLOCK} B per block -> {limits['shared memory']}; "
           f"registers {registers} per thread -> {limits['registers']}; warps -> {limits['warps']}"]
    split = l1_left(t, blocks, smem)
    if split is not None:  # loads into registers hold their bytes in flight in what shared memory leaves of L1
        cap, l1 = split
        out.append(f"  L1 data cache {l1 // KB} KB: {t.unified_l1 // KB} KB unified less {cap // KB} KB configured as "
                   f"shared memory for {blocks} x ({smem} + {SMEM_RESERVED_PER_BLOCK}) B")
    # whose buffers set the arena's size: it limits the blocks, or takes L1 from every component's loads
    if "shared memory" in limiting or (split is not None and split[1] < t.unified_l1 // 2):
        spans = {}  # owner -> the byte ranges of the arena its items take (time-shared ones overlap)
        for p in a.smem:
            key = p.item.key
            owner = key.split(" ", 1)[1].split(".", 1)[0] if " " in key else key
            if key in ("buffer pl_glue.ring", "mbarrier pl_glue.ring_bars") and r.loader is not None:
                owner = f"the loader ring ({r.loader.slots} slots of {r.loader.slot_bytes} B: loader_slots)"
            elif owner == "pl_glue":  # the glue's own flags sit at the top of any arena
                continue
            spans.setdefault(owner, []).append((p.offset, p.offset + p.item.size))
        held = {owner: _covered(ranges) for owner, ranges in spans.items()}  # the most is what to shrink
        if held:
            most = max(held.values())
            owners = [o for o in held if held[o] == most]
            each = " each" if len(owners) > 1 else ""
            out.append(f"  the arena's size is set by {' and '.join(owners)}: {most} of its {a.smem_bytes} B{each}")
    if holds_sizes(r):  # the glue's own register footprint, and why
        hungry = [c.name for c in r.components if (c.contract.max_registers or 0) >= HOLD_SIZES_AT_REGISTERS]
        out.append(f"  launch sizes (task counts, event extents and bases) read from shared memory (pl_glue.flags, "
                   f"{held_words(r)} words), not kept in registers: {', '.join(hungry)} asks for >= "
                   f"{HOLD_SIZES_AT_REGISTERS} registers a thread")
    return out


def link_map(r: Resolved, a: Allocation, arch: str, kernel_info: KernelInfo | None = None) -> str:
    out = [f"# pipelink link map: kernel {r.name}, target {arch}, schedule {r.schedule}",
           f"# block {a.block_threads} threads ({a.block_warps} warps), dynamic smem {a.smem_bytes} bytes"
           + (f", registers <= {a.registers}" if a.registers else ""), ""]
    out += ["## shared memory", f"{'offset':>8} {'bytes':>8} {'align':>5}  {'lifetime':<14} item"]
    readers = port_readers(r)
    for p in a.smem:
        also = readers.get(p.item.key)
        extra = f"  (read as {', '.join(also)})" if also else ""
        out.append(f"{p.offset:>8} {p.item.size:>8} {p.item.align:>5}  {p.item.lifetime.describe():<14} "
                   f"{p.item.key}{extra}")
    out += ["", "## named barriers", f"{'id':>4}  owner"]
    for bid, owner in barrier_rows(r, a):
        out.append(f"{bid:>4}  {owner}")
    out += ["", "## warps", f"{'warps':>7}  owner"]
    for w in warp_rows(r, a):
        roles = ", ".join(f"{name} {lo}-{hi}" + (f" ({n} instances)" if n > 1 else "") for name, lo, hi, n in w.roles)
        out.append(f"{w.begin:>3}-{w.end:<3}  {w.component} ({roles})" + (f", step {w.step}" if w.step is not None
                                                                          else ""))
    if r.roles is not None:
        out += ["", "## role groups (warps, instances, registers per thread; a fragment stays on its group's warps)"]
        for g in group_rows(r, a):
            inst = f", {g.instances} instances of {g.warps} warps taking tiles in turn" if g.instances > 1 else ""
            out.append(f"  {g.begin:>3}-{g.end:<3} {g.name}: {', '.join(g.members)}; registers {g.registers_how}{inst}")
        for f in r.roles.fragments:
            out.append(f"  fragment {f.producer}.{f.out_port} -> {f.consumer}.{f.in_port}: {f.elements} x {f.ctype} "
                       f"per thread of {f.producer}.{f.role}")
        copies = {c: n for c, n in a.copies.items() if n > 1}
        if copies:
            out.append("  copies of buffers and barriers, one per instance: "
                       + ", ".join(f"{c} x{n}" for c, n in copies.items()))
        pool = sum(32 * g.warps * g.instances * a.group_registers[g.name] for g in r.roles.groups)
        out.append(f"  register pool {pool} of 65536 at one block per SM; __launch_bounds__({a.block_threads}, 1)"
                   + (f"; linked kernel uses {kernel_info.registers} at entry" if kernel_info else ""))
    out += ["", "## registers per thread"]
    for c in r.components:
        out.append(f"  {c.name}: {c.contract.max_registers or 'any'}")
    out.append(f"  kernel budget: {a.registers or 'none'}" + (f"; linked kernel uses {kernel_info.registers}"
                                                              if kernel_info else ""))
    out += _residency_rows(r, a, arch, kernel_info)
    out += ["", "## wires"]
    for w in r.wires:
        shape = "x".join(map(str, w.tile))
        out.append(f"  {w}  {w.kind}  {w.out_port.dtype}[{shape}] x{w.stages} ({'explicit' if w.explicit else 'auto'})")
    out += ["", "## geometry"]
    for name, value in sorted(r.geometry.items()):
        providers = [c.name for c in r.components if name in c.contract.geometry.provides]
        consumers = [f"{c.name} {c.contract.geometry.consumes[name].describe()}" for c in r.components
                     if name in c.contract.geometry.consumes]
        src = (f"provided by {', '.join(providers)}" if providers else "set by the pipeline"
               if name in r.geometry_set else "default")
        out.append(f"  {name} = {value}  ({src}" + (f"; consumed by {'; '.join(consumers)}" if consumers else "") + ")")
    out += ["", "## kernel parameters"]
    for i, p in enumerate(r.params):
        users = ", ".join(p.users) or ("the layer loop: how many layers run" if r.calls is not None and
                                       p.name == r.calls.layers else "the glue")
        out.append(f"  {i}  {p.c_decl()}  ({users})")
    if r.schedule == "persistent":
        deal = f", deal {r.deal}" if r.dispatch == "static" and r.deal != "restart" else ""
        out += ["", f"## tasks (dispatch {r.dispatch}{deal}, in this order)"]
        if r.loader is not None:
            ahead = [n for n in r.loader.components if r.component(n).contract.loader.ahead] if r.loader.ahead else []
            out.append(f"  loader warp: a ring of {r.loader.slots} slots of {r.loader.slot_bytes} B, filled for "
                       f"{', '.join(r.loader.components)}"
                       + (f"; at most {r.loader.copies_in_flight} slots' copies in flight (loader_in_flight)"
                          if r.loader.copies_in_flight < r.loader.slots else "")
                       + (f"; at most {r.loader.copies_in_flight_behind} where a call refills the slots of the call "
                          "before (loader_in_flight_behind)"
                          + (", until the call's first slot is released (loader_in_flight_behind_until)"
                             if r.loader.paces_until_release else "")
                          if r.loader.paces_refills else "")
                       + ("; copies hint L2 evict_first (loader_l2)" if r.loader.evict_first else "")
                       + (f"; L2 asked for up to {r.loader.ahead} tasks on while the ring is full"
                          + (" of an earlier call's slots (load_ahead_when call_behind)" if r.loader.ahead_behind else "")
                          + (f", each request after a pause of {r.loader.ahead_gap_ns} ns (load_ahead_gap_ns)"
                             if r.loader.ahead_gap_ns else "")
                          + f" (load_ahead) for {', '.join(ahead)}" if ahead else ""))
        calls = r.calls
        for name in r.events.order:
            seq = r.component(name).contract.geometry.tile_sequence
            inner = "  "
            if calls is not None and calls.per_layer and name == calls.per_layer[0]:
                out.append(f"  layer loop, {calls.layers_c()} times:")
            if calls is not None and calls.layered(name):
                inner = "    "
            line = f"{inner}{name}: grid [{', '.join(substitute(e, r.geometry) for e in seq.grid)}] {seq.order}"
            groups = task_groups(r, a, name)
            if groups > 1:
                line += (f"; {groups} tasks a block at once, one per group of "
                         f"{r.component(name).contract.threads.warps} warps (threads.concurrent)")
            if calls is not None:
                code = r.component(name).code.name
                stacked = [p for (c, p) in calls.stacked if c == name]
                line += (f" (calls {code}" + (f"; per layer: {', '.join(stacked)}" if stacked else "")
                         + "".join(f"; after {p} of the layer before" for p in calls.previous.get(name, ())) + ")")
            out.append(line)
        out += ["", "## events (64-bit counters, zero at launch)"]
        per_layer = layered_events(r.calls, r.events)
        for t in r.events.tensors.values():
            edges = [e for e in event_edges(r) if e.tensor == t.name]
            notes = "; ".join(f"{e.component} notifies {e.map}" for e in edges if e.kind == "notify")
            waits = "; ".join(f"{e.component} waits {e.map} for {e.count}" for e in edges if e.kind == "wait")
            copies = f", one copy per layer ({r.calls.layers_c()})" if t.name in per_layer else ""
            if calls is not None:  # the next layer's wait on a call (after_previous_layer) is the glue's own
                waits = "; ".join(filter(None, [waits] + [
                    f"{n} of the next layer waits for all of it" for n, prevs in calls.previous.items()
                    for prev in prevs if AFTER_EVENT.format(prev) == t.name]))
            out.append(f"  {t.name}[{event_shape(r, t)}]{copies}: {notes}" + (f"; {waits}" if waits else ""))
            out += [f"    {w.component} waits {w.map.text} for {w.count_term.text}: {DEVICE_COUNT_NOTE}"
                    for w in t.waiters if w.count_term is not None]
    else:
        out += ["", "## tiles",
                f"  grid [{', '.join(substitute(e, r.geometry) for e in r.tiles.grid)}] {r.tiles.order}, "
                f"{r.tiles.distribution} (from {r.tiles_owner})"]
        out += [f"  inner loop of {name}: [{', '.join(substitute(e, r.geometry) for e in r.inner_grid(name))}] row_major "
                "in each tile" for name in r.order if r.inner_grid(name)]
        if r.stream_k is not None:
            sk = r.stream_k
            out.append(f"  reduction {substitute(sk.blocks, r.geometry)} blocks per tile into {sk.component}."
                       f"{sk.fragment.out_port}, split by the launcher per shape (stream-K for one row of tiles, "
                       f"split-K in 2-4 pieces for several, else whole); partial slots of {4 * sk.slot_floats()} B, "
                       f"added on {sk.group.name}'s warps before {sk.fragment.consumer}")
    if kernel_info is not None:
        out += ["", "## linked kernel (read from the cubin)",
                f"  registers {kernel_info.registers}, frame {kernel_info.frame_bytes} B, stack "
                f"{kernel_info.max_stack_bytes} B, static smem {kernel_info.static_smem_bytes} B, named barriers "
                f"{kernel_info.num_barriers}, subroutines {', '.join(kernel_info.subroutines) or 'none'}"]
    return "\n".join(out) + "\n"


# --- the facts the text map and the picture (picture.py) both show: one function each ----------------

BARRIER_USE = {"sequential": "between steps", "warp_specialized": "once, after ring setup",
               "persistent": "claim, waits, end of each task"}


def port_readers(r: Resolved) -> dict[str, list[str]]:
    """Arena item key -> the input ports that read a port's bytes in place (a relayout reads its own copy)."""
    readers: dict[str, list[str]] = {}
    for w in r.wires:
        if w.kind != "relayout":
            readers.setdefault(f"port {w.producer}.{w.out_port.name}", []).append(f"{w.consumer}.{w.in_port.name}")
    return readers


def barrier_rows(r: Resolved, a: Allocation) -> list[tuple[int, str]]:
    """(named barrier id, its owner), id 0 first."""
    rows = [(0, f"__syncthreads (glue: {BARRIER_USE.get(r.schedule, r.schedule)})")]
    rows += [(bid, f"{comp} (hard-coded)") for bid, comp in sorted(a.hardcoded_ids.items())]
    for (comp, name), bid in sorted(a.barrier_id.items(), key=lambda kv: kv[1]):
        n = a.copies.get(comp, 1)  # a component with a copy per instance has consecutive ids
        rows += [(bid + k, f"{comp}.{name}" + (f" (copy {k} of {n})" if n > 1 else "")) for k in range(n)]
    from .allocate import group_barrier_ids
    for comp, ids in group_barrier_ids(r, a).items():
        rows += [(bid, f"{comp} task group {bid - 1} of {len(ids)} (glue; free while the groups run)") for bid in ids]
    return sorted(rows, key=lambda row: row[0])


@dataclass(frozen=True)
class WarpRow:
    component: str
    begin: int
    end: int                                   # inclusive
    roles: list[tuple[str, int, int, int]]     # (role, first warp, last warp, instances)
    step: int | None                           # sequential schedule only


def warp_rows(r: Resolved, a: Allocation) -> list[WarpRow]:
    """Each component's warps, role by role; a role's span counts every instance of its group."""
    rows = []
    for c in r.components:
        spans = []
        for role in c.contract.threads.roles:
            n = r.roles.group_of(c.name, role.name).instances if r.roles is not None else 1
            first = a.role_begin[(c.name, role.name)]
            spans.append((role.name, first, first + role.warps * n - 1, n))
        rows.append(WarpRow(c.name, a.warp_begin[c.name], max(hi for _, _, hi, _ in spans), spans,
                            a.steps[c.name] if r.schedule == "sequential" else None))
    if r.loader is not None:  # the glue's loader warp, after the compute warps
        last = a.block_warps - 1
        rows.append(WarpRow("pl_glue", last, last, [(f"loader for {', '.join(r.loader.components)}", last, last, 1)],
                            None))
    return rows


@dataclass(frozen=True)
class GroupRow:
    name: str
    begin: int
    end: int            # inclusive, every instance
    warps: int          # per instance
    instances: int
    members: list[str]  # component.role
    registers: int
    registers_how: str  # "setmaxnreg inc 168 -> 232" or "168 (entry)"


def group_rows(r: Resolved, a: Allocation) -> list[GroupRow]:
    """A role-structured kernel's role groups: their warps and registers per thread."""
    rows = []
    for g in r.roles.groups if r.roles is not None else ():
        begin, regs = a.group_begin[g.name], a.group_registers[g.name]
        how = (f"setmaxnreg {'inc' if regs > a.entry_registers else 'dec'} {a.entry_registers} -> {regs}"
               if g.setmaxnreg is not None and regs != a.entry_registers else f"{regs} (entry)")
        rows.append(GroupRow(g.name, begin, begin + g.warps * g.instances - 1, g.warps, g.instances,
                             [f"{m.component}.{m.role}" for m in g.members], regs, how))
    return rows


@dataclass(frozen=True)
class EventEdge:
    tensor: str
    component: str
    kind: str          # "notify" | "wait"
    map: str           # the index map, e.g. "ij->i"
    count: str | None  # waits: the count waited for, with how it is known


def event_shape(r: Resolved, t) -> str:
    return ", ".join(substitute(e, r.geometry) for e in t.shape)


def event_edges(r: Resolved) -> list[EventEdge]:
    """A persistent kernel's notify and wait edges, tensor by tensor (none for other schedules)."""
    edges = []
    for t in r.events.tensors.values() if r.schedule == "persistent" else ():
        edges += [EventEdge(t.name, n.component, "notify", n.map.text, None) for n in t.notifiers]
        edges += [EventEdge(t.name, w.component, "wait", w.map.text,
                            _wait_count(t, w, r.geometry) + (" (once per CTA)" if task_invariant(w) else "")
                            + (" in its entry, element by element" if w.in_entry else ""))
                  for w in t.waiters]
    return edges


def _wait_count(t, w, geometry: dict) -> str:
    if w.count_term is not None:  # read per task from a device tensor
        return f"{w.count_term.text} (read on the device)"
    if w.count is not None:
        return str(w.count)
    return t.count_c(lambda n: str(geometry.get(n, n)))
