"""The header a component author compiles against, generated from the component's contract.

It declares every link-time decision as an `extern "C" __device__ const` symbol that the linker's
glue defines (LTO folds each use into an immediate), wraps them in accessors, declares the entry
with the exact signature the glue calls, and defines a contract marker whose name carries the
contract hash: an object compiled against another version of the contract lacks the marker the
glue references, and the link says so instead of producing a kernel that hangs.
"""
from __future__ import annotations

import functools
import re
from importlib import resources
from pathlib import Path

from ..core.identifiers import COMPONENT_ALIAS
from ..core.model import DTYPE_BYTES, DTYPE_C, Contract, dtype_includes

MARKER_HEX = 16  # hex digits of the contract hash in the marker name


def symbol_prefix(c: Contract) -> str:
    return f"pl_{c.name}__"


def constant_symbols(c: Contract) -> dict[str, str]:
    """Every link-time constant of a component: symbol -> C type. The glue defines exactly these."""
    p = symbol_prefix(c)
    syms = {f"{p}warp_begin": "unsigned"}
    syms.update({f"{p}role_begin__{r.name}": "unsigned" for r in c.threads.roles})
    syms.update({f"{p}smem__{b.name}": "unsigned" for b in c.buffers})
    for port in c.ports:
        if port.space == "smem":
            syms[f"{p}port__{port.name}"] = "unsigned"
            syms[f"{p}port_stride__{port.name}"] = "unsigned"
    syms.update({f"{p}bar__{b.name}": "unsigned" for b in c.barriers.named})
    syms.update({f"{p}mbar__{b.name}": "unsigned" for b in c.barriers.mbarriers})
    syms.update({f"{p}geom__{g}": "int" for g in c.geometry.consumes})
    syms[f"{p}profile_mark"] = "unsigned"  # where the task's profile record is (pl::profile_mark), 0: none
    if c.in_entry_waits:  # where the running task's in-entry wait contexts are, 0: none
        syms[f"{p}waits_at"] = "unsigned"
    if c.entries:  # role-structured: instances of roles, copies of the component's own resources
        syms.update({f"{p}role_instances__{r.name}": "unsigned" for r in c.threads.roles})
        syms[f"{p}copies"] = "unsigned"
        syms.update({f"{p}smem_stride__{b.name}": "unsigned" for b in c.buffers})
        syms.update({f"{p}mbar_stride__{b.name}": "unsigned" for b in c.barriers.mbarriers})
    return syms


def self_alias(c: Contract) -> str:
    return f"namespace {COMPONENT_ALIAS} = ::pl::{c.name};"


def marker_symbol(c: Contract) -> str:
    return f"{symbol_prefix(c)}contract__{c.hash[:MARKER_HEX]}"


def pipelink_include_dir() -> Path:
    """pipelink's C headers (<pipelink/component.h>, the glue's): on every component build's and link's path."""
    return Path(str(resources.files("pipelink.include")))


@functools.cache
def component_abi() -> int:
    """PL_COMPONENT_ABI of this pipelink's <pipelink/component.h> (the header owns the number)."""
    text = (Path(str(resources.files("pipelink.include"))) / "pipelink" / "component.h").read_text()
    m = re.search(r"^#define PL_COMPONENT_ABI (\d+)$", text, re.M)
    if m is None:
        raise RuntimeError("pipelink/component.h defines no PL_COMPONENT_ABI")
    return int(m.group(1))


def abi_marker_symbol(c: Contract) -> str:
    """The symbol an object built against this pipelink's component.h defines (PL_ABI_MARKER)."""
    return f"{symbol_prefix(c)}abi__{component_abi()}"


def entry_prototype(c: Contract) -> str:
    """The prototype of the single entry (the `entry` form), or of every entry, one per line."""
    if c.entries:
        return ";\n".join(entry_point_prototype(c, e) for e in c.entries)
    params = [p.c_decl() for p in c.entry.params]
    if c.entry.invocation == "per_tile":
        params.insert(0, "pl::Tile tile")
    carried = params + ["unsigned* __restrict__ carry"]  # the prefetch's words for the entry (entry.carry)
    protos = [f'extern "C" __device__ void {s}({", ".join((carried if c.entry.carry and s != c.entry.load else params)) or "void"})'
              for s in (c.entry.symbol, c.entry.prefetch, c.entry.load) if s]
    return ";\n".join(protos)


def entry_point_prototype(c: Contract, e) -> str:
    params = ["pl::Tile tile"] if e.invocation == "per_tile" else []
    for name in e.args:
        port = c.register_port(name)  # a gmem port may share its parameter's name: that is the parameter
        if port is not None:  # a register fragment: the caller's array, which LTO keeps in registers
            params.append(f"{DTYPE_C[port.dtype]}* __restrict__ {name}")
        else:
            params.append(c.param(name).c_decl())
    return f'extern "C" __device__ void {e.symbol}({", ".join(params) or "void"})'


def _geom_c(c: Contract):
    """How a geometry name reads in the component's namespace."""
    return lambda name: name if name in c.geometry.provides else f"{name}()"


def generate_header(c: Contract) -> str:
    p = symbol_prefix(c)
    g = _geom_c(c)
    out = [
        f"// {c.name}.pipelink.h: generated by pipelink from contract '{c.name}' {c.version}.",
        f"// Contract hash {c.hash}. Do not edit; regenerate with `pipelink header` when the contract changes.",
        "#pragma once",
        "#include <pipelink/component.h>",
        *(["#include <pipelink/in_entry.h>  // its in-entry waits"] if c.in_entry_waits else []),
        *dtype_includes([q.dtype for q in c.ports] + [q.dtype for q in c.entry.params]),
        *(["#include <pipelink/fragment.h>"] if any(q.space == "reg" for q in c.ports) else []),
        "",
        "// Link-time constants. The linker's glue defines them; LTO folds every use into an immediate.",
        'extern "C" {',
    ]
    out += [f"__device__ extern const {ctype} {sym};" for sym, ctype in constant_symbols(c).items()]
    out += ["}", "", f"namespace pl {{ namespace {c.name} {{", ""]

    out.append("// Geometry: provided values are this component's own compile-time constants; consumed ones")
    out.append("// are link-time constants chosen by the linker within the contract's range.")
    out += [f"constexpr int {k} = {v};" for k, v in c.geometry.provides.items()]
    if c.entry.carry:
        out += ["", "// entry.carry: the 32-bit words the prefetch entry hands the entry (their `carry` argument).",
                f"constexpr int CARRY_WORDS = {c.entry.carry};"]
    out += [f"__device__ __forceinline__ int {k}() {{ return {p}geom__{k}; }}" for k in c.geometry.consumes]

    out += ["", "// Threads: this component's warps are a contiguous range of the fused block."]
    if c.threads.warps_expr is not None:  # warps over geometry: link-time values
        w = c.threads.warps_expr.to_c(g)
        out += [f"__device__ __forceinline__ unsigned WARPS() {{ return {w}; }}",
                f"__device__ __forceinline__ unsigned THREADS() {{ return 32u * ({w}); }}"]
    else:
        out += [f"constexpr unsigned WARPS = {c.threads.warps};", f"constexpr unsigned THREADS = {c.threads.count};"]
    warps_c = c.threads.warps_expr.to_c(g) if c.threads.warps_expr is not None else str(c.threads.warps)
    if c.entries:
        # A component whose role runs several times (instances) has one copy of its buffers and
        # barriers per instance; copy() says which one the calling warp uses (0 when one copy).
        out += ["// This warp's copy of the component's resources (the instance of its role it runs in).",
                f"__device__ __forceinline__ unsigned copy() {{ return {p}copies > 1u ? "
                f"(pl::warp_index() - {p}warp_begin) / ({warps_c}) : 0u; }}",
                f"__device__ __forceinline__ unsigned warp_begin() {{ return {p}warp_begin + copy() * ({warps_c}); }}"]
    elif c.threads.concurrent:  # several tasks a block: this warp's group of WARPS warps
        out += ["// Tasks run several to a block (threads.concurrent): the calling warp's group of WARPS warps.",
                f"__device__ __forceinline__ unsigned warp_begin() {{ return {p}warp_begin + "
                f"(pl::warp_index() - {p}warp_begin) / ({warps_c}) * ({warps_c}); }}"]
    else:
        out.append(f"__device__ __forceinline__ unsigned warp_begin() {{ return {p}warp_begin; }}")
    out += ["__device__ __forceinline__ unsigned warp_rank() { return pl::warp_index() - warp_begin(); }",
            "__device__ __forceinline__ unsigned thread_rank() { return threadIdx.x - 32u * warp_begin(); }"]
    for r in c.threads.roles:
        rw = r.warps_expr.to_c(g) if r.warps_expr is not None else str(r.warps)
        if r.warps_expr is not None:
            out.append(f"__device__ __forceinline__ unsigned {r.name.upper()}_WARPS() {{ return {rw}; }}")
        else:
            out.append(f"constexpr unsigned {r.name.upper()}_WARPS = {r.warps};")
        if c.entries:  # the calling warp's instance of the role, and that instance's first warp
            out.append(f"__device__ __forceinline__ unsigned {r.name}_instance() {{ return "
                       f"{p}role_instances__{r.name} > 1u ? (pl::warp_index() - {p}role_begin__{r.name}) / ({rw}) "
                       ": 0u; }")
            out.append(f"__device__ __forceinline__ unsigned {r.name}_warp_begin() {{ return "
                       f"{p}role_begin__{r.name} + {r.name}_instance() * ({rw}); }}")
        else:
            out.append(f"__device__ __forceinline__ unsigned {r.name}_warp_begin() {{ return {p}role_begin__{r.name}; }}")

    if c.buffers:
        out += ["", "// Shared-memory buffers, placed by the linker."]
    for b in c.buffers:
        copy = f" + copy() * {p}smem_stride__{b.name}" if c.entries else ""
        out.append(f"template <class T = unsigned char> __device__ __forceinline__ T* smem_{b.name}() "
                   f"{{ return reinterpret_cast<T*>(pl::dynamic_smem() + {p}smem__{b.name}{copy}); }}")
        out.append(f"constexpr unsigned smem_{b.name}_align = {b.align};")
        if b.bytes.names <= set(c.geometry.provides):
            out.append(f"constexpr unsigned smem_{b.name}_bytes = {b.bytes.evaluate(c.geometry.provides)};")
        else:
            out.append(f"__device__ __forceinline__ unsigned smem_{b.name}_bytes() {{ return {b.bytes.to_c(g)}; }}")

    smem_ports = [q for q in c.ports if q.space == "smem"]
    if smem_ports:
        out += ["", "// Ports in shared memory: the linker places them (a producer's and its consumer's may be the",
                "// same bytes). `stage` selects the ring slot of a multi-stage port."]
    for q in smem_ports:
        ctype = DTYPE_C[q.dtype]
        elems = " * ".join(e.to_c(g) for e in q.tile)
        out.append(f"__device__ __forceinline__ {'const ' if q.direction == 'in' else ''}{ctype}* port_{q.name}"
                   f"(int stage = 0) {{ return reinterpret_cast<{ctype}*>(pl::dynamic_smem() + {p}port__{q.name}"
                   f" + stage * {p}port_stride__{q.name}); }}")
        for axis, e in enumerate(q.tile):
            out.append(f"__device__ __forceinline__ constexpr int port_{q.name}_extent{axis}() "
                       f"{{ return {e.to_c(lambda n: n)}; }}" if e.names <= set(c.geometry.provides) else
                       f"__device__ __forceinline__ int port_{q.name}_extent{axis}() {{ return {e.to_c(g)}; }}")
        out.append(f"// port {q.name}: {q.dtype} [{', '.join(str(e) for e in q.tile)}] {q.layout}, "
                   f"{DTYPE_BYTES[q.dtype]} bytes per element, ({elems}) elements per stage")
    for q in c.ports:  # declared alignments: the linker places smem ports so, the launcher checks gmem ones
        if q.align is not None and q.space != "reg":
            out.append(f"constexpr unsigned port_{q.name}_align = {q.align};")

    reg_ports = [q for q in c.ports if q.space == "reg"]
    if reg_ports:
        out += ["", "// Register ports: fragments handed between entries of one role's threads (pipelink/fragment.h)."]
    for q in reg_ports:
        role = next(r for r in c.threads.roles if r.name == q.role)
        elems = " * ".join(f"({e.to_c(g)})" for e in q.tile)
        known = all(e.names <= set(c.geometry.provides) for e in q.tile) and role.warps_expr is None
        if known:
            n = 1
            for e in q.tile:
                n *= e.evaluate(c.geometry.provides)
            out.append(f"constexpr int port_{q.name}_elements = {n // (32 * role.warps)};  // per thread, "
                       f"layout {q.fragment}")
        else:
            threads = f"32 * ({role.warps_expr.to_c(g)})" if role.warps_expr is not None else str(32 * role.warps)
            out.append(f"__device__ __forceinline__ int port_{q.name}_elements() {{ return {elems} / ({threads}); }}"
                       f"  // per thread, layout {q.fragment}")

    if c.barriers.named or c.barriers.mbarriers:
        out += ["", "// Barriers: ids and mbarrier slots assigned by the linker."]
    for b in c.barriers.named:
        bid = f"{p}bar__{b.name} + copy()" if c.entries else f"{p}bar__{b.name}"  # copies: consecutive ids
        out.append(f"__device__ __forceinline__ unsigned bar_{b.name}() {{ return {bid}; }}")
        out.append(f"__device__ __forceinline__ void sync_{b.name}() "
                   f"{{ pl::barrier_sync(bar_{b.name}(), {b.threads.to_c(g)}); }}")
        out.append(f"__device__ __forceinline__ void arrive_{b.name}() "
                   f"{{ pl::barrier_arrive(bar_{b.name}(), {b.threads.to_c(g)}); }}")
    for b in c.barriers.mbarriers:
        copy = f" + copy() * {p}mbar_stride__{b.name}" if c.entries else ""
        out.append(f"__device__ __forceinline__ unsigned long long* mbar_{b.name}(int i = 0) "
                   f"{{ return reinterpret_cast<unsigned long long*>(pl::dynamic_smem() + {p}mbar__{b.name}{copy})"
                   " + i; }")

    in_entry = c.in_entry_waits
    if in_entry:
        out += ["", "// In-entry waits (events.waits[].in_entry): the glue does not wait for these before the entry; the",
                "// entry waits for element i (0 .. <name>_elements() - 1, along its map's axis) right before it reads",
                "// what the element guards. wait_<name>(i) returns false only in a debug build whose wait ran out (return",
                "// then); met_<name>(i) says whether it is met now; first_unmet_<name>(i0, i1, step) the first of i0, i0 +",
                "// step, ... (< i1) that is not, in one round trip (pipelink/in_entry.h). <name>_elements() is 0 where the",
                "// link waits for none (the producers ran in an earlier launch): everything is ready."]
    for w_index, w in enumerate(in_entry):
        out += [f"__device__ __forceinline__ long long {w.name}_elements() {{ return pl::in_entry::elements({p}waits_at, {w_index}); }}",
                f"__device__ __forceinline__ bool wait_{w.name}(long long i) {{ return pl::in_entry::wait({p}waits_at, {w_index}, i); }}",
                f"__device__ __forceinline__ bool met_{w.name}(long long i) {{ return pl::in_entry::met({p}waits_at, {w_index}, i); }}",
                f"__device__ __forceinline__ long long first_unmet_{w.name}(long long i0, long long i1, long long step) "
                f"{{ return pl::in_entry::first_unmet({p}waits_at, {w_index}, i0, i1, step); }}"]
    out += ["", "// Task-profile marks: in a link with a task profile, stamps point i (0 .. pl::kProfileMarks - 1: 5) of",
            "// the running task into its record (`pipelink link --profile-tasks`); elsewhere it folds away. Call it",
            "// from the component's first thread (thread_rank() 0).",
            f"__device__ __forceinline__ void profile_mark(int i) {{ pl::profile_mark({p}profile_mark, i); }}"]
    out += ["", f"}} }}  // namespace pl::{c.name}", "",
            "// The component's own namespace under a fixed name, so one source can serve several contracts.",
            self_alias(c), "",
            "// The contract marker: the linker references it, so a build against another contract fails to link.",
            "// A component of several translation units defines PL_NO_CONTRACT_MARKER in all but one.",
            "#ifndef PL_NO_CONTRACT_MARKER",
            f'extern "C" __device__ const unsigned {marker_symbol(c)} = 1u;',
            "// The component ABI it is compiled against (<pipelink/component.h>'s; PL190 when not the linker's).",
            f"PL_ABI_MARKER({symbol_prefix(c)}abi__);",
            "#endif", "",
            "// The entry, exactly as the glue calls it.",
            entry_prototype(c) + ";", ""]
    return "\n".join(out)
