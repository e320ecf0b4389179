"""The manifest: what the linker hands the launcher, as one typed, frozen, versioned record.

`emit` builds a `Manifest` from the link's decisions; `pipelink link` and `LinkResult.save` write it as
JSON (`K.json`), and the launcher, `inspect`, the link cache and the reports read it back with
`Manifest.from_json`, which validates every field before anything uses one. The JSON form is the
file format (`"manifest": MANIFEST_VERSION`); nothing reads the JSON by string keys anywhere else.

This module also owns the launcher ABI of persistent kernels, which the glue, the manifest and the
launcher share: the implicit parameters the launcher fills in (`IMPLICIT_PARAMS`) and the layout of
the event workspace's header (`WORKSPACE`). The C side of the layout, `include/pipelink/workspace.h`,
is generated from it (`workspace_header`; a test checks the file).
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from ..core import expr as _expr
from ..core.diagnostics import PipelinkRunError
from ..core.model import DTYPE_BYTES, DTYPE_C, INTEGER_DTYPES, is_identifier
from .tensormap import TensorMapDecl

# 2: a persistent kernel keeps its place in the event workspace on the device (IMPLICIT_PARAMS, WORKSPACE);
# 1: the launcher passed it in per launch. Version 1 manifests are read (inspect, load); their persistent
# kernels are refused at launch (link them again), the others launch as before.
MANIFEST_VERSION = 2
READABLE_VERSIONS = (1, 2)
MAX_BLOCK_THREADS = 1024
MAX_CLUSTER_CTAS = 8  # a portable cluster (the contract's limit, PL107)


class ManifestError(PipelinkRunError, ValueError):
    """A manifest the launcher cannot trust (PL009): what is wrong, naming the kernel."""

    code = "PL009"


# --- the launcher ABI of persistent kernels -----------------------------------------------------

@dataclass(frozen=True)
class ImplicitParam:
    """A kernel parameter the launcher supplies: its C name, its kind (what the launcher puts there)."""

    name: str
    kind: str
    dtype: str
    pointer: bool

    def c_decl(self) -> str:
        ctype = DTYPE_C[self.dtype]
        return f"{ctype}* __restrict__ {self.name}" if self.pointer else f"{ctype} {self.name}"


# In kernel-parameter order, after the user's parameters: the workspace and the capacity of each of its
# two event regions. Both stay the same from launch to launch (pipelink/runtime/workspace.py): everything that
# changes per launch lives in the workspace header, so a CUDA graph can capture a launch and replay it.
IMPLICIT_PARAMS = (ImplicitParam("pl_workspace", "workspace", "u64", True),
                   ImplicitParam("pl_region_words", "region_words", "u64", False))
IMPLICIT_KINDS = tuple(p.kind for p in IMPLICIT_PARAMS)
# What a kernel with a split reduction (a tile_sequence.reduction) takes from the launcher, after the
# user's parameters: the partial slots (flags left zero by every launch, streamk.py), how many of the
# last tiles to split over the CTAs (stream-K; 0: none) and in how many pieces to split every tile
# (split-K; 1: none). The same from launch to launch of one shape, so a captured launch replays.
STREAM_K_PARAMS = (ImplicitParam("pl_partials", "partials", "f32", True),
                   ImplicitParam("pl_stream_k_tiles", "stream_k_tiles", "i32", False),
                   ImplicitParam("pl_split_k", "split_k", "i32", False))
STREAM_K_KINDS = tuple(p.kind for p in STREAM_K_PARAMS)
# Manifest version 1: the launcher passed this launch's region, the region to clear, its size, the epoch
# and the first task claim (readable, refused at launch); before that, epoch-tagged counters.
V1_IMPLICIT_KINDS = ("workspace", "events", "clear", "clear_words", "epoch", "task_base")
LEGACY_IMPLICIT_KINDS = ("workspace", "epoch", "task_base")


@dataclass(frozen=True)
class WorkspaceLayout:
    """The header of the event workspace, in 64-bit words; the two event regions follow it.

    A launch reads `launch_word` (launches finished on this workspace): it counts in region
    `launch & 1`, zeroes the other region (`used_words + other` words, as the launch before it
    recorded) for the launch after it, and records its own count in `used_words + launch & 1`. The
    last CTA out (`exit_word` counts them) zeroes the task counter and the exit count and moves
    `launch_word` on. So every launch leaves the header as the next one needs it, with nothing from
    the host: no reset in the stream, and a captured launch replays correctly."""

    header_words: int = 16
    # A debug build's timeout report, words 0..7 (pl::events::Timeout): the launch's epoch (non-zero
    # once written), indices into the manifest's components and events, the element's linear index,
    # the count waited for and the one seen, the waiting task, and the flag that makes every CTA leave.
    report: tuple[str, ...] = ("epoch", "component", "event", "element", "expected", "observed", "task", "abort")
    task_counter_word: int = 8  # the dynamic dispatch's task counter: zero when a launch starts and ends
    launch_word: int = 9        # launches finished on this workspace: which region the next one counts in
    exit_word: int = 10         # CTAs of the running launch that are done
    used_words: int = 11        # two words: the counters each region's last launch used

    def __post_init__(self):
        words = [self.task_counter_word, self.launch_word, self.exit_word, self.used_words, self.used_words + 1]
        assert len(self.report) <= min(words) and max(words) < self.header_words and len(set(words)) == len(words)


WORKSPACE = WorkspaceLayout()


def workspace_header() -> str:
    """include/pipelink/workspace.h: the workspace layout as the device code sees it."""
    fields = "\n".join(f"  unsigned long long {name};" for name in WORKSPACE.report)
    return (
        "// Generated from pipelink/runtime/manifest.py (WORKSPACE): edit that, then write this file again with\n"
        "//   python -c 'import pipelink.runtime.manifest as m; print(m.workspace_header(), end=\"\")' "
        "> pipelink/include/pipelink/workspace.h\n"
        "// The header of a persistent kernel's event workspace, in 64-bit words; the event regions follow it.\n"
        "#pragma once\n\n"
        "namespace pl {\n"
        "namespace events {\n\n"
        "// Enumerators, not variables: they leave no symbol in the linked cubin.\n"
        f"enum : unsigned {{\n  kWorkspaceHeaderWords = {WORKSPACE.header_words}u,\n"
        f"  kTaskCounterWord = {WORKSPACE.task_counter_word}u,  // the dynamic dispatch's task counter\n"
        f"  kLaunchWord = {WORKSPACE.launch_word}u,  // launches finished: the next one counts in region launch & 1\n"
        f"  kExitWord = {WORKSPACE.exit_word}u,  // CTAs of the running launch that are done\n"
        f"  kUsedWords = {WORKSPACE.used_words}u,  // two words: the counters each region's last launch used\n"
        "};\n\n"
        "// Where a debug build reports a wait that never ended: the first words of the workspace, which\n"
        "// the launcher reads back after the kernel has stopped.\n"
        f"struct Timeout {{\n{fields}\n}};\n"
        f"static_assert(sizeof(Timeout) == {len(WORKSPACE.report)} * 8, \"the report's words\");\n\n"
        "}  // namespace events\n"
        "}  // namespace pl\n")


# --- the records ------------------------------------------------------------------------------

@dataclass(frozen=True)
class ParamSpec:
    """One kernel parameter as the manifest declares it."""

    name: str
    dtype: str
    pointer: bool
    const: bool
    implicit: str | None = None   # one of IMPLICIT_KINDS or STREAM_K_KINDS: the launcher supplies it
    tensor_map: TensorMapDecl | None = None  # a TMA descriptor encoded from the tensor passed
    shapes: tuple[tuple[str, ...], ...] = ()  # extents the buffer passed must hold, one per contract view
    align: int | None = None      # bytes the pointer passed must be aligned to (buffers.py checks both)

    @property
    def is_shape(self) -> bool:
        """An integer scalar: a value the tile expressions may use."""
        return not self.pointer and self.tensor_map is None and self.dtype in INTEGER_DTYPES

    def describe(self) -> str:
        if self.tensor_map is not None:
            return f"{self.dtype} tensor map"
        return f"{'const ' if self.const else ''}{self.dtype}*" if self.pointer else self.dtype

    def to_json(self) -> dict:
        doc = {"name": self.name, "dtype": self.dtype, "pointer": self.pointer, "const": self.const}
        if self.tensor_map is not None:
            doc["tensor_map"] = self.tensor_map.to_manifest()
        if self.implicit is not None:
            doc["implicit"] = self.implicit
        if self.shapes:
            doc["shapes"] = [list(shape) for shape in self.shapes]
        if self.align:
            doc["align"] = self.align
        return doc


@dataclass(frozen=True)
class StreamKSpec:
    """A kernel whose tiles sum reduction blocks the launcher may split (streamk.py)."""

    blocks: str             # reduction blocks per tile, over the integer parameters
    slot_floats: int        # one partial slot: flags, then every warp's fragment
    blocks_expr: _expr.Expr | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if self.blocks_expr is None:
            object.__setattr__(self, "blocks_expr", _expr.parse(self.blocks))

    def to_json(self) -> dict:
        return {"blocks": self.blocks, "slot_floats": self.slot_floats}


@dataclass(frozen=True)
class ComponentRecord:
    name: str
    version: str
    contract_hash: str      # the first 16 hex digits
    object: str | None      # the input it came from

    def to_json(self) -> dict:
        return {"name": self.name, "version": self.version, "contract_hash": self.contract_hash, "object": self.object}


@dataclass(frozen=True)
class RoleRecord:
    """A role-structured kernel's group of warps: one component's role and the roles that join it."""
    name: str               # "component.role" of its owner
    warps: tuple[int, int]  # first and last warp, every instance
    instances: int
    members: tuple[str, ...]  # "component.role", the owner first
    registers: int          # per thread
    setmaxnreg: bool        # set by setmaxnreg (else the entry's)

    def to_json(self) -> dict:
        return {"name": self.name, "warps": list(self.warps), "instances": self.instances,
                "members": list(self.members), "registers": self.registers, "setmaxnreg": self.setmaxnreg}


@dataclass(frozen=True)
class WireRecord:
    source: str             # "producer.port"
    target: str             # "consumer.port"
    kind: str               # zero_copy, relayout, ring, register, ...
    explicit: bool

    def to_json(self) -> dict:
        return {"from": self.source, "to": self.target, "kind": self.kind, "explicit": self.explicit}


@dataclass(frozen=True)
class EventRecord:
    """An event tensor, sized at launch from its shape over the integer parameters."""

    name: str
    shape: tuple[str, ...]
    notified_by: tuple[str, ...] = ()
    waited_by: tuple[str, ...] = ()
    shape_exprs: tuple[_expr.Expr, ...] = field(default=(), compare=False, repr=False)  # parsed once

    def __post_init__(self):
        if not self.shape_exprs:
            object.__setattr__(self, "shape_exprs", tuple(_expr.parse(e) for e in self.shape))

    def words(self, shapes: dict[str, int]) -> int:
        return math.prod(e.evaluate(shapes) for e in self.shape_exprs)

    def to_json(self) -> dict:
        return {"name": self.name, "shape": list(self.shape), "notified_by": list(self.notified_by),
                "waited_by": list(self.waited_by)}


@dataclass(frozen=True)
class WorkspaceSpec:
    """A persistent kernel's event workspace: its header and the event tensors of one launch."""

    header_words: int = WORKSPACE.header_words
    task_counter_word: int = WORKSPACE.task_counter_word
    debug: bool = False
    events: tuple[EventRecord, ...] = ()

    def to_json(self) -> dict:
        return {"header_words": self.header_words, "task_counter_word": self.task_counter_word, "debug": self.debug,
                "events": [e.to_json() for e in self.events]}


@dataclass(frozen=True)
class Resources:
    """What the linked kernel uses, read from the cubin."""

    registers: int
    frame_bytes: int
    static_smem: int
    named_barriers: int | None

    def to_json(self) -> dict:
        return {"registers": self.registers, "frame_bytes": self.frame_bytes, "static_smem": self.static_smem,
                "named_barriers": self.named_barriers}


@dataclass(frozen=True)
class Manifest:
    """What a launcher needs to call a linked kernel, and what the link decided that a reader may show."""

    kernel: str
    block: tuple[int, int, int]
    dynamic_smem: int = 0
    params: tuple[ParamSpec, ...] = ()
    tiles: tuple[str, ...] = ()                # tile-count expressions over the integer parameters
    version: int = MANIFEST_VERSION
    pipelink: str | None = None                # the version that linked it
    target: str | None = None
    schedule: str | None = None
    tile_order: str | None = None
    distribution: str | None = None
    geometry: dict = field(default_factory=dict)        # name -> value
    components: tuple[ComponentRecord, ...] = ()
    wires: tuple[WireRecord, ...] = ()
    cubin_sha256: str | None = None
    specialized: dict = field(default_factory=dict)     # parameter -> the value baked in
    grid_policy: str | None = None             # "balanced": the fewest CTAs for the rounds of tiles; "stream_k"
    stream_k: StreamKSpec | None = None        # a split reduction: the launcher plans the split per shape
    dependent_launch: bool = False             # launch with programmatic stream serialization (sm_90+)
    tasks: dict = field(default_factory=dict)  # persistent: component -> its task count
    ring_slots: dict = field(default_factory=dict)  # loader ring: component -> the slots one of its tasks fills
    dispatch: str | None = None                # persistent: static | dynamic
    workspace: WorkspaceSpec | None = None     # persistent: the event workspace
    resources: Resources | None = None
    profile_tasks: int = 0                     # persistent: records of the task-profile ring (0: none)
    distributed: bool = False                  # every rank runs it on NVSHMEM (contracts use RANK, WORLD, rank)
    cluster: tuple[int, int, int] | None = None  # the kernel's __cluster_dims__: a grid is whole clusters
    # component (call) declaring the cluster -> the tile count it walks, which each launch must make whole clusters
    cluster_tiles: dict = field(default_factory=dict)
    roles: tuple[RoleRecord, ...] = ()         # role-structured: each group of warps and its registers
    tile_exprs: tuple[_expr.Expr, ...] = field(default=(), compare=False, repr=False)  # `tiles`, parsed once

    def __post_init__(self):
        if not self.tile_exprs and self.tiles:
            try:
                object.__setattr__(self, "tile_exprs", tuple(_expr.parse(t) for t in self.tiles))
            except _expr.ExprError as exc:
                raise ManifestError(f"manifest of kernel '{self.kernel}': bad tile expression: {exc}") from None

    @property
    def block_threads(self) -> int:
        return math.prod(self.block)

    @property
    def user_params(self) -> tuple[ParamSpec, ...]:
        return tuple(p for p in self.params if p.implicit is None)

    @property
    def persistent(self) -> bool:
        return any(p.implicit in IMPLICIT_KINDS + V1_IMPLICIT_KINDS for p in self.params)

    def describes(self, cubin: bytes) -> bool:
        """False where the manifest names another cubin's sha256 (one without a hash is taken on trust)."""
        return self.cubin_sha256 is None or self.cubin_sha256 == hashlib.sha256(bytes(cubin)).hexdigest()

    # --- the file format ----------------------------------------------------------------------

    def to_json(self) -> dict:
        """The manifest as K.json holds it (keys in the order `pipelink link` always wrote them)."""
        doc = {"manifest": self.version, "pipelink": self.pipelink, "kernel": self.kernel, "target": self.target,
               "schedule": self.schedule, "block": list(self.block), "dynamic_smem": self.dynamic_smem,
               "params": [p.to_json() for p in self.params], "tiles": list(self.tiles),
               "tile_order": self.tile_order, "distribution": self.distribution, "geometry": dict(self.geometry),
               "components": [c.to_json() for c in self.components], "wires": [w.to_json() for w in self.wires],
               "cubin_sha256": self.cubin_sha256}
        if self.specialized:
            doc["specialized"] = dict(self.specialized)
        if self.grid_policy is not None:
            doc["grid_policy"] = self.grid_policy
        if self.stream_k is not None:
            doc["stream_k"] = self.stream_k.to_json()
        if self.dependent_launch:
            doc["dependent_launch"] = True
        if self.tasks:
            doc["tasks"] = dict(self.tasks)
        if self.ring_slots:
            doc["ring_slots"] = dict(self.ring_slots)
        if self.dispatch is not None:
            doc["dispatch"] = self.dispatch
        if self.workspace is not None:
            doc["workspace"] = self.workspace.to_json()
        if self.resources is not None:
            doc["resources"] = self.resources.to_json()
        if self.profile_tasks:
            doc["profile_tasks"] = self.profile_tasks
        if self.distributed:
            doc["distributed"] = True
        if self.cluster is not None:
            doc["cluster"] = list(self.cluster)
        if self.roles:
            doc["roles"] = [g.to_json() for g in self.roles]
        if self.cluster_tiles:
            doc["cluster_tiles"] = dict(self.cluster_tiles)
        return doc

    @classmethod
    def from_json(cls, doc) -> "Manifest":
        """Read and validate a manifest document (a parsed K.json); ManifestError says what is wrong."""
        try:
            return _Reader(doc).manifest()
        except (TypeError, KeyError, AttributeError, IndexError) as exc:  # a value of a type no check foresaw
            raise ManifestError(f"a field of the manifest has a value of the wrong type ({exc})") from None

    @classmethod
    def of(cls, manifest) -> "Manifest":
        """A Manifest as is, or read from its JSON document."""
        return manifest if isinstance(manifest, Manifest) else cls.from_json(manifest)


# --- reading ------------------------------------------------------------------------------------

_TOP_FIELDS = {"manifest", "pipelink", "kernel", "target", "schedule", "block", "dynamic_smem", "params", "tiles",
               "tile_order", "distribution", "geometry", "components", "wires", "cubin_sha256", "specialized",
               "grid_policy", "stream_k", "dependent_launch", "tasks", "ring_slots", "dispatch", "workspace", "resources",
               "profile_tasks", "distributed", "cluster", "roles", "cluster_tiles"}
_SCHEDULES = ("sequential", "warp_specialized", "persistent")
_DISPATCHES = ("static", "dynamic")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class _Reader:
    def __init__(self, doc):
        if not isinstance(doc, dict) or not isinstance(doc.get("kernel"), str) or not doc["kernel"]:
            raise ManifestError("a manifest is a JSON object with the kernel's name under 'kernel'")
        self.doc, self.kernel = doc, doc["kernel"]

    def error(self, message: str) -> ManifestError:
        return ManifestError(f"manifest of kernel '{self.kernel}': {message}")

    def optional(self, key: str, kind, what: str, choices=None):
        value = self.doc.get(key)
        if value is None:
            return None
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool or (
                choices is not None and value not in choices):
            raise self.error(f"'{key}' must be {what}, got {value!r}")
        return value

    def manifest(self) -> Manifest:
        d = self.doc
        version = d.get("manifest", MANIFEST_VERSION)
        if not _is_int(version) or version not in READABLE_VERSIONS:
            raise self.error(f"manifest version {version!r}, expected {MANIFEST_VERSION}"
                             + (" (written by a newer pipelink)" if _is_int(version) and version > MANIFEST_VERSION
                                else ""))
        unknown = sorted(set(d) - _TOP_FIELDS)
        if unknown:
            raise self.error(f"unknown field(s) {', '.join(map(repr, unknown))}")
        smem = d.get("dynamic_smem", 0)
        if not _is_int(smem) or smem < 0:
            raise self.error(f"'dynamic_smem' must be a non-negative integer, got {smem!r}")
        tiles = d.get("tiles", [])
        if not isinstance(tiles, list) or not all(isinstance(t, (str, int)) and not isinstance(t, bool) for t in tiles):
            raise self.error("'tiles' must be a list of integer expressions")
        return Manifest(
            kernel=self.kernel, block=self.block(), dynamic_smem=smem, params=self.params(version),
            tiles=tuple(str(t) for t in tiles), version=version,
            pipelink=self.optional("pipelink", str, "a version string"),
            target=self.optional("target", str, "a target arch"),
            schedule=self.optional("schedule", str, f"one of {', '.join(_SCHEDULES)}", _SCHEDULES),
            tile_order=self.optional("tile_order", str, "a tile order"),
            distribution=self.optional("distribution", str, "a tile distribution"),
            geometry=self.int_map("geometry"), components=self.components(), wires=self.wires(),
            cubin_sha256=self.sha256(), specialized=self.int_map("specialized"),
            grid_policy=self.optional("grid_policy", str, "'balanced' or 'stream_k'", ("balanced", "stream_k")),
            stream_k=self.stream_k(),
            dependent_launch=bool(self.optional("dependent_launch", bool, "a boolean")),
            tasks=self.str_map("tasks"), ring_slots=self.str_map("ring_slots"),
            dispatch=self.optional("dispatch", str, f"one of {', '.join(_DISPATCHES)}", _DISPATCHES),
            workspace=self.workspace(), resources=self.resources(), profile_tasks=self.profile_tasks(),
            distributed=bool(self.optional("distributed", bool, "a boolean")), cluster=self.cluster(),
            roles=self.roles(), cluster_tiles=self.cluster_tiles())

    def cluster_tiles(self) -> dict:
        tiles = self.str_map("cluster_tiles")
        if tiles and self.cluster() is None:
            raise self.error("'cluster_tiles' names the tile counts of a clustered kernel, and it has no 'cluster'")
        for name, text in tiles.items():
            try:
                _expr.parse(text)
            except _expr.ExprError as exc:
                raise self.error(f"'cluster_tiles' of '{name}': {exc}") from None
        return tiles

    def roles(self) -> tuple[RoleRecord, ...]:
        out = []
        for i, g in enumerate(self.records("roles")):
            try:
                warps, members = g["warps"], g["members"]
                rec = RoleRecord(g["name"], tuple(warps) if isinstance(warps, list) else (), g["instances"],
                                 tuple(members) if isinstance(members, list) else (), g["registers"], g["setmaxnreg"])
            except KeyError as exc:
                raise self.error(f"roles[{i}] lacks {exc}") from None
            if not (isinstance(rec.name, str) and len(rec.warps) == 2 and all(_is_int(w) and w >= 0 for w in rec.warps)
                    and rec.warps[0] <= rec.warps[1] and _is_int(rec.instances) and rec.instances >= 1
                    and rec.members and all(isinstance(m, str) for m in rec.members)
                    and _is_int(rec.registers) and rec.registers > 0 and isinstance(rec.setmaxnreg, bool)):
                raise self.error(f"roles[{i}]: a name, warps [first, last], instances >= 1, member names, registers "
                                 "and setmaxnreg (a boolean)")
            out.append(rec)
        return tuple(out)

    def cluster(self) -> tuple[int, int, int] | None:
        raw = self.doc.get("cluster")
        if raw is None:
            return None
        if not (isinstance(raw, list) and len(raw) == 3 and all(_is_int(v) and v >= 1 for v in raw)
                and raw[1] == raw[2] == 1 and raw[0] <= MAX_CLUSTER_CTAS):
            raise self.error(f"'cluster' must be [n, 1, 1] with 1 <= n <= {MAX_CLUSTER_CTAS} (the grid is "
                             f"one-dimensional), got {raw!r}")
        return tuple(raw)

    def block(self) -> tuple[int, int, int]:
        raw = self.doc.get("block")
        if not (isinstance(raw, list) and 1 <= len(raw) <= 3 and all(_is_int(v) and v >= 1 for v in raw)):
            raise self.error(f"'block' must be 1 to 3 positive integers, got {raw!r}")
        block = tuple(raw) + (1,) * (3 - len(raw))
        if math.prod(block) > MAX_BLOCK_THREADS:
            raise self.error(f"block {list(block)} has more than {MAX_BLOCK_THREADS} threads")
        return block

    def params(self, version: int) -> tuple[ParamSpec, ...]:
        kinds_of_version = IMPLICIT_KINDS if version >= 2 else V1_IMPLICIT_KINDS
        raw = self.doc.get("params", [])
        if not isinstance(raw, list):
            raise self.error("'params' must be a list")
        params, seen = [], set()
        for i, p in enumerate(raw):
            if not isinstance(p, dict) or not is_identifier(p.get("name")):
                raise self.error(f"params[{i}] needs an identifier 'name'")
            name = p["name"]
            if name in seen:
                raise self.error(f"parameter '{name}' appears twice")
            seen.add(name)
            unknown = sorted(set(p) - {"name", "dtype", "pointer", "const", "implicit", "tensor_map", "shapes",
                                       "align"})
            if unknown:
                raise self.error(f"parameter '{name}' has unknown field(s) {', '.join(map(repr, unknown))}")
            if not isinstance(p.get("dtype"), str) or p["dtype"] not in DTYPE_BYTES:
                raise self.error(f"parameter '{name}' has unknown dtype {p.get('dtype')!r}")
            if not isinstance(p.get("pointer"), bool) or not isinstance(p.get("const", False), bool):
                raise self.error(f"parameter '{name}': 'pointer' and 'const' must be booleans")
            implicit = p.get("implicit")
            if implicit is not None and implicit not in kinds_of_version + LEGACY_IMPLICIT_KINDS + STREAM_K_KINDS:
                raise self.error(f"parameter '{name}' has unknown implicit kind {implicit!r}")
            tmap = None
            if p.get("tensor_map") is not None:
                try:
                    tmap = TensorMapDecl.from_manifest(p["tensor_map"])
                except (ValueError, _expr.ExprError) as exc:
                    raise self.error(f"parameter '{name}': {exc}") from None
            shapes = p.get("shapes", [])
            if not (isinstance(shapes, list) and all(isinstance(v, list) and all(
                    isinstance(e, (str, int)) and not isinstance(e, bool) for e in v) for v in shapes)):
                raise self.error(f"parameter '{name}': 'shapes' must be a list of lists of extents, got {shapes!r}")
            align = p.get("align")
            if align is not None and not (_is_int(align) and align >= 1 and align & (align - 1) == 0):
                raise self.error(f"parameter '{name}': 'align' must be a power of two, got {align!r}")
            params.append(ParamSpec(name, p["dtype"], p["pointer"], p.get("const", False), implicit, tmap,
                                    tuple(tuple(str(e) for e in v) for v in shapes), align))
        split = sorted(p.implicit for p in params if p.implicit in STREAM_K_KINDS)
        if split and split != sorted(STREAM_K_KINDS):
            raise self.error(f"implicit parameters {split}: a kernel with a split reduction takes each of "
                             f"{list(STREAM_K_KINDS)} once")
        if split and self.doc.get("stream_k") is None:
            raise self.error("it takes partial sums but says nothing of its split reduction ('stream_k')")
        kinds = [p.implicit for p in params if p.implicit and p.implicit not in STREAM_K_KINDS]
        if kinds and sorted(kinds) == sorted(LEGACY_IMPLICIT_KINDS):
            raise self.error("it was linked by an earlier pipelink, whose event counters this launcher no longer "
                             "manages; link it again")
        if kinds and sorted(kinds) != sorted(kinds_of_version):
            raise self.error(f"implicit parameters {kinds}: a persistent kernel of manifest version {version} takes "
                             f"each of {list(kinds_of_version)} once")
        return tuple(params)

    def stream_k(self) -> StreamKSpec | None:
        raw = self.doc.get("stream_k")
        if raw is None:
            return None
        if not (isinstance(raw, dict) and set(raw) == {"blocks", "slot_floats"} and isinstance(raw["blocks"], str)
                and _is_int(raw["slot_floats"]) and raw["slot_floats"] > 32):
            raise self.error(f"'stream_k' must give 'blocks' (an expression) and 'slot_floats' (an integer), got {raw!r}")
        try:
            return StreamKSpec(raw["blocks"], raw["slot_floats"])
        except _expr.ExprError as exc:
            raise self.error(f"'stream_k.blocks': {exc}") from None

    def int_map(self, key: str) -> dict:
        raw = self.doc.get(key, {})
        if not isinstance(raw, dict) or not all(isinstance(k, str) and _is_int(v) for k, v in raw.items()):
            raise self.error(f"'{key}' must map names to integers")
        return dict(raw)

    def str_map(self, key: str) -> dict:
        raw = self.doc.get(key, {})
        if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
            raise self.error(f"'{key}' must map names to expressions")
        return dict(raw)

    def records(self, key: str) -> list[dict]:
        raw = self.doc.get(key, [])
        if not isinstance(raw, list) or not all(isinstance(x, dict) for x in raw):
            raise self.error(f"'{key}' must be a list of objects")
        return raw

    def components(self) -> tuple[ComponentRecord, ...]:
        out = []
        for i, c in enumerate(self.records("components")):
            try:
                rec = ComponentRecord(c["name"], c["version"], c["contract_hash"], c.get("object"))
            except KeyError as exc:
                raise self.error(f"components[{i}] lacks {exc}") from None
            if not all(isinstance(v, str) for v in (rec.name, rec.version, rec.contract_hash)) or not (
                    rec.object is None or isinstance(rec.object, str)):
                raise self.error(f"components[{i}]: name, version, contract_hash and object are strings")
            out.append(rec)
        return tuple(out)

    def wires(self) -> tuple[WireRecord, ...]:
        out = []
        for i, w in enumerate(self.records("wires")):
            try:
                rec = WireRecord(w["from"], w["to"], w["kind"], w["explicit"])
            except KeyError as exc:
                raise self.error(f"wires[{i}] lacks {exc}") from None
            if not all(isinstance(v, str) for v in (rec.source, rec.target, rec.kind)) or not isinstance(rec.explicit,
                                                                                                         bool):
                raise self.error(f"wires[{i}]: from, to and kind are strings, explicit a boolean")
            out.append(rec)
        return tuple(out)

    def sha256(self) -> str | None:
        value = self.doc.get("cubin_sha256")
        if value is not None and not (isinstance(value, str) and len(value) == 64
                                      and all(ch in "0123456789abcdef" for ch in value)):
            raise self.error(f"'cubin_sha256' must be 64 lowercase hex digits, got {value!r}")
        return value

    def workspace(self) -> WorkspaceSpec | None:
        raw = self.doc.get("workspace")
        if raw is None:
            return None
        if not isinstance(raw, dict):
            raise self.error("'workspace' must be an object")
        header = raw.get("header_words", WORKSPACE.header_words)
        counter = raw.get("task_counter_word", WORKSPACE.task_counter_word)
        if not (_is_int(header) and _is_int(counter) and len(WORKSPACE.report) <= counter < header):
            raise self.error(f"workspace header of {header!r} words with the task counter at word {counter!r}: the "
                             f"counter follows the {len(WORKSPACE.report)}-word report, inside the header")
        if not isinstance(raw.get("debug", False), bool):
            raise self.error("'workspace.debug' must be a boolean")
        events = []
        if not isinstance(raw.get("events", []), list):
            raise self.error("'workspace.events' must be a list")
        for i, e in enumerate(raw.get("events", [])):
            if not isinstance(e, dict) or not isinstance(e.get("name"), str) or not isinstance(e.get("shape"), list):
                raise self.error(f"workspace.events[{i}] needs a 'name' and a 'shape'")
            lists = [e.get(k, []) for k in ("notified_by", "waited_by")]
            if not all(isinstance(x, list) and all(isinstance(s, str) for s in x) for x in lists):
                raise self.error(f"workspace.events[{i}]: notified_by and waited_by are lists of strings")
            try:
                events.append(EventRecord(e["name"], tuple(str(s) for s in e["shape"]), *map(tuple, lists)))
            except _expr.ExprError as exc:
                raise self.error(f"event '{e['name']}' has a bad shape: {exc}") from None
        return WorkspaceSpec(header, counter, raw.get("debug", False), tuple(events))

    def profile_tasks(self) -> int:
        value = self.optional("profile_tasks", int, "a count of task records")
        if value is not None and value < 1:
            raise self.error(f"'profile_tasks' must be a positive count of task records, got {value!r}")
        return value or 0

    def resources(self) -> Resources | None:
        raw = self.doc.get("resources")
        if raw is None:
            return None
        if not isinstance(raw, dict) or not all(_is_int(raw.get(k)) for k in ("registers", "frame_bytes",
                                                                              "static_smem")) or not (
                raw.get("named_barriers") is None or _is_int(raw["named_barriers"])):
            raise self.error("'resources' must give registers, frame_bytes and static_smem as integers")
        return Resources(raw["registers"], raw["frame_bytes"], raw["static_smem"], raw.get("named_barriers"))


__all__ = ["IMPLICIT_KINDS", "IMPLICIT_PARAMS", "MANIFEST_VERSION", "STREAM_K_KINDS", "STREAM_K_PARAMS",
           "ComponentRecord", "EventRecord", "ImplicitParam", "Manifest", "ManifestError", "ParamSpec", "Resources",
           "StreamKSpec", "WORKSPACE", "WireRecord", "WorkspaceLayout", "WorkspaceSpec", "workspace_header"]
