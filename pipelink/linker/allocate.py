"""Allocate jointly: the dynamic-smem arena, named-barrier ids, mbarrier slots, warp ranges and
the register budget. Pure and deterministic: the same resolved pipeline gives the same layout.

Shared memory is one arena. Each item (a component's buffer, a port's storage, an mbarrier) has a
lifetime; items whose lifetimes never overlap may share bytes. In the sequential schedule the
components run one after another on the same warps with a block barrier between steps, so a
step's scratch and a port read only by earlier steps can reuse each other's bytes. In the
warp-specialized schedule the components run at once: only scratch buffers of different phases of
one component may share.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..core.checks import CAP_HINT, POOL_HINT, Need, cap_over_role, misaligned_roles, register_pool
from ..core.diagnostics import DiagnosticSink
from ..core.model import DTYPE_BYTES
from ..core.targets import REG_ALLOC_UNIT, TARGETS, WARP_ALLOC_GRANULARITY, residency
from . import event_glue
from .resolve import Resolved

ARENA_ALIGN = 128
PORT_ALIGN = 128  # a port's storage without a declared alignment


@dataclass(frozen=True)
class Lifetime:
    steps: frozenset[int] | None  # None: the whole kernel
    owner: str | None = None      # scratch only: the component whose phases ...
    phase: str | None = None      # ... exclude each other

    def overlaps(self, other: "Lifetime") -> bool:
        if self.steps is None or other.steps is None:
            return True
        if not self.steps & other.steps:
            return False
        if self.owner and self.owner == other.owner and self.phase and other.phase:
            return self.phase == other.phase
        return True

    def describe(self) -> str:
        if self.steps is None:
            return "always"
        span = f"step {min(self.steps)}" if len(self.steps) == 1 else f"steps {min(self.steps)}-{max(self.steps)}"
        return span + (f" phase {self.phase}" if self.phase else "")


@dataclass(frozen=True)
class SmemItem:
    key: str          # e.g. "buffer block_rowsum.reduce_temp", "port tile_load.tile", "ring ring_load.tiles full"
    kind: str         # "buffer" | "port" | "mbarrier"
    owner: str
    size: int
    align: int
    lifetime: Lifetime


@dataclass(frozen=True)
class Placed:
    item: SmemItem
    offset: int

    @property
    def end(self) -> int:
        return self.offset + self.item.size


@dataclass
class Allocation:
    smem: list[Placed]
    smem_bytes: int
    buffer_offset: dict[tuple[str, str], int] = field(default_factory=dict)
    port_offset: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)  # (offset, stage stride)
    mbar_offset: dict[tuple[str, str], int] = field(default_factory=dict)
    ring_mbars: dict[str, tuple[int, int]] = field(default_factory=dict)               # wire -> (full, empty)
    barrier_id: dict[tuple[str, str], int] = field(default_factory=dict)
    hardcoded_ids: dict[int, str] = field(default_factory=dict)
    warp_begin: dict[str, int] = field(default_factory=dict)
    role_begin: dict[tuple[str, str], int] = field(default_factory=dict)
    block_warps: int = 0
    registers: int | None = None
    steps: dict[str, int] = field(default_factory=dict)  # component -> its step (sequential schedule)
    group_begin: dict[str, int] = field(default_factory=dict)        # role group -> first warp (instance 0)
    copies: dict[str, int] = field(default_factory=dict)             # component -> copies of its resources
    turn_mbar: dict[str, int] = field(default_factory=dict)          # instanced role group -> its turn mbarriers
    smem_stride: dict[tuple[str, str], int] = field(default_factory=dict)  # (component, buffer/mbarrier) -> copy stride
    group_registers: dict[str, int] = field(default_factory=dict)    # role group -> registers per thread
    entry_registers: int | None = None   # role-structured: what each thread gets at entry (launch bounds)
    arena_align: int = ARENA_ALIGN       # the arena's base alignment the buffers need

    @property
    def block_threads(self) -> int:
        return self.block_warps * 32


def allocate(r: Resolved, arch: str, sink: DiagnosticSink) -> Allocation | None:
    held = held_words(r)  # over every call: each call's sizes are held apart
    firsts = {}
    for c in r.components:
        firsts.setdefault(c.code.name, c.name)
    if len(firsts) < len(r.components):
        # Calls of one component run its one code: they share its buffers, barrier ids and warps, placed
        # once (a persistent CTA runs one task at a time, so one placement serves every call).
        keep = set(firsts.values())
        alloc = _allocate(replace(r, components=[c for c in r.components if c.name in keep],
                                  order=[n for n in r.order if n in keep]), arch, sink, held)
        if alloc is not None:
            _alias_calls(alloc, {c.name: firsts[c.code.name] for c in r.components if c.name not in keep})
        return alloc
    return _allocate(r, arch, sink, held)


def _alias_calls(alloc: Allocation, first_of: dict[str, str]) -> None:
    """Every decision about a component's first call holds for its other calls."""
    for field_name in ("buffer_offset", "port_offset", "mbar_offset", "barrier_id", "role_begin", "smem_stride"):
        table = getattr(alloc, field_name)
        for (comp, what), value in list(table.items()):
            for call, first in first_of.items():
                if first == comp:
                    table[(call, what)] = value
    for field_name in ("warp_begin", "copies", "steps"):
        table = getattr(alloc, field_name)
        for call, first in first_of.items():
            if first in table:
                table[call] = table[first]


def _allocate(r: Resolved, arch: str, sink: DiagnosticSink, held_words: int = 0) -> Allocation | None:
    target = TARGETS[arch]
    if DEPENDENT_LAUNCH in target_needs(r) and not DEPENDENT_LAUNCH.has(target):
        sink.error("PL165", f"the pipeline asks for programmatic dependent launch, which {arch} does not have",
                   hint="griddepcontrol is sm_90's: link for sm_90 or later, or drop dependent_launch")
        return None
    if not _ring_mbarriers_fit(r, arch, sink):
        return None
    steps = _steps(r)
    copies = {c.name: (r.roles.copies(c.contract) if r.roles is not None else 1) for c in r.components}
    items, strides = _smem_items(r, steps, copies, held_words)
    placed = pack(items)
    total = _round_up(max((p.end for p in placed), default=0), ARENA_ALIGN)
    alloc = Allocation(placed, total, steps=steps, copies=copies, smem_stride=strides)
    for p in placed:
        kind, rest = p.item.key.split(" ", 1)
        if kind == "buffer":
            comp, name = rest.split(".", 1)
            alloc.buffer_offset[(comp, name)] = p.offset
        elif kind == "mbarrier" and rest.startswith("pl_glue.turn_"):
            alloc.turn_mbar[rest[len("pl_glue.turn_"):]] = p.offset
        elif kind == "mbarrier":
            comp, name = rest.split(".", 1)
            alloc.mbar_offset[(comp, name)] = p.offset
    _ports(r, alloc)
    if total > target.smem_per_block:
        top = sorted(placed, key=lambda p: -p.item.size)[:3]
        owner = next((c for c in r.components if c.name == top[0].item.owner), r.components[0])
        ring = top[0].item.key == "buffer pl_glue.ring" and r.loader is not None and r.loader.slots_at is not None
        sink.error("PL042", f"the fused kernel needs {total} bytes of shared memory after sharing every byte it may; "
                   f"{arch} allows {target.smem_per_block}. Largest: "
                   + ", ".join(f"{p.item.key} {p.item.size} B" for p in top),
                   r.loader.slots_at if ring else owner.contract.at("/smem"),  # the largest is the pipeline's ring
                   hint=f"fewer loader_slots ({r.loader.slots} slots of {r.loader.slot_bytes} B)" if ring else None)
    alloc.arena_align = max([ARENA_ALIGN] + [p.item.align for p in placed])
    _barrier_ids(r, alloc, target.named_barriers, sink)
    if r.roles is not None:
        _role_warps(r, alloc, sink)
    else:
        _warps(r, alloc, sink)
    if alloc.block_threads > target.max_threads_per_block:
        sink.error("PL043", f"the fused block needs {alloc.block_threads} threads; {arch} allows "
                   f"{target.max_threads_per_block}", r.components[0].contract.at("/threads"))
    if r.roles is not None:
        _role_registers(r, alloc, target, sink)
    else:
        _registers(r, alloc, target, sink)
    return None if sink.has_errors else alloc


def _sm90(t) -> bool:
    return t.capability >= 90


DEPENDENT_LAUNCH = Need("programmatic dependent launch (griddepcontrol)", _sm90)
RINGS = Need("the warp-specialized schedule's rings of mbarriers (fence.mbarrier_init, mbarrier.try_wait)", _sm90)


def target_needs(r: Resolved) -> list[Need]:
    """What the resolved pipeline (its schedule, its settings, the link's options) asks of the target beyond what its
    contracts declare, each refused here for a target without it: dependent launch (PL165) and a warp-specialized
    schedule's wires (PL205), sm_90 and later. The loader ring comes with a load entry, which its contract declares
    (checks.features). The target unless told one has these too where a target the components share has them
    (checks.default_target)."""
    asked = ((DEPENDENT_LAUNCH, r.dependent_launch), (RINGS, r.schedule == "warp_specialized" and bool(r.wires)))
    return [need for need, on in asked if on]


def _ring_mbarriers_fit(r: Resolved, arch: str, sink: DiagnosticSink) -> bool:
    """A warp-specialized wire is a ring of full and empty mbarriers, which the glue sets up with
    fence.mbarrier_init and waits on with mbarrier.try_wait: sm_90 and later (ptxas refuses both below). The
    mbarriers a contract declares itself (its own, a role's instances, a load entry) are refused by check (PL205)."""
    if RINGS not in target_needs(r) or RINGS.has(TARGETS[arch]):
        return True
    for w in r.wires:
        prod, cons = r.component(w.producer).contract, r.component(w.consumer).contract
        sink.error("PL205", f"wire {w} is a ring of mbarriers in the warp-specialized schedule; the glue sets them up "
                   f"with fence.mbarrier_init and waits with mbarrier.try_wait, which {arch} does not have (sm_90 "
                   "and later have them)", prod.at(w.out_port.pointer_path), related=(cons.at(w.in_port.pointer_path),),
                   hint="link for sm_90 or later (--arch, a target every contract lists), or use a schedule "
                        "without rings (sequential)")
    return False


def _steps(r: Resolved) -> dict[str, int]:
    """Sequential: component k of the topological order runs at step 2k+1 (2k is for copies into it).
    Warp-specialized: everything runs at once, step 0."""
    if r.schedule == "warp_specialized":
        return {c.name: 0 for c in r.components}
    return {name: 2 * k + 1 for k, name in enumerate(r.order)}


def _smem_items(r: Resolved, steps: dict[str, int], copies: dict[str, int], held_words: int = 0):
    """Every item of the arena; a component with several copies (one per instance of its role) gets
    each buffer and mbarrier array that many times, `stride` bytes apart."""
    ws = r.schedule == "warp_specialized"
    items, strides = [], {}
    for c in r.components:
        n = copies[c.name]
        for b in c.contract.buffers:
            size = b.bytes.evaluate(r.geometry)
            strides[(c.name, b.name)] = _round_up(size, b.align) if n > 1 else 0
            life = (Lifetime(frozenset({steps[c.name]}), c.name, b.phase) if b.lifetime == "scratch"
                    else Lifetime(None))
            items.append(SmemItem(f"buffer {c.name}.{b.name}", "buffer", c.name,
                                  size + (n - 1) * strides[(c.name, b.name)], b.align, life))
        for m in c.contract.barriers.mbarriers:
            strides[(c.name, m.name)] = 8 * m.count if n > 1 else 0
            items.append(SmemItem(f"mbarrier {c.name}.{m.name}", "mbarrier", c.name, 8 * m.count * n, 8,
                                  Lifetime(None)))
    readers: dict[tuple[str, str], set[int]] = {}
    copies = set()
    for w in r.wires:
        key = (w.producer, w.out_port.name)
        if w.kind == "relayout":
            readers.setdefault(key, set()).add(steps[w.consumer] - 1)
            copies.add(w)
        else:
            readers.setdefault(key, set()).add(steps[w.consumer])
    # A consumer reading the producer's bytes (zero-copy, ring) gets the alignment it declares too.
    align = {}
    for w in r.wires:
        if w.kind != "relayout":
            key = (w.producer, w.out_port.name)
            align[key] = max(align.get(key, PORT_ALIGN), w.in_port.align or 0)
    for c in r.components:
        for p in c.contract.ports:
            if p.space != "smem" or p.direction != "out":
                continue
            size = _port_bytes(p, r.geometry)
            span = {steps[c.name]} | readers.get((c.name, p.name), set())
            life = Lifetime(None) if ws else Lifetime(frozenset(range(min(span), max(span) + 1)))
            items.append(SmemItem(f"port {c.name}.{p.name}", "port", c.name, size,
                                  max(align.get((c.name, p.name), PORT_ALIGN), p.align or 0), life))
    for w in sorted(copies, key=str):  # the consumer's own copy of a re-laid-out tile
        size = _port_bytes(w.in_port, r.geometry)
        s = steps[w.consumer]
        items.append(SmemItem(f"port {w.consumer}.{w.in_port.name}", "port", w.consumer, size,
                              max(PORT_ALIGN, w.in_port.align or 0), Lifetime(frozenset({s - 1, s}))))
    if r.schedule == "persistent":  # the glue's own words: the wait verdict, the claimed task, the held sizes
        # and, with a task profile, the running task's record (profile_record_offset)
        items.append(SmemItem("buffer pl_glue.flags", "buffer", "pl_glue",
                              GLUE_FLAG_BYTES + 8 * held_words + profile_glue_bytes(r)
                              + in_entry_context_bytes(r), 16, Lifetime(None)))
    if r.loader is not None:  # the loader warp's ring: slots, then full and empty mbarriers per slot and an abort word
        items.append(SmemItem("buffer pl_glue.ring", "buffer", "pl_glue", r.loader.slots * r.loader.slot_bytes,
                              ARENA_ALIGN, Lifetime(None)))
        # ... and, with loader_in_flight_behind, a word: the ring position where the current call's refills of
        # the call before's slots end (component.h, pl::ring::acquire)
        behind = 8 if r.loader.paces_refills else 0
        items.append(SmemItem("mbarrier pl_glue.ring_bars", "mbarrier", "pl_glue", 16 * r.loader.slots + 8 + behind, 8,
                              Lifetime(None)))
    for g in (r.roles.groups if r.roles is not None else ()):
        if g.instances > 1:  # one mbarrier per instance: whose turn it is on the owner's entries
            items.append(SmemItem(f"mbarrier pl_glue.turn_{g.name}", "mbarrier", "pl_glue", 8 * g.instances, 8,
                                  Lifetime(None)))
    for w in r.wires:
        if w.kind == "ring":
            for which in ("full", "empty"):
                items.append(SmemItem(f"ring {w} {which}", "mbarrier", w.producer, 8 * w.stages, 8, Lifetime(None)))
    return items, strides


def _port_bytes(p, geometry) -> int:
    elems = 1
    for e in p.tile:
        elems *= e.evaluate(geometry)
    return elems * DTYPE_BYTES[p.dtype] * p.stages.evaluate(geometry)


def pack(items: list[SmemItem]) -> list[Placed]:
    """First fit, largest first: each item goes to the lowest aligned offset that no placed item of
    an overlapping lifetime covers. Deterministic: ties break on the item's key."""
    placed: list[Placed] = []
    for item in sorted(items, key=lambda i: (-i.size, i.key)):
        live = sorted((p for p in placed if p.item.lifetime.overlaps(item.lifetime)), key=lambda p: p.offset)
        candidates = sorted({0, *(p.end for p in live)})
        for cand in candidates:
            off = _round_up(cand, item.align)
            if all(off + item.size <= p.offset or off >= p.end for p in live):
                placed.append(Placed(item, off))
                break
    return sorted(placed, key=lambda p: (p.offset, p.item.key))


def _ports(r: Resolved, alloc: Allocation) -> None:
    """Port offsets: an output's storage; a zero-copy or ring input reads its producer's bytes."""
    where = {p.item.key: p.offset for p in alloc.smem}
    for c in r.components:
        for p in c.contract.ports:
            if p.space == "smem" and p.direction == "out":
                stages = p.stages.evaluate(r.geometry)
                alloc.port_offset[(c.name, p.name)] = (where[f"port {c.name}.{p.name}"],
                                                       _port_bytes(p, r.geometry) // stages)
    for w in r.wires:
        if w.kind == "fragment":  # registers: nothing in the arena
            continue
        off, stride = alloc.port_offset[(w.producer, w.out_port.name)]
        if w.kind == "relayout":
            off = where[f"port {w.consumer}.{w.in_port.name}"]
        alloc.port_offset[(w.consumer, w.in_port.name)] = (off, stride)
        if w.kind == "ring":
            alloc.ring_mbars[str(w)] = (where[f"ring {w} full"], where[f"ring {w} empty"])


def _barrier_ids(r: Resolved, alloc: Allocation, count: int, sink: DiagnosticSink) -> None:
    for c in r.components:
        for bid in c.contract.barriers.hardcoded_ids:
            alloc.hardcoded_ids.setdefault(bid, c.name)  # clashes: PL045 in check
    free = [i for i in range(1, count) if i not in alloc.hardcoded_ids]
    wanted = [(c, b) for c in r.components for b in c.contract.barriers.named]
    needed = sum(alloc.copies.get(c.name, 1) for c, _ in wanted)
    if needed > len(free):
        sink.error("PL044", f"{needed} named barrier ids to assign but only {len(free)} are free "
                   f"({len(alloc.hardcoded_ids)} hard-coded)", r.components[0].contract.at("/barriers"))
        return
    for c, b in wanted:  # a component with copies gets consecutive ids, one per copy
        n = alloc.copies.get(c.name, 1)
        start = next(k for k in range(len(free) - n + 1) if free[k + n - 1] - free[k] == n - 1) if n > 1 else 0
        alloc.barrier_id[(c.name, b.name)] = free[start]
        del free[start:start + n]


def _warps(r: Resolved, alloc: Allocation, sink: DiagnosticSink) -> None:
    def place_roles(c, begin):
        for role, off in misaligned_roles(c.contract, begin, sink).items():
            alloc.role_begin[(c.name, role)] = off

    if r.schedule != "warp_specialized":  # one task at a time on the same warps
        for c in r.components:
            alloc.warp_begin[c.name] = 0
            place_roles(c, 0)
        # The loader warp, when there is one, comes after the compute warps (glue.py branches it off).
        alloc.block_warps = max(c.contract.threads.warps for c in r.components) + (r.loader is not None)
        return
    # Concurrent components get disjoint warp ranges; warpgroup-aligned ones first, on multiples of 4.
    needs_wg = lambda c: any(role.warpgroup_aligned for role in c.contract.threads.roles)  # noqa: E731
    cursor = 0
    for c in sorted(r.components, key=lambda c: (not needs_wg(c), r.components.index(c))):
        begin = _round_up(cursor, 4) if needs_wg(c) else cursor
        alloc.warp_begin[c.name] = begin
        place_roles(c, begin)
        cursor = begin + c.contract.threads.warps
    alloc.block_warps = cursor


def _role_warps(r: Resolved, alloc: Allocation, sink: DiagnosticSink) -> None:
    """Each role group gets its own warps, warpgroup-aligned groups on multiples of 4, in pipeline
    order (a component's roles stay contiguous, in contract order, so its warp_rank() holds)."""
    cursor = 0
    for g in r.roles.groups:
        begin = _round_up(cursor, 4) if g.warpgroup_aligned else cursor
        alloc.group_begin[g.name] = begin
        for m in g.members:
            alloc.role_begin[(m.component, m.role)] = begin
        cursor = begin + g.warps * g.instances
    alloc.block_warps = cursor
    for c in r.components:
        begins = [alloc.role_begin[(c.name, role.name)] for role in c.contract.threads.roles]
        alloc.warp_begin[c.name] = begins[0]
        expected = begins[0]
        for role, begin in zip(c.contract.threads.roles, begins):
            if begin != expected:  # a role placed on another component's warps, away from its siblings
                sink.error("PL070", f"role '{role.name}' of '{c.name}' runs on warps {begin}.. but its component's "
                           f"roles must be contiguous from warp {begins[0]}", c.contract.at(role.pointer_path),
                           hint="a component whose roles join different groups cannot keep one warp range")
                break
            expected += role.warps * role.instances


def _role_registers(r: Resolved, alloc: Allocation, target, sink: DiagnosticSink) -> None:
    """The joint register pool: every warp gets the launch-bounds share at entry; a group with
    `setmaxnreg` moves to its own count. The counts must fit the SM's registers at one block per
    SM, and a component's own cap must fit the registers its role gets."""
    threads = alloc.block_threads
    entry = min(target.max_regs_per_thread, target.regs_per_sm // max(threads, 1) // 8 * 8)
    alloc.entry_registers = entry
    pool = []
    for g in r.roles.groups:
        regs = g.setmaxnreg or entry
        alloc.group_registers[g.name] = regs
        pool.append((g.name, g.warps * g.instances, regs))
        for m in g.members:
            c = r.component(m.component).contract
            why = cap_over_role(c, m.role, regs, g.name)
            if why:
                sink.error("PL104", why, c.at("/registers/max_per_thread"), hint=CAP_HINT)
    why = register_pool(pool, target.regs_per_sm)
    if why:
        owner = r.component(r.roles.groups[0].members[0].component).contract
        sink.error("PL100", why, owner.at("/threads/roles"), hint=POOL_HINT)


def _registers(r: Resolved, alloc: Allocation, target, sink: DiagnosticSink) -> None:
    budgets = [(c.contract.max_registers, c) for c in r.components if c.contract.max_registers]
    if not budgets:
        return
    tight, owner = min(budgets, key=lambda b: b[0])
    if residency(target, alloc.block_threads, 0, tight)[1]["registers"] < 1:
        held = target.regs_per_sm // (-(-tight * 32 // REG_ALLOC_UNIT) * REG_ALLOC_UNIT)
        sink.error("PL046", f"{tight} registers x {alloc.block_threads} threads: an SM's {target.regs_per_sm} "
                   f"registers hold {held // WARP_ALLOC_GRANULARITY * WARP_ALLOC_GRANULARITY} warps of it (placed "
                   f"{WARP_ALLOC_GRANULARITY} at a time on its schedulers), fewer than the block's "
                   f"{-(-alloc.block_threads // 32)}", owner.contract.at("/registers/max_per_thread"))
        alloc.registers = tight
        return
    alloc.registers = kernel_register_budget(target, alloc.block_threads, alloc.smem_bytes,
                                             [b for b, _ in budgets])


# Named barrier ids a block's task groups use (1..15; 0 is __syncthreads). Only one claimed task, or one
# batch of a concurrent component's tasks, runs in a block at a time, and every component's barriers are
# done when its task ends: the ids that other components' tasks use are free during a batch.
MAX_TASK_GROUPS = 15


def concurrent_tasks(threads, block_warps: int, schedule: str | None, dispatch: str, has_calls: bool,
                     has_prefetch: bool) -> int:
    """How many tasks of a component a block of `block_warps` runs at once: block_warps / warps when the
    contract says its tasks may run together (threads.concurrent: no __syncthreads, no shared memory,
    barriers or ports) and the kernel claims tasks one by one from a counter (a persistent schedule with
    dynamic dispatch, no calls); 1 otherwise. A task that needs few warps then costs its group of warps,
    not the whole block: a combine of one warp in a layer of four-warp experts runs four tokens at once."""
    if not threads.concurrent or schedule != "persistent" or dispatch != "dynamic" or has_calls or has_prefetch:
        return 1
    return max(1, min(block_warps // threads.warps, MAX_TASK_GROUPS))


def task_groups(r: Resolved, a: Allocation, name: str) -> int:
    """The tasks of `name` one block of the link runs at once (concurrent_tasks over the link's facts)."""
    comp = r.component(name)
    return concurrent_tasks(comp.contract.threads, a.block_warps, r.schedule, r.dispatch, r.calls is not None,
                            bool(comp.code.entry.prefetch))


def group_barrier_ids(r: Resolved, a: Allocation) -> dict[str, range]:
    """The named barriers the glue gives a concurrent component's task groups (group g: id g + 1), by component:
    ids that other components' tasks also use, free while a batch of the groups runs."""
    out = {}
    if r.events is None:
        return out
    for name in r.events.order:
        groups = task_groups(r, a, name)
        if groups > 1:
            out[name] = range(1, groups + 1)
    return out


def kernel_register_budget(target, threads: int, smem_bytes: int, caps: list[int]) -> int:
    """One register allocation serves every thread of a single-entry kernel. The tightest cap keeps the
    blocks per SM its component was written for; above it, the kernel takes as many registers, up to the
    largest cap, as leave that residency unchanged. Where shared memory or warps already hold the SM to
    fewer blocks, a component that needs more registers gets them instead of spilling (the tightest cap
    alone made a wgmma expert spill 328 bytes a thread in a layer held to one block per SM by its smem)."""
    tight, wide = min(caps), max(caps)
    blocks = residency(target, threads, smem_bytes, tight)[0]
    for regs in range(wide, tight, -8):
        if residency(target, threads, smem_bytes, regs)[0] >= blocks:
            return regs
    return tight


def _round_up(x: int, a: int) -> int:
    return (x + a - 1) // a * a


GLUE_FLAG_BYTES = 16  # pl_glue.flags: the wait verdict and the claimed task; the held sizes follow


def _after_held_sizes(r: Resolved, a: Allocation) -> int:
    """The arena offset past the glue's flags and held sizes: the profile word, then the in-entry wait contexts."""
    return a.buffer_offset[("pl_glue", "flags")] + GLUE_FLAG_BYTES + 8 * held_words(r)


# With a task profile, the glue's words: the running task's record (for the components' marks), then the slot
# claims of the threads that record (pl::profile::begin: two words each): thread 0, or each group of a component
# whose tasks run several to a block (at most MAX_TASK_GROUPS), and the loader warp (the last).
PROFILE_CLAIMERS = MAX_TASK_GROUPS + 1


def profile_glue_bytes(r: Resolved) -> int:
    """The glue's shared-memory bytes for a task profile: the record word, then PROFILE_CLAIMERS claims."""
    return 8 + 16 * PROFILE_CLAIMERS if r.profile_tasks and r.schedule == "persistent" else 0


def profile_claim_offset(r: Resolved, a: Allocation, claimer: int) -> int:
    """The arena offset of recording thread `claimer`'s slot claim (two words; see PROFILE_CLAIMERS)."""
    assert 0 <= claimer < PROFILE_CLAIMERS
    return profile_record_offset(r, a) + 8 + 16 * claimer


def profile_record_offset(r: Resolved, a: Allocation) -> int | None:
    """The arena offset of the word holding the running task's profile record (the components' profile marks,
    pipelink/component.h): after the glue's flags and held sizes, in a persistent link with a task profile."""
    if not r.profile_tasks or r.schedule != "persistent":
        return None
    return _after_held_sizes(r, a)


def in_entry_waits(r: Resolved) -> int:
    """The most in-entry waits (a contract's `events.waits[].in_entry`) any component of a persistent link has:
    the running task's contexts (pipelink/in_entry.h), one set a CTA (a CTA runs one task at a
    time: PL207 refuses them in components whose tasks run several to a block)."""
    if r.schedule != "persistent":
        return 0
    return max((len(c.code.in_entry_waits) for c in r.components), default=0)


def in_entry_context_bytes(r: Resolved) -> int:
    from .event_glue import IN_ENTRY_CONTEXT_BYTES
    return IN_ENTRY_CONTEXT_BYTES * in_entry_waits(r)


def in_entry_context_offset(r: Resolved, a: Allocation) -> int | None:
    """The arena offset of the running task's in-entry wait contexts: after the glue's flags, held sizes and
    profile words (8-byte aligned, as the contexts' words need)."""
    if not in_entry_waits(r):
        return None
    return _after_held_sizes(r, a) + profile_glue_bytes(r)


# A component asking for this many registers a thread or more (a wgmma mainloop's accumulators) makes the
# glue hold the launch's sizes in shared memory instead of registers (`held_words`).
HOLD_SIZES_AT_REGISTERS = 192


def holds_sizes(r: Resolved) -> bool:
    """Whether the persistent glue reads its launch sizes (task counts, event extents and bases) from shared
    memory at each use rather than keeping them in registers for the whole loop. Measured on the H200
    (2026-12-02): the MoE Hopper layer (components at 255) went from a 40-byte frame with local loads in its
    wgmma loop to none, 1357 -> 1229 us at T=4096 and 265 -> 241 us at T=16; the Llama decode megakernel
    (components at 128, ~60 short tasks a CTA a step, each reading several sizes) went 1117 -> 1151 us. So
    only kernels with a register-hungry component hold them."""
    return r.schedule == "persistent" and r.events is not None and \
        any((c.contract.max_registers or 0) >= HOLD_SIZES_AT_REGISTERS for c in r.components)


def held_words(r: Resolved) -> int:
    """Shared-memory words a persistent kernel's glue holds its launch sizes in (at most: link-time constants
    are not held): per component its grid extents and task count, per event its extents (and per-layer size)
    and base; none unless `holds_sizes`."""
    if not holds_sizes(r):
        return 0
    comps = sum(len(r.component(n).contract.geometry.tile_sequence.grid) + 1 for n in r.events.order)
    layers = 1 if event_glue.has_layers(r) else 0
    return comps + sum(len(t.shape) + layers + 1 for t in r.events.tensors.values())
