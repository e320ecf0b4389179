"""Resolve: wire ports, give every geometry name its link-time value, check every wire.

Pure: contracts and the pipeline spec in, a `Resolved` pipeline (or diagnostics) out.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..core.diagnostics import DiagnosticSink, Location
from ..core.expr import Expr, ExprError, parse
from ..core.model import Component
from ..core.model import INTEGER_DTYPES, Param, Port, TensorMapSpec, TileSequence, is_identifier
from ..core.pipeline import PipelineSpec, WireSpec
from ..runtime.profile import COMPONENTS as PROFILE_COMPONENTS

if TYPE_CHECKING:  # built by the passes' own modules, imported where they run
    from .events import EventPlan
    from .roles import RolePlan


@dataclass(frozen=True)
class Wire:
    producer: str
    out_port: Port
    consumer: str
    in_port: Port
    kind: str                 # "zero_copy" | "relayout" | "ring"
    stages: int
    tile: tuple[int, ...]
    explicit: bool

    def __str__(self) -> str:
        return f"{self.producer}.{self.out_port.name} -> {self.consumer}.{self.in_port.name}"


@dataclass(frozen=True)
class KernelParam:
    name: str
    dtype: str
    pointer: bool
    const: bool
    users: tuple[str, ...]
    tensor_map: TensorMapSpec | None = None
    shapes: tuple[tuple[Expr, ...], ...] = ()  # extents each user declares: the launcher checks the buffer holds each
    align: int | None = None               # bytes a gmem port on it declares: the launcher checks the address

    def c_decl(self) -> str:
        if self.tensor_map is not None:  # the descriptor itself, in the parameter space
            return f"const __grid_constant__ pl::TensorMap {self.name}"
        return Param(self.name, self.dtype, self.pointer, self.const, "").c_decl()


INT32_MAX = (1 << 31) - 1  # the glue's tile and task counts are int


@dataclass
class Resolved:
    name: str
    components: list[Component]        # pipeline order
    order: list[str]                   # topological order of the wire graph (the sequential steps)
    wires: list[Wire]
    geometry: dict[str, int]
    schedule: str
    tiles: TileSequence
    tiles_owner: str
    params: list[KernelParam]
    events: EventPlan | None = None    # persistent schedule only
    dispatch: str = "static"
    debug_events: bool = False
    specialize: dict = None            # shape parameter -> constant, for a link made for one shape
    roles: RolePlan | None = None      # components in the `entries` form split the block by role
    cluster: tuple[int, int, int] | None = None
    stream_k: object = None            # roles.StreamK: a tile's reduction split over CTAs
    # Sequential only: components whose grid adds trailing dimensions to the kernel's run those
    # dimensions in an inner loop inside each of the kernel's tiles (component -> the extra extents).
    nested: dict = None
    dependent_launch: bool = False     # programmatic dependent launch (the glue waits on the grid before)
    calls: object = None               # calls.CallPlan: a `calls` pipeline's layer loop and stacked tensors
    profile_tasks: int = 0             # persistent: records in the task-profile ring (runtime/profile.py)
    # Where a contract uses RANK or WORLD or notifies another rank: (component, JSON pointer) of the first
    # use. Every rank runs the kernel on NVSHMEM (glue, link and manifest follow it).
    distributed: tuple[str, str] | None = None
    counts_per_cta: bool = False       # static persistent: whole-call events added once per CTA (glue.py)
    loader: "LoaderPlan | None" = None  # components with a load entry: the loader warp and its ring
    deal: str = "restart"              # static persistent: where each call's tasks start (glue.first_task)
    wait_backoff_ns: int = 64          # events.h's PL_WAIT_BACKOFF_NS: a waiter's sleep between reads
    geometry_set: frozenset = frozenset()  # geometry names whose value the pipeline (its file or --geometry) gave
    notify_fence: str = "sc"           # the fence before a task's notifications (event_glue.notify_block)

    def inner_grid(self, name: str) -> tuple:
        return (self.nested or {}).get(name, ())

    def component(self, name: str) -> Component:
        return next(c for c in self.components if c.name == name)


@dataclass(frozen=True)
class LoaderPlan:
    """The kernel's loader role: one warp after the compute warps walks the CTA's tasks in their static order
    and calls each load entry, which fills the task's slots of one shared-memory ring of `slots` slots of
    `slot_bytes` (the largest any component asks for) while the compute warps run earlier tasks."""

    slots: int
    slot_bytes: int
    components: tuple[str, ...]  # the calls with a load entry
    ahead: int = 0               # tasks on that the loader asks L2 for (components whose loader says ahead)
    in_flight: int = 0           # slots the loader has on their way at most (the pipeline's loader_in_flight)
    evict_first: bool = False    # the ring's copies hint L2 to evict their lines first (the pipeline's loader_l2)
    slots_at: Location | None = None  # where the pipeline sized the ring (its loader_slots), for diagnostics
    ahead_behind: bool = False   # asks ahead only while the ring holds an earlier call's slots (load_ahead_when)
    in_flight_behind: int = 0    # the same while refilling slots that held an earlier call's (loader_in_flight_behind)
    behind_until_release: bool = False  # ... only until the call's first slot is released (first_release)
    ahead_gap_ns: int = 0        # the pause before each request ahead (load_ahead_gap_ns)

    @property
    def copies_in_flight(self) -> int:
        """The slots' copies the loader may have outstanding: loader_in_flight below the ring's slots, else all."""
        return self.in_flight if 0 < self.in_flight < self.slots else self.slots

    @property
    def copies_in_flight_behind(self) -> int:
        """The copies outstanding at most while the loader refills slots that held an earlier call's data:
        loader_in_flight_behind below the ring's slots, else what copies_in_flight allows."""
        return self.in_flight_behind if 0 < self.in_flight_behind < self.slots else self.copies_in_flight

    @property
    def paces_refills(self) -> bool:
        """Whether the refills of the call before's slots have a cap of their own: then the kernel has the word
        that says where they end and the loader's writes of it; else nothing of loader_in_flight_behind."""
        return self.copies_in_flight_behind != self.copies_in_flight

    @property
    def paces_until_release(self) -> bool:
        """Whether those refills stay paced only until the compute warps release the call's first slot on the
        CTA (loader_in_flight_behind_until first_release), not through the call's first `slots` positions."""
        return self.paces_refills and self.behind_until_release


def _schedule_set_at(spec: PipelineSpec) -> tuple[Location, ...]:
    """Where the pipeline chose its schedule (the option or the file's field), for diagnostics about what that
    schedule cannot do; () when it was inferred."""
    return (spec.at("/schedule"),) if spec.schedule and spec.sets("schedule") else ()


def plan_loader(comps: list, spec: PipelineSpec, schedule: str, role_structured: bool,
                sink: DiagnosticSink) -> LoaderPlan | None:
    """A load entry runs ahead of its task's waits on its own warp, which only a persistent kernel with static
    dispatch can place: the loader must know the CTA's next tasks before they are claimed (PL186)."""
    loading = [c for c in comps if c.contract.entry.load]
    ahead = [c for c in loading if c.contract.loader.ahead]
    for name, does in (("load_ahead_when", "says when the loader asks L2 ahead"),
                       ("load_ahead_gap_ns", "paces the loader's requests to L2 ahead")):
        if spec.changes(name) and not spec.load_ahead:
            sink.warning("PL193", f"{name} {does}, and load_ahead is 0: it has no effect",
                         spec.at(f"/{name}"), hint=f"drop {name}, or set load_ahead")
    if spec.load_ahead and not ahead:
        sink.warning("PL189", f"load_ahead is {spec.load_ahead}, but no component of this link has a load entry that "
                     "asks L2 ahead (loader.ahead): the loader asks for nothing ahead",
                     spec.at("/load_ahead"),
                     hint="drop load_ahead, or link components whose contract's loader says ahead")
    if not loading:
        for name, does in (("loader_slots", "sizes the loader ring"), ("loader_in_flight", "paces the loader ring"),
                           ("loader_in_flight_behind", "paces the loader ring's refills from an earlier call"),
                           ("loader_in_flight_behind_until", "says how long those refills stay paced"),
                           ("loader_l2", "sets the L2 hint of the loader ring's copies")):
            if spec.changes(name):
                sink.warning("PL193", f"{name} {does}, and no component of this link has a load "
                             "entry: it has no effect", spec.at(f"/{name}"),
                             hint=f"drop {name}, or link components with a load entry (entry.load)")
        return None
    if schedule != "persistent" or role_structured or spec.dispatch != "static":
        how = "role-structured" if role_structured else schedule + (
            f" with {spec.dispatch} dispatch" if schedule == "persistent" else "")
        why = [spec.at("/dispatch")] if schedule == "persistent" and spec.dispatch != "static" else \
            [spec.at("/schedule")] if spec.schedule and spec.sets("schedule") else []
        sink.error("PL186", f"'{loading[0].name}' has a load entry, which a loader warp calls for the CTA's tasks in "
                   f"their static order; this pipeline's schedule is {how}", loading[0].contract.at("/entry/load"),
                   related=tuple(why),
                   hint='use a persistent schedule with "dispatch": "static", or link the component\'s variant '
                        "without a load entry")
        return None
    warps = max(c.contract.threads.warps for c in comps)
    for c in loading:
        if c.contract.threads.warps != warps:
            sink.error("PL186", f"'{c.name}' has a load entry and {c.contract.threads.warps} warps; the block's compute "
                       f"warps are {warps}, and every one of them releases each ring slot it read",
                       c.contract.at("/threads"), hint=f"give '{c.name}' {warps} warps")
            return None
    plan = LoaderPlan(spec.loader_slots, max(c.contract.loader.slot_bytes for c in loading),
                      tuple(c.name for c in loading), spec.load_ahead if ahead else 0, spec.loader_in_flight,
                      spec.loader_l2 == "evict_first", spec.at("/loader_slots"),
                      ahead_behind=bool(ahead) and spec.load_ahead_when == "call_behind",
                      in_flight_behind=spec.loader_in_flight_behind,
                      behind_until_release=spec.loader_in_flight_behind_until == "first_release",
                      ahead_gap_ns=spec.load_ahead_gap_ns if ahead and spec.load_ahead else 0)
    if spec.changes("loader_in_flight_behind_until") and not plan.paces_refills:
        sink.warning("PL193", "loader_in_flight_behind_until says how long the refills of the call before's slots "
                     "stay paced, and this link paces none (loader_in_flight_behind is 0, or not below the cap of "
                     "the rest): it has no effect", spec.at("/loader_in_flight_behind_until"),
                     hint="drop loader_in_flight_behind_until, or set loader_in_flight_behind below loader_in_flight")
    return plan


SAMPLE_SHAPES = (1, 2, 3, 17, 64, 100, 129, 1000, 4096, 5003)


def _symbol_at(contract, symbol: str) -> Location:
    """Where a contract names an entry symbol."""
    return contract.at(contract.symbol_pointer(symbol))


def resolve(components: list[Component], spec: PipelineSpec, sink: DiagnosticSink) -> Resolved | None:
    if spec.standalone:
        alone = standalone(components)
        if spec.changes("standalone") and all(a.contract.events == c.contract.events for a, c in zip(alone, components)):
            sink.warning("PL193", "standalone drops the events that no component of the link notifies or waits for; "
                         "this link has none: it has no effect", spec.at("/standalone"),
                         hint="drop standalone (the kernel is the same without it)")
        components = alone
    if not is_identifier(spec.name):  # it names the generated kernel
        sink.error("PL001", f"the kernel name {spec.name!r} is not a C identifier",
                   spec.at("/name"))
        return None
    calls = None
    if spec.calls:
        from .calls import expand_calls
        if spec.schedule not in (None, "persistent") or spec.wires or spec.components:
            what = "no wires" if spec.wires else "no components" if spec.components else "the persistent schedule, " \
                f"not {spec.schedule}"
            sink.error("PL176", f"a pipeline with calls has {what}: its calls are a persistent kernel's task "
                       "groups, which meet through events", spec.at("/calls"),
                       hint="drop it; the calls list the components, `after` orders them")
            return None
        expanded = expand_calls(components, spec, sink)
        if expanded is None:
            return None
        components, calls = expanded
        spec = replace(spec, components=calls.order, schedule="persistent")
    comps = _order(components, spec, sink)
    if comps is None:
        return None
    geometry = _geometry(comps, spec, sink)
    if sink.has_errors:
        return None
    # Warp counts and tensor-map boxes given over geometry take the link's values from here on: the
    # loader checked them at the contract's own defaults only.
    comps = [replace(c, contract=replace(c.contract, threads=_threads_at(c, geometry, sink))) for c in comps]
    _zero_divisors(comps, geometry, sink)
    fixed = {k: v for k, v in _int_values(spec.specialize).items() if -(1 << 31) <= v <= INT32_MAX}  # else PL001
    _extents_fit_int(comps, {**geometry, **fixed}, sink)
    _sizes_fit_int(comps, geometry, sink)
    _tensor_map_boxes(comps, geometry, sink)
    if sink.has_errors:
        return None
    by_name = {c.name: c for c in comps}
    role_structured = any(c.contract.entries for c in comps)
    wires_spec = _explicit_wires(spec.wires, by_name, sink)
    if sink.has_errors:
        return None
    if calls is None:  # calls meet through events only
        wires_spec += _auto_wires(comps, wires_spec, sink)
    has_events = any(c.contract.events.notifies or c.contract.events.waits for c in comps)
    has_loader = any(c.contract.entry.load for c in comps)  # a loader warp walks a persistent CTA's tasks
    schedule = spec.schedule or ("persistent" if has_events or has_loader else "warp_specialized" if role_structured
                                 else _infer_schedule(wires_spec, by_name, geometry))
    if role_structured:
        _role_structured_only(comps, schedule, spec, sink)
        if sink.has_errors:
            return None
    wires = [w for w in (_check_wire(ws, explicit, by_name, schedule, geometry, sink) for ws, explicit in wires_spec)
             if w]
    if schedule == "warp_specialized":  # a fragment is no ring: it has no slots
        _one_stage_count_per_component(comps, [w for w in wires if w.kind != "fragment"], sink)
    if role_structured:
        for w in wires:
            if w.kind != "fragment":
                sink.error("PL078", f"wire '{w}' hands a shared-memory tile between components in the `entries` form; "
                           "the glue orders their role groups through nothing but register fragments",
                           by_name[w.consumer].contract.at(w.in_port.pointer_path),
                           related=(by_name[w.producer].contract.at(w.out_port.pointer_path),),
                           hint="hand the tile over in registers (a reg port), or keep it inside one component")
    written = {f"{ws.producer}.{ws.out_port} -> {ws.consumer}.{ws.in_port}": ws.where for ws, _ in wires_spec}
    order = _topological(comps, wires, sink, written)
    events = None
    if schedule == "persistent":
        tiles = _persistent_sequences(comps, wires, sink, _schedule_set_at(spec))
        if not sink.has_errors:
            from .events import plan_events
            # specialized values are fixed at every launch: the analysis samples the other sizes only
            events = plan_events(comps, {**geometry, **_int_values(spec.specialize)}, sink)
            order = events.order if events else None
            if events is not None and calls is None and not sink.has_errors:
                from .events import check_component_hazards
                check_component_hazards(comps, events, sink)
            if events is not None and calls is not None:  # calls run in the order listed
                from .calls import check_event_order, check_hazards
                check_event_order(calls, events, {c.name: c for c in comps}, sink)
                if not sink.has_errors:
                    count = calls.layers if isinstance(calls.layers, int) else \
                        _int_values(spec.specialize).get(calls.layers)  # a layer count the link fixes
                    check_hazards(calls, events, {c.name: c for c in comps}, sink, one_layer=count == 1)
                order = events.order = list(calls.order)
        nested = {}
    else:
        tiles, nested = _tile_sequence(comps, schedule, sink, spec.geometry)
        _wires_within_levels(comps, wires, nested, sink)
    params = _params(comps, sink)
    if calls is not None:
        params = _layered_params(params, calls, sink, spec)
    _kernel_name(comps, spec, sink)
    counts_per_cta = _schedule_settings(comps, spec, schedule, role_structured, sink)
    loader = plan_loader(comps, spec, schedule, role_structured, sink)
    roles = None
    if role_structured and not sink.has_errors:
        from .roles import plan_roles
        roles = plan_roles(comps, wires, sink)
        if roles is not None and tiles is not None and tiles[0].distribution != "grid_stride":
            for g in roles.groups:
                if g.instances > 1:
                    sink.error("PL078", f"role '{g.name}' runs {g.instances} instances, which take a grid-stride walk's "
                               f"tiles in turn; the tile sequence is {tiles[0].distribution}",
                               _roles_at(comps, g.members[0].component))
    stream_k = None
    if roles is not None and not sink.has_errors:
        from .roles import plan_stream_k
        stream_k = plan_stream_k(comps, roles, tiles[0] if tiles else None, sink)
    if sink.has_errors or tiles is None or order is None:
        return None
    _specialize(comps, params, schedule, tiles[0], geometry, spec, sink)
    _settings_without_effect(spec, events, sink)
    if sink.has_errors:
        return None
    cluster = next((c.contract.cluster for c in comps if c.contract.cluster), None)
    from .events import distributed_use
    return Resolved(spec.name, comps, order, wires, geometry, schedule, tiles[0], tiles[1], params, events,
                    spec.dispatch, spec.debug_events, dict(spec.specialize), roles,
                    tuple(list(cluster) + [1] * (3 - len(cluster))) if cluster else None, stream_k, nested,
                    spec.dependent_launch, calls, spec.profile_tasks,
                    distributed_use(comps, events.tensors if events else {}), counts_per_cta, loader,
                    spec.deal, spec.wait_backoff_ns, frozenset(spec.geometry) & geometry.keys(), spec.notify_fence)


def _kernel_name(comps: list[Component], spec: PipelineSpec, sink: DiagnosticSink) -> None:
    """The kernel's name is no entry symbol of a component and no name C++ or CUDA reserves (PL077)."""
    # the default name (no pipeline file's, no --name) is located at the component it clashes with
    default_name = not spec.sets("name")
    rename = ("give the kernel a name: --name, or the pipeline's \"name\"" if default_name
              else "name the pipeline differently")
    for c in comps:
        if spec.name in c.contract.symbols:
            sink.error("PL077", f"the kernel name '{spec.name}'{' (the default)' if default_name else ''} is an entry "
                       f"symbol of '{c.name}'", _symbol_at(c.contract, spec.name) if default_name else spec.at("/name"),
                       hint=rename)
    from ..core.identifiers import problem
    why = problem(spec.name, "global")
    if why:
        sink.error("PL077", f"the kernel name '{spec.name}' is {why}", spec.at("/name"), hint=rename)


def _schedule_settings(comps: list[Component], spec: PipelineSpec, schedule: str, role_structured: bool,
                       sink: DiagnosticSink) -> bool:
    """What the pipeline's settings and the components' entries, events and roles ask of the schedule, checked
    against it; returns whether whole-call events are counted once per CTA (counts_per_cta)."""
    if (schedule != "persistent" or role_structured) and spec.changes("dispatch"):
        sink.warning("PL193", f"dispatch '{spec.dispatch}' orders a persistent kernel's tasks; this pipeline's "
                     f"schedule is {'role-structured' if role_structured else schedule}: it has no effect",
                     spec.at("/dispatch"), hint="drop dispatch, or use a persistent schedule")
    # A whole-call event is waited on only as a whole, so one add per CTA after its last task of the call lands
    # no later than the last of the per-task adds would, with one fence and atomic per CTA instead of per task:
    # on wherever each CTA's task order is fixed (the decode step: 3.4% faster at B = 1), off only when asked.
    per_cta_allowed = schedule == "persistent" and not role_structured and spec.dispatch == "static"
    counts_per_cta = per_cta_allowed if spec.counts_per_cta is None else spec.counts_per_cta
    if spec.counts_per_cta and not per_cta_allowed:
        sink.error("PL184", "counts_per_cta counts a call's tasks once per CTA after its last one, which only a "
                   "persistent schedule with static dispatch knows; this pipeline's is "
                   f"{'role-structured' if role_structured else schedule}"
                   + (f" with {spec.dispatch} dispatch" if schedule == "persistent" and not role_structured else ""),
                   spec.at("/counts_per_cta"),
                   hint="drop counts_per_cta, or use a persistent schedule with \"dispatch\": \"static\"")
    if spec.deal != "restart" and not per_cta_allowed:
        sink.error("PL187", f"deal '{spec.deal}' orders the tasks of a static walk over the CTAs; this pipeline's "
                   f"schedule is {'role-structured' if role_structured else schedule}"
                   + (f" with {spec.dispatch} dispatch" if schedule == "persistent" and not role_structured else ""),
                   spec.at("/deal"),
                   hint="drop deal, or use a persistent schedule with \"dispatch\": \"static\"")
    if spec.profile_tasks and (schedule != "persistent" or role_structured):
        sink.error("PL179", f"profile_tasks records the tasks of a persistent kernel; this pipeline's schedule is "
                   f"{'role-structured' if role_structured else schedule}",
                   spec.at("/profile_tasks"),
                   hint="profile a persistent pipeline, or time the kernel as a whole")
    elif spec.profile_tasks and len(comps) > PROFILE_COMPONENTS:
        sink.error("PL191", f"profile_tasks names a task's component in 7 bits of its record (the eighth marks the "
                   f"loader's records); this kernel has {len(comps)} components (calls), the record names "
                   f"{PROFILE_COMPONENTS}",
                   spec.at("/profile_tasks"),
                   hint="profile a kernel of fewer calls (a part of the pipeline), or time the kernel as a whole")
    for c in comps:
        if c.contract.entry.prefetch and schedule == "warp_specialized":
            sink.error("PL177", f"'{c.name}' has a prefetch entry, which the warp-specialized schedule does not call "
                       "(its components run at once, each on its own warps)", c.contract.at("/entry/prefetch"))
        if (c.contract.events.notifies or c.contract.events.waits) and schedule != "persistent":
            sink.error("PL078", f"'{c.name}' declares events, which only the persistent schedule wires (this "
                       f"pipeline's is {schedule})", c.contract.at("/events"), related=_schedule_set_at(spec))
    if schedule == "warp_specialized":
        for c in comps:
            if c.contract.threads.uses_syncthreads and len(comps) > 1:
                sink.error("PL071", f"'{c.name}' calls __syncthreads, which would wait for the warps of the other "
                           "components too", c.contract.at("/threads/uses_syncthreads"))
    elif any(c.contract.entry.load for c in comps):  # the loader warp runs its own walk, never the tasks' barrier 0
        for c in comps:
            if c.contract.threads.uses_syncthreads:
                sink.error("PL071", f"'{c.name}' calls __syncthreads, which would wait for the loader warp too: it "
                           "walks the tasks ahead and never meets the compute warps' barrier 0",
                           c.contract.at("/threads/uses_syncthreads"),
                           hint="synchronize the component's warps with a named barrier (barriers.named) instead")
    return counts_per_cta


def _int_values(values: dict) -> dict[str, int]:
    """The integers of a specialize map (a malformed value is the schema's to report, not the analysis's)."""
    return {k: v for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool)}


def _specialize(comps: list[Component], params: list, schedule: str, tiles: TileSequence, geometry: dict[str, int],
                spec: PipelineSpec, sink: DiagnosticSink) -> None:
    """Each specialized value names an integer parameter of the kernel, fits its type, and leaves the tile
    extents it decides usable (_specialized_extents)."""
    shapes = {p.name for p in params if not p.pointer and p.dtype in INTEGER_DTYPES}
    dtypes = {p.name: p.dtype for p in params}
    for name, value in spec.specialize.items():
        where = spec.at(f"/specialize/{name}")
        if name not in shapes:
            sink.error("PL001", f"specialize {name}: the kernel has no integer parameter '{name}'", where,
                       hint="integer parameters: " + ", ".join(sorted(shapes)))
            continue
        bits, signed = int(dtypes[name][1:]), dtypes[name][0] == "i"
        low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        if not low <= value <= high:  # the glue's constant would wrap, and no launch could pass the value
            sink.error("PL001", f"specialize {name}: {value} is outside the {dtypes[name]} parameter's range "
                       f"{low}..{high}", where, hint=f"a value {name} can take")
    if isinstance(spec.layers, str) and spec.calls and spec.layers in spec.specialize:
        value, where = spec.specialize[spec.layers], spec.at(f"/specialize/{spec.layers}")
        if value < 0:  # the per-layer event counters' leading extent
            sink.error("PL001", f"specialize {spec.layers} = {value}: it counts the layers (the pipeline's layers), "
                       "and the launcher refuses a negative count", where, hint="specialize the layer count launched")
        elif value == 0:
            sink.warning("PL194", f"specialize {spec.layers} = 0: it counts the layers (the pipeline's layers), so the "
                         "per-layer calls never run", where, hint="specialize the layer count launched")
    if not sink.has_errors:
        _specialized_extents(comps, schedule, tiles, geometry, spec, sink)


def _sizes_fit_int(comps: list[Component], geometry: dict[str, int], sink: DiagnosticSink) -> None:
    """A buffer's bytes and an smem port's tile extents, which the component's header computes in int at the
    link's geometry (`smem_buf_bytes()`), fit at every step: `TILE_M * 65536 * 65536 // 1048576` is 4096 x TILE_M
    to the allocator and wraps to 0 in the header. PL032 at the size."""
    for c in comps:
        sizes = [(b.bytes, b.pointer_path + "/bytes", f"buffer '{b.name}'") for b in c.contract.buffers]
        sizes += [(e, f"{q.pointer_path}/tile/{k}", f"port '{q.name}'") for q in c.contract.ports
                  if q.space == "smem" for k, e in enumerate(q.tile)]
        for e, pointer, what in sizes:
            if not e.names <= geometry.keys():
                continue
            over = e.c_int_overflow(geometry)
            if over:
                sink.error("PL032", f"'{c.name}''s {what} size {e.text!r}: its header computes it in a 32-bit int, "
                           f"and at this link's geometry {over} does not fit", c.contract.at(pointer),
                           hint="write the size so that no step passes 2^31 - 1 (divide before multiplying)")


def _extents_fit_int(comps: list[Component], geometry: dict[str, int], sink: DiagnosticSink) -> None:
    """A task grid extent the geometry alone fixes, and their product, fit the glue's `int` tile counts (2^32 + 1
    had been written `const int tiles_0 = 4294967297;`, 1 in the kernel, while the launcher counted them all).
    PL032 at the extent; one over runtime values the launcher checks at each launch."""
    from ..core.expr import ExprError
    for c in comps:
        seq = c.contract.geometry.tile_sequence
        total = 1
        for i, e in enumerate(seq.grid if seq else ()):
            if not e.names <= geometry.keys():
                continue
            try:
                n = e.evaluate(geometry)
            except ExprError:
                continue  # a zero divisor: _zero_divisors says so
            total *= max(n, 0)
            over = e.c_int_overflow(geometry)
            if over and n <= INT32_MAX:  # the extent fits, a step of the glue's int arithmetic towards it does not
                sink.error("PL032", f"'{c.name}' has a task grid extent {e.text!r} that the kernel computes in a "
                           f"32-bit int, and at this link's values {over} does not fit",
                           c.contract.at(f"{seq.pointer_path}/grid/{i}"),
                           hint="a smaller value (a specialized size), or an extent written so that no step "
                                "passes 2^31 - 1")
                break
            if n > INT32_MAX or total > INT32_MAX:
                sink.error("PL032", f"'{c.name}' has {'a task grid extent' if n > INT32_MAX else 'task grid extents'} "
                           f"{e.text!r} = {n}{'' if n > INT32_MAX else f' (the grid: {total} tasks)'} at this link's "
                           f"geometry: the kernel counts tasks in an int, at most {INT32_MAX}",
                           c.contract.at(f"{seq.pointer_path}/grid/{i}"),
                           hint="cover more work per task (a larger tile), so the grid stays within an int")
                break


def _zero_divisors(comps: list[Component], geometry: dict[str, int], sink: DiagnosticSink) -> None:
    """A divisor that the link's geometry alone makes zero (`TILE // (TILE - 1024)` at TILE = 1024) in a tile
    extent, an event's count or shape, or the loader's slots: the glue would divide by zero at every launch (a
    literal zero is refused where the contract is read). PL028 at the expression."""
    from ..core.expr import zero_divisor
    for c in comps:
        seq, events, loader = c.contract.geometry.tile_sequence, c.contract.events, c.contract.loader
        exprs = [(e, f"{seq.pointer_path}/grid/{i}") for i, e in enumerate(seq.grid)] if seq else []
        exprs += [(w.count, f"{w.pointer_path}/count") for w in events.waits if w.count is not None]
        exprs += [(e, f"{n.pointer_path}/shape/{i}") for n in events.notifies for i, e in enumerate(n.shape or ())]
        if loader is not None:
            exprs.append((loader.slots, f"{loader.pointer_path}/slots"))
        for e, pointer in exprs:
            zero = zero_divisor(e.tree, geometry)
            if zero is not None:
                values = ", ".join(f"{n} = {geometry[n]}" for n in sorted(parse(zero).names))
                sink.error("PL028", f"{e.text!r} divides by zero at this link's geometry ({zero} is 0 at {values})",
                           c.contract.at(pointer), hint="give the geometry a value the expression can divide by")
        if loader is not None and loader.slots.names <= geometry.keys() and not sink.has_errors:
            slots = loader.slots.evaluate(geometry)  # the same at every launch: a task fills no slot, or fewer
            if slots <= 0:
                sink.error("PL032", f"loader slots per task {loader.slots.text!r} is {slots} at this link's geometry; "
                           "it must be positive", c.contract.at(f"{loader.pointer_path}/slots"))


def _settings_without_effect(spec: PipelineSpec, events, sink: DiagnosticSink) -> None:
    """Settings of the event waits and notifications on a kernel that has none of them, and `layers` without
    calls: PL193 at the setting."""
    if spec.layers is not None and not spec.calls:
        sink.warning("PL193", "layers repeats the calls marked per_layer; this pipeline has no calls: it has no effect",
                     spec.at("/layers"), hint="drop layers, or list the pipeline's calls")
    waits = events is not None and any(t.waiters for t in events.tensors.values())
    if not waits:
        for name, what in (("debug_events", "bounds how long a task waits on an event"),
                           ("wait_backoff_ns", "is a waiting thread's sleep between two reads of an event")):
            if spec.changes(name):
                sink.warning("PL193", f"{name} {what}; no task of this link waits on one: it has no effect",
                             spec.at(f"/{name}"), hint=f"drop {name}, or link components whose contracts wait on events")
    if spec.changes("notify_fence") and not (events is not None and any(t.notifiers for t in events.tensors.values())):
        sink.warning("PL193", "notify_fence is the fence before a task's notifications; no task of this link notifies "
                     "an event: it has no effect", spec.at("/notify_fence"), hint="drop notify_fence")
    from .event_glue import whole_call
    if spec.changes("counts_per_cta") and not (events is not None and any(
            whole_call(n) for t in events.tensors.values() for n in t.notifiers)):
        sink.warning("PL193", "counts_per_cta counts a call's whole-call notifications once per CTA; no component of "
                     "this link notifies a whole call: it has no effect", spec.at("/counts_per_cta"),
                     hint="drop counts_per_cta")


def _specialized_extents(comps: list[Component], schedule: str, tiles: TileSequence, geometry: dict[str, int],
                         spec: PipelineSpec, sink: DiagnosticSink) -> None:
    """A tile extent that the specialized values alone decide is the same at every launch: below zero, the launcher
    refuses every launch (PL001); zero, the component's tasks never run (PL194)."""
    if not spec.specialize:
        return
    env = {**geometry, **spec.specialize}
    owners = [(c.name, c.contract.geometry.tile_sequence.grid) for c in comps if c.contract.geometry.tile_sequence] \
        if schedule == "persistent" else [(None, tiles.grid)]
    for owner, grid in owners:
        for extent in grid:
            if not extent.names & spec.specialize.keys():
                continue
            try:
                n = extent.evaluate(env)
            except ExprError:  # a name only a launch gives, or a division by zero there
                continue
            if n > 0:
                continue
            names = sorted(extent.names & spec.specialize.keys())
            values = ", ".join(f"{k} = {spec.specialize[k]}" for k in names)
            whose = f"component '{owner}'" if owner else "the kernel"
            where = spec.at(f"/specialize/{names[0]}")
            if n < 0:
                sink.error("PL001", f"specialize {values}: {whose} has the tile extent {extent.text} = {n}, and the "
                           "launcher refuses a negative extent: no launch can use this kernel", where,
                           hint=f"specialize {names[0]} to a value the kernel is launched with")
            else:
                sink.warning("PL194", f"specialize {values}: {whose} has the tile extent {extent.text} = 0 at every "
                             "launch: its tasks never run", where,
                             hint=f"specialize {names[0]} to a value the kernel is launched with, or link without "
                                  f"{'it' if owner is None else repr(owner)}")
            break


def standalone(components: list[Component]) -> list[Component]:
    """The components as a kernel of their own that runs after the kernels their waits are on (a separate-kernel
    control, or a pipeline split into launches): a wait on an event that no component of the link notifies is
    met by the launch order, and a notification that none of them waits for has no reader here; both are
    dropped. The events between components of the link stay, and so does a chain (an event one component both
    notifies and waits on: a scan's carry, a router's picking task after its slices): they order tasks inside
    the one launch, and without them a task would read what its predecessors have not written yet. Each object
    still carries its own contract."""
    from ..core.model import Events
    notified = {n.name for c in components for n in c.contract.events.notifies}
    waited = {w.name for c in components for w in c.contract.events.waits}
    inside = notified & waited

    def one(c: Component) -> Component:
        ev = c.contract.events
        kept = Events(notifies=tuple(n for n in ev.notifies if n.name in inside),
                      waits=tuple(w for w in ev.waits if w.name in inside))
        return replace(c, contract=replace(c.contract, events=kept), base=c.code)
    return [one(c) for c in components]


def _roles_at(comps, name: str):
    """Where component `name` declares its roles: the location of a diagnostic about them."""
    return next(c for c in comps if c.name == name).contract.at("/threads/roles")


def _role_structured_only(comps, schedule: str, spec: PipelineSpec, sink) -> None:
    """Entries split the block by role; a component with a single entry has no role to run on."""
    if schedule != "warp_specialized":
        sink.error("PL078", f"components with several entries run warp-specialized; the pipeline asks for {schedule}",
                   spec.at("/schedule"))
    for c in comps:
        if not c.contract.entries:
            sink.error("PL078", f"'{c.name}' has a single entry, and the other components split the block by role "
                       "(the `entries` form); this linker does not mix the two in one kernel",
                       c.contract.at("/entry"), hint="give the component an `entries` list with its role")


def _order(components: list[Component], spec: PipelineSpec, sink: DiagnosticSink) -> list[Component] | None:
    if not spec.components:
        return list(components)
    by_name = {c.name: c for c in components}
    missing = [n for n in spec.components if n not in by_name]
    extra = [c.name for c in components if c.name not in spec.components]
    import difflib
    for n in missing:
        close = difflib.get_close_matches(n, extra, n=1, cutoff=0.6)
        sink.error("PL001", f"the pipeline names component '{n}', but no input provides it",
                   spec.at(f"/components/{spec.components.index(n)}"),
                   hint=(f"did you mean '{close[0]}'? " if close else "") + "inputs provide: " + ", ".join(by_name))
    for n in extra:
        if any(difflib.get_close_matches(m, [n], n=1, cutoff=0.6) for m in missing):
            continue  # the misspelling above says it
        sink.error("PL001", f"input component '{n}' is not in the pipeline", spec.at("/components"),
                   hint=f"add '{n}' to the pipeline's components, or leave its object out of the link")
    return None if missing or extra else [by_name[n] for n in spec.components]


def _geometry(comps: list[Component], spec: PipelineSpec, sink: DiagnosticSink) -> dict[str, int]:
    """Every geometry name's link-time value: the provider's, else the pipeline's (`geometry`: a value of the
    kernel, or what the other components of a larger layer provide), else the consumer's default."""
    env: dict[str, int] = {}
    for c in comps:
        env.update(c.contract.geometry.provides)  # conflicts were reported by check (PL050)
    consumed = {name for c in comps for name in c.contract.geometry.consumes}
    provided = set(env)
    for name, value in sorted(spec.geometry.items()):
        where = spec.at(f"/geometry/{name}")
        if name in env:
            owner = next(c.name for c in comps if name in c.contract.geometry.provides)
            sink.error("PL180", f"the pipeline sets geometry {name} = {value}, which '{owner}' provides "
                       f"({env[name]})", where, hint="a pipeline gives only what no component of the link provides")
        elif name not in consumed:
            import difflib
            open_names = sorted(consumed - provided)
            close = difflib.get_close_matches(name, open_names, n=1, cutoff=0.6)
            sink.error("PL180", f"the pipeline sets geometry {name}, which no component of the link consumes", where,
                       hint=(f"did you mean {close[0]}? " if close else "") + "the pipeline may set: " +
                            (", ".join(open_names) or "nothing (every consumed name is provided)"))
        else:
            env[name] = value
    for c in comps:
        for name, rng in c.contract.geometry.consumes.items():
            if name not in env:
                if rng.default is None:
                    sink.error("PL052", f"'{c.name}' consumes {name}, but no component provides it and the contract "
                               "gives no default", c.contract.at(f"/geometry/consumes/{name}"))
                    continue
                env[name] = rng.default
            if not rng.admits(env[name]) and name in spec.geometry:  # the pipeline's value (its file or an option)
                sink.error("PL051", f"'{c.name}' accepts {name} {rng.describe()}, but the pipeline gives it "
                           f"{env[name]}", spec.at(f"/geometry/{name}"),
                           related=(c.contract.at(f"/geometry/consumes/{name}"),),
                           hint=f"give {name} a value {rng.describe()}")
            elif not rng.admits(env[name]):  # a default taken from another consumer
                sink.error("PL051", f"'{c.name}' accepts {name} {rng.describe()}, but the link gives it "
                           f"{env[name]} (another consumer's default)", c.contract.at(f"/geometry/consumes/{name}"),
                           hint=f"give {name} a value {rng.describe()} in the pipeline's geometry")
    return env


def _at(e: Expr, geometry) -> str:
    """`TILE_M // 16` with the link's values of its names, for a message."""
    values = ", ".join(f"{n}={geometry[n]}" for n in sorted(e.names) if n in geometry)
    return f"{e.text!r} with {values}" if values else repr(e.text)


def _threads_at(c: Component, geometry, sink: DiagnosticSink):
    """The component's warps at the link's geometry, checked as the loader checks them at its defaults:
    every count evaluates to 1..32, the roles add up, a warpgroup-aligned role has whole warpgroups."""
    t = c.contract.threads
    if t.warps_expr is None and all(r.warps_expr is None for r in t.roles):
        return t
    ok = True
    implied = "roles" not in c.contract.raw.get("threads", {})  # one role of threads.warps: said there, once
    for e, ptr, what in [(t.warps_expr, "/threads/warps", "threads.warps")] + [
            (r.warps_expr, f"{r.pointer_path}/warps", f"role '{r.name}' warps") for r in t.roles if not implied]:
        if e is None:
            continue
        try:
            value = e.evaluate(geometry)
        except ExprError as exc:
            sink.error("PL028", f"{what} {_at(e, geometry)} cannot be evaluated at this link's geometry: {exc}",
                       c.contract.at(ptr))
            ok = False
            continue
        if not 1 <= value <= 32:
            sink.error("PL023", f"{what} {_at(e, geometry)} is {value} at this link's geometry; a component has 1..32 "
                       "warps", c.contract.at(ptr), hint="the warps must be 1..32 for every geometry value the contract "
                       "accepts: narrow the consumed range")
            ok = False
    if not ok:
        return t
    at = t.at(geometry)
    total = sum(r.warps for r in at.roles)
    if total != at.warps:
        sink.error("PL023", f"threads.warps is {at.warps} at this link's geometry but the roles add up to {total} "
                   f"({' + '.join(str(r.warps) for r in at.roles)})", c.contract.at("/threads/warps"))
    for r in at.roles:
        if r.warps_expr is not None and r.warpgroup_aligned and r.warps % 4:
            sink.error("PL024", f"role '{r.name}' warps {_at(r.warps_expr, geometry)} is {r.warps}; a warpgroup-aligned "
                       "role needs a multiple of 4", c.contract.at(f"{r.pointer_path}/warps"))
    return at


def _tensor_map_boxes(comps: list[Component], geometry, sink: DiagnosticSink) -> None:
    """Tensor-map boxes at the link's geometry: what the manifest will carry must suit the TMA (PL105)."""
    from ..core.loader import box_problems
    for c in comps:
        for p in c.contract.entry.params:
            if p.tensor_map is None or all(e.names <= c.contract.geometry.provides.keys() for e in p.tensor_map.box):
                continue  # a box over the component's own constants was checked when it loaded
            box = []
            for j, e in enumerate(p.tensor_map.box):
                ptr = f"{p.pointer_path}/tensor_map/box/{j}"
                try:
                    value = e.evaluate(geometry)
                except ExprError as exc:
                    sink.error("PL028", f"tensor map '{p.name}': box extent {_at(e, geometry)} cannot be evaluated at "
                               f"this link's geometry: {exc}", c.contract.at(ptr))
                    value = None
                if value is not None and value < 1:
                    sink.error("PL105", f"tensor map '{p.name}': box extent {_at(e, geometry)} is {value} at this "
                               "link's geometry; the TMA moves 1..256 per extent", c.contract.at(ptr))
                    value = None
                box.append(value)
            names = sorted({n for e in p.tensor_map.box for n in e.names})
            for pointer, message, hint in box_problems(p, box):
                sink.error("PL105", f"{message} at this link's geometry ({', '.join(f'{n}={geometry[n]}' for n in names)})",
                           c.contract.at(pointer), hint=hint)


def _explicit_wires(specs, by_name, sink) -> list[tuple[WireSpec, bool]]:
    out = []
    into: dict[tuple[str, str], WireSpec] = {}
    for w in specs:
        ok = True
        first = into.setdefault((w.consumer, w.in_port), w)
        if first is not w and (first.producer, first.out_port) == (w.producer, w.out_port):
            if w.where is not None and first.where is not None:  # listed twice in the file: say so, link it once
                sink.warning("PL193", f"wire '{w}' is listed twice; it is one wire", w.where, related=(first.where,),
                             hint="drop the second listing")
            continue  # the same wire again (a --wire the file already has): one wire
        if first is not w:  # the last wire had won silently, the other producer's output never read
            sink.error("PL192", f"input port '{w.consumer}.{w.in_port}' is wired from '{first.producer}.{first.out_port}' "
                       f"and from '{w.producer}.{w.out_port}'", w.where, related=(first.where,) if first.where else ())
            ok = False
        for comp, port, direction in ((w.producer, w.out_port, "out"), (w.consumer, w.in_port, "in")):
            c = by_name.get(comp)
            p = c.contract.port(port) if c else None
            if c is None:
                sink.error("PL062", f"wire '{w}' names component '{comp}', which is not in the link", w.where,
                           hint="components: " + ", ".join(by_name))
                ok = False
            elif p is None or p.direction != direction or p.space not in ("smem", "reg"):
                have = [q.name for q in c.contract.ports if q.direction == direction and q.space in ("smem", "reg")]
                hint = f"its {direction} ports: {', '.join(have) or 'none'}"
                if p is not None and p.space == "gmem":  # named and declared: only not something a wire carries
                    hint = (f"'{port}' is a global-memory port: those are not wired; components share a buffer "
                            "through a kernel parameter of one name (and order its reads behind its writes with an "
                            "event); " + hint)
                sink.error("PL062", f"wire '{w}': '{comp}' has no shared-memory or register {direction} port '{port}'",
                           c.contract.at(p.pointer_path if p is not None else "/ports"), hint=hint,
                           related=(w.where,) if w.where else ())
                ok = False
        if ok:
            out.append((w, True))
    return out


def _auto_wires(comps, explicit, sink) -> list[tuple[WireSpec, bool]]:
    """Each unwired smem input takes the smem output of another component with its dtype, when
    exactly one such output is not already feeding an input (an output feeds one input unless
    wired explicitly). Inputs are taken in pipeline order, so a chain wires itself."""
    wired = {(w.consumer, w.in_port) for w, _ in explicit}
    feeding = {(w.producer, w.out_port) for w, _ in explicit}
    out = []
    for c in comps:
        for p in c.contract.ports:
            if p.direction != "in" or p.space not in ("smem", "reg") or (c.name, p.name) in wired:
                continue
            cands = [(o.name, q) for o in comps if o.name != c.name for q in o.contract.ports
                     if q.direction == "out" and q.space == p.space and q.dtype == p.dtype]
            free = [(n, q) for n, q in cands if (n, q.name) not in feeding]
            if len(free) == 1 or len(cands) == 1:
                prod, q = free[0] if len(free) == 1 else cands[0]
                text = f"{prod}.{q.name}->{c.name}.{p.name}"
                out.append((WireSpec(prod, q.name, c.name, p.name, text), False))
                feeding.add((prod, q.name))
            elif not cands:
                sink.error("PL060", f"input port '{c.name}.{p.name}' ({p.dtype}) has no producer: no other component "
                           f"has a {'register' if p.space == 'reg' else 'shared-memory'} {p.dtype} output", c.contract.at(p.pointer_path))
            else:
                sink.error("PL061", f"input port '{c.name}.{p.name}' could take any of "
                           f"{', '.join(f'{n}.{q.name}' for n, q in (free or cands))}", c.contract.at(p.pointer_path))
    return out


def _infer_schedule(wires, by_name, geometry) -> str:
    """Multi-stage ports mean a ring between concurrent warps; otherwise steps on the same warps."""
    for w, _ in wires:
        stages = by_name[w.producer].contract.port(w.out_port).stages
        try:
            if stages.evaluate(geometry) > 1:
                return "warp_specialized"
        except ExprError:
            continue
    return "sequential"


def _check_wire(ws: WireSpec, explicit: bool, by_name, schedule: str, geometry, sink) -> Wire | None:
    prod, cons = by_name[ws.producer], by_name[ws.consumer]
    out, inp = prod.contract.port(ws.out_port), cons.contract.port(ws.in_port)
    where, other = cons.contract.at(inp.pointer_path), prod.contract.at(out.pointer_path)
    ok = True
    if out.dtype != inp.dtype:
        sink.error("PL063", f"wire '{ws}': '{ws.producer}' produces {out.dtype}, '{ws.consumer}' expects {inp.dtype}",
                   where, related=(other,))
        ok = False
    try:
        t_out, t_in = _values(out.tile, geometry), _values(inp.tile, geometry)
        s_out, s_in = out.stages.evaluate(geometry), inp.stages.evaluate(geometry)
    except ExprError:
        return None  # a geometry value is missing: reported as PL052
    if t_out != t_in:
        # the same extents in another order (a transposed tile): the order is the fix, not the values
        order = sorted(t_out) == sorted(t_in) and len(t_out) > 1
        sink.error("PL064", f"wire '{ws}': '{ws.producer}' produces tiles {_shape(out.tile, t_out)}, "
                   f"'{ws.consumer}' expects {_shape(inp.tile, t_in)}"
                   + (" (the same extents in another order)" if order else ""), where, related=(other,),
                   hint=("list the consumer's tile dimensions in the producer's order (the port's `tile` is outermost "
                         "first) and read the tile transposed in code, or wire a transform between them"
                         if order else None))
        ok = False
    if s_out != s_in:
        sink.error("PL066", f"wire '{ws}': '{ws.producer}' has {s_out} stages, '{ws.consumer}' expects {s_in}",
                   where, related=(other,))
        ok = False
    same_layout = (out.layout, out.swizzle) == (inp.layout, inp.swizzle)
    if out.space != inp.space:
        sink.error("PL062", f"wire '{ws}' joins a {out.space} port to a {inp.space} port", where, related=(other,))
        return None
    if out.space == "reg":
        if out.fragment != inp.fragment:
            sink.error("PL102", f"fragment '{ws}': '{ws.producer}' holds layout {out.fragment}, '{ws.consumer}' reads "
                       f"{inp.fragment}", where, related=(other,))
            ok = False
        return Wire(ws.producer, out, ws.consumer, inp, "fragment", 1, tuple(t_out), explicit) if ok else None
    if schedule == "warp_specialized":
        kind = "ring"
        if not same_layout:
            sink.error("PL065", f"wire '{ws}': '{ws.producer}' writes {out.layout}/{out.swizzle}, '{ws.consumer}' "
                       f"reads {inp.layout}/{inp.swizzle}, and the two run concurrently", where, related=(other,))
            ok = False
    else:
        kind = "zero_copy" if same_layout else "relayout"
        if not same_layout and (len(t_out) != 2 or out.swizzle != "none" or inp.swizzle != "none" or s_out != 1):
            sink.error("PL065", f"wire '{ws}': no re-layout from {out.layout}/{out.swizzle} to "
                       f"{inp.layout}/{inp.swizzle} for this tile", where, related=(other,))
            ok = False
    return Wire(ws.producer, out, ws.consumer, inp, kind, s_out, tuple(t_out), explicit) if ok else None


def _one_stage_count_per_component(comps, wires, sink) -> None:
    """A component's rings share its tile loop, and so its slot index: one stage count for all."""
    for c in comps:
        rings = [w for w in wires if c.name in (w.producer, w.consumer)]
        counts = sorted({w.stages for w in rings})
        if len(counts) > 1:
            sink.error("PL066", f"'{c.name}' sits on rings of {' and '.join(map(str, counts))} stages "
                       f"({', '.join(f'{w} x{w.stages}' for w in rings)}); its tile loop has one slot index",
                       c.contract.at("/ports"))


def _values(exprs: tuple[Expr, ...], geometry) -> list[int]:
    return [e.evaluate(geometry) for e in exprs]


def _shape(exprs, values) -> str:
    return "[" + ", ".join(f"{e}={v}" if not e.is_constant else str(v) for e, v in zip(exprs, values)) + "]"


def _topological(comps, wires, sink, written: dict | None = None) -> list[str] | None:
    """The components in wire order; PL068 at the cycle's wires as the pipeline wrote them, where it did."""
    from .graph import dependency_order
    order, cycle = dependency_order([c.name for c in comps], [(w.producer, w.consumer, str(w)) for w in wires])
    if order is None:
        places = [where for _, _, label in cycle if (where := (written or {}).get(label)) is not None]
        sink.error("PL068", f"the wires form a cycle: {' -> '.join(a for a, _, _ in cycle)} "
                   f"({', '.join(label for _, _, label in cycle)})", places[0] if places else None,
                   related=tuple(places[1:]))
    return order


def _tile_sequence(comps, schedule: str, sink, given: dict | None = None) -> tuple[tuple[TileSequence, str] | None, dict]:
    """One tile loop serves every component, so every declared sequence must agree with the first
    of the lowest rank, the kernel's. In the sequential schedule a component whose grid is the
    kernel's plus trailing dimensions (a loader's 2-d tiles under a row-block consumer's 1-d grid)
    walks those in an inner loop inside each kernel tile, on the same CTA: (sequence, owner) and
    {component: the inner extents} of every such component (and of the components wired to it
    that declare no sequence of their own)."""
    declared = [(c, c.contract.geometry.tile_sequence) for c in comps if c.contract.geometry.tile_sequence]
    if not declared:
        sink.error("PL072", "no component declares a tile sequence, so the kernel does not know its tiles",
                   comps[0].contract.at("/geometry"))
        return None, {}
    rank = min(len(seq.grid) for _, seq in declared)
    (first, seq), geometry = next((c, s) for c, s in declared if len(s.grid) == rank), {}
    if seq.distribution == "queue":
        sink.error("PL078", f"'{first.name}' distributes its tiles through a queue; this linker schedules tiles "
                   "statically (grid_stride, blocked) only", first.contract.at(f"{seq.pointer_path}/distribution"))
    for c in comps:
        geometry.update(c.contract.geometry.provides)
    for k, v in (given or {}).items():  # the pipeline's `geometry`
        geometry.setdefault(k, v)
    for c in comps:
        for k, r in c.contract.geometry.consumes.items():
            geometry.setdefault(k, r.default)
    nested, inner_first = {}, None
    for c, other in declared:
        if c is first:
            continue
        why = _sequence_difference(seq, other, geometry)
        if why and len(other.grid) > rank and schedule == "sequential":
            why = _nesting_difference(seq, other, geometry)
            if not why and inner_first is not None:  # one inner loop shape serves every nested component
                why = _sequence_difference(inner_first[1], other, geometry)
                why = why and f"{why} (against the nested '{inner_first[0].name}')"
            if not why:
                nested[c.name] = other.grid[rank:]
                inner_first = inner_first or (c, other)
                continue
        if why:
            hint = None
            if len(other.grid) != rank:
                hint = ("a coarser grid may take a finer one's tiles in an inner loop in the sequential schedule "
                        "(the finer grid is the coarser one plus trailing dimensions, walked row-major); across "
                        "CTAs, give each its own grid in a persistent pipeline and order them with an event "
                        "(`ij->i`)")
            sink.error("PL067", f"'{c.name}' walks its tiles differently from '{first.name}': {why}",
                       c.contract.at(other.pointer_path), related=(first.contract.at(seq.pointer_path),), hint=hint)
    return (seq, first.name), nested


def _nesting_difference(outer: TileSequence, inner: TileSequence, geometry) -> str | None:
    """Why `inner` cannot run nested in `outer`'s tiles: its leading dimensions must be `outer`'s grid,
    and it walks its trailing ones row-major (its own order and distribution then mean nothing else)."""
    if inner.order != "row_major":
        return f"a nested grid walks its extra dimensions row-major, not {inner.order}"
    if inner.distribution != outer.distribution:
        return f"distribution {inner.distribution} against {outer.distribution}"
    lead = TileSequence(inner.grid[:len(outer.grid)], outer.order, outer.distribution, inner.pointer_path)
    why = _sequence_difference(outer, lead, geometry)
    return why and f"its leading dimensions differ from the kernel's grid: {why}"


def _wires_within_levels(comps, wires, nested: dict, sink) -> None:
    """A component without a sequence of its own runs where the components it is wired to run; a
    shared-memory tile never crosses between the inner loop and the kernel's tiles (PL172): a
    coarser reader would see the last inner tile only, and the bytes of a coarser producer are not
    kept across the inner loop."""
    if not nested:
        return
    declared = {c.name for c in comps if c.contract.geometry.tile_sequence}
    for _ in comps:  # to a fixed point along the wires
        for w in wires:
            for a, b in ((w.producer, w.consumer), (w.consumer, w.producer)):
                if a in nested and b not in nested and b not in declared:
                    nested[b] = nested[a]
    by_name = {c.name: c for c in comps}
    for w in wires:
        if (w.producer in nested) != (w.consumer in nested):
            inner, outer = (w.producer, w.consumer) if w.producer in nested else (w.consumer, w.producer)
            sink.error("PL172", f"wire '{w}' hands a shared-memory tile between '{inner}', which walks an inner loop "
                       f"of tiles, and '{outer}', which runs once per kernel tile",
                       by_name[w.consumer].contract.at(w.in_port.pointer_path),
                       related=(by_name[w.producer].contract.at(w.out_port.pointer_path),))


def _persistent_sequences(comps, wires, sink, chosen: tuple = ()) -> tuple[TileSequence, str] | None:
    """In a persistent kernel each component walks its own task grid; tasks of different components
    may run on different CTAs, so they meet through global memory and events, never shared memory."""
    for w in wires:
        sink.error("PL085", f"wire '{w}' joins two components of a persistent kernel through shared memory, but "
                   "their tasks may run on different CTAs", next(c for c in comps if c.name == w.consumer).contract.at(
                       w.in_port.pointer_path), related=chosen)
    first = None
    for c in comps:
        seq = c.contract.geometry.tile_sequence
        if seq is None:
            sink.error("PL072", f"'{c.name}' declares no tile sequence: a persistent kernel runs each component's "
                       "tasks over its own grid", c.contract.at("/geometry"), related=chosen)
        elif seq.distribution == "queue":
            sink.error("PL078", f"'{c.name}' asks for the queue distribution; choose the pipeline's dispatch "
                       "(static or dynamic) instead", c.contract.at(f"{seq.pointer_path}/distribution"))
        elif first is None:
            first = (seq, c.name)
    return first


def _sequence_difference(a: TileSequence, b: TileSequence, geometry) -> str | None:
    if len(a.grid) != len(b.grid):
        return f"a {len(b.grid)}-d grid against a {len(a.grid)}-d one"
    if a.order != b.order:
        return f"order {b.order} against {a.order}"
    if a.order == "grouped" and a.group != b.group:  # bands of another height: another walk
        return f"grouped in bands of {b.group} against bands of {a.group}"
    if a.distribution != b.distribution:
        return f"distribution {b.distribution} against {a.distribution}"
    shapes = sorted({n for e in a.grid + b.grid for n in e.names} - set(geometry))
    for values in itertools.islice(itertools.product(SAMPLE_SHAPES, repeat=len(shapes)), 400):
        env = dict(geometry, **dict(zip(shapes, values)))
        try:
            ga, gb = [e.evaluate(env) for e in a.grid], [e.evaluate(env) for e in b.grid]
        except ExprError:
            continue
        if ga != gb:
            shown = ", ".join(f"{k}={v}" for k, v in zip(shapes, values))
            return (f"grid [{', '.join(map(str, b.grid))}] = {gb} against [{', '.join(map(str, a.grid))}] = {ga} "
                    f"at {shown}")
    return None


def _params(comps, sink) -> list[KernelParam]:
    """The fused kernel's parameters: every component's, merged by name."""
    merged: dict[str, KernelParam] = {}
    first: dict[str, Component] = {}
    for c in comps:
        for p in c.contract.entry.params:
            have = merged.get(p.name)
            if have is None:
                merged[p.name] = KernelParam(p.name, p.dtype, p.pointer, p.const, (c.name,), p.tensor_map)
                first[p.name] = c
            elif have.tensor_map != p.tensor_map and (have.tensor_map is None or p.tensor_map is None or
                                                      _tmap_key(have.tensor_map) != _tmap_key(p.tensor_map)):
                sink.error("PL069", f"parameter '{p.name}' is declared differently by '{c.name}' and "
                           f"'{first[p.name].name}' (one tensor map for both, or neither)",
                           c.contract.at(p.pointer_path))
            elif (have.dtype, have.pointer) != (p.dtype, p.pointer):
                sink.error("PL069", f"parameter '{p.name}' is {_kind(p.dtype, p.pointer)} in '{c.name}' but "
                           f"{_kind(have.dtype, have.pointer)} in '{first[p.name].name}'",
                           c.contract.at(p.pointer_path),
                           related=(first[p.name].contract.at(first[p.name].contract.param(p.name).pointer_path),))
            else:
                merged[p.name] = replace(have, const=have.const and p.const, users=have.users + (c.name,))
    for c in comps:  # what each user declares of the buffer behind a pointer: extents (views may differ), alignment
        for p in c.contract.entry.params:
            have = merged[p.name]
            if p.shape is not None and all(tuple(map(str, p.shape)) != tuple(map(str, s)) for s in have.shapes):
                merged[p.name] = replace(have, shapes=have.shapes + (p.shape,))
        for port in c.contract.ports:
            if port.space == "gmem" and port.align and port.param in merged:
                have = merged[port.param]
                merged[port.param] = replace(have, align=max(have.align or 0, port.align))
    return list(merged.values())


def _layered_params(params: list[KernelParam], calls, sink, spec: PipelineSpec) -> list[KernelParam]:
    """A stacked tensor holds one copy per layer: its first extent times the layers. A named layer
    count is an i32 parameter of the kernel."""
    stacked = {kernel_name for (_, kernel_name) in calls.stacked}
    out = []
    for p in params:
        if p.name in stacked:
            p = replace(p, shapes=tuple((parse(f"({calls.layers}) * ({s[0].text})"),) + tuple(s[1:]) for s in p.shapes))
        out.append(p)
    if isinstance(calls.layers, str):
        have = next((p for p in out if p.name == calls.layers), None)
        if have is None:
            out.append(KernelParam(calls.layers, "i32", False, True, ()))
        elif have.pointer or have.dtype != "i32":
            sink.error("PL176", f"the layer count '{calls.layers}' is {_kind(have.dtype, have.pointer)} of "
                       f"'{have.users[0]}', not an i32", spec.at("/layers"))
    return out


def _tmap_key(t: TensorMapSpec) -> tuple:
    return (tuple(map(str, t.shape)), tuple(map(str, t.box)), t.swizzle, t.oob_fill)


def _kind(dtype: str, pointer: bool) -> str:
    return f"a {dtype} pointer" if pointer else f"a {dtype} scalar"
