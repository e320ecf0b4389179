"""Tensor-map parameters at launch: the tensor is checked against the manifest's declaration before
any driver call (each problem an ArgumentError naming the parameter), then encoded once per layout.
No GPU: `encode` is replaced by a recorder where a test needs to see whether it was reached."""
from __future__ import annotations

import copy
import ctypes
from types import SimpleNamespace

import pytest

from pipelink.core import expr

from pipelink.runtime import tensormap
from pipelink.runtime.launch import ArgumentError, Kernel
from pipelink.runtime.tensormap import TensorLayout, TensorMapDecl, check, layout_of

MANIFEST = {
    "manifest": 1, "kernel": "gemm", "target": "sm_90a", "block": [384, 1, 1], "dynamic_smem": 200000,
    "params": [
        {"name": "a", "dtype": "bf16", "pointer": False, "const": False,
         "tensor_map": {"shape": ["M", "K"], "box": [128, 64], "swizzle": "128B", "oob_fill": "zero"}},
        {"name": "h", "dtype": "bf16", "pointer": False, "const": False,
         "tensor_map": {"shape": ["M", "N // 2"], "box": [64, 64], "swizzle": "128B", "oob_fill": "zero"}},
        {"name": "M", "dtype": "i32", "pointer": False, "const": False},
        {"name": "N", "dtype": "i32", "pointer": False, "const": False},
        {"name": "K", "dtype": "i32", "pointer": False, "const": False}],
    "tiles": ["ceil_div(M, 128)", "ceil_div(N, 256)"],
}


class FakeTorch:
    """What the launcher reads of a torch tensor: address, dtype, device, extents and strides."""

    def __init__(self, shape, strides=None, dtype="torch.bfloat16", ptr=0x7F0000100000, device="cuda:0", item=2):
        kind, _, index = device.partition(":")
        self.shape, self.dtype, self.ptr, self.item = tuple(shape), dtype, ptr, item
        self.device = SimpleNamespace(type=kind, index=int(index) if index else None)
        if strides is None:
            strides, acc = [], 1
            for extent in reversed(self.shape):
                strides.insert(0, acc)
                acc *= extent
        self.strides = tuple(strides)

    def data_ptr(self):
        return self.ptr

    def is_contiguous(self):
        return True

    def element_size(self):
        return self.item

    def stride(self):
        return self.strides


class FakeCudaArray:
    def __init__(self, shape, typestr="<V2", strides=None, ptr=0x7F0000200000, **extra):
        self.__cuda_array_interface__ = {"data": (ptr, False), "typestr": typestr, "shape": tuple(shape),
                                         "strides": strides, "version": 3, **extra}


@pytest.fixture
def encoded(monkeypatch):
    """Replace the driver call by a recorder: what reached `encode`, in order."""
    calls = []

    def record(dtype, decl, layout):
        calls.append((dtype, decl, layout))
        return (ctypes.c_uint8 * tensormap.DESCRIPTOR_BYTES)(*([len(calls)] * tensormap.DESCRIPTOR_BYTES))
    monkeypatch.setattr(tensormap, "encode", record)
    return calls


def kernel() -> Kernel:
    return Kernel(copy.deepcopy(MANIFEST))


M, N, K = 200, 512, 128


def args(**changes):
    values = {"a": FakeTorch((M, K)), "h": FakeTorch((M, N // 2), ptr=0x7F0000300000), "M": M, "N": N, "K": K}
    values.update(changes)
    return values


def test_a_good_tensor_is_encoded_once_per_layout(encoded):
    k = kernel()
    packed = k.pack_args(**args())
    assert [type(p).__name__ for p in packed[:2]] == ["c_ubyte_Array_128"] * 2
    assert ctypes.sizeof(packed[0]) == 128
    (dtype, decl, layout), _ = encoded
    assert dtype == "bf16" and decl.box == (128, 64) and decl.swizzle == "128B"
    assert layout == TensorLayout(0x7F0000100000, "bf16", (M, K), (2 * K, 2))
    k.pack_args(**args())
    assert len(encoded) == 2  # the same tensors again: nothing encoded
    k.pack_args(**args(a=FakeTorch((M, K), ptr=0x7F0000400000)))
    assert len(encoded) == 3 and encoded[-1][2].address == 0x7F0000400000


def test_padded_rows_are_fine(encoded):
    kernel().pack_args(**args(a=FakeTorch((M, K), strides=(K + 8, 1))))  # 272-byte rows
    assert encoded[0][2].strides == (2 * (K + 8), 2)


@pytest.mark.parametrize("value, words", [
    (FakeTorch((M, K), dtype="torch.float16"), ["is a bf16 tensor map", "dtype is f16"]),
    (FakeTorch((M, K), dtype="torch.complex64"), ["dtype is not one pipelink knows"]),
    (FakeTorch((M, K, 1)), ["rank-2 tensor map", "rank 3"]),
    (FakeTorch((M, K // 2)), ["must have shape [M=200, K=128]", "the tensor has [200, 64]"]),
    (FakeTorch((K, M), strides=(1, K)), ["must have shape [M=200, K=128]"]),
    (FakeTorch((M, K), strides=(1, M)), ["contiguous in its last dimension (stride 200 elements)"]),
    (FakeTorch((M, K), strides=(K + 3, 1)), ["stride of 262 bytes in dimension 0", "multiples of 16 bytes"]),
    (FakeTorch((M, K), strides=(0, 1)), ["stride of 0 bytes in dimension 0"]),
    (FakeTorch((M, K), ptr=0x7F0000100008), ["starts at 0x7f0000100008", "not 16-byte aligned"]),
    (FakeTorch((M, K), device="cpu"), ["is a cpu tensor"]),
    (FakeTorch((M, K), device="cuda:1"), ["is on cuda:1", "runs on cuda:0"]),
    (0x7F0000100000, ["is a bf16 tensor map", "expected a CUDA tensor or array, got int"]),
    (FakeCudaArray((M, K), mask=object()), ["masked array"]),
])
def test_a_tensor_that_cannot_back_the_map(encoded, value, words):
    with pytest.raises(ArgumentError) as err:
        kernel().pack_args(**args(a=value))
    text = err.value.message
    assert text.startswith("argument 'a' "), text
    assert all(w in text for w in words), text
    assert encoded == []  # refused before the driver


def test_extents_follow_the_integer_arguments(encoded):
    with pytest.raises(ArgumentError, match=r"argument 'h' must have shape \[M=200, N // 2=300\]"):
        kernel().pack_args(**args(N=600))
    assert encoded == []


def test_a_cuda_array_interface_array(encoded):
    # NumPy/CuPy have no bfloat16: a 2-byte void array is taken for a bf16 map, as for a bf16 pointer
    kernel().pack_args(**args(a=FakeCudaArray((M, K))))
    assert encoded[0][2] == TensorLayout(0x7F0000200000, "bf16", (M, K), (2 * K, 2))
    with pytest.raises(ArgumentError, match="argument 'a' is a bf16 tensor map but the tensor's dtype is f32"):
        kernel().pack_args(**args(a=FakeCudaArray((M, K), typestr="<f4")))
    with pytest.raises(ArgumentError, match="argument 'a' has a stride of 200 bytes"):
        kernel().pack_args(**args(a=FakeCudaArray((M, K), strides=(200, 2))))


# --- the pure pieces -----------------------------------------------------------------------------

def decl(shape=("M", "K"), box=(128, 64), swizzle="128B"):
    return TensorMapDecl(tuple(expr.parse(e) for e in shape), box, swizzle, "zero")


def test_check_names_what_is_wrong():
    ok = TensorLayout(0x1000, "bf16", (4, 64), (128, 2))
    assert check("a", "bf16", decl(), ok, {"M": 4, "K": 64}) is None
    assert "cannot be evaluated" in check("a", "bf16", decl(), ok, {"M": 4})
    assert "rank-2" in check("a", "bf16", decl(), TensorLayout(0x1000, "bf16", (256,), (2,)), {"M": 4, "K": 64})
    one_column = TensorLayout(0x1000, "bf16", (4, 1), (16, 4))  # a single column may have any inner stride
    assert check("a", "bf16", decl(), one_column, {"M": 4, "K": 1}) is None


def test_layout_of_reads_torch_and_array_interface():
    t = FakeTorch((3, 5), strides=(8, 1), item=4, dtype="torch.float32")
    assert layout_of(t, lambda v: "f32") == TensorLayout(0x7F0000100000, "f32", (3, 5), (32, 4))
    a = FakeCudaArray((3, 5), typestr="<f4")
    assert layout_of(a, lambda v: "f32") == TensorLayout(0x7F0000200000, "f32", (3, 5), (20, 4))
    assert layout_of(3, lambda v: None) is None


@pytest.mark.parametrize("change, words", [
    (lambda t: t.update(box=[512, 64]), "each extent must be an integer in 1..256"),
    (lambda t: t.update(box=[128]), "same rank"),
    (lambda t: t.update(box=["TILE_M", 64]), "each extent must be an integer"),
    (lambda t: t.update(swizzle="16B"), "unknown swizzle"),
    (lambda t: t.update(shape=["M ** 2", "K"]), "operator not allowed"),
])
def test_a_manifest_with_a_bad_tensor_map(change, words):
    m = copy.deepcopy(MANIFEST)
    change(m["params"][0]["tensor_map"])
    with pytest.raises(ValueError) as err:
        Kernel(m)
    assert "parameter 'a'" in str(err.value) and words in str(err.value), str(err.value)


def test_a_tensor_map_is_no_shape_parameter():
    k = kernel()
    assert [p.name for p in k.user_params if p.is_shape] == ["M", "N", "K"]
    assert k.user_params[0].describe() == "bf16 tensor map"
