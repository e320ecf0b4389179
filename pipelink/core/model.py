"""Typed contract objects, as the rest of the linker sees them.

Built by `pipelink.core.loader` only after the JSON passed the schema and the semantic checks, so
everything here can be trusted: names are unique, expressions parse, warps add up. Each object
keeps its JSON pointer so later passes can still say where a problem comes from.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from .diagnostics import Location
from .expr import Expr

if TYPE_CHECKING:  # the binary formats sit below the link: only the type is named here
    from ..formats.inputs import InputObject

# Bytes per element of each dtype.
DTYPE_BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1, "i64": 8,
               "u64": 8, "i32": 4, "u32": 4, "i16": 2, "u16": 2, "i8": 1, "u8": 1, "bool": 1}
# The C++ type of each dtype in generated code.
DTYPE_C = {"f64": "double", "f32": "float", "f16": "__half", "bf16": "__nv_bfloat16",
           "fp8_e4m3": "__nv_fp8_e4m3", "fp8_e5m2": "__nv_fp8_e5m2", "i64": "long long",
           "u64": "unsigned long long", "i32": "int", "u32": "unsigned", "i16": "short",
           "u16": "unsigned short", "i8": "signed char", "u8": "unsigned char", "bool": "bool"}
# Headers that define the C++ type of a dtype.
DTYPE_HEADER = {"f16": "cuda_fp16.h", "bf16": "cuda_bf16.h", "fp8_e4m3": "cuda_fp8.h", "fp8_e5m2": "cuda_fp8.h"}


def dtype_includes(dtypes) -> list[str]:
    return [f"#include <{h}>" for h in sorted({DTYPE_HEADER[d] for d in dtypes if d in DTYPE_HEADER})]


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_identifier(text) -> bool:
    """A C identifier, the whole string: `re.match(...$)` would also take one ending in a newline."""
    return isinstance(text, str) and _IDENTIFIER.fullmatch(text) is not None


INTEGER_DTYPES = frozenset({"i64", "u64", "i32", "u32", "i16", "u16", "i8", "u8"})


@dataclass(frozen=True)
class Source:
    """Where a contract came from: a sidecar/contract file, or a section of an object."""

    file: str
    origin: str = "file"  # "file" | "section .pipelink.contract" | "sidecar"
    object_file: str | None = None

    def at(self, pointer: str, component: str | None = None) -> Location:
        return Location(file=self.file, pointer=pointer, component=component)


SWIZZLE_BYTES = {"none": 0, "32B": 32, "64B": 64, "128B": 128}


@dataclass(frozen=True)
class TensorMapSpec:
    """A TMA descriptor parameter: the launcher encodes it from the tensor the caller passes."""

    shape: tuple[Expr, ...]   # the tensor's extents, outermost first; the last is contiguous
    box: tuple[Expr, ...]     # what one copy moves, same order
    swizzle: str              # "none" | "32B" | "64B" | "128B"
    oob_fill: str             # "zero" | "nan"


@dataclass(frozen=True)
class Param:
    name: str
    dtype: str
    pointer: bool
    const: bool
    pointer_path: str
    shape: tuple[Expr, ...] | None = None  # pointer params an index map reads: extents, row-major
    tensor_map: TensorMapSpec | None = None
    # A written pointer: the const pointer parameters a call may bind to its tensor (`may_alias`). A const pointer:
    # the written ones that name it. Either way the pointer is not __restrict__ (core/aliasing.py).
    may_alias: tuple[str, ...] = ()
    aliased_by: tuple[str, ...] = ()

    @property
    def is_shape(self) -> bool:
        """An integer scalar: usable in size expressions, known at launch."""
        return not self.pointer and self.tensor_map is None and self.dtype in INTEGER_DTYPES

    @property
    def writes(self) -> bool:
        """A pointer the entry may write through: not declared const (a tensor map is the TMA's business)."""
        return self.pointer and not self.const and self.tensor_map is None

    def c_decl(self) -> str:
        """How a component's entry receives it (a tensor map: the address of the kernel's parameter). A pointer is
        `__restrict__` unless the contract lets it share a tensor with another parameter (`may_alias`)."""
        base = DTYPE_C[self.dtype]
        if self.tensor_map is not None:
            return f"const pl::TensorMap* {self.name}"
        if self.pointer:
            restrict = "" if self.may_alias or self.aliased_by else "__restrict__ "
            return f"{'const ' if self.const else ''}{base}* {restrict}{self.name}"
        return f"{base} {self.name}"


@dataclass(frozen=True)
class Entry:
    """The parameters of a component and its first entry point (the only one in the `entry` form)."""

    symbol: str
    invocation: str
    params: tuple[Param, ...]
    prefetch: str | None = None   # persistent: called before the task's waits with the same arguments
    load: str | None = None       # persistent, static: the loader warp's entry, filling the task's ring slots
    carry: int = 0                # 32-bit words the prefetch hands the entry (their last argument, registers)


@dataclass(frozen=True)
class Loader:
    """What a task of a component with a load entry takes of the kernel's loader ring."""

    slot_bytes: int      # one slot, over provided geometry
    slots: Expr          # slots a task fills and drains, over the entry's integer parameters and geometry
    ahead: bool = False  # the load entry, called with tile.ahead, only asks L2 for the task's data
    pointer_path: str = "/loader"


ALL_THREADS = "*"  # an entry point every thread of the block runs, before the roles split


@dataclass(frozen=True)
class EntryPoint:
    """One entry of a component with `entries`: which role calls it, when, and with what."""

    name: str
    symbol: str
    role: str                 # a role name, or ALL_THREADS
    invocation: str           # "per_tile" | "per_cta"
    args: tuple[str, ...]     # parameter names and register-port names, in call order (after `tile`)
    pointer_path: str


@dataclass(frozen=True)
class CompileFlags:
    ftz: bool = False
    prec_div: bool = True
    prec_sqrt: bool = True
    fmad: bool = True

    def as_dict(self) -> dict[str, bool]:
        return {"ftz": self.ftz, "prec_div": self.prec_div, "prec_sqrt": self.prec_sqrt, "fmad": self.fmad}

    def nvcc_options(self) -> list[str]:
        b = lambda v: "true" if v else "false"  # noqa: E731
        return [f"-ftz={b(self.ftz)}", f"-prec-div={b(self.prec_div)}", f"-prec-sqrt={b(self.prec_sqrt)}",
                f"-fmad={b(self.fmad)}"]


@dataclass(frozen=True)
class Targets:
    archs: tuple[str, ...]
    flags: CompileFlags
    flags_declared: bool  # False: the contract relies on nvcc's defaults


@dataclass(frozen=True)
class Role:
    name: str
    warps: int
    warpgroup_aligned: bool
    setmaxnreg: int | None
    pointer_path: str
    warps_expr: Expr | None = None  # warps given over geometry: `warps` is its value for the defaults
    instances: int = 1              # copies of the role on consecutive warps, taking tiles round-robin


@dataclass(frozen=True)
class Threads:
    warps: int
    roles: tuple[Role, ...]
    uses_syncthreads: bool
    warps_expr: Expr | None = None  # as for Role
    concurrent: bool = False        # tasks may run several to a block, one per group of `warps` warps

    def at(self, geometry: dict[str, int]) -> "Threads":
        """The warp counts for the link's geometry (where they are expressions over it)."""
        if self.warps_expr is None and all(r.warps_expr is None for r in self.roles):
            return self
        value = lambda e, default: e.evaluate(geometry) if e is not None else default  # noqa: E731
        roles = tuple(replace(r, warps=value(r.warps_expr, r.warps)) for r in self.roles)
        return replace(self, warps=value(self.warps_expr, self.warps), roles=roles)

    @property
    def count(self) -> int:
        return self.warps * 32


@dataclass(frozen=True)
class Buffer:
    name: str
    bytes: Expr
    align: int
    lifetime: str  # "persistent" | "scratch"
    phase: str | None
    pointer_path: str


@dataclass(frozen=True)
class NamedBarrier:
    name: str
    threads: Expr
    pointer_path: str


@dataclass(frozen=True)
class MBarrier:
    name: str
    arrivals: Expr
    count: int
    pointer_path: str


@dataclass(frozen=True)
class Barriers:
    named: tuple[NamedBarrier, ...] = ()
    mbarriers: tuple[MBarrier, ...] = ()
    hardcoded_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class Port:
    name: str
    direction: str  # "in" | "out"
    space: str      # "smem" | "gmem"
    dtype: str
    tile: tuple[Expr, ...]
    layout: str
    swizzle: str
    stages: Expr
    param: str | None
    pointer_path: str
    fragment: str | None = None  # reg ports: the named register layout (pipelink/include/pipelink/fragment.h)
    role: str | None = None      # reg ports: the role whose threads hold it
    align: int | None = None     # declared alignment in bytes (smem: placed so; gmem: the launcher checks)


@dataclass(frozen=True)
class ParamRange:
    min: int | None = None
    max: int | None = None
    multiple_of: int | None = None
    one_of: tuple[int, ...] | None = None
    default: int | None = None

    def admits(self, value: int) -> bool:
        # no min: a positive integer, as describe() says (a pipeline's -1024 had sized a buffer at -4096 B)
        return (value >= (self.min if self.min is not None else 1) and (self.max is None or value <= self.max)
                and (self.multiple_of is None or value % self.multiple_of == 0)
                and (self.one_of is None or value in self.one_of))

    def describe(self) -> str:
        parts = []
        if self.one_of is not None:
            parts.append("one of " + ", ".join(map(str, self.one_of)))
        if self.min is not None or self.max is not None:
            parts.append(f"in [{self.min if self.min is not None else 1}, "
                         f"{self.max if self.max is not None else 'inf'}]")
        if self.multiple_of is not None:
            parts.append(f"a multiple of {self.multiple_of}")
        return " and ".join(parts) or "any positive integer"


@dataclass(frozen=True)
class Reduction:
    """A tile's value is a sum over `blocks` reduction blocks (a GEMM's k-blocks) left in register
    port `port`: the per-tile entries take the block range from `pl::Tile`, so the linker may split a
    tile's blocks over CTAs (stream-K) and add the partial fragments before the consumers run."""

    blocks: Expr
    port: str
    pointer_path: str


@dataclass(frozen=True)
class TileSequence:
    grid: tuple[Expr, ...]
    order: str
    distribution: str
    pointer_path: str
    group: int = 1   # order "grouped": bands of this many tiles along the first dimension
    reduction: Reduction | None = None


@dataclass(frozen=True)
class Geometry:
    provides: dict[str, int] = field(default_factory=dict)
    consumes: dict[str, ParamRange] = field(default_factory=dict)
    tile_sequence: TileSequence | None = None


@dataclass(frozen=True)
class EventNotify:
    name: str
    map: str
    shape: tuple[Expr, ...] | None
    pointer_path: str
    rank: Expr | None = None  # the rank whose copy of the element a task notifies (None: its own)


@dataclass(frozen=True)
class EventWait:
    name: str
    map: str
    count: Expr | None  # None: "auto" (derived from the producers) or read from a tensor
    pointer_path: str
    count_term: object = None  # indexmap.Term of kind "gather": a count read from a device tensor
    in_entry: bool = False  # the entry waits for each element itself, where it reads what it guards


@dataclass(frozen=True)
class Events:
    notifies: tuple[EventNotify, ...] = ()
    waits: tuple[EventWait, ...] = ()


@dataclass(frozen=True)
class Contract:
    name: str
    version: str
    owner: str | None
    description: str | None
    entry: Entry
    targets: Targets
    threads: Threads
    max_registers: int | None
    buffers: tuple[Buffer, ...]
    barriers: Barriers
    ports: tuple[Port, ...]
    geometry: Geometry
    events: Events
    source: Source
    raw: dict = field(repr=False, compare=False, default_factory=dict)
    entries: tuple[EntryPoint, ...] = ()   # the `entries` form; empty for a single `entry`
    cluster: tuple[int, ...] | None = None
    loader: Loader | None = None

    @property
    def symbols(self) -> tuple[str, ...]:
        """Every entry symbol the object must define."""
        return tuple(symbol for symbol, _ in self.symbol_pointers())

    def symbol_pointers(self) -> tuple[tuple[str, str], ...]:
        """(symbol, JSON pointer of the contract field naming it) for every entry symbol the object must define."""
        if self.entries:
            return tuple((e.symbol, f"/entries/{i}/symbol") for i, e in enumerate(self.entries))
        return ((self.entry.symbol, "/entry/symbol"),) + tuple(
            (s, f"/entry/{field}") for field, s in (("prefetch", self.entry.prefetch), ("load", self.entry.load)) if s)

    @property
    def entry_pointer(self) -> str:
        """The JSON pointer of the contract's entry points: `/entry`, or `/entries` in the entries form."""
        return "/entries" if self.entries else "/entry"

    def symbol_pointer(self, symbol: str) -> str:
        """The JSON pointer of the field naming entry symbol `symbol` (the entry points' where none does)."""
        return next((ptr for s, ptr in self.symbol_pointers() if s == symbol), self.entry_pointer)

    def param(self, name: str) -> Param | None:
        return next((p for p in self.entry.params if p.name == name), None)

    @property
    def hash(self) -> str:
        """Content hash of what the code depends on (everything but prose), hex."""
        return contract_hash(self.raw)

    def at(self, pointer: str) -> Location:
        return self.source.at(pointer, self.name)

    @property
    def in_entry_waits(self) -> tuple[EventWait, ...]:
        """The waits the entry makes itself (`in_entry`), in contract order: the header's wait_<name> index them."""
        return tuple(w for w in self.events.waits if w.in_entry)

    def shape_params(self) -> dict[str, Param]:
        return {p.name: p for p in self.entry.params if p.is_shape}

    def geometry_env(self) -> dict[str, int]:
        """Geometry values this contract knows alone: what it provides, and consumed defaults."""
        env = dict(self.geometry.provides)
        for name, rng in self.geometry.consumes.items():
            if rng.default is not None:
                env[name] = rng.default
        return env

    def port(self, name: str) -> Port | None:
        return next((p for p in self.ports if p.name == name), None)

    def register_port(self, name: str) -> Port | None:
        """The register port an entry argument `name` names, or None: a parameter (a gmem port may share its name)."""
        port = self.port(name)
        return port if port is not None and port.space == "reg" else None


@dataclass
class Component:
    """A contract with the object that ships it: what the passes after `read` work on."""

    contract: Contract
    obj: InputObject | None  # None: a bare contract, checked without its code
    # A call of a pipeline's `calls` is the component's contract renamed (its name, bound parameter and
    # event names); `base` is the contract the object was compiled against, which owns the symbols.
    base: Contract | None = None

    @property
    def name(self) -> str:
        return self.contract.name

    @property
    def code(self) -> Contract:
        """The contract the object was built against: its entry symbol, constants and marker."""
        return self.base or self.contract


_PROSE_KEYS = {"description", "owner", "$schema"}
_NAME_MAPS = {"provides", "consumes"}  # their keys are geometry names, not fields


def _strip_prose(value, keys_are_names: bool = False):
    if isinstance(value, dict):
        return {k: _strip_prose(v, k in _NAME_MAPS and not keys_are_names) for k, v in value.items()
                if keys_are_names or k not in _PROSE_KEYS}
    if isinstance(value, list):
        return [_strip_prose(v) for v in value]
    return value


def contract_hash(raw: dict) -> str:
    canonical = json.dumps(_strip_prose(raw), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()
