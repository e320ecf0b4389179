"""Calls: a persistent kernel's task groups, each one component run with its parameters bound.

A pipeline with `calls` may run a component several times (a decoder layer's two norms, its two
residual GEMVs) and repeat a block of calls once per layer. A call is its component's contract,
renamed: its name, the kernel parameters bound to the component's parameters (in every expression
that names them: shapes, grids, event maps and counts) and its events (resolve gives a `stacked`
tensor its first extent times the layer count). The object code is the component's, unchanged; the
glue passes each call its bound arguments (a stacked one at its layer's copy). So every later pass checks and
plans a call as it would a component, and a call's mistakes are located in its component's contract.

A call that binds one tensor to two pointer parameters, one of them written, is checked on the binding
before the rename makes them one parameter (PL200, core/aliasing.py): only the written parameter's
`may_alias` allows it, for a component written to update the tensor in place.

`after` becomes an event the linker adds: every task of the earlier call notifies it, every task of
the later one waits until all have (in the same layer, for two per-layer calls). Events that no call
waits for are dropped: nobody pays an atomic for them.

Pure: components and the pipeline in, renamed components and the `CallPlan` out.
"""
from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field, replace

from ..core.aliasing import undeclared_sharing
from ..core.diagnostics import DiagnosticSink
from ..core.loader import load_contract_dict
from ..core.model import Component
from ..core.pipeline import CallSpec, PipelineSpec
from .events import shared_writes

AFTER_EVENT = "pl_after_{}"
_IDENT = re.compile(r"(?<![\w.])[A-Za-z_]\w*")
_LETTERS = "ijklmnpqrs"


@dataclass(frozen=True)
class CallPlan:
    """What the glue and the manifest need beyond the renamed components."""

    layers: str | int | None                  # the layer count: an i32 parameter's name or a number
    before: tuple[str, ...]                   # calls before the layer loop, in order
    per_layer: tuple[str, ...]                # the loop's calls, in order
    after_loop: tuple[str, ...]               # calls after it
    # (call, kernel parameter) -> the extents of one layer's copy (C text over the kernel's names)
    stacked: dict = field(default_factory=dict)
    previous: dict = field(default_factory=dict)  # call -> calls whose previous layer it waits for
    bind: dict = field(default_factory=dict)      # call -> {component parameter: kernel parameter}
    where: dict = field(default_factory=dict)     # call -> its place in the pipeline file (diagnostics)
    components: dict = field(default_factory=dict)  # call -> the component it calls

    @property
    def order(self) -> tuple[str, ...]:
        return self.before + self.per_layer + self.after_loop

    def layered(self, call: str) -> bool:
        return call in self.per_layer

    def layers_c(self) -> str:
        return str(self.layers)


def layered_events(plan: CallPlan | None, events) -> set[str]:
    """Events with one copy of their counters per layer: those a per-layer call notifies."""
    if plan is None or events is None:
        return set()
    return {t.name for t in events.tensors.values() if any(plan.layered(n.component) for n in t.notifiers)}


def check_event_order(plan: CallPlan, events, by_name: dict, sink: DiagnosticSink) -> None:
    """Calls run in the order listed, a layer at a time: an event's notifier is one call, at or before its
    waiters (at: a chain), both per-layer or neither (a call after the loop may wait for the last layer)."""
    order = {name: i for i, name in enumerate(plan.order)}
    for t in events.tensors.values():
        notifiers = sorted({n.component for n in t.notifiers}, key=order.get)  # one: expand_calls checked
        for w in t.waiters:
            where = by_name[w.component].contract.at(w.pointer)
            if notifiers and order[notifiers[0]] > order[w.component]:
                sink.error("PL176", f"'{w.component}' waits for '{t.name}', which '{notifiers[0]}' notifies later: "
                           "calls run in the order listed", where)
            elif notifiers and plan.layered(w.component) and not plan.layered(notifiers[0]) and \
                    notifiers[0] not in plan.before:
                sink.error("PL176", f"per-layer '{w.component}' waits for '{t.name}' of '{notifiers[0]}', which runs "
                           "after the layer loop", where)


def check_hazards(plan: CallPlan, events, by_name: dict, sink: DiagnosticSink, one_layer: bool = False) -> None:
    """Every two calls that touch one kernel tensor, one of them writing it (a pointer parameter not declared
    const), must be ordered by the events between them: else their tasks run at once on different CTAs and
    race. Checked on two consecutive layers (a later layer's calls against an earlier one's, where a tensor is
    not stacked), the calls before the loop and after it; an event orders calls as a whole (the link's sampled
    checks make every producer task reach some waiter). `one_layer`: the link fixes the layer count at 1, so no
    layer follows another."""
    layers = (0, 1) if plan.per_layer and not one_layer else (0,)
    nodes = [(n, 0) for n in plan.before] + [(n, l) for l in layers for n in plan.per_layer] + \
            [(n, 0) for n in plan.after_loop]
    index = {node: i for i, node in enumerate(nodes)}

    def copies(name):
        return [(name, l) for l in layers] if plan.layered(name) else [(name, 0)]
    succ = {node: set() for node in nodes}
    for t in events.tensors.values():
        for n in {x.component for x in t.notifiers}:
            for w in {x.component for x in t.waiters}:
                for a in copies(n):
                    for b in copies(w):
                        same = a[1] == b[1] or not (plan.layered(n) and plan.layered(w))
                        if same and index[a] < index[b]:
                            succ[a].add(b)
    for consumer, producers in plan.previous.items():
        for p in producers:
            for l in layers[1:]:
                succ[(p, l - 1)].add((consumer, l))
    reach = {}
    for node in reversed(nodes):  # edges go forward in the walk: one pass from the back
        reach[node] = set(succ[node])
        for nxt in succ[node]:
            reach[node] |= reach[nxt]
    stacked = {kernel_name for (_, kernel_name) in plan.stacked}
    access = {}
    for name in plan.order:
        c = by_name[name].contract
        access[name] = {p.name: (not p.const) for p in c.entry.params if p.pointer}
    races: dict[tuple[str, str, bool], list[str]] = {}   # (earlier, later, next layer) -> tensors
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            if (a[0] == b[0] and a[1] == b[1]) or b in reach[a]:
                continue  # one call's own tasks in a layer are its contract's business (chains); or ordered
            next_layer = b[1] > a[1] and plan.layered(a[0]) and plan.layered(b[0])
            # a stacked tensor's layers are different copies
            for _, said in shared_writes(a[0], b[0], access, stacked if next_layer else frozenset()):
                found = races.setdefault((a[0], b[0], next_layer), [])
                if said not in found:
                    found.append(said)
    if any(next_layer for (_, _, next_layer) in races) and not plan.previous:
        (a, b, _), said = next((k, v) for k, v in races.items() if k[2])
        sink.error("PL178", f"nothing orders a layer after the one before it, so their tasks may run at once on "
                   f"different CTAs, e.g. '{b}' of the next layer after '{a}': {said[0]}",
                   plan.where.get(plan.per_layer[0]),
                   hint=f"add \"after_previous_layer\": [\"{plan.per_layer[-1]}\"] to '{plan.per_layer[0]}'")
        races = {k: v for k, v in races.items() if not k[2]}
    for (a, b, next_layer), said in races.items():
        if (a, b, False) in races and next_layer:
            continue  # the same two calls race within a layer already
        where = " in the next layer" if next_layer else ""
        sink.error("PL178", f"nothing orders '{b}'{where} after '{a}', so their tasks may run at once on different "
                   f"CTAs: {'; '.join(said)}", plan.where.get(b),
                   hint=(f"add \"after_previous_layer\": [\"{a}\"] to '{b}' (or order a call between them)" if next_layer
                         else f"add \"after\": [\"{a}\"] to '{b}' (or to a call between them)"))


def rename_expr(text, names: dict[str, str], keep: frozenset = frozenset()):
    """`text` with every identifier in `names` replaced, but function names (`ceil_div(`) and `keep`."""
    if not isinstance(text, str):
        return text

    def sub(m: re.Match) -> str:
        word = m.group(0)
        if word in keep or text[m.end():].lstrip()[:1] == "(":
            return word
        return names.get(word, word)
    return _IDENT.sub(sub, text)


def rename_map(text: str, names: dict[str, str]) -> str:
    """An index map `dims->terms` with the parameters its terms read renamed (task letters stay)."""
    dims, sep, terms = text.partition("->")
    return dims + sep + rename_expr(terms, names, frozenset(dims.strip()))


def expand_calls(components: list[Component], spec: PipelineSpec,
                 sink: DiagnosticSink) -> tuple[list[Component], CallPlan] | None:
    """One renamed component per call, in call order, and the plan; None after any error."""
    by_name = {c.name: c for c in components}
    where = lambda call: call.where or spec.at("/calls")  # noqa: E731
    seen, used = set(), set()
    for call in spec.calls:
        if call.name in seen:
            sink.error("PL176", f"two calls are named '{call.name}'", where(call), hint="name every call differently")
        seen.add(call.name)
        if call.component not in by_name:
            sink.error("PL175", f"call '{call.name}' runs component '{call.component}', which is not an input",
                       where(call), hint="inputs: " + ", ".join(sorted(by_name)))
        used.add(call.component)
    for name in by_name:
        if name not in used:
            sink.error("PL176", f"input '{name}' is not called by any of the pipeline's calls",
                       spec.at("/calls"), hint=f"add a call of '{name}' or leave the input out")
    if sink.has_errors:
        return None
    plan = _plan(spec, sink)
    if plan is None:
        return None
    waited = _waited_events(spec, by_name)
    notifiers: dict[str, list[str]] = {}
    for call in spec.calls:
        rename = dict(call.events)
        for n in by_name[call.component].contract.events.notifies:
            notifiers.setdefault(rename.get(n.name, n.name), []).append(call.name)
    for event, who in notifiers.items():
        if event in waited and len(who) > 1:
            sink.error("PL176", f"event '{event}' is waited for, and calls {', '.join(who)} all notify it: which "
                       "one a wait means is ambiguous", spec.at("/calls"),
                       hint="give each call's event its own name (the call's `events`)")
    if sink.has_errors:
        return None
    stacked_by: dict[str, tuple[str, bool]] = {}   # kernel parameter -> (first call passing it, stacked there)
    out = []
    for call in spec.calls:
        comp = by_name[call.component]
        raw = _renamed_raw(comp, call, plan, waited, stacked_by, spec, sink)
        if raw is None:
            continue
        contract = load_contract_dict(raw, comp.contract.source, sink)
        if contract is not None:
            out.append(replace(comp, contract=contract, base=comp.code))
    extents: dict[str, tuple[str, tuple]] = {}
    for (call, kernel_name), ext in plan.stacked.items():  # the layers' copies lie one stride apart for all
        first = extents.setdefault(kernel_name, (call, ext))
        if first[1] != ext:
            sink.error("PL175", f"calls '{first[0]}' and '{call}' stack '{kernel_name}' with different extents per "
                       f"layer ({', '.join(first[1])} and {', '.join(ext)}), so they would find a layer's copy at "
                       "different places", next(c.where for c in spec.calls if c.name == call),
                       hint="declare the tensor with the same extents in both components (a capacity, not a length)")
    return None if sink.has_errors else (out, plan)


def _plan(spec: PipelineSpec, sink: DiagnosticSink) -> CallPlan | None:
    calls = list(spec.calls)
    index = {c.name: i for i, c in enumerate(calls)}
    layered = [i for i, c in enumerate(calls) if c.per_layer]
    top = spec.at("/calls")
    if layered and spec.layers is None:
        sink.error("PL176", "calls are marked per_layer, but the pipeline does not say how many layers", top,
                   hint='add "layers": the name of an i32 kernel parameter, or a number')
    if layered and layered != list(range(layered[0], layered[-1] + 1)):
        sink.error("PL176", "the per-layer calls are not consecutive: one loop runs them, layer after layer", top)
    for call in calls:
        at = call.where or top
        for p in call.after:
            if p not in index:
                sink.error("PL176", f"call '{call.name}' runs after '{p}', which is no call", at)
            elif index[p] >= index[call.name]:
                sink.error("PL176", f"call '{call.name}' runs after '{p}', which comes later (or is itself): calls run "
                           "in the order listed", at, hint="list the calls in the order their data flows")
            elif calls[index[p]].per_layer and not call.per_layer and index[p] > index[call.name]:
                sink.error("PL176", f"call '{call.name}' before the layer loop cannot wait for per-layer '{p}'", at)
        for p in call.after_previous_layer:
            if not call.per_layer:
                sink.error("PL176", f"call '{call.name}' waits for a previous layer, but is not per_layer", at)
            elif p not in index or not calls[index[p]].per_layer:
                sink.error("PL176", f"call '{call.name}' waits for the previous layer of '{p}', which is no per-layer "
                           "call", at)
        if call.stacked and not call.per_layer:
            sink.error("PL176", f"call '{call.name}' stacks {', '.join(call.stacked)} but is not per_layer: only a "
                       "per-layer call has a layer to pick", at)
    if sink.has_errors:
        return None
    first = layered[0] if layered else len(calls)
    last = layered[-1] + 1 if layered else len(calls)
    names = [c.name for c in calls]
    return CallPlan(spec.layers if layered else None, tuple(names[:first]), tuple(names[first:last]),
                    tuple(names[last:]), previous={c.name: c.after_previous_layer for c in calls
                                                   if c.after_previous_layer},
                    where={c.name: c.where for c in calls})


def _waited_events(spec: PipelineSpec, by_name) -> set[str]:
    """The pipeline names of every event some call waits for (its own, and the `after` ones)."""
    waited = set()
    for call in spec.calls:
        rename = dict(call.events)
        for w in by_name[call.component].contract.events.waits:
            waited.add(rename.get(w.name, w.name))
        waited |= {AFTER_EVENT.format(p) for p in call.after + call.after_previous_layer}
    return waited


def check_shared_tensors(component: str, call: CallSpec, params, spec: PipelineSpec, sink: DiagnosticSink) -> None:
    """PL200 for every two pointer parameters the call binds to one tensor where the entry writes one and its
    contract does not let them share it (core/aliasing.py), at the call's bind entry of the written one (or of the
    other, where the written one keeps its own name)."""
    bind = dict(call.bind)
    index = spec.calls.index(call)
    for s in undeclared_sharing(params, bind):
        key = s.written if s.written in bind else s.other
        where = spec.at(f"/calls/{index}/bind/{key}")
        if s.other_writes:
            sink.error("PL200", f"call '{call.name}' binds '{s.tensor}' to '{s.written}' and '{s.other}', which "
                       f"'{component}' both writes: the order of their stores is undefined", where,
                       hint=f"bind another tensor to '{s.other}' or '{s.written}' (may_alias lets a written parameter "
                       "share its tensor with const ones only)")
        else:
            sink.error("PL200", f"call '{call.name}' binds '{s.tensor}' to '{s.written}', which '{component}' "
                       f"writes, and to '{s.other}', which it reads: its contract does not let them share a tensor, "
                       f"so its code may take them as __restrict__ and read '{s.other}' stale or half written", where,
                       hint=f"bind another tensor to '{s.other}' or '{s.written}'; if '{component}' is written to "
                       f"update '{s.other}' in place, its contract says so: \"may_alias\": [\"{s.other}\"] on "
                       f"parameter '{s.written}'")


def _renamed_raw(comp: Component, call: CallSpec, plan: CallPlan, waited: set[str], stacked_by: dict,
                 spec: PipelineSpec, sink: DiagnosticSink) -> dict | None:
    """The component's contract document as this call's: renamed, stacked, with its `after` events."""
    c = comp.contract
    at = call.where or spec.at("/calls")
    params = {p.name: p for p in c.entry.params}
    names = dict(call.bind)
    for key in names:
        if key not in params:
            sink.error("PL175", f"call '{call.name}' binds '{key}', which is no parameter of '{comp.name}'", at,
                       hint="its parameters: " + ", ".join(params))
        elif names[key] in c.symbols:  # inside the kernel the parameter would hide the component's function
            sink.error("PL188", f"call '{call.name}' binds '{key}' to '{names[key]}', an entry symbol of "
                       f"'{comp.name}': inside the kernel the parameter would hide the function",
                       spec.at(f"/calls/{spec.calls.index(call)}/bind/{key}"),
                       hint="name that kernel parameter differently in the pipeline")
    check_shared_tensors(comp.name, call, c.entry.params, spec, sink)
    first_of: dict[str, str] = {}
    for p in params:  # one kernel parameter passed twice (N and K both the hidden size) is one parameter
        kept = first_of.setdefault(names.get(p, p), p)
        a, b = params[kept], params[p]
        if (a.dtype, a.pointer) != (b.dtype, b.pointer):
            sink.error("PL175", f"call '{call.name}' passes '{names.get(p, p)}' to '{kept}' and '{p}' of "
                       f"'{comp.name}', which differ in type", at)
    event_names = {e.name for e in c.events.notifies} | {e.name for e in c.events.waits}
    for key in dict(call.events):
        if key not in event_names:
            sink.error("PL175", f"call '{call.name}' renames event '{key}', which '{comp.name}' has not", at,
                       hint="its events: " + (", ".join(sorted(event_names)) or "none"))
    for p in call.stacked:
        param = params.get(p)
        if param is None or not param.pointer or not param.shape:
            sink.error("PL175", f"call '{call.name}' stacks '{p}', which is no pointer parameter of '{comp.name}' "
                       "with a declared shape", at, hint="a stacked tensor needs its extents: give the parameter a shape")
    for p in params:
        kernel_name, is_stacked = names.get(p, p), p in call.stacked
        first = stacked_by.setdefault(kernel_name, (call.name, is_stacked))
        if params[p].pointer and first[1] != is_stacked:
            sink.error("PL175", f"kernel parameter '{kernel_name}' is stacked by one of '{call.name}' and "
                       f"'{first[0]}' but not by the other", at,
                       hint="a tensor holds one copy per layer for every call that passes it, or for none")
    if sink.has_errors:
        return None

    raw = copy.deepcopy(c.raw)
    raw["name"] = call.name
    plan.bind[call.name] = {p: names.get(p, p) for p in params}
    kept_params, seen_names = [], {}
    for p in raw["entry"]["params"]:
        bound = names.get(p["name"], p["name"])
        if bound in seen_names:  # the glue passes it to both: the contract lists it once, writable if either is
            if not p.get("const", False):
                seen_names[bound].pop("const", None)
            continue
        seen_names[bound] = p
        kept_params.append(p)
    raw["entry"]["params"] = kept_params
    for p in raw["entry"]["params"]:
        old = p["name"]
        p["name"] = names.get(old, old)
        if "may_alias" in p:  # checked against the binding above; renamed to what stays a const parameter below
            p["may_alias"] = [names.get(a, a) for a in p["may_alias"]]
        if "shape" in p:
            p["shape"] = [rename_expr(e, names) for e in p["shape"]]
            if old in call.stacked:  # the kernel's tensor is [layers * extent 0, ...] (resolve's parameters)
                plan.stacked[(call.name, p["name"])] = tuple(str(e) for e in p["shape"])
        if "tensor_map" in p:
            t = p["tensor_map"]
            for key in ("shape", "box"):
                if key in t:
                    t[key] = [rename_expr(e, names) for e in t[key]]
    read_only = {p["name"] for p in raw["entry"]["params"] if p.get("pointer") and p.get("const")}
    for p in raw["entry"]["params"]:  # a tensor this call passes to both is one parameter of the call: no alias
        if "may_alias" in p:
            p["may_alias"] = list(dict.fromkeys(a for a in p["may_alias"] if a != p["name"] and a in read_only))
            if not p["may_alias"]:
                del p["may_alias"]
    for b in raw.get("smem", {}).get("buffers", []):
        b["bytes"] = rename_expr(b["bytes"], names)
    for b in raw.get("barriers", {}).get("named", []):
        if "threads" in b:
            b["threads"] = rename_expr(b["threads"], names)
    for port in raw.get("ports", []):
        if "param" in port:
            port["param"] = names.get(port["param"], port["param"])
        if "tile" in port:
            port["tile"] = [rename_expr(e, names) for e in port["tile"]]
        if "stages" in port:
            port["stages"] = rename_expr(port["stages"], names)
    if "loader" in raw:
        raw["loader"]["slots"] = rename_expr(raw["loader"]["slots"], names)
    seq = raw.get("geometry", {}).get("tile_sequence")
    if seq:
        seq["grid"] = [rename_expr(e, names) for e in seq["grid"]]
        if "reduction" in seq and "blocks" in seq["reduction"]:
            seq["reduction"]["blocks"] = rename_expr(seq["reduction"]["blocks"], names)
    rank = len(seq["grid"]) if seq else 1
    events = raw.setdefault("events", {})
    rename_event = dict(call.events)
    notifies = []
    for n in events.get("notifies", []):
        n["name"] = rename_event.get(n["name"], n["name"])
        n["map"] = rename_map(n["map"], names)
        if "shape" in n:
            n["shape"] = [rename_expr(e, names) for e in n["shape"]]
        if n["name"] in waited:  # an event nobody waits for costs atomics and counters: dropped
            notifies.append(n)
    if AFTER_EVENT.format(call.name) in waited:
        notifies.append({"name": AFTER_EVENT.format(call.name), "map": f"{_LETTERS[:rank]}->:", "shape": [1]})
    waits = [{"name": AFTER_EVENT.format(p), "map": f"{_LETTERS[:rank]}->0"} for p in call.after]
    for w in events.get("waits", []):
        w["name"] = rename_event.get(w["name"], w["name"])
        w["map"] = rename_map(w["map"], names)
        if isinstance(w.get("count"), str):  # an expression, or a tensor read at the task's letters
            w["count"] = rename_expr(w["count"], names, frozenset(w["map"].partition("->")[0].strip()))
        waits.append(w)
    events["notifies"], events["waits"] = notifies, waits
    if not notifies:
        del events["notifies"]
    if not waits:
        del events["waits"]
    if not events:
        del raw["events"]
    return raw
