"""What to link: the components' order, the wires between their ports, the schedule.

Given on the command line (`--wire tile_load.tile=tile_transform.src`, `--schedule`) or in a
pipeline file (`pipelines/rowsum.json`). Wires not given are found where the match is unique.
"""
from __future__ import annotations

import json
import re
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path

from . import jsonread, validate
from .diagnostics import DiagnosticSink, Location

FORMAT_VERSION = 1
SCHEMA_FILE = validate.PIPELINE_SCHEMA
# The schema owns the choices; the command line offers the same ones.
SCHEDULES = tuple(validate.schema(SCHEMA_FILE)["properties"]["schedule"]["enum"])
DISPATCHES = tuple(validate.schema(SCHEMA_FILE)["properties"]["dispatch"]["enum"])
_WIRE = re.compile(r"\s*(\w+)\.(\w+)\s*(?:->|=)\s*(\w+)\.(\w+)\s*", re.ASCII)


# Field metadata for what does not change a link's output (the link cache's key skips it: cache.key_doc).
NOT_IN_KEY = {"link_key": False}


@dataclass(frozen=True)
class WireSpec:
    producer: str
    out_port: str
    consumer: str
    in_port: str
    text: str = field(metadata=NOT_IN_KEY)  # as written: spelled differently, the same wire
    where: Location | None = field(default=None, compare=False, metadata=NOT_IN_KEY)  # the file's /wires/i; None: --wire

    def __str__(self) -> str:
        return f"{self.producer}.{self.out_port} -> {self.consumer}.{self.in_port}"


@dataclass(frozen=True)
class CallSpec:
    """One call of a `calls` pipeline: a component run as a task group with its parameters bound."""

    name: str
    component: str
    bind: tuple[tuple[str, str], ...] = ()      # component parameter -> kernel parameter
    per_layer: bool = False
    stacked: tuple[str, ...] = ()               # component parameters: one copy per layer
    events: tuple[tuple[str, str], ...] = ()    # component event -> pipeline event
    after: tuple[str, ...] = ()
    after_previous_layer: tuple[str, ...] = ()
    where: Location | None = field(default=None, compare=False, metadata=NOT_IN_KEY)  # /calls/i


@dataclass(frozen=True)
class PipelineSpec:
    """What to link, frozen: change one with dataclasses.replace. The link cache keys on every field but
    those marked NOT_IN_KEY (where the pipeline came from: only diagnostics name it)."""

    name: str = "pipelink_fused"
    components: tuple[str, ...] = ()    # component names in pipeline order (empty: the inputs' order)
    wires: tuple[WireSpec, ...] = ()
    schedule: str | None = None         # None: inferred
    dispatch: str = "static"            # persistent schedule: static per-CTA order, or a global task counter
    counts_per_cta: bool | None = None  # static: a call's whole-call events counted once per CTA, not per task
                                        # (None: wherever the schedule allows it; False: one add per task)
    loader_slots: int = 4               # static: the loader ring's slots (components with a load entry)
    load_ahead: int = 0                 # static: tasks ahead the loader asks L2 for (loader.ahead components)
    load_ahead_when: str = "ring_full"  # static: ring full, or only while the ring holds an earlier call's slots
    load_ahead_gap_ns: int = 0          # static: the loader's pause before each request ahead (0: none)
    loader_in_flight: int = 0           # static: the ring's slots the loader has in flight at most (0: all)
    loader_in_flight_behind: int = 0    # static: the same for slots refilled from an earlier call (0: as above)
    loader_in_flight_behind_until: str = "call_slots"  # static: those refills paced through the call's first
                                        # loader_slots positions, or only until its first slot is released
    loader_l2: str = "normal"           # static: the L2 policy of the ring's copies ("evict_first": read once)
    deal: str = "restart"               # static: each call's first task on CTA 0, or after the previous call's last
    wait_backoff_ns: int = 64           # persistent: a waiting thread's sleep between two reads of a counter
    notify_fence: str = "sc"            # persistent: the fence before a task's notifications ("acq_rel": release)
    debug_events: bool = False          # a wait that spins too long stops the kernel and is reported
    dependent_launch: bool = False      # programmatic dependent launch: overlap with the kernel before
    profile_tasks: int = 0              # persistent: a ring of this many task records (timestamps), 0: none
    standalone: bool = False            # events dropped: the kernel runs after the kernels its waits are on
    specialize: dict = field(default_factory=dict)  # shape parameter -> value baked into this link
    geometry: dict = field(default_factory=dict)    # consumed geometry no component of the link provides
    calls: tuple[CallSpec, ...] = ()    # persistent: task groups, a component possibly called several times
    layers: str | int | None = None     # how often the per-layer calls run: an i32 parameter's name, or a number
    source: str | None = field(default=None, metadata=NOT_IN_KEY)     # the pipeline file, for diagnostics
    extra: dict = field(default_factory=dict, metadata=NOT_IN_KEY)    # the file as read
    given: dict = field(default_factory=dict, metadata=NOT_IN_KEY)    # field's pointer -> the option that set it

    def at(self, pointer: str) -> Location:
        """Where the value at `pointer` came from, for a diagnostic: the command-line option that gave it (`given`,
        e.g. /profile_tasks: --profile-tasks 64), else the field of the pipeline file (none: of the spec)."""
        parts = pointer.split("/")
        for n in range(len(parts), 1, -1):
            option = self.given.get("/".join(parts[:n]))
            if option:
                return Location(option=option)
        top = parts[1] if len(parts) > 1 else ""
        if top in PipelineSpec.__dataclass_fields__ and isinstance(self.extra, dict) and self.extra and \
                top not in self.extra and not self.changes(top):  # a file that leaves the field to its default
            return Location(file=self.source, pointer="")  # the file, not a field it does not write
        return Location(file=self.source, pointer=pointer)

    def changes(self, name: str) -> bool:
        """Whether field `name` holds other than its default: what a setting with no effect is warned of (PL193;
        the default, written or not, changes nothing anywhere)."""
        f = PipelineSpec.__dataclass_fields__[name]
        return getattr(self, name) != (f.default_factory() if f.default_factory is not MISSING else f.default)

    def sets(self, name: str) -> bool:
        """Whether the pipeline sets field `name` itself: its file writes it, an option gives it, or (a spec built
        in Python) it differs from the default."""
        return name in self.extra or f"/{name}" in self.given or \
            getattr(self, name) != PipelineSpec.__dataclass_fields__[name].default


_LISTS_AND_MAPS = ("components", "wires", "calls", "specialize", "geometry")


def spec_document(spec: PipelineSpec) -> dict:
    """The pipeline file a PipelineSpec stands for (read_pipeline's inverse), so that a spec built in Python
    meets the same schema as a file. A field of the wrong type stays as it is, for the schema to name."""
    def plain(value):
        if isinstance(value, (tuple, list)):
            return [plain(v) for v in value]
        if isinstance(value, WireSpec):
            return str(value)
        if isinstance(value, CallSpec):  # a field of the wrong kind stays as it is, for the schema to name
            return {"name": value.name, "component": value.component, "bind": mapping(value.bind),
                    "per_layer": value.per_layer, "stacked": listed(value.stacked), "events": mapping(value.events),
                    "after": listed(value.after), "after_previous_layer": listed(value.after_previous_layer)}
        return value

    def mapping(value):  # a dict, or pairs: the file's object
        if isinstance(value, dict):
            return dict(value)
        if isinstance(value, (tuple, list)) and all(isinstance(v, (tuple, list)) and len(v) == 2 for v in value):
            return {k: v for k, v in value}
        return plain(value)

    def listed(value):
        return list(value) if isinstance(value, (tuple, list)) else value
    doc = {"pipeline": FORMAT_VERSION}
    for f in fields(PipelineSpec):
        if f.metadata.get("link_key", True) is False:  # where it came from, not what it is
            continue
        value = getattr(spec, f.name)
        kind = dict if f.default_factory is dict else (tuple, list)  # an empty one of the other kind is no default
        empty = value is None if f.default is None else \
            isinstance(value, kind) and not value and f.name in _LISTS_AND_MAPS
        if empty:
            continue  # absent from a file that leaves it to its default (None where that is no default: the schema's)
        doc[f.name] = plain(value)
    return doc


def checked_spec(spec: PipelineSpec, sink: DiagnosticSink) -> PipelineSpec | None:
    """A PipelineSpec as the link takes it: every field one a pipeline file could hold (PL133 where not, at the
    field's pointer), and wires and calls given in the file's form (strings, dicts) read as a file's are.
    None after errors."""
    for name in ("given", "extra"):  # where the values came from: read by every diagnostic's location
        if not isinstance(getattr(spec, name), dict):
            sink.error("PL001", f"PipelineSpec.{name} is a dict (it says where values came from), not "
                       f"{type(getattr(spec, name)).__name__}", Location(file="<PipelineSpec>", pointer=f"/{name}"),
                       hint=f"leave {name} out: pipelink sets it when it reads a file or options")
            return None
    if not isinstance(spec.source, (str, type(None))):
        sink.error("PL001", f"PipelineSpec.source is a file name, not {type(spec.source).__name__}",
                   Location(file="<PipelineSpec>", pointer="/source"), hint="leave source out")
        return None
    doc = spec_document(spec)
    where = spec.source or "<PipelineSpec>"
    problems = validate.violations(SCHEMA_FILE, doc)
    for pointer, message in problems:
        given = spec.at(pointer)  # a command-line option's value is located at the option
        sink.error("PL133", message, given if given.option else Location(file=where, pointer=pointer))
    if problems:
        return None
    if all(isinstance(w, WireSpec) for w in spec.wires) and all(_canonical_call(c) for c in spec.calls):
        return spec
    read = read_pipeline(doc, where, sink)
    return None if read is None else replace(read, source=spec.source, extra=spec.extra, given=spec.given)


def _canonical_call(call) -> bool:
    """A CallSpec as read_pipeline makes it (tuples of strings and of pairs); lists or dicts in its fields, as a
    caller may write them, are read again from the document."""
    if not isinstance(call, CallSpec):
        return False
    names = (call.stacked, call.after, call.after_previous_layer)
    pairs = (call.bind, call.events)
    return all(isinstance(t, tuple) for t in names + pairs) and \
        all(isinstance(p, tuple) and len(p) == 2 for t in pairs for p in t)


def parse_wire(text: str, sink: DiagnosticSink, where: Location | None = None) -> WireSpec | None:
    m = _WIRE.fullmatch(text)
    if not m:
        sink.error("PL001", f"cannot read wire {text!r}", where,
                   hint="write wires as producer.out_port=consumer.in_port (or ->)")
        return None
    return WireSpec(*m.groups(), text=text, where=where)


def load_pipeline(path: str | Path, sink: DiagnosticSink) -> PipelineSpec | None:
    """Read a pipeline file: JSON, then its schema (PL133, every violation with its pointer), then the
    wires' syntax. None after any error."""
    doc = jsonread.read_file(path, sink, "pipeline")
    return None if doc is None else read_pipeline(doc.value, str(path), sink)


def load_pipeline_dict(doc: dict, sink: DiagnosticSink, name: str = "<pipeline>") -> PipelineSpec | None:
    """A pipeline given as a Python dict, read as the same file would be: through the JSON reader (its
    limits: no NaN, integers within 64 bits, nesting) and the schema. `name` stands for the file."""
    try:
        text = json.dumps(doc, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        sink.error("PL133", f"the pipeline is not a JSON document: {exc}", Location(file=name, pointer=""))
        return None
    parsed = jsonread.parse_bytes(text.encode(), name, sink)
    return None if parsed is None else read_pipeline(parsed.value, name, sink)


def _kernel_parameter_names(raw: dict, file: str, sink: DiagnosticSink) -> bool:
    """The kernel parameters a pipeline names itself (the layer count, the calls' bindings) take the contracts'
    rules for parameters (core/identifiers.py) and leave pl_ to the glue: PL188 at the pipeline's field, where the
    link would have blamed the contract's parameter."""
    from .identifiers import problem
    names = [("/layers", raw["layers"])] if isinstance(raw.get("layers"), str) else []
    names += [(f"/calls/{i}/bind/{k}", v) for i, c in enumerate(raw.get("calls", ())) for k, v in c.get("bind", {}).items()]
    ok = True
    for pointer, name in names:
        why = problem(name, "whole") or ("a name the generated glue keeps for itself (pl_...)"
                                         if name.startswith("pl_") else None)
        if why:
            sink.error("PL188", f"kernel parameter '{name}' is {why}", Location(file=file, pointer=pointer),
                       hint="name the kernel parameter differently")
            ok = False
    return ok


def read_pipeline(raw, file: str, sink: DiagnosticSink) -> PipelineSpec | None:
    """A parsed pipeline document: its schema (PL133), then the wires' syntax. None after any error."""
    if not isinstance(raw, dict) or "pipeline" not in raw:
        what = ("a contract, not a pipeline file" if isinstance(raw, dict) and "pipelink_contract" in raw else
                f"not a pipeline file (\"pipeline\": {FORMAT_VERSION} is missing)")
        sink.error("PL001", f"{file} is {what}", Location(file=file, pointer=""),
                   hint='a pipeline file has "pipeline": 1, "name", "components", "wires", "schedule" (docs/pipeline.md)')
        return None
    problems = validate.violations(SCHEMA_FILE, raw)
    for pointer, message in problems:
        sink.error("PL133", message, Location(file=file, pointer=pointer))
    if problems:
        return None
    wires = [parse_wire(w, sink, Location(file=file, pointer=f"/wires/{i}"))
             for i, w in enumerate(raw.get("wires", []))]
    if None in wires or not _kernel_parameter_names(raw, file, sink):
        return None
    calls = tuple(CallSpec(c["name"], c.get("component", c["name"]), tuple(sorted(c.get("bind", {}).items())),
                           c.get("per_layer", False), tuple(c.get("stacked", ())),
                           tuple(sorted(c.get("events", {}).items())), tuple(c.get("after", ())),
                           tuple(c.get("after_previous_layer", ())), Location(file=file, pointer=f"/calls/{i}"))
                  for i, c in enumerate(raw.get("calls", ())))
    default = PipelineSpec()
    return PipelineSpec(calls=calls, layers=raw.get("layers"), name=raw.get("name", default.name), components=tuple(raw.get("components", ())),
                        wires=tuple(wires), schedule=raw.get("schedule"), dispatch=raw.get("dispatch", default.dispatch),
                        counts_per_cta=raw.get("counts_per_cta", default.counts_per_cta),
                        loader_slots=raw.get("loader_slots", default.loader_slots),
                        load_ahead=raw.get("load_ahead", default.load_ahead),
                        load_ahead_when=raw.get("load_ahead_when", default.load_ahead_when),
                        load_ahead_gap_ns=raw.get("load_ahead_gap_ns", default.load_ahead_gap_ns),
                        loader_in_flight=raw.get("loader_in_flight", default.loader_in_flight),
                        loader_in_flight_behind=raw.get("loader_in_flight_behind", default.loader_in_flight_behind),
                        loader_in_flight_behind_until=raw.get("loader_in_flight_behind_until",
                                                              default.loader_in_flight_behind_until),
                        loader_l2=raw.get("loader_l2", default.loader_l2),
                        deal=raw.get("deal", default.deal),
                        wait_backoff_ns=raw.get("wait_backoff_ns", default.wait_backoff_ns),
                        notify_fence=raw.get("notify_fence", default.notify_fence),
                        debug_events=raw.get("debug_events", default.debug_events),
                        dependent_launch=raw.get("dependent_launch", default.dependent_launch),
                        profile_tasks=raw.get("profile_tasks", default.profile_tasks),
                        standalone=raw.get("standalone", default.standalone),
                        specialize=dict(raw.get("specialize", {})), geometry=dict(raw.get("geometry", {})),
                        source=file, extra=raw)
