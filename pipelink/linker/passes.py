"""The link: a list of named passes over one context. Each pass adds to the context and to the
diagnostics; the driver stops at the first pass boundary with errors and returns what it has.

    read -> check [-> probe] -> resolve -> clusters -> allocate [-> map] -> generate -> compile -> link
         [-> control] -> verify -> emit

`run_passes` is the one driver: `link`, `pipelink check` (each component alone, as a set, or as a
pipeline short of compiling), the parity bench and the tests run the passes through it, with a stop
point (`until`), optional passes (`extra`: the conformance probe, the map of the decisions before the
glue, the one-unit control) and, for components already read, `components` in place of the read pass.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from typing import TYPE_CHECKING

from .. import toolchain

from ..core.diagnostics import Diagnostic, DiagnosticSink, Location, PipelinkError
from ..core.pipeline import NOT_IN_KEY, PipelineSpec, checked_spec
from ..formats.inputs import NamedBytes
from . import cache

if TYPE_CHECKING:  # the passes import their modules when they run: a cache hit needs none of them
    from ..core.model import Component
    from ..formats.cubin import KernelInfo
    from ..runtime.manifest import Manifest
    from .allocate import Allocation
    from .resolve import Resolved


@dataclass(frozen=True)
class LinkOptions:
    """What to link and how. Frozen, and the link cache keys on every field but the ones marked NOT_IN_KEY."""

    arch: str | None = None              # None: checks.default_target (the components' and the pipeline's needs)
    pipeline: PipelineSpec = field(default_factory=PipelineSpec)
    monolithic: bool = False             # also generate the one-unit control source
    optimize: bool = True
    cache: bool = field(default=True, metadata=NOT_IN_KEY)  # reuse an identical earlier link (cache.py)

    def __post_init__(self):  # a field of the wrong type had crashed the link deep inside, or been taken as a default
        from ..core.diagnostics import PipelinkUsageError
        from ..core.pipeline import PipelineSpec
        if self.arch is not None and not (isinstance(self.arch, str) and self.arch):
            raise PipelinkUsageError(f"LinkOptions.arch is a target name such as 'sm_90a' (or None: the first target "
                                     f"every component supports), not {self.arch!r}"[:200])
        import os
        from collections.abc import Mapping
        if not isinstance(self.pipeline, (PipelineSpec, str, os.PathLike, Mapping)):
            raise PipelinkUsageError(f"LinkOptions.pipeline is a PipelineSpec, a pipeline file's path or a dict, not "
                                     f"a {type(self.pipeline).__name__}")
        for name in ("monolithic", "optimize", "cache"):
            if not isinstance(getattr(self, name), bool):
                raise PipelinkUsageError(f"LinkOptions.{name} is True or False, not {getattr(self, name)!r}"[:200])


@dataclass
class LinkContext:
    inputs: list[str | NamedBytes]
    options: LinkOptions
    sink: DiagnosticSink = field(default_factory=DiagnosticSink)
    components: list[Component] = field(default_factory=list)
    target: str | None = None
    resolved: Resolved | None = None
    allocation: Allocation | None = None
    glue: str | None = None
    glue_ltoir: bytes | None = None
    cubin: bytes | None = None
    kernel_info: KernelInfo | None = None
    manifest: Manifest | None = None
    link_map: str | None = None
    link_picture: str | None = None     # the map as an SVG picture
    monolithic: str | None = None
    control_cubin: bytes | None = None   # the one-unit control, linked (the `control` pass)
    nvjitlink_options: list[str] = field(default_factory=list)
    timings: list[tuple[str, float]] = field(default_factory=list)
    cache_hit: bool = False              # no pass ran: resolved, allocation, ... stay None
    extra: tuple[str, ...] = ()          # the optional passes this run includes
    until: str | None = None             # the last pass this run runs (None: all)
    resolved_early: tuple | None = None  # (Resolved or None, its diagnostics): resolved for the target's choice
    # what each object's code uses (conform's record or probe, or check's probe), by the component's code name:
    # the clusters pass holds its cluster barrier against the fused block's warps (PL206)
    usage: dict = field(default_factory=dict)


def pass_read(ctx: LinkContext) -> None:
    from .collect import read_components
    ctx.components = read_components(ctx.inputs, ctx.sink)


def pass_check(ctx: LinkContext) -> None:
    from ..core.checks import check_set
    from .collect import verify_object
    needs = _pipeline_needs(ctx) if _runs(ctx, "resolve") else None  # a set checked alone has no pipeline
    ctx.target = check_set([c.contract for c in ctx.components], ctx.sink, ctx.options.arch, needs)
    if ctx.target and not ctx.sink.has_errors:
        for comp in ctx.components:
            if comp.obj is not None:  # a bare contract is checked without its code
                verify_object(comp, ctx.target, ctx.sink)


def _runs(ctx: LinkContext, name: str) -> bool:
    """Whether this run gets as far as pass `name`."""
    names = [n for n, _ in PASSES]
    return ctx.until is None or names.index(ctx.until) >= names.index(name)


def _pipeline_needs(ctx: LinkContext):
    """What the pipeline (its schedule, its settings, the link's options) asks of the target, for the choice of
    one where none is given (checks.default_target): the pipeline resolved ahead of its pass, which resolve allows
    (it does not depend on the target), and kept for that pass."""
    def needs():
        from .allocate import target_needs
        from .resolve import resolve
        found = DiagnosticSink()
        resolved = resolve(ctx.components, ctx.options.pipeline, found)
        ctx.resolved_early = (resolved, found)
        return target_needs(resolved) if resolved is not None else []
    return needs


def pass_conform(ctx: LinkContext) -> None:
    """Each object's code against its contract: from the record `pipelink build` embedded (its probe's findings,
    authoring/conformance.py), else (built with one's own nvcc) from a probe of it, cached. What `check`'s probe
    refuses refuses the link too (an undeclared __syncthreads in a warp-specialized kernel had linked, and would
    hang); its warnings stay check's and verify's. Under `check` the probe pass runs instead."""
    if "probe" in ctx.extra:
        return
    from ..authoring.conformance import compare, usage_for_link
    seen = set()
    for comp in ctx.components:
        code = comp.code  # a call's renamed contract: the object was built against its base
        if comp.obj is None or code.name in seen:
            continue
        seen.add(code.name)
        recorded = usage_for_link(code, comp.obj, ctx.target)
        if recorded is not None:
            ctx.usage[code.name] = recorded[0]
            found = DiagnosticSink()
            compare(code, comp.obj.path, *recorded, found)
            ctx.sink.extend(found.errors)


def pass_probe(ctx: LinkContext) -> None:
    """Optional (`pipelink check`): each object linked alone into a probe kernel, its code's use against
    its contract. The link does without: the real link and `verify` find what a probe would."""
    from .conformance import check_conformance
    for comp in ctx.components:
        if comp.obj is not None:
            result = check_conformance(comp, ctx.target, ctx.sink)
            if result is not None:
                ctx.usage[comp.code.name] = result.usage


def pass_resolve(ctx: LinkContext) -> None:
    if ctx.resolved_early is not None:  # resolved for the choice of the target (pass_check): the same result
        ctx.resolved, found = ctx.resolved_early
        ctx.sink.extend(found.items)
        return
    from .resolve import resolve
    ctx.resolved = resolve(ctx.components, ctx.options.pipeline, ctx.sink)


def pass_clusters(ctx: LinkContext) -> None:
    """A component that declares a thread-block cluster walks its tiles in step with its cluster's other CTAs:
    a walk that keeps step (PL203) over a tile count of whole clusters (PL202, on sampled shapes; the launcher
    checks each launch's). Code that executes the cluster barrier (what conform or probe read from its SASS) runs
    where every warp of the fused block runs it (PL206). clusters.py says why."""
    from .clusters import check_cluster_barriers, check_cluster_walks
    check_cluster_walks(ctx.resolved, ctx.options.pipeline, ctx.sink)
    check_cluster_barriers(ctx.resolved, ctx.usage, ctx.options.pipeline, ctx.sink)


def pass_allocate(ctx: LinkContext) -> None:
    from .allocate import allocate
    ctx.allocation = allocate(ctx.resolved, ctx.target, ctx.sink)


def pass_map(ctx: LinkContext) -> None:
    """Optional (`pipelink check --pipeline`): the link map of the decisions so far, and its picture;
    `emit` writes them again with what the linked kernel really uses."""
    from .emit import link_map
    from .picture import svg
    ctx.link_map = link_map(ctx.resolved, ctx.allocation, ctx.target)
    ctx.link_picture = svg(ctx.resolved, ctx.allocation, ctx.target)


def pass_generate(ctx: LinkContext) -> None:
    from .glue import generate_glue
    from .monolithic import generate_monolithic
    if ctx.resolved.distributed:  # the glue includes NVSHMEM's headers and the link its device library
        try:
            toolchain.nvshmem_root()
        except toolchain.ToolchainError as exc:
            comp, pointer = ctx.resolved.distributed
            ctx.sink.error("PL182", f"'{comp}' is written for a distributed link (RANK, WORLD or another rank's "
                           f"copy of an event), which needs NVSHMEM: {exc.message}",
                           ctx.resolved.component(comp).contract.at(pointer),
                           hint=f"install nvidia-nvshmem-cu13=={toolchain.PINNED_NVSHMEM} (pipelink's own "
                                "dependencies pin it), or set PIPELINK_NVSHMEM_HOME to a folder of that release "
                                "(include/, lib/)")
            return
    ctx.glue = generate_glue(ctx.resolved, ctx.allocation)
    if not _names_fit_the_glue(ctx):
        return
    if ctx.options.monolithic or "control" in ctx.extra:
        ctx.monolithic = generate_monolithic(ctx.resolved, ctx.glue, ctx.sink)


def _names_fit_the_glue(ctx: LinkContext) -> bool:
    """No kernel parameter or entry symbol named as a C++ keyword, a CUDA built-in or a name the glue declares
    (names.py: a parameter the glue shadows would reach the components with the glue's value). PL188."""
    from .names import clashes
    r = ctx.resolved
    symbols = {sym: c for c in r.components for sym in c.code.symbols}
    found = clashes(ctx.glue, r.name, [p.name for p in r.params], list(symbols), frozenset(r.specialize or ()))
    for kind, name, why in found:
        named = None  # where the pipeline itself names a kernel parameter
        if kind == "entry symbol":
            comp = symbols[name]
            where = comp.code.at(comp.code.symbol_pointer(name))
        else:
            named = _named_by_the_pipeline(ctx.options.pipeline, name)
            user = next((c for c in r.components if c.contract.param(name) is not None), None)
            where = named or (user.contract.at(f"{user.contract.param(name).pointer_path}/name") if user else
                              Location(file=ctx.options.pipeline.source))
        ctx.sink.error("PL188", f"{kind} '{name}' is {why}", where,
                       hint="name that kernel parameter differently in the pipeline" if named else None)
    return not found


def _named_by_the_pipeline(spec, name: str) -> Location | None:
    """Where the pipeline names kernel parameter `name` itself: a call's bind (component parameter -> `name`) or
    its `layers`; None when the name is a contract's."""
    for i, call in enumerate(spec.calls):
        for param, bound in call.bind:
            if bound == name:
                return spec.at(f"/calls/{i}/bind/{param}")
    return spec.at("/layers") if spec.layers == name else None


def pass_compile(ctx: LinkContext) -> None:
    from .glue import glue_options
    try:
        options = glue_options(ctx)  # the toolkit's include folders: a bad PIPELINK_CUDA_HOME fails here
        ctx.glue_ltoir = toolchain.nvrtc_to_ltoir(ctx.glue, f"{ctx.resolved.name}_glue.cu", options)
    except toolchain.ToolchainError as exc:
        if exc.log:  # NVRTC ran and refused the glue
            if not (_names_the_toolkit_defines(ctx, options) or _names_the_toolkit_declares(ctx, exc.log)):
                ctx.sink.error("PL075", f"NVRTC could not compile the generated glue:\n{exc.log}")
        else:  # it did not get that far: the toolchain, not the glue
            ctx.sink.error("PL008", f"cannot compile the generated glue: {exc.message}")


def _names_the_toolkit_defines(ctx: LinkContext, options: list[str]) -> bool:
    """Where the kernel's name, an entry symbol or a parameter is a macro of the headers the glue includes (NULL,
    assert, CUDART_VERSION), NVRTC's errors quote what it expands to: ask NVRTC which of the names are macros
    there (one more compile, on this failure path only) and say so at each name, PL077 or PL188. True when it
    found one. Checked before the quoted names: an expanded macro also makes the errors quote innocent ones."""
    from ..core.identifiers import contract_names, macro_probe, macros_in_probe_log
    r = ctx.resolved
    lines = ctx.glue.splitlines()
    last_include = max((i for i, line in enumerate(lines) if line.lstrip().startswith("#include")), default=-1)
    places = [(name, c, pointer, what) for c in r.components for name, pointer, what in contract_names(c.contract)]
    probe = macro_probe("\n".join(lines[:last_include + 1]), [r.name, *(p[0] for p in places)])
    try:
        toolchain.nvrtc_to_ltoir(probe, f"{r.name}_names.cu", options)
        return False
    except toolchain.ToolchainError as exc:
        macros = macros_in_probe_log(exc.log or "")
    if r.name in macros:
        ctx.sink.error("PL077", f"the kernel name '{r.name}' is a macro the CUDA headers define",
                       ctx.options.pipeline.at("/name"), hint="name the pipeline differently")
    for name, c, pointer, what in places:
        if name in macros and name != r.name:
            ctx.sink.error("PL188", f"{what} '{name}' of '{c.name}' is a macro the CUDA headers define",
                           c.contract.at(pointer), hint="rename it in the contract (and the code)")
    return bool(macros & {r.name, *(p[0] for p in places)})


def _names_the_toolkit_declares(ctx: LinkContext, log: str) -> bool:
    """Where NVRTC's errors name (in quotes) the kernel, a kernel parameter or an entry symbol, the name is one the
    toolkit's headers declare at global scope (printf, min, std, ...), which no list here can hold: say so at
    the name, PL077 or PL188, rather than blame the glue. True when it did."""
    from ..core.identifiers import named_in_errors, names_the_toolkit_declares
    r = ctx.resolved
    named = named_in_errors(log)
    found = False
    if r.name in named:
        ctx.sink.error("PL077", f"the kernel name '{r.name}' is a name the CUDA headers declare ({named[r.name]})",
                       ctx.options.pipeline.at("/name"), hint="name the pipeline differently")
        found = True
    for c in r.components:
        for name, pointer, what, line in names_the_toolkit_declares(c.contract, log):
            if name != r.name:
                ctx.sink.error("PL188", f"{what} '{name}' of '{c.name}' is a name the CUDA headers declare ({line})",
                               c.contract.at(pointer), hint="rename it in the contract (and the code)")
                found = True
    return found


def jitlink_options(ctx: LinkContext) -> list[str]:
    opts = [f"-arch={ctx.target}", "-lto", "-O3" if ctx.options.optimize else "-O0"]
    if ctx.allocation.registers:
        opts.append(f"-maxrregcount={ctx.allocation.registers}")
    return opts


def pass_link(ctx: LinkContext) -> None:
    # The glue goes last: LTO merges the modules into the first one, whose data layout then holds for
    # the whole kernel. nvcc's modules address shared memory with 32-bit pointers, NVRTC's with 64-bit
    # ones; with the components first, the kernel is compiled as nvcc compiles its components (and as
    # nvcc compiles the one-unit control: docs/architecture.md).
    from .verify import objects_of
    bare = [c for c in objects_of(ctx.resolved) if c.obj is None]
    for c in bare:  # read from its contract alone: `check` takes it so, a link needs its code
        ctx.sink.error("PL010", f"'{c.name}' was given as its contract alone: a link needs the component's object",
                       c.contract.at("/name"), hint="build it (`pipelink build SOURCE --contract CONTRACT -o X.o`) and "
                       "link the object; `pipelink check` takes a contract alone")
    if bare:
        return
    inputs = [c.obj.link_input() for c in objects_of(ctx.resolved)]  # an object called twice is linked once
    inputs.append(toolchain.LinkInput("ltoir", ctx.glue_ltoir, f"{ctx.resolved.name}_glue"))
    if ctx.resolved.distributed:  # the NVSHMEM calls of the glue (remote.h) and of the components
        inputs.append(toolchain.nvshmem_device_library())
    ctx.nvjitlink_options = jitlink_options(ctx)
    try:
        ctx.cubin = toolchain.nvjitlink_link(inputs, ctx.nvjitlink_options).cubin
    except toolchain.ToolchainError as exc:
        # Say which object lacks what, where a probe can tell; else pass nvJitLink's words on.
        from .collect import probe_symbols
        before = len(ctx.sink.errors)
        for comp in objects_of(ctx.resolved):
            probe_symbols(comp, ctx.target, ctx.sink)
        if len(ctx.sink.errors) == before:
            ctx.sink.error("PL074", f"nvJitLink failed: {exc.message}\n{exc.log}")


def pass_control(ctx: LinkContext) -> None:
    """Optional (the parity bench, the tests): the one-unit control, compiled by nvcc as `pipelink build`
    compiles components and linked with this link's nvJitLink options (monolithic.control_cubin)."""
    from .monolithic import control_cubin
    try:
        ctx.control_cubin = control_cubin(ctx)
    except toolchain.ToolchainError as exc:
        ctx.sink.error("PL160", f"the one-unit control of kernel '{ctx.resolved.name}' did not build: "
                       f"{exc.message}\n{exc.log}".rstrip())


def pass_verify(ctx: LinkContext) -> None:
    from .verify import verify_cubin
    ctx.kernel_info = verify_cubin(ctx.cubin, ctx.resolved, ctx.allocation, ctx.target, ctx.sink)


def pass_emit(ctx: LinkContext) -> None:
    from .emit import link_map, manifest
    from .picture import svg
    ctx.manifest = manifest(ctx.resolved, ctx.allocation, ctx.target, ctx.cubin, ctx.kernel_info)
    ctx.link_map = link_map(ctx.resolved, ctx.allocation, ctx.target, ctx.kernel_info)
    ctx.link_picture = svg(ctx.resolved, ctx.allocation, ctx.target)


def pass_loops(ctx: LinkContext) -> None:
    """Optional (`pipelink link --loops`): each component linked as a kernel of its own (else the bare probe),
    its streaming loops against the same loops in the kernel; a section of the link map, and PL183 where one
    grew."""
    from .loops import compare_loops

    def link_alone(comp, spec: PipelineSpec) -> tuple[bytes, str] | None:  # the passes run on one component
        alone = run_passes(options=LinkOptions(arch=ctx.target, pipeline=spec, cache=False), components=[comp])
        ok = not alone.sink.has_errors and alone.cubin is not None and alone.manifest is not None
        return (alone.cubin, alone.manifest.kernel) if ok else None
    ctx.link_map = (ctx.link_map or "") + compare_loops(ctx.resolved, ctx.cubin, ctx.target, ctx.kernel_info,
                                                        ctx.sink, link_alone)


PASSES = [("read", pass_read), ("check", pass_check), ("conform", pass_conform), ("probe", pass_probe),
          ("resolve", pass_resolve), ("clusters", pass_clusters),
          ("allocate", pass_allocate), ("map", pass_map), ("generate", pass_generate), ("compile", pass_compile),
          ("link", pass_link), ("control", pass_control), ("verify", pass_verify), ("emit", pass_emit),
          ("loops", pass_loops)]
OPTIONAL = frozenset({"probe", "map", "control", "loops"})  # run only when asked for (`extra`, or as `until`)


def run_passes(inputs: list[str | NamedBytes] = (), options: LinkOptions | None = None, *, until: str | None = None,
               extra: tuple[str, ...] = (), components: list[Component] | None = None) -> LinkContext:
    """Run the passes in order, stopping at the first pass boundary with errors, or after `until`.
    `extra` adds optional passes (OPTIONAL; `until` naming one adds it too). `components` (already read)
    stand for the read pass's output: the run starts with `check`."""
    names = [name for name, _ in PASSES]
    unknown = [n for n in (*extra, *([until] if until else [])) if n not in names]
    if unknown:
        raise ValueError(f"no pass named {', '.join(map(repr, unknown))}; the passes: {', '.join(names)}")
    extra = tuple(dict.fromkeys([*extra, *([until] if until in OPTIONAL else [])]))
    ctx = LinkContext(list(inputs), options or LinkOptions(), extra=extra, until=until)
    spec = checked_spec(ctx.options.pipeline, ctx.sink)
    if spec is None:
        return ctx
    ctx.options = replace(ctx.options, pipeline=spec)
    if components is not None:
        ctx.components = list(components)
    for name, fn in PASSES:
        if (name in OPTIONAL and name not in extra) or (name == "read" and components is not None):
            continue
        start = time.perf_counter()
        fn(ctx)
        ctx.timings.append((name, time.perf_counter() - start))
        if ctx.sink.has_errors or name == until:
            break
    return ctx


@dataclass
class LinkResult:
    """What `pipelink.link` returns: the cubin, its manifest and link map, and every diagnostic."""

    cubin: bytes | None
    manifest: Manifest | None
    link_map: str | None
    glue: str | None
    monolithic: str | None
    diagnostics: list[Diagnostic]
    timings: list[tuple[str, float]]
    context: LinkContext = field(repr=False)
    link_picture: str | None = None  # the link map as an SVG picture (pipelink/linker/picture.py)

    @property
    def ok(self) -> bool:
        return self.cubin is not None and not any(d.severity == "error" for d in self.diagnostics)

    def raise_on_error(self) -> "LinkResult":
        """Self when the link succeeded; else PipelinkError with every diagnostic."""
        if not self.ok:
            has_error = any(d.severity == "error" for d in self.diagnostics)
            raise PipelinkError(self.diagnostics if has_error else
                                [*self.diagnostics, Diagnostic("PL074", "the link produced no cubin")])
        return self

    def manifest_json(self) -> bytes:
        """The manifest as `pipelink link` and `save` write it (K.json)."""
        return (json.dumps(self.manifest.to_json(), indent=2) + "\n").encode(errors="surrogateescape")

    def save(self, directory: str | os.PathLike) -> Path:
        """Write K.cubin, K.json (the manifest) and K.map (the link map) into `directory` (made if
        missing), K being the kernel's name; returns the cubin's path. All files or none, never over
        an input of the link: PipelinkError otherwise, as for a failed link. `pipelink.load` reads them."""
        from ..formats.outputs import Output, check_outputs, object_inputs, write_outputs
        from ..core.diagnostics import as_path
        self.raise_on_error()
        base = Path(as_path(directory, "the directory")) / self.manifest.kernel
        files = {"cubin": (base.with_suffix(".cubin"), self.cubin), "manifest": (base.with_suffix(".json"),
                 self.manifest_json()), "link map": (base.with_suffix(".map"), self.link_map.encode(errors="surrogateescape"))}
        outputs = [Output(str(path), role, "save()", binary=role == "cubin") for role, (path, _) in files.items()]
        on_disk = [p for p in self.context.inputs if not isinstance(p, NamedBytes)]
        sink = DiagnosticSink()
        if check_outputs(outputs, object_inputs(on_disk, self.context.options.pipeline.source), sink):
            try:
                base.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                sink.error("PL007", f"cannot make {base.parent}: {exc.strerror or exc}", Location(file=str(base.parent)))
            else:
                write_outputs({str(path): data for path, data in files.values()}, sink)
        if sink.has_errors:
            raise PipelinkError(sink.items)
        return files["cubin"][0]

    def kernel(self, device: int = 0):
        """Load the linked kernel on `device` (needs a GPU)."""
        from ..runtime.launch import Kernel
        self.raise_on_error()
        return Kernel.load(self.cubin, self.manifest, device)


def link(inputs: list[str | NamedBytes], options: LinkOptions | None = None, extra: tuple[str, ...] = ()) -> LinkResult:
    """Link component objects into one fused kernel. Never raises for bad input: see `diagnostics`
    (`pipelink.link` takes more kinds of input and can raise instead).

    An identical earlier link comes from the cache without running a pass; its `context` then holds
    only the outputs (`cache_hit` is True). Pass `LinkOptions(cache=False)` to get every pass's state.
    `extra` adds optional passes (`("control",)`: `context.control_cubin`); their outputs are not
    cached, so such a link neither reads nor writes the cache.
    """
    options = options or LinkOptions()
    sink = DiagnosticSink()
    spec = checked_spec(options.pipeline, sink)  # a PipelineSpec built in Python meets the file's schema
    if spec is None:
        return failed(inputs, options, sink.items)
    options = replace(options, pipeline=spec)
    start, began = time.perf_counter(), time.time()
    key = cache.link_key(inputs, options) if options.cache and cache.enabled() and not extra else None
    if key is not None:
        hit = cache.load(key, options.monolithic)
        if hit is not None:
            return _cached_result(inputs, options, hit, time.perf_counter() - start)
    lookup = time.perf_counter() - start
    ctx = run_passes(inputs, options, extra=extra)
    ok = not ctx.sink.has_errors and ctx.manifest is not None
    result = LinkResult(ctx.cubin if ok else None, ctx.manifest if ok else None, ctx.link_map if ok else None,
                        ctx.glue, ctx.monolithic, list(ctx.sink.items), ctx.timings, ctx,
                        ctx.link_picture if ok else None)
    # only successes (a failed link must report its errors afresh), and only of inputs nothing replaced meanwhile
    if key is not None and ok and not cache.inputs_changed_since(inputs, began):
        start = time.perf_counter()
        cache.store(key, result)
        ctx.timings.append(("cache", lookup + time.perf_counter() - start))  # what the cache cost this miss
    return result


def failed(inputs: list[str | NamedBytes], options: LinkOptions, diagnostics: list[Diagnostic]) -> LinkResult:
    """The result of a link stopped before its first pass (a pipeline that does not read)."""
    ctx = LinkContext(list(inputs), options)
    ctx.sink.extend(diagnostics)
    return LinkResult(None, None, None, None, None, list(diagnostics), [], ctx)


def _cached_result(inputs: list[str | NamedBytes], options: LinkOptions, hit: cache.CachedLink, seconds: float) -> LinkResult:
    ctx = LinkContext(list(inputs), options, target=hit.manifest.target, cubin=hit.cubin, manifest=hit.manifest,
                      link_map=hit.link_map, link_picture=hit.link_picture, glue=hit.glue, monolithic=hit.monolithic,
                      timings=[("cache", seconds)], cache_hit=True)
    ctx.sink.extend(hit.diagnostics)  # the original link's warnings, replayed
    return LinkResult(hit.cubin, hit.manifest, hit.link_map, hit.glue, hit.monolithic, list(hit.diagnostics),
                      ctx.timings, ctx, hit.link_picture)


__all__ = ["LinkOptions", "LinkResult", "link", "run_passes", "PASSES", "OPTIONAL", "Location"]
