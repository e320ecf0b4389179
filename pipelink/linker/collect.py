"""The read pass and what the check pass asks of each object: files -> (contract, object) pairs.

  read       every file: objects, archives, fatbins, LTO-IR, or bare contract files; each object's
             contract (embedded section or sidecar), loaded and checked alone (`read_components`)
  check      each object against its contract: LTO-IR for the target, the compile flags it was built
             with (`verify_object`); the symbol probes that explain a failed link (`probe_symbols`)

The linker's pass driver (linker.run_passes) sequences them; nothing here runs another pass.
"""
from __future__ import annotations

import os

from .. import toolchain
from ..authoring.header import MARKER_HEX, abi_marker_symbol, component_abi, marker_symbol, symbol_prefix
from ..core.diagnostics import DiagnosticSink, Location
from ..core.files import read_input_bytes
from ..formats.inputs import (InputObject, NamedBytes, check_entry_symbol, find_contract, is_contract_file, read_bytes,
                              read_input, require_ltoir)
from ..core.loader import load_contract_bytes
from ..core.model import Component, Source
from ..core.targets import TARGETS, ltoir_archs_for


def read_components(paths: list[str | NamedBytes], sink: DiagnosticSink) -> list[Component]:
    """The read and contracts passes, over files and inputs already in memory."""
    pending: list[tuple[bytes, Source, InputObject | None]] = []
    for item in paths:
        if isinstance(item, NamedBytes):
            path, data = item.name, item.data
        else:
            path = os.fspath(item)
            try:
                data = read_input_bytes(path)
            except IsADirectoryError:
                sink.error("PL002", f"{path} is a directory", Location(file=path))
                continue
            except OSError as exc:
                sink.error("PL002", f"cannot read {path}: {exc.strerror or exc}", Location(file=path))
                continue
        if is_contract_file(path, data):
            pending.append((data, Source(path), None))
            continue
        objects = read_bytes(data, path, sink) if isinstance(item, NamedBytes) else read_input(path, sink)
        for obj in objects:
            if not any(e.kind == "ltoir" for e in obj.entries):
                require_ltoir(obj, "sm_90", sink)  # no LTO-IR for any arch: say so before the contract
                continue
            found = find_contract(obj, sink)
            if found is not None:
                text, origin = found
                kind = "section .pipelink.contract" if origin.endswith("]") else "sidecar"
                pending.append((text, Source(origin, kind, obj.path), obj))
    if sink.has_errors:
        return []
    out = []
    for text, source, obj in pending:
        contract = load_contract_bytes(text, source, sink)
        if contract is not None:
            out.append(Component(contract, obj))
    return [] if sink.has_errors else out


def verify_object(comp: Component, arch: str, sink: DiagnosticSink) -> None:
    """An object against its own contract, for the link target: LTO-IR for it (and only the arch-specific
    IR where the contract targets an arch-specific arch), the compile flags. The check pass runs it; the
    optional probe pass of `pipelink check` then links each object alone into a probe kernel (its entry
    symbol, its contract marker, what its code really uses: conformance.py). The link does without: the
    real link and the cubin check find the symbols, and `probe_symbols` explains a failure."""
    c, obj = comp.contract, comp.obj
    if not require_ltoir(obj, arch, sink):
        return
    if not arch_specific_only(comp, sink):
        return
    family_ir_only(comp, arch, sink)
    accepted = ltoir_archs_for(arch)
    for entry in obj.entries:
        if entry.kind != "ltoir" or (entry.arch is not None and entry.arch not in accepted):
            continue
        actual = entry.compile_flags()
        declared = c.targets.flags.as_dict()
        diff = [f"{k}: contract {'true' if declared[k] else 'false'}, object {'true' if v else 'false'}"
                for k, v in actual.items() if declared.get(k) != v]
        if diff:
            sink.error("PL016", f"{obj.path} was compiled with other flags than contract '{c.name}' declares "
                       f"({'; '.join(diff)})", c.at("/targets/compile_flags"), related=(Location(file=obj.path),))


def arch_specific_only(comp: Component, sink: DiagnosticSink) -> bool:
    """An object whose contract targets an arch-specific arch (sm_90a) but not its family base (sm_90)
    must not carry LTO-IR for the base: `-arch=sm_90a -dlto` writes both, and linked from the sm_90 IR
    the code guarded by the sm_90a features (wgmma, setmaxnreg) becomes a trap."""
    c, obj = comp.contract, comp.obj
    ok = True
    for i, arch in enumerate(c.targets.archs):
        t = TARGETS.get(arch)
        if t is None or t.base == arch or t.base in c.targets.archs:
            continue
        if any(e.kind == "ltoir" and e.arch == t.base for e in obj.entries):
            also = f" besides {arch}" if any(e.kind == "ltoir" and e.arch == arch for e in obj.entries) else ""
            sink.error("PL108", f"{obj.path} carries LTO-IR for {t.base}{also}, but contract '{c.name}' targets {arch} "
                       f"and not {t.base}: linked from the {t.base} IR, the code that needs {arch} features (wgmma, "
                       "setmaxnreg) would trap", c.at(f"/targets/archs/{i}"), related=(Location(file=obj.path),),
                       hint=f"build it with -gencode arch=compute_{arch[3:]},code=lto_{arch[3:]} only "
                       f"(`pipelink build` does), not with -arch={arch} -dlto")
            ok = False
    return ok


def family_ir_only(comp: Component, arch: str, sink: DiagnosticSink) -> None:
    """A link for an arch-specific target (sm_90a) that takes an object's family IR (sm_90) where its contract lists
    both targets, said as a note (PL199). nvJitLink links sm_90 LTO-IR into an sm_90a kernel, and the contract, listing
    sm_90, says that code is the component's for this hardware: the object is taken. But the kernel gets the code
    compiled without the sm_90a features, not what the source keeps for sm_90a (`__CUDA_ARCH_FEAT_SM90_ALL`), which a
    contract listing sm_90a promises and an object built with `--arch sm_90` lacks. A contract listing sm_90 alone
    promises no such code (nothing said); one listing sm_90a without sm_90 refuses sm_90 IR (PL108)."""
    t, c, obj = TARGETS.get(arch), comp.contract, comp.obj
    if t is None or t.base == arch or arch not in c.targets.archs or t.base not in c.targets.archs:
        return
    ltoir = {e.arch for e in obj.entries if e.kind == "ltoir"}
    if arch in ltoir or None in ltoir or t.base not in ltoir:  # raw LTO-IR: its arch is not known
        return
    feature = f"__CUDA_ARCH_FEAT_SM{t.base[3:]}_ALL"  # sm_90 -> __CUDA_ARCH_FEAT_SM90_ALL
    sink.note("PL199", f"{obj.path} holds LTO-IR for {t.base}, not for {arch}, which contract '{c.name}' also lists: "
              f"the {arch} link takes the {t.base} IR, so the kernel has the component's {t.base} code, without what "
              f"its source keeps for {arch} (#if {feature})",
              c.at(f"/targets/archs/{c.targets.archs.index(arch)}"), related=(Location(file=obj.path),),
              hint=f"build it for {arch} too (`pipelink build` without --arch: every target the contract lists) to "
              f"link its {arch} code; where the source keeps none, the kernel is the same")


def probe_symbols(comp: Component, arch: str, sink: DiagnosticSink) -> None:
    """The object's entry symbols (the entry, its load and prefetch entries) and contract marker, each with a
    diagnostic located at the contract field naming it if missing."""
    c, obj = comp.contract, comp.obj
    symbols = c.symbol_pointers()
    try:  # one probe link for a good object; one per symbol to say what is wrong with a bad one
        if toolchain.probe_entry_and_marker(obj.link_input(), [s for s, _ in symbols], marker_symbol(c), arch):
            return
    except toolchain.ToolchainError:
        pass
    for symbol, pointer in symbols:
        if not check_entry_symbol(obj, symbol, arch, sink, pointer=pointer, contract_file=c.source.file):
            return
    check_marker(comp, arch, sink)


def warn_other_abi(components, arch: str, sink: DiagnosticSink) -> None:
    """PL190 for each object that defines no marker of this pipelink's component ABI: built against another
    <pipelink/component.h>, its entry takes another pl::Tile than the glue passes, and LTO does not inline it.
    A probe link each, so only where the kernel kept a call (verify.py): nvcc's LTO-IR is compressed, so the
    marker cannot be looked up in the object's bytes, and a good link pays nothing for the check."""
    for comp in components:
        c, obj = comp.contract, comp.obj
        if obj is None:
            continue
        try:
            defined, _ = toolchain.probe_device_symbol(obj.link_input(), abi_marker_symbol(c), arch, kind="variable")
        except toolchain.ToolchainError:
            continue
        if not defined:
            sink.warning("PL190", f"{obj.path} was not built against this pipelink's <pipelink/component.h> (component "
                         f"ABI {component_abi()}: it defines no {abi_marker_symbol(c)}): its entry takes another "
                         "pl::Tile than the glue passes, so LTO does not inline it and the kernel is slower (the link "
                         "is correct: fields are only added at the end of pl::Tile)", c.at("/"),
                         related=(Location(file=obj.path),),
                         hint="rebuild the object with this pipelink (`pipelink build`, or `pipelink header` and "
                              "recompile)")


def check_marker(comp: Component, arch: str, sink: DiagnosticSink) -> None:
    """The object must define the marker whose name carries its contract's hash."""
    c, obj = comp.contract, comp.obj
    marker = marker_symbol(c)
    try:
        defined, _ = toolchain.probe_device_symbol(obj.link_input(), marker, arch, kind="variable")
    except toolchain.ToolchainError as exc:
        sink.error("PL008", f"could not run the nvJitLink probe for '{marker}': {exc}", Location(file=obj.path))
        return
    if defined:
        return
    prefix = symbol_prefix(c) + "contract__"
    others = [s[len(prefix):] for s in obj.ptx_symbols if s.startswith(prefix)]
    if others:
        why = (f"it was compiled against contract hash {others[0]}, but the contract it ships with has hash "
               f"{c.hash[:MARKER_HEX]}")
    else:
        why = (f"it defines no '{marker}', so it was not compiled against this contract's header "
               f"(hash {c.hash[:MARKER_HEX]})")
    sink.error("PL049", f"{obj.path}: {why}", c.at("/"), related=(Location(file=obj.path),))
