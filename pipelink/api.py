"""The Python API behind `pipelink.check`, `build`, `link` and `load`: what the commands do, for inputs
given as paths, as bytes or as cuda.core `ObjectCode`, and a pipeline given as a path, a dict or a
`PipelineSpec`. Bad input raises `PipelinkError` carrying the located diagnostics; `link` alone
returns its result unless asked to raise (its docstring says why).
"""
from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from .core.diagnostics import (Diagnostic, DiagnosticSink, Location, PipelinkError, PipelinkUsageError, as_path,
                               os_error_diagnostic)
from .core.files import read_input_bytes, reading
from .core.model import Component
from .core.pipeline import PipelineSpec, load_pipeline, load_pipeline_dict
from .formats.inputs import NamedBytes
from .linker.passes import LinkContext, LinkOptions, LinkResult, run_passes
from .runtime.manifest import Manifest

_BYTES = (bytes, bytearray, memoryview)


def _one_command(fn):
    """An entry point that reads its inputs as one command does: a stream (a pipe, a FIFO) once."""
    @functools.wraps(fn)
    def command(*args, **kwargs):
        with reading():
            try:
                return fn(*args, **kwargs)
            except PipelinkError:
                raise
            except OSError as exc:  # a path the system refuses (too long, a loop): bad input, not a crash
                raise PipelinkError([os_error_diagnostic(exc)]) from None
    return command


def _object_code_type():
    """cuda.core's ObjectCode class, or None where cuda.core is not installed."""
    try:
        from cuda.core import ObjectCode
    except ImportError:
        return None
    return ObjectCode


def as_input(item, index: int = 0) -> str | NamedBytes:
    """One input as the read pass takes it: a path, or bytes with the name diagnostics give them."""
    if isinstance(item, (str, os.PathLike)):
        return as_path(item, f"input {index}")
    if isinstance(item, _BYTES):
        return NamedBytes(f"<input {index}>", bytes(item))
    if _is_named_bytes(item):
        return NamedBytes(item[0], bytes(item[1]))
    object_code = _object_code_type()
    if object_code is not None and isinstance(item, object_code):
        code = item.code  # a path where it was made from a file
        return os.fspath(code) if isinstance(code, (str, os.PathLike)) else \
            NamedBytes(item.name or f"<{item.code_type} {index}>", bytes(code))
    accepted = "a path (str or os.PathLike), bytes, a (name, bytes) pair" + (
        " or a cuda.core ObjectCode" if object_code is not None else " (cuda.core is not installed: no ObjectCode)")
    raise PipelinkUsageError(f"input {index} is a {type(item).__name__}; pipelink takes {accepted}")


def _strings(value, what: str) -> tuple[str, ...]:
    """A list (any iterable) of strings, for an option such as build's `archs`; one string alone is refused
    rather than read character by character."""
    if isinstance(value, str) or not hasattr(value, "__iter__") or isinstance(value, Mapping):
        raise PipelinkUsageError(f"{what} is a {type(value).__name__}; pipelink takes a list of strings "
                                 f"({what}=[{value!r}] for one)")
    items = tuple(value)
    bad = [v for v in items if not isinstance(v, str)]
    if bad:
        raise PipelinkUsageError(f"{what} holds a {type(bad[0]).__name__}; pipelink takes a list of strings")
    return items


def _target(arch, what: str) -> str:
    """A link or build target pipelink knows (as the CLI's --arch takes it), else a usage error."""
    from .core.targets import TARGETS
    if not isinstance(arch, str) or arch not in TARGETS:
        raise PipelinkUsageError(f"{what}: unknown target {arch!r} (known: {', '.join(TARGETS)})")
    return arch


def _is_named_bytes(item) -> bool:
    return isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], _BYTES)


def as_inputs(items) -> list[str | NamedBytes]:
    """Inputs from a list (any iterable but a mapping, whose keys alone would be read) of them, or from one
    alone."""
    if isinstance(items, Mapping):
        raise PipelinkUsageError("the inputs are a mapping; pipelink takes a list of inputs (paths, bytes, (name, bytes) "
                        "pairs) or one of them")
    if isinstance(items, (str, os.PathLike, *_BYTES)) or _is_named_bytes(items) or not hasattr(items, "__iter__"):
        items = [items]
    return [as_input(item, i) for i, item in enumerate(items)]


def _no_inputs() -> Diagnostic:
    return Diagnostic("PL001", "no inputs: give the components' objects or contracts",
                      hint="pipelink.link([...]) and pipelink.check([...]) take at least one input")


def as_pipeline(pipeline, sink: DiagnosticSink) -> PipelineSpec | None:
    """A pipeline from a file, a dict (read as the file would be) or a PipelineSpec; None after errors."""
    if pipeline is None:
        return PipelineSpec()
    if isinstance(pipeline, PipelineSpec):
        return pipeline
    if isinstance(pipeline, (str, os.PathLike)):
        return load_pipeline(as_path(pipeline, "the pipeline"), sink)
    if isinstance(pipeline, dict):
        return load_pipeline_dict(pipeline, sink)
    raise PipelinkUsageError(f"the pipeline is a {type(pipeline).__name__}; pipelink takes a path, a dict or a PipelineSpec")


def _raise_on_errors(sink: DiagnosticSink) -> None:
    if sink.has_errors:
        raise PipelinkError(sink.items)


# --- check -------------------------------------------------------------------------------------

@dataclass
class Collected:
    """One checked set: its components and the link target chosen for them (None where there is none)."""

    components: list[Component]
    target: str | None


@dataclass
class CheckResult:
    """What `pipelink.check` found: each checked set (one per component unless checked together),
    the link map where a pipeline was given, and the warnings."""

    sets: list[Collected]
    link_map: str | None
    diagnostics: list[Diagnostic]

    @property
    def components(self) -> list[Component]:
        return [c for s in self.sets for c in s.components]

    @property
    def target(self) -> str | None:
        """The link target, where every set has the same one."""
        targets = {s.target for s in self.sets}
        return targets.pop() if len(targets) == 1 else None


def run_checks(items: list[str | NamedBytes], sink: DiagnosticSink, arch: str | None = None,
               pipeline: PipelineSpec | None = None, together: bool = False,
               probe: bool = True) -> tuple[list[Collected], LinkContext | None]:
    """`pipelink check`, through the linker's passes: each file read on its own and each of its
    components checked as a set of one (with its conformance probe), or, `together`, the components as
    one kernel's set; a `pipeline` implies `together` and goes on to the link's decisions short of
    compiling (resolve, allocate, the map of them, and the glue's text). Returns the sets, and with a pipeline the
    context of that run (its `link_map`, `link_picture`, `resolved`), else None. `probe=False` (one by one only):
    without the probe, for an object whose bytes were probed before (a build's cache hit)."""
    if pipeline is not None or together:
        extra = ("probe", "map") if pipeline is not None else ("probe",)
        # with a pipeline, up to the glue's text (not compiled): the names it declares meet the kernel's there
        ctx = run_passes(items, LinkOptions(arch=arch, pipeline=pipeline or PipelineSpec()),
                         until="generate" if pipeline is not None else "probe", extra=extra)
        sink.extend(ctx.sink.items)
        return [Collected(ctx.components, ctx.target)], ctx if pipeline is not None else None
    sets = []
    for item in items:  # unrelated components (every object of a folder) need not fit one kernel together
        read = run_passes([item], until="read")
        sink.extend(read.sink.items)
        for comp in read.components:
            one = run_passes(options=LinkOptions(arch=arch), components=[comp], until="probe" if probe else "check")
            sink.extend(one.sink.items)
            sets.append(Collected([comp], one.target))
    return sets, None


def check_objects(items: list, sink: DiagnosticSink, arch: str | None, probe: bool) -> list:
    """run_checks one by one, as a build's check of the object it is about to write (builder.ObjectCheck)."""
    sets, _ = run_checks(items, sink, arch, probe=probe)
    return [s.target for s in sets]


@_one_command
def check(inputs, *, pipeline=None, arch: str | None = None, together: bool = False) -> CheckResult:
    """`pipelink check`: each component's contract, and its object against the contract. `together`
    checks them as one kernel's set; a `pipeline` implies it and adds the link's decisions short of
    compiling. Raises PipelinkError with every diagnostic on an error."""
    items = as_inputs(inputs)
    if arch is not None:
        _target(arch, "arch")
    if not isinstance(together, bool):
        raise PipelinkUsageError(f"together is {together!r}; pipelink takes True or False")
    sink = DiagnosticSink()
    if not items:
        raise PipelinkError([_no_inputs()])
    spec = as_pipeline(pipeline, sink) if pipeline is not None else None
    _raise_on_errors(sink)
    sets, ctx = run_checks(items, sink, arch, spec, together)
    _raise_on_errors(sink)
    return CheckResult(sets, ctx.link_map if ctx is not None else None, sink.items)


# --- build -------------------------------------------------------------------------------------

@_one_command
def build(source: str | os.PathLike, contract, output: str | os.PathLike, *, archs: list[str] | None = None,
          include_dirs: list[str] = (), defines: list[str] = (), timeout_s: float | None = None,
          werror: bool = False) -> Path:
    """`pipelink build`: compile `source` (a path) against `contract` (a path, bytes or a (name, bytes) pair)
    into `output`, with the contract embedded; returns the output's path. Writes nothing on failure and raises
    PipelinkError with the diagnostics. What `pipelink check` would warn of in the object is issued as a
    `pipelink.PipelinkWarning` (Python's warnings module; `werror=True`: refused as an error, nothing written), a
    note (such as PL199) as a `pipelink.PipelinkNote` (the same way; `werror` leaves it be).
    `timeout_s`: a compile running longer is stopped (default: BuildOptions')."""
    from .authoring.builder import BuildOptions, build_component
    from .core.loader import load_contract_bytes
    from .core.model import Source
    source, output = as_path(source, "the source"), as_path(output, "the output")
    archs, include_dirs, defines = (_strings(archs, "archs") if archs is not None else None,
                                    _strings(include_dirs, "include_dirs"), _strings(defines, "defines"))
    for a in archs or ():
        _target(a, "archs")
    if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float))
                                  or not 0 < timeout_s < float("inf")):
        raise PipelinkUsageError(f"timeout_s is {timeout_s!r}; give a number of seconds above 0")
    if not isinstance(werror, bool):
        raise PipelinkUsageError(f"werror is {werror!r}; pipelink takes True or False")
    sink = DiagnosticSink()
    contract_file = None  # the contract's path where it is a file: the object must not replace it
    if isinstance(contract, _BYTES):
        name, data = "<contract>", bytes(contract)
    elif _is_named_bytes(contract):
        name, data = contract[0], bytes(contract[1])
    elif isinstance(contract, (str, os.PathLike)):
        name = contract_file = as_path(contract, "the contract")
        try:
            data = read_input_bytes(name)
        except OSError as exc:
            sink.error("PL002", f"cannot read contract {name}: {exc.strerror or exc}", Location(file=name))
            raise PipelinkError(sink.items) from None
    else:
        raise PipelinkUsageError(f"the contract is a {type(contract).__name__}; pipelink takes a path, bytes or a "
                        "(name, bytes) pair")
    c = load_contract_bytes(data, Source(name), sink)
    if c is not None:
        opts = BuildOptions(archs=tuple(archs) if archs else None, include_dirs=tuple(include_dirs),
                            defines=tuple(defines), werror=werror,
                            **({"timeout_s": float(timeout_s)} if timeout_s else {}))
        build_component(c, data, os.fspath(source), os.fspath(output), sink, opts, contract_file=contract_file,
                        check_object=check_objects)
    _raise_on_errors(sink)
    import warnings
    from .core.diagnostics import PipelinkNote, PipelinkWarning
    said = {"warning": PipelinkWarning, "note": PipelinkNote}
    for d in sink.items:  # the CLI prints them; a caller of the API would otherwise never see them
        if d.severity in said:
            warnings.warn(said[d.severity](d), stacklevel=3)
    return Path(output)


# --- link --------------------------------------------------------------------------------------

@_one_command
def link(inputs, options: LinkOptions | None = None, *, pipeline=None, raise_on_error: bool = False) -> LinkResult:
    """Link component objects into one fused kernel. `pipeline` (a path, a dict or a PipelineSpec)
    replaces `options.pipeline`.

    Returns the LinkResult even when the link fails, with its diagnostics and `ok` False, unless
    `raise_on_error`: a failed link's diagnostics are its result (a tool shows every one, warnings
    included), and existing callers test `ok`. Anything that uses the kernel (`kernel()`, `save()`)
    raises PipelinkError for a failed link, so a failure cannot pass unnoticed. With `raise_on_error`
    the link raises that PipelinkError itself, as `check`, `build` and `load` always do.
    """
    from .linker import passes
    items = as_inputs(inputs)
    if options is not None and not isinstance(options, LinkOptions):
        raise PipelinkUsageError(f"options is a {type(options).__name__}; pipelink takes a LinkOptions")
    options = options or LinkOptions()
    if pipeline is None and not isinstance(options.pipeline, PipelineSpec):  # a path or a dict there too
        pipeline = options.pipeline
    if not items:
        result = passes.failed(items, options, [_no_inputs()])
        return result.raise_on_error() if raise_on_error else result
    if pipeline is not None:
        sink = DiagnosticSink()
        spec = as_pipeline(pipeline, sink)
        if spec is None:
            result = passes.failed(items, options, sink.items)
            return result.raise_on_error() if raise_on_error else result
        options = replace(options, pipeline=spec)
    result = passes.link(items, options)
    return result.raise_on_error() if raise_on_error else result


# --- load --------------------------------------------------------------------------------------

@dataclass
class KernelImage:
    """A saved kernel read back without a GPU: the cubin and the manifest that describes it."""

    cubin: bytes
    manifest: Manifest
    path: Path

    def kernel(self, device: int = 0):
        """Load the kernel on `device` (needs a GPU)."""
        from .runtime.launch import Kernel
        return Kernel.load(self.cubin, self.manifest, device)  # which checks the device first


def _find_cubin(path: Path, sink: DiagnosticSink) -> Path | None:
    if not path.is_dir():
        return path
    found = sorted(path.glob("*.cubin"))
    if len(found) == 1:
        return found[0]
    what = "no .cubin" if not found else f"{len(found)} cubins ({', '.join(p.name for p in found)})"
    sink.error("PL002" if not found else "PL001", f"{path} holds {what}", Location(file=str(path)),
               hint="name the cubin: pipelink.load(directory / 'K.cubin')" if found else
               "save a linked kernel there first: LinkResult.save(directory)")
    return None


@_one_command
def load(path: str | os.PathLike, device: int | None = 0, *, manifest: str | os.PathLike | None = None):
    """Read a kernel `LinkResult.save` wrote: `path` is its directory (holding one cubin) or its
    K.cubin, with the manifest K.json beside it (or where `manifest` says: `link --manifest` put it elsewhere).
    Returns the loaded Kernel on `device` (needs a GPU), or with `device=None` the KernelImage, unloaded. Raises
    PipelinkError for files that are missing or do not describe one kernel."""
    from .core import jsonread
    from .runtime.manifest import ManifestError
    if device is not None:  # None: the image, unloaded
        from .runtime.launch import check_device
        check_device(device)
    sink = DiagnosticSink()
    cubin_path = _find_cubin(Path(as_path(path, "the kernel's path")), sink)
    _raise_on_errors(sink)
    manifest_path = Path(as_path(manifest, "the manifest")) if manifest is not None else cubin_path.with_suffix(".json")
    try:
        cubin = cubin_path.read_bytes()
    except OSError as exc:
        sink.error("PL002", f"cannot read {cubin_path}: {exc.strerror or exc}", Location(file=str(cubin_path)))
        raise PipelinkError(sink.items) from None
    if not cubin.startswith(b"\x7fELF"):  # the manifest or the map given for the kernel, say
        sink.error("PL004", f"{cubin_path} is not a cubin (no ELF header)", Location(file=str(cubin_path)),
                   hint="give the kernel's K.cubin, or the directory LinkResult.save wrote")
        raise PipelinkError(sink.items)
    doc = jsonread.read_file(manifest_path, sink, "manifest")
    if manifest is None and sink.has_errors:
        sink.items = [replace(d, hint=f"{d.effective_hint}; a manifest written elsewhere (link --manifest) is "
                              "named by load(..., manifest=PATH)") for d in sink.items]
    _raise_on_errors(sink)
    try:
        manifest = Manifest.from_json(doc.value)  # checks the manifest without a GPU
    except ManifestError as exc:
        sink.error("PL009", f"{manifest_path} does not describe a kernel: {exc.message}", Location(file=str(manifest_path)),
                   hint="name the kernel's manifest: load(..., manifest=PATH) where link --manifest put it elsewhere")
    else:
        if not manifest.describes(cubin):
            sink.error("PL035", f"{manifest_path} was written for another cubin than {cubin_path.name}",
                       Location(file=str(manifest_path)))
    _raise_on_errors(sink)
    image = KernelImage(cubin, manifest, cubin_path)
    return image if device is None else image.kernel(device)


__all__ = ["CheckResult", "Collected", "KernelImage", "as_input", "as_inputs", "as_pipeline", "build", "check", "run_checks",
           "link", "load"]
