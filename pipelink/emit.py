"""Emit: the manifest (what a launcher needs) and the link map (a plain table anyone can grep)."""
from __future__ import annotations

import ast
import hashlib

from . import __version__
from .allocate import Allocation
from .event_glue import task_invariant
from .expr import Expr
from .resolve import Resolved


def substitute(e: Expr, values: dict[str, int]) -> str:
    """The expression with link-time names replaced by their values: `ceil_div(M, TILE_M)` -> `ceil_div(M, 32)`."""
    class _Sub(ast.NodeTransformer):
        def visit_Name(self, node):
            return ast.copy_location(ast.Constant(values[node.id]), node) if node.id in values else node
    return ast.unparse(_Sub().visit(ast.parse(e.text.strip() if isinstance(e.text, str) else str(e), mode="eval")))


def manifest(r: Resolved, a: Allocation, arch: str, cubin: bytes, kernel_info=None) -> dict:
    doc = {
        "manifest": 1,
        "pipelink": __version__,
        "kernel": r.name,
        "target": arch,
        "schedule": r.schedule,
        "block": [a.block_threads, 1, 1],
        "dynamic_smem": a.smem_bytes,
        "params": [_param_doc(p, r.geometry) for p in r.params],
        "tiles": [substitute(e, r.geometry) for e in r.tiles.grid],
        "tile_order": r.tiles.order,
        "distribution": r.tiles.distribution,
        "geometry": dict(sorted(r.geometry.items())),
        "components": [{"name": c.name, "version": c.contract.version, "contract_hash": c.contract.hash[:16],
                        "object": c.obj.path if c.obj else None} for c in r.components],
        "wires": [{"from": f"{w.producer}.{w.out_port.name}", "to": f"{w.consumer}.{w.in_port.name}", "kind": w.kind,
                   "explicit": w.explicit} for w in r.wires],
        "cubin_sha256": hashlib.sha256(cubin).hexdigest(),
    }
    if r.specialize:
        doc["specialized"] = dict(sorted(r.specialize.items()))
    if r.roles is not None:
        # Every CTA walks its tiles alone (no events): as many CTAs as give each the same number of
        # tiles, so no last round runs on a few CTAs while the rest idle.
        doc["grid_policy"] = "balanced"
    if r.schedule == "persistent":
        _persistent_manifest(doc, r)
    if kernel_info is not None:
        doc["resources"] = {"registers": kernel_info.registers, "frame_bytes": kernel_info.frame_bytes,
                            "static_smem": kernel_info.static_smem_bytes, "named_barriers": kernel_info.num_barriers}
    return doc


def _param_doc(p, geometry: dict[str, int]) -> dict:
    doc = {"name": p.name, "dtype": p.dtype, "pointer": p.pointer, "const": p.const}
    if p.tensor_map is not None:  # the launcher encodes it: extents over the shape parameters, box fixed
        t = p.tensor_map
        doc["tensor_map"] = {"shape": [substitute(e, geometry) for e in t.shape],
                             "box": [e.evaluate(geometry) for e in t.box], "swizzle": t.swizzle,
                             "oob_fill": t.oob_fill}
    return doc


def _persistent_manifest(doc: dict, r: Resolved) -> None:
    """A persistent kernel's tasks, its event tensors (sized at launch) and its implicit parameters."""
    from .glue import WORKSPACE_HEADER_WORDS
    plan = r.events
    per_component = []
    for name in plan.order:
        grid = r.component(name).contract.geometry.tile_sequence.grid
        per_component.append(" * ".join(f"({substitute(e, r.geometry)})" for e in grid))
    doc["tiles"] = [" + ".join(per_component)]  # every task of every component
    doc["tasks"] = {name: expr for name, expr in zip(plan.order, per_component)}
    doc["dispatch"] = r.dispatch
    from .glue import IMPLICIT_PARAMS
    doc["params"] += [{"name": name, "dtype": dtype, "pointer": pointer, "const": False, "implicit": kind}
                      for name, dtype, pointer, kind in IMPLICIT_PARAMS]
    doc["workspace"] = {
        "header_words": WORKSPACE_HEADER_WORDS,
        "task_counter_word": 8,
        "debug": r.debug_events,
        "events": [{"name": t.name, "shape": [substitute(e, r.geometry) for e in t.shape],
                    "notified_by": [f"{n.component} {n.map.text}" for n in t.notifiers],
                    "waited_by": [f"{w.component} {w.map.text}" for w in t.waiters]}
                   for t in plan.tensors.values()],
    }


# What the link can say about a count read per task from a device tensor: nothing at link time.
DEVICE_COUNT_NOTE = ("count read from the device: not checked at link time; --debug-events reports a wait that "
                     "is never met")


def link_map(r: Resolved, a: Allocation, arch: str, kernel_info=None) -> str:
    out = [f"# pipelink link map: kernel {r.name}, target {arch}, schedule {r.schedule}",
           f"# block {a.block_threads} threads ({a.block_warps} warps), dynamic smem {a.smem_bytes} bytes"
           + (f", registers <= {a.registers}" if a.registers else ""), ""]
    out += ["## shared memory", f"{'offset':>8} {'bytes':>8} {'align':>5}  {'lifetime':<14} item"]
    readers = {(w.producer, w.out_port.name): [] for w in r.wires}
    for w in r.wires:
        if w.kind != "relayout":
            readers[(w.producer, w.out_port.name)].append(f"{w.consumer}.{w.in_port.name}")
    for p in a.smem:
        extra = ""
        if p.item.kind == "port":
            comp, port = p.item.key.split(" ", 1)[1].split(".", 1)
            also = readers.get((comp, port))
            extra = f"  (read as {', '.join(also)})" if also else ""
        out.append(f"{p.offset:>8} {p.item.size:>8} {p.item.align:>5}  {p.item.lifetime.describe():<14} "
                   f"{p.item.key}{extra}")
    out += ["", "## named barriers", f"{'id':>4}  owner"]
    barrier_use = {"sequential": "between steps", "warp_specialized": "once, after ring setup",
                   "persistent": "claim, waits, end of each task"}
    out.append(f"{0:>4}  __syncthreads (glue: {barrier_use.get(r.schedule, r.schedule)})")
    for bid, comp in sorted(a.hardcoded_ids.items()):
        out.append(f"{bid:>4}  {comp} (hard-coded)")
    for (comp, name), bid in sorted(a.barrier_id.items(), key=lambda kv: kv[1]):
        out.append(f"{bid:>4}  {comp}.{name}")
    out += ["", "## warps", f"{'warps':>7}  owner"]
    for c in r.components:
        b = a.warp_begin[c.name]

        def span(role):  # the role's warps, every instance of its group included
            n = r.roles.group_of(c.name, role.name).instances if r.roles is not None else 1
            first = a.role_begin[(c.name, role.name)]
            return first, first + role.warps * n - 1, n
        spans = [(role, *span(role)) for role in c.contract.threads.roles]
        roles = ", ".join(f"{role.name} {lo}-{hi}" + (f" ({n} instances)" if n > 1 else "") for role, lo, hi, n in spans)
        end = max(hi for _, _, hi, _ in spans)
        out.append(f"{b:>3}-{end:<3}  {c.name} ({roles})" + (f", step {a.steps[c.name]}"
                                                            if r.schedule == "sequential" else ""))
    if r.roles is not None:
        out += ["", "## role groups (warps, instances, registers per thread; a fragment stays on its group's warps)"]
        for g in r.roles.groups:
            begin = a.group_begin[g.name]
            end = begin + g.warps * g.instances - 1
            regs = a.group_registers[g.name]
            how = (f"setmaxnreg {'inc' if regs > a.entry_registers else 'dec'} {a.entry_registers} -> {regs}"
                   if g.setmaxnreg is not None and regs != a.entry_registers else f"{regs} (entry)")
            inst = f", {g.instances} instances of {g.warps} warps taking tiles in turn" if g.instances > 1 else ""
            members = ", ".join(f"{m.component}.{m.role}" for m in g.members)
            out.append(f"  {begin:>3}-{end:<3} {g.name}: {members}; registers {how}{inst}")
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
    out += ["", "## wires"]
    for w in r.wires:
        shape = "x".join(map(str, w.tile))
        out.append(f"  {w}  {w.kind}  {w.out_port.dtype}[{shape}] x{w.stages} ({'explicit' if w.explicit else 'auto'})")
    out += ["", "## geometry"]
    for name, value in sorted(r.geometry.items()):
        providers = [c.name for c in r.components if name in c.contract.geometry.provides]
        consumers = [f"{c.name} {c.contract.geometry.consumes[name].describe()}" for c in r.components
                     if name in c.contract.geometry.consumes]
        src = f"provided by {', '.join(providers)}" if providers else "default"
        out.append(f"  {name} = {value}  ({src}" + (f"; consumed by {'; '.join(consumers)}" if consumers else "") + ")")
    out += ["", "## kernel parameters"]
    for i, p in enumerate(r.params):
        out.append(f"  {i}  {p.c_decl()}  ({', '.join(p.users)})")
    if r.schedule == "persistent":
        out += ["", f"## tasks (dispatch {r.dispatch}, in this order)"]
        for name in r.events.order:
            seq = r.component(name).contract.geometry.tile_sequence
            out.append(f"  {name}: grid [{', '.join(substitute(e, r.geometry) for e in seq.grid)}] {seq.order}")
        out += ["", "## events (64-bit counters, zero at launch)"]
        for t in r.events.tensors.values():
            shape = ", ".join(substitute(e, r.geometry) for e in t.shape)
            notes = "; ".join(f"{n.component} notifies {n.map.text}" for n in t.notifiers)
            waits = "; ".join(f"{w.component} waits {w.map.text} for " + _wait_count(t, w, r.geometry)
                              + (" (once per CTA)" if task_invariant(w) else "") for w in t.waiters)
            out.append(f"  {t.name}[{shape}]: {notes}; {waits}")
            out += [f"    {w.component} waits {w.map.text} for {w.count_term.text}: {DEVICE_COUNT_NOTE}"
                    for w in t.waiters if w.count_term is not None]
    else:
        out += ["", "## tiles",
                f"  grid [{', '.join(substitute(e, r.geometry) for e in r.tiles.grid)}] {r.tiles.order}, "
                f"{r.tiles.distribution} (from {r.tiles_owner})"]
    if kernel_info is not None:
        out += ["", "## linked kernel (read from the cubin)",
                f"  registers {kernel_info.registers}, frame {kernel_info.frame_bytes} B, stack "
                f"{kernel_info.max_stack_bytes} B, static smem {kernel_info.static_smem_bytes} B, named barriers "
                f"{kernel_info.num_barriers}, subroutines {', '.join(kernel_info.subroutines) or 'none'}"]
    return "\n".join(out) + "\n"


def _wait_count(t, w, geometry: dict) -> str:
    if w.count_term is not None:  # read per task from a device tensor
        return f"{w.count_term.text} (read on the device)"
    if w.count is not None:
        return str(w.count)
    return t.count_c(lambda n: str(geometry.get(n, n)))
