"""TMA descriptors for tensor-map parameters: checked against the contract's declaration, then
encoded with `cuTensorMapEncodeTiled` from the tensor the caller passes.

A component declares a tensor map's element type, shape (over the kernel's integer parameters),
box, swizzle and out-of-bounds fill; the launcher reads the tensor's address, extents and strides,
checks them against the declaration before any driver call (a wrong dtype, rank, extent, stride or
alignment is an `ArgumentError` naming the parameter) and encodes the 128-byte descriptor, which
reaches the kernel as a `__grid_constant__` parameter. Encoded descriptors are cached per tensor
address, extents, strides and declaration: a repeated launch with the same tensors encodes nothing.
The checks are pure and tested without a GPU; only `encode` calls the driver.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

from ..core import expr as _expr
from ..core.model import DTYPE_BYTES

# TMA limits (CUDA driver API, cuTensorMapEncodeTiled): global address 16-byte aligned, strides
# multiples of 16 bytes, box extents 1..256, rank 1..5.
ADDRESS_ALIGN = 16
STRIDE_ALIGN = 16
MAX_BOX = 256
SWIZZLE_SPAN = {"none": 0, "32B": 32, "64B": 64, "128B": 128}
DESCRIPTOR_BYTES = 128


@dataclass(frozen=True)
class TensorMapDecl:
    """A tensor-map parameter as the manifest declares it (box and swizzle fixed at link time)."""

    shape: tuple[_expr.Expr, ...]   # outermost first, over the kernel's integer parameters
    box: tuple[int, ...]
    swizzle: str
    oob_fill: str

    @classmethod
    def from_manifest(cls, raw: dict) -> "TensorMapDecl":
        if not isinstance(raw, dict):
            raise ValueError("'tensor_map' must be an object")
        shape = tuple(_expr.parse(e) for e in raw.get("shape", []))
        box = tuple(raw.get("box", []))
        if not shape or len(shape) != len(box) or len(shape) > 5:
            raise ValueError("'tensor_map' needs a shape and a box of the same rank, 1..5")
        if not all(isinstance(b, int) and not isinstance(b, bool) and 1 <= b <= MAX_BOX for b in box):
            raise ValueError(f"'tensor_map' box {list(box)}: each extent must be an integer in 1..{MAX_BOX}")
        if raw.get("swizzle", "none") not in SWIZZLE_SPAN or raw.get("oob_fill", "zero") not in ("zero", "nan"):
            raise ValueError("'tensor_map' has an unknown swizzle or oob_fill")
        return cls(shape, box, raw.get("swizzle", "none"), raw.get("oob_fill", "zero"))

    def to_manifest(self) -> dict:
        return {"shape": [e.text for e in self.shape], "box": list(self.box), "swizzle": self.swizzle,
                "oob_fill": self.oob_fill}


@dataclass(frozen=True)
class TensorLayout:
    """What the launcher reads off a tensor: address, element type, extents and strides (bytes)."""

    address: int
    dtype: str | None
    shape: tuple[int, ...]
    strides: tuple[int, ...]   # bytes, outermost first


def check(name: str, dtype: str, decl: TensorMapDecl, t: TensorLayout, env: dict[str, int]) -> str | None:
    """Why `t` cannot back tensor map `name` (None when it can)."""
    if t.dtype != dtype:
        return f"is a {dtype} tensor map but the tensor's dtype is {t.dtype or 'not one pipelink knows'}"
    if len(t.shape) != len(decl.shape):
        return f"is a rank-{len(decl.shape)} tensor map but the tensor has rank {len(t.shape)}"
    try:
        want = tuple(e.evaluate(env) for e in decl.shape)
    except _expr.ExprError as exc:
        return f"has extents [{', '.join(e.text for e in decl.shape)}] that cannot be evaluated: {exc}"
    if t.shape != want:
        shown = ", ".join(f"{e.text}={v}" if not e.is_constant else str(v) for e, v in zip(decl.shape, want))
        return f"must have shape [{shown}]; the tensor has {list(t.shape)}"
    item = DTYPE_BYTES[dtype]
    if t.strides[-1] != item and t.shape[-1] > 1:
        return f"must be contiguous in its last dimension (stride {t.strides[-1] // item} elements)"
    for axis, s in enumerate(t.strides[:-1]):
        if s % STRIDE_ALIGN or s <= 0:
            return (f"has a stride of {s} bytes in dimension {axis}; the TMA needs positive multiples of "
                    f"{STRIDE_ALIGN} bytes (pad the rows)")
    if t.address % ADDRESS_ALIGN:
        return f"starts at {t.address:#x}, not {ADDRESS_ALIGN}-byte aligned as the TMA needs"
    return None


def layout_of(value, dtype_of) -> TensorLayout | None:
    """The layout of a torch tensor or an object with __cuda_array_interface__ (None: neither)."""
    if hasattr(value, "data_ptr") and hasattr(value, "stride") and hasattr(value, "element_size"):
        item = value.element_size()
        return TensorLayout(int(value.data_ptr()), dtype_of(value), tuple(int(x) for x in value.shape),
                            tuple(int(s) * item for s in value.stride()))
    cai = getattr(value, "__cuda_array_interface__", None)
    if isinstance(cai, dict):
        shape = tuple(int(x) for x in cai.get("shape", ()))
        dtype = dtype_of(value)
        item = DTYPE_BYTES.get(dtype, 1) if dtype else 1
        strides = cai.get("strides")
        if strides is None:  # C-contiguous
            strides, acc = [], item
            for extent in reversed(shape):
                strides.insert(0, acc)
                acc *= max(extent, 1)
        return TensorLayout(int(cai["data"][0]), dtype, shape, tuple(int(s) for s in strides))
    return None


_DATA_TYPES = {"bf16": "BFLOAT16", "f16": "FLOAT16", "f32": "FLOAT32", "f64": "FLOAT64", "i32": "INT32",
               "u32": "UINT32", "i64": "INT64", "u64": "UINT64", "u16": "UINT16", "i16": "UINT16",
               "u8": "UINT8", "i8": "UINT8", "fp8_e4m3": "UINT8", "fp8_e5m2": "UINT8", "bool": "UINT8"}


def encode(dtype: str, decl: TensorMapDecl, t: TensorLayout):
    """cuTensorMapEncodeTiled: a ctypes array holding the 128-byte descriptor."""
    from cuda.bindings import driver as drv
    rank = len(t.shape)
    dims = [drv.cuuint64_t(x) for x in reversed(t.shape)]          # innermost first
    strides = [drv.cuuint64_t(s) for s in reversed(t.strides[:-1])]  # bytes, without the innermost
    box = [drv.cuuint32_t(b) for b in reversed(decl.box)]
    ones = [drv.cuuint32_t(1)] * rank
    swizzle = getattr(drv.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_" + (
        "NONE" if decl.swizzle == "none" else decl.swizzle))
    fill = (drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE if decl.oob_fill == "zero" else
            drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA)
    err, tmap = drv.cuTensorMapEncodeTiled(
        getattr(drv.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_" + _DATA_TYPES[dtype]), rank, t.address,
        dims, strides, box, ones, drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
        drv.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B, fill)
    if err != drv.CUresult.CUDA_SUCCESS:
        return err
    out = (ctypes.c_uint8 * DESCRIPTOR_BYTES)()
    ctypes.memmove(out, tmap.getPtr(), DESCRIPTOR_BYTES)
    return out
