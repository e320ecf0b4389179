"""Event tensors: plan them and prove at link time that every wait can be satisfied.

An event tensor is an array of counters whose shape is symbolic (fixed at launch). A component's
task (tile) notifies the elements its `notifies` map hits; a task waits until every element its
`waits` map hits has received its count. Counts are derived from the producers where the maps
are projections (`ij->i`: one per j), or given in the contract. The analysis is pure:

  - every waited event has a notifier, and the ranks agree          (PL081, PL082)
  - the component graph the events form has no cycle                  (PL080)
  - on sampled shapes, every index stays inside its tensor, and every
    waited element receives exactly the count its waiter expects    (PL084, PL083);
    where a map reads device data, a fixed count is at most what can
    reach the element                                                 (PL083)
  - a map or count that reads a tensor another component writes in this
    launch comes after a wait that orders it behind that writer     (PL086)

Waits run in the order the contract lists them: a later wait may read what an earlier one guards.
"""
from __future__ import annotations

import ast
import functools
import itertools
import math
from dataclasses import dataclass

from ..core.diagnostics import DiagnosticSink
from ..core.loader import DISTRIBUTED_NAMES as DISTRIBUTED
from ..core.expr import Expr, ExprError, parse, python_ast, python_code
from ..core.indexmap import IndexMap, parse_map

SAMPLES = (1, 2, 3, 5, 8, 33, 100)
WORLDS = (1, 2, 3, 4, 8)                    # the world sizes the analysis samples
MAX_SAMPLED_TASKS = 20000


@dataclass(frozen=True)
class Side:
    """One component's notify or wait on one event tensor."""

    component: str
    map: IndexMap
    grid: tuple[Expr, ...]     # the component's task grid
    count: Expr | None         # waits only: the count each element must reach (None: derived)
    pointer: str
    count_term: object = None  # waits only: the count is read per task from a device tensor
    position: int = 0          # index in the contract's list: waits run in this order
    tensor_shapes: tuple = ()  # (name, extents) of the device tensors the component's maps may read
    rank: Expr | None = None   # notifies only: the rank whose copy of the element a task notifies
    in_entry: bool = False     # waits only: the entry waits for each element itself (pl::in_entry), not the glue

    def reads(self) -> tuple[str, ...]:
        """Device tensors the map (and a device-read count) index."""
        return self.map.tensors + (tuple(self.count_term.tensors) if self.count_term is not None else ())


@dataclass
class EventTensor:
    name: str
    shape: tuple[Expr, ...]
    notifiers: list[Side]
    waiters: list[Side]

    @property
    def cross_rank(self) -> bool:
        """Some task notifies another rank's copy: every rank of a distributed link holds one."""
        return any(n.rank is not None for n in self.notifiers)

    def count_c(self, rename) -> str:
        """C expression of the count an element reaches when every producer task has notified it."""
        return " + ".join(_derived_count(n).to_c(rename) if _derived_count(n) else "0" for n in self.notifiers)


@dataclass
class EventPlan:
    tensors: dict[str, EventTensor]
    order: list[str]           # components in an order every wait respects

    def waits_of(self, component: str) -> list[tuple[EventTensor, Side]]:
        """In the contract's order: a wait may read a tensor an earlier wait guards."""
        found = [(t, w) for t in self.tensors.values() for w in t.waiters if w.component == component]
        return sorted(found, key=lambda tw: tw[1].position)

    def notifies_of(self, component: str) -> list[tuple[EventTensor, Side]]:
        return [(t, n) for t in self.tensors.values() for n in t.notifiers if n.component == component]


def plan_events(comps, geometry: dict[str, int], sink: DiagnosticSink) -> EventPlan | None:
    tensors: dict[str, EventTensor] = {}
    for comp in comps:
        c = comp.contract
        grid = c.geometry.tile_sequence.grid if c.geometry.tile_sequence else ()
        shaped = tuple((p.name, p.shape) for p in c.entry.params if p.shape)
        for n in c.events.notifies:
            t = tensors.setdefault(n.name, EventTensor(n.name, (), [], []))
            side = Side(c.name, parse_map(n.map), grid, None, n.pointer_path, tensor_shapes=shaped, rank=n.rank)
            shape = n.shape or _derived_shape(side)
            if shape is None:
                sink.error("PL081", f"'{c.name}' notifies '{n.name}' through {n.map!r}, whose extents cannot be "
                           "derived: give the event's shape", c.at(n.pointer_path))
                continue
            if not t.shape:
                t.shape = tuple(shape)
            elif len(t.shape) != len(shape):
                sink.error("PL082", f"'{c.name}' notifies '{n.name}' with rank {len(shape)}, another notifier with "
                           f"rank {len(t.shape)}", c.at(n.pointer_path))
            t.notifiers.append(side)
        for k, w in enumerate(c.events.waits):
            tensors.setdefault(w.name, EventTensor(w.name, (), [], [])).waiters.append(
                Side(c.name, parse_map(w.map), grid, w.count, w.pointer_path, w.count_term, k, shaped,
                     in_entry=w.in_entry))
    by_name = {comp.name: comp for comp in comps}
    for t in tensors.values():
        for w in t.waiters:
            where = by_name[w.component].contract.at(w.pointer)
            if not t.notifiers:
                sink.error("PL081", f"'{w.component}' waits for '{t.name}', which no component notifies", where,
                           hint="link the component that notifies it too; where an earlier launch notifies it, link "
                                "this kernel standalone (--standalone, pipeline `standalone`)")
            elif w.map.rank != len(t.shape):
                sink.error("PL082", f"'{w.component}' waits on '{t.name}' with rank {w.map.rank}; the event has rank "
                           f"{len(t.shape)}", where)
            if w.in_entry and t.cross_rank:
                sink.error("PL207", f"'{w.component}' waits in its entry on '{t.name}', which other ranks notify", where,
                           hint="let the glue wait for an event other ranks add to (drop in_entry): it reads the "
                                "counter at system scope")
            if w.in_entry and any(n.component == w.component for n in t.notifiers):
                sink.error("PL207", f"'{w.component}' waits in its entry on '{t.name}', which it notifies itself", where,
                           hint="let the glue wait for a chain (drop in_entry): it orders the component's own tasks")
            if w.count is None and w.count_term is None and any(_derived_count(n) is None for n in t.notifiers):
                sink.error("PL083", f"the count '{w.component}' waits for on '{t.name}' cannot be derived from "
                           f"{', '.join(repr(n.map.text) for n in t.notifiers)}: give it in the contract", where)
    if sink.has_errors:
        return None
    order = _order(comps, tensors, sink)
    if order is None:
        return None
    _check_chains(comps, tensors, geometry, sink)
    _check_read_order(comps, tensors, sink)
    _check_sampled(comps, tensors, geometry, sink)
    if not sink.has_errors:
        _check_vacuous(comps, tensors, geometry, sink)
    return None if sink.has_errors else EventPlan(tensors, order)


def distributed_use(comps, tensors) -> tuple[str, str] | None:
    """(component, JSON pointer) of the first place a contract uses RANK or WORLD or notifies another rank's
    copy of an event: what only a distributed link can run."""
    for comp in comps:
        seq = comp.contract.geometry.tile_sequence
        if seq and any(e.names & DISTRIBUTED for e in seq.grid):
            return comp.name, "/geometry/tile_sequence/grid"
        for p in comp.contract.entry.params:  # a buffer sized by the world (a rank's slice, a slot per rank)
            extents = (p.shape or ()) + (p.tensor_map.shape if p.tensor_map else ())
            if any(e is not None and e.names & DISTRIBUTED for e in extents):
                return comp.name, p.pointer_path + ("/tensor_map/shape" if p.tensor_map and not p.shape else "/shape")
    for t in tensors.values():
        for side in t.notifiers + t.waiters:
            if side.rank is not None or side.map.names & DISTRIBUTED or (
                    side.count is not None and side.count.names & DISTRIBUTED):
                return side.component, side.pointer
    return None


def _check_read_order(comps, tensors, sink) -> None:
    """A map or count reading tensor X, which another component C writes (X is a non-const pointer
    of C), must follow a wait on an event notified by C or by a component that waits (directly or
    not) on C. Notifies run after all of the task's waits."""
    writers: dict[str, set[str]] = {}
    for comp in comps:
        for p in comp.contract.entry.params:
            if p.pointer and not p.const:
                writers.setdefault(p.name, set()).add(comp.name)
    from .graph import downstream
    after = downstream([c.name for c in comps], _edges(tensors))  # after[C]: components ordered behind C
    by_name = {c.name: c for c in comps}
    for comp in comps:
        waits = sorted(((t, w) for t in tensors.values() for w in t.waiters if w.component == comp.name),
                       key=lambda tw: tw[1].position)
        notifies = [(t, n) for t in tensors.values() for n in t.notifiers if n.component == comp.name]
        for i, (t, side) in enumerate(waits + notifies):
            guards = waits[:i] if i < len(waits) else waits
            # an in-entry wait guards what the entry reads after it, not what the glue reads (a map or count)
            notifiers = {n.component for g, w in guards if not w.in_entry for n in g.notifiers}
            for tensor in side.reads():
                for writer in sorted(writers.get(tensor, set()) - {comp.name}):
                    if not any(n == writer or n in after[writer] for n in notifiers):
                        verb = "waits on" if i < len(waits) else "notifies"
                        sink.error("PL086", f"'{comp.name}' {verb} '{t.name}' through {side.map.text!r}, reading "
                                   f"'{tensor}', which '{writer}' writes in this launch; no earlier wait orders the "
                                   f"read after '{writer}', so it can see values of a previous launch",
                                   by_name[comp.name].contract.at(side.pointer))


def shared_writes(a: str, b: str, access: dict[str, dict[str, bool]], skip=frozenset()) -> list[tuple[str, str]]:
    """The tensors components (or calls) a and b both take, one of them writing it (access[name][tensor]: True
    where it writes), but those in `skip`: (tensor, what each does with it), for PL178. One rule for both walks,
    a link's components (check_component_hazards) and its calls over two layers (calls.check_hazards)."""
    out = []
    for tensor in sorted(access[a].keys() & access[b].keys()):
        if tensor in skip or not (access[a][tensor] or access[b][tensor]):
            continue  # both only read it
        verb = lambda n: "writes" if access[n][tensor] else "reads"  # noqa: E731
        out.append((tensor, f"'{b}' {verb(b)} '{tensor}', which '{a}' {verb(a)}"))
    return out


def check_component_hazards(comps, plan: "EventPlan", sink) -> None:
    """A persistent link of components (no `calls`): two components that share a pointer parameter, one of them
    writing it (not const), run their tasks at once on different CTAs unless an event orders one behind the
    other (directly or through others). PL178 at the later one's parameter, as for calls."""
    from .graph import downstream
    names = [c.name for c in comps]
    after = downstream(names, _edges(plan.tensors))
    by_name = {c.name: c for c in comps}
    order = {name: i for i, name in enumerate(plan.order or names)}
    access = {c.name: {p.name: not p.const for p in c.contract.entry.params if p.pointer} for c in comps}
    for a, b in ((a, b) for a in names for b in names if order.get(a, 0) < order.get(b, 0)):
        if b in after[a] or a in after[b]:
            continue
        said = shared_writes(a, b, access)
        if said:
            tensor = said[0][0]
            sink.error("PL178", f"nothing orders '{b}' after '{a}' (no event between them), so their tasks may run "
                       f"at once on different CTAs: {'; '.join(s for _, s in said)}",
                       by_name[b].contract.at(by_name[b].contract.param(tensor).pointer_path),
                       related=(by_name[a].contract.at(by_name[a].contract.param(tensor).pointer_path),),
                       hint=f"have '{b}' wait on an event that '{a}' notifies (contract `events`, docs/contract.md), "
                            f"or list them as `calls` with \"after\": [\"{a}\"] on '{b}'")


def _derived_shape(side: Side) -> tuple[Expr, ...] | None:
    """A projection map's event extents are the task grid's extents of the dimensions it keeps."""
    out = []
    for term in side.map.terms:
        if term.kind != "index" or term.text not in side.map.task_dims:
            return None
        out.append(side.grid[side.map.task_dims.index(term.text)])
    return tuple(out)


def _derived_count(side: Side) -> Expr | None:
    """How many of this notifier's tasks hit one element: the product of the extents of the task
    dimensions the map drops (projection maps, ':' broadcasts), or None where it is not uniform (or
    the tasks of other ranks send some: how many depends on the world)."""
    if side.rank is not None:
        return None
    used = set()
    for term in side.map.terms:
        if term.kind == "all":
            continue
        if term.kind != "index" or term.text not in side.map.task_dims:
            return None
        used.add(term.text)
    dropped = [side.grid[i] for i, d in enumerate(side.map.task_dims) if d not in used]
    if not dropped:
        return parse(1)
    return parse(" * ".join(f"({e.text})" for e in dropped))


def _edges(tensors) -> list[tuple[str, str, str]]:
    """(notifier, waiter, event) for every pair of components the events connect. A component
    waiting on its own notifications (a chain) is no edge: `_check_chains` orders its tasks."""
    return [(n.component, w.component, t.name) for t in tensors.values() for n in t.notifiers for w in t.waiters
            if n.component != w.component]


def task_coords(order: str, extents: tuple[int, ...], t: int, group: int = 8) -> tuple[int, ...]:
    """The coordinates of the `t`-th task a component walks, as the glue decodes them (glue._tile_from):
    row_major and snake move the last coordinate fastest (snake reverses it on odd rows), col_major the
    first; grouped walks bands of `group` rows, rows fastest inside a band."""
    n = len(extents)
    if order == "grouped" and n == 2:
        band_tiles = group * extents[1]
        first = (t // band_tiles) * group
        rows = min(group, extents[0] - first)
        inside = t - (first // group) * band_tiles
        return first + inside % rows, inside // rows
    coords, rest = [0] * n, t
    for d in (reversed(range(n)) if order in ("row_major", "snake", "grouped") else range(n)):
        coords[d], rest = rest % extents[d], rest // extents[d]
    if order == "snake" and n >= 2 and coords[n - 2] & 1:
        coords[n - 1] = extents[n - 1] - 1 - coords[n - 1]
    return tuple(coords)


def _elements(side: Side, task, env, shape: list[int]):
    """Every element of the event an affine side names for one task (':' is the whole axis)."""
    axes = []
    for k, term in enumerate(side.map.terms):
        values = range(shape[k]) if term.kind == "all" else _axis_values(term, side.map.task_dims, task, env)
        axes.append(range(max(values.start, 0), min(values.stop, shape[k])) if isinstance(values, range) else
                    [v for v in values if 0 <= v < shape[k]])  # no element outside the shape is notified or waited
    return itertools.product(*axes)


def _check_chains(comps, tensors, geometry, sink) -> None:
    """A component that waits on its own notifications (a scan, a prefix sum, carried state) is
    deadlock-free when each task waits only on tasks walked before it: both dispatches run a
    component's tasks in walk order (static: each CTA its own tasks in order, every CTA resident;
    dynamic: claimed in order from one counter), so the earliest unfinished task always runs and
    everything it waits on has finished. Checked on sampled shapes, task by task."""
    by_name = {c.name: c for c in comps}
    names = _shape_names(comps, tensors, geometry)
    reported = set()
    for t in tensors.values():
        for w in t.waiters:
            own = [n for n in t.notifiers if n.component == w.component]
            if not own or (w.component, t.name) in reported:
                continue
            where = by_name[w.component].contract.at(w.pointer)
            if w.map.kind == "data_dependent" or any(n.map.kind == "data_dependent" for n in own) \
                    or w.count_term is not None:
                sink.error("PL171", f"'{w.component}' waits on '{t.name}', which it notifies itself, through a map or "
                           "count read from the device; the link cannot tell that each task waits only on tasks "
                           "walked before it", where)
                reported.add((w.component, t.name))
                continue
            seq = by_name[w.component].contract.geometry.tile_sequence
            for values in _sample_shapes(names, geometry):
                env = dict(geometry, **dict(zip(names, values)))
                problem = _chain_problem(w, own, t, env, seq)
                if problem:
                    at = ", ".join(f"{k}={v}" for k, v in zip(names, values))
                    sink.error("PL170", f"'{w.component}' task {problem[0]} waits on '{t.name}'{list(problem[1])}, "
                               f"which its own task {problem[2]} notifies, walked {problem[3]} it (at {at}): the "
                               "wait can never end", where)
                    reported.add((w.component, t.name))
                    break


def _chain_problem(w: Side, own: list[Side], t: EventTensor, env, seq):
    """(waiting task, element, notifying task, "with" | "after") for the first task of `w` that waits
    on an element its own component notifies from the same or a later task; None when all are
    earlier (or the shape cannot be enumerated)."""
    try:
        extents = tuple(e.evaluate(env) for e in w.grid)
        shape = [e.evaluate(env) for e in t.shape]
    except ExprError:
        return None
    total = math.prod(extents)
    if total > MAX_SAMPLED_TASKS // 4:
        return None
    walk = [task_coords(seq.order, extents, k, seq.group) for k in range(total)]
    try:
        return _first_wait_on_itself(w, own, env, shape, walk)
    except ZeroDivisionError:  # a divisor the sampled shape makes zero: not enumerable on this shape
        return None


def _first_wait_on_itself(w: Side, own: list[Side], env, shape: list[int], walk: list[tuple]):
    last: dict[tuple, tuple[int, tuple]] = {}  # element -> (latest position notifying it, that task)
    for pos, task in enumerate(walk):
        for n in own:
            for e in _elements(n, task, env, shape):
                if e not in last or last[e][0] < pos:
                    last[e] = (pos, task)
    for pos, task in enumerate(walk):
        for e in _elements(w, task, env, shape):
            if e in last and last[e][0] >= pos:
                return task, e, last[e][1], "with" if last[e][0] == pos else "after"
    return None


def _order(comps, tensors, sink) -> list[str] | None:
    from .graph import dependency_order
    order, cycle = dependency_order([c.name for c in comps], _edges(tensors))
    if order is None:
        text = " -> ".join(f"{a} ({event})" for a, _, event in cycle) + f" -> {cycle[0][0]}"
        comp = next(c for c in comps if c.name == cycle[0][0])
        sink.error("PL080", f"the events form a cycle: {text}; no task of the cycle can start", comp.contract.at("/events"))
    return order


def _shape_names(comps, tensors, geometry) -> list[str]:
    names = set()
    for t in tensors.values():
        for e in t.shape:
            names |= e.names
        for s in t.notifiers + t.waiters:
            names |= s.map.names
            for e in s.grid:
                names |= e.names
            if s.count is not None:
                names |= s.count.names
            if s.rank is not None:
                names |= s.rank.names - set(s.map.task_dims)
            for _, extents in s.tensor_shapes:
                for e in extents:
                    names |= e.names
    return sorted(names - set(geometry))


def _check_sampled(comps, tensors, geometry, sink) -> None:
    """Evaluate every map on small shapes: indices in range, counts equal to what waiters expect.

    Affine maps (`ij->i`, `i->i,:`, `i->range(i - 1, i + 2)`) are evaluated exactly. A map that
    reads device data is bounded instead: a gathered slot names one element per task, a range
    read from a tensor each element at most once per task, and its affine terms still pin their
    axes. A fixed count above the bound can never be met; a count read from the device is not
    checked here (the link map says so, and --debug-events reports a wait that never ends).

    Where the contracts use RANK and WORLD or notify other ranks, the shapes are sampled on worlds of
    WORLDS ranks: every rank's tasks send to the copy of their destination rank, and each rank's waiters
    are checked against what reaches its copy."""
    by_name = {c.name: c for c in comps}
    names = _shape_names(comps, tensors, geometry)
    distributed = bool(set(names) & DISTRIBUTED) or any(t.cross_rank for t in tensors.values())
    names = [n for n in names if n not in DISTRIBUTED]
    reported = set()

    def once(key, code, message, side, hint=None):
        if key not in reported:
            reported.add(key)
            sink.error(code, message, by_name[side.component].contract.at(side.pointer), hint=hint)
    once.reported = reported

    for values in _sample_shapes(names, geometry):
        base = dict(geometry, **dict(zip(names, values)))
        at, before = ", ".join(f"{k}={v}" for k, v in zip(names, values)), len(sink.errors)
        for c in comps:  # a negative extent is no task grid: its events' checks would blame the other side
            seq = c.contract.geometry.tile_sequence
            for i, e in enumerate(seq.grid if seq else ()):
                try:
                    n = e.evaluate(dict(base, RANK=0, WORLD=1))
                except ExprError:
                    continue
                if n < 0 and (c.name, i) not in reported:
                    reported.add((c.name, i))
                    sink.error("PL032", f"'{c.name}' has a task grid extent {e.text!r} = {n} at {at}: a grid extent "
                               "is a count of tasks, never negative", c.contract.at(f"{seq.pointer_path}/grid/{i}"),
                               hint="write the extent so that it counts tasks (0 or more) for every shape the "
                                    "component accepts")
        if len(sink.errors) > before:
            return
        for world in (WORLDS if distributed else (None,)):
            env = base if world is None else dict(base, WORLD=world)
            at = ", ".join(f"{k}={v}" for k, v in zip(names, values)) + (f", WORLD={world}" if world else "")
            for t in tensors.values():
                for side in (*t.notifiers, *t.waiters):
                    _report_reads_outside(side, env if world is None else dict(env, RANK=0), at, once)
                try:  # every rank's copy has the same extents (the workspace is symmetric): rank 0's
                    shape = [e.evaluate(dict(env, RANK=0)) for e in t.shape]
                except ExprError:
                    continue
                if world is None:
                    reach = {}
                    for n in t.notifiers:
                        reach[n] = r = _reach(n, env, shape)
                        _report_outside(t, n, r, at, once, shape)
                    _check_waiters(t, env, at, shape, reach, once)
                    continue
                for rank, reach in _reach_by_rank(t, env, world, shape, at, once).items():
                    _check_waiters(t, dict(env, RANK=rank), f"{at}, RANK={rank}", shape, reach, once)


def _check_vacuous(comps, tensors, geometry, sink) -> None:
    """A map the sampled shapes cannot tell anything about, because it does the same nothing at every one of
    them: its first task divides by zero at every shape (`i->i // (M - M)`: a fault on the device at every
    launch, PL031), or a wait names no element for any task at any shape (`i->range(i + 1, i)`: it orders
    nothing, and the race checks, which take an event as an order, would be wrong; PL083)."""
    by_name = {c.name: c for c in comps}
    names = [n for n in _shape_names(comps, tensors, geometry) if n not in DISTRIBUTED]
    shapes = [dict(geometry, RANK=0, WORLD=1, **dict(zip(names, values)))
              for values in _sample_shapes(names, geometry)]
    for t in tensors.values():
        for side in (*t.notifiers, *t.waiters):
            where = by_name[side.component].contract.at(side.pointer)
            index = [term.text for term in side.map.terms if term.kind == "index"]
            known = tuple(sorted(side.map.names))
            if index and side.map.task_dims:
                fn = _map_function(tuple(side.map.task_dims), tuple(index), known)
                tried, fine = 0, False
                for env in shapes:
                    if any(n not in env for n in known):
                        continue
                    tried += 1
                    try:
                        fn(*(0,) * len(side.map.task_dims), *(env[n] for n in known))
                    except ZeroDivisionError:
                        continue
                    except Exception:  # noqa: BLE001 - not this check's to judge
                        pass
                    fine = True
                    break
                if tried and not fine:
                    sink.error("PL031", f"'{side.component}''s map {side.map.text!r} on '{t.name}' divides by zero "
                               "at every sampled shape (its first task, at least): on the device that is a fault at "
                               "every launch", where, hint="fix the divisor of the map's index terms")
                    continue
            if side in t.waiters and side.map.kind != "data_dependent" and side.count_term is None:
                named = tried = 0
                for env in shapes:
                    try:
                        shape = [e.evaluate(env) for e in t.shape]
                        tasks = math.prod(e.evaluate(env) for e in side.grid)
                    except ExprError:
                        continue
                    if not 0 < tasks <= MAX_SAMPLED_TASKS or not all(x > 0 for x in shape):
                        continue
                    r = _reach(side, env, shape)
                    if r is None:
                        continue
                    tried += 1
                    named += bool(r.counts)
                if tried and not named:
                    sink.error("PL083", f"'{side.component}' waits on '{t.name}' through {side.map.text!r}, which "
                               "names no element for any task at any sampled shape: the wait orders nothing",
                               where, hint="fix the map's range (its end after its start), or drop the wait")


def _report_reads_outside(side: Side, env: dict, at: str, once) -> None:
    """Every element a map or a device-read count reads lies inside the extents its contract gives the tensor (what
    the launcher checks the argument holds): `cnt[e]` over E tasks with `cnt` declared [1] read past it. PL084."""
    from ..core.indexmap import tensor_reads
    terms = (*side.map.terms, *((side.count_term,) if side.count_term is not None else ()))
    shapes = dict(side.tensor_shapes)
    for tensor, subs in (read for term in terms for read in tensor_reads(term)):
        declared = shapes.get(tensor)
        pinned = [k for k, sub in enumerate(subs) if sub != ":"]
        if declared is None or len(declared) != len(subs) or not pinned:
            continue
        try:
            extents = [e.evaluate(env) for e in declared]
        except ExprError:
            continue
        tasks = _tasks(side, env)
        if tasks is None:
            continue
        fn = _map_function(tuple(side.map.task_dims), tuple(subs[k] for k in pinned))
        try:
            for task in tasks:
                values = dict(zip(pinned, fn(*task)))
                if all(0 <= v < extents[k] for k, v in values.items()):
                    continue
                shown = ", ".join(str(values.get(k, ":")) for k in range(len(subs)))
                once(("read", side.component, side.pointer, tensor), "PL084",
                     f"'{side.component}' task {task} reads '{tensor}'[{shown}] outside the shape its contract gives "
                     f"'{tensor}', {extents} (at {at}): the launcher checks only that many elements", side,
                     hint=f"give '{tensor}' the extents its reads span (its parameter's shape), or fix the subscript")
                break
        except ArithmeticError:  # a divisor the sampled shape makes zero
            continue


def _report_outside(t: EventTensor, n: Side, r, at: str, once, shape: list[int]) -> None:
    if r is not None and r.outside:
        task, idx = r.outside
        once(("range", n.component, t.name), "PL084", f"'{n.component}' task {task} notifies '{t.name}'{idx} "
             f"outside its shape {shape} (at {at})", n)


def _reach_by_rank(t: EventTensor, env: dict, world: int, shape: list[int], at: str, once) -> dict[int, dict]:
    """{rank: {notifier: what reaches that rank's copy}}: every rank's tasks, each sending to the copy of its
    destination rank (its own where the contract names none); None where a side cannot be enumerated."""
    out: dict[int, dict] = {rank: {} for rank in range(world)}
    for source in range(world):
        env_r = dict(env, RANK=source)
        for n in t.notifiers:
            for rank, r in _reach_to(n, env_r, shape, world, t, at, once).items():
                mine = out[rank]
                mine[n] = r if n not in mine else _merged(mine[n], r)
    return out


def _reach_to(n: Side, env: dict, shape: list[int], world: int, t: EventTensor, at: str, once) -> dict[int, object]:
    """What one rank's tasks of `n` send, by destination rank."""
    if n.rank is None:
        r = _reach(n, env, shape)
        _report_outside(t, n, r, at, once, shape)
        return {env["RANK"]: r}
    tasks = _tasks(n, env)
    if tasks is None:
        return {rank: None for rank in range(world)}
    names = tuple(sorted(n.rank.names - set(n.map.task_dims)))
    fn = _map_function(tuple(n.map.task_dims), (n.rank.text,), names)  # compiled once: called per task
    try:
        fixed = tuple(env[name] for name in names)
    except KeyError:
        return {rank: None for rank in range(world)}
    groups: dict[int, list] = {}
    for task in tasks:
        try:
            (rank,) = fn(*task, *fixed)
        except (ArithmeticError, TypeError):
            return {rank: None for rank in range(world)}
        if not 0 <= rank < world:
            once(("rank", n.component, t.name), "PL084", f"'{n.component}' task {task} on rank {env['RANK']} notifies "
                 f"'{t.name}' on rank {rank}, outside the world of {world} (at {at})", n)
            continue
        groups.setdefault(rank, []).append(task)
    out = {}
    for rank in range(world):
        out[rank] = r = _reach(n, env, shape, groups.get(rank, []))
        _report_outside(t, n, r, at, once, shape)
    return out


def _merged(a, b):
    """Two ranks' sends to one copy, added."""
    if a is None or b is None:
        return None
    counts = dict(a.counts)
    first = dict(b.first or {})
    first.update(a.first or {})
    for key, c in b.counts.items():
        counts[key] = counts.get(key, 0) + c
    return _Reach(a.axes, counts, a.exact and b.exact, a.outside or b.outside, first)


def _check_waiters(t: EventTensor, env: dict, at: str, shape: list[int], reach: dict, once) -> None:
    """Every waiter of `t` on one sampled shape (one rank's copy), against what its notifiers send."""
    counted = None not in reach.values()  # every notifier's tasks were enumerated
    exact = counted and all(r.exact for r in reach.values())
    for w in t.waiters:
        key = (w.component, t.name)
        expected = _expected(t, w, env) if w.count_term is None else None
        if w.map.kind == "data_dependent":
            r = _reach(w, env, shape)
            if r is not None and r.outside:
                task, idx = r.outside
                once(key, "PL084", f"'{w.component}' task {task} waits on '{t.name}'{idx} outside its "
                     f"shape {shape} (at {at})", w)
            most = sum(r.most() for r in reach.values()) if counted else None
            if expected is not None and most is not None and expected > most:
                once(key, "PL083", f"'{w.component}' waits for {expected} notifications of each '{t.name}' "
                     f"element it reads through {w.map.text!r}, but at most {most} can reach any element "
                     f"({_senders(t)}; at {at}): the wait would never end", w)
            continue
        r = _reach(w, env, shape)
        if r is None:
            continue
        if r.outside:
            task, idx = r.outside
            once(key, "PL084", f"'{w.component}' task {task} waits on '{t.name}'{idx} outside its shape "
                 f"{shape} (at {at})", w)
            continue
        if expected is None or not counted:
            continue
        for idx, task in _waited(r, shape):
            got = sum(n.at(idx) for n in reach.values())
            where = f"'{w.component}' task {task} waits for {expected} notifications of '{t.name}'{list(idx)}"
            if exact and got != expected:
                once(key, "PL083", f"{where}, but the producers send {got} (at {at}): " +
                     ("the wait would never end" if got < expected else
                      "it would start before its inputs are complete"), w)
            elif not exact and expected > got:
                once(key, "PL083", f"{where}, but at most {got} can reach it ({_senders(t)}; at {at}): "
                     "the wait would never end", w)
            if key in once.reported:
                break


def _senders(t: EventTensor) -> str:
    return ", ".join(f"{n.component} {n.map.text!r}" for n in t.notifiers)


@dataclass
class _Reach:
    """What one side's tasks send to (or ask of) the elements of its event, on one sampled shape."""
    axes: tuple[int, ...]         # the axes the map pins per task: affine terms and affine ranges
    counts: dict[tuple, int]      # coordinates on those axes -> notifications to each such element
    exact: bool                   # False: `counts` is an upper bound (the map reads device data)
    outside: tuple | None = None  # (task, element) of the first pinned index outside the tensor
    first: dict = None            # coordinates -> the first task that names them

    def at(self, idx) -> int:
        return self.counts.get(tuple(idx[a] for a in self.axes), 0)

    def most(self) -> int:
        return max(self.counts.values(), default=0)


def _reach(side: Side, env, shape: list[int], tasks=None) -> _Reach | None:
    """Notifications per element from every task of `side`, or None where the tasks (or a gathered
    tensor's extents) cannot be enumerated on this shape. An axis the map does not pin (':', a
    gather, a range read from a tensor) is the same for every element along it: ':' names each
    element once per task, a range read from a tensor at most once, a gather at most once per
    gathered slot (all of a task's slots may hold the same value)."""
    m = side.map
    axes = tuple(k for k, term in enumerate(m.terms) if term.kind == "index" or
                 (term.kind == "range" and not term.reads_device))
    per_task = 1
    for k, term in enumerate(m.terms):
        if term.kind == "all" and (k >= len(shape) or shape[k] <= 0):
            return _Reach(axes, {}, m.kind != "data_dependent", None, {})  # an empty axis: no element at all
        if term.kind == "gather":
            slots = _gathered_slots(side, term.text, env)
            if slots is None:
                return None
            per_task *= slots
    tasks = _tasks(side, env) if tasks is None else tasks  # (given: the tasks that send to one rank's copy)
    if tasks is None:
        return None
    if not axes:  # nothing pinned: every task counts towards every element
        keys = lambda task: ((),)  # noqa: E731
    elif all(m.terms[a].kind == "index" for a in axes):  # one key per task: one call of the compiled map
        names = tuple(sorted(m.names))
        fn = _map_function(tuple(m.task_dims), tuple(m.terms[a].text for a in axes), names)
        fixed = tuple(env[n] for n in names)
        keys = lambda task: (fn(*task, *fixed),)  # noqa: E731
    else:
        keys = lambda task: itertools.product(*(_clamped(_axis_values(m.terms[a], m.task_dims, task, env),  # noqa: E731
                                                         shape[a] if a < len(shape) else None) for a in axes))
    counts: dict[tuple, int] = {}
    first: dict[tuple, tuple] = {}  # the first task that names each key: many tasks share one
    try:
        for task in tasks:
            for key in keys(task):
                if key not in counts:
                    counts[key] = 0
                    first[key] = task
                counts[key] += per_task
    except ZeroDivisionError:  # a divisor the sampled shape makes zero: not enumerable on this shape
        return None
    outside = None
    for key in [k for k in counts if not all(0 <= v < shape[a] for v, a in zip(k, axes))]:
        del counts[key]
        if outside is None or first[key] < outside[0]:
            shown = dict(zip(axes, key))
            outside = (first[key], "[" + ", ".join(str(shown.get(k, ":")) for k in range(m.rank)) + "]")
    return _Reach(axes, counts, m.kind != "data_dependent", outside, first)


def _clamped(values, extent: int | None):
    """An affine range's coordinates inside [0, extent), and its first one outside (if any) to stand for the rest:
    `range(0, 2**31)` on an axis of 8 is 8 coordinates and one outside (PL084), not two billion to enumerate."""
    if extent is None or not isinstance(values, range) or (values.start >= 0 and values.stop <= extent):
        return values
    inside = range(max(values.start, 0), min(values.stop, extent))
    outside = [v for v in (values.start if values.start < 0 else None, extent if values.stop > extent else None)
               if v is not None and values.start <= v < values.stop][:1]
    return itertools.chain(inside, outside)


def _axis_values(term, dims: tuple[str, ...], task: tuple[int, ...], env: dict):
    """The coordinates an affine term (one) or an affine range (an interval) names for a task."""
    local = {n: env[n] for n in term.names}
    local.update(zip(dims, task))
    if term.kind == "range":
        lo, hi = (int(eval(_compiled(b), _AFFINE_GLOBALS, local)) for b in _range_bounds(term.text))
        return range(lo, hi)
    return (int(eval(_compiled(term.text), _AFFINE_GLOBALS, local)),)


@functools.lru_cache(maxsize=None)
def _range_bounds(text: str) -> tuple[str, str]:
    return tuple(ast.unparse(a) for a in python_ast(text).body.args)


def _gathered_slots(side: Side, text: str, env) -> int | None:
    """Values a gather term reads per task: the product of the tensor's extents at its ':'."""
    node = python_ast(text).body
    items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    shape = dict(side.tensor_shapes).get(node.value.id)
    if shape is None or len(shape) != len(items):
        return None
    try:
        return math.prod(shape[k].evaluate(env) for k, item in enumerate(items) if isinstance(item, ast.Slice))
    except ExprError:
        return None


def _sample_shapes(names: list[str], geometry: dict[str, int]) -> list[tuple[int, ...]]:
    """Shapes to evaluate the maps on: small ones, and ones just around multiples of every tile
    size (where ceil and floor part ways). The diagonal plus a fixed pseudo-random selection."""
    import random
    values = set(SAMPLES)
    for g in set(geometry.values()):
        values |= {g - 1, g, g + 1, 2 * g + 1, 3 * g - 1} - {0}
    values = sorted(v for v in values if v > 0)
    combos = [tuple(v for _ in names) for v in values]
    rng = random.Random(0)
    combos += [tuple(rng.choice(values) for _ in names) for _ in range(48)]
    return list(dict.fromkeys(combos)) if names else [()]


def _expected(t: EventTensor, w: Side, env) -> int | None:
    try:
        if w.count is not None:
            return w.count.evaluate(env)
        return sum(_derived_count(n).evaluate(env) for n in t.notifiers)
    except (ExprError, AttributeError):
        return None


def _tasks(side: Side, env):
    """Every task of the side's grid on this shape; None where it cannot be evaluated or is too big."""
    try:
        extents = [e.evaluate(env) for e in side.grid]
    except ExprError:
        return None
    if math.prod(extents) > MAX_SAMPLED_TASKS:
        return None
    return itertools.product(*(range(n) for n in extents))


def _waited(r: _Reach, shape: list[int]):
    """(element, first task waiting on it) for every element an affine waiter names: its pinned
    coordinates, each ':' axis walked over the tensor's extent."""
    for key, task in r.first.items():
        if key not in r.counts:
            continue  # outside the tensor: reported as PL084
        pinned = dict(zip(r.axes, key))
        axes = [(pinned[k],) if k in pinned else range(shape[k]) for k in range(len(shape))]
        for idx in itertools.product(*axes):
            yield idx, task


# What an affine term may call: clamps, and ceil_div as size expressions spell it.
_AFFINE_GLOBALS = {"__builtins__": {}, "min": min, "max": max, "ceil_div": lambda a, b: -(-a // b)}


@functools.lru_cache(maxsize=None)
def _map_function(dims: tuple[str, ...], terms: tuple[str, ...], names: tuple[str, ...] = ()):
    """`ij->i,min(j+1,N-1)` as `lambda i, j, N: (i, min(j+1,N-1),)` (the terms are affine: letters,
    integers, + - * // %, clamps, and the launch's sizes in `names`)."""
    return eval(f"lambda {', '.join(dims + names)}: ({', '.join(terms)},)", _AFFINE_GLOBALS)


@functools.lru_cache(maxsize=None)
def _compiled(affine: str):
    """An affine term, compiled once: the sampled analysis evaluates it for every task."""
    return python_code(affine, "<map>")


def task_invariant(side) -> bool:
    """Whether every task of a wait side waits on the same element for the same count: the glue then
    waits once per CTA, and the link map says so."""
    dims = set(side.map.task_dims)
    if side.in_entry or side.count_term is not None or any(t.kind != "index" for t in side.map.terms):
        return False
    if any(parse(t.text).names & dims for t in side.map.terms):
        return False
    return side.count is None or not (side.count.names & dims)
