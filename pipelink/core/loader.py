"""Contract loading: JSON -> schema -> semantic checks -> typed `Contract`.

Every problem is reported at once, each with the file and a JSON pointer. Returns None when the
contract cannot be used; never raises for bad input.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from . import expr as exprs
from . import aliasing, identifiers, jsonread, validate
from .diagnostics import DiagnosticSink, Location
from .indexmap import MapError, parse_map
from .model import (ALL_THREADS, DTYPE_BYTES, INTEGER_DTYPES, SWIZZLE_BYTES, Barriers, Buffer, CompileFlags,
                    Contract, Entry, EntryPoint, EventNotify, Events, EventWait, Geometry, Loader, MBarrier, NamedBarrier,
                    Param, ParamRange, Port, Reduction, Role, Source, Targets, TensorMapSpec, Threads,
                    TileSequence)
from .targets import TARGETS

FORMAT_VERSION = 1
# A distributed link's rank and world size: names any contract expression may use, which the linker defines.
DISTRIBUTED_NAMES = frozenset({"RANK", "WORLD"})
SCHEMA_FILE = validate.CONTRACT_SCHEMA


def schema() -> dict:
    return validate.schema(SCHEMA_FILE)


def load_contract_file(path: str | Path, sink: DiagnosticSink) -> Contract | None:
    path = Path(path)
    try:
        data = jsonread.read_bytes(path)
    except OSError as exc:
        sink.error("PL002", f"cannot read contract: {exc.strerror or exc}", Location(file=str(path)))
        return None
    except jsonread.JSONError as exc:
        exc.report(sink, str(path))
        return None
    if jsonread.is_object_file(data):
        sink.error("PL004", f"{path} is an object file, not a contract (JSON)", Location(file=str(path)),
                   hint=jsonread.OBJECT_NOT_JSON_HINT)
        return None
    return load_contract_bytes(data, Source(str(path)), sink)


def load_contract_bytes(data: bytes, source: Source, sink: DiagnosticSink) -> Contract | None:
    doc = jsonread.parse_bytes(data, source.file, sink)
    return None if doc is None else load_contract_dict(doc.value, source, sink)


def _other_document(raw: dict) -> tuple[str, str] | None:
    """(what it is, the hint) for a JSON document that is no contract but one of the others pipelink reads or
    writes: a linked kernel's manifest, a JSON Schema (the contract's own, say)."""
    if "pipelink_contract" in raw:
        return None
    if "manifest" in raw and "kernel" in raw:
        return ("a linked kernel's manifest (K.json)",
                "`pipelink inspect K.cubin` reads the kernel with its manifest; contracts are the components' JSON")
    if "$schema" in raw and ("properties" in raw or "$defs" in raw or "definitions" in raw):
        return ("a JSON Schema", "check the components' contracts (or their objects) against it: `pipelink check C.json`")
    return None


def load_contract_dict(raw, source: Source, sink: DiagnosticSink) -> Contract | None:
    if not isinstance(raw, dict):
        sink.error("PL020", f"a contract is a JSON object, not {type(raw).__name__}", source.at(""))
        return None
    if "pipeline" in raw and "pipelink_contract" not in raw:  # a pipeline file given where a contract goes
        sink.error("PL001", "this is a pipeline file, not a contract", source.at(""),
                   hint="pass it as `--pipeline FILE` to `pipelink link` (objects) or `pipelink check` (contracts or objects)")
        return None
    other = _other_document(raw)
    if other:  # another of pipelink's documents given where a contract goes: say which, not its schema's flood
        sink.error("PL001", f"this is {other[0]}, not a contract", source.at(""), hint=other[1])
        return None
    version = raw.get("pipelink_contract")
    if version is not None and version != FORMAT_VERSION:
        sink.error("PL021", f"contract format {version!r}; this pipelink reads format {FORMAT_VERSION}",
                   source.at("/pipelink_contract"))
        return None
    component = raw.get("name") if isinstance(raw.get("name"), str) else None
    problems = validate.violations(SCHEMA_FILE, raw)
    for pointer, message in problems:
        sink.error("PL020", message, source.at(pointer, component))
    if problems:
        return None
    return _SemanticCheck(raw, source, sink).build()


def box_problems(p: Param, box: list[int | None]) -> list[tuple[str, str, str | None]]:
    """(pointer, message, hint) for each way the box of tensor-map parameter `p`, with extents `box`
    (None: unknown), breaks the TMA's rules: at most 256 per extent, the contiguous extent a multiple
    of 16 bytes and, swizzled, within the swizzle span. The loader checks the box at the contract's
    own geometry, the link at the link's."""
    t, ptr, out = p.tensor_map, f"{p.pointer_path}/tensor_map/box", []
    for j, b in enumerate(box):
        if b is not None and b > 256:
            out.append((f"{ptr}/{j}", f"tensor map '{p.name}': box extent {b} exceeds the TMA's 256", None))
    if box[-1] is None:
        return out
    row = box[-1] * DTYPE_BYTES[p.dtype]
    span = SWIZZLE_BYTES[t.swizzle]
    if row % 16:
        out.append((f"{ptr}/{len(box) - 1}", f"tensor map '{p.name}': the box's contiguous extent is {row} bytes, not a "
                    "multiple of 16", None))
    elif span and row > span:
        out.append((f"{ptr}/{len(box) - 1}", f"tensor map '{p.name}': the box's contiguous extent is {row} bytes, wider "
                    f"than its {t.swizzle} swizzle", "a swizzled box's inner extent must fit the swizzle span"))
    return out


def _derived_names(raw: dict) -> set[str]:
    """The names the generated header derives from a contract's buffers, ports and barriers (authoring/header.py)."""
    out = set()
    for b in raw.get("smem", {}).get("buffers", []):
        out |= {f"smem_{b['name']}", f"smem_{b['name']}_align", f"smem_{b['name']}_bytes"}
    for q in raw.get("ports", []):
        out |= {f"port_{q['name']}", f"port_{q['name']}_align", f"port_{q['name']}_elements",
                *(f"port_{q['name']}_extent{i}" for i in range(len(q.get("tile", [])) or 4))}
    for b in raw.get("barriers", {}).get("named", []):
        out |= {f"bar_{b['name']}", f"sync_{b['name']}", f"arrive_{b['name']}"}
    for b in raw.get("barriers", {}).get("mbarriers", []):
        out.add(f"mbar_{b['name']}")
    return out


class _SemanticCheck:
    """Checks inside one contract that the schema cannot express, then builds the model."""

    def __init__(self, raw: dict, source: Source, sink: DiagnosticSink):
        self.raw, self.source, self.sink = raw, source, sink
        self.name = raw["name"]
        self.failed = False

    def error(self, code: str, message: str, pointer: str, hint: str | None = None) -> None:
        self.failed = True
        self.sink.error(code, message, self.source.at(pointer, self.name), hint)

    def unique(self, items: list[dict], pointer: str, what: str) -> None:
        seen: dict[str, int] = {}
        for i, item in enumerate(items):
            name = item["name"]
            if name in seen:
                self.error("PL022", f"{what} '{name}' is declared twice (first at {pointer}/{seen[name]})",
                           f"{pointer}/{i}/name")
            seen.setdefault(name, i)

    def size_expr(self, value, pointer: str, allowed: set[str], what: str, hint: str | None = None) -> exprs.Expr | None:
        try:
            e = exprs.parse(value)
        except exprs.ExprError as exc:
            self.error("PL028", f"{what}: {exc}", pointer)
            return None
        unknown = sorted(e.names - allowed)
        if unknown:
            self.error("PL029", f"{what} uses {', '.join(map(repr, unknown))}, which this contract does not "
                       f"declare", pointer, hint=hint or self._names_hint(allowed))
            return None
        return e

    def _names_hint(self, allowed: set[str]) -> str:
        shown = ", ".join(sorted(allowed)) or "none"
        return f"names visible here: {shown}; declare geometry in geometry.provides/consumes"

    def positive(self, e: exprs.Expr | None, env: dict[str, int], pointer: str, what: str) -> int | None:
        """Evaluate where every name has a value; sizes must be > 0."""
        if e is None or not e.names <= env.keys():
            return None
        try:
            value = e.evaluate(env)
        except exprs.ExprError as exc:
            self.error("PL028", f"{what}: {exc}", pointer)
            return None
        if value <= 0:
            self.error("PL032", f"{what} is {value} (from {e.text!r}); it must be positive", pointer)
            return None
        return value

    # --- the sections, in schema order ---------------------------------------------------

    def identifiers(self) -> None:
        """Every name the generated header and glue turn into C++ (core/identifiers.py): none C++ reserves, no
        keyword where the name stands alone, no two roles the header spells alike (`<ROLE>_WARPS`), no geometry
        name the header declares itself, no parameter named as the prototypes' own (`tile`, `carry`) or as an entry
        symbol (inside the kernel it would hide the function). PL188, PL022."""
        raw = self.raw
        entry = raw.get("entry", {})
        spots = [("/name", raw["name"], "namespace", "component name")]
        if "entries" in raw:
            spots += [(f"/entries/{i}/symbol", e["symbol"], "global", "entry symbol") for i, e in enumerate(raw["entries"])]
            spots += [(f"/entries/{i}/name", e["name"], "part", "entry name")
                      for i, e in enumerate(raw["entries"]) if "name" in e]
            params, base = raw.get("params", []), "/params"
        else:
            spots += [(f"/entry/{k}", entry[k], "global", "entry symbol") for k in ("symbol", "prefetch", "load")
                      if k in entry]
            params, base = entry.get("params", []), "/entry/params"
        spots += [(f"{base}/{i}/name", p["name"], "whole", "parameter") for i, p in enumerate(params)]
        roles = raw["threads"].get("roles", [])
        spots += [(f"/threads/roles/{i}/name", r["name"], "part", "role") for i, r in enumerate(roles)]
        geometry = raw.get("geometry", {})
        for kind in ("provides", "consumes"):
            spots += [(f"/geometry/{kind}/{n}", n, "whole", "geometry name") for n in geometry.get(kind, {})]
        spots += [(f"/smem/buffers/{i}/name", b["name"], "part", "buffer")
                  for i, b in enumerate(raw.get("smem", {}).get("buffers", []))]
        spots += [(f"/ports/{i}/name", q["name"], "part", "port") for i, q in enumerate(raw.get("ports", []))]
        for kind in ("named", "mbarriers"):
            spots += [(f"/barriers/{kind}/{i}/name", b["name"], "part", "barrier")
                      for i, b in enumerate(raw.get("barriers", {}).get(kind, []))]
        for kind in ("notifies", "waits"):
            spots += [(f"/events/{kind}/{i}/name", e["name"], "part", "event")
                      for i, e in enumerate(raw.get("events", {}).get(kind, [])) if "name" in e]
        for ptr, name, kind, what in spots:
            why = identifiers.problem(name, kind) or (
                "the name the generated header gives the component's namespace at global scope "
                f"(namespace {name} = ::pl::{self.name})" if kind == "global" and name == identifiers.COMPONENT_ALIAS
                else None)
            if why:
                self.error("PL188", f"{what} '{name}' is {why}", ptr, hint="rename it")
        symbols = {name for _, name, kind, _ in spots if kind == "global"}
        own = {"tile"} | ({"carry"} if entry.get("carry") else set())
        for i, p in enumerate(params):
            if p["name"] in symbols:
                self.error("PL188", f"parameter '{p['name']}' is also an entry symbol of '{self.name}': inside the "
                           "kernel the parameter would hide the function", f"{base}/{i}/name",
                           hint="rename the parameter or the entry")
            elif p["name"] in own:
                self.error("PL188", f"parameter '{p['name']}' is a name the entry's generated prototype gives its own "
                           f"argument ({', '.join(sorted(own))})", f"{base}/{i}/name", hint="rename the parameter")
        # the header derives names from buffers (smem_<b>, smem_<b>_bytes, smem_<b>_align) and ports (port_<q>,
        # port_<q>_align, port_<q>_extent<k>): one part's derived name must not be another's
        for kind, key, suffixes in (("buffer", "/smem/buffers", ("_bytes", "_align")),
                                    ("port", "/ports", ("_align",) + tuple(f"_extent{k}" for k in range(8)))):
            items = raw.get("smem", {}).get("buffers", []) if kind == "buffer" else raw.get("ports", [])
            names = {b["name"]: i for i, b in enumerate(items) if isinstance(b, dict) and "name" in b}
            for name, i in names.items():
                for suffix in suffixes:
                    if name + suffix in names:
                        self.error("PL022", f"{kind}s '{name}' and '{name}{suffix}': the header's "
                                   f"{'smem' if kind == 'buffer' else 'port'}_{name}{suffix} would name both",
                                   f"{key}/{names[name + suffix]}/name", hint=f"rename the {kind} '{name}{suffix}'")
        spelled: dict[str, int] = {}
        for i, r in enumerate(roles):
            first = spelled.setdefault(r["name"].upper(), i)
            if first != i and roles[first]["name"] != r["name"]:  # the same name twice: unique() says so
                self.error("PL022", f"roles '{roles[first]['name']}' and '{r['name']}' are spelled alike in the "
                           f"header's {r['name'].upper()}_WARPS", f"/threads/roles/{i}/name", hint="rename one role")

    def build(self) -> Contract | None:
        raw = self.raw
        self.identifiers()
        entry = self.entry(raw)
        targets = self.targets(raw["targets"])
        geometry = self.geometry(raw.get("geometry", {}), entry)
        link_names = set(geometry.provides) | set(geometry.consumes)
        env = dict(geometry.provides)
        env.update({k: r.default for k, r in geometry.consumes.items() if r.default is not None})
        threads = self.threads(raw["threads"], targets, link_names, env)
        max_regs = raw.get("registers", {}).get("max_per_thread")
        if max_regs is not None and threads is not None and max_regs * threads.count > 65536:
            self.error("PL033", f"{max_regs} registers x {threads.count} threads = {max_regs * threads.count}, "
                       f"over the 65536 registers of an SM", "/registers/max_per_thread")
        if threads is None:
            return None
        self.tensor_maps(entry, link_names)
        buffers = self.buffers(raw.get("smem", {}).get("buffers", []), link_names, env)
        barriers = self.barriers(raw.get("barriers", {}), link_names, env, threads)
        ports = self.ports(raw.get("ports", []), link_names, env, entry, threads)
        entries = self.entries(raw.get("entries", []), entry, ports, threads)
        events = self.events(raw.get("events", {}), geometry, entry)
        self.reduction(geometry, ports, entries)
        self.concurrent(threads, buffers, barriers, ports, entries)
        loader = self.loader(raw, entry, link_names, env)
        cluster = tuple(raw["cluster"]["dims"]) if "cluster" in raw else None
        if cluster is not None and (len(cluster) > 3 or cluster[0] * (cluster[1:2] or [1])[0] * (cluster[2:3] or [1])[0] > 8):
            self.error("PL107", f"cluster {list(cluster)} has more than the 8 CTAs a portable cluster may hold",
                       "/cluster/dims")
        elif cluster is not None and any(d > 1 for d in cluster[1:]):
            # a linked kernel walks its tiles over blockIdx.x: a grid of one dimension holds no [x, y] cluster
            n = cluster[0] * (cluster[1:2] or [1])[0] * (cluster[2:3] or [1])[0]
            self.error("PL107", f"cluster {list(cluster)} spans more than one grid dimension; a linked kernel's grid "
                       "has one", "/cluster/dims",
                       hint=f"declare [{n}] and read the CTA's place in the cluster with %cluster_ctarank")
        if self.failed:
            return None
        return Contract(
            name=self.name, version=raw["version"], owner=raw.get("owner"), description=raw.get("description"),
            entry=entry, targets=targets, threads=threads, max_registers=max_regs, buffers=buffers,
            barriers=barriers, ports=ports, geometry=geometry, events=events, source=self.source, raw=raw,
            entries=entries, cluster=cluster, loader=loader)

    def loader(self, raw: dict, entry: Entry, link_names: set[str], env: dict) -> Loader | None:
        """entry.load and `loader` come together (PL185): the load entry fills `slots` slots of
        `slot_bytes` each per task, and the linker sizes the ring from them."""
        section = raw.get("loader")
        if "entries" in raw:
            if section is not None:
                self.error("PL185", "`loader` goes with a single `entry` and its load entry; the `entries` form has "
                           "its own roles", "/loader")
            return None
        if entry.load is None and section is None:
            return None
        if entry.load is None:
            self.error("PL185", "`loader` without entry.load: nothing fills the slots it asks for", "/loader",
                       hint="name the loader warp's function in entry.load, or drop `loader`")
            return None
        if section is None:
            self.error("PL185", f"entry.load '{entry.load}' without `loader`: how many slots of how many bytes a task "
                       "fills is not said", "/entry/load", hint='add "loader": {"slot_bytes": ..., "slots": ...} at the top level of the contract, beside "entry"')
            return None
        if entry.invocation != "per_tile":
            self.error("PL185", f"the load entry '{entry.load}' needs a per_tile entry: it loads a task's data",
                       "/entry/load")
        if entry.load in (entry.symbol, entry.prefetch):
            self.error("PL185", f"the load entry '{entry.load}' is also the entry or its prefetch", "/entry/load")
        provided = set(self.raw.get("geometry", {}).get("provides", {}))
        try:
            used = exprs.parse(section["slot_bytes"]).names
        except exprs.ExprError:
            used = set()  # size_expr says what is wrong with it
        consumed = sorted(set(self.raw.get("geometry", {}).get("consumes", {})) & used)
        if consumed:
            self.error("PL029", f"loader slot size uses {', '.join(map(repr, consumed))}, geometry this contract "
                       "consumes: a slot's size is fixed when the contract is read, before a link gives consumed "
                       "geometry its value", "/loader/slot_bytes",
                       hint="size the slot over provided geometry (" + (", ".join(sorted(provided)) or "none") + ")")
            return None
        slot_bytes = self.size_expr(section["slot_bytes"], "/loader/slot_bytes", provided, "loader slot size", hint=(
            "a slot's size is fixed when the contract is read, before a link gives consumed geometry its value: it "
            "sees provided geometry only (" + (", ".join(sorted(provided)) or "none") + ")"))
        ints = {p.name for p in entry.params if p.is_shape}
        slots = self.size_expr(section["slots"], "/loader/slots", ints | link_names, "loader slots per task")
        if slot_bytes is None or slots is None:
            return None
        size = self.positive(slot_bytes, env, "/loader/slot_bytes", "loader slot size")
        if size is not None and size % 16:
            self.error("PL185", f"loader.slot_bytes is {size}, not a multiple of 16 (bulk copies move 16-byte units)",
                       "/loader/slot_bytes")
        return None if size is None or size % 16 else Loader(size, slots, bool(section.get("ahead", False)))

    def concurrent(self, threads: Threads, buffers, barriers, ports, entries) -> None:
        """Tasks that run several to a block (threads.concurrent) share it with each other: nothing of
        theirs may span the block or sit at one place in it (PL181)."""
        if not threads.concurrent:
            return
        held = [what for what, has in (
            ("calls __syncthreads (threads.uses_syncthreads)", threads.uses_syncthreads),
            ("has roles", len(threads.roles) > 1),
            ("has entries", bool(entries)),
            ("keeps shared-memory buffers", bool(buffers)),
            ("declares barriers", bool(barriers and (barriers.named or barriers.mbarriers or barriers.hardcoded_ids))),
            ("has ports", bool(ports))) if has]
        if held:
            self.error("PL181", f"threads.concurrent, but the component {', '.join(held)}", "/threads/concurrent",
                       hint="run one task a block (drop concurrent), or keep per-task state in registers and "
                            "synchronize with __syncwarp")

    def reduction(self, geometry: Geometry, ports, entries) -> None:
        """A split reduction's partial sums travel as the fragment of an `out` register port, made by
        the per-tile entries of the `entries` form (PL109)."""
        seq = geometry.tile_sequence
        if seq is None or seq.reduction is None:
            return
        ptr = f"{seq.reduction.pointer_path}/port"
        port = next((p for p in ports or () if p.name == seq.reduction.port), None)
        if not entries:
            self.error("PL109", "a tile_sequence.reduction needs the `entries` form: its per-tile entries take the "
                       "block range from pl::Tile", seq.reduction.pointer_path)
        elif port is None or port.space != "reg" or port.direction != "out":
            self.error("PL109", f"reduction port '{seq.reduction.port}' is not an `out` register port of this "
                       "contract", ptr, hint="the partial sums are the fragment the tile's consumers read: name the "
                       "out port with space \"reg\" that holds them")
        elif port.dtype != "f32":
            self.error("PL109", f"reduction port '{port.name}' holds {port.dtype}; partial sums are added in f32",
                       ptr)

    def entry(self, raw: dict) -> Entry:
        """The parameters (of `entry`, or the top-level `params` of the `entries` form) and the first entry."""
        if "entries" in raw:
            params, base = raw.get("params", []), "/params"
            first = raw["entries"][0]
            symbol, invocation = first["symbol"], first.get("invocation", "per_tile")
        else:
            params, base = raw["entry"].get("params", []), "/entry/params"
            symbol, invocation = raw["entry"]["symbol"], raw["entry"].get("invocation", "per_tile")
            prefetch = raw["entry"].get("prefetch")
            if prefetch is not None and invocation != "per_tile":
                self.error("PL177", f"the prefetch entry '{prefetch}' needs a per_tile entry: it loads a task's data",
                           "/entry/prefetch")
            elif prefetch == symbol:
                self.error("PL177", f"the prefetch entry is the entry itself ('{symbol}')", "/entry/prefetch")
        self.unique(params, base, "parameter")
        shapes = {p["name"] for p in params if not p.get("pointer") and "tensor_map" not in p
                  and p["dtype"] in INTEGER_DTYPES}
        provided = set(self.raw.get("geometry", {}).get("provides", {})) | set(
            self.raw.get("geometry", {}).get("consumes", {}))
        out = []
        for i, p in enumerate(params):
            if p["name"] in DISTRIBUTED_NAMES:
                self.error("PL022", f"'{p['name']}' is the name of a distributed link's {p['name'].lower()}, which the "
                           "linker defines", f"{base}/{i}/name", hint="rename the parameter")
            shape = None
            if "shape" in p:
                ptr = f"{base}/{i}/shape"
                if "tensor_map" in p:
                    self.error("PL174", f"parameter '{p['name']}' is a tensor map, whose extents are "
                               "tensor_map.shape; it has no `shape` of its own", ptr)
                elif not p.get("pointer"):
                    self.error("PL020", f"parameter '{p['name']}' has a shape but is not a pointer", ptr)
                shape = tuple(self.size_expr(e, f"{ptr}/{j}", shapes | provided | DISTRIBUTED_NAMES, "tensor extent")
                              for j, e in enumerate(p["shape"]))
                shape = None if None in shape else shape
            tmap = None
            if "tensor_map" in p:
                tmap = self.tensor_map(p, f"{base}/{i}", shapes | provided | DISTRIBUTED_NAMES, provided)
            out.append(Param(p["name"], p["dtype"], p.get("pointer", False), p.get("const", False),
                             f"{base}/{i}", shape, tmap, tuple(p.get("may_alias", ()))))
        for pointer, message, hint in aliasing.declaration_problems(out):  # PL201, at the may_alias entry
            self.error("PL201", message, pointer, hint)
        shared = aliasing.aliased_by(out)
        out = [replace(p, aliased_by=shared[p.name]) if p.name in shared else p for p in out]
        prefetch = raw_entry.get("prefetch") if isinstance(raw_entry := self.raw.get("entry"), dict) else None
        load = raw_entry.get("load") if isinstance(raw_entry, dict) else None
        carry = raw_entry.get("carry", 0) if isinstance(raw_entry, dict) else 0
        if carry and prefetch is None:
            self.error("PL177", f"entry.carry is {carry} words, but there is no prefetch entry to fill them",
                       "/entry/carry", hint="name the function that loads them in entry.prefetch, or drop carry")
        return Entry(symbol=symbol, invocation=invocation, params=tuple(out), prefetch=prefetch, load=load,
                     carry=carry)

    def tensor_map(self, p: dict, ptr: str, names: set[str], geometry: set[str]) -> TensorMapSpec | None:
        t = p["tensor_map"]
        if p.get("pointer") or p.get("const"):
            self.error("PL105", f"tensor-map parameter '{p['name']}' is passed as a descriptor, not a pointer",
                       f"{ptr}/pointer", hint="drop \"pointer\"/\"const\": the launcher encodes the tensor itself")
        shape = tuple(self.size_expr(e, f"{ptr}/tensor_map/shape/{j}", names, "tensor-map extent")
                      for j, e in enumerate(t["shape"]))
        box = tuple(self.size_expr(e, f"{ptr}/tensor_map/box/{j}", geometry, "tensor-map box extent")
                    for j, e in enumerate(t["box"]))
        if None in shape or None in box:
            return None
        if len(box) != len(shape):
            self.error("PL105", f"tensor map '{p['name']}' has a rank-{len(shape)} shape but a rank-{len(box)} box",
                       f"{ptr}/tensor_map/box")
            return None
        return TensorMapSpec(shape, box, t.get("swizzle", "none"), t.get("oob_fill", "zero"))

    def tensor_maps(self, entry: Entry, link_names: set[str]) -> None:
        """Boxes the TMA can move (`box_problems`), where the box's geometry has values here."""
        env = dict(self.raw.get("geometry", {}).get("provides", {}))
        env.update({k: r["default"] for k, r in self.raw.get("geometry", {}).get("consumes", {}).items()
                    if "default" in r})
        for p in entry.params:
            t = p.tensor_map
            if t is None:
                continue
            ptr = f"{p.pointer_path}/tensor_map/box"
            box = [self.positive(e, env, f"{ptr}/{j}", "tensor-map box extent") for j, e in enumerate(t.box)]
            for pointer, message, hint in box_problems(p, box):
                self.error("PL105", message, pointer, hint=hint)

    def entries(self, raw: list, entry: Entry, ports, threads: Threads) -> tuple[EntryPoint, ...]:
        self.unique(raw, "/entries", "entry")
        roles = {r.name for r in threads.roles}
        params = {p.name for p in entry.params}
        reg_ports = {p.name: p for p in ports if p.space == "reg"}
        out, used_ports = [], set()
        seen_symbols: dict[str, int] = {}
        for i, e in enumerate(raw):
            ptr = f"/entries/{i}"
            role, inv = e["role"], e.get("invocation", "per_tile")
            if e["symbol"] in seen_symbols:
                self.error("PL022", f"entries {seen_symbols[e['symbol']]} and {i} name the same symbol "
                           f"'{e['symbol']}'", f"{ptr}/symbol")
            seen_symbols.setdefault(e["symbol"], i)
            if role != ALL_THREADS and role not in roles:
                self.error("PL101", f"entry '{e['name']}' runs on role '{role}', which threads.roles does not declare",
                           f"{ptr}/role", hint="roles: " + ", ".join(sorted(roles)))
            if role == ALL_THREADS and inv != "per_cta":
                self.error("PL101", f"entry '{e['name']}' runs on every thread ('*'), which happens once before the "
                           "roles split: it must be per_cta", f"{ptr}/invocation")
            taken: dict[str, int] = {}
            for j, a in enumerate(e.get("params", [])):
                if a in taken:  # the prototype would declare one argument twice
                    self.error("PL022", f"entry '{e['name']}' takes '{a}' twice (params {taken[a]} and {j})",
                               f"{ptr}/params/{j}", hint="list each parameter once")
                    continue
                taken[a] = j
                if a in reg_ports:
                    used_ports.add(a)
                    if reg_ports[a].role != role and reg_ports[a].role in roles:  # else reported at the port
                        self.error("PL101", f"entry '{e['name']}' (role '{role}') takes register port '{a}', which "
                                   f"lives in role '{reg_ports[a].role}'", f"{ptr}/params/{j}")
                    if inv != "per_tile":
                        self.error("PL101", f"entry '{e['name']}' takes register port '{a}' but is not per_tile",
                                   f"{ptr}/params/{j}")
                elif a not in params:
                    self.error("PL029", f"entry '{e['name']}' takes '{a}', which is neither a parameter nor a "
                               "register port", f"{ptr}/params/{j}",
                               hint="declare it in \"params\" or as a port with space \"reg\"")
            out.append(EntryPoint(e["name"], e["symbol"], role, inv, tuple(e.get("params", [])), ptr))
        for name, port in reg_ports.items():
            if raw and name not in used_ports:
                self.error("PL101", f"register port '{name}' is taken by no entry", port.pointer_path)
        if reg_ports and not raw:
            self.error("PL106", "register ports need the `entries` form: an entry of the port's role takes it",
                       next(iter(reg_ports.values())).pointer_path)
        return tuple(out)

    def targets(self, raw: dict) -> Targets:
        for i, arch in enumerate(raw["archs"]):
            if arch not in TARGETS:
                self.error("PL034", f"unknown target {arch!r}", f"/targets/archs/{i}",
                           hint="known: " + ", ".join(TARGETS))
        flags = raw.get("compile_flags")
        known = {k: v for k, v in (flags or {}).items() if k in CompileFlags.__dataclass_fields__}
        return Targets(tuple(raw["archs"]), CompileFlags(**known), flags is not None)

    def warps(self, value, pointer: str, names: set[str], env: dict, what: str):
        """(warps, expression or None): an integer, or a size expression over geometry."""
        if isinstance(value, int):
            return value, None
        e = self.size_expr(value, pointer, names, what)
        if e is None:
            return None, None
        if not e.names <= env.keys():
            self.error("PL029", f"{what} {value!r} uses geometry without a value here", pointer,
                       hint="give the consumed names a default")
            return None, None
        n = self.positive(e, env, pointer, what)
        if n is not None and n > 32:
            self.error("PL023", f"{what} is {n} (from {value!r}); at most 32", pointer)
            return None, None
        return n, e

    def threads(self, raw: dict, targets: Targets, names: set[str], env: dict) -> Threads | None:
        warps, warps_expr = self.warps(raw["warps"], "/threads/warps", names, env, "threads.warps")
        implied = not raw.get("roles")  # one role of threads.warps: its problems are threads.warps', said once
        roles_raw = raw.get("roles") or [{"name": "main", "warps": raw["warps"]}]
        self.unique(roles_raw, "/threads/roles", "role")
        if implied:
            role_warps = [(warps, warps_expr)]
        else:
            role_warps = [self.warps(r["warps"], f"/threads/roles/{i}/warps", names, env, f"role '{r['name']}' warps")
                          for i, r in enumerate(roles_raw)]
        if warps is None or any(w is None for w, _ in role_warps):
            return None
        copies = [r.get("instances", 1) for r in roles_raw]
        total = sum(w * n for (w, _), n in zip(role_warps, copies))
        if total != warps:
            self.error("PL023", f"threads.warps is {warps} but the roles add up to {total} "
                       f"({' + '.join(str(w) if n == 1 else f'{n} x {w}' for (w, _), n in zip(role_warps, copies))})",
                       "/threads/warps")
        roles = []
        has_setmaxnreg_target = any(TARGETS[a].setmaxnreg for a in targets.archs if a in TARGETS)
        for i, (r, (rw, rexpr)) in enumerate(zip(roles_raw, role_warps)):
            ptr = f"/threads/roles/{i}"
            nreg = r.get("setmaxnreg")
            if (r.get("warpgroup_aligned") or nreg is not None) and rw % 4:
                self.error("PL024", f"role '{r['name']}' has {rw} warps; a warpgroup-aligned role needs a "
                           f"multiple of 4", f"{ptr}/warps")
            if nreg is not None:
                if not (24 <= nreg <= 256 and nreg % 8 == 0):
                    self.error("PL025", f"setmaxnreg {nreg} is not in 24..256 in steps of 8", f"{ptr}/setmaxnreg")
                if not has_setmaxnreg_target:
                    self.error("PL025", f"role '{r['name']}' uses setmaxnreg but no target supports it "
                               f"(targets: {', '.join(targets.archs)})", f"{ptr}/setmaxnreg",
                               hint="add sm_90a to targets.archs and build with -arch=sm_90a")
            if r.get("instances", 1) > 1 and not self.raw.get("entries"):
                self.error("PL101", f"role '{r['name']}' has instances, which only the `entries` form runs",
                           f"{ptr}/instances")
            roles.append(Role(r["name"], rw, bool(r.get("warpgroup_aligned") or nreg is not None), nreg, ptr, rexpr,
                              r.get("instances", 1)))
        return Threads(warps, tuple(roles), raw.get("uses_syncthreads", False), warps_expr,
                       raw.get("concurrent", False))

    def geometry(self, raw: dict, entry: Entry) -> Geometry:
        provides = dict(raw.get("provides", {}))
        consumes = {}
        for name, r in raw.get("consumes", {}).items():
            ptr = f"/geometry/consumes/{name}"
            if name in provides:
                self.error("PL030", f"'{name}' is both provided and consumed", ptr)
            rng = ParamRange(r.get("min"), r.get("max"), r.get("multiple_of"),
                             tuple(r["one_of"]) if "one_of" in r else None, r.get("default"))
            if rng.min is not None and rng.max is not None and rng.min > rng.max:
                self.error("PL030", f"'{name}' has min {rng.min} > max {rng.max}", ptr)
            if rng.one_of is not None and not any(rng.admits(v) for v in rng.one_of):
                self.error("PL030", f"no value of one_of {list(rng.one_of)} for '{name}' satisfies its own "
                           f"min/max/multiple_of", ptr)
            if rng.default is not None and not rng.admits(rng.default):
                self.error("PL030", f"the default {rng.default} of '{name}' is outside its own range "
                           f"({rng.describe()})", f"{ptr}/default")
            consumes[name] = rng
        shapes = {p.name for p in entry.params if p.is_shape}
        params = {p.name for p in entry.params}
        roles = [r["name"] for r in self.raw["threads"].get("roles", [])] or ["main"]  # the implied role's too
        reserved = ({"WARPS", "THREADS", "CARRY_WORDS", "copy", "warp_begin", "warp_rank", "thread_rank", "profile_mark"}
                    | {f"{r.upper()}_WARPS" for r in roles} | {f"{r}_{s}" for r in roles for s in ("instance", "warp_begin")}
                    | _derived_names(self.raw))
        for name in sorted(set(provides) | set(consumes)):
            ptr = f"/geometry/provides/{name}" if name in provides else f"/geometry/consumes/{name}"
            if name in params:
                self.error("PL022", f"'{name}' is both a geometry parameter and an entry parameter", ptr)
            elif name in reserved:
                self.error("PL022", f"'{name}' is a name the generated header defines itself", ptr,
                           hint="rename the geometry parameter")
            elif name in DISTRIBUTED_NAMES:
                self.error("PL022", f"'{name}' is the name of a distributed link's {name.lower()}, which the linker "
                           "defines", ptr, hint="rename the geometry parameter")

        seq = None
        if "tile_sequence" in raw:
            ts = raw["tile_sequence"]
            allowed = set(provides) | set(consumes) | shapes | DISTRIBUTED_NAMES
            grid = tuple(self.size_expr(g, f"/geometry/tile_sequence/grid/{i}", allowed, "tile grid extent")
                         for i, g in enumerate(ts["grid"]))
            if "group" in ts and ts.get("order") != "grouped":
                self.error("PL020", "tile_sequence.group applies to order \"grouped\" only",
                           "/geometry/tile_sequence/group")
            reduction = None
            if "reduction" in ts:
                blocks = self.size_expr(ts["reduction"]["blocks"], "/geometry/tile_sequence/reduction/blocks", allowed,
                                        "reduction block count")
                if blocks is not None:
                    reduction = Reduction(blocks, ts["reduction"]["port"], "/geometry/tile_sequence/reduction")
            seq = TileSequence(tuple(g for g in grid if g is not None), ts.get("order", "row_major"),
                               ts.get("distribution", "grid_stride"), "/geometry/tile_sequence", ts.get("group", 8),
                               reduction)
        return Geometry(provides, consumes, seq)

    def buffers(self, raw: list, link_names: set[str], env: dict, ) -> tuple[Buffer, ...]:
        self.unique(raw, "/smem/buffers", "smem buffer")
        out = []
        for i, b in enumerate(raw):
            ptr = f"/smem/buffers/{i}"
            size = self.size_expr(b["bytes"], f"{ptr}/bytes", link_names, f"buffer '{b['name']}' size")
            self.positive(size, env, f"{ptr}/bytes", f"buffer '{b['name']}' size")
            align = b.get("align", 16)
            if align & (align - 1):
                self.error("PL032", f"buffer '{b['name']}' alignment {align} is not a power of two", f"{ptr}/align")
            lifetime = b.get("lifetime", "persistent")
            phase = b.get("phase")
            if lifetime == "scratch" and phase is None:
                self.error("PL020", f"scratch buffer '{b['name']}' needs a phase: the bytes may be shared with "
                           "other phases' scratch", f"{ptr}/phase")
            if lifetime == "persistent" and phase is not None:
                self.error("PL020", f"persistent buffer '{b['name']}' has a phase; phases are for scratch buffers",
                           f"{ptr}/phase")
            if size is not None:
                out.append(Buffer(b["name"], size, align, lifetime, phase, ptr))
        return tuple(out)

    def barriers(self, raw: dict, link_names: set[str], env: dict, threads: Threads) -> Barriers:
        named_raw, mbar_raw = raw.get("named", []), raw.get("mbarriers", [])
        self.unique(named_raw + mbar_raw, "/barriers", "barrier")
        named = []
        for i, b in enumerate(named_raw):
            ptr = f"/barriers/named/{i}/threads"
            e = self.size_expr(b["threads"], ptr, link_names, f"barrier '{b['name']}' thread count")
            n = self.positive(e, env, ptr, f"barrier '{b['name']}' thread count")
            if n is not None and (n % 32 or n > threads.count):
                self.error("PL027", f"barrier '{b['name']}' counts {n} threads; it must be a multiple of 32 and at "
                           f"most the component's {threads.count} threads", ptr)
            if e is not None:
                named.append(NamedBarrier(b["name"], e, f"/barriers/named/{i}"))
        mbars = []
        for i, b in enumerate(mbar_raw):
            ptr = f"/barriers/mbarriers/{i}"
            e = self.size_expr(b.get("arrivals", 1), f"{ptr}/arrivals", link_names, f"mbarrier '{b['name']}' arrivals")
            self.positive(e, env, f"{ptr}/arrivals", f"mbarrier '{b['name']}' arrivals")
            if e is not None:
                mbars.append(MBarrier(b["name"], e, b.get("count", 1), ptr))
        ids = raw.get("hardcoded_ids", [])
        for i, bid in enumerate(ids):
            if not 1 <= bid <= 15:
                self.error("PL026", f"hard-coded barrier id {bid} is outside 1..15", f"/barriers/hardcoded_ids/{i}",
                           hint="id 0 is __syncthreads: declare threads.uses_syncthreads instead" if bid == 0 else None)
        if len(named) + len(ids) > 15:
            self.error("PL026", f"{len(named)} named and {len(ids)} hard-coded barriers exceed the 15 free ids",
                       "/barriers")
        return Barriers(tuple(named), tuple(mbars), tuple(ids))

    def ports(self, raw: list, link_names: set[str], env: dict, entry: Entry, threads: Threads) -> tuple[Port, ...]:
        self.unique(raw, "/ports", "port")
        params = {p.name: p for p in entry.params}
        shapes = {p.name for p in entry.params if p.is_shape}
        out = []
        for i, p in enumerate(raw):
            ptr = f"/ports/{i}"
            space = p.get("space", "smem")
            tile = []
            # A tile in global memory may span a runtime extent (a whole row: ["ROWS", "N"]); one in shared
            # memory or registers is sized at link time.
            visible = link_names | shapes if space == "gmem" else link_names
            for j, t in enumerate(p.get("tile", [])):
                e = self.size_expr(t, f"{ptr}/tile/{j}", visible, f"port '{p['name']}' tile extent")
                self.positive(e, env, f"{ptr}/tile/{j}", f"port '{p['name']}' tile extent")
                tile.append(e)
            stages = self.size_expr(p.get("stages", 1), f"{ptr}/stages", link_names, f"port '{p['name']}' stages")
            self.positive(stages, env, f"{ptr}/stages", f"port '{p['name']}' stages")
            if space == "smem" and not p.get("tile"):
                self.error("PL020", f"smem port '{p['name']}' needs a tile shape", f"{ptr}/tile")
            if space == "reg":
                self.reg_port(p, ptr, threads)
            elif "fragment" in p or "role" in p:
                self.error("PL106", f"{space} port '{p['name']}' has a fragment layout or role; only reg ports do",
                           f"{ptr}/{'fragment' if 'fragment' in p else 'role'}")
            if space == "smem" and "param" in p:
                self.error("PL020", f"smem port '{p['name']}' names a parameter; only gmem ports do", f"{ptr}/param")
            if space == "gmem":
                pname = p.get("param")
                param = params.get(pname) if pname else None
                if pname is None:
                    self.error("PL020", f"gmem port '{p['name']}' needs 'param': the pointer parameter it uses",
                               f"{ptr}/param")
                elif param is None or not param.pointer:
                    self.error("PL029", f"gmem port '{p['name']}' names '{pname}', which is not a pointer parameter "
                               "of the entry", f"{ptr}/param")
                elif p["direction"] == "out" and param.const:
                    self.error("PL020", f"gmem port '{p['name']}' is an output but parameter '{pname}' is a const "
                               "pointer", f"{ptr}/param")
                elif param.dtype != p["dtype"]:
                    self.error("PL020", f"gmem port '{p['name']}' is {p['dtype']} but parameter '{pname}' is "
                               f"{param.dtype}", f"{ptr}/dtype")
            if "align" in p:
                self.port_align(p, ptr, space)
            if stages is not None and None not in tile:
                out.append(Port(p["name"], p["direction"], space, p["dtype"], tuple(tile),
                                p.get("layout", "row_major"), p.get("swizzle", "none"), stages, p.get("param"), ptr,
                                p.get("fragment"), p.get("role"), p.get("align")))
        return tuple(out)

    def port_align(self, p: dict, ptr: str, space: str) -> None:
        """A power of two; in shared memory at most 1024 (the arena's base alignment the glue checks),
        in global memory at least one element."""
        align, what = p["align"], f"port '{p['name']}' align {p['align']}"
        if space == "reg":
            self.error("PL173", f"{what}: a register port has no address", f"{ptr}/align")
        elif align & (align - 1):
            self.error("PL173", f"{what} is not a power of two", f"{ptr}/align")
        elif space == "smem" and align > 1024:
            self.error("PL173", f"{what} is over the 1024 bytes a shared-memory placement can promise", f"{ptr}/align")
        elif space == "gmem" and align < DTYPE_BYTES[p["dtype"]]:
            self.error("PL173", f"{what} is below the {DTYPE_BYTES[p['dtype']]} bytes of one {p['dtype']}, which every "
                       "pointer to it has", f"{ptr}/align")

    def reg_port(self, p: dict, ptr: str, threads: Threads) -> None:
        """A fragment in registers: handed from one entry to the next inside one role's threads."""
        for key in ("fragment", "role", "tile"):
            if key not in p:
                self.error("PL106", f"register port '{p['name']}' needs '{key}'", f"{ptr}/{key}",
                           hint="a register port names its layout (fragment), the role holding it and its tile")
        for key in ("param", "stages"):
            if key in p:
                self.error("PL106", f"register port '{p['name']}' has '{key}'; it lives in registers, one stage",
                           f"{ptr}/{key}")
        role = p.get("role")
        if role is not None and role not in {r.name for r in threads.roles}:
            self.error("PL101", f"register port '{p['name']}' lives in role '{role}', which threads.roles does not "
                       "declare", f"{ptr}/role")

    def _count_term(self, text: str, imap, int_pointers: set[str], params: dict, pointer: str):
        """A count like `counts[i]`: read per task from an integer tensor the entry receives."""
        try:  # read as the event side of a map over the wait's task letters
            term = parse_map(f"{''.join(imap.task_dims)}->{text}").terms
        except MapError:
            term = ()
        if len(term) != 1 or term[0].kind != "gather":
            self.error("PL031", f"wait count {text!r} is neither a size expression nor one element of an integer "
                       "tensor indexed by the task's letters (counts[i])", pointer,
                       hint="a count read from the device is the element itself, with no arithmetic on it: store the "
                            "count the wait needs")
            return None
        if term[0].tensors[0] not in int_pointers:
            self.error("PL029", f"wait count {text!r} reads '{term[0].tensors[0]}', which is not an integer pointer "
                       "parameter of the entry", pointer)
            return None
        if not self._reads_fit_shapes(term[0], params, f"wait count {text!r}", pointer, count=True):
            return None
        return term[0]

    def _reads_fit_shapes(self, term, params: dict, what: str, pointer: str, count: bool = False) -> bool:
        """Each tensor a map or count reads has its extents in the contract and one subscript per extent: the glue
        computes the element's offset from them (a missing subscript had read another element, an extra one
        crashed the link). A count is one element: no ':'. PL029 / PL031 at the map or count."""
        from .indexmap import tensor_reads
        ok, seen = True, set()
        for tensor, subs in tensor_reads(term):
            if tensor in seen:
                continue  # range(ptr[i], ptr[i + 1]): one diagnostic a tensor
            seen.add(tensor)
            if tensor not in params or not params[tensor].pointer:
                continue  # not a pointer: said where the map or count is read
            shape = params[tensor].shape
            if shape is None:
                self.error("PL029", f"{what} reads '{tensor}', whose extents the contract does not give", pointer,
                           hint=f"add \"shape\" to parameter '{tensor}'")
                ok = False
                continue
            if len(subs) != len(shape):
                self.error("PL031", f"{what} reads '{tensor}' with {len(subs)} subscript{'s' * (len(subs) != 1)}, "
                           f"but its shape {[str(e) for e in shape]} has {len(shape)} extent{'s' * (len(shape) != 1)}",
                           pointer, hint="give one index (or ':') per extent of the tensor")
                ok = False
            elif count and ":" in subs:
                self.error("PL031", f"{what} reads a whole axis of '{tensor}' (':'); a count is one element",
                           pointer, hint="index one element per task, e.g. counts[i]")
                ok = False
        return ok

    def _in_entry_wait(self, ev: dict, imap, count_term, ptr: str) -> None:
        """A wait the entry makes itself (`in_entry`) names its elements along one axis, each by its position
        (pl::in_entry: `wait_<name>(i)`), and knows their count before it runs: a single-entry component."""
        axes = [term for term in imap.terms if term.kind != "index"]
        if len(axes) > 1 or any(term.kind == "gather" or (term.kind == "range" and "[" in term.text) for term in axes):
            self.error("PL207", f"in-entry wait '{ev['name']}' names its elements through {ev['map']!r}: the entry "
                       "counts them along one axis, a ':' or a range with affine bounds", f"{ptr}/map")
        if count_term is not None:
            self.error("PL207", f"in-entry wait '{ev['name']}' reads its count from a device tensor", f"{ptr}/count")
        if "entries" in self.raw:
            self.error("PL207", f"in-entry wait '{ev['name']}' in a component with several entries", f"{ptr}/in_entry")
        if self.raw.get("threads", {}).get("concurrent", False):
            self.error("PL207", f"in-entry wait '{ev['name']}' in a component whose tasks run several to a block",
                       f"{ptr}/in_entry")

    def events(self, raw: dict, geometry: Geometry, entry: Entry) -> Events:
        grid = self.raw.get("geometry", {}).get("tile_sequence", {}).get("grid")
        rank = len(grid) if grid else None  # from the JSON: a bad extent must not cascade
        shapes = {p.name for p in entry.params if p.is_shape}
        int_pointers = {p.name for p in entry.params if p.pointer and not p.is_shape
                        and p.dtype in INTEGER_DTYPES}
        params = {p.name: p for p in entry.params}
        allowed = set(geometry.provides) | set(geometry.consumes) | shapes | DISTRIBUTED_NAMES
        notifies, waits = [], []
        for kind in ("notifies", "waits"):
            items = raw.get(kind, [])
            self.unique(items, f"/events/{kind}", "event")
            for i, ev in enumerate(items):
                ptr = f"/events/{kind}/{i}"
                try:
                    imap = parse_map(ev["map"])
                except MapError as exc:
                    self.error("PL031", str(exc), f"{ptr}/map")
                    continue
                unknown = sorted(imap.names - allowed)
                if unknown:
                    self.error("PL029", f"map {ev['map']!r} uses {', '.join(map(repr, unknown))}, which is neither a "
                               "task dimension nor a geometry value or runtime scalar parameter of this contract",
                               f"{ptr}/map", hint=self._names_hint(allowed))
                if rank is not None and len(imap.task_dims) != rank:
                    self.error("PL031", f"map {ev['map']!r} has {len(imap.task_dims)} task dimensions but the tile "
                               f"grid has {rank}", f"{ptr}/map")
                for t in imap.tensors:
                    if t not in int_pointers:
                        self.error("PL029", f"map {ev['map']!r} reads '{t}', which is not an integer pointer "
                                   "parameter of the entry", f"{ptr}/map")
                for term in imap.terms:
                    self._reads_fit_shapes(term, params, f"map {ev['map']!r}", f"{ptr}/map")
                if kind == "notifies":
                    shape = None
                    if "shape" in ev:
                        shape = tuple(self.size_expr(s, f"{ptr}/shape/{j}", allowed, "event extent")
                                      for j, s in enumerate(ev["shape"]))
                        if len(shape) != imap.rank:
                            self.error("PL031", f"event '{ev['name']}' has rank {len(shape)} but its map "
                                       f"{ev['map']!r} indexes rank {imap.rank}", f"{ptr}/shape")
                        shape = tuple(s for s in shape if s is not None)
                    rank_expr = None
                    if "rank" in ev:  # another rank's copy: its task letters, geometry, scalars, RANK, WORLD
                        rank_expr = self.size_expr(ev["rank"], f"{ptr}/rank", allowed | set(imap.task_dims),
                                                   "destination rank")
                    notifies.append(EventNotify(ev["name"], ev["map"], shape, ptr, rank_expr))
                else:
                    count = ev.get("count", "auto")
                    c = term = None
                    if isinstance(count, str) and "[" in count:  # read per task from a device tensor
                        term = self._count_term(count, imap, int_pointers, params, f"{ptr}/count")
                    elif count != "auto":
                        c = self.size_expr(count, f"{ptr}/count", allowed, "wait count")
                    in_entry = ev.get("in_entry", False)
                    if in_entry:
                        self._in_entry_wait(ev, imap, term, ptr)
                    waits.append(EventWait(ev["name"], ev["map"], c, ptr, term, in_entry))
        return Events(tuple(notifies), tuple(waits))
