"""The link map as a picture: one SVG (and an HTML page around it) drawn from the same rows as the
text map (emit.py), so the two never disagree. Pure: data in, text out; no script, no network.

Three panels: the shared-memory arena over the steps (bytes reused by items of non-overlapping
lifetimes show as rectangles side by side at the same offsets), the warps (role groups with their
registers, named barrier ids) and, for a persistent kernel, the event graph.
"""
from __future__ import annotations

import html

from .allocate import Allocation
from .emit import barrier_rows, event_edges, event_shape, group_rows, port_readers, warp_rows
from .resolve import Resolved

WIDTH = 960
LEFT = 90            # the arena's offset axis and the warps' row labels
ARENA_PX = 480       # the arena's height were every byte drawn to scale
MIN_SEGMENT_PX = 18  # an 8-byte mbarrier still gets room for its label
ROW_PX = 26
FONT = "font-family:sans-serif;font-size:11px"
PALETTE = ["#8ecae6", "#ffb703", "#95d5b2", "#f4a5ae", "#cdb4db", "#ffd6a5", "#a3c4f3", "#e9c46a"]
GLUE_COLOUR = "#d9d9d9"


def esc(text) -> str:
    """Text from contracts and paths, safe in element text and quoted attributes; control characters
    (which XML forbids) shown as U+FFFD."""
    s = "".join(ch if ch >= " " or ch in "\t\n" else "\ufffd" for ch in str(text))
    return html.escape(s, quote=True)


def _fit(text: str, px: float) -> str:
    """The label cut to the width it has (the full text is in the element's tooltip)."""
    room = max(int(px / 6.2), 1)
    return text if len(text) <= room else text[:max(room - 1, 0)] + "\u2026"


class _Canvas:
    def __init__(self):
        self.parts: list[str] = []

    def rect(self, x, y, w, h, fill, tip=None, stroke="#333", dash=None, **data):
        attrs = "".join(f' data-{k.replace("_", "-")}="{esc(v)}"' for k, v in data.items())
        title = f"<title>{esc(tip)}</title>" if tip else ""
        style = f' stroke-dasharray="{dash}"' if dash else ""
        self.parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" fill="{fill}" '
                          f'stroke="{stroke}"{style}{attrs}>{title}</rect>')

    def text(self, x, y, s, anchor="start", weight=None, size=None):
        extra = (f' font-weight="{weight}"' if weight else "") + (f' font-size="{size}"' if size else "")
        self.parts.append(f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>{esc(s)}</text>')

    def line(self, x1, y1, x2, y2, dash=None, arrow=False, **data):
        attrs = "".join(f' data-{k.replace("_", "-")}="{esc(v)}"' for k, v in data.items())
        self.parts.append(f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#333"'
                          + (f' stroke-dasharray="{dash}"' if dash else "")
                          + (' marker-end="url(#arrow)"' if arrow else "") + f"{attrs}/>")


def colours(r: Resolved) -> dict[str, str]:
    out = {c.name: PALETTE[i % len(PALETTE)] for i, c in enumerate(r.components)}
    out["pl_glue"] = GLUE_COLOUR
    return out


def arena_columns(r: Resolved, a: Allocation) -> list[int | None]:
    """The arena's x axis: the sequential schedule's steps where something runs (a component, or a
    copy into one); one column (None) where the components run at once."""
    if r.schedule != "sequential":
        return [None]
    steps = set(a.steps.values())
    steps |= {a.steps[w.consumer] - 1 for w in r.wires if w.kind == "relayout"}
    return sorted(steps)


def offset_axis(a: Allocation, top: float) -> dict[int, float]:
    """Byte offset -> y for every item boundary: to scale, except that no segment is thinner than
    MIN_SEGMENT_PX and bytes no item holds (the arena's round-up) get no more (the tick labels give
    the true offsets)."""
    bounds = sorted({0, a.smem_bytes, *(p.offset for p in a.smem), *(p.end for p in a.smem)})
    scale = ARENA_PX / max(a.smem_bytes, 1)
    ys, y = {}, top
    for lo, hi in zip(bounds, bounds[1:] + [None]):
        ys[lo] = y
        if hi is not None:
            used = any(p.offset < hi and p.end > lo for p in a.smem)
            y += max(MIN_SEGMENT_PX, (hi - lo) * scale) if used else MIN_SEGMENT_PX
    return ys


def _arena(r: Resolved, a: Allocation, c: _Canvas, top: float) -> float:
    cols = arena_columns(r, a)
    at_step = {s: name for name, s in a.steps.items()}
    colw = (WIDTH - LEFT - 20) / len(cols)
    c.text(10, top + 14, f"Shared memory: {a.smem_bytes} bytes of dynamic smem "
           + ("over the steps (x), by byte offset (y)" if cols != [None] else "(components run at once), by byte offset"),
           weight="bold")
    top += 26
    for i, s in enumerate(cols):
        label = ("all components at once" if s is None else f"step {s}: {at_step[s]}" if s in at_step
                 else f"step {s}: copy into {at_step.get(s + 1, '?')}")
        c.text(LEFT + (i + 0.5) * colw, top + 10, _fit(label, colw), anchor="middle")
    top += 16
    ys = offset_axis(a, top)
    for off, y in ys.items():
        c.line(LEFT - 4, y, WIDTH - 20, y, dash="1,3")
        c.text(LEFT - 8, y + 4, str(off), anchor="end", size=10)
    fill, readers = colours(r), port_readers(r)
    for p in a.smem:
        life = p.item.lifetime
        if life.steps is None or cols == [None]:
            first, last = 0, len(cols) - 1
        else:
            inside = [i for i, s in enumerate(cols) if min(life.steps) <= s <= max(life.steps)]
            first, last = inside[0], inside[-1]
        x, w = LEFT + first * colw + 2, (last - first + 1) * colw - 4
        y, h = ys[p.offset], ys[p.end] - ys[p.offset]
        name = p.item.key.split(" ", 1)[1]
        also = readers.get(p.item.key)
        tip = (f"{p.item.key}: offset {p.offset}, {p.item.size} bytes, align {p.item.align}, {life.describe()}"
               + (f"; read as {', '.join(also)}" if also else ""))
        c.rect(x, y, w, h, fill.get(p.item.owner, GLUE_COLOUR), tip, dash="4,2" if p.item.kind == "mbarrier" else None,
               key=p.item.key, kind=p.item.kind, offset=p.offset, bytes=p.item.size, lifetime=life.describe())
        c.text(x + 4, y + min(h, MIN_SEGMENT_PX) / 2 + 4, _fit(f"{name}  {p.item.size} B", w - 8))
    return ys[a.smem_bytes] + 16


def _warps(r: Resolved, a: Allocation, c: _Canvas, top: float) -> float:
    n = max(a.block_warps, 1)
    ww = (WIDTH - LEFT - 20) / n
    fill = colours(r)
    c.text(10, top + 14, f"Warps: {a.block_warps} warps, {a.block_threads} threads", weight="bold")
    top += 22
    for k in range(n):
        c.text(LEFT + (k + 0.5) * ww, top + 10, str(k), anchor="middle", size=10)
    top += 16
    for row in warp_rows(r, a):
        c.text(LEFT - 8, top + 17, _fit(row.component, LEFT - 10), anchor="end")
        for role, lo, hi, inst in row.roles:
            label = f"{role} {lo}-{hi}" + (f" ({inst} instances)" if inst > 1 else "") + (
                f", step {row.step}" if row.step is not None else "")
            x, w = LEFT + lo * ww + 1, (hi - lo + 1) * ww - 2
            c.rect(x, top + 2, w, ROW_PX - 4, fill.get(row.component, "#d9d9d9"), f"{row.component}: {label}",
                   component=row.component, role=role, begin=lo, end=hi)
            c.text(x + 4, top + 17, _fit(label, w - 8))
        top += ROW_PX
    groups = group_rows(r, a)
    if groups:
        c.text(10, top + 16, "Role groups (registers per thread)", weight="bold")
        top += 24
        for g in groups:
            for i in range(g.instances):  # one box per instance: they take tiles in turn
                lo = g.begin + i * g.warps
                x, w = LEFT + lo * ww + 1, g.warps * ww - 2
                label = f"{g.name}: {', '.join(g.members)}; registers {g.registers_how}" + (
                    f"; instance {i}" if g.instances > 1 else "")
                c.rect(x, top + 2, w, ROW_PX - 4, "#eeeeee", label, group=g.name, begin=lo, end=lo + g.warps - 1,
                       registers=g.registers)
                c.text(x + 4, top + 17, _fit(label, w - 8))
            top += ROW_PX
    c.text(10, top + 16, "Named barriers", weight="bold")
    top += 20
    for bid, owner in barrier_rows(r, a):
        c.text(LEFT - 8, top + 12, f"id {bid}", anchor="end")
        c.text(LEFT, top + 12, owner)
        top += 16
    return top + 10


def _events(r: Resolved, c: _Canvas, top: float) -> float:
    """Components and event tensors top to bottom in task order; a tensor sits below its last
    notifier. Solid arrows notify, dashed ones wait; each is labelled beside its middle."""
    order = list(r.events.order)
    level = {name: 2 * i for i, name in enumerate(order)}
    edges = event_edges(r)
    tensor_level = {}
    for t in r.events.tensors.values():
        notifiers = [level[e.component] for e in edges if e.tensor == t.name and e.kind == "notify"]
        waiters = [level[e.component] for e in edges if e.tensor == t.name and e.kind == "wait"]
        tensor_level[t.name] = max(notifiers) + 1 if notifiers else max(min(waiters, default=0) - 1, 0)
    nodew, nodeh, gap = 200, 30, 64
    side: dict[int, int] = {}
    pos = {}  # ("component" | "tensor", name) -> (x, y)
    c.text(10, top + 14, "Events: solid arrows notify (index map), dashed arrows wait (index map, count)",
           weight="bold")
    top += 28
    for kind, levels in (("component", level), ("tensor", tensor_level)):
        for name, k in levels.items():
            n = side.get(k, 0)
            side[k] = n + 1
            pos[(kind, name)] = (LEFT + n * (nodew + 260), top + k * (nodeh + gap))
    for kind, name in pos:
        x, y = pos[(kind, name)]
        if kind == "component":
            desc = r.component(name).contract.description
            c.rect(x, y, nodew, nodeh, colours(r)[name], name + (f": {desc}" if desc else ""), node=name,
                   node_kind="component")
            label = name
        else:
            label = f"{name}[{event_shape(r, r.events.tensors[name])}]"
            c.rect(x, y, nodew, nodeh, "#ffffff", label, node=name, node_kind="tensor")
        c.text(x + nodew / 2, y + 19, _fit(label, nodew - 8), anchor="middle")
    for i, e in enumerate(edges):
        (cx, cy), (tx, ty) = pos[("component", e.component)], pos[("tensor", e.tensor)]
        # an edge leaves the side of one node facing the other; several at one node spread out
        shift = 20 * (i % 3) - 20
        a_x, b_x = cx + nodew / 2 + shift, tx + nodew / 2 + shift
        a_y, b_y = (cy + nodeh, ty) if ty > cy else (cy, ty + nodeh)
        src, dst = ((a_x, a_y), (b_x, b_y)) if e.kind == "notify" else ((b_x, b_y), (a_x, a_y))
        label = f"{e.component} notifies {e.map}" if e.kind == "notify" else f"{e.component} waits {e.map} for {e.count}"
        c.line(*src, *dst, dash=None if e.kind == "notify" else "5,3", arrow=True, edge_kind=e.kind,
               tensor=e.tensor, component=e.component, map=e.map)
        c.text(max(src[0], dst[0]) + 8, (src[1] + dst[1]) / 2 + 4, label, size=10)
    return top + (max(side) + 1) * (nodeh + gap)


def svg(r: Resolved, a: Allocation, arch: str) -> str:
    """The picture of a link's decisions: one self-contained SVG document."""
    c = _Canvas()
    c.text(10, 20, f"pipelink link map: kernel {r.name}, target {arch}, schedule {r.schedule}", weight="bold",
           size=14)
    y = 30
    for comp in r.components:  # the key to the colours, with what each component says of itself
        where = comp.obj.path if comp.obj is not None else "contract only"
        tip = f"{comp.name} {comp.contract.version} ({where})" + (
            f": {comp.contract.description}" if comp.contract.description else "")
        c.rect(10, y + 4, 12, 12, colours(r)[comp.name], tip, component=comp.name)
        c.text(28, y + 14, _fit(f"{comp.name} {comp.contract.version}  {where}", WIDTH - 40))
        y += 18
    y = _arena(r, a, c, y + 10)
    y = _warps(r, a, c, y)
    width = WIDTH
    if r.schedule == "persistent":
        y = _events(r, c, y)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{y + 10:.0f}" '
            f'viewBox="0 0 {width:.0f} {y + 10:.0f}" style="{FONT}">\n'
            '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
            'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#333"/></marker></defs>\n'
            '<rect width="100%" height="100%" fill="#ffffff"/>\n' + "\n".join(c.parts) + "\n</svg>\n")


def html_page(picture: str, text_map: str, kernel: str) -> str:
    """One self-contained page: the picture, and the text map it was drawn beside."""
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>pipelink link map: {esc(kernel)}</title>\n"
            "<style>body{font-family:sans-serif;margin:16px} pre{font-size:12px}</style>\n</head>\n<body>\n"
            f"{picture}<details><summary>The link map as text</summary>\n<pre>{esc(text_map)}</pre>\n</details>\n"
            "</body>\n</html>\n")


def map_output(path: str, text_map: str, picture: str | None, kernel: str) -> str:
    """What `--map PATH` writes: the page for .html, the picture for .svg, else the text map."""
    suffix = path.lower().rsplit(".", 1)[-1] if "." in path else ""
    if picture is not None and suffix == "html":
        return html_page(picture, text_map, kernel)
    if picture is not None and suffix == "svg":
        return picture
    return text_map
