"""Event tensors: plan them and prove at link time that every wait can be satisfied.

An event tensor is an array of counters whose shape is symbolic (fixed at launch). A component's
task (tile) notifies the elements its `notifies` map hits; a task waits until every element its
`waits` map hits has received its count. Counts are derived from the producers where the maps
are projections (`ij->i`: one per j), or given in the contract. The analysis is pure:

  - every waited event has a notifier, and the ranks agree          (PL081, PL082)
  - the component graph the events form has no cycle                  (PL080)
  - on sampled shapes, every index stays inside its tensor, and every
    waited element receives exactly the count its waiter expects    (PL084, PL083)
  - a map or count that reads a tensor another component writes in this
    launch comes after a wait that orders it behind that writer     (PL086)

Waits run in the order the contract lists them: a later wait may read what an earlier one guards.
"""
from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

from .diagnostics import DiagnosticSink
from .expr import Expr, ExprError
from .indexmap import IndexMap, parse_map

SAMPLES = (1, 2, 3, 5, 8, 33, 100)
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

    def reads(self) -> tuple[str, ...]:
        """Device tensors the map (and a device-read count) index."""
        return self.map.tensors + (tuple(self.count_term.tensors) if self.count_term is not None else ())


@dataclass
class EventTensor:
    name: str
    shape: tuple[Expr, ...]
    notifiers: list[Side]
    waiters: list[Side]

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
        for n in c.events.notifies:
            t = tensors.setdefault(n.name, EventTensor(n.name, (), [], []))
            side = Side(c.name, parse_map(n.map), grid, None, n.pointer_path)
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
                Side(c.name, parse_map(w.map), grid, w.count, w.pointer_path, w.count_term, k))
    by_name = {comp.name: comp for comp in comps}
    for t in tensors.values():
        for w in t.waiters:
            where = by_name[w.component].contract.at(w.pointer)
            if not t.notifiers:
                sink.error("PL081", f"'{w.component}' waits for '{t.name}', which no component notifies", where)
            elif w.map.rank != len(t.shape):
                sink.error("PL082", f"'{w.component}' waits on '{t.name}' with rank {w.map.rank}; the event has rank "
                           f"{len(t.shape)}", where)
            if w.count is None and w.count_term is None and any(_derived_count(n) is None for n in t.notifiers):
                sink.error("PL083", f"the count '{w.component}' waits for on '{t.name}' cannot be derived from "
                           f"{', '.join(repr(n.map.text) for n in t.notifiers)}: give it in the contract", where)
    if sink.has_errors:
        return None
    order = _order(comps, tensors, sink)
    if order is None:
        return None
    _check_read_order(comps, tensors, sink)
    _check_sampled(comps, tensors, geometry, sink)
    return None if sink.has_errors else EventPlan(tensors, order)


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
            notifiers = {n.component for g, _ in guards for n in g.notifiers}
            for tensor in side.reads():
                for writer in sorted(writers.get(tensor, set()) - {comp.name}):
                    if not any(n == writer or n in after[writer] for n in notifiers):
                        verb = "waits on" if i < len(waits) else "notifies"
                        sink.error("PL086", f"'{comp.name}' {verb} '{t.name}' through {side.map.text!r}, reading "
                                   f"'{tensor}', which '{writer}' writes in this launch; no earlier wait orders the "
                                   f"read after '{writer}', so it can see values of a previous launch",
                                   by_name[comp.name].contract.at(side.pointer))


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
    dimensions the map drops (projection maps, ':' broadcasts), or None where it is not uniform."""
    from .expr import parse
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
    """(notifier, waiter, event) for every pair the events connect."""
    return [(n.component, w.component, t.name) for t in tensors.values() for n in t.notifiers for w in t.waiters]


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
            for e in s.grid:
                names |= e.names
            if s.count is not None:
                names |= s.count.names
    return sorted(names - set(geometry))


def _check_sampled(comps, tensors, geometry, sink) -> None:
    """Evaluate every map on small shapes: indices in range, counts equal to what waiters expect."""
    by_name = {c.name: c for c in comps}
    names = _shape_names(comps, tensors, geometry)
    reported = set()
    for values in _sample_shapes(names, geometry):
        env = dict(geometry, **dict(zip(names, values)))
        at = ", ".join(f"{k}={v}" for k, v in zip(names, values))
        for t in tensors.values():
            if any(s.map.kind == "data_dependent" or s.count_term is not None for s in t.notifiers + t.waiters):
                continue  # data decide: checked at run time by the debug build
            try:
                shape = [e.evaluate(env) for e in t.shape]
            except ExprError:
                continue
            got: dict[tuple, int] = {}
            for n in t.notifiers:
                for task, idx in _hits(n, env, shape):
                    if not _inside(idx, shape):
                        key = ("range", n.component, t.name)
                        if key not in reported:
                            reported.add(key)
                            sink.error("PL084", f"'{n.component}' task {task} notifies '{t.name}'{list(idx)} "
                                       f"outside its shape {shape} (at {at})",
                                       by_name[n.component].contract.at(n.pointer))
                        continue
                    got[idx] = got.get(idx, 0) + 1
            for w in t.waiters:
                expected = _expected(t, w, env)  # the same for every task of this waiter
                key = (w.component, t.name)
                for task, idx in _hits(w, env, shape):
                    if key in reported:
                        break
                    if not _inside(idx, shape):
                        reported.add(key)
                        sink.error("PL084", f"'{w.component}' task {task} waits on '{t.name}'{list(idx)} outside "
                                   f"its shape {shape} (at {at})", by_name[w.component].contract.at(w.pointer))
                    elif expected is not None and got.get(idx, 0) != expected:
                        reported.add(key)
                        sink.error("PL083", f"'{w.component}' task {task} waits for {expected} notifications of "
                                   f"'{t.name}'{list(idx)}, but the producers send {got.get(idx, 0)} (at {at}): "
                                   "the wait would never end" if got.get(idx, 0) < expected else
                                   f"'{w.component}' task {task} waits for {expected} notifications of "
                                   f"'{t.name}'{list(idx)}, but the producers send {got.get(idx, 0)} (at {at}): "
                                   "it would start before its inputs are complete",
                                   by_name[w.component].contract.at(w.pointer))


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
    try:
        extents = [e.evaluate(env) for e in side.grid]
    except ExprError:
        return []
    if math.prod(extents) > MAX_SAMPLED_TASKS:
        return []
    return itertools.product(*(range(n) for n in extents))


def _hits(side: Side, env, shape: list[int]):
    """(task, element) for every element every task of `side` hits, on shape `env`."""
    m = side.map
    if all(term.kind != "all" for term in m.terms):  # one element per task: one call of the compiled map
        fn = _map_function(tuple(m.task_dims), tuple(term.text for term in m.terms))
        for task in _tasks(side, env):
            yield task, fn(*task)
        return
    for task in _tasks(side, env):
        for idx in _indices(m, task, shape):
            yield task, idx


def _indices(m: IndexMap, task: tuple[int, ...], shape: list[int]):
    """The event elements one task hits (affine and ':' terms only)."""
    if all(term.kind != "all" for term in m.terms):  # one element: one call of the map compiled once
        return [_map_function(tuple(m.task_dims), tuple(term.text for term in m.terms))(*task)]
    env = dict(zip(m.task_dims, task))
    axes = []
    for k, term in enumerate(m.terms):
        if term.kind == "all":
            axes.append(range(shape[k]) if k < len(shape) else range(0))
        else:
            axes.append([int(eval(_compiled(term.text), {"__builtins__": {}}, env))])
    return itertools.product(*axes)


@functools.lru_cache(maxsize=None)
def _map_function(dims: tuple[str, ...], terms: tuple[str, ...]):
    """`ij->i,j+1` as `lambda i, j: (i, j+1,)` (the terms are affine: letters, integers, + - * // %)."""
    return eval(f"lambda {', '.join(dims)}: ({', '.join(terms)},)", {"__builtins__": {}})


@functools.lru_cache(maxsize=None)
def _compiled(affine: str):
    """An affine term, compiled once: the sampled analysis evaluates it for every task."""
    return compile(affine, "<map>", "eval")


def _inside(idx, shape) -> bool:
    return len(idx) == len(shape) and all(0 <= i < n for i, n in zip(idx, shape))
