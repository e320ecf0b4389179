"""Reading the files users hand to the linker: host objects, archives, fatbins, LTO-IR, cubins.

No GPU is needed, and nothing here raises for bad input: every problem becomes a located
`Diagnostic` in the sink (PL002-PL005 for files that cannot be read as an input, PL010-PL018 for
inputs that hold the wrong thing). The format is told by magic bytes, never by the file name.
The byte layouts themselves live in `pipelink.formats.fatbin`.
"""
from __future__ import annotations

import difflib
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import toolchain
from ..core.diagnostics import DiagnosticSink, Location
from ..core.files import read_input_bytes
from .fatbin import (AR_MAGIC, ELF_MAGIC, EM_CUDA, FATBIN_MAGIC_BYTES, LTOIR_MAGIC, THIN_AR_MAGIC, CorruptError,
                     FatbinEntry, UnsupportedError, ar_members, parse_elf, parse_fatbin, ptx_symbols)
from ..core.jsonread import BOM
from ..core.model import is_identifier
from ..core.targets import ltoir_archs_for

OBJECT_SUFFIXES = {".o", ".obj", ".a", ".lib", ".ltoir", ".fatbin", ".cubin"}


def is_contract_file(path: str, data: bytes) -> bool:
    """A `.json` file, or a JSON document not named like an object. (`x.o` holding JSON is a bad object,
    not a contract; `c.json` holding anything is a contract, which the JSON reader diagnoses.)"""
    suffix = Path(path).suffix.lower()
    if suffix in OBJECT_SUFFIXES:
        return False
    return suffix == ".json" or data.removeprefix(BOM).lstrip()[:1] in (b"{", b"[")


__all__ = ["FatbinEntry", "InputObject", "NamedBytes", "read_input", "read_bytes", "require_ltoir", "sidecar_contract_path",
           "find_contract", "embed_contract", "check_entry_symbol", "CONTRACT_SECTION"]

CONTRACT_SECTION = ".pipelink.contract"
SOURCE_SECTION = ".pipelink.source"  # the component's source, for the one-unit control
USAGE_SECTION = ".pipelink.usage"    # what the build's probe found the code uses (authoring/conformance.py)
FATBIN_SECTIONS = ("__nv_relfatbin", ".nv_fatbin")  # nvcc -dc, and whole-program nvcc -c

_CONTRACT_HINT = ("contracts go to `pipelink check`, or next to their object as `<object>.contract.json`; "
                  "the linker takes objects from `nvcc -dc -dlto`, archives of them, fatbins and LTO-IR")


@dataclass(frozen=True)
class NamedBytes:
    """An input already in memory; `name` stands for its file in diagnostics and the manifest.
    It has no file beside it, so its contract must be embedded (no sidecar)."""
    name: str
    data: bytes = field(repr=False)


@dataclass
class InputObject:
    path: str                 # as given; archive members "lib.a(m.o)"
    format: str               # "host-object" | "fatbin" | "ltoir" | "cubin"
    link_kind: str            # the toolchain.LinkInput kind: "object" | "fatbin" | "ltoir" | "cubin"
    data: bytes = field(repr=False)
    entries: list[FatbinEntry] = field(default_factory=list)
    ptx_symbols: list[str] = field(default_factory=list)
    embedded_contract: bytes | None = None
    file: str | None = None   # the file on disk it came from ("lib.a" for a member); None for bytes
    embedded_source: bytes | None = None  # JSON {"file", "source"} written by `pipelink build`
    # A host object's one fatbin: what nvJitLink is given (as a fatbin), so it need not find the
    # fatbin through the host code's registration records, which `pipelink build`'s objects lack.
    device_fatbin: bytes | None = field(default=None, repr=False)
    embedded_usage: bytes | None = field(default=None, repr=False)  # USAGE_SECTION, where `pipelink build` wrote it

    def ltoir_archs(self) -> list[str]:
        """Archs of the LTO-IR entries; raw LTO-IR (arch unknown) contributes none."""
        return sorted({e.arch for e in self.entries if e.kind == "ltoir" and e.arch})

    def link_input(self) -> toolchain.LinkInput:
        if self.device_fatbin is not None:
            return toolchain.LinkInput("fatbin", self.device_fatbin, self.path)
        return toolchain.LinkInput(self.link_kind, self.data, self.path)


# --- reading ---------------------------------------------------------------------------------

def read_input(path: str | os.PathLike, sink: DiagnosticSink) -> list[InputObject]:
    """The objects in the file at `path` (several for an archive); [] with diagnostics on error."""
    name = os.fspath(path)
    try:
        data = read_input_bytes(name)
    except OSError as exc:
        reason = "it is a directory" if isinstance(exc, IsADirectoryError) else (exc.strerror or str(exc))
        sink.error("PL002", f"cannot read {name}: {reason}", Location(file=name))
        return []
    return _read(data, name, name, sink)


def read_bytes(data: bytes, name: str, sink: DiagnosticSink) -> list[InputObject]:
    """Like read_input, for bytes already in memory; `name` stands for the file in diagnostics."""
    return _read(bytes(data), name, None, sink)


def _read(data: bytes, name: str, file: str | None, sink: DiagnosticSink) -> list[InputObject]:
    where = Location(file=name)
    if not data:
        sink.error("PL003", f"{name} is empty (0 bytes)", where)
        return []
    try:
        if data.startswith(ELF_MAGIC):
            return [_read_elf(data, name, file, sink)]
        if data.startswith(AR_MAGIC) or data.startswith(THIN_AR_MAGIC):
            return _read_archive(data, name, file, sink)
        if data.startswith(FATBIN_MAGIC_BYTES):
            entries = parse_fatbin(data)
            return [InputObject(name, "fatbin", "fatbin", data, entries, ptx_symbols(entries), file=file)]
        if data.startswith(LTOIR_MAGIC):
            # NVRTC's raw LTO-IR does not say its arch in a documented place: nvJitLink decides.
            entry = FatbinEntry("ltoir", None, "", False, len(data), payload=data)
            return [InputObject(name, "ltoir", "ltoir", data, [entry], [], file=file)]
    except CorruptError as exc:
        sink.error("PL005", f"{name} is truncated or corrupt: {exc}", where)
        return []
    except UnsupportedError as exc:
        sink.error("PL004", f"{name} is {exc}", where)
        return []
    sink.error("PL004", f"{name} is not an object file: {_describe_unknown(data)}", where,
               hint=_CONTRACT_HINT if _looks_like_text(data) else None)
    return []


def _read_elf(data: bytes, name: str, file: str | None, sink: DiagnosticSink) -> InputObject:
    elf = parse_elf(data)
    if elf.machine == EM_CUDA:  # a device ELF handed over directly
        entry = FatbinEntry("cubin", elf.cubin_arch(), "", False, len(data), payload=data)
        return InputObject(name, "cubin", "cubin", data, [entry], [], file=file)
    if elf.type != 1:
        kind = {2: "an executable", 3: "a shared library"}.get(elf.type, f"an ELF file of type {elf.type}")
        raise UnsupportedError(f"{kind}, not a relocatable object; pass the .o files (or an archive of them)")
    entries: list[FatbinEntry] = []
    blobs = []
    for section in FATBIN_SECTIONS:
        for blob in elf.section_data(data, section):
            try:
                entries.extend(parse_fatbin(blob))
            except CorruptError as exc:
                raise CorruptError(f"in section {section}: {exc}") from None
            blobs.append(blob)
    contracts = elf.section_data(data, CONTRACT_SECTION)
    if len(contracts) > 1:
        sink.error("PL017", f"{name} holds {len(contracts)} {CONTRACT_SECTION} sections", Location(file=name))
    # A contract from a `section(...)`-attributed C array ends in the array's NUL: not JSON.
    contract = contracts[0].rstrip(b"\0") if contracts else None
    sources = elf.section_data(data, SOURCE_SECTION)
    usages = elf.section_data(data, USAGE_SECTION)
    return InputObject(name, "host-object", "object", data, entries, ptx_symbols(entries), contract, file,
                       sources[0] if sources else None, bytes(blobs[0]) if len(blobs) == 1 else None,
                       bytes(usages[0]) if len(usages) == 1 else None)


def _read_archive(data: bytes, name: str, file: str | None, sink: DiagnosticSink) -> list[InputObject]:
    members = ar_members(data)
    if not members:
        sink.error("PL003", f"archive {name} has no members", Location(file=name),
                   hint="rebuild it, e.g. `ar rcs lib.a a.o b.o`")
        return []
    objects = []
    for member, body in members:
        objects.extend(_read(body, f"{name}({member})", file, sink))
    return objects


def _looks_like_text(data: bytes) -> bool:
    head = data[:4096]
    if any(b < 9 or 13 < b < 32 for b in head):  # NUL and other control bytes: binary
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A character cut at the 4 KiB boundary is still text; any other bad byte is not.
        return len(data) > len(head) and exc.reason == "unexpected end of data"
    return True


def _describe_unknown(data: bytes) -> str:
    if _looks_like_text(data):
        text = data[:4096].decode("utf-8", errors="replace").lstrip("\ufeff \t\r\n")
        if text[:1] in "{[":
            return "it looks like JSON (a contract?)"
        if ".version" in text and ".target" in text:
            return "it looks like PTX text; pipelink links LTO-IR (`nvcc -dc -dlto`)"
        return "it looks like text"
    return f"unrecognized format (first bytes: {data[:8].hex(' ')})"


# --- what an input holds ---------------------------------------------------------------------

def require_ltoir(obj: InputObject, arch: str, sink: DiagnosticSink) -> bool:
    """Does `obj` carry LTO-IR that can go into a link for `arch`? If not, say precisely why."""
    where = Location(file=obj.path)
    if not obj.entries:
        what = ("holds host code only: no fatbin entries (no {} section)".format(" or ".join(FATBIN_SECTIONS))
                if obj.format == "host-object" else "is a fatbin with no entries")
        sink.error("PL010", f"{obj.path} {what}", where)
        return False
    ltoir = [e for e in obj.entries if e.kind == "ltoir"]
    if not ltoir:
        what = ("is a cubin for {} (SASS, already compiled)".format(obj.entries[0].arch) if obj.format == "cubin"
                else f"holds {describe_entries(obj.entries)}")
        sink.error("PL011", f"{obj.path} {what} but no LTO-IR", where,
                   hint=f"compile with `nvcc -dc -dlto -arch={arch}`: pipelink links LTO-IR")
        return False
    accepted = ltoir_archs_for(arch)
    usable = [e for e in ltoir if e.arch is None or e.arch in accepted]
    if not usable:
        sink.error("PL012", f"{obj.path} holds LTO-IR for {_and(obj.ltoir_archs())} only, not for {arch}", where,
                   hint=f"rebuild for the target, e.g. `nvcc -dc -dlto -arch={arch}`")
        return False
    debug = [e for e in usable if e.is_debug()]
    if debug:
        sink.error("PL018", f"{obj.path} holds LTO-IR for {debug[0].arch} built with debug device code "
                            f"(options: '{debug[0].options}')", where)
        return False
    return True


_KIND_LABEL = {"cubin": "a cubin", "ptx": "PTX", "ltoir": "LTO-IR"}


def describe_entries(entries: list[FatbinEntry]) -> str:
    """'a cubin and PTX for sm_90' / 'LTO-IR for sm_80; PTX for sm_90' / 'no fatbin entries'."""
    if not entries:
        return "no fatbin entries"
    by_arch: dict[str | None, list[str]] = {}
    for e in entries:
        label = _KIND_LABEL.get(e.kind, f"an entry of kind {e.kind}")
        if label not in by_arch.setdefault(e.arch, []):
            by_arch[e.arch].append(label)
    return "; ".join(f"{_and(labels)} for {arch or 'an unknown arch'}" for arch, labels in by_arch.items())


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


# --- contracts that travel with an object ----------------------------------------------------

_MEMBER = re.compile(r"(?P<archive>.*)\((?P<member>[^()/]+)\)")


def sidecar_contract_path(path: str | os.PathLike) -> Path | None:
    """`<file>.contract.json`, else `<stem>.contract.json`, next to the file (first that exists).

    For an archive member `lib.a(m.o)` the sidecar sits next to the archive: `m.o.contract.json`.
    """
    found = sidecar_candidates(path)
    return found[0] if found else None


def sidecar_candidates(path: str | os.PathLike) -> list[Path]:
    """Both sidecar names that are present next to the file, whatever they are: a directory or a dangling link
    there is a sidecar that cannot be read (PL002), not an absent one."""
    p = Path(path)
    member = _MEMBER.fullmatch(os.fspath(path))
    if member and not p.exists():
        p = Path(member["archive"]).parent / member["member"]
    names = dict.fromkeys((p.with_name(p.name + ".contract.json"), p.with_name(p.stem + ".contract.json")))
    return [c for c in names if os.path.lexists(c)]


def sidecar_paths(path: str | os.PathLike, data: bytes | None = None) -> list[Path]:
    """Every sidecar contract the read pass could pick up for the file: its own and, for an archive,
    each member's. Raises OSError or CorruptError where the file cannot be read."""
    name = os.fspath(path)
    data = read_input_bytes(name) if data is None else data
    candidates = [sidecar_contract_path(name)]
    if data.startswith(AR_MAGIC):
        candidates += [sidecar_contract_path(f"{name}({member})") for member, _ in ar_members(data)]
    return [p for p in candidates if p is not None]


def find_contract(obj: InputObject, sink: DiagnosticSink) -> tuple[bytes, str] | None:
    """The object's contract and where it came from (PL013 if none, PL017 if embedded and sidecar)."""
    where = Location(file=obj.path)
    sidecar = sidecar_contract_path(obj.path) if obj.file else None
    if obj.embedded_contract is not None and sidecar is not None:
        sink.error("PL017", f"{obj.path} embeds a contract in {CONTRACT_SECTION} and also has the sidecar {sidecar}",
                   where, related=(Location(file=str(sidecar)),))
        return None
    if obj.embedded_contract is not None:
        return obj.embedded_contract, f"{obj.path}[{CONTRACT_SECTION}]"
    if sidecar is not None:
        try:
            data = read_input_bytes(sidecar)
        except OSError as exc:
            sink.error("PL002", f"cannot read {sidecar}: {exc.strerror or exc}", Location(file=str(sidecar)))
            return None
        for other in sidecar_candidates(obj.path)[1:]:  # two contracts for one object: neither wins silently
            try:
                same = read_input_bytes(other) == data
            except OSError:
                same = False
            if not same:
                sink.error("PL017", f"{obj.path} has two sidecar contracts, {sidecar} and {other}", where,
                           related=(Location(file=str(sidecar)), Location(file=str(other))),
                           hint="keep one sidecar: <object>.contract.json or <stem>.contract.json")
                return None
        return data, str(sidecar)
    sink.error("PL013", f"{obj.path} has no {CONTRACT_SECTION} section and no sidecar "
                        f"<object>.contract.json or <stem>.contract.json", where)
    return None


def embed_contract(obj_path: str | os.PathLike, contract_bytes: bytes, out_path: str | os.PathLike,
                   extra_sections: dict[str, bytes] | None = None) -> None:
    """Write `out_path`: the object with `contract_bytes` in a non-loaded `.pipelink.contract` section
    (and any `extra_sections`, likewise non-loaded). Existing sections of those names are replaced.
    Raises toolchain.ToolchainError if objcopy fails.
    """
    objcopy = toolchain.objcopy_path()
    if objcopy is None:
        raise toolchain.ToolchainError("objcopy (GNU binutils) was not found on PATH")
    sections = {CONTRACT_SECTION: contract_bytes, **(extra_sections or {})}
    present = _section_names(obj_path)
    with tempfile.TemporaryDirectory(prefix="pipelink-") as tmp:
        args = []
        for i, (section, data) in enumerate(sections.items()):
            blob = Path(tmp) / f"section{i}.bin"
            blob.write_bytes(data)
            if section in present:
                args += ["--update-section", f"{section}={blob}"]
            else:
                args += ["--add-section", f"{section}={blob}", "--set-section-flags", f"{section}=noload,readonly"]
        proc = subprocess.run([objcopy, *args, os.fspath(obj_path), os.fspath(out_path)],
                              capture_output=True, text=True)
    if proc.returncode != 0:
        raise toolchain.ToolchainError(f"objcopy could not embed the contract into {os.fspath(obj_path)}",
                                       (proc.stderr or proc.stdout).strip())


def _section_names(path: str | os.PathLike) -> set[str]:
    try:
        elf = parse_elf(read_input_bytes(path))
    except (OSError, CorruptError, UnsupportedError):
        return set()  # objcopy will say what is wrong with the file
    return {s.name for s in elf.sections}


# --- the entry symbol ------------------------------------------------------------------------

_EXTERN_C_FUNCTION = re.compile(r'extern\s+"C"\s+([^;{}()"]{1,300})\(')  # the words before the first '('


def source_functions(text: str) -> list[str]:
    """The `extern "C"` functions a CUDA source defines or declares, in order, each once: what an object built
    from it may define, for a misspelt entry's did-you-mean (LTO-IR cannot be searched for names)."""
    names = []
    for m in _EXTERN_C_FUNCTION.finditer(text):
        words = re.findall(r"[A-Za-z_]\w*", m.group(1))
        if words and words[-1] not in names:
            names.append(words[-1])
    return names


def embedded_source_text(obj: InputObject) -> tuple[str, str] | None:
    """(file name, source text) that `pipelink build` embedded in the object (SOURCE_SECTION); None where there
    is none or it cannot be read."""
    from ..core import jsonread
    if obj.embedded_source is None:
        return None
    try:
        doc = jsonread.parse(obj.embedded_source.rstrip(b"\0"))
        if isinstance(doc["file"], str) and isinstance(doc["source"], str):
            return doc["file"], doc["source"]
    except (ValueError, KeyError, TypeError):  # JSONError is a ValueError
        pass
    return None


def _defined_names(obj: InputObject, source: str | None) -> list[str]:
    """Names the object defines, as far as they can be known without linking: its PTX's, else the extern "C"
    functions of its source (the one given, or the one `pipelink build` embedded)."""
    if obj.ptx_symbols:
        return obj.ptx_symbols
    if source is None:
        source = (embedded_source_text(obj) or (None, None))[1]
    return source_functions(source) if isinstance(source, str) else []


def check_entry_symbol(obj: InputObject, symbol: str, arch: str, sink: DiagnosticSink,
                       pointer: str = "/entry/symbol", contract_file: str | None = None,
                       source: str | None = None) -> bool:
    """Does `obj` define the `extern "C" __device__` function `symbol` for `arch`? Asks nvJitLink. `source`: the
    CUDA source it was built from, for a misspelt entry's did-you-mean."""
    where = Location(file=contract_file or obj.path, pointer=pointer)
    related = (Location(file=obj.path),) if contract_file and contract_file != obj.path else ()
    if not is_identifier(symbol):
        sink.error("PL014", f"entry symbol '{symbol}' is not a C identifier", where, related=related)
        return False
    try:
        defined, log = toolchain.probe_device_symbol(obj.link_input(), symbol, arch)
    except (toolchain.ToolchainError, ImportError) as exc:
        sink.error("PL008", f"could not run the nvJitLink probe for '{symbol}': {exc}", where)
        return False
    if defined:
        return True
    # nvJitLink names the symbol when the input was read but lacks it; otherwise it failed earlier.
    if not re.search(rf"(?<![\w$]){re.escape(symbol)}(?![\w$])", log):
        first = " | ".join(log.splitlines()[:3]) or "(empty log)"
        if toolchain.unreadable_device_code(log):
            sink.error("PL005", f"{obj.path}: nvJitLink cannot read its device code for {arch}, which is corrupt: "
                                f"{first}", Location(file=obj.path),
                       hint="the object's device code (its fatbin or LTO-IR) is damaged; rebuild the object")
            return False
        sink.error("PL015", f"nvJitLink could not read {obj.path} for {arch}: {first}", where, related=related)
        return False
    sink.error("PL014", f"{obj.path} does not define the device function '{symbol}' for {arch}"
                        f"{_did_you_mean(symbol, _defined_names(obj, source))}", where, related=related)
    return False


def _did_you_mean(symbol: str, defined: list[str]) -> str:
    if not defined:
        return ""
    close = difflib.get_close_matches(symbol, defined, n=3, cutoff=0.6)
    if close:
        return "; did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
    shown = ", ".join(defined[:8]) + (", ..." if len(defined) > 8 else "")
    return f"; it defines {shown}"
