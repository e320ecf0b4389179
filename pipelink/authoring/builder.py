"""`pipelink build`: compile a component against its contract and embed the contract.

The flags that must agree across components come from the contract, the header comes from the
contract, and the contract rides in the object's non-loaded `.pipelink.contract` section, so an
object can never travel without the contract it was compiled against.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from .. import toolchain
from ..core.checks import check_set
from ..core.diagnostics import DiagnosticSink, Location
from ..core.model import Contract
from ..formats.inputs import SOURCE_SECTION, USAGE_SECTION, embed_contract
from ..formats.outputs import STDOUT, Input, Output, check_outputs, special_file, write_outputs
from . import build_cache
from .header import generate_header, pipelink_include_dir  # noqa: F401  (the include folder's owner)


@dataclass
class BuildOptions:
    archs: tuple[str, ...] | None = None   # None: every arch the contract lists
    include_dirs: tuple[str, ...] = ()
    defines: tuple[str, ...] = ()
    extra_nvcc: tuple[str, ...] = ()
    optimize: str = "-O3"
    verbose: bool = False
    timeout_s: float = 1200.0  # a compile past it is killed (PL019): an #include that never ends must not hang CI
    werror: bool = False       # a warning refuses the build (nothing written), as an error would
    nvcc_log: list[str] = field(default_factory=list)


def cutlass_include_dir() -> Path | None:
    """The CUTLASS/CuTe headers of the pinned `nvidia-cutlass` wheel, found without importing it."""
    import importlib.util
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "source" / "include"
    return path if (path / "cute").is_dir() else None


# What CUTLASS/CuTe code needs to compile, in every component build.
COMMON_NVCC = ("--expt-relaxed-constexpr",)


def library_includes() -> list[str]:
    """Include folders of the libraries every component build may use (CUTLASS/CuTe where installed)."""
    cutlass = cutlass_include_dir()
    return [f"-I{cutlass}"] if cutlass is not None else []


def component_cflags() -> list[str]:
    """What every component build gets besides its contract's flags and header: pipelink's headers, the
    pinned toolchain's CUDA headers (runtime, CCCL), CUTLASS/CuTe where installed, and the common flags.
    `pipelink build` compiles with these and `pipelink config --cflags` prints them, so a component built
    with one's own nvcc sees the same headers. Raises ToolchainError where the toolchain is missing."""
    return [f"-I{pipelink_include_dir()}", *(f"-I{d}" for d in toolchain.cuda_include_dirs()), *library_includes(),
            *COMMON_NVCC]


def one_unit_nvcc_command(target: str, flags, source: Path, output: Path) -> list[str]:
    """nvcc for the one-unit control: what `pipelink build` gives every component (device code only, the same -gencode,
    contract flags and component_cflags), for one translation unit that needs no generated header
    (monolithic.py inlines them)."""
    return [str(toolchain.nvcc_path()), "-fatbin", "-rdc=true", "-std=c++17", BuildOptions().optimize, gencode(target),
            *flags.nvcc_options(), *component_cflags(), str(source), "-o", str(output)]


def gencode(arch: str) -> str:
    num = arch[3:]
    return f"-gencode=arch=compute_{num},code=lto_{num}"


def nvcc_command(contract: Contract, source: Path, output: Path, header_dir: Path, opts: BuildOptions) -> list[str]:
    """Device code only (`-fatbin -rdc=true`): a component's host side never runs, and skipping the
    host pass saves most of a CuTe-heavy epilogue's build (1.3 s instead of 3.8 s on 2 cores), which
    is what a relink after an epilogue change costs. `wrap_fatbin` makes the object.

    The source is named by its file name alone, for nvcc run in the source's folder (`nvcc_cwd`, with `nvcc_env`): nvcc
    puts the source's path as given into the LTO-IR, so `../x.cu` and `x.cu` had made different objects of one source.
    Its full path, which nvcc hands cicc as well, is replaced by the component's name (`-Xcicc`, after nvcc's own):
    cicc names internal symbols after a hash of it (the module id), so a copy of the source in another folder had
    made other bytes. Not the file name: nvcc splits an -Xcicc value at commas and runs cicc through sh, unquoted
    (`c(2).cu` is a syntax error there); the name is an identifier, and unique in a link."""
    archs = dict.fromkeys(opts.archs or contract.targets.archs)  # a target given twice is built once
    cmd = [str(toolchain.nvcc_path()), "-fatbin", "-rdc=true", "-std=c++17", opts.optimize, *map(gencode, archs),
           *contract.targets.flags.nvcc_options(),
           f"-I{header_dir}", f"-I{nvcc_cwd(source)}", *component_cflags(),
           # the header by a fixed macro name: one source may serve several contracts (e.g. tile shapes)
           f'-DPIPELINK_HEADER="{contract.name}.pipelink.h"',
           "-Xcicc", "--orig_src_path_name", "-Xcicc", f"{contract.name}.cu"]
    cmd += [f"-I{os.path.abspath(d)}" for d in opts.include_dirs]  # as the command's folder resolves them: the
    # cache key then names the folders, not the spelling (a relative -I from another folder had hit the cache)
    cmd += [f"-D{d}" for d in opts.defines]
    cmd += list(opts.extra_nvcc)
    cmd += [source.name if not source.name.startswith("-") else f"./{source.name}", "-o", os.path.abspath(output)]
    return cmd


def nvcc_cwd(source: Path) -> str:
    """The folder nvcc_command's nvcc runs in: the source's, absolute."""
    return os.path.abspath(source.parent)


def nvcc_env(scratch: Path) -> dict:
    """The environment nvcc_command's nvcc runs in: toolchain.nvcc_env, with PWD=/proc/self/cwd. cicc takes its working
    folder from PWD where PWD names the folder it runs in (else from getcwd), and writes it into the LTO-IR (the
    compile unit's folder): the source's folder had reached the object's bytes. /proc/self/cwd names, for every
    process, the folder it runs in; where there is no /proc, cicc finds the folder as before."""
    return {**toolchain.nvcc_env(scratch=scratch), "PWD": "/proc/self/cwd"}


def include_dirs(cmd: list[str]) -> list[str]:
    """The -I folders of an nvcc command, in its search order."""
    return [a[2:] for a in cmd if a.startswith("-I") and len(a) > 2]


def wrap_fatbin(fatbin: Path, obj: Path) -> None:
    """A relocatable host object whose `__nv_relfatbin` section holds `fatbin` (where `nvcc -dc`
    puts relocatable device code), for the contract to be embedded beside it. Raises
    toolchain.ToolchainError if objcopy fails."""
    objcopy = toolchain.objcopy_path()
    if objcopy is None:
        raise toolchain.ToolchainError("objcopy (GNU binutils) was not found on PATH")
    proc = subprocess.run([objcopy, "-I", "binary", "-O", "elf64-x86-64", "-B", "i386:x86-64",
                           "--rename-section", ".data=__nv_relfatbin,alloc,load,readonly,data,contents",
                           fatbin.name, str(obj)], capture_output=True, text=True, errors="replace", cwd=fatbin.parent)
    if proc.returncode != 0:
        raise toolchain.ToolchainError(f"objcopy could not wrap the fatbin {fatbin}", (proc.stderr or proc.stdout).strip())


# `pipelink check` of inputs (files or NamedBytes) for a target (None: check's default), with or without the
# conformance probe, into a sink; returns the targets it checked. The linker's passes run it, a layer above the
# build: the command and the API hand it in (api.check_objects) so that the build refuses what check refuses.
ObjectCheck = Callable[[list, DiagnosticSink, "str | None", bool], list]


def build_component(contract: Contract, contract_bytes: bytes, source: str | Path, output: str | Path,
                    sink: DiagnosticSink, opts: BuildOptions | None = None, *,
                    contract_file: str | None = "", check_object: ObjectCheck | None = None) -> bool:
    """Compile `source` into `output` (a host object holding the `-dlto` fatbin and the contract; `-`:
    stdout). Refuses a contract `pipelink check` refuses, and an output that is one of the inputs.
    `contract_file`: the file the contract was read from ("": its source's name; None: it came as bytes,
    whose display name is no file the output could replace).

    Writes `output` only on success, atomically. An object the build cache holds for the same inputs
    (build_cache.py) is taken from it instead of compiling again.
    """
    opts = opts or BuildOptions()
    source = Path(source)
    output = Output(str(output), "object", "-o", binary=True, hint="write the object elsewhere (-o PATH)")
    if contract_file == "":
        contract_file = contract.source.file
    inputs = [Input(str(source), f"the source {source}")]
    if contract_file is not None:
        inputs.append(Input(contract_file, f"the contract {contract_file}"))
    if not check_outputs([output], inputs, sink):
        return False
    if not _options_fit_nvcc(opts, source, sink):
        return False
    from ..formats.inputs import is_contract_file
    if output.path != STDOUT and not special_file(output.path) and is_contract_file(output.path, b"\x7fELF"):
        sink.error("PL001", f"-o {output.path}: pipelink reads a .json file as a contract, so `pipelink check` and "
                   "`link` would not read the object", Location(option=f"-o {output.path[:80]}"),
                   hint="name the object .o (-o PATH)")
        return False
    if not source.is_file():
        why = ("it does not exist" if not source.exists() else "it is a directory" if source.is_dir() else
               "it is not a regular file (a pipe or a device): nvcc reads the source by its path and its "
               "#includes relative to its folder")
        sink.error("PL002", f"cannot read source {source}: {why}", Location(file=str(source)),
                   hint="name the component's .cu file" if source.exists() else None)
        return False
    try:  # the object embeds the source as text: refused before a compile, not after one
        source.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        sink.error("PL002", f"source {source} is not UTF-8 text (byte {exc.start}: {exc.object[exc.start:exc.start + 1]!r}); "
                   "the object embeds its source as text", Location(file=str(source)), hint="save the source as UTF-8")
        return False
    except OSError as exc:
        sink.error("PL002", f"cannot read source {source}: {exc.strerror or exc}", Location(file=str(source)))
        return False
    for arch in opts.archs or ():
        if arch not in contract.targets.archs:
            sink.error("PL034", f"{arch} is not among the contract's targets ({', '.join(contract.targets.archs)})",
                       contract.at("/targets/archs"))
            return False
    before = len(sink.errors)
    for arch in opts.archs or (None,):  # what `pipelink check [--arch A] CONTRACT` checks
        check_set([contract], sink, arch)
    if len(sink.errors) > before:
        return False
    default = check_set([contract], DiagnosticSink(), None)  # the target `check` and `link` take unless told one
    if opts.archs and default not in opts.archs:
        archs = list(dict.fromkeys(opts.archs))
        sink.error("PL012", f"the object would hold LTO-IR for {', '.join(archs)} only, not for {default}, the "
                   "contract's target that `pipelink check` and `link` take unless told another: they would refuse it",
                   Location(option=" ".join(f"--arch {a}" for a in archs)), related=(contract.at("/targets/archs"),),
                   hint=f"build for {default} too (--arch {default}), or drop --arch (every target the contract lists)")
        return False
    with tempfile.TemporaryDirectory(prefix="pipelink-build-") as tmp:
        tmp = Path(tmp)
        # The header's own name for its lines, not the scratch folder's random path: through the compile's line
        # markers that path reached the object, so every build of one component differed in bytes.
        header = f'#line 2 "{contract.name}.pipelink.h"\n' + generate_header(contract)
        (tmp / f"{contract.name}.pipelink.h").write_text(header)
        cmd = nvcc_command(contract, source, tmp / "component.fatbin", tmp, opts)
        try:
            k = build_cache.key(cmd, tmp, header, contract_bytes, source)
        except (OSError, toolchain.ToolchainError):
            k = None
        data = build_cache.lookup(k, include_dirs(cmd)) if k else None
        compiled = data is None
        if not compiled:
            opts.nvcc_log.append(f"(cached: {shlex.join(cmd)})")
            read = build_cache.recorded_files(k)
        else:
            began = time.time()  # a file the compile read, written since, keeps the object out of the cache
            data = _compile(contract, contract_bytes, source, cmd, tmp, output.path, opts, sink)
            if data is None:
                return False
            try:
                read = build_cache.files_read(tmp / "component.d", tmp, nvcc_cwd(source))
            except OSError:
                read = []
        if not _conforms(contract, data, opts, _object_name(output, source), sink):
            return False
        stale = [p for p in read if Path(p).name == f"{contract.name}.pipelink.h"]
        if stale:  # `#include "x.pipelink.h"` looks beside the source first: a kept copy there hid the generated one
            sink.error("PL198", f"the source read {stale[0]}, a copy of the header the build generates from contract "
                       f"'{contract.name}', instead of the generated one: the object would follow the copy's contract",
                       Location(file=stale[0]), related=(Location(file=str(source)),))
            return False
        if not _checks_clean(contract, data, output, source, opts, read, compiled, check_object, sink):
            return False
        if compiled and k:  # only objects the build accepts are kept
            build_cache.store(k, data, tmp / "component.d", tmp, began, include_dirs(cmd), nvcc_cwd(source))
    if opts.werror:
        sink.warnings_as_errors()
        if sink.has_errors:
            return False
    # What the source includes is known only now: the object must not replace one of those files either.
    if not check_outputs([output], [Input(p, f"{p}, which the source includes") for p in read], sink):
        return False
    return write_outputs({output.path: data}, sink)  # its missing folders made, as every command's


# x.cu(12): error: ... (the path up to the first `(N): ` that ends it: a name may hold parentheses and spaces)
_NVCC_AT = re.compile(r"^(?P<path>[^\s].*?)\((?P<line>\d+)\)(?=: )", re.M)
_NVCC_IN = re.compile(r'compilation of "(?P<path>[^"]+)"')  # N errors detected in the compilation of "x.cu".
_NVCC_OF = re.compile(r"(?<=\bat line )(?P<line>\d+) of (?P<path>[^\s\"]+)")  # ... at line 12 of x.cu


def _paths_as_given(log: str, source: Path) -> str:
    """nvcc runs in the source's folder (nvcc_cwd), so it names files relative to it: put them back as the command
    was given them (`comp/x.cu(12): error`), so that an editor or a CI annotation finds the file. Only a name of a
    file there is: the generated header's lines carry its own name (it lives in a scratch folder), which is no file
    beside the source."""
    given = os.path.dirname(str(source))
    if not given:
        return log
    cwd = nvcc_cwd(source)

    def fix(path: str) -> str:
        if os.path.isabs(path) or not os.path.exists(os.path.join(cwd, path)):
            return path
        return os.path.normpath(os.path.join(given, path))

    log = _NVCC_AT.sub(lambda m: f"{fix(m['path'])}({m['line']})", log)
    log = _NVCC_IN.sub(lambda m: f'compilation of "{fix(m["path"])}"', log)
    return _NVCC_OF.sub(lambda m: f"{m['line']} of {fix(m['path'])}", log)


def _object_name(output: Output, source: Path) -> str:
    return output.path if output.path != STDOUT else source.stem + ".o"


def _checks_clean(contract: Contract, data: bytes, output: Output, source: Path, opts: BuildOptions, read: list[str],
                  probed: bool, check_object: ObjectCheck | None, sink: DiagnosticSink) -> bool:
    """What `pipelink check OUTPUT` (and `--arch A` for each target asked for, and for each target the contract lists
    that takes the object through its family's IR: sm_90a from sm_90, PL199) says of the object about to be
    written, said by the build, which refuses what check refuses: whatever made the object differ from its
    contract (a define that drops the marker, a copy of an older header included) is found as check finds it.
    A sidecar contract beside the output would be a second contract (PL017). `probed`: the object was compiled
    here (its probe is this process's); a cache hit was checked when stored, so its probe is not run again."""
    from ..core.targets import TARGETS
    from ..formats.inputs import NamedBytes, find_contract, read_bytes
    from .header import symbol_prefix
    built = opts.archs or ()
    served = [a for a in contract.targets.archs if built and a not in built and a in TARGETS and TARGETS[a].base in built]
    name = _object_name(output, source)
    found = DiagnosticSink()
    if output.path != STDOUT and not special_file(output.path):
        for obj in read_bytes(data, name, DiagnosticSink()):
            find_contract(replace(obj, file=output.path), found)
    checked: set[str | None] = set()
    for arch in (None, *built, *served) if check_object is not None else ():
        if found.errors:
            break
        if arch not in checked:
            checked.update(check_object([NamedBytes(name, data)], found, arch, probed))
    said = {_finding(d) for d in sink.items}
    marker = symbol_prefix(contract) + "contract__"
    for d in found.items:
        if _finding(d) in said:
            continue  # the build said it already (its contract checks, its probe's record)
        said.add(_finding(d))
        copy = _header_copy(read, source, marker) if d.code == "PL049" else None
        if copy is not None:  # the marker came from a copy of the generated header under another name: name it
            sink.error("PL198", f"the source read {copy[0]}, a copy of the header generated from contract "
                       f"'{contract.name}' with hash {copy[1]}, instead of the one generated from its contract (hash "
                       f"{contract.hash[:len(copy[1])]}): the object would follow the copy's contract",
                       Location(file=copy[0]), related=(Location(file=str(source)), contract.at("/")),
                       hint=f"include the generated header (#include \"{contract.name}.pipelink.h\", or "
                       "#include PIPELINK_HEADER) and delete the copy: the build generates it from the contract")
        elif d.code == "PL049":  # check's hint (rebuild it) is what is being done: say what undid the marker
            sink.extend([replace(d, hint="the source or a header it includes defines PL_NO_CONTRACT_MARKER, or "
                                 f"includes a header generated from another contract: include \"{contract.name}"
                                 ".pipelink.h\" (or PIPELINK_HEADER), which the build generates")])
        else:
            sink.extend([d])
    return not found.errors


def _finding(d) -> tuple:
    """What a diagnostic says, whichever file it names: the build's checks name the contract file, check's the
    object's embedded contract, and the same finding reads the same at the same field."""
    return (d.severity, d.code, d.location.component, d.location.pointer) if d.location.pointer else \
        (d.severity, d.code, d.message)


def _header_copy(read: list[str], source: Path, marker: str) -> tuple[str, str] | None:
    """A file the compile read, not the source, that defines a contract marker of the component (`marker`, its
    prefix): a copy of a header generated from a contract of its name; with the hash its marker carries."""
    for path in read:
        try:
            found = not os.path.samefile(path, source) and re.search(re.escape(marker).encode() + rb"([0-9a-f]+)",
                                                                       Path(path).read_bytes())
        except OSError:
            continue
        if found:
            return path, found[1].decode()
    return None


def _conforms(contract: Contract, data: bytes, opts: BuildOptions, name: str, sink: DiagnosticSink) -> bool:
    """The object's code against its contract, from the probe record the build embedded (conformance.py): what
    `pipelink check` refuses is refused here too (its own __shared__ PL140, a named barrier id nobody assigned
    PL142, __syncthreads undeclared PL143), and what it warns of is said here too (a barrier id computed at run
    time, a local array in local memory, a call left in the code), once for all targets. An object without a record
    (one that does not link alone) passes: the link judges it."""
    from ..formats.inputs import read_bytes
    from .conformance import compare, recorded_usage
    objs = read_bytes(data, name, DiagnosticSink())
    if len(objs) != 1:
        return True
    found = DiagnosticSink()
    for arch in opts.archs or contract.targets.archs:
        recorded = recorded_usage(contract, objs[0], arch)
        if recorded is not None:
            compare(contract, name, *recorded, found)
    seen = set()
    for d in found.items:  # each target's probe says the same of the same code: once
        if d.render() not in seen:
            seen.add(d.render())
            sink.extend([d])
    return not found.errors


def _probe_record(contract: Contract, data: bytes, archs, name: str, sink: DiagnosticSink,
                  source: str | None = None) -> bytes | None:
    """Each target's probe of the object just compiled, as the record the build embeds (conformance.py); b"" where
    the object does not link alone and still defines its entries (NVSHMEM's calls: left to the link); None after
    PL014 (an entry the object does not define: asked of nvJitLink as the link asks)."""
    from ..core.model import Component
    from ..formats.inputs import read_bytes
    from .conformance import probe, usage_record
    objs = read_bytes(data, name, DiagnosticSink())
    if len(objs) != 1:
        return b""
    try:
        results = {arch: probe(Component(contract, objs[0]), arch) for arch in archs}
    except toolchain.ToolchainError:  # no nvdisasm: the object is built without a record, as one built elsewhere
        results = {}
    # The probe calls the entry (and a prefetch that carries words to it); a load or prefetch entry it does not call
    # could be misspelt and still probe clean: each is asked of nvJitLink as the link asks.
    uncalled = {contract.entry.load, None if contract.entry.carry else contract.entry.prefetch} - {None}
    if not results or any(r.usage is None for r in results.values()):
        if not _defines_its_entries(contract, data, archs[0], name, sink, source=source):
            return None
    elif uncalled and not contract.entries and not _defines_its_entries(contract, data, archs[0], name, sink, uncalled,
                                                                        source):
        return None
    return usage_record(contract, objs[0], results) if any(r.usage for r in results.values()) else b""


def _defines_its_entries(contract: Contract, data: bytes, arch: str, name: str, sink: DiagnosticSink,
                         only: set | None = None, source: str | None = None) -> bool:
    """The object defines every entry its contract names (`extern "C" __device__`), asked of nvJitLink as the link
    does: a misspelt or missing entry is PL014 here, at the build, not at the first check or link of the object."""
    from ..formats.inputs import check_entry_symbol, read_bytes
    objs = read_bytes(data, name, DiagnosticSink())
    if len(objs) != 1:
        return True  # the link's own checks say what is wrong with it
    ok = True
    for symbol, pointer in contract.symbol_pointers():
        if only is not None and symbol not in only:
            continue
        probe = DiagnosticSink()
        check_entry_symbol(objs[0], symbol, arch, probe, pointer=pointer, contract_file=contract.source.file,
                           source=source)
        missing = [d for d in probe.items if d.code == "PL014"]
        sink.extend(missing)  # a probe that cannot link the object alone (NVSHMEM's calls) is the link's to judge
        ok = ok and not missing
    return ok


# Macros the build and its generated header own: a -D of one builds an object against another contract than its own.
_BUILD_MACROS = {"PL_NO_CONTRACT_MARKER": "drops the contract marker the generated header defines",
                 "PIPELINK_HEADER": "names another header than the one the build generates from the contract"}


def _options_fit_nvcc(opts: BuildOptions, source: Path, sink: DiagnosticSink) -> bool:
    """-I and -D values nvcc reads as given: nvcc splits an option's value at commas (`-D A=1,B=2` defines two
    macros, `-I a,b` names two folders), and an empty one is no folder or macro. PL001 at the option. A -D of a
    macro the build owns (_BUILD_MACROS) is PL001 too."""
    from ..core.model import is_identifier
    ok = True
    for flag, values in (("-I", opts.include_dirs), ("-D", opts.defines)):
        for value in values:
            why = ("is empty" if not value else "holds a comma, where nvcc splits an option's value" if "," in value
                   else "does not start with a macro name" if flag == "-D" and not is_identifier(value.split("=")[0])
                   else None)
            if why:
                sink.error("PL001", f"{flag} {value[:80]!r} {why}", Location(option=f"{flag} {value[:80]}"),
                           hint=("name a folder (one without a comma: a link to it)" if flag == "-I" else
                                 "write NAME or NAME=VALUE, VALUE without a comma (a macro of the source can hold one)"))
                ok = False
    for value in opts.defines:
        name = value.split("=")[0]
        if name in _BUILD_MACROS:
            sink.error("PL001", f"-D {name} {_BUILD_MACROS[name]}: `pipelink check` would refuse the object (PL049)",
                       Location(option=f"-D {value[:80]}"),
                       hint="drop it: the build compiles its one source against the header it generates from the "
                            "contract, marker and all (a component of several translation units is built with one's "
                            "own nvcc: `pipelink config --cflags`)")
            ok = False
    if "," in str(source.parent):  # the build passes the source's folder as an -I
        sink.error("PL001", f"the source's folder {str(source.parent)[:80]!r} holds a comma, where nvcc splits an "
                   "option's value", Location(file=str(source)), hint="build from a folder without a comma")
        ok = False
    return ok


def _compile(contract: Contract, contract_bytes: bytes, source: Path, cmd: list[str], tmp: Path, out_path: str,
             opts: BuildOptions, sink: DiagnosticSink) -> bytes | None:
    """Run nvcc (`cmd` writes tmp/component.fatbin; -MD lists what it reads into tmp/component.d) and wrap
    its fatbin into a host object with the contract and the source embedded; None after a diagnostic."""
    compile_cmd = [*cmd, "-MD", "-MF", os.path.abspath(tmp / "component.d")]  # what it reads: the cache's dependencies
    # as a shell reads it back, in the folder and with the PWD it runs with (the same bytes when pasted)
    opts.nvcc_log.append(f"(cd {shlex.quote(nvcc_cwd(source))} && PWD=/proc/self/cwd {shlex.join(compile_cmd)})")
    try:
        proc = toolchain.run_bounded(compile_cmd, nvcc_env(tmp), opts.timeout_s,
                                     cwd=nvcc_cwd(source))
    except OSError as exc:
        sink.error("PL008", f"cannot run nvcc: {exc}", Location(file=str(source)))
        return None
    except (subprocess.TimeoutExpired, toolchain.OutOfMemory) as exc:
        why = (f"did not finish in {opts.timeout_s:g} s" if isinstance(exc, subprocess.TimeoutExpired) else
               f"took more memory than a compile may ({toolchain.memory_limit() >> 30} GiB)")
        sink.error("PL019", f"nvcc {why} compiling component '{contract.name}' and was stopped",
                   Location(file=str(source), component=contract.name),
                   hint="a source that #includes a file that never ends (a device such as /dev/zero, a FIFO) never "
                   "compiles; a slow but finite one needs a longer --timeout")
        return None
    if proc.returncode != 0:
        log = _paths_as_given((proc.stderr + proc.stdout).strip(), source)
        if _names_the_toolkit_defines(contract, source, cmd, tmp, sink, opts.timeout_s) or \
                _names_the_toolkit_declares(contract, log, sink):
            return None
        entries = [(sym, ptr) for sym, ptr in contract.symbol_pointers() if sym in log]
        clash = entries and any(w in log for w in ("overloaded function", "incompatible", "conflicting", "linkage"))
        sink.error("PL019", f"nvcc could not compile component '{contract.name}':\n{_indent(log)}",
                   Location(file=str(source), component=contract.name),
                   # the generated header declares each entry from the contract: a signature that differs is the
                   # contract's parameters (types, order, const) against the source's
                   related=(contract.at(entries[0][1].rsplit("/", 1)[0] + "/params") if entries[0][1].startswith(
                       "/entry/") else contract.at(entries[0][1]),) if clash else (),
                   hint=(f"the source's '{entries[0][0]}' differs from the declaration the header generates from the "
                         f"contract's {'params' if contract.entries else 'entry.params'}: make the types, their order and "
                         "const match") if clash else None)
        return None
    try:
        text = source.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        sink.error("PL002", f"cannot read source {source} as UTF-8 text: {exc}", Location(file=str(source)))
        return None
    try:
        obj, staged = tmp / "component.o", tmp / "with-contract.o"
        wrap_fatbin(tmp / "component.fatbin", obj)
        sections = {SOURCE_SECTION: json.dumps({"file": source.name, "source": text}).encode()}
        record = _probe_record(contract, obj.read_bytes(), opts.archs or contract.targets.archs,
                               out_path if out_path != STDOUT else source.stem + ".o", sink, text)
        if record is None:
            return None
        if record:
            sections[USAGE_SECTION] = record
        embed_contract(obj, contract_bytes, staged, sections)
        return staged.read_bytes()
    except toolchain.ToolchainError as exc:
        sink.error("PL008", str(exc), Location(file=out_path))
    except OSError as exc:
        sink.error("PL007", f"cannot stage the object: {exc.strerror or exc}", Location(file=out_path))
    return None


def _names_the_toolkit_defines(contract: Contract, source: Path, cmd: list[str], tmp: Path, sink: DiagnosticSink,
                               timeout_s: float) -> bool:
    """Where an entry symbol or a parameter of the contract is a macro of the headers the generated header or the
    source includes (NULL, assert, CUDART_VERSION), nvcc's errors quote what it expands to, not the name: ask nvcc
    which of the names are macros after those #include lines (one more compile, on this failure path only) and say
    so at each name, PL188. True when it found one."""
    from ..core.identifiers import contract_names, macro_probe, macros_in_probe_log
    header = (tmp / f"{contract.name}.pipelink.h").read_text()
    try:
        text = source.read_text(errors="replace")
    except OSError:
        text = ""
    includes = [line for line in (header + "\n" + text).splitlines() if line.lstrip().startswith("#include")
                and "PIPELINK_HEADER" not in line and ".pipelink.h" not in line]
    names = contract_names(contract)
    probe = tmp / "names.cu"
    probe.write_text(macro_probe("\n".join(dict.fromkeys(includes)), [n for n, _, _ in names]))
    # the build's own command (flags, -I, -D; it ends `SOURCE -o OUTPUT`) on the probe: the same headers and macros
    probe_cmd = cmd[:-3] + [str(probe), "-o", str(tmp / "names.fatbin")]
    try:
        proc = toolchain.run_bounded(probe_cmd, nvcc_env(tmp), timeout_s, cwd=nvcc_cwd(source))
    except (OSError, subprocess.TimeoutExpired, toolchain.OutOfMemory):
        return False
    macros = macros_in_probe_log(proc.stderr + proc.stdout) if proc.returncode else set()
    for name, pointer, what in names:
        if name in macros:
            sink.error("PL188", f"{what} '{name}' is a macro the CUDA headers (or the source's includes) define",
                       contract.at(pointer), hint="rename it in the contract (and the code)")
    return bool(macros)


def _names_the_toolkit_declares(contract: Contract, log: str, sink: DiagnosticSink) -> bool:
    """Where nvcc's errors in the generated header quote an entry symbol or a parameter of the contract, the name is
    one the toolkit's headers declare at global scope (printf, sqrtf, ...): PL188 at the name. True when it did."""
    from ..core.identifiers import names_the_toolkit_declares
    found = names_the_toolkit_declares(contract, log, within=f"{contract.name}.pipelink.h")
    for name, pointer, what, line in found:
        sink.error("PL188", f"{what} '{name}' is a name the CUDA headers declare ({line})", contract.at(pointer),
                   hint="rename it in the contract and the code")
    return bool(found)


def _indent(text: str, limit: int = 40) -> str:
    lines = text.splitlines()
    if len(lines) > limit:
        lines = lines[:limit] + [f"... ({len(lines) - limit} more lines)"]
    return "\n".join("    " + ln for ln in lines)
