"""Checks over a set of contracts, before any pipeline is known (`pipelink check`).

Only what holds whatever the wiring: flags every component must share, a target every component
can go to, barrier ids nobody may share, and resource lower bounds (what the components need even
when the allocator shares every byte and warp it may) against the device limits. Pure functions.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .diagnostics import DiagnosticSink
from .expr import ExprError
from .model import DTYPE_BYTES, Contract
from .targets import TARGETS, Target, ltoir_archs_for


def common_targets(contracts: list[Contract]) -> list[str]:
    """Link targets every component can go into, in TARGETS order."""
    out = []
    for arch in TARGETS:
        if all(any(a in ltoir_archs_for(arch) for a in c.targets.archs) for c in contracts):
            out.append(arch)
    return out


def choose_target(contracts: list[Contract], requested: str | None, sink: DiagnosticSink,
                  needs: Sequence[Need] = ()) -> str | None:
    """The link target: the requested one (never another: what it lacks is refused at the field), else
    `default_target`'s choice."""
    common = common_targets(contracts)
    if requested:
        if requested not in TARGETS:
            sink.error("PL034", f"unknown target {requested!r}", hint="known: " + ", ".join(TARGETS))
            return None
        bad = [c for c in contracts if requested not in common and
               not any(a in ltoir_archs_for(requested) for a in c.targets.archs)]
        for c in bad:
            sink.error("PL041", f"component '{c.name}' targets {', '.join(c.targets.archs)}, not {requested}",
                       c.at("/targets/archs"))
        return None if bad else requested
    if not common:
        _no_common_target(contracts, sink)
        return None
    return default_target(contracts, needs)


@dataclass(frozen=True)
class Need:
    """Something the link asks of its target beyond what the contracts declare: the pipeline's (a warp-specialized
    schedule's rings of mbarriers) or an option's (dependent launch). The allocator refuses it at its own field."""
    what: str
    has: Callable[[Target], bool]


def default_target(contracts: list[Contract], needs: Sequence[Need] = ()) -> str | None:
    """The target unless told one: the first common target (TARGETS order, base archs before 'a') that has what
    every component declares (`features`) and what the link asks for besides (`needs`: the pipeline's, the
    options'); else the first that has what the components declare; else the first common target (what it lacks
    is then refused at the field). None where the components share no target."""
    common = common_targets(contracts)
    declared = [a for a in common if not any(lacking(c, TARGETS[a]) for c in contracts)]
    return next((a for a in declared if all(n.has(TARGETS[a]) for n in needs)),
                declared[0] if declared else common[0] if common else None)


@dataclass(frozen=True)
class Feature:
    """Something a contract declares that only some targets have."""
    code: str
    pointer: str
    what: str                       # "role 'consumer' of 'gemm' uses setmaxnreg"
    has: Callable[[Target], bool]
    where: str                      # the targets that have it, in words


def _sm90(t: Target) -> bool:
    return t.capability >= 90


def features(c: Contract) -> list[Feature]:
    """What `c` declares that only some targets have: a role's setmaxnreg (the glue's instruction assembles for
    sm_90a and sm_100a only); a cluster (the glue's `__cluster_dims__`) and a tensor-map parameter (the driver has
    tensor maps for compute capability 9.0 and later only): sm_90 and later; the mbarriers the glue sets up for a
    component (its declared mbarriers, the turns of a role's instances, the loader ring of a load entry): sm_90 and
    later."""
    out = [Feature("PL025", f"{r.pointer_path}/setmaxnreg", f"role '{r.name}' of '{c.name}' uses setmaxnreg",
                   lambda t: t.setmaxnreg, "sm_90a and sm_100a have it")
           for r in c.threads.roles if r.setmaxnreg is not None]
    if c.cluster is not None:
        out.append(Feature("PL204", "/cluster", f"'{c.name}' assumes a thread-block cluster of {list(c.cluster)}",
                           _sm90, "sm_90 and later have clusters"))
    out += [Feature("PL204", f"{p.pointer_path}/tensor_map", f"parameter '{p.name}' of '{c.name}' is a tensor map",
                    _sm90, "sm_90 and later have the TMA") for p in c.entry.params if p.tensor_map is not None]
    # The glue sets up every mbarrier with fence.mbarrier_init and waits on it with mbarrier.try_wait: sm_90 on.
    out += [Feature("PL205", m.pointer_path, f"the glue sets up mbarrier '{m.name}' of '{c.name}' with "
                    "fence.mbarrier_init", _sm90, MBARRIER_GLUE) for m in c.barriers.mbarriers]
    out += [Feature("PL205", f"{r.pointer_path}/instances", f"the {r.instances} instances of role '{r.name}' of "
                    f"'{c.name}' take turns through mbarriers", _sm90, MBARRIER_GLUE)
            for r in c.threads.roles if r.instances > 1]
    if c.entry.load:
        out.append(Feature("PL205", "/entry/load", f"the load entry of '{c.name}' fills the loader ring through "
                           "mbarriers and cp.async.bulk", _sm90, MBARRIER_GLUE))
    return out


MBARRIER_GLUE = "sm_90 and later have fence.mbarrier_init, mbarrier.try_wait and cp.async.bulk"


def lacking(c: Contract, target: Target) -> list[Feature]:
    """What `c` declares that `target` does not have."""
    return [f for f in features(c) if not f.has(target)]


def check_features(contracts: list[Contract], arch: str, sink: DiagnosticSink) -> None:
    """What each component declares must be the target's (the one checked, linked or built for), whatever other
    targets its contract lists: a role with setmaxnreg in an sm_90 link is glue the toolchain refuses, however many
    sm_90a targets the contract also lists. Said at the field, with a target the contract lists that has it."""
    target = TARGETS[arch]
    for c in contracts:
        missing = lacking(c, target)
        if not missing:
            continue
        fit = [a for a in c.targets.archs if a in TARGETS and not lacking(c, TARGETS[a])]
        alt = next((a for a in fit if a == arch + "a"), fit[0] if fit else None)  # the arch-specific sibling first
        for f in missing:
            if alt is None:
                hint = f"list a target that has it ({f.where}) in targets.archs, and check and link for it"
            else:
                hint = f"check, link and build with --arch {alt} (the contract lists it)" + (
                    f", or drop {arch} from the contract's targets.archs" if arch in c.targets.archs else "")
            sink.error(f.code, f"{f.what}, which {arch} does not have ({f.where})", c.at(f.pointer), hint=hint)


def _no_common_target(contracts: list[Contract], sink: DiagnosticSink) -> None:
    first = contracts[0]
    for c in contracts[1:]:
        if not common_targets([first, c]):
            sink.error("PL041", f"components '{first.name}' ({', '.join(first.targets.archs)}) and '{c.name}' "
                       f"({', '.join(c.targets.archs)}) share no target", c.at("/targets/archs"),
                       related=(first.at("/targets/archs"),))
            return
    sink.error("PL041", "the components share no target arch: " +
               "; ".join(f"{c.name}: {', '.join(c.targets.archs)}" for c in contracts), contracts[0].at("/targets/archs"))


def check_names(contracts: list[Contract], sink: DiagnosticSink) -> None:
    first: dict[str, Contract] = {}
    for c in contracts:  # one contract given twice (an object and its own sidecar, a file named twice): say so once
        if c.hash in first:
            sink.error("PL047", f"component '{c.name}' is given twice, with the same contract", c.at("/name"),
                       related=(first[c.hash].at("/name"),),
                       hint="give each component once: an object carries its contract (embedded, or the sidecar "
                            "<object>.contract.json beside it), so list the object alone")
        first.setdefault(c.hash, c)
    contracts = list(first.values())
    for attr, code, what in (("name", "PL047", "component name"), ("symbol", "PL048", "entry symbol")):
        seen: dict[str, tuple[Contract, str]] = {}
        for c in contracts:
            keys = [(c.name, "/name")] if attr == "name" else _symbols(c)
            for key, ptr in keys:
                if key in seen:
                    sink.error(code, f"{what} '{key}' is used by two components", c.at(ptr),
                               related=(seen[key][0].at(seen[key][1]),))
                seen.setdefault(key, (c, ptr))


def _symbols(c: Contract) -> list[tuple[str, str]]:
    return list(c.symbol_pointers())


def check_cluster(contracts: list[Contract], sink: DiagnosticSink) -> None:
    """One kernel has one cluster shape: every component that assumes one must assume the same."""
    declared = [c for c in contracts if c.cluster is not None]
    for c in declared[1:]:
        if _dims3(c.cluster) != _dims3(declared[0].cluster):
            sink.error("PL107", f"'{c.name}' assumes a cluster of {list(c.cluster)} but '{declared[0].name}' one of "
                       f"{list(declared[0].cluster)}", c.at("/cluster/dims"), related=(declared[0].at("/cluster/dims"),))


def _dims3(dims: tuple[int, ...]) -> tuple[int, int, int]:
    return tuple(list(dims) + [1] * (3 - len(dims)))


def check_flags(contracts: list[Contract], sink: DiagnosticSink) -> None:
    """-ftz/-prec-div/-prec-sqrt/-fmad must agree: LTO does not inline across different settings."""
    by_flags: dict[tuple, list[Contract]] = defaultdict(list)
    for c in contracts:
        by_flags[tuple(c.targets.flags.as_dict().items())].append(c)
    if len(by_flags) <= 1:
        return
    groups = sorted(by_flags.items(), key=lambda kv: -len(kv[1]))  # the majority is the reference
    reference = dict(groups[0][0])
    ref_c = groups[0][1][0]
    show = lambda k, v: f"{k}={'true' if v else 'false'}"  # noqa: E731
    for flags, members in groups[1:]:
        keys = [k for k, v in flags if reference[k] != v]
        mine = ", ".join(show(k, dict(flags)[k]) for k in keys)
        theirs = ", ".join(show(k, reference[k]) for k in keys)
        for c in members:
            sink.error("PL040", f"component '{c.name}' is compiled with {mine} but '{ref_c.name}' with {theirs}",
                       c.at("/targets/compile_flags"), related=(ref_c.at("/targets/compile_flags"),))


def check_geometry(contracts: list[Contract], sink: DiagnosticSink) -> dict[str, int]:
    """Providers must agree; a consumer's range must admit what is provided. Returns the values."""
    provided: dict[str, tuple[int, Contract]] = {}
    for c in contracts:
        for name, value in c.geometry.provides.items():
            if name in provided and provided[name][0] != value:
                other = provided[name][1]
                sink.error("PL050", f"'{name}' is provided as {value} by '{c.name}' and as {provided[name][0]} by "
                           f"'{other.name}'", c.at(f"/geometry/provides/{name}"),
                           related=(other.at(f"/geometry/provides/{name}"),))
            provided.setdefault(name, (value, c))
    for c in contracts:
        for name, rng in c.geometry.consumes.items():
            if name in provided and not rng.admits(provided[name][0]):
                value, provider = provided[name]
                sink.error("PL051", f"'{c.name}' accepts {name} {rng.describe()}, but '{provider.name}' provides "
                           f"{value}", c.at(f"/geometry/consumes/{name}"),
                           related=(provider.at(f"/geometry/provides/{name}"),))
    env = {k: v for k, (v, _) in provided.items()}
    for c in contracts:
        for name, rng in c.geometry.consumes.items():
            if name not in env and rng.default is not None:
                env[name] = rng.default
    return env


@dataclass(frozen=True)
class SmemLowerBound:
    persistent: int
    scratch: int        # the largest phase's scratch: phases may share bytes
    ports: int          # producers' smem ports; a zero-copy consumer adds nothing
    mbarriers: int
    unknown: tuple[str, ...]  # sizes that depend on geometry nobody provides

    @property
    def total(self) -> int:
        return self.persistent + self.scratch + self.ports + self.mbarriers


def smem_lower_bound(contracts: list[Contract], env: dict[str, int]) -> SmemLowerBound:
    persistent = ports = mbars = 0
    phases: dict[tuple[str, str], int] = defaultdict(int)
    unknown = []

    def size(c, what, e):
        try:
            return e.evaluate(env)
        except ExprError:
            unknown.append(f"{c.name}.{what}")
            return 0

    for c in contracts:
        for b in c.buffers:
            n = size(c, b.name, b.bytes)
            if b.lifetime == "persistent":
                persistent += n
            else:  # a phase is one component's: two components' scratch may share bytes (tasks run apart)
                phases[(c.name, b.phase)] += n
        for p in c.ports:
            if p.space == "smem" and p.direction == "out":
                elems = 1
                for e in p.tile:
                    elems *= size(c, p.name, e)
                ports += elems * DTYPE_BYTES[p.dtype] * size(c, p.name, p.stages)
        mbars += 8 * sum(m.count for m in c.barriers.mbarriers)
    return SmemLowerBound(persistent, max(phases.values(), default=0), ports, mbars, tuple(unknown))


def check_resources(contracts: list[Contract], arch: str, env: dict[str, int], sink: DiagnosticSink) -> None:
    target = TARGETS[arch]
    smem = smem_lower_bound(contracts, env)
    if smem.total > target.smem_per_block:
        biggest = max(contracts, key=lambda c: smem_lower_bound([c], env).total)
        sink.error("PL042", f"the components need at least {smem.total} bytes of shared memory (persistent "
                   f"{smem.persistent}, scratch {smem.scratch}, ports {smem.ports}, mbarriers {smem.mbarriers}); "
                   f"{arch} allows {target.smem_per_block} per block", biggest.at("/smem"))
    for c in contracts:
        if c.threads.count > target.max_threads_per_block:
            sink.error("PL043", f"'{c.name}' alone needs {c.threads.count} threads; {arch} allows "
                       f"{target.max_threads_per_block}", c.at("/threads/warps"))
        if c.max_registers and c.max_registers > target.max_regs_per_thread:
            sink.error("PL046", f"'{c.name}' asks {c.max_registers} registers per thread; {arch} allows "
                       f"{target.max_regs_per_thread}", c.at("/registers/max_per_thread"))
        check_roles(c, target, sink)
    check_barriers(contracts, target.named_barriers - 1, sink)


POOL_HINT = "lower a role's setmaxnreg or its warps"
CAP_HINT = "raise the role's setmaxnreg, or lower the component's register cap"


def register_pool(groups, regs_per_sm: int) -> str | None:
    """Why warps that run at once, each group with its own registers per thread, do not fit an SM at one block per
    SM (PL100), or None. `groups`: (name, warps, registers per thread), a role's copies counted in its warps."""
    total = sum(32 * warps * regs for _, warps, regs in groups)
    if total <= regs_per_sm:
        return None
    parts = "; ".join(f"{name} {warps} warps x {regs}" for name, warps, regs in groups)
    return f"the roles' registers add up to {total} ({parts}), over the {regs_per_sm} of an SM at one block per SM"


def cap_over_role(c: Contract, role: str, regs: int, source: str) -> str | None:
    """Why `c`'s register cap does not fit the `regs` its role runs with (`source`: where that count comes from),
    PL104, or None."""
    if c.max_registers and c.max_registers > regs:
        return (f"'{c.name}' needs up to {c.max_registers} registers per thread but its role '{role}' runs on warps "
                f"with {regs} ({source})")
    return None


def misaligned_roles(c: Contract, begin: int, sink: DiagnosticSink) -> dict[str, int]:
    """Each role's first warp, the component's warps starting at `begin` and its roles following one another in
    contract order; PL070 for a warpgroup-aligned role that does not start on a warpgroup boundary."""
    out, off = {}, begin
    for role in c.threads.roles:
        if role.warpgroup_aligned and off % 4:
            sink.error("PL070", f"role '{role.name}' of '{c.name}' would start at warp {off}, not a warpgroup "
                       "boundary", c.at(role.pointer_path))
        out[role.name] = off
        off += role.warps
    return out


def check_roles(c: Contract, target, sink: DiagnosticSink) -> None:
    """What one contract's roles need in any kernel, so that `check` of the contract alone says what its link would.
    A single-entry component has no per-role registers (setmaxnreg: PL078), and starts on a warpgroup boundary
    wherever it has a warpgroup-aligned role (PL070 as the link places it). In the entries form a role with
    setmaxnreg runs with that count wherever it goes (its own group, or another's that sets the same: PL100), so
    those roles alone must fit the SM (PL100; the others take what the link leaves) and hold the component's
    register cap (PL104)."""
    roles = c.threads.roles
    if not c.entries:
        for r in roles:
            if r.setmaxnreg is not None:
                sink.error("PL078", f"role '{r.name}' of '{c.name}' asks for setmaxnreg {r.setmaxnreg}; the glue "
                           "reconfigures registers per role only in role-structured kernels (the `entries` form), "
                           "and ignoring the request would break the component's register plan",
                           c.at(f"{r.pointer_path}/setmaxnreg"))
        if all(r.warps_expr is None or r.warps_expr.names <= c.geometry.provides.keys() for r in roles):
            misaligned_roles(c, 0, sink)  # warps over consumed geometry: the link places them at its values
        return
    fixed = [r for r in roles if r.setmaxnreg is not None and
             (r.warps_expr is None or r.warps_expr.names <= c.geometry.provides.keys())]
    why = register_pool([(f"{c.name}.{r.name}", r.warps * r.instances, r.setmaxnreg) for r in fixed],
                        target.regs_per_sm)
    if why:
        sink.error("PL100", why + ", in any kernel: a role keeps its setmaxnreg wherever it runs", c.at("/threads/roles"),
                   hint=POOL_HINT)
    for r in roles:
        why = cap_over_role(c, r.name, r.setmaxnreg, "its setmaxnreg") if r.setmaxnreg is not None else None
        if why:
            sink.error("PL104", why, c.at("/registers/max_per_thread"), hint=CAP_HINT)


def check_barriers(contracts: list[Contract], free_ids: int, sink: DiagnosticSink) -> None:
    owner: dict[int, tuple[Contract, int]] = {}
    for c in contracts:
        for i, bid in enumerate(c.barriers.hardcoded_ids):
            if bid in owner:
                other, j = owner[bid]
                sink.error("PL045", f"barrier id {bid} is hard-coded by both '{other.name}' and '{c.name}': a "
                           "hard-coded id is one component's in a link, whatever the schedule (where the two run at "
                           "once, their bar.syncs release each other's waits)",
                           c.at(f"/barriers/hardcoded_ids/{i}"),
                           related=(other.at(f"/barriers/hardcoded_ids/{j}"),))
            owner.setdefault(bid, (c, i))
    needed = len(owner) + sum(len(c.barriers.named) for c in contracts)
    if needed > free_ids:
        sink.error("PL044", f"the components need {needed} named barrier ids ({len(owner)} hard-coded, "
                   f"{needed - len(owner)} to assign); only {free_ids} are free", contracts[0].at("/barriers"))


def check_set(contracts: list[Contract], sink: DiagnosticSink, arch: str | None = None,
              needs: Callable[[], Sequence[Need]] | None = None) -> str | None:
    """Every set check; returns the chosen target arch (None if there is none). `needs`: what the link asks of
    its target beyond the contracts (the pipeline's, the options'), asked for only where no target is given and the
    checks before the target's choice found nothing wrong."""
    if not contracts:
        return None
    check_names(contracts, sink)
    check_cluster(contracts, sink)
    check_flags(contracts, sink)
    env = check_geometry(contracts, sink)
    asked = needs() if needs is not None and not arch and not sink.has_errors else ()
    target = choose_target(contracts, arch, sink, asked)
    if target:
        check_features(contracts, target, sink)
        check_resources(contracts, target, env, sink)
    return target
