"""Located diagnostics with stable codes.

Every problem pipelink reports is a `Diagnostic`: a stable code (``PL0xx``), a message, where it is
(file, JSON pointer into a contract, component) and a hint. Passes collect diagnostics into a
`DiagnosticSink` and stop at the pass boundary, so a user sees every problem of a pass at once.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    LINK = 1  # a contract or link problem
    USAGE = 2  # bad usage or unreadable input


@dataclass(frozen=True)
class Code:
    code: str
    title: str
    exit: ExitCode
    hint: str
    warning: str = ""  # when the code is reported as a warning (exit 0) instead, for the docs
    note: bool = False  # always a note (exit 0): what a command did, where that may not be what was meant


def _codes(*items: Code) -> dict[str, Code]:
    return {c.code: c for c in items}


U, L = ExitCode.USAGE, ExitCode.LINK

# The registry. Codes are stable: never renumber, only add. docs/diagnostics.md lists them.
CODES = _codes(
    # usage and unreadable input (exit 2)
    Code("PL001", "bad usage", U, "run `pipelink --help`"),
    Code("PL002", "cannot read file", U, "check the path and its permissions"),
    Code("PL003", "empty file", U, "the file has no bytes; rebuild it"),
    Code("PL004", "unrecognized input format", U,
         "pass a host object from `nvcc -dc -dlto`, an archive of them, a fatbin, LTO-IR, or a contract (.json)"),
    Code("PL005", "truncated or corrupt object", U, "the file ends early or its headers are inconsistent; rebuild it"),
    Code("PL006", "not valid JSON", U, "fix the JSON syntax at the location shown"),
    Code("PL007", "cannot write output", U, "check that the output directory exists and is writable"),
    Code("PL008", "toolchain unavailable", U, "where PIPELINK_CUDA_HOME is set, point it at a CUDA 13.0 toolkit or "
         "unset it; otherwise reinstall pipelink so that its pinned CUDA 13.0 wheels are present"),
    Code("PL009", "bad kernel manifest", U,
         "the manifest next to a cubin is the K.json `pipelink link -o K.cubin` writes; link again to get both",
         warning="a warning where the K.json beside a cubin is another of pipelink's documents (inspect shows the "
                 "cubin alone)"),
    # inputs (exit 1)
    Code("PL010", "no device code", L, "compile with `nvcc -dc -dlto -arch=sm_90` (the object holds host code only)"),
    Code("PL011", "no LTO-IR", L, "compile with `-dlto` (or `-gencode arch=compute_90,code=lto_90`): pipelink links LTO-IR"),
    Code("PL012", "no LTO-IR for the target arch", L, "rebuild for the target, e.g. `-arch=sm_90`"),
    Code("PL013", "no contract", L,
         "embed one (`pipelink build`, or objcopy --add-section .pipelink.contract=c.json) or put a sidecar "
         "`<object>.contract.json` next to the object"),
    Code("PL014", "entry symbol not defined by the object", L,
         "every entry the contract names (entry.symbol, entry.load, entry.prefetch, entries[].symbol) must be an "
         "`extern \"C\" __device__` function defined in the object"),
    Code("PL015", "LTO-IR rejected by nvJitLink", L,
         "rebuild with the CUDA 13.0 toolchain pipelink pins (LTO-IR must not be newer than nvJitLink)"),
    Code("PL016", "object compiled differently from its contract", L,
         "rebuild the object with the flags its contract declares, or correct the contract"),
    Code("PL017", "two contracts embedded", L, "an object carries one contract; remove the extra section or sidecar"),
    Code("PL018", "debug device code", L, "drop -G/-g from device compilation: it disables inlining across components"),
    Code("PL019", "component does not compile", L, "fix the compiler errors shown; the contract's header is "
         "regenerated on every build"),
    # one contract (exit 1)
    Code("PL020", "schema violation", L, "see docs/contract.md for the field"),
    Code("PL021", "unsupported contract version", L, "this pipelink reads contract format 1"),
    Code("PL022", "duplicate name", L, "names must be unique within their list"),
    Code("PL023", "warps do not add up", L, "threads.warps must equal the sum of the roles' warps"),
    Code("PL024", "warpgroup alignment", L,
         "a warpgroup-aligned role (or one using setmaxnreg) needs a multiple of 4 warps"),
    Code("PL025", "invalid setmaxnreg", L,
         "setmaxnreg takes 24..256 in steps of 8 and needs a target that has it (sm_90a, sm_100a): one the contract "
         "lists, and the one checked, linked or built for (--arch sm_90a)"),
    Code("PL026", "barrier id out of range", L, "named barrier ids are 1..15 (0 is __syncthreads)"),
    Code("PL027", "bad barrier thread count", L, "a named barrier's thread count is a positive multiple of 32, "
         "at most the component's threads"),
    Code("PL028", "bad expression", L, "expressions use integers, geometry parameters, runtime scalar parameters, "
         "+ - * // % and min/max/ceil_div"),
    Code("PL029", "unknown name", L, "declare the name where the expression or reference can see it"),
    Code("PL030", "bad geometry range", L, "min <= max, and a parameter is either provided or consumed, not both"),
    Code("PL031", "bad index map", L, "maps look like `ij->ij`, `ij->i`, `i->topk[i,:]`, `i->range(indptr[i], indptr[i+1])`"),
    Code("PL032", "bad size", L, "sizes and alignments must be positive; alignments a power of two"),
    Code("PL033", "registers over the limit", L, "at most 255 registers per thread and 64K per SM for the block"),
    Code("PL034", "arch not supported", L, "known targets: see `pipelink check --help`"),
    Code("PL035", "manifest does not describe this cubin", L,
         "its cubin_sha256 belongs to another link: use the K.json written with this cubin, or link again",
         warning="a warning from `pipelink inspect`, which shows the cubin alone; an error from `pipelink.load`, "
         "and `Kernel.load` refuses such a manifest with a ValueError"),
    # a set of contracts (exit 1)
    Code("PL040", "compile flags disagree", L,
         "build every component with the same -ftz/-prec-div/-prec-sqrt/-fmad: LTO cannot inline across them"),
    Code("PL041", "no common target arch", L, "build every component for one shared target, e.g. sm_90"),
    Code("PL042", "shared memory over the device limit", L,
         "shrink buffers, mark phase-local buffers as scratch so they can share bytes, or lower the stage count"),
    Code("PL043", "threads over the device limit", L, "the components together need more than 1024 threads"),
    Code("PL044", "named barriers over the device limit", L, "at most 15 named barriers are free (id 0 is __syncthreads)"),
    Code("PL045", "hard-coded barrier id clash", L,
         "two components hard-code the same barrier id; let the linker assign ids (barriers.named)"),
    Code("PL046", "registers over the device limit", L, "lower registers.max_per_thread or the warp counts"),
    Code("PL047", "duplicate component name", L, "each component in a link needs a distinct name"),
    Code("PL048", "duplicate entry symbol", L, "two components define the same entry symbol"),
    Code("PL049", "object compiled against another contract", L,
         "the object is stale: rebuild it (`pipelink build`) against the contract it ships with"),
    Code("PL050", "geometry provided twice with different values", L,
         "a geometry name means one value in the whole link: one component provides it, the others consume it; "
         "a value only one component uses (its own tile rows, say) needs a name of its own"),
    Code("PL051", "geometry outside a consumer's range", L,
         "change the provider's value or widen the consumer's accepted range (and rebuild it)"),
    Code("PL052", "no value for consumed geometry", L,
         "a component in the link must provide it, or the consumer's contract must give a default"),
    # the link (exit 1)
    Code("PL060", "unconnected input port", L, "wire it: --wire producer.port=consumer.port"),
    Code("PL061", "ambiguous wire", L, "several output ports match; wire it explicitly"),
    Code("PL062", "unknown port in a wire", L, "wires name component.port as the contracts spell them"),
    Code("PL063", "dtype differs on a wire", L, "the producer and the consumer must agree on the element type"),
    Code("PL064", "tile shape differs on a wire", L,
         "make the consumer consume the producer's geometry (geometry.consumes) instead of assuming a value"),
    Code("PL065", "layout cannot be converted on this wire", L,
         "a re-layout copy needs a block-wide step: use the sequential schedule, or agree on one layout"),
    Code("PL066", "stage counts differ on a wire", L, "consume the producer's stage count (geometry.consumes)"),
    Code("PL067", "tile sequences differ", L,
         "every component of one kernel must walk the same tiles in the same order over the same CTAs"),
    Code("PL068", "cycle in the pipeline", L, "ports must form a directed acyclic graph"),
    Code("PL069", "parameters clash", L, "components share a kernel parameter by its name: where both mean one "
         "buffer or value, declare it alike (dtype, pointer, const); where they mean two, rename one"),
    Code("PL070", "warp layout impossible", L, "warpgroup-aligned roles need a start warp divisible by 4"),
    Code("PL071", "__syncthreads beside warps that never meet it", L,
         "a component that calls __syncthreads waits for every warp of the block: it cannot run beside other "
         "components' warps (warp-specialized) or a loader warp; synchronize its warps with a named barrier"),
    Code("PL072", "no tile sequence", L, "at least one component must declare geometry.tile_sequence"),
    Code("PL073", "linked kernel exceeds a limit", L, "the linked cubin uses more than the contracts or the device allow",
         warning="an error when the kernel uses more registers than the contracts allow, more registers or shared "
         "memory than the device has, or the cubin cannot be read; a warning when it spills or uses a stack, "
         "declares static __shared__ memory outside the arena, uses more named barriers than were assigned, or "
         "still calls a component that was not inlined"),
    Code("PL074", "link failed", L, "see the nvJitLink log"),
    Code("PL075", "glue does not compile", L, "a bug in pipelink's generated glue: report it with the log"),
    Code("PL077", "kernel name clashes with a symbol", L, "name the pipeline (kernel) differently"),
    Code("PL078", "not supported by this version of the linker", L, "see docs/architecture.md for what the link does"),
    Code("PL080", "events form a cycle", L, "a task cannot wait, directly or not, for its own notification"),
    Code("PL081", "event without a notifier or a shape", L,
         "every waited event needs a component that notifies it (or, where an earlier launch notifies it, a "
         "standalone link); give the shape where the map cannot derive it"),
    Code("PL082", "event rank differs", L, "notifiers and waiters must index the event with the same rank"),
    Code("PL083", "wait count differs from the notifications", L,
         "make the waiter's count equal what its producers send, or let it be derived (count: auto)"),
    Code("PL084", "event index out of range", L, "the map sends a task outside the event tensor; fix the map or the shape"),
    Code("PL086", "event map reads a tensor before it is written", L,
         "a map or count that reads a tensor another component writes in the same launch must come after a wait "
         "on an event that component (or one after it) notifies; waits run in contract order"),
    Code("PL085", "shared-memory wire in a persistent kernel", L,
         "pass the data through global memory (a gmem port) and order the tasks with an event"),
    Code("PL076", "no source for the one-unit control", L,
         "build components with `pipelink build` (it embeds the source) to use --emit-monolithic"),
    Code("PL160", "one-unit control does not build", L,
         "the control is nvcc's build of the components' sources and the glue as one unit: read nvcc's log"),
    Code("PL165", "dependent launch needs sm_90", L,
         "programmatic dependent launch (griddepcontrol) exists from sm_90: link for sm_90 or later, or drop it"),
    # role-structured (Hopper) components
    Code("PL100", "register pool does not fit", L,
         "warps x registers of every role must fit the SM's 65536 at one block per SM; lower a setmaxnreg"),
    Code("PL101", "entry and role do not match", L,
         "each entry runs on a declared role (or '*', per CTA) and takes parameters or register ports of that role"),
    Code("PL102", "register fragment mismatch", L,
         "producer and consumer of a register port must name the same fragment layout, dtype and tile"),
    Code("PL103", "fragment crosses warps", L,
         "a role that reads a register fragment runs on the warps holding it: give it as many warps"),
    Code("PL104", "component cap above its role's registers", L,
         "a component's registers.max_per_thread must fit the registers its role runs with"),
    Code("PL105", "tensor map the TMA cannot use", L,
         "boxes: at most 256 per extent, the contiguous extent a multiple of 16 bytes and within the swizzle"),
    Code("PL106", "malformed register port", L,
         "a reg port needs fragment, role and tile, and no param or stages; it needs the `entries` form"),
    Code("PL107", "cluster shapes disagree", L, "every component of a kernel must assume the same cluster shape"),
    Code("PL108", "arch-specific component with family IR", L,
         "build sm_90a components with -gencode arch=compute_90a,code=lto_90a only (pipelink build does)"),
    Code("PL109", "split reduction the linker cannot carry", L,
         "a tile_sequence.reduction names an out register port (f32) of a role-structured component; one per kernel"),
    # where a command writes (exit 2)
    Code("PL120", "output would overwrite an input", U,
         "write the output elsewhere: each output has its own option (-o, --manifest, --map, ...)"),
    Code("PL121", "two outputs name one file", U, "give each output its own path"),
    Code("PL122", "more than one output to stdout", U,
         "`-` (stdout) takes one output; write the others to files (`--format json` puts its report on stdout)"),
    Code("PL123", "binary output to a terminal", U, "redirect stdout to a file or a pipe, or name a file"),
    # reading JSON and pipeline files (exit 2); PL006 is JSON that does not parse
    Code("PL130", "JSON document too large", U, "pipelink reads JSON documents of at most 2 MiB (contracts, pipeline files and manifests are kilobytes)"),
    Code("PL131", "JSON nests too deeply", U, "pipelink reads arrays and objects nested at most 64 deep"),
    Code("PL132", "number out of range", U,
         "integers must fit in 64 bits (-2^63 .. 2^64-1) and other numbers in a double"),
    Code("PL133", "pipeline file schema violation", U, "see docs/pipeline.md for the field"),
    # a component's code against its own contract (`pipelink check`'s probe; exit 1)
    Code("PL140", "component declares its own shared memory", L,
         "declare the bytes as an smem buffer (smem.buffers) and use the header's smem_<name>(): the linker "
         "places every byte of shared memory"),
    Code("PL141", "component uses more registers than its contract allows", L,
         "raise registers.max_per_thread, or lower the code's register pressure",
         "always a warning: a link caps the registers, so the code spills rather than fails"),
    Code("PL142", "component uses an undeclared named-barrier id", L,
         "declare the id in barriers.hardcoded_ids, or use a named barrier (barriers.named) and the header's "
         "sync_<name>()", "a warning when the id is computed at run time, which nothing can check"),
    Code("PL143", "__syncthreads without threads.uses_syncthreads", L,
         "set threads.uses_syncthreads, or synchronize the component's own warps with a named barrier"),
    Code("PL144", "component uses local memory", L,
         "local arrays indexed at run time and spills live in slow local memory; keep them in registers or smem",
         "always a warning"),
    Code("PL145", "component calls a function LTO did not inline", L,
         "drop __noinline__ (and -G), or build the callee with LTO-IR", "always a warning"),
    # the contract language's later forms: chains, nested grids, port alignment, buffer sizes (exit 1)
    Code("PL170", "chain waits on a task not claimed before it", L,
         "a task may wait on its own component's notifications only from tasks earlier in its walk; clamp the "
         "map at the edges (`i->range(max(i - 1, 0), i)`)"),
    Code("PL171", "chain through device data", L,
         "a component waiting on its own notifications must name them by an affine map, which the link can order"),
    Code("PL172", "shared-memory wire out of a nested tile loop", L,
         "a coarser component sees only the last tile of a finer one's loop: pass the data through global memory"),
    Code("PL173", "bad port alignment", L,
         "a port's align is a power of two, 16..1024 in shared memory, at least the element size in global memory; "
         "register ports have none"),
    Code("PL174", "buffer size declared wrongly", L,
         "`shape` gives a pointer parameter's extents, row-major, over geometry and runtime scalar parameters"),
    # calls: a component called several times, with bound parameters, in a layer loop (exit 1)
    Code("PL175", "call binds what its component does not have", L,
         "`bind` and `stacked` name the component's parameters, `events` its events; a stacked parameter is a "
         "pointer with a declared shape, stacked by every call that passes the kernel tensor"),
    Code("PL176", "calls out of order", L,
         "a call waits (`after`) only on calls before it, in the same layer or before the layer loop; per-layer "
         "calls are consecutive and the pipeline says `layers`; `after_previous_layer` names per-layer calls"),
    Code("PL177", "prefetch entry misused", L,
         "a prefetch entry belongs to a per_tile `entry`, in persistent or sequential schedules: it starts loading "
         "what no task of the launch writes (weights) before the task waits"),
    Code("PL178", "calls or components race on a tensor", L,
         "two calls or components of a persistent kernel touching one kernel tensor, one writing it, must be ordered "
         "by events (`after`, `after_previous_layer`, or the components' own): else their tasks run at once"),
    Code("PL179", "task profile outside a persistent kernel", L,
         "profile_tasks records a persistent kernel's tasks: profile a persistent pipeline, or time the kernel whole"),
    Code("PL180", "pipeline geometry not consumed or already provided", L,
         "a pipeline's `geometry` (`--geometry`) sets names its components consume and none of them provides"),
    Code("PL181", "concurrent tasks with block-wide resources", L,
         "threads.concurrent runs several of the component's tasks in one block at once, one per group of its "
         "warps: it cannot call __syncthreads, nor keep shared memory, barriers or ports, nor have roles"),
    Code("PL182", "distributed link without NVSHMEM", L,
         "contracts that use RANK or WORLD, or notify another rank's copy of an event (`rank`), link against "
         "NVSHMEM's headers and device library: the pinned nvidia-nvshmem-cu13 wheel must be installed"),
    Code("PL183", "a streaming loop is longer in the kernel than alone", L,
         "lower what the other components keep live across their code (loads held in registers: stage them in "
         "shared memory; per-thread values: derive them at use), or what this loop keeps (narrower offsets "
         "instead of pointers); where the kernel's register budget is below what the component used alone, a "
         "component's registers.max_per_thread sets it", warning="always a warning (`pipelink link --loops`)"),
    Code("PL184", "counts_per_cta outside a static persistent schedule", L,
         "counting a call's tasks once per CTA needs each CTA's fixed task order: a persistent schedule with "
         "static dispatch"),
    Code("PL185", "load entry or loader section malformed", L,
         "`entry.load` and `loader` come together, on a single per_tile `entry` (not the `entries` form); the load "
         "entry is its own function; `loader.slot_bytes` is a positive multiple of 16 over provided geometry, "
         "`loader.slots` an expression over the entry's integer parameters and geometry"),
    Code("PL186", "load entry outside a static persistent schedule", L,
         "a loader warp walks each CTA's tasks in their fixed order ahead of their waits: link the component in a "
         "persistent schedule with static dispatch (a load entry alone infers it), with as many warps as the "
         "block's other task-running components"),
    Code("PL187", "deal outside a static persistent schedule", L,
         "deal orders a static walk's tasks over the CTAs: use a persistent schedule with \"dispatch\": \"static\", or drop deal"),
    Code("PL188", "a name the generated code cannot take", L,
         "rename it in its contract (a kernel parameter may also be bound to another name in a calls pipeline): a "
         "C++ keyword, or a name C++ reserves (a double underscore, `_` and a capital) or the toolkit's headers "
         "declare, does not compile or collides, and so does a component named as a member of pipelink's namespace "
         "pl (Tile, warp_index, ring); a parameter named as one of the glue's own names (its locals: t, "
         "tile, rest, ...; every name beginning pl_) or as an entry symbol would reach the components with the "
         "glue's value or hide the function (docs/contract.md, names)"),
    Code("PL189", "load_ahead with no component that loads ahead", L,
         "load_ahead has the loader ask L2 for later tasks' data through the load entries whose contract says "
         "`loader.ahead`: add it to a component whose load entry honours tile.ahead, or drop load_ahead",
         warning="always a warning (the link is the one without load_ahead)"),
    Code("PL190", "object built against another component ABI", L,
         "rebuild the object with this pipelink (`pipelink build`, or regenerate its header with `pipelink header` "
         "and recompile): the glue's pl::Tile and the object's differ, so its entry is not inlined",
         warning="always a warning (the link is correct, and slower)"),
    Code("PL191", "task profile of more components than its record names", L,
         "a task-profile record names its component in 7 bits (the eighth marks the loader's records): profile a "
         "kernel of at most 128 components (calls), or time it whole"),
    Code("PL192", "input port wired from two producers", L,
         "an input port reads one producer's tile: keep one of the wires (an output may feed several inputs, an "
         "input takes one output)"),
    Code("PL193", "pipeline setting with no effect on this kernel", L,
         "drop the setting (file field or option), or link what it applies to",
         warning="always a warning (the link is the one without it)"),
    Code("PL194", "specialized value leaves tasks that never run", L,
         "a value baked in with specialize gives a component (or the kernel) no tiles at any launch: specialize the "
         "value the kernel is launched with",
         warning="always a warning (the link is correct; the tasks are empty)"),
    Code("PL198", "source includes another copy of its generated header", L,
         "delete the copy (or rename it): the build generates <name>.pipelink.h from the contract on every build, and "
         "a file of that name beside the source or on an -I folder is found first by #include \"...\""),
    Code("PL199", "arch-specific target linked from its family's LTO-IR", L,
         "build the object for the arch-specific target too (`pipelink build` without --arch builds every target "
         "its contract lists), so that the link takes the code its source keeps for that target", note=True),
    Code("PL200", "call binds one tensor to a written parameter and another", L,
         "bind another tensor to one of the two; if the component is written to update the tensor in place (it reads "
         "each element of the read-only parameter before it writes it), its contract says so: \"may_alias\": "
         "[\"<const parameter>\"] on the written parameter. Two written parameters never share a tensor"),
    Code("PL201", "bad may_alias declaration", L,
         "a written pointer parameter's may_alias names const pointer parameters of the same entry, of its dtype"),
    Code("PL202", "clustered tiles not whole clusters", L,
         "pad the tile grid of a component that declares a cluster to whole clusters, e.g. "
         "`ceil_div(ceil_div(M, BM), 2) * 2` for a cluster of 2, and handle the tiles past the data (loads filled "
         "past the edges, as the TMA's out-of-bounds fill does; stores predicated), as CUTLASS does: the CTAs of a "
         "cluster then walk the same number of tiles"),
    Code("PL203", "walk that cannot keep a cluster's CTAs in step", L,
         "a component that declares a cluster needs every CTA of it to walk its tasks in step: a grid-stride tile "
         "walk, or a persistent schedule with static dispatch, and no wait on its own tasks"),
    Code("PL204", "target without a feature the contract declares", L,
         "a cluster or a tensor-map parameter needs sm_90 or later: check, link and build for such a target (--arch)"),
    Code("PL205", "mbarriers for a target before sm_90", L,
         "the glue sets up mbarriers (a warp-specialized ring, a component's declared mbarriers, a role's instances, "
         "the loader ring) with fence.mbarrier_init and waits with mbarrier.try_wait, both sm_90 and later: check, "
         "link and build for such a target (--arch)"),
    Code("PL206", "cluster barrier with threads that do not run the component", L,
         "barrier.cluster waits for every thread of the cluster that has not exited: meet the cluster's other CTAs "
         "through mbarriers in shared or distributed shared memory with the component's own arrival count, or link "
         "the component where every warp of the block runs its code (no loader warp, no wider or concurrent "
         "component, no other role group)"),
    Code("PL207", "in-entry wait the entry cannot make", L,
         "an in-entry wait (`in_entry`) names its elements along one axis (`i->:`, `i->i, :`, `i->range(i, i + 4)`), "
         "counts to a number known before the task runs, belongs to a single-entry component that runs one task a "
         "block, and waits on another component's notifications on this rank; otherwise let the glue wait before "
         "the entry (drop in_entry)"),
    # the runtime: raised by a loaded kernel (pipelink.load, Kernel.launch), as PipelinkRunError subclasses
    Code("PL195", "kernel argument does not fit its parameter", U,
         "pass what the kernel's manifest (K.json, `pipelink inspect K.cubin`) declares for the parameter: its "
         "dtype, at least its elements, on the kernel's device, aligned as declared"),
    Code("PL196", "CUDA driver or NVSHMEM call failed", L,
         "the message names the call and the driver's words; a launch that faulted leaves the CUDA context unusable "
         "(run it under compute-sanitizer to find the access)"),
    Code("PL197", "event wait spun past its bound", L,
         "a debug build (debug_events) stopped a wait that would have hung: the producers notify too few times for "
         "this input (its contract's notifies and the waiters' counts disagree)"),
)


# Diagnostics echo what users and files say: a name, a path, a wire. Rendered, such text must not
# drive the terminal (ESC, BEL, NUL, bidirectional overrides) nor flood it (a 10 MB string).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_CONTROL_OR_BREAK = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_LONG_RUN = re.compile(r"[^\s'\"]{257,}")  # a value without spaces or quotes, such as a name or a path
_LONG_LINE = re.compile(r"[^\n]{4097,}")
SHOWN = 60  # characters a shortened value keeps


def _escape(ch: str) -> str:
    code = ord(ch)
    return _NAMED_ESCAPES.get(ch) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def _shorten(m: re.Match) -> str:
    return f"{m.group()[:SHOWN]}... ({len(m.group())} characters)"


def escape_controls(text: str, lines: bool = False) -> str:
    """Control characters as visible escapes (`\\x1b`); with `lines`, line breaks and tabs stay."""
    return (_CONTROL if lines else _CONTROL_OR_BREAK).sub(lambda m: _escape(m.group()), text)


def safe_text(text: str, lines: bool = False) -> str:
    """Untrusted text as a diagnostic shows it: every value longer than 256 characters cut to its first
    60 and its length, every line to 4096, then control characters escaped."""
    text = _LONG_LINE.sub(_shorten, _LONG_RUN.sub(_shorten, text))
    return escape_controls(text, lines)


def _safe(value: str | None, lines: bool = False) -> str | None:
    return None if value is None else safe_text(str(value), lines)


@dataclass(frozen=True)
class Location:
    """Where a problem is. Every field is optional; the more the better."""

    file: str | None = None
    pointer: str | None = None  # JSON pointer into the contract, e.g. /smem/buffers/1/bytes
    component: str | None = None
    line: int | None = None
    column: int | None = None
    option: str | None = None   # the command-line option that gave the value, e.g. --profile-tasks

    def render(self) -> str:
        parts = []
        if self.file:
            where = _safe(self.file)
            if self.line is not None:
                where += f":{self.line}" + (f":{self.column}" if self.column is not None else "")
            parts.append(where)
        if self.pointer is not None:
            parts.append(f"at {_safe(self.pointer) or '/'}")
        if self.component:
            parts.append(f"component '{_safe(self.component)}'")
        if self.option:
            parts.append(f"option {_safe(self.option)}")
        return ", ".join(parts)

    def to_json(self) -> dict:
        return {k: _safe(v) if isinstance(v, str) else v for k, v in self.__dict__.items() if v is not None}

    @classmethod
    def from_json(cls, doc: dict) -> "Location":
        return cls(**doc)


@dataclass(frozen=True)
class Diagnostic:
    code: str
    message: str
    location: Location = field(default_factory=Location)
    hint: str | None = None  # None: the code's default hint
    severity: str = "error"  # "error" | "warning" | "note"
    related: tuple[Location, ...] = ()  # the other side of a clash

    def __post_init__(self):
        if self.code not in CODES:
            raise ValueError(f"unregistered diagnostic code {self.code}")

    @property
    def exit_code(self) -> ExitCode:
        return CODES[self.code].exit if self.severity == "error" else ExitCode.OK

    @property
    def effective_hint(self) -> str:
        return self.hint if self.hint is not None else CODES[self.code].hint

    def render(self) -> str:
        lines = [f"{self.severity}[{self.code}]: {_safe(self.message, lines=True)}"]
        where = self.location.render()
        if where:
            lines.append(f"  --> {where}")
        for rel in self.related:
            lines.append(f"  >>> also {rel.render()}")
        if self.effective_hint:
            lines.append(f"  = hint: {_safe(self.effective_hint, lines=True)}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        """As render shows it: control characters escaped, long values shortened."""
        out = {"severity": self.severity, "code": self.code, "message": _safe(self.message, lines=True),
               "location": self.location.to_json(), "hint": _safe(self.effective_hint, lines=True)}
        if self.related:
            out["related"] = [r.to_json() for r in self.related]
        return out

    @classmethod
    def from_json(cls, doc: dict) -> "Diagnostic":
        """The inverse of to_json (the link cache replays a link's warnings). to_json writes the effective
        hint; a hint equal to the code's default reads back as None, so the round trip compares equal."""
        hint = doc.get("hint")
        return cls(doc["code"], doc["message"], Location.from_json(doc.get("location", {})),
                   None if hint == CODES[doc["code"]].hint else hint, doc.get("severity", "error"),
                   tuple(Location.from_json(r) for r in doc.get("related", ())))


class DiagnosticSink:
    """Collects the diagnostics of a pass; `errors` tells whether to stop at its boundary."""

    def __init__(self) -> None:
        self.items: list[Diagnostic] = []

    def add(self, diag: Diagnostic) -> None:
        self.items.append(diag)

    def error(self, code: str, message: str, location: Location | None = None, hint: str | None = None,
              related: tuple[Location, ...] = ()) -> None:
        self.add(Diagnostic(code, message, location or Location(), hint, "error", related))

    def warning(self, code: str, message: str, location: Location | None = None, hint: str | None = None,
                related: tuple[Location, ...] = ()) -> None:
        self.add(Diagnostic(code, message, location or Location(), hint, "warning", related))

    def note(self, code: str, message: str, location: Location | None = None, hint: str | None = None,
             related: tuple[Location, ...] = ()) -> None:
        self.add(Diagnostic(code, message, location or Location(), hint, "note", related))

    def extend(self, diags) -> None:
        self.items.extend(diags)

    def warnings_as_errors(self) -> None:
        """--werror: every warning becomes an error, as -Werror makes them; called before anything is written."""
        from dataclasses import replace
        self.items = [replace(d, severity="error", message=f"{d.message} [--werror]") if d.severity == "warning"
                      else d for d in self.items]

    @property
    def errors(self) -> list[Diagnostic]:
        return [d for d in self.items if d.severity == "error"]

    @property
    def has_errors(self) -> bool:
        return any(d.severity == "error" for d in self.items)

    def exit_code(self) -> ExitCode:
        """Usage problems (2) outrank link problems (1)."""
        return max((d.exit_code for d in self.items), default=ExitCode.OK)


class PipelinkError(Exception):
    """Raised to stop at a pass boundary; carries the diagnostics collected so far."""

    def __init__(self, diagnostics: list[Diagnostic]):
        super().__init__("\n".join(d.render() for d in diagnostics))
        self.diagnostics = list(diagnostics)

    @property
    def exit_code(self) -> ExitCode:
        return max((d.exit_code for d in self.diagnostics), default=ExitCode.LINK)


class PipelinkWarning(UserWarning):
    """A warning diagnostic of a call that returns no result to carry it (`pipelink.build`), issued through
    Python's warnings module; `diagnostic` is the Diagnostic. `werror=True` makes such warnings errors."""

    def __init__(self, diagnostic: Diagnostic):
        super().__init__(diagnostic.render())
        self.diagnostic = diagnostic


class PipelinkNote(UserWarning):
    """A note diagnostic of a call that returns no result to carry it (`pipelink.build`): what the call did where that
    may not be what was meant, issued through Python's warnings module as warnings are; `diagnostic` is the
    Diagnostic. Not a PipelinkWarning: `werror=True` (and a filter that makes PipelinkWarning an error) leaves it be."""

    def __init__(self, diagnostic: Diagnostic):
        super().__init__(diagnostic.render())
        self.diagnostic = diagnostic


class PipelinkRunError(PipelinkError):
    """A loaded kernel's failure at run time: one diagnostic of the class's code and no location (the message names
    the kernel, its parameter or call). `message` is the text alone, for callers who wrap it in one of their own."""

    code = "PL196"

    def __init__(self, message: str, hint: str | None = None):
        self.message = message
        super().__init__([Diagnostic(self.code, message, hint=hint)])


class PipelinkUsageError(PipelinkError, TypeError):
    """An API call given an argument of the wrong type: PL001, and a TypeError for callers who catch those."""

    def __init__(self, message: str, hint: str | None = None):
        sink = DiagnosticSink()
        sink.error("PL001", message, hint=hint)
        super().__init__(sink.items)


def os_error_diagnostic(exc: OSError) -> Diagnostic:
    """PL002 for an OSError that reached a command's edge: the system refused a path or a file (a name too long, a
    symbolic link loop, a folder where a file was asked for) where no reader said so itself."""
    name = exc.filename if isinstance(exc.filename, str) else None
    shown = (name[:120] + "...") if name and len(name) > 120 else name
    return Diagnostic("PL002", f"cannot use {shown}: {exc.strerror or exc}" if shown else
                      f"a file could not be used: {exc.strerror or exc}", Location(file=shown) if shown else Location())


def as_path(value, what: str) -> str:
    """`value` as a path (str or os.PathLike of str), else PipelinkUsageError naming `what`."""
    import os
    path = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(path, str):
        raise PipelinkUsageError(f"{what} is a {type(value).__name__}; pipelink takes a path (str or os.PathLike)")
    if not path:  # Path("") is the working directory: no caller means that
        raise PipelinkUsageError(f"{what} is an empty path")
    if "\0" in path:  # no system call takes it: say so here, not as a ValueError from deep inside
        raise PipelinkUsageError(f"{what} {safe_text(path[:80])!r} holds a NUL byte, which no path can")
    try:
        os.fsencode(path)
    except UnicodeError:  # a lone surrogate the file system encoding cannot write
        raise PipelinkUsageError(f"{what} {safe_text(path[:80])!r} has characters no file name can hold "
                                 f"in this file system's encoding") from None
    return path


def _unicode(value):
    """A document with every string valid Unicode: a file name that is not UTF-8 is read with its bytes kept as lone
    surrogates, which no strict JSON reader takes; those become U+FFFD."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    if isinstance(value, dict):
        return {_unicode(k): _unicode(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_unicode(v) for v in value]
    return value


def json_text(doc) -> str:
    """A command's JSON output (results, diagnostics, SARIF): valid JSON for any input's text."""
    return json.dumps(_unicode(doc), indent=2)


def render_all(diags, fmt: str = "text") -> str:
    diags = list(diags)
    if fmt == "json":
        return json_text([d.to_json() for d in diags])
    return "\n".join(d.render() for d in diags)


SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _file_uri(path: str) -> str:
    """A path as SARIF's artifactLocation.uri wants it: a URI reference (relative paths stay relative)."""
    import os
    from urllib.parse import quote
    return ("file://" if path.startswith("/") else "") + quote(os.fsencode(path))  # a name's bytes, UTF-8 or not


_SECTION = re.compile(r"(.+)\[(\.[^\[\]]+)\]")  # X.o[.pipelink.contract]: a section of the object X.o


def _sarif_location(location: Location) -> dict:
    """A location as SARIF's: the file's URI from its real name (its bytes, not the escaped text shown), an object's
    section apart from it; the JSON pointer, component, option and section in the property bag, shown safely."""
    loc = location.to_json()
    out: dict = {}
    bag = {k: loc[k] for k in ("pointer", "component", "option") if k in loc}
    if location.file:
        m = _SECTION.fullmatch(location.file)
        file = m.group(1) if m else location.file
        if m:
            bag["section"] = _safe(m.group(2))
        physical: dict = {"artifactLocation": {"uri": _file_uri(file)}}
        if "line" in loc:
            physical["region"] = {"startLine": loc["line"], **({"startColumn": loc["column"]} if "column" in loc else {})}
        out["physicalLocation"] = physical
    if bag:
        out["properties"] = bag
    return out


def sarif_log(diags, tool_version: str, artifact: str | None = None) -> dict:
    """The diagnostics as a SARIF 2.1.0 log for code-scanning tools: one run, a rule per code used (its
    title and default hint), a result per diagnostic. Text as to_json() gives it: escaped and shortened.
    `artifact`: the command's main input; a result located in no file (at an option, a component of several
    files) is shown against it, since code-scanning uploads refuse a result without a file."""
    rules: dict[str, int] = {}
    results = []
    for d in diags:
        doc = d.to_json()
        rules.setdefault(d.code, len(rules))
        result = {"ruleId": d.code, "ruleIndex": rules[d.code], "level": d.severity,
                  "message": {"text": doc["message"]}, "properties": {"hint": doc["hint"]}}
        where = _sarif_location(d.location)
        if "physicalLocation" not in where and artifact is not None:
            where["physicalLocation"] = {"artifactLocation": {"uri": _file_uri(artifact)}}
        if where:
            result["locations"] = [where]
        related = [dict(_sarif_location(r), id=i) for i, r in enumerate(d.related)]
        if related:
            result["relatedLocations"] = related
        results.append(result)
    driver = {"name": "pipelink", "version": tool_version, "rules": [
        {"id": code, "shortDescription": {"text": CODES[code].title}, "help": {"text": CODES[code].hint}}
        for code in rules]}
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [{"tool": {"driver": driver}, "results": results}]}


def codes_markdown() -> str:
    """docs/diagnostics.md, generated from the registry (`python -m pipelink.core.diagnostics`)."""
    lines = ["# Diagnostics", "",
             "Every problem pipelink reports has a stable code. Codes are never renumbered; new ones are added.",
             "Exit code 2 means bad usage or an input that cannot be read as what it claims to be; 1 means a",
             "contract or link problem. Each diagnostic names where (file, JSON pointer, component), what clashed",
             "with what (`>>> also ...`), and gives a hint. `--format json` gives the same as objects, `--format sarif`",
             "as a SARIF 2.1.0 log (a rule per code, with its title and default hint; a result located in no file is",
             "shown against the command's pipeline, else its first input read from a file, not stdin; for a command",
             "line that did not parse, the first file it names). `--werror` makes warnings errors (exit 1). Text from inputs is shown safely in every format: control characters escaped (`\\x1b`),",
             "a value over 256 characters cut to its first 60 and its length. A command whose stdout is closed early",
             "(`pipelink inspect ... | head`) ends quietly with exit code 141, as a tool ended by SIGPIPE would.",
             "An option that takes one value, given twice with two values (`-o a -o b`), is PL001, not the last one.",
             "This file is generated: `python -m pipelink.core.diagnostics > docs/diagnostics.md`.", "",
             "A code with exit \"1 or 0\" is also reported as a warning (exit 0); its row says when. A code with exit",
             "0 is a note: it says what a command did where that may not be what was meant (`--werror` leaves it be).",
             "",
             "| code | exit | what | default hint |", "| --- | --- | --- | --- |"]
    for c in CODES.values():
        hint = c.hint.replace("|", "\\|")
        what = f"{c.title}: {c.warning}" if c.warning else c.title
        exit_ = "0" if c.note else f"{int(c.exit)} or 0" if c.warning else f"{int(c.exit)}"
        lines.append(f"| {c.code} | {exit_} | {what} | {hint} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(codes_markdown(), end="")
