"""Generate a persistent task's event code: its waits before the component runs, its notifications after.

Pure: a resolved pipeline in, lines of CUDA C++ out. The elements one wait or notify names form a
rectangular space for a task (every loop bound is a per-task value, never another loop's
variable), so the block's threads share it with one strided loop instead of one thread walking it:
a dispatch tile that notifies 512 rows takes four steps of 128 threads, not 512 steps of one.

Waits run in phases. A wait whose element or count reads a device tensor starts a new phase: the
block has finished the earlier waits (a barrier) before anyone reads what they guard (PL086).
Within a phase every thread takes its share of the elements; the phase ends in
`__syncthreads_and`, which also carries a debug build's timeout to every thread. A wait on one
fixed element for a fixed count (`placed[0]` reaching the number of dispatch tasks) is waited once
per CTA: counters only grow within a launch, so a later task of the same CTA skips it.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from ..core.expr import parse, python_ast
from .events import task_invariant


@dataclass(frozen=True)
class Loop:
    var: str
    lo: str  # C, per-task values only
    hi: str


@dataclass(frozen=True)
class ElementSpace:
    """The elements one side of an event names for a task."""
    loops: tuple[Loop, ...]   # rectangular: no bound reads another loop's variable
    guards: tuple[str, ...]   # run-once openings: a gathered index must be >= 0 to name an event
    index: str                # C: the linear element index


def element_space(r, j: int, side) -> ElementSpace:
    """The loops over a map's ':', gather and range terms, and the linear element index."""
    comp = r.component(side.component)
    letters = {d: f"tile.coord[{i}]" for i, d in enumerate(side.map.task_dims)}
    loops, guards, coords = [], [], []
    for axis, term in enumerate(side.map.terms):
        var = f"a{axis}"
        if term.kind == "all":
            loops.append(Loop(var, "0", f"e{j}_extent_{axis}"))
            coords.append(var)
        elif term.kind == "gather":  # topk[i, :]: the event coordinates are values read from a tensor
            read, slices = gather_c(r, comp, term.text, letters, var)
            loops += slices
            # A negative value names no event (padding: a token past the end, an unused slot). The
            # body runs once, for a non-negative value only.
            guards.append(f"for (long long {var}_at = (long long)({read}); {var}_at >= 0; {var}_at = -1) {{")
            coords.append(f"{var}_at")
        elif term.kind == "range":  # range(indptr[i], indptr[i+1]): a variable number of events
            lo, hi = (bound_c(r, comp, arg, letters) for arg in _range_args(term.text))
            loops.append(Loop(var, lo, hi))
            coords.append(var)
        else:
            coords.append("(long long)(" + affine_c(term.text, letters, r) + ")")
    index = coords[0]
    for axis in range(1, len(coords)):
        index = f"({index}) * e{j}_extent_{axis} + {coords[axis]}"
    return ElementSpace(tuple(loops), tuple(guards), index)


def shared_loop(space: ElementSpace, body: str, threads: int, slot: int, indent: str,
                tid: str = "threadIdx.x") -> list[str]:
    """`body` for every element of `space`, the elements dealt to the block's `threads` threads
    (the last loop varies fastest across threads: neighbours read neighbouring gathered entries).
    With no loops there is one element: thread `slot % threads` takes it. `tid`: the thread's index among
    the `threads` (a group's own when a block runs several tasks at once)."""
    out = [f"{indent}{{"]
    inner = indent + "  "
    if not space.loops:
        head = [f"{inner}if ({tid} == {slot % threads}u) {{"]
    else:
        sizes = []
        for k, loop in enumerate(space.loops):
            if loop.lo == "0":
                sizes.append(f"(long long)({loop.hi})")
            else:
                out.append(f"{inner}const long long pl_lo{k} = {loop.lo};")
                out.append(f"{inner}const long long pl_n{k} = max({loop.hi} - pl_lo{k}, 0ll);")
                sizes.append(f"pl_n{k}")
        head = [f"{inner}for (long long pl_i = {tid}; pl_i < {' * '.join(sizes)}; pl_i += {threads}) {{"]
        rest = "pl_i"
        if len(space.loops) > 1:
            head.append(f"{inner}  long long pl_r = pl_i;")
            rest = "pl_r"
        for k in reversed(range(len(space.loops))):
            loop, size = space.loops[k], sizes[k]
            offset = "" if loop.lo == "0" else f"pl_lo{k} + "
            if k == 0:
                head.append(f"{inner}  const long long {loop.var} = {offset}{rest};")
            else:
                head.append(f"{inner}  const long long {loop.var} = {offset}{rest} % {size}; {rest} /= {size};")
    out += head
    level = inner + "  "
    for guard in space.guards:
        out.append(level + guard)
        level += "  "
    out.append(level + body)
    for depth in reversed(range(len(space.guards) + 1)):
        out.append(inner + "  " * depth + "}")
    out.append(f"{indent}}}")
    return out


def reads_device(side) -> bool:
    """Whether the side's elements or count are read from a device tensor (then the waits before
    it must be complete first)."""
    if side.count_term is not None:
        return True
    return any(t.kind == "gather" or (t.kind == "range" and "[" in t.text) for t in side.map.terms)


def ready_flag(comp_index: int, n: int) -> str:
    """The CTA's register saying the `n`-th wait of component `comp_index` is met for good."""
    return f"pl_ready_{comp_index}_{n}"


def has_layers(r) -> bool:
    return r.calls is not None and bool(r.calls.per_layer)


def flags_per_call(r) -> bool:
    """Whether a task-invariant wait's flag lives in its call's task loop. Static dispatch walks a call's tasks
    of a layer on a CTA one after another, so the flag is a bool of that loop, live only while the call runs;
    dynamic dispatch interleaves calls in one claim loop, so the flag lives across the walk and, in a layer
    loop, holds the layer it was met in. A value live across the walk takes a register from every task body:
    the joint budget is what the linked kernel spills when it runs short."""
    return r.dispatch == "static"


def ready_flags(r, plan) -> list[str]:
    """Declarations, before the task loops, of the flags of every task-invariant wait (dynamic dispatch; under
    static dispatch `call_ready_flags` declares them per call). In a layer loop a flag holds the layer it was
    met in (-1: not yet): the next layer waits on other counters."""
    if flags_per_call(r):
        return []
    names = [c.name for c in r.components]
    if has_layers(r):
        return [f"int {ready_flag(names.index(comp), n)} = -1;  // met once per CTA and layer: the wait "
                f"{side.map.text} of {comp}" for comp in plan.order
                for n, (_, side) in enumerate(plan.waits_of(comp)) if task_invariant(side)]
    return [f"bool {ready_flag(names.index(comp), n)} = false;  // met once per CTA: the wait {side.map.text} of {comp}"
            for comp in plan.order for n, (_, side) in enumerate(plan.waits_of(comp)) if task_invariant(side)]


def call_ready_flags(r, plan, comp: str) -> list[str]:
    """Static dispatch: the flags of call `comp`'s task-invariant waits, declared before its task loop."""
    if not flags_per_call(r):
        return []
    names = [c.name for c in r.components]
    return [f"bool {ready_flag(names.index(comp), n)} = false;  // met once per CTA and call: the wait {side.map.text}"
            for n, (_, side) in enumerate(plan.waits_of(comp)) if task_invariant(side)]


def event_base(tensor_index: dict, bases: dict | None, name: str) -> str:
    """C of the first counter of event `name` for the task: its layer's copy in a layer loop."""
    j = tensor_index[name]
    return (bases or {}).get(name, f"e{j}")


def count_c(r, tensor, side) -> str:
    """C expression of the count a waited element must reach."""
    if side.count_term is not None:  # read per task from a device tensor
        letters = {d: f"tile.coord[{i}]" for i, d in enumerate(side.map.task_dims)}
        return gather_c(r, r.component(side.component), side.count_term.text, letters, "unused")[0]
    geo = lambda n: str(r.geometry[n]) if n in r.geometry else n  # noqa: E731
    return side.count.to_c(geo) if side.count is not None else tensor.count_c(geo)


@dataclass(frozen=True)
class GroupScope:
    """A group of a block's warps running a task of its own beside the block's other groups (a component
    whose tasks run several to a block): its thread index, its thread count, its index and how many groups
    the block holds (group g meets at named barrier g + 1)."""
    tid: str
    threads: int
    group: str
    groups: int

    def all(self, value: str) -> str:
        return f"pl::glue::group_and<{self.groups}>({value}, {self.group}, {self.threads}u)"

    def sync(self) -> str:
        return f"pl::glue::group_sync<{self.groups}>({self.group}, {self.threads}u);"


def wait_block(r, waits, tensor_index: dict, comp_index: int, threads: int, bound: str, indent: str,
               bases: dict | None = None, group: GroupScope | None = None, met_if: dict | None = None) -> list[str]:
    """Every wait of a task, in contract order and phases; leaves the task if a debug wait timed out.
    `bases`: event name -> C of its first counter, where not `e<j>` (a layer's copy). With `group`, the
    waits are the group's: its threads share the elements, meet at its barrier, and a debug timeout leaves
    `pl_ok` (declared by the caller) false instead of returning. `met_if`: event name -> C condition under which
    its waits count to 0 (met at once)."""
    tid, every = (group.tid, group.all) if group else ("threadIdx.x", lambda v: f"__syncthreads_and({v})")
    out = [f"{indent}{{"] + ([] if group else [f"{indent}  bool pl_ok = true;"])
    slot, met = 0, []
    layered_flags = has_layers(r) and not flags_per_call(r)
    for n, (tensor, side) in enumerate(waits):
        if side.in_entry:  # the entry waits for these itself (in_entry_contexts)
            continue
        if n and reads_device(side):
            out.append(f"{indent}  pl_ok = {every('pl_ok')};  // the waits above guard what this one reads")
        j = tensor_index[tensor.name]
        space = element_space(r, j, side)
        scope = "<true>" if tensor.cross_rank else ""  # other ranks add to it: read at system scope
        count = f"(unsigned)({count_c(r, tensor, side)})"
        if (met_if or {}).get(tensor.name):
            count = f"({met_if[tensor.name]} ? 0u : {count})"
        call = (f"pl_ok = pl_ok && pl::events::wait_for{scope}({event_base(tensor_index, bases, tensor.name)} + {space.index}, {count}, "
                f"pl_epoch, {bound}, pl_report, {comp_index}u, {j}u, {space.index}, (unsigned long long)t);")
        loop = shared_loop(space, call, threads, slot, indent + "  ", tid)
        if task_invariant(side):  # met once in this CTA: met for the rest of the launch
            flag = ready_flag(comp_index, n)
            loop = [f"{indent}  if ({flag} != pl_layer)" if layered_flags else f"{indent}  if (!{flag})"] + loop
            met.append(flag)
        out += loop
        slot += not space.loops
    if group:
        out.append(f"{indent}  pl_ok = {every('pl_ok')};  // a debug build's wait may have timed out")
        out += [f"{indent}  if (pl_ok) {flag} = true;" for flag in met]
    else:
        out.append(f"{indent}  if (!__syncthreads_and(pl_ok)) return;  // a debug build's wait timed out somewhere")
        out += [f"{indent}  {flag} = {'pl_layer' if layered_flags else 'true'};" for flag in met]
    out.append(f"{indent}}}")
    return out


def whole_call(side) -> bool:
    """Whether every task of the notifying call adds to every element of the event (a map onto ':' only, on
    this rank): the adds of a CTA's tasks can then be one add of their count (counts_per_cta)."""
    return side.rank is None and all(term.kind == "all" for term in side.map.terms)


def notify_block(r, notifies, tensor_index: dict, threads: int, indent: str, bases: dict | None = None,
                 tid: str = "threadIdx.x", amount: str | None = None) -> list[str]:
    """Every notification of a task, after its writes (the caller's barrier) are made visible. `tid`: the
    thread's index among the task's `threads` (a group's own when a block runs several tasks at once).
    `amount`: what each add adds (a CTA's count of a call's tasks, counts_per_cta); one when None."""
    spaces, slot = [], 0
    for tensor, side in notifies:
        space = element_space(r, tensor_index[tensor.name], side)
        spaces.append((tensor, side, space, slot))
        slot += not space.loops
    # The caller's barrier orders every thread's writes before the notifying threads' fences, and a fence
    # is cumulative over that order (the pattern of a grid barrier): only the threads that move a count
    # fence, the others go on (a fence waits for the thread's own outstanding memory operations).
    who = " || ".join(f"({notifier_condition(space, threads, sl, tid)})" for _, _, space, sl in spaces)
    if any(side.rank is not None for _, side, _, _ in spaces):  # another rank reads them: system scope
        out = [f"{indent}if ({who}) __threadfence_system();  // the task's writes are visible to every rank first"]
    elif r.notify_fence == "acq_rel":  # a release: what the waiters' acquire reads pair with
        out = [f'{indent}if ({who}) asm volatile("fence.acq_rel.gpu;" ::: "memory");  // the task\'s writes are '
               "visible to every CTA before any count moves (a release)"]
    else:
        out = [f"{indent}if ({who}) __threadfence();  // the task's writes are visible to every CTA before any count moves"]
    for tensor, side, space, sl in spaces:
        at = f"{event_base(tensor_index, bases, tensor.name)} + {space.index}"
        if side.rank is None and amount is not None:
            body = f"atomicAdd({at}, {amount});  // '{tensor.name}' {side.map.text}: this CTA's tasks of the call"
        elif side.rank is None:
            body = f"pl::events::add_one({at});  // '{tensor.name}' {side.map.text}"
        else:
            letters = {d: f"tile.coord[{i}]" for i, d in enumerate(side.map.task_dims)}
            body = (f"pl::remote::add_one({at}, (int)({affine_c(side.rank.text, letters, r)}));  "
                    f"// '{tensor.name}' {side.map.text} on rank {side.rank.text}")
        out += shared_loop(space, body, threads, sl, indent, tid)
    return out


def notifier_condition(space: ElementSpace, threads: int, slot: int, tid: str = "threadIdx.x") -> str:
    """C: whether this thread takes an element of `space` in shared_loop (same dealing)."""
    if not space.loops:
        return f"{tid} == {slot % threads}u"
    sizes = [f"(long long)({loop.hi})" if loop.lo == "0" else f"max((long long)({loop.hi}) - (long long)({loop.lo}), 0ll)"
             for loop in space.loops]
    return f"(long long){tid} < {' * '.join(sizes)}"


def affine_c(text: str, letters: dict[str, str], r=None) -> str:
    """C of an affine term: task letters as `letters` says; other names (a clamp's `N - 1`) are the
    link's geometry values or the kernel's runtime scalar parameters, in scope in the glue."""
    geometry = r.geometry if r is not None else {}
    return parse(text).to_c(lambda n: letters[n] if n in letters else str(geometry[n]) if n in geometry else n)


def _tensor_shape_c(r, comp, name: str) -> list[str]:
    geo = lambda n: str(r.geometry[n]) if n in r.geometry else n  # noqa: E731
    param = next(p for p in comp.contract.entry.params if p.name == name)
    return [e.to_c(geo) for e in param.shape]


def gather_c(r, comp, text: str, letters, var: str) -> tuple[str, list[Loop]]:
    """`t[i, :]` -> the C read of the element (row-major linear index) and a loop for each ':'."""
    node = python_ast(text).body
    items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    shape = _tensor_shape_c(r, comp, node.value.id)
    loops, parts = [], []
    for k, item in enumerate(items):
        if isinstance(item, ast.Slice):
            v = f"{var}_{k}"
            loops.append(Loop(v, "0", f"(long long)({shape[k]})"))
            parts.append(v)
        else:
            parts.append("(long long)(" + affine_c(ast.unparse(item), letters) + ")")
    lin = parts[0]
    for k in range(1, len(parts)):
        lin = f"({lin}) * (long long)({shape[k]}) + {parts[k]}"
    return f"{node.value.id}[{lin}]", loops


def _range_args(text: str) -> list[str]:
    return [ast.unparse(a) for a in python_ast(text).body.args]


def bound_c(r, comp, text: str, letters) -> str:
    if "[" in text:
        read, loops = gather_c(r, comp, text, letters, "unused")
        assert not loops
        return f"(long long)({read})"
    return "(long long)(" + affine_c(text, letters, r) + ")"


# One in-entry wait's context in shared memory (pipelink/in_entry.h's pl::in_entry::Context): what the entry's
# `wait_<name>(i)` needs to find element i of the running task's map and its count.
IN_ENTRY_CONTEXT_BYTES = 72


def in_entry_contexts(r, comp, waits, tensor_index: dict, comp_index: int, at: int, bound: str, indent: str,
                      bases: dict | None = None, met_if: dict | None = None) -> list[str]:
    """Thread 0 writes the running task's context of each in-entry wait of call `comp` (the code's in-entry waits
    in contract order, at `at` in the arena, one IN_ENTRY_CONTEXT_BYTES record each): element i of the task's map
    is counter `first + i * stride`, `n` of them, each waited for until it reaches `count`. A wait of the code
    that this link dropped (standalone: its producers ran in an earlier launch) gets n = 0: met at once. The
    caller's barrier comes before the entry reads it."""
    own = comp.code.in_entry_waits
    if not own:
        return []
    sides = {side.pointer: (tensor, side) for tensor, side in waits if side.in_entry}
    out = [f"{indent}if (threadIdx.x == 0) {{  // the task's in-entry waits (pl::in_entry)"]
    for w_index, w in enumerate(own):
        ctx = f"pl_ctx{w_index}"
        out.append(f"{indent}  pl::in_entry::Context* const {ctx} = reinterpret_cast<pl::in_entry::Context*>("
                   f"pl::dynamic_smem() + {at + w_index * IN_ENTRY_CONTEXT_BYTES}u);")
        found = sides.get(w.pointer_path)
        if found is None:
            out.append(f"{indent}  {ctx}->n = 0ll;  // '{w.name}': not waited for in this link")
            continue
        tensor, side = found
        j = tensor_index[tensor.name]
        space = element_space(r, j, side)
        first, stride, n = _one_axis(r, space)
        count = f"(unsigned)({count_c(r, tensor, side)})"
        if (met_if or {}).get(tensor.name):
            count = f"({met_if[tensor.name]} ? 0u : {count})"
        out += [f"{indent}  {{  // '{tensor.name}' {side.map.text}",
                f"{indent}    const long long pl_first = {first};",
                f"{indent}    {ctx}->first = {event_base(tensor_index, bases, tensor.name)} + pl_first;",
                f"{indent}    {ctx}->stride = {stride};",
                f"{indent}    {ctx}->n = {n};",
                f"{indent}    {ctx}->count = {count};",
                f"{indent}    {ctx}->at = pl_first;",
                f"{indent}    {ctx}->report = {'pl_report' if bound != '0ull' else 'nullptr'};",
                f"{indent}    {ctx}->bound = {bound};",
                f"{indent}    {ctx}->task = (unsigned long long)t;",
                f"{indent}    {ctx}->epoch = pl_epoch;",
                f"{indent}    {ctx}->who = {comp_index}u << 16 | {j}u;",
                f"{indent}    {ctx}->backoff_ns = {r.wait_backoff_ns}u;",
                f"{indent}  }}"]
    out.append(f"{indent}}}")
    return out


def _one_axis(r, space: ElementSpace) -> tuple[str, str, str]:
    """C of element 0's linear index, the step between two consecutive elements, and their number, for a space
    of at most one loop (what an in-entry wait may name, PL207): the index is affine in the loop variable."""
    if space.guards or len(space.loops) > 1:
        raise AssertionError("an in-entry wait names its elements along one axis (PL207)")
    if not space.loops:
        return f"(long long)({space.index})", "0ll", "1ll"
    loop = space.loops[0]
    at = lambda v: re.sub(rf"\b{loop.var}\b", f"(long long)({v})", space.index)  # noqa: E731  (the loop variable, substituted)
    first = at(loop.lo)
    step = f"(long long)(({at(loop.lo + ' + 1')}) - ({first}))"
    return first, step, f"max((long long)({loop.hi}) - (long long)({loop.lo}), 0ll)"
