"""Clusters: a component that declares a thread-block cluster walks its tiles in step with the other CTAs of its
cluster, or the link is refused.

A component with `"cluster": {"dims": [n]}` may meet its cluster's other CTAs at every tile (`barrier.cluster`, a
multicast load's arrivals, an exchange through distributed shared memory). Each CTA walks its own tiles, so the
CTAs of one cluster must make the same number of trips, and their k-th trips must be the same call's: a CTA that
has left, or that runs something else, never arrives, and its peers wait forever. Why a grid-stride walk keeps
them in step: the launcher's grid G is whole clusters (n divides G), so with the cluster's first CTA at
b0 = c * n, CTA b0 + r walks tiles b0 + r + k * G; when the tile count T is a multiple of n too, every b0 + k * G
is a multiple of n, and b0 + r + k * G < T exactly when b0 + k * G < T: every CTA of the cluster makes the same
trips. So:

- the tile count of every walk that a component declaring the cluster takes part in is whole clusters
  (`not_whole_clusters` on the shapes the link samples, PL202; the launcher checks each launch's count where it
  depends on runtime values: the manifest's `cluster_tiles`);
- the walk is one that keeps step (`step_breaker`, PL203): not `blocked` tiles (a CTA's chunk of consecutive
  tiles can end inside a cluster), not dynamic dispatch (each CTA claims tasks from one counter), and a
  clustered call waits on no task of its own call (`own_waits`: a task waiting on a peer's task of the same
  round while that peer waits at the cluster's barrier for it);
- `deal: continue` starts each call on a whole cluster (glue.py: the deal moves on in whole clusters), and a
  split reduction is split into equal pieces or not at all, never stream-K's uneven shares (runtime/streamk.py).

Components that do not declare the cluster do not meet their cluster: in a persistent kernel their calls walk as
before.

The cluster barrier (`barrier.cluster.arrive` / `wait`, cooperative_groups' `this_cluster().sync()`) waits for every
thread of every CTA of the cluster that has not exited, whoever declares what. Alone, in a block of its own warps,
a component's barrier meets its own threads; fused, it meets every thread of the block. So code that executes it
(what the conformance probe reads from its SASS: UCGABAR_ARV / UCGABAR_WAIT) is refused where the fused block has
threads that do not run the component's code at the same points (`cluster_barrier_strangers`, PL206):

- sequential and persistent schedules: a loader warp (it walks the tasks ahead, on its own), or a block wider than
  the component (a wider component sets it; the warps past the component's skip its entry and wait at the glue's
  block barrier);
- warp-specialized: any other component (its warps run their own loop at the same time);
- role-structured: any role group without one of the component's roles (its warps run their own entries), where
  the barrier is in one of the component's role entries. The probe tells the entries apart (each in a probe
  kernel of its own: `Usage.cluster_barrier_entries`); a barrier in a per-CTA `*` entry is run by every thread of
  the block before the roles split (CUTLASS's cluster sync after its mbarriers' init) and meets them all. Where
  the entries are not told apart (that probe did not link), every entry counts.

Warps that exit (the role-structured glue's alignment gaps) do not count. Pure: the resolved link (and what each
object's code uses) in, diagnostics out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..core.diagnostics import DiagnosticSink, Location
from ..core.expr import Expr, ExprError
from ..core.loader import DISTRIBUTED_NAMES as DISTRIBUTED
from ..core.model import ALL_THREADS
from ..core.pipeline import PipelineSpec
from .resolve import Resolved


@dataclass(frozen=True)
class ClusterWalk:
    """The tiles a component that declares the cluster walks: its own task grid in a persistent kernel, the
    kernel's tile grid otherwise (one loop walks every component's tiles)."""

    component: str            # the component (call) that declares the cluster
    grid: tuple[Expr, ...]    # the extents of the tiles its CTAs walk
    owner: str                # whose contract declares that grid
    pointer: str              # the grid's JSON pointer in the owner's contract


def cluster_ctas(r: Resolved) -> int:
    """CTAs in one of the kernel's clusters (1: none, or a cluster of one CTA, which is always in step)."""
    return math.prod(r.cluster) if r.cluster else 1


def declaring(r: Resolved) -> list:
    """The components (calls) whose contracts declare the cluster: those that may meet it at every tile."""
    if cluster_ctas(r) <= 1:
        return []
    return [c for c in r.components if c.contract.cluster]


def synced_walks(r: Resolved) -> list[ClusterWalk]:
    """Each walk that must keep a cluster's CTAs in step, with the grid it walks."""
    out = []
    for c in declaring(r):
        if r.schedule == "persistent":
            seq = c.contract.geometry.tile_sequence
            out.append(ClusterWalk(c.name, seq.grid, c.name, f"{seq.pointer_path}/grid"))
        else:
            out.append(ClusterWalk(c.name, r.tiles.grid, r.tiles_owner, f"{r.tiles.pointer_path}/grid"))
    return out


def tile_count(grid: tuple[Expr, ...], env: dict[str, int]) -> int | None:
    """The grid's tiles at `env`; None where a divisor is zero or an extent negative (other checks say so)."""
    total = 1
    for e in grid:
        try:
            n = e.evaluate(env)
        except ExprError:
            return None
        if n < 0:
            return None
        total *= n
    return total


def not_whole_clusters(grid: tuple[Expr, ...], n: int, fixed: dict[str, int]) -> tuple[dict[str, int], int] | None:
    """The first shape the link samples at which the grid's tile count is not a multiple of `n`: the sampled
    runtime values and the count; None where every sampled shape gives whole clusters. Names in `fixed` (the
    link's geometry and specialized values) take their value; runtime scalars are sampled as the event
    analysis samples them (small values and values around every tile size, where ceil and floor part ways)."""
    from .events import WORLDS, _sample_shapes
    used = {name for e in grid for name in e.names} - fixed.keys()
    names = sorted(used - DISTRIBUTED)
    ranks = [{}] if not used & DISTRIBUTED else [  # every rank of the sampled worlds (a distributed link)
        {k: v for k, v in (("RANK", rank), ("WORLD", world)) if k in used} for world in WORLDS for rank in range(world)]
    for values in _sample_shapes(names, fixed):
        for rank in ranks:
            shape = {**dict(zip(names, values)), **rank}
            count = tile_count(grid, {**fixed, **shape})
            if count is not None and count % n:
                return shape, count
    return None


def step_breaker(r: Resolved) -> str | None:
    """Why the kernel's walk cannot keep a cluster's CTAs in step, whatever its tile count: "blocked" (each CTA a
    chunk of consecutive tiles, ceil(T / G) of them: the last chunk can end inside a cluster), "dynamic" (each
    CTA claims its next task from one counter); None where the walk keeps step once the count is whole clusters
    (grid-stride, static dispatch)."""
    if not declaring(r):
        return None
    if r.schedule == "persistent":
        return "dynamic" if r.dispatch != "static" else None
    return "blocked" if r.tiles.distribution == "blocked" else None


def own_waits(r: Resolved) -> list[tuple[str, str, str]]:
    """(call, event, the wait's pointer) for each wait of a call that declares the cluster on an event the call
    notifies itself (a chain): its task may wait on a task of the same round on its cluster's other CTA, which
    waits at the cluster's barrier for it."""
    if r.events is None:
        return []
    out = []
    for c in declaring(r):
        for t, w in r.events.waits_of(c.name):
            if any(n.component == c.name for n in t.notifiers):
                out.append((c.name, t.name, w.pointer))
    return out


def check_cluster_walks(r: Resolved, spec: PipelineSpec, sink: DiagnosticSink) -> None:
    """PL203 where the walk cannot keep a cluster's CTAs in step; PL202 where a clustered walk's tile count is not
    whole clusters at a shape the link samples."""
    n = cluster_ctas(r)
    comps = declaring(r)
    if not comps:
        return
    first = comps[0]
    cluster_at = first.contract.at("/cluster")
    why = step_breaker(r)
    if why == "blocked":
        owner = r.component(r.tiles_owner).contract
        sink.error("PL203", f"'{first.name}' declares a cluster of {n} CTAs, and the kernel deals its tiles in blocks "
                   "(distribution blocked: ceil(tiles / CTAs) consecutive tiles a CTA): where the last block ends "
                   "inside a cluster, its CTAs walk different numbers of tiles, and one that meets its cluster at "
                   "every tile waits forever for a CTA that has left",
                   owner.at(f"{r.tiles.pointer_path}/distribution"), related=(cluster_at,),
                   hint="walk the tiles grid_stride (every component of the kernel declares the same sequence), with "
                        "a tile count of whole clusters")
    elif why == "dynamic":
        sink.error("PL203", f"'{first.name}' declares a cluster of {n} CTAs, and dynamic dispatch has each CTA claim its "
                   "next task from one counter: the CTAs of a cluster run different numbers of its tasks, in no common "
                   "order, and one that meets its cluster at every task waits forever for a CTA that runs another",
                   spec.at("/dispatch"), related=(cluster_at,),
                   hint='use "dispatch": "static": each CTA\'s tasks are then dealt to it in whole clusters')
    for call, event, pointer in own_waits(r):
        sink.error("PL203", f"'{call}' declares a cluster of {n} CTAs and waits on '{event}', which it notifies itself: "
                   "a task may wait on a task that a CTA of its own cluster runs in the same round, and that CTA waits "
                   "at the cluster's barrier for it",
                   r.component(call).contract.at(pointer), related=(r.component(call).contract.at("/cluster"),),
                   hint="order the tasks of a clustered component through another component's events, or carry the "
                        "state inside the component")
    fixed = {**r.geometry, **(r.specialize or {})}
    seen = set()
    for walk in synced_walks(r):
        if (walk.owner, walk.pointer) in seen:
            continue
        seen.add((walk.owner, walk.pointer))
        found = not_whole_clusters(walk.grid, n, fixed)
        if found is None:
            continue
        shape, count = found
        at = ", ".join(f"{k}={v}" for k, v in shape.items())
        text = " * ".join(e.text if len(walk.grid) == 1 else f"({e.text})" for e in walk.grid)
        whose = "its tile count" if walk.owner == walk.component else f"the kernel's tile count ('{walk.owner}''s grid)"
        related = [r.component(walk.component).contract.at("/cluster")]
        if r.calls is not None and r.calls.where.get(walk.component) is not None:
            related.append(r.calls.where[walk.component])
        padded = f"ceil_div({walk.grid[0].text}, {n}) * {n}"
        sink.error("PL202", f"'{walk.component}' declares a cluster of {n} CTAs, and {whose} {text} is {count}"
                   + (f" at {at}" if at else "") + f", not a multiple of {n}: the CTAs of the last cluster walk "
                   "different numbers of tiles, and one that meets its cluster at every tile waits forever for a CTA "
                   "that has left",
                   r.component(walk.owner).contract.at(walk.pointer), related=tuple(related),
                   hint=f"pad the grid to whole clusters (its first extent as `{padded}`"
                        + (", in every component that walks the kernel's tiles" if r.schedule != "persistent" else "")
                        + "), and handle the tiles past the data: loads filled past the edges (the TMA's out-of-bounds "
                          "fill), stores predicated, as CUTLASS does")


@dataclass(frozen=True)
class Strangers:
    """Threads of the fused block that do not run a component's code at the points it runs the cluster barrier."""

    what: str                        # what they are, in words
    related: tuple[Location, ...]    # what puts them in the block


def cluster_barrier_strangers(r: Resolved, name: str) -> Strangers | None:
    """The threads of the fused block that never arrive at the cluster barrier of component (call) `name` where it
    arrives; None where every thread of the block runs its code (a block of its warps alone)."""
    c = r.component(name)
    if r.roles is not None:
        others = [g for g in r.roles.groups if all(m.component != name for m in g.members)]
        if not others:
            return None
        related = []
        for g in others:
            owner = r.component(g.members[0].component).contract
            role = next((x for x in owner.threads.roles if x.name == g.members[0].role), None)
            related.append(owner.at(role.pointer_path if role is not None else "/threads"))
        groups = ", ".join(f"{g.name} ({g.warps * g.instances} warp{'s' if g.warps * g.instances != 1 else ''})"
                           for g in others)
        return Strangers(f"the warps of role group{'s' if len(others) > 1 else ''} {groups}, which run their own "
                         "entries and none of this component's", tuple(related))
    if r.schedule == "warp_specialized":
        others = [o for o in r.components if o.name != name]
        if not others:
            return None
        names = ", ".join(f"'{o.name}' ({o.contract.threads.warps} warps)" for o in others)
        return Strangers(f"the warps of {names}, which run their own tile loop at the same time (warp-specialized)",
                         tuple(o.contract.at("/threads") for o in others))
    found, related = [], []
    if r.loader is not None:
        loading = [r.component(n) for n in r.loader.components]
        found.append("the loader warp, which walks the CTA's tasks ahead on its own (load entries of "
                     + ", ".join(f"'{o.name}'" for o in loading) + ")")
        related += [o.contract.at("/entry/load") for o in loading[:1]]
    warps = c.contract.threads.warps
    widest = max(r.components, key=lambda o: o.contract.threads.warps)
    if widest.contract.threads.warps > warps:
        extra = widest.contract.threads.warps - warps
        found.append(f"{extra} warp{'s' if extra > 1 else ''} past its {warps} (the block has "
                     f"{widest.contract.threads.warps} compute warps for '{widest.name}'), which skip its entry and "
                     "wait at the block barrier after it")
        related.append(widest.contract.at("/threads/warps"))
    if not found:
        return None
    return Strangers(" and ".join(found), tuple(related))


def check_cluster_barriers(r: Resolved, usage: dict, spec: PipelineSpec, sink: DiagnosticSink) -> None:
    """PL206 for each component whose code executes the cluster barrier (`usage`: code name -> conformance Usage)
    where threads of the fused block do not run its code (`cluster_barrier_strangers`)."""
    seen = set()
    for c in r.components:
        code = c.code
        found = usage.get(code.name)
        if found is None or not found.cluster_barrier or code.name in seen:
            continue
        seen.add(code.name)  # calls of one component run its one code on the same warps: said once
        entries = barrier_entries(c.contract, found) if r.roles is not None else None
        if entries == []:
            continue  # per-CTA entries only: every thread of the block runs them before the roles split
        strangers = cluster_barrier_strangers(r, c.name)
        if strangers is None:
            continue
        related = [Location(file=c.obj.path)] if c.obj is not None else []
        if r.calls is not None and r.calls.where.get(c.name) is not None:
            related.append(r.calls.where[c.name])
        related += strangers.related
        if r.schedule == "warp_specialized" and spec.schedule and spec.sets("schedule"):
            related.append(spec.at("/schedule"))
        threads = c.contract.threads.count
        hint = (f"meet the cluster's other CTAs through mbarriers in shared or distributed shared memory with the "
                f"component's own arrival count ({threads} threads a CTA), not barrier.cluster; or link it where the "
                f"block is its {c.contract.threads.warps} warps alone")
        if not entries:
            sink.error("PL206", f"'{c.name}' executes the cluster barrier (barrier.cluster: UCGABAR_ARV / UCGABAR_WAIT "
                       "in its code), which waits for every thread of the cluster that has not exited; threads of "
                       "this kernel's block that do not run its code never arrive there, and its CTAs wait forever: "
                       f"{strangers.what}",
                       c.contract.at("/threads"), related=tuple(related), hint=hint)
            continue
        for e in entries:
            sink.error("PL206", f"'{c.name}' executes the cluster barrier in its entry '{e.name}' (barrier.cluster: "
                       f"UCGABAR_ARV / UCGABAR_WAIT in its code), run by role '{e.role}', and the cluster barrier waits "
                       "for every thread of the cluster that has not exited; threads of this kernel's block that do "
                       f"not run the component's roles never arrive there, and its CTAs wait forever: {strangers.what}",
                       c.contract.at(e.pointer_path), related=tuple(related),
                       hint="sync the cluster in a per-CTA entry of role \"*\", which every thread of the block runs "
                            "before the roles split (after the mbarriers' init), or " + hint)


def barrier_entries(contract, usage) -> list | None:
    """The role entries (not the per-CTA `*` ones) whose code executes the cluster barrier, in contract order; None
    where the probe did not tell the entries apart (or the contract has none): the component's code as a whole."""
    found = usage.cluster_barrier_entries
    if not contract.entries or found is None or any(not 0 <= i < len(contract.entries) for i in found):
        return None
    return [contract.entries[i] for i in sorted(set(found)) if contract.entries[i].role != ALL_THREADS]


def cluster_tiles(r: Resolved) -> dict[str, tuple[Expr, ...]]:
    """What the launcher checks at each launch (the manifest's cluster_tiles): each component that declares the
    cluster -> the grid whose tile count must be whole clusters."""
    return {w.component: w.grid for w in synced_walks(r)}


__all__ = ["ClusterWalk", "cluster_ctas", "declaring", "synced_walks", "tile_count", "not_whole_clusters",
           "step_breaker", "own_waits", "check_cluster_walks", "Strangers", "cluster_barrier_strangers",
           "barrier_entries", "check_cluster_barriers", "cluster_tiles"]
