"""Role groups of a role-structured kernel: which components' roles run on which warps, with how
many registers, and which entries each calls in what order.

Components written in the `entries` form (a Hopper mainloop: `init` on every thread, then `load`
on a producer warpgroup and `mma` on consumer warpgroups) split the block by role. A role that
takes a register fragment from another component's role runs on that role's warps, right after
it, tile by tile: the fragment never leaves the registers (an epilogue after a mainloop). Pure:
resolved components and wires in, a plan (or diagnostics) out.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..core.diagnostics import DiagnosticSink
from ..core.model import ALL_THREADS, EntryPoint


@dataclass(frozen=True)
class Member:
    component: str
    role: str
    entries: tuple[EntryPoint, ...]   # its per-tile (and per-CTA) entries on this role, in contract order


@dataclass(frozen=True)
class RoleGroup:
    """Warps that run together: one component's role, and the roles that join it through fragments."""

    members: tuple[Member, ...]       # the owner first, then joiners in fragment order
    warps: int                        # per instance
    setmaxnreg: int | None            # the owner's (joiners may not ask for another)
    warpgroup_aligned: bool
    instances: int = 1                # the owner's: copies on consecutive warps, tiles round-robin

    @property
    def name(self) -> str:
        return f"{self.members[0].component}.{self.members[0].role}"


@dataclass(frozen=True)
class Fragment:
    """A register port wire: the consumer's entry reads what the producer's entry left in registers."""

    producer: str
    out_port: str
    consumer: str
    in_port: str
    elements: int                     # per thread of the role
    ctype: str
    role: str                         # the producer's role, whose warps hold it


@dataclass(frozen=True)
class RolePlan:
    init: tuple[tuple[str, EntryPoint], ...]    # (component, entry) run by every thread, in pipeline order
    groups: tuple[RoleGroup, ...]
    fragments: tuple[Fragment, ...]

    def group_of(self, component: str, role: str) -> RoleGroup:
        return next(g for g in self.groups if any((m.component, m.role) == (component, role) for m in g.members))

    def copies(self, contract) -> int:
        """How many copies of a component's own resources the link makes: a component whose one role
        runs on an instanced group gets its buffers and barriers once per instance; others share."""
        roles = contract.threads.roles
        if len(roles) != 1:
            return 1
        return self.group_of(contract.name, roles[0].name).instances


def plan_roles(components, wires, sink: DiagnosticSink) -> RolePlan | None:
    """Groups from the fragment wires: a role that consumes a fragment joins the producer's group."""
    from ..core.model import DTYPE_C
    by_name = {c.name: c for c in components}
    joins: dict[tuple[str, str], tuple[str, str]] = {}
    fragments = []
    for w in wires:
        if w.kind != "fragment":
            continue
        prod, cons = by_name[w.producer].contract, by_name[w.consumer].contract
        src = (w.producer, w.out_port.role)
        dst = (w.consumer, w.in_port.role)
        p_role = next(r for r in prod.threads.roles if r.name == src[1])
        c_role = next(r for r in cons.threads.roles if r.name == dst[1])
        if p_role.warps != c_role.warps:
            sink.error("PL103", f"fragment '{w}': role '{dst[1]}' of '{w.consumer}' has {c_role.warps} warps but "
                       f"the role holding the fragment ('{src[1]}' of '{w.producer}') has {p_role.warps}; a register "
                       "fragment stays with the threads that hold it", cons.at(c_role.pointer_path),
                       related=(prod.at(p_role.pointer_path),))
            continue
        if dst in joins and joins[dst] != src:
            sink.error("PL103", f"role '{dst[1]}' of '{w.consumer}' takes fragments from two roles "
                       f"({joins[dst][0]}.{joins[dst][1]} and {src[0]}.{src[1]})", cons.at(c_role.pointer_path))
            continue
        joins[dst] = src
        elements = 1
        for e in w.tile:
            elements *= e
        threads = 32 * p_role.warps
        if elements % threads:
            sink.error("PL102", f"fragment '{w}': a {'x'.join(map(str, w.tile))} tile does not split evenly over the "
                       f"{threads} threads of role '{src[1]}'", prod.at(w.out_port.pointer_path))
            continue
        fragments.append(Fragment(w.producer, w.out_port.name, w.consumer, w.in_port.name, elements // threads,
                                  DTYPE_C[w.out_port.dtype], src[1]))
    if sink.has_errors:
        return None

    def owner(key):
        seen = set()
        while key in joins and key not in seen:
            seen.add(key)
            key = joins[key]
        return key

    groups: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for c in components:
        for r in c.contract.threads.roles:
            groups.setdefault(owner((c.name, r.name)), []).append((c.name, r.name))
    out = []
    for (comp, role), keys in groups.items():
        members = []
        for cname, rname in sorted(keys, key=lambda k: (k != (comp, role), [c.name for c in components].index(k[0]))):
            contract = by_name[cname].contract
            members.append(Member(cname, rname, tuple(e for e in contract.entries if e.role == rname)))
        head = next(r for r in by_name[comp].contract.threads.roles if r.name == role)
        for cname, rname in keys:
            r = next(x for x in by_name[cname].contract.threads.roles if x.name == rname)
            if (cname, rname) != (comp, role) and r.instances != 1:
                sink.error("PL103", f"role '{rname}' of '{cname}' declares instances but runs on the warps of "
                           f"'{comp}.{role}', whose instances it takes", by_name[cname].contract.at(
                               f"{r.pointer_path}/instances"))
            if (cname, rname) != (comp, role) and r.setmaxnreg is not None and r.setmaxnreg != head.setmaxnreg:
                sink.error("PL100", f"role '{rname}' of '{cname}' asks setmaxnreg {r.setmaxnreg} but runs on the warps "
                           f"of '{comp}.{role}', which set {head.setmaxnreg}", by_name[cname].contract.at(
                               f"{r.pointer_path}/setmaxnreg"))
        aligned = any(next(x for x in by_name[c].contract.threads.roles if x.name == r).warpgroup_aligned
                      for c, r in keys)
        out.append(RoleGroup(tuple(members), head.warps, head.setmaxnreg, aligned, head.instances))
    init = tuple((c.name, e) for c in components for e in c.contract.entries if e.role == ALL_THREADS)
    return None if sink.has_errors else RolePlan(init, tuple(out), tuple(fragments))


@dataclass(frozen=True)
class StreamK:
    """A tile sequence whose tiles sum reduction blocks into a register fragment (a GEMM's k-blocks):
    the glue walks whole tiles first, then splits the last tiles' blocks evenly over the CTAs, and
    the CTA with a tile's first piece adds the other pieces' partial fragments before the tile's
    consumers run. The launcher picks how many tiles to split (0: none) and owns the partials."""

    component: str
    fragment: Fragment   # the partial sums
    group: RoleGroup     # the warps that hold them
    blocks: object       # Expr: reduction blocks per tile, over the kernel's parameters and geometry

    def slot_floats(self) -> int:
        """One CTA's partial slot: 32 flag words, then every warp's fragment."""
        return 32 + 32 * self.group.warps * self.fragment.elements


def plan_stream_k(components, plan: RolePlan | None, tiles, sink: DiagnosticSink) -> StreamK | None:
    """The split reduction of a role-structured kernel, if a component declares one (PL109)."""
    declared = [c for c in components if c.contract.geometry.tile_sequence is not None
                and c.contract.geometry.tile_sequence.reduction is not None]
    if not declared:
        return None
    first = declared[0]
    red = first.contract.geometry.tile_sequence.reduction
    for c in declared[1:]:
        sink.error("PL109", f"'{c.name}' declares a split reduction too; one kernel splits one reduction "
                   f"('{first.name}' declares it first)", c.contract.at(c.contract.geometry.tile_sequence.reduction
                                                                        .pointer_path),
                   related=(first.contract.at(red.pointer_path),))
    if plan is None:
        return None
    frag = next((f for f in plan.fragments if (f.producer, f.out_port) == (first.name, red.port)), None)
    if frag is None:
        sink.error("PL109", f"nothing reads '{first.name}.{red.port}', the partial sums of its split reduction",
                   first.contract.at(f"{red.pointer_path}/port"),
                   hint="wire the port to the component that consumes the tile (an epilogue)")
        return None
    if tiles is not None and tiles.distribution != "grid_stride":
        sink.error("PL109", f"a split reduction walks tiles grid-stride; the tile sequence is {tiles.distribution}",
                   first.contract.at(f"{red.pointer_path}"))
        return None
    group = plan.group_of(first.name, frag.role)
    if group.members[0].component != first.name:
        sink.error("PL109", f"'{first.name}' splits its reduction on role '{frag.role}', which runs on the warps of "
                   f"'{group.name}'; the partial sums must be added right after its own entries",
                   first.contract.at(red.pointer_path))
        return None
    if frag.elements % 4:
        sink.error("PL109", f"the partial fragment of '{first.name}.{red.port}' holds {frag.elements} elements per "
                   "thread; partials travel as float4, so it must be a multiple of 4",
                   first.contract.at(f"{red.pointer_path}/port"))
        return None
    return None if sink.has_errors else StreamK(first.name, frag, group, red.blocks)
