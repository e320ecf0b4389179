"""The task profile of a persistent kernel linked with `profile_tasks`: one record per task, written by the
glue into a ring in device memory (`pl_profile_ring`, slots claimed so far `pl_profile_next`, launches counted in
`pl_profile_launch`; include/pipelink/events.h pl::profile), read back and summarized here.

A record says which component's task ran on which SM, and four global-timer stamps (ns): the task starts
(its CTA has it), its waits are met, its entry and the block's barrier after it are done, its
notifications are out. So a component's time splits into waiting (for its inputs' events), running, and
notifying; what no task covers is the claim between tasks and idle CTAs. A component may stamp points of its
own in between (its header's `profile_mark(i)`): where its running time goes. In a kernel with a loader warp the
loader writes a record of its own for each task it loads (`loader` set): when it got to the task, when its L2
requests ahead were out, when the load entry returned (its slots acquired, their copies issued); the summaries
below read the tasks' records, loader_leads() sets the two against each other, loader_issue() lays the loaders'
copies over a layer beside the calls running.
"""
from __future__ import annotations

import statistics
import struct
from dataclasses import dataclass

FIRST_MARK, MARKS = 5, 6  # pl::kProfileFirstMark, pl::kProfileMarks (pipelink/profile_record.h)
WORDS = FIRST_MARK + MARKS  # pl::profile::kWords: the tag, four stamps, the marks
# The glue's globals, read by name: the ring, the next slot, and the count of launches (the records' tag).
RING_SYMBOL, NEXT_SYMBOL, LAUNCH_SYMBOL = "pl_profile_ring", "pl_profile_next", "pl_profile_launch"
LOADER_FLAG = 0x80  # the tag's component byte: a record the loader warp wrote (linker/glue.py _loader_record)
COMPONENTS = LOADER_FLAG  # components (calls) the byte names beside the flag: a larger link is refused (PL191)


@dataclass(frozen=True)
class TaskRecord:
    launch: int        # the launch's number, modulo 2^16
    component: str
    task: int
    sm: int
    start: int         # ns, global timer
    ready: int         # waits met
    done: int          # entry and barrier done
    notified: int      # notifications out
    marks: tuple = ()  # the component's own stamps (ns), 0 where the task stamped none
    loader: bool = False  # the loader's record of the task: start, L2 requests ahead out, load entry returned (x2)

    @property
    def wait_ns(self) -> int:
        return self.ready - self.start

    @property
    def run_ns(self) -> int:
        return self.done - self.ready

    @property
    def notify_ns(self) -> int:
        return self.notified - self.done


def decode(ring: bytes, next_slot: int, capacity: int, components: list[str]) -> list[TaskRecord]:
    """The records of the latest launch in the ring, in the order they started. `next_slot`: how many slots were
    ever claimed (the ring keeps the last `capacity`). A recording thread claims slots a chunk at a time
    (pl::profile::begin), so some claimed slots hold nothing of the launch: zeros (never written) or an older
    launch's record, both skipped; the latest launch is that of the record that started last. Raises ValueError if
    the latest launch wrote more records than the ring holds (its first ones are gone)."""
    if len(ring) < capacity * WORDS * 8:
        raise ValueError(f"the ring holds {len(ring)} bytes, {capacity} records need {capacity * WORDS * 8}")
    written = min(next_slot, capacity)
    first = next_slot - written
    records = []
    for n in range(first, next_slot):
        slot = n % capacity
        w = struct.unpack_from(f"<{WORDS}Q", ring, slot * WORDS * 8)
        if w[0] == 0 and w[1] == 0:  # a claimed slot nothing wrote
            continue
        byte = (w[0] >> 40) & 0xFF
        comp = byte & ~LOADER_FLAG
        records.append(TaskRecord(launch=w[0] >> 48, component=components[comp] if comp < len(components) else
                                  f"#{comp}", task=w[0] & 0xFFFFFFFF, sm=(w[0] >> 32) & 0xFF,
                                  start=w[1], ready=w[2], done=w[3], notified=w[4], marks=tuple(w[FIRST_MARK:]),
                                  loader=bool(byte & LOADER_FLAG)))
    if not records:
        return []
    latest = max(records, key=lambda r: r.start).launch
    mine = [r for r in records if r.launch == latest]
    if next_slot > capacity and records[0].launch == latest:
        raise ValueError(f"the last launch wrote more than the ring's {capacity} records: link with a larger "
                         "profile_tasks")
    return sorted(mine, key=lambda r: r.start)  # stable: records of one start keep their slots' order


def tasks_only(records: list[TaskRecord]) -> list[TaskRecord]:
    """The tasks' records, without the loader's."""
    return [r for r in records if not r.loader]


@dataclass(frozen=True)
class ComponentTime:
    component: str
    tasks: int
    first_start_us: float   # from the launch's first task start
    last_end_us: float
    wait_us: float          # summed over tasks
    run_us: float
    notify_us: float
    median_run_us: float


def summarize(records: list[TaskRecord]) -> tuple[float, int, list[ComponentTime]]:
    """(span of the launch's tasks in us, SMs seen, per component in order of first start)."""
    records = tasks_only(records)
    if not records:
        return 0.0, 0, []
    t0 = min(r.start for r in records)
    span = (max(r.notified for r in records) - t0) / 1000.0
    by = {}
    for r in records:
        by.setdefault(r.component, []).append(r)
    out = []
    for name, rs in by.items():
        out.append(ComponentTime(
            name, len(rs), (min(r.start for r in rs) - t0) / 1000.0, (max(r.notified for r in rs) - t0) / 1000.0,
            sum(r.wait_ns for r in rs) / 1000.0, sum(r.run_ns for r in rs) / 1000.0,
            sum(r.notify_ns for r in rs) / 1000.0, statistics.median(r.run_ns for r in rs) / 1000.0))
    out.sort(key=lambda c: c.first_start_us)
    return span, len({r.sm for r in records}), out


def render(records: list[TaskRecord]) -> str:
    """A table of summarize()'s figures."""
    span, sms, comps = summarize(records)
    lines = [f"{len(tasks_only(records))} tasks on {sms} SMs over {span:.1f} us (first task start to last notification)",
             f"{'component':24s} {'tasks':>7s} {'from us':>9s} {'to us':>9s} {'wait us':>10s} {'run us':>10s} "
             f"{'notify us':>10s} {'median run':>10s}"]
    for c in comps:
        lines.append(f"{c.component:24s} {c.tasks:7d} {c.first_start_us:9.1f} {c.last_end_us:9.1f} {c.wait_us:10.1f} "
                     f"{c.run_us:10.1f} {c.notify_us:10.1f} {c.median_run_us:10.2f}")
    return "\n".join(lines)


@dataclass(frozen=True)
class Phase:
    """One call's tasks in one layer: from its first task's waits met to its last task's notifications."""
    component: str
    layer: int
    ready_us: float  # from the launch's first task start
    done_us: float


def phases(records: list[TaskRecord], layers: int, layered: set[str]) -> list[Phase]:
    """Each component's span per layer, in order of start. A component in `layered` runs once a layer and
    numbers its tasks layer-major (the glue's `pl_layer * tasks + t`), so its records split into `layers`
    equal runs; any other is one phase (layer -1). Raises ValueError when a layered component's task count
    is not a multiple of `layers`."""
    records = tasks_only(records)
    if not records:
        return []
    t0 = min(r.start for r in records)
    by: dict[tuple[str, int], list[TaskRecord]] = {}
    count: dict[str, int] = {}
    for r in records:
        count[r.component] = count.get(r.component, 0) + 1
    for r in records:
        if r.component in layered:
            if count[r.component] % layers:
                raise ValueError(f"{r.component}: {count[r.component]} tasks are not {layers} layers of equal size")
            layer = r.task // (count[r.component] // layers)
        else:
            layer = -1
        by.setdefault((r.component, layer), []).append(r)
    out = [Phase(c, layer, (min(r.ready for r in rs) - t0) / 1000.0, (max(r.notified for r in rs) - t0) / 1000.0)
           for (c, layer), rs in by.items()]
    return sorted(out, key=lambda p: p.ready_us)


def render_phases(ps: list[Phase]) -> str:
    """Per layered component, medians over the layers: how long its phase lasts (first waits met to last
    notification), and the gap before it: its first waits met less the latest notification of the phases
    that started before it (a hand-off's cost where it waits for them; negative where phases overlap). Then
    the median layer: from one layer's first waits met to the next one's."""
    layered = [p for p in ps if p.layer >= 0]
    if not layered:
        return "no layered components"
    order = list(dict.fromkeys(p.component for p in layered))
    spans: dict[str, list[float]] = {c: [] for c in order}
    gaps: dict[str, list[float]] = {c: [] for c in order}
    latest = None  # the latest notification of the phases so far (ps is in order of start)
    for p in ps:
        if p.layer >= 0:
            spans[p.component].append(p.done_us - p.ready_us)
            if latest is not None:
                gaps[p.component].append(p.ready_us - latest)
        latest = p.done_us if latest is None else max(latest, p.done_us)
    lines = [f"{'component':24s} {'layers':>6s} {'median span us':>15s} {'median gap before us':>21s}"]
    for c in order:
        gap = f"{statistics.median(gaps[c]):21.2f}" if gaps[c] else f"{'-':>21s}"
        lines.append(f"{c:24s} {len(spans[c]):6d} {statistics.median(spans[c]):15.2f} {gap}")
    starts: dict[int, float] = {}
    for p in layered:
        starts[p.layer] = min(starts.get(p.layer, p.ready_us), p.ready_us)
    ks = sorted(starts)
    if len(ks) > 1:
        lengths = [starts[b] - starts[a] for a, b in zip(ks, ks[1:])]
        lines.append(f"a layer (its first waits met to the next layer's): median {statistics.median(lengths):.2f} us")
    return "\n".join(lines)


def first_and_later(records: list[TaskRecord], layers: int, layered: set[str], grid: int) -> dict[str, tuple]:
    """Per layered component, (median run us of a CTA's first task of the call in a layer, median of its later
    ones or None, how many of each): under static dispatch CTA c runs tasks c, c + grid, .. of each call, so
    a task numbered below `grid` within its layer is its CTA's first. What the first pays and the later ones
    do not (a GEMV staging x for the call) is the difference."""
    records = tasks_only(records)
    runs: dict[str, tuple[list, list]] = {}
    for r, t in zip(records, _tasks_in_layer(records, layers, layered)):
        if t is None:
            continue
        first, later = runs.setdefault(r.component, ([], []))
        (first if t < grid else later).append(r.run_ns / 1000.0)
    return {c: (statistics.median(f) if f else None, statistics.median(lt) if lt else None, len(f), len(lt))
            for c, (f, lt) in runs.items()}


def _layer_and_task(records: list[TaskRecord], layers: int, layered: set[str]) -> list[tuple[int, int]]:
    """Each record's (layer, task number within the layer's call) for a layered component whose task count (among
    these records) the layers divide; else (-1, its task)."""
    count: dict[str, int] = {}
    for r in records:
        count[r.component] = count.get(r.component, 0) + 1
    out = []
    for r in records:
        per_layer = count[r.component] // layers if r.component in layered and not count[r.component] % layers else 0
        out.append(divmod(r.task, per_layer) if per_layer else (-1, r.task))
    return out


def _tasks_in_layer(records: list[TaskRecord], layers: int, layered: set[str]) -> list[int | None]:
    """Each record's task number within its layer's call (a layered component whose task count the layers
    divide), else None."""
    return [t if layer >= 0 else None for layer, t in _layer_and_task(records, layers, layered)]


def render_first_and_later(split: dict[str, tuple]) -> str:
    lines = [f"{'component':24s} {'first tasks':>11s} {'median run us':>14s} {'later tasks':>11s} {'median run us':>14s}"]
    for c, (first, later, nf, nl) in split.items():
        lines.append(f"{c:24s} {nf:11d} {first:14.2f} {nl:11d} " + (f"{later:14.2f}" if later is not None else f"{'-':>14s}"))
    return "\n".join(lines)


def tails(records: list[TaskRecord], layers: int, layered: set[str], grid: int) -> dict[str, tuple]:
    """Per component, how long its slowest CTA holds the call up: in each layer (a component outside `layered`:
    its one phase) each CTA's last notification of the call, under static dispatch (`deal: restart`) CTA t % grid
    for the task numbered t within its layer; the tail is the latest of them less their median. Returns {component:
    (median tail us over the layers, largest tail us, CTAs that ran the call in a layer, median)}: what evening
    out the call's tasks over its CTAs could take from it at most."""
    records = tasks_only(records)
    ends: dict[tuple[str, int], dict[int, int]] = {}
    for r, (layer, t) in zip(records, _layer_and_task(records, layers, layered)):
        cta = ends.setdefault((r.component, layer), {})
        cta[t % grid] = max(cta.get(t % grid, r.notified), r.notified)
    per: dict[str, tuple[list, list]] = {}
    for (c, _), by_cta in ends.items():
        last = sorted(by_cta.values())
        tail, ctas = per.setdefault(c, ([], []))
        tail.append((last[-1] - statistics.median(last)) / 1000.0)
        ctas.append(len(last))
    return {c: (statistics.median(t), max(t), int(statistics.median(n))) for c, (t, n) in per.items()}


def sm_speeds(records: list[TaskRecord], layers: int, layered: set[str], grid: int) -> dict[str, dict[int, float]]:
    """Per component with tasks past a CTA's first of the call (static dispatch: a task numbered `grid` or more
    within its layer), each SM's median run us over those later tasks: whether some SMs stream slower than others
    for the whole launch (their share of the memory system), which a static order of equal tasks turns into a
    call's tail. A component outside `layered`: its task numbers as they are."""
    records = tasks_only(records)
    runs: dict[str, dict[int, list]] = {}
    for r, (_, t) in zip(records, _layer_and_task(records, layers, layered)):
        if t >= grid:
            runs.setdefault(r.component, {}).setdefault(r.sm, []).append(r.run_ns / 1000.0)
    return {c: {sm: statistics.median(v) for sm, v in sorted(by_sm.items())} for c, by_sm in runs.items()}


def _ranks(values: list[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):  # ties share their mean rank
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0
        i = j + 1
    return ranks


def rank_correlation(a: dict[int, float], b: dict[int, float]) -> float | None:
    """Spearman's rank correlation of two components' per-SM speeds over the SMs both ran (None under 3 SMs or
    where one side has no spread): near 1, the same SMs are slow in both calls."""
    sms = sorted(set(a) & set(b))
    if len(sms) < 3:
        return None
    try:  # Pearson's over the ranks (statistics' own ranked method needs Python 3.12)
        return statistics.correlation(_ranks([a[s] for s in sms]), _ranks([b[s] for s in sms]))
    except statistics.StatisticsError:  # one side the same everywhere
        return None


def render_sm_speeds(speeds: dict[str, dict[int, float]], slowest: int = 4) -> str:
    lines = [f"{'component':24s} {'SMs':>4s} {'fastest us':>11s} {'median us':>10s} {'slowest us':>11s} "
             f"{'slowest/fastest':>16s}  slowest SMs  (each SM's median run of its later tasks)"]
    for c, by_sm in speeds.items():
        v = sorted(by_sm.values())
        worst = sorted(by_sm, key=by_sm.__getitem__, reverse=True)[:slowest]
        lines.append(f"{c:24s} {len(v):4d} {v[0]:11.2f} {statistics.median(v):10.2f} {v[-1]:11.2f} "
                     f"{v[-1] / v[0] if v[0] else float('nan'):16.3f}  {' '.join(map(str, worst))}")
    names = list(speeds)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            rho = rank_correlation(speeds[a], speeds[b])
            if rho is not None:
                lines.append(f"rank correlation of the SMs' speeds, {a} and {b}: {rho:.2f}")
    return "\n".join(lines)


def render_tails(t: dict[str, tuple]) -> str:
    lines = [f"{'component':24s} {'CTAs':>6s} {'median tail us':>15s} {'largest tail us':>16s}  "
             "(the call's last CTA out less its median CTA's end)"]
    for c, (median, largest, ctas) in t.items():
        lines.append(f"{c:24s} {ctas:6d} {median:15.2f} {largest:16.2f}")
    return "\n".join(lines)


def marks(records: list[TaskRecord], layers: int, layered: set[str], grid: int) -> dict[str, dict]:
    """Per component that stamped marks, for its CTAs' first tasks of a call in a layer and for the later ones
    (as first_and_later tells them apart): {"first" | "later": (tasks, [median us from the waits met to mark i,
    or None where no task stamped it], median run us)}. Where a task's running time goes, phase by phase."""
    records = tasks_only(records)
    by: dict[str, dict[str, list]] = {}
    for r, in_layer in zip(records, _tasks_in_layer(records, layers, layered)):
        if not any(r.marks):
            continue
        t = r.task if in_layer is None else in_layer
        by.setdefault(r.component, {}).setdefault("first" if t < grid else "later", []).append(r)
    out: dict[str, dict] = {}
    for c, kinds in by.items():
        out[c] = {}
        for kind, rs in kinds.items():
            at = []
            for i in range(MARKS):
                ds = [(r.marks[i] - r.ready) / 1000.0 for r in rs if i < len(r.marks) and r.marks[i]]
                at.append(statistics.median(ds) if ds else None)
            out[c][kind] = (len(rs), at, statistics.median(r.run_ns for r in rs) / 1000.0)
    return out


def render_marks(m: dict[str, dict]) -> str:
    """marks() as a table: the median us from a task's waits met to each of its marks, and to its end."""
    if not m:
        return "no component stamped profile marks"
    head = "".join(f"{f'mark {i}':>9s}" for i in range(MARKS))
    lines = [f"{'component':24s} {'tasks':>13s} {head} {'done':>9s}  (median us after its waits are met)"]
    for c, kinds in m.items():
        for kind in ("first", "later"):
            if kind in kinds:
                n, at, run = kinds[kind]
                cells = "".join(f"{'-':>9s}" if v is None else f"{v:9.2f}" for v in at)
                lines.append(f"{c:24s} {f'{n} {kind}':>13s} {cells} {run:9.2f}")
    return "\n".join(lines)


@dataclass(frozen=True)
class LoaderLead:
    """What a kernel's loader warp did for one component (call), from its records against the tasks'."""
    component: str
    tasks: int           # tasks the loader loaded, over the launch
    blocked_us: float    # median over the layers: the loader's time in the call's load entries (waiting for free
                         # slots, issuing copies) per SM the call ran on
    lead_us: float       # median over tasks: the task's start less the loader's return from its load entry (> 0:
                         # every copy of the task was issued before its CTA got to it)
    late: float          # the share of tasks that started before the loader had issued all their copies


def loader_leads(records: list[TaskRecord], layers: int, layered: set[str]) -> list[LoaderLead]:
    """Per component the loader loads, in order of its first record: how long the loader waited in its load
    entries, and how far ahead of each task it issued the task's copies. A loader early and blocked (a large
    lead, a long wait for slots) waits on the compute warps: there a deeper ring or L2 requests ahead would keep
    the memory busy. One that is late (tasks starting before their copies are out) is what the tasks wait on."""
    started = {(r.component, r.task): r.start for r in records if not r.loader}
    mine = [r for r in records if r.loader]
    by_layer: dict[str, dict[int, list]] = {}
    leads: dict[str, list[float]] = {}
    for r, (layer, _) in zip(mine, _layer_and_task(mine, layers, layered)):
        by_layer.setdefault(r.component, {}).setdefault(layer, []).append(r)
        if (r.component, r.task) in started:
            leads.setdefault(r.component, []).append((started[(r.component, r.task)] - r.done) / 1000.0)
    out = []
    for c, layers_of in by_layer.items():
        per_sm = [sum(r.done - r.start for r in rs) / 1000.0 / len({r.sm for r in rs}) for rs in layers_of.values()]
        ls = leads.get(c, [])
        out.append(LoaderLead(c, sum(map(len, layers_of.values())), statistics.median(per_sm),
                              statistics.median(ls) if ls else float("nan"),
                              sum(v < 0 for v in ls) / len(ls) if ls else float("nan")))
    return out


def render_loader_leads(leads: list[LoaderLead]) -> str:
    if not leads:
        return "no loader records (a kernel without a loader warp, or linked without profile_tasks)"
    lines = [f"{'component':24s} {'tasks':>7s} {'loader blocked us':>18s} {'median lead us':>15s} {'late':>6s}  "
             "(blocked: a layer's time in the load entries per SM; lead: a task's start less its copies issued)"]
    for x in leads:
        lines.append(f"{x.component:24s} {x.tasks:7d} {x.blocked_us:18.2f} {x.lead_us:15.2f} {100 * x.late:5.1f}%")
    return "\n".join(lines)


@dataclass(frozen=True)
class IssueBin:
    """One bin of a layer in loader_issue(): from the layer's start, how fast the loaders issued W's copies."""
    t_us: float                # the bin's start, from its layer's first waits met
    tb_per_s: float            # W bytes whose load entries returned in the bin, GPU-wide, mean over the layers
    running: tuple[str, ...]   # the calls whose median span in a layer overlaps the bin


def loader_issue(records: list[TaskRecord], layers: int, layered: set[str], call_bytes: dict[str, int],
                 bin_us: float = 0.5) -> tuple[list[IssueBin], float]:
    """When, inside a layer, the loader warps sent the ring's copies, and which calls ran meanwhile: a layer is
    the time from its first waits met to the next layer's; a task's bytes (`call_bytes[c]`, a layered call's per
    layer, spread evenly over its tasks) count when its loader record says the load entry returned, its last copy
    issued (so a bin's rate is what went out, not what landed; L2 requests ahead are not counted). Layers other
    than the first and last (all, below 3) are averaged. Returns the bins over the median layer and the layers'
    mean rate (TB/s). A memory that idles (a low rate) while a call runs is time the ring, full, held the loader
    back: more bytes in flight then, not faster tasks, is what would shorten the layer."""
    tasks = tasks_only(records)
    mine = [r for r in records if r.loader]
    ps = [p for p in phases(records, layers, layered) if p.layer >= 0]
    if not mine or not ps:
        return [], 0.0
    t0 = min(r.start for r in tasks)
    starts = [min(p.ready_us for p in ps if p.layer == n) for n in range(layers)]
    ends = starts[1:] + [max(p.done_us for p in ps if p.layer == layers - 1)]
    inner = list(range(1, layers - 1)) if layers >= 3 else list(range(layers))
    count: dict[str, int] = {}
    for r in tasks:
        count[r.component] = count.get(r.component, 0) + 1
    per_task = {c: call_bytes.get(c, 0) / (n // layers if c in layered else n) for c, n in count.items()}
    issued: dict[int, dict[int, float]] = {n: {} for n in inner}
    for r in mine:
        t = (r.done - t0) / 1000.0
        for n in inner:
            if starts[n] <= t < ends[n]:
                b = int((t - starts[n]) // bin_us)
                issued[n][b] = issued[n].get(b, 0.0) + per_task.get(r.component, 0.0)
                break
    length = statistics.median(ends[n] - starts[n] for n in inner)
    spans = {}
    for c in {p.component for p in ps}:
        mine_c = [p for p in ps if p.component == c and p.layer in inner]
        if mine_c:
            spans[c] = (statistics.median(p.ready_us - starts[p.layer] for p in mine_c),
                        statistics.median(p.done_us - starts[p.layer] for p in mine_c))
    order = sorted(spans, key=lambda c: spans[c][0])
    bins = []
    for b in range(max(1, int(-(-length // bin_us)))):
        lo = b * bin_us
        rate = statistics.fmean(issued[n].get(b, 0.0) for n in inner) / (bin_us * 1e-6) / 1e12
        bins.append(IssueBin(lo, rate, tuple(c for c in order if spans[c][0] < lo + bin_us and spans[c][1] > lo)))
    total = sum(sum(v.values()) for v in issued.values()) / (sum(ends[n] - starts[n] for n in inner) * 1e-6) / 1e12
    return bins, total


def render_loader_issue(bins: list[IssueBin], mean_tb_per_s: float, tick: float = 0.2) -> str:
    """loader_issue() as a bar per bin (a `#` per `tick` TB/s) beside the calls running."""
    if not bins:
        return "no loader records (a kernel without a loader warp, or linked without profile_tasks)"
    step = bins[1].t_us - bins[0].t_us if len(bins) > 1 else 0.0
    lines = [f"W copies issued by the loaders over a layer, GPU-wide: {mean_tb_per_s:.2f} TB/s over the layer "
             f"({step:g} us bins, # = {tick:g} TB/s; a task's bytes when its load entry returned)",
             f"{'t us':>7s} {'TB/s':>6s}  {'':{int(5.0 / tick)}s}  calls running"]
    width = int(5.0 / tick)
    for b in bins:
        bar = "#" * min(width, int(b.tb_per_s / tick)) + (">" if b.tb_per_s / tick > width else "")
        lines.append(f"{b.t_us:7.2f} {b.tb_per_s:6.2f}  {bar:{width}s}  " + " ".join(b.running))
    return "\n".join(lines)
