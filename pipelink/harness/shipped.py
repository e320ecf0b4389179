"""The components shipped in this repository, and building them.

Each lives in `components/<name>/<name>.cu` with its contract in `contracts/<name>.json`. Builds
go to `build/components/<name>.o` and are skipped when nothing that feeds them changed (a content
hash of the source, contract, pipelink's headers and the toolchain version sits next to the object).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from .. import toolchain

from ..authoring.builder import BuildOptions, build_component, pipelink_include_dir
from ..authoring.header import generate_header
from ..core import jsonread
from ..core.diagnostics import DiagnosticSink, Location
from ..core.loader import load_contract_file

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Shipped:
    name: str
    source: Path
    contract: Path


def shipped_components(repo: Path = REPO) -> list[Shipped]:
    out = []
    for src_dir in sorted((repo / "components").glob("*/")):
        name = src_dir.name
        source, contract = src_dir / f"{name}.cu", repo / "contracts" / f"{name}.json"
        if source.is_file() and contract.is_file():
            out.append(Shipped(name, source, contract))
    return out


@dataclass(frozen=True)
class ShippedPipeline:
    name: str
    components: tuple[str, ...]
    path: Path


def shipped_pipelines(repo: Path = REPO) -> list[ShippedPipeline]:
    """The pipelines under `pipelines/`: which shipped components go together."""
    out = []
    for path in sorted((repo / "pipelines").glob("*.json")):
        if path.name.endswith(".schema.json"):
            continue
        doc = jsonread.parse(jsonread.read_bytes(path))
        out.append(ShippedPipeline(doc["name"], tuple(doc["components"]), path))
    return out


def _fingerprint(item: Shipped, header: str, opts: BuildOptions) -> str:
    h = hashlib.sha256()
    for part in (item.source.read_bytes(), item.contract.read_bytes(), header.encode(),
                 repr(sorted(opts.archs or ())).encode(), toolchain.nvcc_path().resolve().as_posix().encode()):
        h.update(hashlib.sha256(part).digest())
    for module in ("authoring/builder.py", "authoring/header.py", "formats/inputs.py"):  # how objects are made is an input too
        h.update(hashlib.sha256((Path(__file__).parents[1] / module).read_bytes()).digest())
    for inc in sorted(pipelink_include_dir().rglob("*.h")):
        h.update(hashlib.sha256(inc.read_bytes()).digest())
    for dep in sorted(item.source.parent.glob("*")):  # the component's own headers
        if dep != item.source and dep.suffix in (".h", ".cuh", ".hpp"):
            h.update(hashlib.sha256(dep.read_bytes()).digest())
    return h.hexdigest()


def build_shipped(out_dir: Path, sink: DiagnosticSink, names: list[str] | None = None,
                  opts: BuildOptions | None = None, log=print) -> list[Path]:
    """Build the shipped components (all, or `names`); returns the object paths."""
    opts = opts or BuildOptions()
    items = shipped_components()
    if names:
        known = {i.name for i in items}
        for n in names:
            if n not in known:
                sink.error("PL001", f"no shipped component named '{n}'", hint="shipped: " + ", ".join(sorted(known)))
        items = [i for i in items if i.name in names]
    if not items:
        sink.error("PL002", f"no shipped components found under {REPO / 'components'}", Location(file=str(REPO)))
        return []
    objects = []
    for item in items:
        contract = load_contract_file(item.contract, sink)
        if contract is None:
            continue
        out = out_dir / f"{item.name}.o"
        stamp = out.with_suffix(".o.fingerprint")
        fp = _fingerprint(item, generate_header(contract), opts)
        if out.is_file() and stamp.is_file() and stamp.read_text() == fp:
            log(f"  up to date  {out}")
        else:
            if not build_component(contract, item.contract.read_bytes(), item.source, out, sink, opts):
                continue
            stamp.write_text(fp)
            log(f"  built       {out}")
        objects.append(out)
    return objects
