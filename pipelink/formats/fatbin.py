"""The binary containers inside the files pipelink reads: ELF sections, CUDA fatbins, ar archives.

Pure byte parsing: no GPU, no toolchain. Every read is bounds-checked. Anything inconsistent
raises `CorruptError` (reported as PL005) and a layout pipelink does not read raises
`UnsupportedError` (PL004); nothing else escapes for bad bytes. The fatbin layout is not
documented by NVIDIA; the offsets below were checked against files built by the pinned nvcc 13.0.88.
"""
from __future__ import annotations

import io
import re
import struct
from dataclasses import dataclass, field

ELF_MAGIC = b"\x7fELF"
AR_MAGIC = b"!<arch>\n"
THIN_AR_MAGIC = b"!<thin>\n"
LTOIR_MAGIC = b"\xed\x43\x4e\x7f"
FATBIN_MAGIC = 0xBA55ED50
FATBIN_MAGIC_BYTES = struct.pack("<I", FATBIN_MAGIC)

EM_CUDA = 190
ELFOSABI_CUDA_V2 = 0x41  # CUDA 13 cubins; older ones use 0x33 and another e_flags layout
SHT_NOBITS = 8

# Fatbin entry kinds and flags (u64 at entry offset 40).
KINDS = {1: "ptx", 2: "cubin", 8: "ltoir"}
FLAG_DEBUG = 0x2             # set by nvcc -G
FLAG_ZSTD = 0x8000           # payload is one zstd frame (PTX, cubin)
FLAG_LTOIR_CODEC = 0x10000   # with FLAG_ZSTD on LTO-IR: not zstd but a codec only nvJitLink reads
FLAG_ARCH_SPECIFIC = 0x100000  # sm_90a-style target
FLAG_FAMILY = 0x200000         # sm_100f-style target

_CONTAINER = struct.Struct("<IHHQ")       # magic, version, header size, payload size
_ENTRY = struct.Struct("<HHIQIIHHIIIQQQ")  # the fixed 64 bytes of an entry header, see parse_entry
_MAX_DECOMPRESSED = 256 << 20


class CorruptError(ValueError):
    """The bytes are inconsistent: truncated, or a header points outside its data."""


class UnsupportedError(ValueError):
    """Well-formed, but a layout pipelink does not read (32-bit ELF, thin archive, ...)."""


@dataclass(frozen=True)
class FatbinEntry:
    kind: str            # "ptx" | "cubin" | "ltoir" | "unknown(<n>)"
    arch: str | None     # "sm_90", "sm_90a", ... (None for raw LTO-IR)
    options: str         # the entry's options string, stripped ('' if none)
    compressed: bool
    payload_size: int    # bytes stored (padded), compressed or not
    flags: int = 0       # the raw entry flags (FLAG_*)
    payload: bytes = field(default=b"", repr=False, compare=False)
    decompressed_size: int = 0  # 0 when the payload is stored uncompressed

    def compile_flags(self) -> dict[str, bool]:
        return parse_compile_flags(self.options)

    def is_debug(self) -> bool:
        return bool(self.flags & FLAG_DEBUG) or any(t in _DEBUG_OPTIONS for t in self.options.split())


_DEBUG_OPTIONS = {"-G", "-g", "--device-debug", "-device-debug"}
_FLAG_NAMES = {"ftz": "ftz", "prec_div": "prec_div", "prec_sqrt": "prec_sqrt", "fmad": "fmad"}
_BOOL = {"1": True, "true": True, "0": False, "false": False}


def parse_compile_flags(options: str) -> dict[str, bool]:
    """`-ftz=0 -prec_div=1` or `-ftz=false -prec-div=true` -> {"ftz": False, "prec_div": True}."""
    found: dict[str, bool] = {}
    fast_math = False
    for token in options.split():
        name, eq, value = token.lstrip("-").partition("=")
        name = name.replace("-", "_")
        if name == "use_fast_math" and not eq:
            fast_math = True
        elif eq and name in _FLAG_NAMES and value.lower() in _BOOL:
            found[name] = _BOOL[value.lower()]
    if fast_math:  # what nvcc expands --use_fast_math to; explicit flags win
        for name, value in (("ftz", True), ("prec_div", False), ("prec_sqrt", False), ("fmad", True)):
            found.setdefault(name, value)
    return found


def _unpack(fmt: struct.Struct | str, data: bytes, offset: int, what: str) -> tuple:
    st = fmt if isinstance(fmt, struct.Struct) else struct.Struct(fmt)
    if offset < 0 or offset + st.size > len(data):
        raise CorruptError(f"{what} at offset {offset} runs past the end of the data ({len(data)} bytes)")
    return st.unpack_from(data, offset)


# --- fatbin ----------------------------------------------------------------------------------

def parse_fatbin(data: bytes) -> list[FatbinEntry]:
    """All entries of the fatbin containers in `data`, which follow one another.

    Zero bytes after the last container are alignment padding (ELF sections have them).
    """
    entries: list[FatbinEntry] = []
    offset = 0
    while offset < len(data):
        if not any(data[offset:]):
            break
        magic, _version, header_size, payload_size = _unpack(_CONTAINER, data, offset, "fatbin header")
        if magic != FATBIN_MAGIC:
            raise CorruptError(f"expected a fatbin header (magic 0x{FATBIN_MAGIC:08X}) at offset {offset}, "
                               f"found 0x{magic:08X}")
        start = offset + header_size
        end = start + payload_size
        if header_size < _CONTAINER.size or end > len(data):
            raise CorruptError(f"fatbin container at offset {offset} declares {header_size}+{payload_size} bytes, "
                               f"but only {len(data) - offset} remain (truncated?)")
        entries.extend(_parse_entries(data, start, end))
        offset = end
    return entries


def _parse_entries(data: bytes, start: int, end: int) -> list[FatbinEntry]:
    entries = []
    offset = start
    while offset < end:
        if not any(data[offset:end]):  # padding at the end of a container
            break
        entry, size = parse_entry(data[offset:end], offset)
        entries.append(entry)
        offset += size
    return entries


def parse_entry(region: bytes, at: int) -> tuple[FatbinEntry, int]:
    """One entry header and its payload from the start of `region`; returns (entry, bytes used).

    Header (64 fixed bytes): u16 kind, u16 version, u32 header size, u64 padded payload size,
    u32 compressed size, u32 offset of the options descriptor (0: none), u16/u16 ISA version,
    u32 arch, u32/u32 offset/length of the source-file name (-G/-lineinfo builds), u64 flags,
    u64 (unknown), u64 decompressed size. The options descriptor is a u32 offset and u32 length
    of the options string, both relative to the entry header; it sits at 64, or after the file
    name when there is one, so it must be located through the offset at 20, not assumed at 64.
    """
    if len(region) < _ENTRY.size:
        raise CorruptError(f"fatbin entry at offset {at} is cut off: {len(region)} of its {_ENTRY.size} "
                           f"header bytes remain in its container")
    (kind_no, _ver, header_size, payload_size, compressed_size, options_at, _minor, _major,
     arch_no, _name_off, _name_len, flags, _unknown, decompressed_size) = _ENTRY.unpack_from(region, 0)
    if header_size < _ENTRY.size or header_size + payload_size > len(region):
        raise CorruptError(f"fatbin entry at offset {at} declares {header_size}+{payload_size} bytes, "
                           f"but its container has only {len(region)} left (truncated?)")
    compressed = bool(flags & FLAG_ZSTD)
    if compressed and compressed_size > payload_size:
        raise CorruptError(f"fatbin entry at offset {at}: compressed size {compressed_size} exceeds its "
                           f"payload size {payload_size}")
    header = region[:header_size]
    entry = FatbinEntry(
        kind=KINDS.get(kind_no, f"unknown({kind_no})"),
        arch=_arch_name(arch_no, flags),
        options=_options(header, options_at, at),
        compressed=compressed,
        payload_size=payload_size,
        flags=flags,
        payload=region[header_size:header_size + payload_size],
        decompressed_size=decompressed_size if compressed else 0,
    )
    return entry, header_size + payload_size


def _arch_name(arch_no: int, flags: int) -> str:
    suffix = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
    return f"sm_{arch_no}{suffix}"


def _options(header: bytes, options_at: int, at: int) -> str:
    if options_at == 0:
        return ""
    offset, length = _unpack("<II", header, options_at, f"options descriptor of the fatbin entry at offset {at}")
    if offset + length > len(header):
        raise CorruptError(f"fatbin entry at offset {at}: its options string ({offset}+{length}) lies outside "
                           f"its {len(header)}-byte header")
    return header[offset:offset + length].split(b"\0", 1)[0].decode("utf-8", errors="replace").strip()


def payload_bytes(entry: FatbinEntry) -> bytes | None:
    """The entry's payload, decompressed; None if it cannot be (LTO-IR's codec, a broken frame)."""
    if not entry.compressed:
        return entry.payload
    if entry.flags & FLAG_LTOIR_CODEC:
        return None
    try:
        import zstandard

        # Read through a stream with a cap: a frame header can claim any content size.
        limit = entry.decompressed_size if 0 < entry.decompressed_size <= _MAX_DECOMPRESSED else _MAX_DECOMPRESSED
        reader = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(entry.payload))
        return reader.read(limit)
    except Exception:  # zstandard.ZstdError and friends: the symbols are a convenience only
        return None


# Each part within its line: a `(` never closed had scanned to the end of the text from every such line (a
# 400-byte compressed PTX of 200000 of them ran for minutes). nvcc writes a func's return parameter on its line.
_PTX_VISIBLE = re.compile(r"^[ \t]*\.visible[ \t]+\.(?:entry|func)[ \t]+(?:\([^)\n]*\)[ \t]*)?([A-Za-z_$%][\w$]*)", re.M)


def ptx_symbols(entries: list[FatbinEntry]) -> list[str]:
    """Names of the `.visible .entry` / `.visible .func` in the PTX entries, sorted and deduped."""
    names: set[str] = set()
    for entry in entries:
        if entry.kind != "ptx":
            continue
        text = payload_bytes(entry)
        if text:
            names.update(_PTX_VISIBLE.findall(text.rstrip(b"\0").decode("utf-8", errors="replace")))
    return sorted(names)


# --- ELF -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ElfSection:
    name: str
    type: int
    offset: int
    size: int


@dataclass(frozen=True)
class Elf:
    type: int        # e_type: 1 relocatable, 2 executable, 3 shared
    machine: int     # e_machine: 62 x86-64, 183 aarch64, 190 CUDA
    osabi: int
    flags: int
    sections: tuple[ElfSection, ...]

    def section_data(self, data: bytes, name: str) -> list[bytes]:
        return [data[s.offset:s.offset + s.size] for s in self.sections if s.name == name]

    def cubin_arch(self) -> str:
        """A cubin's target: CUDA 13 keeps the SM number in e_flags bits 8..15, older ones in 0..7."""
        number = (self.flags >> 8) & 0xFF if self.osabi == ELFOSABI_CUDA_V2 else self.flags & 0xFF
        return f"sm_{number}"


_EHDR = struct.Struct("<HHIQQQIHHHHHH")  # e_type .. e_shstrndx, after the 16-byte e_ident
_SHDR = struct.Struct("<IIQQQQIIQQ")


def parse_elf(data: bytes) -> Elf:
    """The section table of a little-endian ELF64 file."""
    if len(data) < 16:
        raise CorruptError(f"ELF identification is cut off after {len(data)} bytes")
    if data[4] != 2 or data[5] != 1:
        raise UnsupportedError(f"a {'32-bit' if data[4] == 1 else 'non-64-bit'} or big-endian ELF file "
                               f"(class {data[4]}, data {data[5]}); CUDA objects are little-endian ELF64")
    (e_type, machine, _ver, _entry, _phoff, shoff, flags, _ehsize, _phentsize, _phnum, shentsize, shnum,
     shstrndx) = _unpack(_EHDR, data, 16, "ELF header")
    if shoff == 0:
        return Elf(e_type, machine, data[7], flags, ())
    if shentsize < _SHDR.size:
        raise CorruptError(f"ELF section header size {shentsize} is smaller than {_SHDR.size}")
    first = _section_header(data, shoff, 0)
    if shnum == 0:  # extended numbering: the count lives in section 0
        shnum = first[5]
    if shstrndx == 0xFFFF:
        shstrndx = first[6]
    if shoff + shnum * shentsize > len(data):
        raise CorruptError(f"the ELF section table ({shnum} entries at offset {shoff}) runs past the end of the "
                           f"file ({len(data)} bytes): truncated")
    raw = [_section_header(data, shoff + i * shentsize, i) for i in range(shnum)]
    for i, h in enumerate(raw):
        if h[1] != SHT_NOBITS and h[4] + h[5] > len(data):
            raise CorruptError(f"ELF section {i} ({h[4]}+{h[5]} bytes) runs past the end of the file "
                               f"({len(data)} bytes): truncated")
    if not 0 <= shstrndx < shnum:
        raise CorruptError(f"ELF section-name table index {shstrndx} is out of range ({shnum} sections)")
    strtab = data[raw[shstrndx][4]:raw[shstrndx][4] + raw[shstrndx][5]]
    sections = tuple(ElfSection(_c_string(strtab, h[0]), h[1], h[4], h[5]) for h in raw)
    return Elf(e_type, machine, data[7], flags, sections)


def _section_header(data: bytes, offset: int, index: int) -> tuple:
    return _unpack(_SHDR, data, offset, f"ELF section header {index}")


def _c_string(table: bytes, offset: int) -> str:
    if offset >= len(table) and offset != 0:
        raise CorruptError(f"ELF section name offset {offset} is outside the name table ({len(table)} bytes)")
    return table[offset:].split(b"\0", 1)[0].decode("utf-8", errors="replace")


# --- ar archives -----------------------------------------------------------------------------

_AR_HEADER = 60


def ar_members(data: bytes) -> list[tuple[str, bytes]]:
    """(name, bytes) of each member of a System V / GNU / BSD `ar` archive, symbol tables skipped."""
    if data.startswith(THIN_AR_MAGIC):
        raise UnsupportedError("a thin archive (it only names its members); rebuild it with `ar rcs` (no T)")
    members: list[tuple[str, bytes]] = []
    long_names = b""
    offset = len(AR_MAGIC)
    while offset < len(data):
        if offset + _AR_HEADER > len(data):
            raise CorruptError(f"archive member header at offset {offset} is cut off: truncated")
        header = data[offset:offset + _AR_HEADER]
        if header[58:60] != b"`\n":
            raise CorruptError(f"archive member header at offset {offset} lacks its end marker")
        size_text = header[48:58].strip()
        if not size_text.isdigit():
            raise CorruptError(f"archive member header at offset {offset} has a bad size field {size_text!r}")
        start, size = offset + _AR_HEADER, int(size_text)
        if start + size > len(data):
            raise CorruptError(f"archive member at offset {offset} declares {size} bytes, "
                               f"but only {len(data) - start} remain: truncated")
        body = data[start:start + size]
        name, body = _member_name(header[:16].decode("ascii", errors="replace").rstrip(), body, long_names)
        if name == "//":
            long_names = body
        elif name not in ("/", "/SYM64/", "__.SYMDEF", "__.SYMDEF SORTED"):
            members.append((name, body))
        offset = start + size + (size & 1)  # members are 2-byte aligned
    return members


def _member_name(raw: str, body: bytes, long_names: bytes) -> tuple[str, bytes]:
    if raw in ("/", "//", "/SYM64/"):
        return raw, body
    if raw.startswith("#1/") and raw[3:].isdigit():  # BSD: the name precedes the data
        n = int(raw[3:])
        if n > len(body):
            raise CorruptError(f"archive member name length {n} exceeds the member ({len(body)} bytes)")
        return body[:n].split(b"\0", 1)[0].decode("utf-8", errors="replace"), body[n:]
    if raw.startswith("/") and raw[1:].isdigit():  # GNU: offset into the `//` table
        at = int(raw[1:])
        if at >= len(long_names):
            raise CorruptError(f"archive member name /{at} points outside the long-name table")
        end = long_names.find(b"/\n", at)
        return long_names[at:end if end >= 0 else len(long_names)].decode("utf-8", errors="replace"), body
    return raw.removesuffix("/"), body
