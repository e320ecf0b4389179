"""pipelink.formats.cubin against real cubins linked by the pinned NVRTC + nvJitLink (no GPU needed).

Each expected value is what the source asks for, and where ptxas prints a summary (`-Xptxas=-v`
in the link) the reader must agree with it too.
"""
from __future__ import annotations

import random
import re
import struct

import pytest

from pipelink import toolchain
from pipelink.formats.cubin import (CubinError, KernelInfo, SYSTEM_RESERVED_SMEM, global_variables,
                                    parse_nv_info, read_cubin, sass_text_equal)

MAIN_SRC = r"""
extern "C" __global__ void k_smem(float* out) {
  __shared__ float buf[1024];  // 4096 bytes
  buf[threadIdx.x] = threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = buf[(threadIdx.x * 7) & 1023];
}
extern "C" __global__ void __launch_bounds__(256, 1) k_lb(float* out) { out[threadIdx.x] = 1.0f; }
extern "C" __global__ void k_bar(float* out) {
  asm volatile("bar.sync 5, 128;");
  out[threadIdx.x] = 2.0f;
}
__device__ __forceinline__ unsigned long long mbar_use(unsigned long long* bar) {
  unsigned a = (unsigned)__cvta_generic_to_shared(bar);
  asm volatile("mbarrier.init.shared.b64 [%0], 1;" :: "r"(a));
  unsigned long long state;
  asm volatile("mbarrier.arrive.shared.b64 %0, [%1];" : "=l"(state) : "r"(a));
  return state;
}
extern "C" __global__ void k_mbar(float* out) {
  __shared__ unsigned long long bar;
  out[threadIdx.x] = (float)mbar_use(&bar);
}
extern "C" __global__ void k_mbar2(float* out) {
  __shared__ unsigned long long b0, b1;
  out[threadIdx.x] = (float)(mbar_use(&b0) + mbar_use(&b1));
}
extern "C" __global__ void k_params(int a, float* p, double d, char c) { p[a] = (float)d + c; }
extern "C" __global__ void k_noparams() { }
struct S12 { int a, b, c; };
struct Big { char b[4000]; };
extern "C" __global__ void k_structs(short s, Big big, S12 t, long long l, float* out) {
  out[0] = s + big.b[5] + t.c + l;
}
struct Huge { char b[16384]; };
extern "C" __global__ void k_huge(char c, Huge h, int i, float* out) { out[0] = c + h.b[9] + i; }
__device__ __noinline__ float helper_call(float x) { return x * x + 1.0f; }
__device__ __forceinline__ float helper_inline(float x) { return x * x + 2.0f; }
extern "C" __global__ void k_call(float* out) { out[threadIdx.x] = helper_call(out[threadIdx.x]); }
extern "C" __global__ void k_inline(float* out) { out[threadIdx.x] = helper_inline(out[threadIdx.x]); }
extern "C" __global__ void k_printf(int* out) { printf("%d\n", out[0]); }
extern "C" __global__ void k_local(float* out, int n, int j) {
  float loc[256];  // indexed at run time: lives in local memory
  for (int i = 0; i < 256; ++i) loc[(i * n) & 255] = out[i * n + threadIdx.x];
  out[threadIdx.x] = loc[j & 255];
}
__device__ int gvar[10];
__device__ const int cvar = 7;
__constant__ float cval[4];
extern "C" __global__ void k_globals(float* out) { out[0] = gvar[(int)out[1]] + cvar + cval[1]; }
"""

SPILL_SRC = r"""
extern "C" __global__ void k_spill(float* out, int n) {
  float acc[96];
#pragma unroll
  for (int i = 0; i < 96; ++i) acc[i] = out[i * n + threadIdx.x];
  for (int r = 0; r < n; ++r) {
#pragma unroll
    for (int i = 0; i < 96; ++i) acc[i] = acc[i] * acc[(i + 1) % 96] + acc[(i + 7) % 96];
  }
  float s = 0;
#pragma unroll
  for (int i = 0; i < 96; ++i) s += acc[i];
  out[threadIdx.x] = s;
}
"""

SETMAXNREG_SRC = r"""
extern "C" __global__ void __launch_bounds__(384, 1) k_setmaxnreg(float* out) {
  if (threadIdx.x >= 128) asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
  else asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
  out[threadIdx.x] = 1.0f;
}
"""

# Two separately compiled SASS cubins linked without -lto: the callee keeps its own section.
CALLER_SRC = r"""
extern "C" __device__ float ext_fn(float x);
__shared__ float shared_at_namespace[256];
extern "C" __global__ void k_ext(float* out) { out[threadIdx.x] = ext_fn(out[threadIdx.x]); }
extern "C" __global__ void k_shared(float* out) {
  shared_at_namespace[threadIdx.x] = 1;
  __syncthreads();
  out[threadIdx.x] = shared_at_namespace[threadIdx.x ^ 1];
}
"""
CALLEE_SRC = r"""
extern "C" __device__ float ext_fn(float x) { return x * 3.0f + 1.0f; }
"""

LTO = ["-dlto", "-rdc=true"]


def _lto_link(src: str, name: str, arch: str = "sm_90", link_opts: tuple = ()) -> toolchain.LinkOutput:
    ltoir = toolchain.nvrtc_to_ltoir(src, f"{name}.cu", [f"-arch={arch}", *LTO])
    return toolchain.nvjitlink_link([toolchain.LinkInput("ltoir", ltoir, name)],
                                    [f"-arch={arch}", "-lto", "-Xptxas=-v", *link_opts])


def _nvrtc_cubin(src: str, name: str, options: list[str]) -> bytes:
    """SASS straight from NVRTC (`-arch=sm_90 -rdc=true`: a relocatable ET_REL cubin)."""
    from cuda.bindings import nvrtc

    err, prog = nvrtc.nvrtcCreateProgram(src.encode(), name.encode(), 0, [], [])
    try:
        opts = [o.encode() for o in options]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
        err, size = nvrtc.nvrtcGetCUBINSize(prog)
        buf = b" " * size
        (err,) = nvrtc.nvrtcGetCUBIN(prog, buf)
        assert err == nvrtc.nvrtcResult.NVRTC_SUCCESS, err
        return bytes(buf)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def build_cubins() -> dict[str, tuple[bytes, str]]:
    """Every cubin these tests read: name -> (cubin, nvJitLink info log)."""
    built = {}
    for name, src, arch, opts in [("main", MAIN_SRC, "sm_90", ()),
                                  ("spill", SPILL_SRC, "sm_90", ("-maxrregcount=32",)),
                                  ("setmaxnreg", SETMAXNREG_SRC, "sm_90a", ())]:
        out = _lto_link(src, name, arch, opts)
        built[name] = (out.cubin, out.info_log)
    built["main_again"] = (_lto_link(MAIN_SRC, "main").cubin, "")
    caller = _nvrtc_cubin(CALLER_SRC, "caller.cu", ["-arch=sm_90", "-rdc=true"])
    callee = _nvrtc_cubin(CALLEE_SRC, "callee.cu", ["-arch=sm_90", "-rdc=true"])
    out = toolchain.nvjitlink_link([toolchain.LinkInput("cubin", caller, "caller"),
                                    toolchain.LinkInput("cubin", callee, "callee")], ["-arch=sm_90"])
    built["non_lto"] = (out.cubin, "")
    built["relocatable"] = (caller, "")
    return built


@pytest.fixture(scope="module")
def built() -> dict[str, tuple[bytes, str]]:
    return build_cubins()


@pytest.fixture(scope="module")
def main(built) -> dict[str, KernelInfo]:
    return read_cubin(built["main"][0])


def ptxas_summary(log: str) -> dict[str, dict[str, int]]:
    """Per entry function, what `ptxas -v` printed: registers, barriers, smem, stack frame."""
    entries = set(re.findall(r"Compiling entry function '(\w+)'", log))
    out: dict[str, dict[str, int]] = {}
    current = None
    for line in log.splitlines():
        if m := re.search(r"Function properties for (\S+)", line):
            current = out.setdefault(m.group(1), {}) if m.group(1) in entries else None
        elif current is not None and (m := re.search(r"(\d+) bytes stack frame", line)):
            current["frame"] = int(m.group(1))
        elif current is not None and (m := re.search(r"Used (\d+) registers, used (\d+) barriers", line)):
            current["registers"], current["barriers"] = int(m.group(1)), int(m.group(2))
            smem = re.search(r"(\d+) bytes smem", line)
            current["smem"] = int(smem.group(1)) if smem else 0
    return out


# --- what the kernels ask for --------------------------------------------------------------

def test_all_kernels_and_only_kernels(main):
    assert set(main) == {"k_smem", "k_lb", "k_bar", "k_mbar", "k_mbar2", "k_params", "k_noparams",
                         "k_structs", "k_huge", "k_call", "k_inline", "k_printf", "k_local",
                         "k_globals"}


def test_static_shared_memory_excludes_the_system_reservation(main):
    assert (main["k_smem"].static_smem_bytes, main["k_smem"].reserved_smem_bytes) == (4096, 1024)
    assert (main["k_mbar"].static_smem_bytes, main["k_mbar"].reserved_smem_bytes) == (8, 1024)
    assert (main["k_lb"].static_smem_bytes, main["k_lb"].reserved_smem_bytes) == (0, 0)


def test_launch_bounds(main):
    assert main["k_lb"].max_threads == (256, 1, 1)
    assert main["k_smem"].max_threads is None
    assert main["k_lb"].max_reg_count == 255  # 256 threads x 255 registers fit: no cap needed


def test_named_barriers(main):
    assert main["k_bar"].num_barriers == 6   # bar.sync 5 -> ids 0..5
    assert main["k_smem"].num_barriers == 1  # __syncthreads is barrier 0
    assert main["k_lb"].num_barriers is None


def test_mbarriers(main):
    assert main["k_mbar"].num_mbarriers == 1
    assert main["k_mbar2"].num_mbarriers == 2
    assert main["k_smem"].num_mbarriers is None


def test_local_array_and_spills_give_a_frame(main, built):
    assert main["k_local"].frame_bytes == 1024  # float[256]
    assert main["k_local"].min_stack_bytes == 1024
    assert main["k_lb"].frame_bytes == 0
    spill = read_cubin(built["spill"][0])["k_spill"]
    assert spill.max_reg_count == 32
    assert spill.registers <= 32
    assert spill.frame_bytes > 0
    assert spill.max_stack_bytes == 0  # MAX_STACK_SIZE is never emitted


def test_calls(main):
    assert main["k_call"].calls          # __noinline__: a local clone called in the kernel's section
    assert not main["k_inline"].calls
    assert main["k_printf"].calls        # vprintf: a .nv.callgraph edge
    assert not main["k_smem"].calls


# Low 12 bits of a 128-bit sm_90 instruction, as cuobjdump -sass (on the GPU machine) decoded them
# in these kernels: CALL.ABS.NOINC <imm> 0x943, CALL.REL.NOINC <imm> 0x944, CALL.ABS.NOINC <reg>
# 0x343. An independent check of `calls`, which reads only symbols, relocations and the callgraph.
CALL_OPCODES = {0x943, 0x944, 0x343}


def _has_call_instruction(text: bytes) -> bool:
    return any((lo & 0xFFF) in CALL_OPCODES for lo, _hi in struct.iter_unpack("<QQ", text))


def test_calls_match_call_instructions(built):
    for name in ("main", "non_lto", "spill", "setmaxnreg"):
        for kernel, info in read_cubin(built[name][0]).items():
            assert info.calls == _has_call_instruction(info.text), (name, kernel)


def test_setmaxnreg(built, main):
    info = read_cubin(built["setmaxnreg"][0])["k_setmaxnreg"]
    assert info.reg_reconfig
    assert info.max_threads == (384, 1, 1)
    assert info.max_reg_count == 168     # 65536 / 384, rounded down to a multiple of 8
    assert not any(k.reg_reconfig for k in main.values())


def test_params(main):
    assert main["k_params"].params == ((0, 0, 4), (1, 8, 8), (2, 16, 8), (3, 24, 1))
    assert main["k_params"].param_bytes == 25
    assert main["k_noparams"].params == ()
    assert main["k_noparams"].param_bytes is None
    assert main["k_structs"].params == ((0, 0, 2), (1, 2, 4000), (2, 4004, 12), (3, 4016, 8), (4, 4024, 8))
    assert main["k_structs"].param_bytes == 4032


def test_params_beyond_16k_use_kparam_info_v2(main):
    assert main["k_huge"].params == ((0, 0, 1), (1, 1, 16384), (2, 16388, 4), (3, 16392, 8))
    assert main["k_huge"].param_bytes == 16400


def test_agrees_with_ptxas(built):
    for name in ("main", "spill", "setmaxnreg"):
        cubin, log = built[name]
        kernels = read_cubin(cubin)
        summary = ptxas_summary(log)
        assert set(summary) == set(kernels), name
        for kernel, want in summary.items():
            info = kernels[kernel]
            got = dict(registers=info.registers, barriers=info.num_barriers or 0,
                       smem=info.static_smem_bytes, frame=info.frame_bytes)
            assert got == want, kernel


def test_text_is_the_kernel_section(main):
    assert len(main["k_call"].text) % 16 == 0 and len(main["k_call"].text) > 0
    assert "text" not in repr(main["k_call"])


def test_no_unknown_attributes_on_sm90_output(main):
    assert all(k.unknown_attrs == () for k in main.values())


# --- other kinds of cubin ------------------------------------------------------------------

def test_non_lto_link(built):
    kernels = read_cubin(built["non_lto"][0])
    assert set(kernels) == {"k_ext", "k_shared"}  # ext_fn has .text/.nv.info but is no entry
    assert kernels["k_ext"].calls                  # a relocation against ext_fn's own section
    assert not kernels["k_shared"].calls
    # No .nv.shared.reserved.0 in this link, but the 1 KB is in the section all the same.
    assert (kernels["k_shared"].static_smem_bytes, kernels["k_shared"].reserved_smem_bytes) == (1024, 1024)


def test_relocatable_cubin_has_no_reservation(built):
    kernels = read_cubin(built["relocatable"][0])
    assert all(k.reserved_smem_bytes == 0 for k in kernels.values())


def test_global_variables(built):
    found = global_variables(built["main"][0])
    assert found["gvar"] == (".nv.global", 40)
    assert found["cvar"] == (".nv.global.init", 4)
    assert found["cval"] == (".nv.constant3", 16)
    assert ".nv.reservedSmem.offset0" not in found  # undefined
    assert "k_smem" not in found


def test_sass_text_equal(built):
    a, b = built["main"][0], built["main_again"][0]
    assert sass_text_equal(a, b, "k_call")
    assert sass_text_equal(a, a, "k_smem")
    spill = built["spill"][0]
    with pytest.raises(CubinError):
        sass_text_equal(a, spill, "k_call")


def test_sass_text_differs(built):
    cubin = bytearray(built["main"][0])
    off, _ = _section_span(cubin, ".text.k_lb")
    cubin[off] ^= 1
    assert not sass_text_equal(built["main"][0], bytes(cubin), "k_lb")
    assert sass_text_equal(built["main"][0], bytes(cubin), "k_smem")


# --- malformed input ------------------------------------------------------------------------

def _section_span(cubin: bytes, name: str) -> tuple[int, int]:
    """(file offset, size) of a section's bytes."""
    from io import BytesIO

    from elftools.elf.elffile import ELFFile

    sec = ELFFile(BytesIO(bytes(cubin))).get_section_by_name(name)
    return sec["sh_offset"], sec["sh_size"]


def _shdr_offset(cubin: bytes, name: str) -> int:
    from io import BytesIO

    from elftools.elf.elffile import ELFFile

    elf = ELFFile(BytesIO(bytes(cubin)))
    index = next(i for i, s in enumerate(elf.iter_sections()) if s.name == name)
    return elf["e_shoff"] + index * elf["e_shentsize"]


def test_truncated_nv_info_record_raises_cubin_error(built):
    cubin = bytearray(built["main"][0])
    shdr = _shdr_offset(cubin, ".nv.info.k_smem")
    (size,) = struct.unpack_from("<Q", cubin, shdr + 32)
    struct.pack_into("<Q", cubin, shdr + 32, size - 2)  # the last record loses two bytes
    with pytest.raises(CubinError, match="truncated"):
        read_cubin(bytes(cubin))


def test_record_longer_than_its_section_raises_cubin_error(built):
    cubin = bytearray(built["main"][0])
    off, _ = _section_span(cubin, ".nv.info.k_smem")
    assert cubin[off:off + 2] == b"\x04\x37"  # CUDA_API_VERSION, 4 bytes
    struct.pack_into("<H", cubin, off + 2, 0xFFF0)
    with pytest.raises(CubinError):
        read_cubin(bytes(cubin))


def test_unknown_attributes_are_kept(built):
    cubin = bytearray(built["main"][0])
    off, _ = _section_span(cubin, ".nv.info.k_smem")
    cubin[off + 1] = 0x7E                    # CUDA_API_VERSION (SVAL) -> an unknown code
    recs = parse_nv_info(bytes(cubin[off:off + _section_span(cubin, ".nv.info.k_smem")[1]]))
    hval = next(i for i, r in enumerate(recs) if r.fmt == 3 and r.attr == 0x50)
    rec_off = off + sum(4 + (len(r.value) if r.fmt == 4 else 0) for r in recs[:hval])
    cubin[rec_off:rec_off + 2] = b"\x01\x7f"  # SPARSE_MMA_MASK (HVAL) -> an unknown NVAL
    info = read_cubin(bytes(cubin))["k_smem"]
    assert info.unknown_attrs == (0x7E, 0x7F)
    assert (info.static_smem_bytes, info.num_barriers, info.params) == (4096, 1, ((0, 0, 8),))


def test_not_a_cubin():
    for data in (b"", b"\x7fELF", b"MZ" + bytes(100), bytes(64)):
        with pytest.raises(CubinError):
            read_cubin(data)


def test_truncated_cubin_raises_cubin_error(built):
    cubin = built["setmaxnreg"][0]
    for cut in (16, 63, 64, 200, len(cubin) // 2, len(cubin) - 1):
        with pytest.raises(CubinError):
            read_cubin(cubin[:cut])


def test_random_corruption_only_ever_raises_cubin_error(built):
    cubin = built["setmaxnreg"][0]
    rng = random.Random(90)
    for _ in range(400):
        data = bytearray(cubin)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        try:
            read_cubin(bytes(data))
            global_variables(bytes(data))
        except CubinError:
            pass


# --- the record reader ----------------------------------------------------------------------

def test_parse_nv_info_formats():
    data = (b"\x01\x54\x00\x00" + b"\x02\x4c\x06\x00" + b"\x03\x1b\xa8\x00"
            + b"\x04\x05\x0c\x00" + struct.pack("<III", 384, 1, 1))
    assert [(r.fmt, r.attr, r.value) for r in parse_nv_info(data)] == [
        (1, 0x54, None), (2, 0x4C, 6), (3, 0x1B, 168), (4, 0x05, struct.pack("<III", 384, 1, 1))]
    assert parse_nv_info(b"") == []


@pytest.mark.parametrize("data", [b"\x03\x1b\xa8", b"\x04\x05\x0c\x00" + bytes(8), b"\x07\x01\x00\x00"])
def test_parse_nv_info_rejects(data):
    with pytest.raises(CubinError):
        parse_nv_info(data)


def test_reservation_constant():
    assert SYSTEM_RESERVED_SMEM == 1024
