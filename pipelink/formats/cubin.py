"""What a linked cubin really uses, read from its ELF: registers, local memory, shared memory,
barriers, parameters, calls. No GPU and no NVIDIA tool is needed.

The layout below is undocumented by NVIDIA. Every fact was checked on cubins linked by the pinned
nvJitLink 13.0.88 (LTO and non-LTO) and by nvcc 13.0.88, sm_75..sm_120; tests/test_cubin.py
rebuilds the cubins it relies on. On an H200 (driver 580) the driver agreed with this reader for
every test kernel: CU_FUNC_ATTRIBUTE_NUM_REGS = registers, LOCAL_SIZE_BYTES = frame_bytes,
SHARED_SIZE_BYTES = static_smem_bytes (without the 1 KB), MAX_THREADS_PER_BLOCK = max_threads[0];
and `cuobjdump -sass` showed a CALL exactly in the kernels with `calls` true.

- Kernels (entry functions) are STT_FUNC symbols with bit 0x10 (STO_CUDA_ENTRY) in `st_other`.
  A non-inlined device function can have its own `.text.<f>` and `.nv.info.<f>` too (non-LTO and
  `-g` links), so the sections alone do not tell a kernel. pyelftools drops that bit when it
  decodes `st_other`, so the symbol table is read here from its raw bytes.
- `.nv.info*` sections (sh_type 0x70000000) hold 4-byte records `u8 format, u8 attribute, u16 v`;
  see `parse_nv_info`. The global `.nv.info` holds per-function values as `(u32 symbol index,
  u32 value)`; `.nv.info.<kernel>` holds the kernel's own attributes.
- Everything inconsistent raises `CubinError`; attribute codes this module does not know are kept
  in `KernelInfo.unknown_attrs` and never make it fail.
"""
from __future__ import annotations

import io
import struct
from dataclasses import dataclass, field
from typing import NamedTuple

EM_CUDA = 190
SHT_CUDA_INFO = 0x70000000
SHT_CUDA_CALLGRAPH = 0x70000001
STO_CUDA_ENTRY = 0x10
STT_OBJECT = 1
STT_FUNC = 2

# sm_90+ reserves 1 KB of shared memory per CTA for the system. A linked (ET_EXEC) cubin counts it
# inside every `.nv.shared.<kernel>`: a kernel with `__shared__ float[1024]` gets a 5120-byte
# section. `.nv.shared.reserved.0` itself is NOBITS of size 0 on sm_90 (64 on sm_100/sm_120) and
# is NOT always there: an sm_90 cubin that nvJitLink links without -lto from `nvcc -dc` objects
# has the 5120-byte section but no `.nv.shared.reserved.0`. What every such cubin has is the
# undefined symbol `.nv.reservedSmem.offset0`. Relocatable cubins (ET_REL, `nvcc -cubin -rdc`)
# carry the symbol but not the reservation (4096 there), and sm_80/sm_89 cubins have neither.
# A kernel without static shared memory usually has no `.nv.shared.<kernel>` at all; in a cubin
# with a namespace-scope `__shared__` variable every kernel gets one, of exactly 1024 bytes.
# The driver reports the size without the reservation (CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES 4096).
SYSTEM_RESERVED_SMEM = 1024
_RESERVED_SMEM_SECTION = ".nv.shared.reserved.0"
_RESERVED_SMEM_SYMBOL = ".nv.reservedSmem.offset0"

# .nv.info record formats (EIFMT_*)
FMT_NVAL = 1  # no value
FMT_BVAL = 2  # a byte, in the low byte of v
FMT_HVAL = 3  # a u16, v itself
FMT_SVAL = 4  # v = length of the bytes that follow

# Attribute codes (EIATTR_*) this module decodes.
MAX_THREADS = 0x05        # 3 x u32, from __launch_bounds__ / __maxntid__
FRAME_SIZE = 0x11         # global: local memory per thread (stack frame, spills)
MIN_STACK_SIZE = 0x12     # global
KPARAM_INFO = 0x17        # 12 bytes per parameter, see _decode_param
CBANK_PARAM_SIZE = 0x19   # bytes of parameters in constant bank 0
MAXREG_COUNT = 0x1b       # register cap (255 when none was asked for)
MAX_STACK_SIZE = 0x23     # global; never emitted by 13.0 in any build tried (recursion, -O0, -g)
REGCOUNT = 0x2f           # global; one per kernel, also in -O0 and -g links
NUM_MBARRIERS = 0x38      # mbarriers ptxas could count (see KernelInfo)
KPARAM_INFO_V2 = 0x45     # replaces 0x17 for big parameter lists (16408 bytes: V2; 4040: V1)
NUM_BARRIERS = 0x4c       # FMT_BVAL: highest named-barrier id used + 1
REG_RECONFIG = 0x54       # FMT_NVAL: setmaxnreg is used

# Codes seen in sm_90 output of 13.0 that are known and deliberately not decoded, so they are not
# "unknown". Names as CUDA 13.0's `cuobjdump -elf` prints them (EIATTR_<name>), except 0x31.
KNOWN_UNDECODED = {
    0x0a: "PARAM_CBANK",            # (u32 sym of .nv.constant0.<k>, u16 offset 0x210, u16 size)
    0x0f: "EXTERNS",                # u32 symbol indices of called externs (vprintf, malloc)
    0x1c: "EXIT_INSTR_OFFSETS",
    0x1e: "CRS_STACK_SIZE",         # with calls, but also with setmaxnreg and no call
    0x31: "INT_WARP_WIDE_INSTR_OFFSETS",  # name from older EIATTR lists; seen with mbarriers
    0x36: "SW_WAR",
    0x37: "CUDA_API_VERSION",       # 0x82 = 130
    0x39: "MBARRIER_INSTR_OFFSETS",
    0x46: "SYSCALL_OFFSETS",
    0x50: "SPARSE_MMA_MASK",        # FMT_HVAL 0 on every kernel
    0x55: "ANNOTATIONS",            # "SpillRefill" instruction offsets on kernels that spill
    0x5f: "MERCURY_ISA_VERSION",    # FMT_HVAL 0x101 ("1.1") on every kernel and in global .nv.info
}
_GLOBAL = {REGCOUNT: "registers", FRAME_SIZE: "frame", MIN_STACK_SIZE: "min_stack",
           MAX_STACK_SIZE: "max_stack"}


class CubinError(ValueError):
    """The bytes are not a well-formed CUDA cubin (truncated, inconsistent, not ELF64/EM_CUDA)."""


@dataclass(frozen=True)
class KernelInfo:
    """What one kernel of a linked cubin uses, as ptxas/nvJitLink recorded it."""

    name: str
    registers: int            # REGCOUNT (present in every link tried, -O0 and -g too)
    frame_bytes: int          # FRAME_SIZE: local memory per thread (stack frame, spills)
    min_stack_bytes: int      # MIN_STACK_SIZE
    max_stack_bytes: int      # MAX_STACK_SIZE (0: never seen emitted)
    static_smem_bytes: int    # .nv.shared.<kernel> minus the system reservation it includes
    reserved_smem_bytes: int  # the system reservation counted in that section (1024 or 0)
    max_threads: tuple[int, int, int] | None  # MAX_THREADS, from __launch_bounds__
    max_reg_count: int | None  # MAXREG_COUNT (255 = no cap asked for)
    num_barriers: int | None   # NUM_BARRIERS: highest named-barrier id used + 1
    # NUM_MBARRIERS counts the mbarrier objects ptxas can tell apart: 1, 2, 5 for 1, 2, 5 scalar
    # or unrolled ones, but 1 for an array of 3 indexed with threadIdx. Presence is reliable.
    num_mbarriers: int | None
    reg_reconfig: bool         # REG_RECONFIG: setmaxnreg present
    param_bytes: int | None    # CBANK_PARAM_SIZE; None for a kernel without parameters
    params: tuple[tuple[int, int, int], ...]  # (ordinal, offset, size), by ordinal
    text: bytes = field(repr=False)
    unknown_attrs: tuple[int, ...] = ()
    calls: bool = False        # the kernel's code calls a function (see _kernel_calls)
    subroutines: tuple[str, ...] = ()  # functions LTO placed inside the kernel's section (not inlined)


class NvInfoRecord(NamedTuple):
    fmt: int
    attr: int
    value: int | bytes | None  # None (NVAL), int (BVAL, HVAL) or the bytes (SVAL)


class _Section(NamedTuple):
    index: int
    name: str
    type: int | str   # pyelftools gives names for standard types, ints for CUDA ones
    size: int
    link: int
    info: int
    data: bytes


class _Symbol(NamedTuple):
    index: int
    name: str
    type: int
    other: int
    shndx: int
    value: int
    size: int


# --- public API ------------------------------------------------------------------------------

def read_cubin(data: bytes) -> dict[str, KernelInfo]:
    """Every kernel of a cubin, by name, with the resources the linker recorded for it."""
    cubin = _Cubin(data)
    per_symbol = _global_info(cubin)
    reservation = _system_reservation(cubin)
    kernels = {}
    for sym in cubin.symbols:
        if sym.type == STT_FUNC and sym.other & STO_CUDA_ENTRY and sym.name:
            kernels[sym.name] = _kernel_info(cubin, sym, per_symbol.get(sym.index, {}), reservation)
    return kernels


def global_variables(data: bytes) -> dict[str, tuple[str, int]]:
    """Variables (STT_OBJECT symbols defined in a section): name -> (section name, size).

    Undefined ones (nvJitLink's `.nv.reservedSmem.offset0`) are left out. Local symbols count:
    LTO turns a `const` variable into a local one in `.nv.global.init`.
    """
    cubin = _Cubin(data)
    out = {}
    for sym in cubin.symbols:
        if sym.type == STT_OBJECT and sym.name and 0 < sym.shndx < len(cubin.sections):
            out[sym.name] = (cubin.sections[sym.shndx].name, sym.size)
    return out


def sass_text_equal(a: bytes, b: bytes, kernel: str) -> bool:
    """Are the bytes of `.text.<kernel>` identical in cubins `a` and `b`? CubinError if either lacks it."""
    return _Cubin(a).text(kernel) == _Cubin(b).text(kernel)


def parse_nv_info(data: bytes) -> list[NvInfoRecord]:
    """The records of one `.nv.info*` section. CubinError on a truncated or unknown-format record."""
    records, off = [], 0
    while off < len(data):
        if off + 4 > len(data):
            raise CubinError(f".nv.info record at {off} is truncated ({len(data) - off} of 4 bytes)")
        fmt, attr, v = struct.unpack_from("<BBH", data, off)
        off += 4
        if fmt == FMT_NVAL:
            records.append(NvInfoRecord(fmt, attr, None))
        elif fmt == FMT_BVAL:
            records.append(NvInfoRecord(fmt, attr, v & 0xFF))
        elif fmt == FMT_HVAL:
            records.append(NvInfoRecord(fmt, attr, v))
        elif fmt == FMT_SVAL:
            if off + v > len(data):
                raise CubinError(f".nv.info attribute {attr:#x} is truncated: "
                                 f"{v} bytes, {len(data) - off} left")
            records.append(NvInfoRecord(fmt, attr, data[off:off + v]))
            off += (v + 3) & ~3  # records stay 4-byte aligned (every length seen is a multiple of 4)
        else:
            # Without a known format the record's length is unknown: nothing after it can be read.
            raise CubinError(f".nv.info record at {off - 4} has unknown format {fmt}")
    return records


# --- the ELF ---------------------------------------------------------------------------------

class _Cubin:
    """The parts of a cubin's ELF read here, parsed once. Raises CubinError, nothing else."""

    def __init__(self, data: bytes):
        from elftools.common.exceptions import ELFError

        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError("a cubin is bytes")
        data = bytes(data)
        if data[:4] != b"\x7fELF":
            raise CubinError("not an ELF file")
        try:
            self._parse(data)
        except CubinError:
            raise
        # pyelftools reports a bad file through many exception types; a reader of linker output
        # must still answer with one error, so all of them become CubinError here.
        except (ELFError, struct.error, IndexError, KeyError, ValueError, TypeError,
                OverflowError, UnicodeDecodeError, EOFError, AttributeError, AssertionError,
                MemoryError) as exc:
            raise CubinError(f"malformed cubin: {type(exc).__name__}: {exc}") from exc

    def _parse(self, data: bytes) -> None:
        from elftools.elf.elffile import ELFFile

        elf = ELFFile(io.BytesIO(data))
        if elf.elfclass != 64 or elf.header["e_machine"] not in ("EM_CUDA", EM_CUDA):
            raise CubinError("not a 64-bit CUDA ELF (EM_CUDA)")
        self.e_type = elf.header["e_type"]
        # pyelftools returns short data for a section cut off by the end of the file; a cut
        # cubin must fail, not read as one with fewer records.
        _check_fits(data, "program headers", elf.header["e_phoff"],
                    elf.header["e_phnum"] * elf.header["e_phentsize"])
        for s in elf.iter_sections():
            if s["sh_type"] not in ("SHT_NOBITS", "SHT_NULL"):
                _check_fits(data, f"section {s.name}", s["sh_offset"], s["sh_size"])
        self.sections = [
            _Section(i, s.name, s["sh_type"], s["sh_size"], s["sh_link"], s["sh_info"],
                     b"" if s["sh_type"] == "SHT_NOBITS" else s.data())
            for i, s in enumerate(elf.iter_sections())]
        self.by_name = {s.name: s for s in self.sections}
        self.symbols = self._symbols()

    def _symbols(self) -> list[_Symbol]:
        symtab = next((s for s in self.sections if s.type == "SHT_SYMTAB"), None)
        if symtab is None:
            return []
        if len(symtab.data) % 24 or not 0 < symtab.link < len(self.sections):
            raise CubinError(".symtab is truncated or has no string table")
        strtab = self.sections[symtab.link].data
        out = []
        for i, (name, info, other, shndx, value, size) in enumerate(
                struct.iter_unpack("<IBBHQQ", symtab.data)):
            out.append(_Symbol(i, _cstring(strtab, name), info & 0xF, other, shndx, value, size))
        return out

    def text(self, kernel: str) -> bytes:
        sec = self.by_name.get(f".text.{kernel}")
        if sec is None:
            raise CubinError(f"no section .text.{kernel}")
        return sec.data

    def info_records(self, name: str) -> list[NvInfoRecord]:
        sec = self.by_name.get(name)
        if sec is None or sec.type != SHT_CUDA_INFO:
            return []
        return parse_nv_info(sec.data)


def _check_fits(data: bytes, what: str, offset: int, size: int) -> None:
    if offset + size > len(data):
        raise CubinError(f"{what} end at {offset + size}, past the end of the file ({len(data)} bytes)")


def _cstring(table: bytes, offset: int) -> str:
    if offset >= len(table) and offset:
        raise CubinError(f"string offset {offset} outside its table ({len(table)} bytes)")
    end = table.find(b"\x00", offset)
    return table[offset:end if end >= 0 else len(table)].decode("utf-8", errors="replace")


# --- decoding --------------------------------------------------------------------------------

def _global_info(cubin: _Cubin) -> dict[int, dict[str, int]]:
    """symbol index -> {registers, frame, min_stack, max_stack} from the global `.nv.info`.

    Its other records (e.g. 0x5f in non-LTO links) belong to no kernel and are skipped.
    """
    out: dict[int, dict[str, int]] = {}
    for rec in cubin.info_records(".nv.info"):
        key = _GLOBAL.get(rec.attr)
        if key is None:
            continue
        if rec.fmt != FMT_SVAL or len(rec.value) != 8:
            raise CubinError(f"global .nv.info attribute {rec.attr:#x} is not (u32 symbol, u32 value)")
        sym, value = struct.unpack("<II", rec.value)
        out.setdefault(sym, {})[key] = value
    return out


def _registers(glob: dict[str, int], kernel: str) -> int:
    # Every kernel of every link tried (-O0 and -g too) has a REGCOUNT; without one the reader
    # would have to guess, and a guess of 0 would pass every register budget.
    if "registers" not in glob:
        raise CubinError(f"the global .nv.info has no REGCOUNT for kernel {kernel}")
    return glob["registers"]


def _system_reservation(cubin: _Cubin) -> int:
    """Bytes of system shared memory that each `.nv.shared.<kernel>` includes (see the top)."""
    if cubin.e_type != "ET_EXEC":
        return 0
    marked = (_RESERVED_SMEM_SECTION in cubin.by_name
              or any(s.name == _RESERVED_SMEM_SYMBOL for s in cubin.symbols))
    return SYSTEM_RESERVED_SMEM if marked else 0


def _kernel_info(cubin: _Cubin, sym: _Symbol, glob: dict[str, int], reservation: int) -> KernelInfo:
    name = sym.name
    text = cubin.by_name.get(f".text.{name}")
    if text is None or sym.shndx != text.index:
        raise CubinError(f"kernel {name} is not in section .text.{name}")
    if f".nv.info.{name}" not in cubin.by_name:
        raise CubinError(f"kernel {name} has no .nv.info.{name}")
    attrs = _kernel_attrs(cubin.info_records(f".nv.info.{name}"), name)
    smem = cubin.by_name.get(f".nv.shared.{name}")
    smem_size = smem.size if smem is not None else 0
    reserved = reservation if smem_size >= reservation else 0
    return KernelInfo(
        name=name,
        registers=_registers(glob, name),
        frame_bytes=glob.get("frame", 0),
        min_stack_bytes=glob.get("min_stack", 0),
        max_stack_bytes=glob.get("max_stack", 0),
        static_smem_bytes=smem_size - reserved,
        reserved_smem_bytes=reserved,
        text=text.data,
        calls=_kernel_calls(cubin, sym, text),
        subroutines=tuple(sorted(s.name for s in cubin.symbols
                                 if s.type == STT_FUNC and s.shndx == text.index and s.index != sym.index)),
        **attrs,
    )


def _kernel_attrs(records: list[NvInfoRecord], name: str) -> dict:
    """The KernelInfo fields that come from `.nv.info.<kernel>`."""
    out = dict(max_threads=None, max_reg_count=None, num_barriers=None, num_mbarriers=None,
               reg_reconfig=False, param_bytes=None)
    params, unknown = [], set()
    for rec in records:
        if rec.attr == MAX_THREADS:
            out["max_threads"] = struct.unpack("<III", _sval(rec, 12, name))
        elif rec.attr in (KPARAM_INFO, KPARAM_INFO_V2):
            params.append(_decode_param(rec.attr, _sval(rec, 12, name)))
        elif rec.attr == MAXREG_COUNT:
            out["max_reg_count"] = _int(rec, name)
        elif rec.attr == NUM_BARRIERS:
            out["num_barriers"] = _int(rec, name)
        elif rec.attr == NUM_MBARRIERS:
            out["num_mbarriers"] = _int(rec, name)
        elif rec.attr == CBANK_PARAM_SIZE:
            out["param_bytes"] = _int(rec, name)
        elif rec.attr == REG_RECONFIG:
            out["reg_reconfig"] = True
        elif rec.attr not in KNOWN_UNDECODED:
            unknown.add(rec.attr)
    out["params"] = tuple(sorted(params))
    out["unknown_attrs"] = tuple(sorted(unknown))
    return out


def _decode_param(attr: int, raw: bytes) -> tuple[int, int, int]:
    """(ordinal, offset, size) of one KPARAM_INFO / KPARAM_INFO_V2 record.

    Both: u32 index (always 0), u16 ordinal, u16 offset in the parameter bank, u32 word.
    KPARAM_INFO's word has the size in bits 18-31 (so at most 16383) and below it what cuobjdump
    prints as pointee log-alignment, space and "cbank 0x1f" (0xf000 + bit 16); V2's word is the
    size alone. Checked with int, float*, double, char, short, a 12-byte and a 4000-byte struct
    (V1) and 16383-, 16384- and 32000-byte structs (V2: a 16383-byte struct, 16408 bytes in all,
    already gets V2, so the switch follows the total), against cuobjdump's decoding.
    """
    _index, ordinal, offset, word = struct.unpack("<IHHI", raw)
    size = word >> 18 if attr == KPARAM_INFO else word
    return (ordinal, offset, size)


def _sval(rec: NvInfoRecord, length: int, kernel: str) -> bytes:
    if rec.fmt != FMT_SVAL or len(rec.value) != length:
        raise CubinError(f".nv.info.{kernel}: attribute {rec.attr:#x} is not {length} bytes")
    return rec.value


def _int(rec: NvInfoRecord, kernel: str) -> int:
    if rec.fmt not in (FMT_BVAL, FMT_HVAL):
        raise CubinError(f".nv.info.{kernel}: attribute {rec.attr:#x} has format {rec.fmt}, wants a value")
    return rec.value


def _kernel_calls(cubin: _Cubin, kernel: _Symbol, text: _Section) -> bool:
    """Does the kernel's code call another function? Three traces of a CALL, each seen alone
    (and cuobjdump -sass showed CALL.REL / CALL.ABS in exactly the kernels found here):

    - LTO links clone every non-inlined callee into the caller's own section as a local STT_FUNC
      (`$k_call$_Z6helperf`, also function-pointer targets); the CALL is relative, with no
      relocation and no `.nv.callgraph` edge.
    - Calls to externs the driver provides (vprintf, malloc, free) are `.nv.callgraph` edges
      (u32 caller, u32 callee), with addresses patched through `.nv.constant4`.
    - Non-LTO and `-g` links keep the callee in its own section: a relocation in
      `.rela.text.<kernel>` against it, and a callgraph edge.
    Relocations against the kernel's own symbol (return addresses) are not calls.
    """
    syms = cubin.symbols
    if any(s.type == STT_FUNC and s.shndx == text.index and s.index != kernel.index for s in syms):
        return True
    if any(caller == kernel.index and callee != kernel.index for caller, callee in _callgraph(cubin)):
        return True
    for sec in cubin.sections:
        if sec.type in ("SHT_RELA", "SHT_REL") and sec.info == text.index:
            step = 24 if sec.type == "SHT_RELA" else 16
            for off in range(0, len(sec.data) - step + 1, step):
                (info,) = struct.unpack_from("<Q", sec.data, off + 8)
                target = info >> 32
                if target >= len(syms):
                    raise CubinError(f"{sec.name}: relocation against symbol {target} of {len(syms)}")
                if target != kernel.index and syms[target].type == STT_FUNC:
                    return True
    return False


def _callgraph(cubin: _Cubin) -> list[tuple[int, int]]:
    """The caller -> callee edges of `.nv.callgraph`: pairs of u32 symbol indices.

    Every cubin also carries four pairs (0, -1) .. (0, -4); symbol 0 is the null symbol, so
    pairs with caller 0 or a negative callee are markers, not edges.
    """
    sec = next((s for s in cubin.sections if s.type == SHT_CUDA_CALLGRAPH), None)
    if sec is None:
        return []
    if len(sec.data) % 8:
        raise CubinError(".nv.callgraph is not a list of (u32, u32) pairs")
    return [(a, b) for a, b in struct.iter_unpack("<Ii", sec.data) if a != 0 and b >= 0]
