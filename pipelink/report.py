"""Human and JSON views of inputs and contracts for `pipelink inspect` and `pipelink check`."""
from __future__ import annotations

from .core.model import DTYPE_BYTES, DTYPE_C, Contract
from .formats.inputs import InputObject
from .runtime.manifest import Manifest


def _tensor_map(t) -> dict:
    return {"shape": [str(e) for e in t.shape], "box": [str(e) for e in t.box], "swizzle": t.swizzle,
            "oob_fill": t.oob_fill}


def _param(p) -> dict:
    return {"name": p.name, "dtype": p.dtype, "pointer": p.pointer, "const": p.const, "decl": p.c_decl(),
            "shape": None if p.shape is None else [str(e) for e in p.shape],
            "tensor_map": None if p.tensor_map is None else _tensor_map(p.tensor_map),
            # a written pointer: the const ones a call may bind to its tensor; a const one: the written ones naming it
            "may_alias": list(p.may_alias), "aliased_by": list(p.aliased_by)}


def _entry_point(c: Contract, e) -> dict:
    """One entry of the `entries` form: its arguments declared as the header declares them (a register port as
    the caller's array, which LTO keeps in registers)."""
    # an argument is a register port, else a parameter (a gmem port may share its parameter's name)
    regs = [a for a in e.args if c.register_port(a) is not None]
    decls = [f"{DTYPE_C[c.port(a).dtype]}* __restrict__ {a}" if a in regs else c.param(a).c_decl() for a in e.args]
    return {"name": e.name, "symbol": e.symbol, "role": e.role, "invocation": e.invocation, "params": decls,
            "args": list(e.args), "register_ports": regs}


def _cluster(c: Contract) -> list[int] | None:
    """The declared cluster as the kernel gets it: three dimensions (`[2]` and `[2, 1, 1]` are one shape)."""
    return None if c.cluster is None else (list(c.cluster) + [1, 1])[:3]


def _register_pool(c: Contract) -> dict | None:
    """What the roles with setmaxnreg take of an SM's registers at one block per SM, whatever else the kernel
    runs (a role keeps its count wherever it goes); None where no role sets one."""
    from .core.targets import target
    fixed = [r for r in c.threads.roles if r.setmaxnreg is not None]
    if not fixed:
        return None
    t = next((target(a) for a in c.targets.archs if target(a) is not None), None)
    return {"roles": [{"name": r.name, "warps": r.warps * r.instances, "setmaxnreg": r.setmaxnreg} for r in fixed],
            "registers": sum(32 * r.warps * r.instances * r.setmaxnreg for r in fixed),
            "regs_per_sm": t.regs_per_sm if t is not None else None}


def contract_summary(c: Contract) -> dict:
    ts = c.geometry.tile_sequence
    return {
        "name": c.name,
        "version": c.version,
        "owner": c.owner,
        "hash": c.hash[:16],
        "source": c.source.file,
        # in the entries form: the first entry's symbol and the component's parameters (`params`); `entries` has all
        "entry": {"symbol": c.entry.symbol, "invocation": c.entry.invocation,
                  "params": [p.c_decl() for p in c.entry.params],
                  **({"prefetch": c.entry.prefetch} if c.entry.prefetch else {}),
                  **({"load": c.entry.load} if c.entry.load else {}),
                  **({"carry": c.entry.carry} if c.entry.carry else {})},
        "loader": None if c.loader is None else {"slot_bytes": str(c.loader.slot_bytes), "slots": str(c.loader.slots),
                                                 "ahead": c.loader.ahead},
        "archs": list(c.targets.archs),
        "compile_flags": c.targets.flags.as_dict(),
        "warps": c.threads.warps,
        "roles": [{"name": r.name, "warps": r.warps, "warpgroup_aligned": r.warpgroup_aligned,
                   "setmaxnreg": r.setmaxnreg, "instances": r.instances,
                   "warps_expr": None if r.warps_expr is None else str(r.warps_expr)} for r in c.threads.roles],
        "uses_syncthreads": c.threads.uses_syncthreads,
        "concurrent": c.threads.concurrent,
        "max_registers": c.max_registers,
        "smem_buffers": [{"name": b.name, "bytes": str(b.bytes), "align": b.align, "lifetime": b.lifetime,
                          "phase": b.phase} for b in c.buffers],
        "named_barriers": [b.name for b in c.barriers.named],
        "mbarriers": [b.name for b in c.barriers.mbarriers],
        "hardcoded_barrier_ids": list(c.barriers.hardcoded_ids),
        "ports": [{"name": p.name, "direction": p.direction, "space": p.space, "dtype": p.dtype,
                   "tile": [str(e) for e in p.tile], "layout": p.layout, "stages": str(p.stages),
                   "param": p.param, "fragment": p.fragment, "role": p.role,
                   "entries": [e.name for e in c.entries if p.name in e.args]} for p in c.ports],
        "geometry": {"provides": dict(c.geometry.provides),
                     "consumes": {k: r.describe() for k, r in c.geometry.consumes.items()},
                     "tile_sequence": None if ts is None else {
                         "grid": [str(g) for g in ts.grid],
                         "order": ts.order,
                         "distribution": ts.distribution,
                         "group": ts.group if ts.order == "grouped" else None,
                         "reduction": None if ts.reduction is None else {"blocks": str(ts.reduction.blocks),
                                                                         "port": ts.reduction.port}}},
        "events": {"notifies": [{"name": e.name, "map": e.map} for e in c.events.notifies],
                   "waits": [{"name": e.name, "map": e.map, "in_entry": e.in_entry} for e in c.events.waits]},
        "form": "entries" if c.entries else "entry",
        "params": [_param(p) for p in c.entry.params],
        "entries": [_entry_point(c, e) for e in c.entries],
        "warps_expr": None if c.threads.warps_expr is None else str(c.threads.warps_expr),
        "cluster": _cluster(c),
        "register_pool": _register_pool(c) if c.entries else None,
    }


def _warps(count: int, expr) -> str:
    """A warp count, and the size expression it comes from (its value at the contract's own geometry)."""
    return str(count) if expr is None else f"{expr} ({count} at the defaults)"


def _port_text(p, entries: list[str]) -> str:
    per = f"{DTYPE_BYTES[p.dtype]}B"
    head = f"{p.direction:3} {p.name}: {p.space} {p.dtype}[{', '.join(map(str, p.tile))}]"
    if p.space == "reg":  # a fragment handed between roles on the same threads: no layout in memory, no stages
        taken = f" (entry {', '.join(entries)})" if entries else ""
        way = (f"from role {p.role}{taken} to the role that joins it" if p.direction == "out"
               else f"to role {p.role}{taken}, which joins the role holding it")
        return f"{head} fragment {p.fragment}, {way} ({per}/elem)"
    return (f"{head} {p.layout}" + (f" x{p.stages} stages" if p.space == "smem" else "") + f" ({per}/elem)"
            + (f" through parameter {p.param}" if p.space == "gmem" and p.param else ""))


def contract_text(c: Contract, indent: str = "  ") -> list[str]:
    s = contract_summary(c)
    if c.entries:  # the component's parameters, then each entry point with the role that runs it
        entry_lines = [f"{indent}params    {', '.join(p['decl'] for p in s['params']) or '-'}"]
        for e in s["entries"]:
            runs = "every thread, before the roles split" if e["role"] == "*" else f"role {e['role']}"
            entry_lines.append(f"{indent}entry     {e['name']}: {e['symbol']}({', '.join(e['params'])})  "
                               f"[{e['invocation']}, {runs}]")
    else:
        entry_lines = [f"{indent}entry     {c.entry.symbol}({', '.join(s['entry']['params'])})  [{c.entry.invocation}]"
                       + (f"; prefetch {c.entry.prefetch}" if c.entry.prefetch else "")
                       + (f" ({c.entry.carry} words carried)" if c.entry.carry else "")
                       + (f"; load {c.entry.load}" if c.entry.load else "")]
    lines = [f"contract {c.name} {c.version}" + (f" ({c.owner})" if c.owner else "") + f"  hash {s['hash']}",
             f"{indent}from      {c.source.file}",
             *entry_lines]
    for p in s["params"]:
        if p["tensor_map"]:
            t = p["tensor_map"]
            lines.append(f"{indent}tensormap {p['name']}: {p['dtype']}[{', '.join(t['shape'])}], box "
                         f"[{', '.join(t['box'])}], swizzle {t['swizzle']}, oob fill {t['oob_fill']}")
    for p in s["params"]:
        if p["may_alias"]:  # why the pair is declared without __restrict__
            lines.append(f"{indent}may_alias {p['name']} may share a tensor with {', '.join(p['may_alias'])} (an "
                         "in-place update): declared without __restrict__")
    lines += [f"{indent}targets   {', '.join(c.targets.archs)}  "
              + " ".join(f"{k}={'1' if v else '0'}" for k, v in s["compile_flags"].items()),
              f"{indent}threads   {_warps(c.threads.warps, c.threads.warps_expr)} warps: "
              + ", ".join(f"{r.name} {_warps(r.warps, r.warps_expr)}"
                          + (f" x {r.instances} instances" if r.instances > 1 else "")
                          + (" (warpgroup)" if r.warpgroup_aligned else "")
                          + (f" setmaxnreg {r.setmaxnreg}" if r.setmaxnreg else "") for r in c.threads.roles)
              + ("; calls __syncthreads" if c.threads.uses_syncthreads else "")
              + ("; tasks may run several to a block" if c.threads.concurrent else "")
              + (f"; <= {c.max_registers} regs/thread" if c.max_registers else "")]
    pool = s["register_pool"]
    if pool:
        of = f" of an SM's {pool['regs_per_sm']}" if pool["regs_per_sm"] else ""
        lines.append(f"{indent}registers setmaxnreg roles take {pool['registers']}{of} at one block per SM: "
                     + " + ".join(f"{r['name']} {r['warps']} warps x {r['setmaxnreg']}" for r in pool["roles"]))
    if s["cluster"]:
        lines.append(f"{indent}cluster   {' x '.join(map(str, s['cluster']))} CTAs")
    if c.loader is not None:
        lines.append(f"{indent}loader    {c.loader.slots} slots of {c.loader.slot_bytes} bytes a task"
                     + ("; honours tile.ahead (asks L2 ahead)" if c.loader.ahead else ""))
    for b in c.buffers:
        lines.append(f"{indent}smem      {b.name}: {b.bytes} bytes, align {b.align}, {b.lifetime}"
                     + (f" (phase {b.phase})" if b.phase else ""))
    for p, ps in zip(c.ports, s["ports"]):
        lines.append(f"{indent}port      {_port_text(p, ps['entries'])}")
    if c.barriers.named or c.barriers.mbarriers or c.barriers.hardcoded_ids:
        lines.append(f"{indent}barriers  named: {', '.join(b.name for b in c.barriers.named) or '-'}; mbarriers: "
                     f"{', '.join(b.name for b in c.barriers.mbarriers) or '-'}; hard-coded ids: "
                     f"{', '.join(map(str, c.barriers.hardcoded_ids)) or '-'}")
    g = s["geometry"]
    if g["provides"] or g["consumes"]:
        lines.append(f"{indent}geometry  provides {g['provides'] or '-'}; consumes "
                     + (", ".join(f"{k} {v}" for k, v in g["consumes"].items()) or "-"))
    if g["tile_sequence"]:
        ts = g["tile_sequence"]
        lines.append(f"{indent}tiles     grid [{', '.join(ts['grid'])}] {ts['order']}"
                     + (f" in bands of {ts['group']}" if ts["group"] else "") + f", {ts['distribution']}"
                     + (f"; each tile a sum over {ts['reduction']['blocks']} blocks in {ts['reduction']['port']}"
                        if ts["reduction"] else ""))
    for e in c.events.notifies:
        lines.append(f"{indent}notifies  {e.name} {e.map}")
    for e in c.events.waits:
        lines.append(f"{indent}waits     {e.name} {e.map}" + (" (in the entry, element by element)" if e.in_entry else ""))
    return lines


def cubin_kernels(obj: InputObject) -> dict:
    """For a cubin (a linked kernel): what each kernel really uses, read from its attributes."""
    if obj.format != "cubin":
        return {}
    from .formats.cubin import CubinError, read_cubin
    try:
        kernels = read_cubin(obj.data)
    except CubinError:
        return {}
    return {name: {"registers": k.registers, "frame_bytes": k.frame_bytes, "static_smem": k.static_smem_bytes,
                   "max_threads": list(k.max_threads) if k.max_threads else None,
                   "max_registers": k.max_reg_count if k.max_reg_count and k.max_reg_count < 255 else None,
                   "named_barriers": k.num_barriers, "param_bytes": k.param_bytes, "calls": k.calls,
                   "text_bytes": len(k.text)} for name, k in kernels.items()}


def object_summary(obj: InputObject) -> dict:
    out = {
        "path": obj.path,
        "format": obj.format,
        "entries": [{"kind": e.kind, "arch": e.arch, "options": e.options, "compressed": e.compressed,
                     "payload_bytes": e.payload_size} for e in obj.entries],
        "symbols": list(obj.ptx_symbols),
        "embedded_contract": obj.embedded_contract is not None,
    }
    kernels = cubin_kernels(obj)
    if kernels:
        out["kernels"] = kernels
    return out


def object_text(obj: InputObject) -> list[str]:
    lines = [f"{obj.path}: {obj.format}, {len(obj.entries)} fatbin entr{'y' if len(obj.entries) == 1 else 'ies'}"]
    for e in obj.entries:
        lines.append(f"  {e.kind:6} {e.arch or '?':7} {e.payload_size:>8} B"
                     f"{' zstd' if e.compressed and e.kind != 'ltoir' else ' compressed' if e.compressed else ''}"
                     + (f"  [{e.options}]" if e.options else ""))
    if obj.ptx_symbols:
        lines.append(f"  symbols  {', '.join(obj.ptx_symbols)}")
    for name, k in cubin_kernels(obj).items():
        bounds = ["launch bounds " + "x".join(map(str, k["max_threads"]))] if k["max_threads"] else []
        bounds += [f"at most {k['max_registers']} registers"] if k["max_registers"] else []
        lines.append(f"  kernel   {name}: {k['registers']} registers, {k['frame_bytes']} B frame, {k['static_smem']} B "
                     f"static smem, {', '.join(bounds) or 'no launch bounds'}, {k['named_barriers'] or 0} named "
                     f"barriers, {k['text_bytes']} B of code")
    return lines


def residency_summary(m: Manifest, cubin: bytes) -> dict | None:
    """Blocks an SM and the L1 they leave, for the kernel as launched: the manifest's block, dynamic and the cubin's
    static shared memory and registers, on the manifest's target. None where either is unknown."""
    from .core.targets import l1_left, residency, target
    from .formats.cubin import CubinError, read_cubin
    t = target(m.target) if m.target else None
    try:
        k = read_cubin(cubin).get(m.kernel) if cubin else None
    except CubinError:
        k = None
    if t is None or k is None or not k.registers:
        return None
    threads = m.block[0] * m.block[1] * m.block[2]
    smem = m.dynamic_smem + k.static_smem_bytes
    blocks, limits = residency(t, threads, smem, k.registers)
    split = l1_left(t, blocks, smem)
    return {"target": t.arch, "blocks_per_sm": blocks, "limited_by": [n for n, v in limits.items() if v == blocks],
            "shared_per_sm": split[0] if split else None, "l1_bytes": split[1] if split else None}


def manifest_summary(m: Manifest, cubin: bytes) -> dict:
    """How to call a linked kernel, from its manifest (read and validated by `Manifest.from_json`)."""
    return {
        "kernel": m.kernel, "matches_cubin": m.describes(cubin),
        "call": [f"{p.describe()} {p.name}" for p in m.user_params],
        "from_launcher": [p.name for p in m.params if p.implicit],
        "block": list(m.block), "dynamic_smem": m.dynamic_smem, "schedule": m.schedule,
        "dispatch": m.dispatch, "tiles": list(m.tiles), "geometry": dict(m.geometry),
        "events": [e.to_json() for e in (m.workspace.events if m.workspace is not None else ())],
        "reduction": m.stream_k.blocks if m.stream_k is not None else None,
        "dependent_launch": m.dependent_launch,
        "residency": residency_summary(m, cubin),
        "tensor_maps": [dict(p.tensor_map.to_manifest(), name=p.name, dtype=p.dtype)
                        for p in m.user_params if p.tensor_map is not None],
        "cluster": list(m.cluster) if m.cluster is not None else None,
        "cluster_tiles": dict(m.cluster_tiles),
        "roles": [g.to_json() for g in m.roles],
        "components": [c.to_json() for c in m.components],
        "wires": [w.to_json() for w in m.wires],
    }


def manifest_text(path: str, m: dict) -> list[str]:
    lines = [f"  manifest {path}" + ("" if m["matches_cubin"] else " (written for another cubin)")]
    implicit = f"  (+ {len(m['from_launcher'])} from the launcher)" if m["from_launcher"] else ""
    lines.append(f"    call     {m['kernel']}({', '.join(m['call'])}){implicit}")
    sched = m["schedule"] + (f", dispatch {m['dispatch']}" if m["dispatch"] else "") if m["schedule"] else "?"
    lines.append(f"    launch   block {'x'.join(str(b) for b in m['block'] if b > 1) or '1'}, {m['dynamic_smem']} B dynamic "
                 f"smem, {sched}; tiles {' * '.join(m['tiles']) or '1'}")
    res = m.get("residency")
    if res:  # loads into registers hold their bytes in flight in L1: shared memory taken is L1 they lose
        l1 = f"; L1 data cache {res['l1_bytes'] // 1024} KB" if res["l1_bytes"] is not None else ""
        lines.append(f"    resident {res['blocks_per_sm']} block{'s' if res['blocks_per_sm'] != 1 else ''} an SM on "
                     f"{res['target']} (limited by {' and '.join(res['limited_by'])}){l1}")
    if m.get("dependent_launch"):
        lines.append("    launch   programmatic dependent launch (overlaps the kernel before it in the stream)")
    if m.get("reduction"):
        lines.append(f"    reduce   {m['reduction']} blocks per tile, split by the launcher per shape (stream-K for one "
                     "row of tiles, split-K for several, else whole tiles)")
    if m.get("cluster"):
        lines.append(f"    cluster  {' x '.join(map(str, m['cluster']))} CTAs (the grid is whole clusters)")
    for name, count in (m.get("cluster_tiles") or {}).items():  # the launcher refuses a count of part clusters
        lines.append(f"    cluster  {name} walks {count} tiles in step: whole clusters at every launch")
    for g in m.get("roles", ()):  # a role-structured kernel's warps: who runs where, with how many registers
        inst = f", {g['instances']} instances" if g["instances"] > 1 else ""
        how = "setmaxnreg" if g["setmaxnreg"] else "the entry's"
        lines.append(f"    role     warps {g['warps'][0]}-{g['warps'][1]}{inst}: {', '.join(g['members'])}; "
                     f"{g['registers']} registers a thread ({how})")
    for t in m.get("tensor_maps", ()):  # what the launcher encodes from the tensor passed
        lines.append(f"    tensormap {t['name']}: {t['dtype']}[{', '.join(t['shape'])}], box [{', '.join(map(str, t['box']))}], "
                     f"swizzle {t['swizzle']}, oob fill {t['oob_fill']}")
    if m["geometry"]:
        lines.append("    geometry " + ", ".join(f"{k}={v}" for k, v in sorted(m["geometry"].items())))
    for c in m.get("components", ()):
        lines.append(f"    component {c['name']} {c['version']}, contract {c['contract_hash']}"
                     + (f", from {c['object']}" if c["object"] else ""))
    for w in m.get("wires", ()):  # kind `fragment`: handed in registers, the consumer's role joining the producer's
        lines.append(f"    wire     {w['from']} -> {w['to']} ({'explicit' if w['explicit'] else 'auto'}, {w['kind']})")
    for e in m["events"]:
        lines.append(f"    event    {e['name']}[{', '.join(e['shape'])}]: notified by {'; '.join(e['notified_by'])}; "
                     f"waited by {'; '.join(e['waited_by'])}")
    return lines
