"""What to link: the components' order, the wires between their ports, the schedule.

Given on the command line (`--wire tile_load.tile=tile_transform.src`, `--schedule`) or in a
pipeline file (`pipelines/rowsum.json`). Wires not given are found where the match is unique.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from .diagnostics import DiagnosticSink, Location
from .model import is_identifier

SCHEDULES = ("sequential", "warp_specialized", "persistent")
DISPATCHES = ("static", "dynamic")
_WIRE = re.compile(r"\s*(\w+)\.(\w+)\s*(?:->|=)\s*(\w+)\.(\w+)\s*", re.ASCII)


@dataclass(frozen=True)
class WireSpec:
    producer: str
    out_port: str
    consumer: str
    in_port: str
    text: str

    def __str__(self) -> str:
        return f"{self.producer}.{self.out_port} -> {self.consumer}.{self.in_port}"


@dataclass
class PipelineSpec:
    name: str = "pipelink_fused"
    components: tuple[str, ...] = ()    # component names in pipeline order (empty: the inputs' order)
    wires: tuple[WireSpec, ...] = ()
    schedule: str | None = None         # None: inferred
    dispatch: str = "static"            # persistent schedule: static per-CTA order, or a global task counter
    debug_events: bool = False          # a wait that spins too long stops the kernel and is reported
    specialize: dict = field(default_factory=dict)  # shape parameter -> value baked into this link
    source: str | None = None           # the pipeline file, for diagnostics
    extra: dict = field(default_factory=dict)


def parse_wire(text: str, sink: DiagnosticSink, where: Location | None = None) -> WireSpec | None:
    m = _WIRE.fullmatch(text)
    if not m:
        sink.error("PL001", f"cannot read wire {text!r}", where,
                   hint="write wires as producer.out_port=consumer.in_port (or ->)")
        return None
    return WireSpec(*m.groups(), text=text)


def load_pipeline(path: str | Path, sink: DiagnosticSink) -> PipelineSpec | None:
    path = Path(path)
    where = Location(file=str(path))
    try:
        doc = json.loads(path.read_text())
    except OSError as exc:
        sink.error("PL002", f"cannot read pipeline {path}: {exc.strerror or exc}", where)
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        sink.error("PL006", f"pipeline {path} is not valid JSON: {exc}", where)
        return None
    if not isinstance(doc, dict) or doc.get("pipeline") != 1:
        sink.error("PL001", f"{path} is not a pipeline file (format 1)", where,
                   hint='a pipeline file has "pipeline": 1, "name", "components", "wires", "schedule"')
        return None
    name = doc.get("name", "pipelink_fused")
    comps = doc.get("components", [])
    schedule = doc.get("schedule")
    dispatch = doc.get("dispatch", "static")
    ok = True
    if dispatch not in DISPATCHES:
        sink.error("PL001", f"unknown dispatch {dispatch!r}", Location(file=str(path), pointer="/dispatch"),
                   hint="dispatch: " + ", ".join(DISPATCHES))
        ok = False
    if not is_identifier(name):
        sink.error("PL001", f"pipeline name {name!r} is not a C identifier", Location(file=str(path), pointer="/name"))
        ok = False
    if not isinstance(comps, list) or not all(isinstance(c, str) for c in comps):
        sink.error("PL001", "components must be a list of component names", Location(file=str(path),
                                                                                    pointer="/components"))
        ok = False
    if schedule is not None and schedule not in SCHEDULES:
        sink.error("PL001", f"unknown schedule {schedule!r}", Location(file=str(path), pointer="/schedule"),
                   hint="schedules: " + ", ".join(SCHEDULES))
        ok = False
    wires = []
    for i, w in enumerate(doc.get("wires", [])):
        spec = parse_wire(w, sink, Location(file=str(path), pointer=f"/wires/{i}")) if isinstance(w, str) else None
        if spec is None:
            ok = False
        else:
            wires.append(spec)
    if not ok:
        return None
    return PipelineSpec(name=name, components=tuple(comps), wires=tuple(wires), schedule=schedule, dispatch=dispatch,
                        source=str(path), extra=doc)
