"""pipelink.runtime.launch: argument checks and packing, float conversions and grid sizing without a GPU;
loading and launching real cubins on one (tests marked `gpu`, skipped where none is present)."""
from __future__ import annotations

import copy
import ctypes
import math
import random
import struct
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipelink.runtime import driver as driver_mod
from pipelink.runtime import launch
from pipelink.runtime import scalars
from pipelink.runtime.launch import ArgumentError, Kernel, LaunchError, gpu_available

try:  # for the numpy forms of an argument, where numpy is installed
    import numpy as np
except ImportError:
    np = None
from pipelink.runtime.scalars import float_to_bf16_bits, float_to_f16_bits, float_to_fp8_e4m3_bits, float_to_fp8_e5m2_bits

MANIFEST = {
    "manifest": 1, "kernel": "rowsum_fused", "target": "sm_90", "block": [128, 1, 1], "dynamic_smem": 33024,
    "params": [{"name": "x", "dtype": "f32", "pointer": True, "const": True},
               {"name": "out", "dtype": "f32", "pointer": True, "const": False},
               {"name": "M", "dtype": "i32", "pointer": False, "const": False},
               {"name": "scale", "dtype": "f32", "pointer": False, "const": False}],
    "tiles": ["ceil_div(M, 32)", "ceil_div(N, 128)"],
}


# --- fakes -----------------------------------------------------------------------------------

class FakeTensor:
    """What pipelink reads of a torch tensor, without torch."""

    def __init__(self, ptr=0x7F0000001000, dtype="torch.float32", device="cuda:0", contiguous=True):
        kind, _, index = device.partition(":")
        self.ptr, self.dtype, self.contiguous = ptr, dtype, contiguous
        self.device = SimpleNamespace(type=kind, index=int(index) if index else None)

    def data_ptr(self):
        return self.ptr

    def is_contiguous(self):
        return self.contiguous


class FakeCudaArray:
    """A CuPy-like array: only __cuda_array_interface__."""

    def __init__(self, ptr=0x7F0000002000, typestr="<f4", shape=(4, 8), strides=None, readonly=False, **extra):
        self.__cuda_array_interface__ = {"data": (ptr, readonly), "typestr": typestr, "shape": shape,
                                         "strides": strides, "version": 3, **extra}


class FakeDLPack:
    def __init__(self, device=(2, 0)):
        self.device = device

    def __dlpack__(self, stream=None):
        raise AssertionError("not reached in these tests")

    def __dlpack_device__(self):
        return self.device


def kernel(manifest=None) -> Kernel:
    return Kernel(copy.deepcopy(manifest or MANIFEST))


def fake_occupancy(k: Kernel, sms: int, per_sm: int) -> Kernel:
    k.num_sms = lambda: sms
    k.max_active_blocks_per_sm = lambda: per_sm
    return k


# --- binding ---------------------------------------------------------------------------------

def test_pack_positional_and_keyword():
    k = kernel()
    packed = k.pack_args(FakeTensor(ptr=0x1000), out=FakeCudaArray(ptr=0x2000), M=7, scale=0.5)
    assert [type(p) for p in packed] == [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32, ctypes.c_float]
    assert [p.value for p in packed] == [0x1000, 0x2000, 7, 0.5]
    assert [p.value for p in k.pack_args(0x10, 0x20, 3, 2)] == [0x10, 0x20, 3, 2.0]


@pytest.mark.parametrize("args, kwargs, words", [
    ((1, 2, 3), {}, ["missing", "'scale'"]),
    ((1, 2, 3, 4.0, 5), {}, ["takes 4", "5 were given"]),
    ((1, 2, 3, 4.0), {"bogus": 1}, ["no parameter 'bogus'"]),
    ((1, 2, 3), {"M": 3, "scale": 1.0}, ["'M'", "position and by keyword"]),
])
def test_bind_errors(args, kwargs, words):
    with pytest.raises(TypeError) as err:
        kernel().pack_args(*args, **kwargs)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_pointer_param_refuses_scalars_and_scalar_param_refuses_tensors():
    k = kernel()
    with pytest.raises(TypeError, match=r"'x' is a pointer \(const f32\*\).*float"):
        k.pack_args(1.5, 0x20, 3, 1.0)
    with pytest.raises(TypeError, match="'x'"):
        k.pack_args(True, 0x20, 3, 1.0)
    with pytest.raises(TypeError, match="'x'.*not a 64-bit device address"):
        k.pack_args(-1, 0x20, 3, 1.0)
    with pytest.raises(TypeError, match="'M' is a scalar i32"):
        k.pack_args(0x10, 0x20, FakeTensor(dtype="torch.int32"), 1.0)
    with pytest.raises(TypeError, match="'scale' is a scalar f32"):
        k.pack_args(0x10, 0x20, 3, FakeCudaArray())
    with pytest.raises(TypeError, match="'scale' is a f32, got str"):
        k.pack_args(0x10, 0x20, 3, "1.0")


# --- tensors and arrays ------------------------------------------------------------------------

def test_torch_like_dtype_mismatch_names_both():
    with pytest.raises(TypeError) as err:
        kernel().pack_args(FakeTensor(dtype="torch.float16"), 0x20, 3, 1.0)
    assert "'x'" in str(err.value) and "f32" in str(err.value) and "torch.float16" in str(err.value)


def test_torch_like_checks():
    k = kernel()
    with pytest.raises(TypeError, match="'x' is not contiguous"):
        k.pack_args(FakeTensor(contiguous=False), 0x20, 3, 1.0)
    with pytest.raises(TypeError, match="'out' is a cpu tensor"):
        k.pack_args(0x10, FakeTensor(device="cpu"), 3, 1.0)
    with pytest.raises(TypeError, match="'out' is on cuda:1.*cuda:0"):
        k.pack_args(0x10, FakeTensor(device="cuda:1"), 3, 1.0)
    on_one = Kernel(copy.deepcopy(MANIFEST), device=1)
    assert on_one.pack_args(0x10, FakeTensor(ptr=0x40, device="cuda:1"), 3, 1.0)[1].value == 0x40


@pytest.mark.parametrize("torch_name, dtype", [
    ("float32", "f32"), ("float16", "f16"), ("bfloat16", "bf16"), ("float64", "f64"), ("int32", "i32"),
    ("int64", "i64"), ("uint8", "u8"), ("int8", "i8"), ("int16", "i16"), ("bool", "bool"),
    ("float8_e4m3fn", "fp8_e4m3"), ("float8_e5m2", "fp8_e5m2"), ("uint16", "u16"), ("uint32", "u32"),
    ("uint64", "u64")])
def test_torch_dtype_map(torch_name, dtype):
    m = copy.deepcopy(MANIFEST)
    m["params"][0]["dtype"] = dtype
    assert Kernel(m).pack_args(FakeTensor(ptr=0x80, dtype=f"torch.{torch_name}"), 0x20, 3, 1.0)[0].value == 0x80


def test_fp8_fnuz_is_not_e4m3():
    m = copy.deepcopy(MANIFEST)
    m["params"][0]["dtype"] = "fp8_e4m3"
    with pytest.raises(TypeError, match="float8_e4m3fnuz"):
        Kernel(m).pack_args(FakeTensor(dtype="torch.float8_e4m3fnuz"), 0x20, 3, 1.0)


@pytest.mark.parametrize("typestr, dtype", [
    ("<f4", "f32"), ("<f2", "f16"), ("<f8", "f64"), ("<i4", "i32"), ("<i8", "i64"), ("<u4", "u32"),
    ("<u8", "u64"), ("|u1", "u8"), ("|i1", "i8"), ("<i2", "i16"), ("<u2", "u16"), ("|b1", "bool"),
    ("<V2", "bf16")])
def test_typestr_map(typestr, dtype):
    m = copy.deepcopy(MANIFEST)
    m["params"][0]["dtype"] = dtype
    assert Kernel(m).pack_args(FakeCudaArray(ptr=0x90, typestr=typestr), 0x20, 3, 1.0)[0].value == 0x90


def test_cuda_array_interface_checks():
    k = kernel()
    with pytest.raises(TypeError) as err:
        k.pack_args(FakeCudaArray(typestr="<f8"), 0x20, 3, 1.0)
    assert "'<f8'" in str(err.value) and "f32" in str(err.value) and "f64" in str(err.value)
    with pytest.raises(TypeError, match="'x' is not C-contiguous"):
        k.pack_args(FakeCudaArray(shape=(4, 8), strides=(4, 16)), 0x20, 3, 1.0)  # a transposed view
    with pytest.raises(TypeError, match="'out' is read-only"):
        k.pack_args(0x10, FakeCudaArray(readonly=True), 3, 1.0)
    k.pack_args(FakeCudaArray(readonly=True), 0x20, 3, 1.0)  # fine for a const parameter
    with pytest.raises(TypeError, match="masked"):
        k.pack_args(FakeCudaArray(mask=object()), 0x20, 3, 1.0)
    m = copy.deepcopy(MANIFEST)
    m["params"][0]["dtype"] = "f16"
    with pytest.raises(TypeError, match="'<V2'"):  # an opaque void passes for bf16 only
        Kernel(m).pack_args(FakeCudaArray(typestr="<V2"), 0x20, 3, 1.0)


def test_cuda_array_interface_device_check():
    k = kernel()
    k.pointer_device = lambda ptr: -1
    with pytest.raises(TypeError, match="'x'.*not CUDA device memory"):
        k.pack_args(FakeCudaArray(), 0x20, 3, 1.0)
    k.pointer_device = lambda ptr: 1
    with pytest.raises(TypeError, match="'x' is on cuda:1"):
        k.pack_args(FakeCudaArray(), 0x20, 3, 1.0)
    k.pointer_device = lambda ptr: 0
    assert k.pack_args(FakeCudaArray(ptr=0x50), 0x20, 3, 1.0)[0].value == 0x50
    assert kernel().pointer_device(0x50) is None  # not loaded: nobody to ask


@pytest.mark.parametrize("shape, strides, ok", [
    ((4, 8), None, True), ((4, 8), (32, 4), True), ((4, 8), (4, 16), False), ((4, 1), (4, 999), True),
    ((0, 8), (4, 4), True), ((2, 3, 4), (48, 16, 4), True), ((2, 3, 4), (96, 32, 8), False), ((), (), True)])
def test_c_contiguous(shape, strides, ok):
    assert launch._c_contiguous(shape, strides, 4) is ok


def test_dlpack_fallback():
    k = kernel()
    with pytest.raises(TypeError, match=r"'x' is not in CUDA device memory \(DLPack device type 1"):
        k.pack_args(FakeDLPack(device=(1, 0)), 0x20, 3, 1.0)
    with pytest.raises(TypeError, match="'x' is on cuda:1"):
        k.pack_args(FakeDLPack(device=(2, 1)), 0x20, 3, 1.0)
    try:
        import torch  # noqa: F401
    except ImportError:
        with pytest.raises(TypeError, match="needs torch"):
            k.pack_args(FakeDLPack(), 0x20, 3, 1.0)


# --- scalars -----------------------------------------------------------------------------------

INT_MANIFEST = {"kernel": "ints", "block": [32], "params": [
    {"name": n, "dtype": d, "pointer": False} for n, d in
    [("a", "i8"), ("b", "u8"), ("c", "i16"), ("d", "u16"), ("e", "i32"), ("f", "u32"), ("g", "i64"), ("h", "u64"),
     ("flag", "bool")]]}


def test_int_scalars_in_range():
    lows = [-128, 0, -32768, 0, -2**31, 0, -2**63, 0, False]
    highs = [127, 255, 32767, 65535, 2**31 - 1, 2**32 - 1, 2**63 - 1, 2**64 - 1, True]
    k = Kernel(INT_MANIFEST)
    for values in (lows, highs):
        packed = k.pack_args(*values)
        assert [p.value for p in packed] == values
    expected = [ctypes.c_int8, ctypes.c_uint8, ctypes.c_int16, ctypes.c_uint16, ctypes.c_int32, ctypes.c_uint32,
                ctypes.c_int64, ctypes.c_uint64, ctypes.c_bool]
    assert [type(p) for p in packed] == expected


@pytest.mark.parametrize("name, value", [("a", 128), ("a", -129), ("b", -1), ("b", 256), ("d", 65536),
                                         ("e", 2**31), ("f", -1), ("f", 2**32), ("g", 2**63), ("h", -1)])
def test_int_scalar_out_of_range(name, value):
    values = dict(a=0, b=0, c=0, d=0, e=0, f=0, g=0, h=0, flag=False)
    values[name] = value
    with pytest.raises(TypeError, match=f"'{name}' = {value} is out of range") as err:
        Kernel(INT_MANIFEST).pack_args(**values)
    assert isinstance(err.value, ValueError)  # an ArgumentError is both


def test_int_scalar_refuses_floats_and_bool_refuses_two():
    k = Kernel(INT_MANIFEST)
    with pytest.raises(TypeError, match="'e' is an integer"):
        k.pack_args(0, 0, 0, 0, 3.0, 0, 0, 0, True)
    with pytest.raises(TypeError, match="'flag' is a bool"):
        k.pack_args(0, 0, 0, 0, 0, 0, 0, 0, 2)
    assert k.pack_args(0, 0, 0, 0, 0, 0, 0, 0, 1)[-1].value is True


FLOAT_MANIFEST = {"kernel": "floats", "block": [32], "params": [
    {"name": n, "dtype": d, "pointer": False} for n, d in
    [("d", "f64"), ("f", "f32"), ("h", "f16"), ("b", "bf16"), ("e4", "fp8_e4m3"), ("e5", "fp8_e5m2")]]}


def test_float_scalars_pack_bit_patterns():
    packed = Kernel(FLOAT_MANIFEST).pack_args(1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
    assert [type(p) for p in packed] == [ctypes.c_double, ctypes.c_float, ctypes.c_uint16, ctypes.c_uint16,
                                         ctypes.c_uint8, ctypes.c_uint8]
    assert [p.value for p in packed] == [1.0, 1.0, 0x3C00, 0x3F80, 0x38, 0x3C]
    assert [p.value for p in Kernel(FLOAT_MANIFEST).pack_args(2, 3, 4, 5, 6, 7)][2:] == [
        0x4400, 0x40A0, 0x4C, 0x47]  # ints are taken as floats


@pytest.mark.parametrize("name, value", [("f", 1e39), ("h", 65520.0), ("b", 3.4e38), ("e4", 480.0),
                                         ("e4", math.inf), ("e5", 61440.0)])
def test_float_scalar_out_of_range(name, value):
    values = dict(d=0.0, f=0.0, h=0.0, b=0.0, e4=0.0, e5=0.0)
    values[name] = value
    with pytest.raises(TypeError, match=f"'{name}' = .* is out of range"):
        Kernel(FLOAT_MANIFEST).pack_args(**values)


@pytest.mark.parametrize("x, bits", [
    (1.0, 0x3F80), (-2.0, 0xC000), (0.1, 0x3DCD), (1 / 3, 0x3EAB), (3.140625, 0x4049), (0.0, 0x0000),
    (-0.0, 0x8000), (1 + 2**-8, 0x3F80), (1 + 3 * 2**-8, 0x3F82), (1 + 2**-8 + 2**-30, 0x3F81),
    (2.0**-133, 0x0001), (2.0**-134, 0x0000), (3 * 2.0**-135, 0x0001), (2.0**-126, 0x0080),
    (3.3895313892515355e38, 0x7F7F), (math.inf, 0x7F80), (-math.inf, 0xFF80), (math.nan, 0x7FC0)])
def test_bf16_bits(x, bits):
    assert float_to_bf16_bits(x) == bits


@pytest.mark.parametrize("x, bits", [(1.0, 0x3C00), (-2.0, 0xC000), (0.1, 0x2E66), (65504.0, 0x7BFF),
                                     (2.0**-24, 0x0001), (math.inf, 0x7C00), (-0.0, 0x8000)])
def test_f16_bits(x, bits):
    assert float_to_f16_bits(x) == bits


def test_f16_bits_overflow():
    with pytest.raises(OverflowError):
        float_to_f16_bits(65520.0)


def _bf16_via_f32(x: float) -> int:
    """The usual f32 bit trick; exact for values that are already f32 (no double rounding)."""
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    return (b + 0x7FFF + ((b >> 16) & 1)) >> 16


def test_generic_rounding_matches_struct_half_and_the_f32_trick():
    """The one routine behind bf16 and fp8 agrees with CPython's half packing on f16's layout, and
    with the f32 bit trick on bf16, over normals, subnormals, exact ties and overflow."""
    rng = random.Random(1234)
    values = [rng.uniform(-1, 1) * 2.0 ** rng.randint(-30, 17) for _ in range(20000)]
    values += [(2 * k + 1) * 2.0 ** e for k in range(64) for e in range(-26, 6)]  # halfway cases
    for x in values:
        try:
            want = float_to_f16_bits(x)
        except OverflowError:
            with pytest.raises(OverflowError):
                scalars._round_to_small_float(x, 5, 10, 0x7BFF, 0x7C00, 0x7E00)
            continue
        assert scalars._round_to_small_float(x, 5, 10, 0x7BFF, 0x7C00, 0x7E00) == want, x
    for _ in range(20000):
        x = struct.unpack("<f", struct.pack("<I", rng.getrandbits(31) | rng.getrandbits(1) << 31))[0]
        if math.isfinite(x) and abs(x) < 3.38e38:
            assert float_to_bf16_bits(x) == _bf16_via_f32(x), x


@pytest.mark.parametrize("x, bits", [(1.0, 0x38), (448.0, 0x7E), (-448.0, 0xFE), (464.0, 0x7E), (2.0**-9, 0x01),
                                     (2.0**-6, 0x08), (0.1, 0x1D), (math.nan, 0x7F), (-0.0, 0x80)])
def test_fp8_e4m3_bits(x, bits):
    assert float_to_fp8_e4m3_bits(x) == bits


@pytest.mark.parametrize("x", [465.0, 1e6, math.inf])
def test_fp8_e4m3_overflow(x):
    with pytest.raises(OverflowError):
        float_to_fp8_e4m3_bits(x)


def test_fp8_e5m2_is_rounded_half():
    assert float_to_fp8_e5m2_bits(1.0) == 0x3C and float_to_fp8_e5m2_bits(57344.0) == 0x7B
    assert float_to_fp8_e5m2_bits(math.inf) == 0x7C and float_to_fp8_e5m2_bits(math.nan) == 0x7E
    rng = random.Random(7)
    for _ in range(5000):  # halves whose low byte is zero are e5m2 values: the high byte is the answer
        h = rng.randrange(0, 0x7C) << 8 | rng.choice([0, 0x80 << 8])
        x = struct.unpack("<e", struct.pack("<H", h))[0]
        assert float_to_fp8_e5m2_bits(x) == h >> 8, hex(h)


# --- the manifest --------------------------------------------------------------------------------

@pytest.mark.parametrize("change, words", [
    (lambda m: m["params"][0].update(dtype="f128"), "unknown dtype"),
    (lambda m: m["params"][1].update(name="x"), "appears twice"),
    (lambda m: m["params"][1].update(pointer="yes"), "booleans"),
    (lambda m: m.update(block=[0, 1, 1]), "'block'"),
    (lambda m: m.update(block=[64, 32, 1]), "more than 1024"),
    (lambda m: m.update(tiles=["M ** 2"]), "bad tile expression"),
    (lambda m: m.update(dynamic_smem=-1), "dynamic_smem"),
    (lambda m: m.update(manifest=3), "manifest version"),
    (lambda m: m["params"][0].update(implicit="scratch"), "unknown implicit kind"),
    (lambda m: m["params"].append({"name": "w", "dtype": "u64", "pointer": True, "implicit": "workspace"}),
     "implicit parameters"),
])
def test_manifest_errors(change, words):
    m = copy.deepcopy(MANIFEST)
    change(m)
    with pytest.raises(ValueError, match=words):
        Kernel(m)


def test_manifest_defaults():
    k = Kernel({"kernel": "k", "block": [256]})
    assert k.block == (256, 1, 1) and k.dynamic_smem == 0 and k.params == () and k.pack_args() == []
    assert fake_occupancy(k, 132, 4).grid_for() == 1


# --- the grid ----------------------------------------------------------------------------------

def test_grid_for_with_fake_occupancy():
    k = fake_occupancy(kernel(), sms=132, per_sm=2)
    assert k.total_tiles(M=1000, N=1000) == 32 * 8
    assert k.grid_for(M=1000, N=1000) == 256  # all tiles fit at once
    assert k.grid_for(M=10_000, N=1000) == 264  # persistent: one wave of resident blocks
    assert k.grid_for(M=0, N=1000) == 1  # never an empty grid
    with pytest.raises(TypeError, match="'ceil_div\\(N, 128\\)'.*N"):
        k.grid_for(M=10)


def test_grid_for_without_room_is_a_launch_error():
    with pytest.raises(LaunchError, match="no block of 128 threads with 33024 B"):
        fake_occupancy(kernel(), sms=132, per_sm=0).grid_for(M=1, N=1)


def test_resident_blocks_is_asked_once():
    k, calls = kernel(), []
    k.num_sms = lambda: calls.append("sms") or 10
    k.max_active_blocks_per_sm = lambda: calls.append("occ") or 3
    assert k.grid_for(M=3200, N=12800) == 30 and k.grid_for(M=32, N=128) == 1
    assert calls == ["occ", "sms"]


def test_launch_needs_every_tile_name_or_a_grid():
    k = fake_occupancy(kernel(), 132, 2)
    with pytest.raises(TypeError, match="use N, which are not integer parameters: pass grid="):
        k.launch(0x10, 0x20, 3, 1.0)
    with pytest.raises(LaunchError, match="not loaded"):
        k.launch(0x10, 0x20, 3, 1.0, grid=4)


def test_driver_queries_need_a_loaded_kernel():
    with pytest.raises(LaunchError, match="not loaded"):
        kernel().grid_for(M=1, N=1)


@pytest.mark.parametrize("grid, dims", [(5, (5, 1, 1)), ((2, 3), (2, 3, 1)), ([1, 2, 3], (1, 2, 3))])
def test_grid_dims(grid, dims):
    assert launch._grid_dims(grid) == dims


@pytest.mark.parametrize("grid", [0, (1, 0), 1.5, (1, 2, 3, 4), True])
def test_grid_dims_refused(grid):
    with pytest.raises((TypeError, ValueError)):
        launch._grid_dims(grid)


def test_stream_handles():
    assert launch._stream_handle(None) == 0
    assert launch._stream_handle(0x1234) == 0x1234
    assert launch._stream_handle(SimpleNamespace(cuda_stream=0x10)) == 0x10  # torch.cuda.Stream
    assert launch._stream_handle(SimpleNamespace(ptr=0x20)) == 0x20  # cupy.cuda.Stream
    assert launch._stream_handle(SimpleNamespace(__cuda_stream__=lambda: (0, 0x30))) == 0x30
    from cuda.bindings import driver
    assert launch._stream_handle(driver.CUstream(0x40)) == 0x40
    with pytest.raises(TypeError):
        launch._stream_handle(True)
    with pytest.raises(TypeError):
        launch._stream_handle("default")


# --- the driver, faked -----------------------------------------------------------------------

def test_call_turns_errors_into_launch_errors():
    from cuda.bindings import driver
    assert driver_mod.call("x", lambda: (driver.CUresult.CUDA_SUCCESS,)) is None
    assert driver_mod.call("x", lambda: (driver.CUresult.CUDA_SUCCESS, 5)) == 5
    assert driver_mod.call("x", lambda: (driver.CUresult.CUDA_SUCCESS, 5, 6)) == (5, 6)
    with pytest.raises(LaunchError) as err:
        driver_mod.call("cuModuleLoadData for kernel 'k'", lambda: (driver.CUresult.CUDA_ERROR_INVALID_IMAGE, None))
    assert err.value.result == "CUDA_ERROR_INVALID_IMAGE"
    assert err.value.message.startswith("cuModuleLoadData for kernel 'k' failed: CUDA_ERROR_INVALID_IMAGE")

    def boom():
        raise RuntimeError("no libcuda")
    with pytest.raises(LaunchError, match="cuInit failed: RuntimeError.*no libcuda"):
        driver_mod.call("cuInit", boom)


def test_gpu_available_never_raises(monkeypatch):
    assert gpu_available() in (True, False)

    def broken():
        raise ImportError("no cuda-bindings")
    monkeypatch.setattr(driver_mod, "driver", broken)
    assert gpu_available() is False


class FakeDriver:
    """Just enough of cuda.bindings.driver to watch cuLaunchKernel read its kernelParams."""

    def __init__(self, dtypes):
        from cuda.bindings import driver
        self.CUresult, self.CUstream, self.dtypes, self.seen = driver.CUresult, driver.CUstream, dtypes, None

    def cuCtxSetCurrent(self, ctx):
        return (self.CUresult.CUDA_SUCCESS,)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        # Read the parameters the way the driver does: params is a void**, one slot per parameter.
        slots = (ctypes.c_void_p * len(self.dtypes)).from_address(params) if self.dtypes else []
        assert bool(params) == bool(self.dtypes)
        values = [ctype.from_address(slot).value for ctype, slot in zip(self.dtypes, slots)]
        self.seen = dict(grid=(gx, gy, gz), block=(bx, by, bz), smem=smem, stream=int(stream), values=values,
                         extra=extra)
        return (self.CUresult.CUDA_SUCCESS,)


def test_launch_builds_kernel_params(monkeypatch):
    fake = FakeDriver([ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32, ctypes.c_float])
    monkeypatch.setattr(driver_mod, "driver", lambda: fake)
    k = fake_occupancy(kernel(), sms=132, per_sm=2)
    k.function = object()  # pretend it is loaded
    k.pointer_device = lambda ptr: 0
    m = copy.deepcopy(MANIFEST)
    m["tiles"] = ["ceil_div(M, 32)"]
    k.manifest, k.tiles = Kernel(m).manifest, Kernel(m).tiles
    k.launch(FakeTensor(ptr=0xAB00), FakeCudaArray(ptr=0xCD00), 3200, 0.25, stream=SimpleNamespace(cuda_stream=9))
    assert fake.seen == dict(grid=(100, 1, 1), block=(128, 1, 1), smem=33024, stream=9,
                             values=[0xAB00, 0xCD00, 3200, 0.25], extra=0)
    k.launch(1, 2, M=5, scale=1.0, grid=(7,))
    assert fake.seen["grid"] == (7, 1, 1) and fake.seen["values"] == [1, 2, 5, 1.0] and fake.seen["stream"] == 0
    # the glue walks tiles over blockIdx.x: a second row of CTAs would run every tile twice
    with pytest.raises(ArgumentError, match="one-dimensional grid"):
        k.launch(1, 2, M=5, scale=1.0, grid=(7, 2))


def _clustered(n: int, sms: int, per_sm: int, clusters: int, tiles=None) -> Kernel:
    m = copy.deepcopy(MANIFEST)
    m["cluster"] = [n, 1, 1]
    m["tiles"] = tiles or m["tiles"]
    k = fake_occupancy(Kernel(m), sms=sms, per_sm=per_sm)
    k.max_active_clusters = lambda: clusters
    return k


def test_a_clustered_kernel_gets_whole_clusters_that_fit_at_once():
    # 132 SMs of 2 blocks hold 264, but only 60 clusters of 4 fit in the GPCs at once: 240 resident
    k = _clustered(4, sms=132, per_sm=2, clusters=60)
    assert k.cluster_ctas == 4 and k.resident_blocks() == 240
    assert k.grid_for(M=10_000, N=1000) == 240
    assert k.grid_for(M=32 * 5, N=128) == 8  # 5 tiles: two clusters, the last three CTAs find no tile
    assert k.grid_for(M=0, N=1000) == 4
    # the SMs' blocks bound it too, in whole clusters: 10 SMs of 3 blocks hold 30, 7 clusters of 4
    assert _clustered(4, sms=10, per_sm=3, clusters=60).resident_blocks() == 28
    with pytest.raises(LaunchError, match="no cluster of 4 blocks"):
        _clustered(4, sms=132, per_sm=2, clusters=0).resident_blocks()
    with pytest.raises(LaunchError, match="no cluster of 4 blocks"):  # fewer blocks than one cluster, however asked
        _clustered(4, sms=3, per_sm=1, clusters=1).resident_blocks()


def test_a_clustered_kernel_refuses_a_grid_of_part_clusters(monkeypatch):
    fake = FakeDriver([ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32, ctypes.c_float])
    monkeypatch.setattr(driver_mod, "driver", lambda: fake)
    k = _clustered(2, sms=132, per_sm=2, clusters=100, tiles=["ceil_div(M, 32)"])
    k.function = object()
    k.pointer_device = lambda ptr: 0
    with pytest.raises(ArgumentError, match="clusters of 2 CTAs.*grid of 7"):
        k.launch(1, 2, M=5, scale=1.0, grid=7)
    k.launch(1, 2, M=5, scale=1.0, grid=8)
    assert fake.seen["grid"] == (8, 1, 1)
    k.launch(1, 2, M=32 * 3, scale=1.0)  # the launcher's own grid: 3 tiles in 2 clusters
    assert fake.seen["grid"] == (4, 1, 1)


def test_a_clustered_walk_of_part_clusters_is_refused_at_launch(monkeypatch):
    """A component that declares the cluster walks a tile count over runtime values (the manifest's cluster_tiles):
    a launch that makes it other than whole clusters is refused before the driver sees it, naming the component,
    the count and the cluster; by the launcher's grid or a grid passed by hand."""
    from pipelink.runtime.launch import cluster_tiles_problem
    fake = FakeDriver([ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32, ctypes.c_float])
    monkeypatch.setattr(driver_mod, "driver", lambda: fake)
    m = copy.deepcopy(MANIFEST)
    m.update(cluster=[2, 1, 1], tiles=["ceil_div(M, 32)"], cluster_tiles={"tile_load": "(ceil_div(M, 32))"})
    k = fake_occupancy(Kernel(m), sms=132, per_sm=2)
    k.max_active_clusters = lambda: 100
    k.function = object()
    k.pointer_device = lambda ptr: 0
    for grid in (None, 8):
        with pytest.raises(ArgumentError, match=r"component 'tile_load' of kernel 'rowsum_fused' declares a cluster "
                                                r"of 2 CTAs, and its tile count \(ceil_div\(M, 32\)\) is 3 for M=96"):
            k.launch(1, 2, M=32 * 3, scale=1.0, grid=grid)
    assert fake.seen is None  # nothing launched
    k.launch(1, 2, M=32 * 4, scale=1.0)  # 4 tiles: two whole clusters
    assert fake.seen["grid"] == (4, 1, 1)
    k.launch(1, 2, M=0, scale=1.0)  # no tile at all: nothing to walk out of step
    # the decision alone
    assert cluster_tiles_problem("k", 4, {"c": "M * 2"}, {"M": 6}) is None
    assert "tile count M * 2 is 6" in cluster_tiles_problem("k", 4, {"c": "M * 2"}, {"M": 3})
    assert cluster_tiles_problem("k", 2, {"c": "M // N"}, {"M": 3, "N": 0}) is None  # the tile counts say so
    # the manifest carries it only with the cluster, and reads it back
    assert Kernel(m).manifest.to_json()["cluster_tiles"] == {"tile_load": "(ceil_div(M, 32))"}
    with pytest.raises(launch.ManifestError, match="no 'cluster'"):
        Kernel(dict(copy.deepcopy(MANIFEST), cluster_tiles={"c": "M"}))
    with pytest.raises(launch.ManifestError, match="'cluster_tiles' of 'c'"):
        Kernel(dict(copy.deepcopy(m), cluster_tiles={"c": "M +"}))


def test_launch_without_params(monkeypatch):
    fake = FakeDriver([])
    monkeypatch.setattr(driver_mod, "driver", lambda: fake)
    k = Kernel({"kernel": "noargs", "block": [32]})
    k.function = object()
    k.launch(grid=3)
    assert fake.seen["grid"] == (3, 1, 1) and fake.seen["values"] == []


# --- on a GPU ----------------------------------------------------------------------------------

gpu = pytest.mark.skipif(not gpu_available(), reason="needs an NVIDIA GPU and its driver")

AXPY_SRC = r"""
// out = a*x + y over n elements, tile by tile (128 per tile), grid-stride over the tiles. The value
// goes through the far end of a 64 KB dynamic shared buffer, so a launch without the opt-in fails.
extern "C" __global__ void axpy(float* out, const float* x, const float* y, float a, int n) {
    extern __shared__ float buf[];
    const int tiles = (n + 127) / 128;
    for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        int i = tile * 128 + threadIdx.x;
        if (i < n) {
            buf[16383 - threadIdx.x] = a * x[i];
            out[i] = buf[16383 - threadIdx.x] + y[i];
        }
    }
}
"""
AXPY_MANIFEST = {
    "manifest": 1, "kernel": "axpy", "target": "sm_90", "block": [128, 1, 1], "dynamic_smem": 65536,
    "params": [{"name": "out", "dtype": "f32", "pointer": True, "const": False},
               {"name": "x", "dtype": "f32", "pointer": True, "const": True},
               {"name": "y", "dtype": "f32", "pointer": True, "const": True},
               {"name": "a", "dtype": "f32", "pointer": False, "const": False},
               {"name": "n", "dtype": "i32", "pointer": False, "const": False}],
    "tiles": ["ceil_div(n, 128)"],
}

HALF_SRC = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
extern "C" __global__ void scale_half(float* out, const float* x, __nv_bfloat16 s, __half h, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        out[i] = x[i] * __bfloat162float(s) + __half2float(h);
}
"""
HALF_MANIFEST = {
    "manifest": 1, "kernel": "scale_half", "target": "sm_90", "block": [256, 1, 1], "dynamic_smem": 0,
    "params": [{"name": "out", "dtype": "f32", "pointer": True, "const": False},
               {"name": "x", "dtype": "f32", "pointer": True, "const": True},
               {"name": "s", "dtype": "bf16", "pointer": False, "const": False},
               {"name": "h", "dtype": "f16", "pointer": False, "const": False},
               {"name": "n", "dtype": "i32", "pointer": False, "const": False}],
    "tiles": ["ceil_div(n, 256)"],
}

# Every scalar width and alignment in one signature: each value lands in out[] as a double.
MIX_SRC = r"""
#include <cuda_fp16.h>
extern "C" __global__ void mix(double* out, signed char a, double b, short c, long long d, bool e,
                               unsigned char f, float g, __half h, unsigned u, unsigned long long w) {
    out[0] = a; out[1] = b; out[2] = c; out[3] = (double)d; out[4] = e; out[5] = f; out[6] = g;
    out[7] = __half2float(h); out[8] = u; out[9] = (double)w;
}
"""
MIX_MANIFEST = {
    "manifest": 1, "kernel": "mix", "target": "sm_90", "block": [1, 1, 1],
    "params": [{"name": "out", "dtype": "f64", "pointer": True}]
              + [{"name": n, "dtype": d, "pointer": False} for n, d in
                 [("a", "i8"), ("b", "f64"), ("c", "i16"), ("d", "i64"), ("e", "bool"), ("f", "u8"),
                  ("g", "f32"), ("h", "f16"), ("u", "u32"), ("w", "u64")]],
}


def build_cubin(src: str, name: str, arch: str = "sm_90") -> bytes:
    from pipelink import toolchain
    from pipelink.toolchain import LinkInput

    try:
        includes = [f"-I{d}" for d in toolchain.cuda_include_dirs()]
    except toolchain.ToolchainError:  # no nvcc wheel: a system CUDA's headers, else NVRTC's own
        includes = ["-I/usr/local/cuda/include"] if Path("/usr/local/cuda/include/cuda_bf16.h").exists() else []
    ltoir = toolchain.nvrtc_to_ltoir(src, f"{name}.cu", [f"-arch={arch}", "-dlto", "-rdc=true", *includes])
    return toolchain.nvjitlink_link([LinkInput("ltoir", ltoir, name)], [f"-arch={arch}", "-lto"]).cubin


@pytest.fixture(scope="module")
def cubins():
    return {"axpy": build_cubin(AXPY_SRC, "axpy"), "half": build_cubin(HALF_SRC, "half"),
            "mix": build_cubin(MIX_SRC, "mix")}


def test_test_kernels_compile(cubins):
    """The GPU tests' cubins build anywhere (NVRTC and nvJitLink need no GPU)."""
    pytest.importorskip("elftools")
    from pipelink.toolchain import defined_symbols
    assert {"axpy", "scale_half", "mix"} <= set().union(*(defined_symbols(c) for c in cubins.values()))


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.fixture
def axpy(cubins):
    with Kernel.load(cubins["axpy"], AXPY_MANIFEST) as k:
        yield k


def _axpy_case(torch, n, pad=37):
    g = torch.Generator(device="cuda").manual_seed(n)
    x = torch.randn(n, device="cuda", generator=g)
    y = torch.randn(n, device="cuda", generator=g)
    out = torch.full((n + pad,), math.nan, device="cuda")  # poison: the tail must stay NaN
    return out, x, y


def _check_axpy(torch, out, x, y, a, n):
    torch.cuda.synchronize()
    want = a * x.double() + y.double()
    torch.testing.assert_close(out[:n].double(), want, rtol=1e-6, atol=1e-6)
    assert torch.isnan(out[n:]).all()


@gpu
@pytest.mark.gpu
def test_axpy_torch(torch, axpy):
    n = 1_000_003
    out, x, y = _axpy_case(torch, n)
    axpy.launch(out, x, y, 0.75, n)
    _check_axpy(torch, out, x, y, 0.75, n)
    props = torch.cuda.get_device_properties(0)
    assert axpy.num_sms() == props.multi_processor_count
    smem_per_sm = getattr(props, "shared_memory_per_multiprocessor", 228 * 1024)
    assert 1 <= axpy.max_active_blocks_per_sm() <= smem_per_sm // 65536
    assert axpy.grid_for(n=n) == min(math.ceil(n / 128), axpy.resident_blocks())


@gpu
@pytest.mark.gpu
def test_axpy_one_block_on_a_torch_stream(torch, axpy):
    n = 5000
    out, x, y = _axpy_case(torch, n)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    axpy.launch(out=out, x=x, y=y, a=-2.0, n=n, grid=1, stream=stream)  # grid-stride: one block does it all
    stream.synchronize()
    _check_axpy(torch, out, x, y, -2.0, n)


@gpu
@pytest.mark.gpu
def test_axpy_checks_real_tensors(torch, axpy):
    out, x, y = _axpy_case(torch, 256)
    with pytest.raises(TypeError, match="'x' is a const f32\\* parameter but the tensor's dtype is torch.float16"):
        axpy.launch(out, x.half(), y, 1.0, 256)
    with pytest.raises(TypeError, match="'y' is a cpu tensor"):
        axpy.launch(out, x, y.cpu(), 1.0, 256)
    with pytest.raises(TypeError, match="'x' is not contiguous"):
        axpy.launch(out, x.view(16, 16).t(), y, 1.0, 256)


@gpu
@pytest.mark.gpu
def test_axpy_dlpack_only_object(torch, axpy):
    class OnlyDLPack:
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, **kw):
            return self.t.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    n = 4096
    out, x, y = _axpy_case(torch, n)
    axpy.launch(OnlyDLPack(out), OnlyDLPack(x), y, 3.0, n)
    _check_axpy(torch, out, x, y, 3.0, n)


@gpu
@pytest.mark.gpu
def test_axpy_cupy(axpy):
    cp = pytest.importorskip("cupy")
    n = 300_001
    rng = cp.random.default_rng(5)
    x = rng.standard_normal(n, dtype=cp.float32)
    y = rng.standard_normal(n, dtype=cp.float32)
    out = cp.full(n + 11, cp.nan, dtype=cp.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    cp.cuda.Device().synchronize()
    axpy.launch(out, x, y, 1.5, n, stream=stream)
    stream.synchronize()
    want = 1.5 * x.astype(cp.float64) + y.astype(cp.float64)
    assert float(cp.max(cp.abs(out[:n].astype(cp.float64) - want))) < 1e-5
    assert bool(cp.isnan(out[n:]).all())
    with pytest.raises(TypeError, match="'<f8'"):
        axpy.launch(out, x.astype(cp.float64), y, 1.0, n)
    with pytest.raises(TypeError, match="'x' is not C-contiguous"):
        axpy.launch(out, cp.zeros(2 * n, dtype=cp.float32)[::2], y, 1.0, n)


@gpu
@pytest.mark.gpu
def test_host_memory_behind_cuda_array_interface_is_refused(axpy):
    host = (ctypes.c_float * 64)()
    with pytest.raises(TypeError, match="'x'.*not CUDA device memory"):
        axpy.pack_args(0x10, FakeCudaArray(ptr=ctypes.addressof(host), shape=(64,)), 0x10, 1.0, 64)


@gpu
@pytest.mark.gpu
def test_bf16_and_f16_scalars(torch, cubins):
    n, s, h = 10_000, 1 / 3, 0.1
    x = torch.randn(n, device="cuda")
    out = torch.full((n,), math.nan, device="cuda")
    with Kernel.load(cubins["half"], HALF_MANIFEST) as k:
        k.launch(out, x, s, h, n)
        torch.cuda.synchronize()
    s16 = torch.tensor(s, dtype=torch.float32).to(torch.bfloat16).double()  # 0.333984375
    h16 = torch.tensor(h, dtype=torch.float32).to(torch.float16).double()  # 0.0999755859375
    torch.testing.assert_close(out.double(), x.double() * s16 + h16, rtol=1e-6, atol=1e-6)


@gpu
@pytest.mark.gpu
def test_every_scalar_width_arrives_intact(torch, cubins):
    values = [-7, 2.0**-30 + 1, -12345, -(2**40) - 3, True, 250, 0.15625, -1.5, 2**32 - 1, 2**53 + 2]
    out = torch.full((10,), math.nan, device="cuda", dtype=torch.float64)
    with Kernel.load(cubins["mix"], MIX_MANIFEST) as k:
        k.launch(out, *values, grid=1)
        torch.cuda.synchronize()
    assert out.tolist() == [float(v) for v in values]


@gpu
@pytest.mark.gpu
def test_load_errors(cubins):
    with pytest.raises(LaunchError, match="cuModuleLoadData for kernel 'axpy' failed: CUDA_ERROR_"):
        Kernel.load(b"\x7fELF not really a cubin" * 8, AXPY_MANIFEST)
    with pytest.raises(LaunchError, match="cuModuleGetFunction for kernel 'nope' failed: CUDA_ERROR_NOT_FOUND"):
        Kernel.load(cubins["axpy"], dict(AXPY_MANIFEST, kernel="nope"))
    with pytest.raises(LaunchError, match="MAX_DYNAMIC_SHARED_SIZE_BYTES=300000.*the device allows"):
        Kernel.load(cubins["axpy"], dict(AXPY_MANIFEST, dynamic_smem=300_000))
    with pytest.raises(LaunchError, match="cuDeviceGet\\(99\\)"):
        Kernel.load(cubins["axpy"], AXPY_MANIFEST, device=99)


@gpu
@pytest.mark.gpu
def test_cubin_for_another_arch_says_which():
    drv = driver_mod.driver()
    major = driver_mod.call("cc", drv.cuDeviceGetAttribute,
                         drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 0)
    other = "sm_80" if major != 8 else "sm_90"
    cubin = build_cubin(AXPY_SRC, "axpy_other", arch=other)
    with pytest.raises(LaunchError, match=f"cuModuleLoadData for kernel 'axpy'.*the cubin is for {other}, device 0 is"):
        Kernel.load(cubin, dict(AXPY_MANIFEST, target=other))


@gpu
@pytest.mark.gpu
def test_unload_is_idempotent(cubins):
    k = Kernel.load(cubins["axpy"], AXPY_MANIFEST)
    k.unload()
    k.unload()
    assert k.module is None and k.function is None and k.context is None
    with pytest.raises(LaunchError, match="not loaded"):
        k.launch(0, 0, 0, 1.0, 0, grid=1)


def test_conversions_match_torch():
    """Our bf16/f16/fp8 bit patterns are torch's for f32 inputs (torch rounds f32 -> bf16 once)."""
    torch = pytest.importorskip("torch")
    rng = random.Random(99)
    xs = [struct.unpack("<f", struct.pack("<f", rng.uniform(-1, 1) * 2.0 ** rng.randint(-140, 15)))[0]
          for _ in range(5000)]
    t = torch.tensor(xs, dtype=torch.float32)
    assert t.to(torch.bfloat16).view(torch.int16).tolist() == [
        struct.unpack("<h", struct.pack("<H", float_to_bf16_bits(x)))[0] for x in xs]
    assert t.to(torch.float16).view(torch.int16).tolist() == [
        struct.unpack("<h", struct.pack("<H", float_to_f16_bits(x)))[0] for x in xs]
    if hasattr(torch, "float8_e4m3fn"):
        small = [x for x in xs if abs(x) <= 448]
        ts = torch.tensor(small, dtype=torch.float32)
        assert ts.to(torch.float8_e4m3fn).view(torch.uint8).tolist() == [float_to_fp8_e4m3_bits(x) for x in small]
        assert ts.to(torch.float8_e5m2).view(torch.uint8).tolist() == [float_to_fp8_e5m2_bits(x) for x in small]


def _persistent_fake(monkeypatch, memsets: list):
    from pipelink.runtime.manifest import IMPLICIT_PARAMS
    fake = FakeDriver([ctypes.c_uint64, ctypes.c_int32, ctypes.c_uint64, ctypes.c_uint64])
    from cuda.bindings import driver
    allocations = iter(range(0x7000, 0x7000 + 0x10000 * 64, 0x10000))
    fake.cuMemAlloc = lambda size: (fake.CUresult.CUDA_SUCCESS, driver.CUdeviceptr(next(allocations)))
    fake.cuMemFree = lambda ptr: (fake.CUresult.CUDA_SUCCESS,)
    fake.cuMemsetD8 = lambda ptr, value, size: (memsets.append(size), (fake.CUresult.CUDA_SUCCESS,))[1]
    fake.cuStreamIsCapturing = lambda stream: (fake.CUresult.CUDA_SUCCESS,
                                               driver.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE)
    fake.CUstreamCaptureStatus = driver.CUstreamCaptureStatus
    monkeypatch.setattr(driver_mod, "driver", lambda: fake)
    m = {"manifest": 2, "kernel": "chain", "block": [128], "dynamic_smem": 0, "dispatch": "dynamic",
         "tiles": ["ceil_div(M, 32)"],
         "params": [{"name": "x", "dtype": "f32", "pointer": True, "const": True},
                    {"name": "M", "dtype": "i32", "pointer": False, "const": False}]
         + [{"name": p.name, "dtype": p.dtype, "pointer": p.pointer, "const": False, "implicit": p.kind}
            for p in IMPLICIT_PARAMS],
         "workspace": {"header_words": 16, "events": [{"name": "e", "shape": ["ceil_div(M, 32)"]}]}}
    k = fake_occupancy(Kernel(m), sms=132, per_sm=1)
    k.function = object()
    k.pointer_device = lambda ptr: 0
    return fake, k


def test_persistent_launches_pass_the_same_arguments_every_time(monkeypatch):
    """The kernel keeps its place in the workspace on the device: every launch passes the workspace and
    the regions' capacity, nothing else, and nothing is reset in the stream between launches. So a
    CUDA graph that captured a launch replays it correctly."""
    memsets = []
    fake, k = _persistent_fake(monkeypatch, memsets)
    prepared = k.prepare(FakeTensor(ptr=0xAB00), M=100, grid=4)  # 4 events: regions of 4 words
    assert memsets == [(16 + 2 * 4) * 8]  # the new workspace, zeroed once, at prepare
    for _ in range(3):
        prepared.launch()
        # values: x, M, workspace, words per region
        assert fake.seen["values"] == [0xAB00, 100, 0x7000, 4] and fake.seen["grid"] == (4, 1, 1)
    k.launch(FakeTensor(ptr=0xAB00), M=100, grid=4)  # the plain launch takes the same path
    k.launch(FakeTensor(ptr=0xAB00), M=33, grid=2)   # fewer events: the same workspace
    assert fake.seen["values"] == [0xAB00, 33, 0x7000, 4] and len(memsets) == 1


def test_a_launch_that_fails_to_start_changes_nothing(monkeypatch):
    """The workspace moves on only on the device, so a launch the driver refused leaves nothing to undo."""
    memsets = []
    fake, k = _persistent_fake(monkeypatch, memsets)
    k.launch(FakeTensor(ptr=0xAB00), M=100, grid=4)
    ok = fake.cuLaunchKernel
    fake.cuLaunchKernel = lambda *a: (fake.CUresult.CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES,)
    with pytest.raises(launch.LaunchError):
        k.launch(FakeTensor(ptr=0xAB00), M=100, grid=4)
    fake.cuLaunchKernel = ok
    k.launch(FakeTensor(ptr=0xAB00), M=100, grid=4)
    assert len(memsets) == 1 and fake.seen["values"][2:] == [0x7000, 4]


@pytest.mark.parametrize("kinds, words", [(("workspace", "epoch", "task_base"), "link it again"),
                                          (("workspace", "events", "clear", "clear_words", "epoch", "task_base"),
                                           "manifest version 1.*link it again")])
def test_a_manifest_from_an_earlier_workspace_protocol_is_refused_at_launch(monkeypatch, kinds, words):
    """Persistent kernels of manifest version 1 took their region, epoch and first claim from the launcher
    (before that: epoch-tagged counters); the launcher asks for a relink. The manifest still reads."""
    from pipelink.runtime.manifest import Manifest
    fake, k = _persistent_fake(monkeypatch, [])
    m = k.manifest.to_json()
    m["manifest"] = 1
    m["params"] = [p for p in m["params"] if "implicit" not in p] + [
        {"name": f"pl_{kind}", "dtype": "u64", "pointer": False, "const": False, "implicit": kind} for kind in kinds]
    if len(kinds) == 6:
        assert Manifest.from_json(m).persistent  # inspect and pipelink.load read it
    with pytest.raises(ValueError, match=words):
        Kernel(m)


def test_a_launch_needing_more_counters_gets_a_new_zeroed_workspace(monkeypatch):
    """The old one is kept (prepared launches and captured graphs may still use it) until the unload."""
    memsets = []
    fake, k = _persistent_fake(monkeypatch, memsets)
    freed = []
    fake.cuMemFree = lambda ptr: (freed.append(int(ptr)), (fake.CUresult.CUDA_SUCCESS,))[1]
    small = k.prepare(FakeTensor(ptr=0xAB00), M=100, grid=4)    # 4 events: regions of 4 words
    k.launch(FakeTensor(ptr=0xAB00), M=1000, grid=4)            # 32 events: a new workspace, regions of 32 words
    assert memsets == [(16 + 2 * 4) * 8, (16 + 2 * 32) * 8]
    assert fake.seen["values"][2:] == [0x17000, 32]
    small.launch()                                             # still on its own workspace, which is still there
    assert fake.seen["values"][2:] == [0x7000, 4] and freed == []
    k.launch(FakeTensor(ptr=0xAB00), M=100, grid=4)            # fits the new one
    assert fake.seen["values"][2:] == [0x17000, 32] and len(memsets) == 2
    from pipelink.runtime.workspace import release_workspace
    release_workspace(k)
    assert sorted(freed) == [0x7000, 0x17000]


def test_a_failed_workspace_allocation_leaves_the_old_one(monkeypatch):
    fake, k = _persistent_fake(monkeypatch, [])
    from cuda.bindings import driver
    freed, fail = [], [False]
    fake.cuMemFree = lambda ptr: (freed.append(int(ptr)), (fake.CUresult.CUDA_SUCCESS,))[1]
    fake.cuMemAlloc = lambda size: ((fake.CUresult.CUDA_ERROR_OUT_OF_MEMORY, None) if fail[0]
                                    else (fake.CUresult.CUDA_SUCCESS, driver.CUdeviceptr(0x7000)))
    k.launch(FakeTensor(ptr=0xAB00), M=100, grid=4)
    fail[0] = True
    with pytest.raises(LaunchError, match="cuMemAlloc.*prepare or launch once first"):
        k.launch(FakeTensor(ptr=0xAB00), M=1000, grid=4)
    k.launch(FakeTensor(ptr=0xAB00), M=100, grid=4)  # the workspace it had still serves
    assert fake.seen["values"][2:] == [0x7000, 4] and freed == []


def test_load_refuses_a_manifest_written_for_another_cubin():
    """Checked before the driver is touched: another link's manifest may list other parameters."""
    import hashlib
    m = dict(AXPY_MANIFEST, cubin_sha256=hashlib.sha256(b"another cubin").hexdigest())
    with pytest.raises(ValueError, match="written for another cubin"):
        Kernel.load(b"this cubin", m)


def test_balanced_grid_keeps_the_rounds_and_evens_them_out():
    from pipelink.runtime.launch import balanced_grid
    assert balanced_grid(400, 132) == 100  # 4 rounds either way; 100 blocks of 4 tiles
    assert balanced_grid(3200, 132) == 128  # 25 rounds
    assert balanced_grid(132, 132) == 132 and balanced_grid(133, 132) == 67 and balanced_grid(5, 132) == 5
    assert balanced_grid(0, 132) == 1
    for tiles in range(1, 2000, 37):
        g = balanced_grid(tiles, 132)
        assert g <= 132 and -(-tiles // g) == -(-tiles // 132)


def test_a_negative_tile_extent_of_one_component_is_refused_not_summed():
    """A persistent kernel's tiles are the sum of its components' task counts: a router whose grid is
    `slices + min(slices - 1, 1)` gets -1 columns for slices = 0, which the other components' tasks would hide.
    Each extent is checked, and the error names the component."""
    k = Kernel({"kernel": "layer", "block": [128], "schedule": "persistent",
                "tiles": ["(ceil_div(T, 32)) * (slices + min(slices - 1, 1)) + (T)"],
                "tasks": {"router": "(ceil_div(T, 32)) * (slices + min(slices - 1, 1))", "combine": "(T)"}})
    assert k.total_tiles(T=64, slices=4) == 2 * 5 + 64
    assert k.total_tiles(T=64, slices=1) == 2 + 64
    with pytest.raises(ArgumentError, match=r"component 'router' of kernel 'layer' has a tile extent "
                                            r"slices \+ min\(slices - 1, 1\) = -1"):
        k.total_tiles(T=64, slices=0)


def test_a_task_filling_no_slot_of_the_loader_ring_is_refused_at_launch():
    """loader.slots over runtime values (`ceil_div(B, 8) * ceil_div(K, 1024)`) is checked at the link only where
    the geometry alone fixes it: a launch with K = 0 would have a task fill no slot while its CTA still waits on
    one (or walk the ring backwards for a negative count). Refused before the launch, naming the component;
    a component without tasks at that launch (NL = 0 layers) is not."""
    k = Kernel({"kernel": "step", "block": [288], "schedule": "persistent",
                "tiles": ["(NL) * (ceil_div(N, 16)) + (1)"],
                "tasks": {"gemv": "(NL) * (ceil_div(N, 16))", "head": "(1)"},
                "ring_slots": {"gemv": "ceil_div(B, 8) * ceil_div(K, 1024)"}})
    assert k.total_tiles(NL=2, N=64, B=1, K=2048) == 2 * 4 + 1
    with pytest.raises(ArgumentError, match=r"component 'gemv' of kernel 'step' fills ceil_div\(B, 8\) \* "
                                            r"ceil_div\(K, 1024\) = 0 slots of the loader ring"):
        k.total_tiles(NL=2, N=64, B=1, K=0)
    with pytest.raises(ArgumentError, match=r"= -1 slots"):
        k.total_tiles(NL=2, N=64, B=1, K=-1024)
    assert k.total_tiles(NL=0, N=64, B=1, K=0) == 1  # no task of gemv runs


def test_the_manifest_keeps_the_ring_slots_of_each_component():
    from pipelink.runtime.manifest import Manifest
    m = Manifest.from_json({"kernel": "step", "block": [288], "tiles": ["1"], "ring_slots": {"gemv": "ceil_div(K, 1024)"}})
    assert m.ring_slots == {"gemv": "ceil_div(K, 1024)"} and m.to_json()["ring_slots"] == {"gemv": "ceil_div(K, 1024)"}
    with pytest.raises(ValueError, match="'ring_slots' must map names to expressions"):
        Manifest.from_json({"kernel": "step", "block": [288], "tiles": ["1"], "ring_slots": {"gemv": 4}})


def test_more_tiles_than_an_int_counts_are_refused_at_launch():
    """The kernel counts its tiles in an int: a launch whose shapes make more is refused, not truncated."""
    k = Kernel({"kernel": "k", "block": [128], "tiles": ["ceil_div(M, 32)", "N"]})
    assert k.total_tiles(M=64, N=3) == 6
    with pytest.raises(ArgumentError, match=r"has 4294967296 tiles .* more than the 2147483647"):
        k.total_tiles(M=32 << 16, N=1 << 16)
    # a count that fits, computed in int through a step that does not: (M + 32 - 1) wraps on the device
    with pytest.raises(ArgumentError, match=r"32-bit int, and M \+ 32 - 1 \(ceil_div in C\) = 2147483678"):
        k.total_tiles(M=2147483647, N=1)


class _CAI:
    def __init__(self, doc):
        self.__cuda_array_interface__ = doc


@pytest.mark.parametrize("doc", [{"typestr": "<f4", "shape": (4,)}, {"typestr": "<f4", "shape": (4,), "data": None},
                                 {"typestr": "<f4", "shape": (4,), "data": ("a", False)}, [1, 2],
                                 {"typestr": "<f4", "shape": 4, "data": (16, False)},
                                 {"typestr": "<f4", "shape": (-5, -40), "data": (16, False)},
                                 {"typestr": "<f4", "shape": (4,), "strides": "x", "data": (16, False)}])
def test_a_malformed_cuda_array_interface_is_an_argument_error(doc):
    """It had raised KeyError, TypeError, ValueError or AttributeError from inside the packing (and a negative
    shape had passed)."""
    with pytest.raises(ArgumentError, match="__cuda_array_interface__"):
        kernel().pack_args(_CAI(doc), 0x20, 3, 1.0)


@pytest.mark.parametrize("value", [True, np.bool_(True)] if np is not None else [True])
def test_a_bool_is_no_integer_or_float_argument(value):
    with pytest.raises(ArgumentError, match="bool"):
        kernel().pack_args(0x10, 0x20, value, 1.0)
    with pytest.raises(ArgumentError):
        kernel().pack_args(0x10, 0x20, 3, value)


def test_a_finite_value_past_a_double_is_out_of_range_not_an_infinity():
    import decimal
    with pytest.raises(ArgumentError, match="out of range"):
        kernel().pack_args(0x10, 0x20, 3, decimal.Decimal("1e400"))
    kernel().pack_args(0x10, 0x20, 3, float("-inf"))  # an infinity asked for stays one


@pytest.mark.parametrize("grid", [2.0, "4", (1, 2, 3, 4), 0, (), True, (1, True)])
def test_a_bad_grid_or_stream_is_an_argument_error(grid):
    from pipelink.runtime.launch import _grid_dims, _stream_handle
    with pytest.raises(ArgumentError):
        _grid_dims(grid)
    with pytest.raises(ArgumentError):
        _stream_handle("abc")


def test_a_numpy_int_grid_and_integer_shapes():
    from pipelink.runtime.launch import _grid_dims
    if np is not None:
        assert _grid_dims(np.int64(4)) == (4, 1, 1) and _grid_dims((np.int32(2), 3)) == (2, 3, 1)
    k = kernel()
    with pytest.raises(ArgumentError, match="shape M"):
        k.total_tiles(M=1.5, N=2)
    with pytest.raises(ArgumentError):
        k.shape_env([0x10, 0x20, 2.5, 1.0])
    with pytest.raises(ArgumentError, match="no split reduction"):
        k.stream_k_plan({"M": 4})


def test_runtime_errors_are_pipelink_errors_with_their_codes():
    """`except pipelink.PipelinkError` catches a loaded kernel's failures too (they had been plain exceptions), each
    one diagnostic of its code; the built-in kinds callers catch stay (TypeError/ValueError, RuntimeError)."""
    import pipelink
    from pipelink.runtime.manifest import ManifestError
    from pipelink.runtime.nvshmem import NvshmemError
    from pipelink.runtime.workspace import EventTimeout
    cases = [(ArgumentError("argument 'y' is short"), "PL195", (TypeError, ValueError)),
             (LaunchError("cuLaunchKernel", "CUDA_ERROR_INVALID_VALUE"), "PL196", ()),
             (ManifestError("manifest of kernel 'k': bad"), "PL009", (ValueError,)),
             (EventTimeout("k", "c", "e", 0, 2, 1, 5), "PL197", (RuntimeError,)),
             (NvshmemError("nvshmem_init failed"), "PL196", (RuntimeError,))]
    for exc, code, kinds in cases:
        assert isinstance(exc, pipelink.PipelinkError) and isinstance(exc, pipelink.PipelinkRunError)
        assert all(isinstance(exc, k) for k in kinds)
        assert [d.code for d in exc.diagnostics] == [code] and str(exc).startswith(f"error[{code}]: {exc.message}")
