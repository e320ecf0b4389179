"""Run a linked cubin through the CUDA driver: load it, pack arguments, size the grid, launch.

The linker hands over a cubin and a manifest (manifest.py: kernel name, block, dynamic shared memory,
the parameters with their dtypes, the tile-count expressions). `Kernel.load` puts the cubin into
the device's primary context, the one PyTorch and CuPy use, so their device pointers are valid
here. Arguments are checked against the manifest before anything reaches the driver: a wrong
dtype or a strided view would otherwise be read as garbage without any error.

Only the driver calls need a GPU; binding, packing, the float conversions and the grid arithmetic
are pure and are unit-tested without one. Neither torch nor numpy is imported at module load.
"""
from __future__ import annotations

import ast
import ctypes
import math
import operator
import struct
from dataclasses import dataclass, field

from ..core import expr as _expr
from ..core.diagnostics import PipelinkRunError
from . import driver as _cu
from .driver import LaunchError, gpu_available  # noqa: F401  (the launcher's errors and probe)
from ..core.model import DTYPE_BYTES, INTEGER_DTYPES
from .manifest import IMPLICIT_PARAMS, STREAM_K_PARAMS, ImplicitParam, Manifest, ManifestError, ParamSpec
from .scalars import float_to_bf16_bits, float_to_f16_bits, float_to_fp8_e4m3_bits, float_to_fp8_e5m2_bits
from .streamk import balanced_grid

DLPACK_CUDA = 2  # kDLCUDA in DLPack's DLDeviceType; managed (13) and pinned host (3) are refused


INT32_MAX = (1 << 31) - 1  # the glue counts tiles and tasks in int

class ArgumentError(PipelinkRunError, TypeError, ValueError):
    """A kernel argument does not fit its parameter (PL195). A TypeError, and a ValueError for ranges."""

    code = "PL195"


# --- the manifest --------------------------------------------------------------------------

def manifest_describes(manifest: Manifest | dict, cubin: bytes) -> bool:
    """False where the manifest names another cubin's sha256 (one without a hash is taken on trust)."""
    return Manifest.of(manifest).describes(cubin)


def _implicit_value(param: ImplicitParam):
    """A ctypes slot for an implicit parameter (its value is set once, when the launch is prepared)."""
    return ctypes.c_void_p() if param.pointer else _INT_CTYPES[param.dtype]()


# --- scalar conversions (the float formats: scalars.py) --------------------------------------

_INT_CTYPES = {"i64": ctypes.c_int64, "u64": ctypes.c_uint64, "i32": ctypes.c_int32,
               "u32": ctypes.c_uint32, "i16": ctypes.c_int16, "u16": ctypes.c_uint16,
               "i8": ctypes.c_int8, "u8": ctypes.c_uint8}
# The 16/8-bit floats travel as their bit pattern: the driver copies bytes, sized by the kernel.
_SMALL_FLOATS = {"f16": (float_to_f16_bits, ctypes.c_uint16), "bf16": (float_to_bf16_bits, ctypes.c_uint16),
                 "fp8_e4m3": (float_to_fp8_e4m3_bits, ctypes.c_uint8),
                 "fp8_e5m2": (float_to_fp8_e5m2_bits, ctypes.c_uint8)}


def int_range(dtype: str) -> tuple[int, int]:
    """Inclusive range of an integer dtype."""
    bits = DTYPE_BYTES[dtype] * 8
    if dtype.startswith("u"):
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


# --- arrays and tensors --------------------------------------------------------------------

# torch dtype names (str(dtype) without "torch.") -> manifest dtype; torch is never imported for this.
_TORCH_DTYPE_CACHE: dict = {}  # torch dtype object -> pipelink dtype ("" for none)
_TORCH_DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64",
                 "int32": "i32", "int64": "i64", "uint8": "u8", "int8": "i8", "int16": "i16",
                 "bool": "bool", "float8_e4m3fn": "fp8_e4m3", "float8_e5m2": "fp8_e5m2",
                 "uint16": "u16", "uint32": "u32", "uint64": "u64"}
# __cuda_array_interface__ typestr -> manifest dtype.
_TYPESTRS = {"<f4": "f32", "<f2": "f16", "<f8": "f64", "<i4": "i32", "<i8": "i64", "<u4": "u32",
             "<u8": "u64", "|u1": "u8", "|i1": "i8", "<i2": "i16", "<u2": "u16", "|b1": "bool"}
# NumPy/CuPy have no bfloat16: an ml_dtypes bfloat16 array reports an opaque 2-byte void ('<V2';
# plain NumPy writes '|V2'). A void says nothing about its contents, so it is taken only where the
# parameter is bf16; for any other 2-byte parameter it stays a mismatch.
_BF16_VOID_TYPESTRS = {"<V2", "|V2"}


def _is_torch_like(value) -> bool:
    return all(hasattr(value, a) for a in ("data_ptr", "dtype", "is_contiguous", "device"))


def _cuda_array_interface(value):
    try:
        return getattr(value, "__cuda_array_interface__", None)
    except Exception:  # some objects raise something other than AttributeError for host data
        return None


def _is_bool(value) -> bool:
    """Python's bool or numpy's (numpy.bool_, named `bool` since numpy 2)."""
    return isinstance(value, bool) or (type(value).__module__ == "numpy" and type(value).__name__ in ("bool_", "bool"))


def _is_array_like(value) -> bool:
    """A tensor or device array: never a scalar argument (pass `.item()`)."""
    return _is_torch_like(value) or _cuda_array_interface(value) is not None or hasattr(value, "__dlpack__")


def _c_contiguous(shape, strides, itemsize: int) -> bool:
    """Row-major and dense. Strides of size-1 dimensions do not matter; empty arrays are dense."""
    if strides is None or any(d == 0 for d in shape):
        return True
    expected = itemsize
    for dim, stride in zip(reversed(tuple(shape)), reversed(tuple(strides))):
        if dim != 1 and stride != expected:
            return False
        expected *= dim
    return True


def _stream_handle(stream) -> int:
    """A CUstream handle as an int: None is the legacy default stream (0)."""
    if stream is None:
        return 0
    if isinstance(stream, bool) or isinstance(stream, (str, bytes, float)):
        raise ArgumentError(f"stream must be None, an int handle or a stream object, not a {type(stream).__name__}")
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "cuda_stream"):  # torch.cuda.Stream
        return int(stream.cuda_stream)
    if hasattr(stream, "ptr"):  # cupy.cuda.Stream
        return int(stream.ptr)
    if hasattr(stream, "__cuda_stream__"):  # the CUDA stream protocol (cuda.core): (version, handle)
        return int(stream.__cuda_stream__()[1])
    try:
        return int(stream)  # cuda.bindings CUstream
    except (TypeError, ValueError):
        raise ArgumentError(f"cannot take a CUDA stream handle from {type(stream).__name__}") from None


def _factors(node) -> list:
    """The factors of a product expression's tree (the node itself when it is not a product)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _factors(node.left) + _factors(node.right)
    return [node]


def _grid_dims(grid) -> tuple[int, int, int]:
    """A launch's grid: an int or 1 to 3 ints (numpy's too), each at least 1; else ArgumentError."""
    try:
        dims = (operator.index(grid),) if not isinstance(grid, (tuple, list)) else \
            tuple(operator.index(d) if not isinstance(d, bool) else None for d in grid)
    except TypeError:
        dims = None
    if isinstance(grid, bool) or dims is None or None in dims or not 1 <= len(dims) <= 3:
        raise ArgumentError(f"grid must be an int or 1 to 3 ints, got {grid!r}")
    if any(d < 1 for d in dims):
        raise ArgumentError(f"grid {grid!r} has an empty dimension")
    return dims + (1,) * (3 - len(dims))


def cluster_tiles_problem(kernel: str, cluster: int, cluster_tiles: dict, shapes: dict) -> str | None:
    """Why a launch of these shapes would hang a clustered kernel, or None: a component that declares a cluster of
    `cluster` CTAs walks a tile count that is not a multiple of it (`cluster_tiles`: component -> count, from the
    manifest), so the CTAs of its last cluster walk different numbers of tiles, and one that meets its cluster
    at every tile waits forever for a CTA that has left (linker/clusters.py says why whole clusters suffice)."""
    for name, text in cluster_tiles.items():
        try:
            count = _expr.parse(text).evaluate(shapes)
        except _expr.ExprError:
            continue  # a name the shapes do not give, or a division by zero: the tile counts report it
        if count > 0 and count % cluster:
            shown = ", ".join(f"{k}={v}" for k, v in sorted(shapes.items()))
            return (f"component '{name}' of kernel '{kernel}' declares a cluster of {cluster} CTAs, and its tile "
                    f"count {text} is {count} for {shown}: not whole clusters, so the CTAs of its last cluster "
                    f"would walk different numbers of tiles and wait for each other forever; its contract's grid "
                    f"must be padded to a multiple of {cluster} for every shape it is launched with")
    return None


# --- the kernel ----------------------------------------------------------------------------

def check_device(device) -> None:
    """A CUDA device ordinal (0, 1, ...), or PL001 (a PipelinkUsageError, also a TypeError) before any driver
    call: what every way of loading a kernel takes."""
    if not isinstance(device, int) or isinstance(device, bool) or device < 0:
        from ..core.diagnostics import PipelinkUsageError
        raise PipelinkUsageError(f"device is {device!r}; pipelink takes a CUDA device ordinal (0, 1, ...)")


@dataclass
class Kernel:
    """A loaded kernel. Build one with `Kernel.load`; `Kernel(manifest)` alone packs and checks
    arguments but cannot launch (tests use that)."""

    manifest: Manifest   # or its JSON document, read (and validated) on construction
    module: object = None
    function: object = None
    device: int = 0
    context: object = field(default=None, repr=False)
    params: tuple[ParamSpec, ...] = field(init=False, repr=False)
    block: tuple[int, int, int] = field(init=False, repr=False)
    dynamic_smem: int = field(init=False, repr=False)
    tiles: tuple[_expr.Expr, ...] = field(init=False, repr=False)
    _cu_device: object = field(default=None, init=False, repr=False)
    _resident: int | None = field(default=None, init=False, repr=False)
    _memo: dict = field(default_factory=dict, init=False, repr=False)  # per-shape tile and workspace sizes
    _user_params: tuple = field(default=(), init=False, repr=False)
    _buffer_params: list = field(default_factory=list, init=False, repr=False)  # what buffers.py checks
    _partials: tuple | None = field(default=None, init=False, repr=False)  # (device pointer, slots)
    _retired_partials: list = field(default_factory=list, init=False, repr=False)  # freed at unload
    split_reduction: bool = field(default=True, init=False)  # split a kernel's reduction where it pays

    def __post_init__(self):
        m = self.manifest = Manifest.of(self.manifest)  # raises ManifestError (a ValueError) for a bad one
        if m.persistent and m.version < 2:
            raise ManifestError(f"manifest of kernel '{m.kernel}': it was linked by an earlier pipelink (manifest "
                                f"version {m.version}), whose event workspace this launcher no longer manages; "
                                "link it again")
        self.params = m.params
        self._user_params = m.user_params
        self.block = m.block
        self.dynamic_smem = m.dynamic_smem
        self.tiles = m.tile_exprs
        self._buffer_params = [p.to_json() for p in m.params if p.pointer and (p.shapes or p.align)]

    @property
    def name(self) -> str:
        return self.manifest.kernel

    @property
    def block_threads(self) -> int:
        return math.prod(self.block)

    # --- loading ---------------------------------------------------------------------------

    @classmethod
    def load(cls, cubin: bytes, manifest: Manifest | dict, device: int = 0) -> "Kernel":
        """Load `cubin` into the primary context of `device` and find the manifest's kernel."""
        check_device(device)  # before the driver is asked
        kernel = cls(manifest, device=device)  # the manifest is checked before the driver is touched
        if kernel.manifest.distributed:
            from . import nvshmem
            if not nvshmem.initialized():
                raise ArgumentError(f"kernel '{kernel.name}' is a distributed link (every rank runs it on NVSHMEM): "
                                    "set NVSHMEM up first, on every rank (pipelink.runtime.nvshmem.init_from_torch(), "
                                    "or nvshmem.init(rank, world, unique_id))")
            if nvshmem.device() != device:
                raise ArgumentError(f"kernel '{kernel.name}': NVSHMEM runs on device {nvshmem.device()} in this "
                                    f"process, the kernel was asked for device {device}")
        image = bytes(cubin)
        if not image:
            raise ValueError(f"empty cubin for kernel '{kernel.name}'")
        if not kernel.manifest.describes(image):
            # Another link's manifest may list other parameters: launching would pass garbage.
            raise ValueError(f"the manifest of kernel '{kernel.name}' was written for another cubin "
                             "(its cubin_sha256 differs): use the K.json written with this cubin, or link again")
        drv = _cu.driver()
        _cu.call("cuInit", drv.cuInit, 0)
        kernel._cu_device = _cu.call(f"cuDeviceGet({device})", drv.cuDeviceGet, device)
        # The primary context is the one the CUDA runtime (torch, cupy) uses: pointers are shared.
        kernel.context = _cu.call(f"cuDevicePrimaryCtxRetain on device {device}",
                               drv.cuDevicePrimaryCtxRetain, kernel._cu_device)
        try:
            _cu.call("cuCtxSetCurrent", drv.cuCtxSetCurrent, kernel.context)
            kernel._load_module(image)
            if kernel.manifest.distributed:  # NVSHMEM's device library in the module needs its state
                from . import nvshmem
                nvshmem.module_init(kernel.module)
            kernel.function = _cu.call(f"cuModuleGetFunction for kernel '{kernel.name}'",
                                    drv.cuModuleGetFunction, kernel.module, kernel.name.encode())
            kernel._configure()
        except BaseException:
            kernel.unload()
            raise
        return kernel

    def _load_module(self, image: bytes) -> None:
        drv = _cu.driver()
        try:
            self.module = _cu.call(f"cuModuleLoadData for kernel '{self.name}'", drv.cuModuleLoadData, image)
        except LaunchError as exc:
            # The usual cause is a cubin for another architecture: say which two.
            target, arch = self.manifest.target, self._device_arch()
            if target and arch and target.removesuffix("a") != arch:
                raise exc.with_hint(f"the cubin is for {target}, device {self.device} is {arch}") from exc.__cause__
            raise

    def _device_arch(self) -> str | None:
        """'sm_90' for the device, or None when the driver cannot say."""
        drv = _cu.driver()
        try:
            major = _cu.call("cuDeviceGetAttribute", drv.cuDeviceGetAttribute,
                          drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self._cu_device)
            minor = _cu.call("cuDeviceGetAttribute", drv.cuDeviceGetAttribute,
                          drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self._cu_device)
        except LaunchError:
            return None
        return f"sm_{major}{minor}"

    def _configure(self) -> None:
        """Opt in to the dynamic shared memory (needed above 48 KB), then check the block fits."""
        drv = _cu.driver()
        fa = drv.CUfunction_attribute
        try:
            _cu.call(f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={self.dynamic_smem}) for kernel '{self.name}'",
                  drv.cuFuncSetAttribute, self.function, fa.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                  self.dynamic_smem)
        except LaunchError as exc:
            raise exc.with_hint(self._smem_budget()) from exc.__cause__
        limit = _cu.call(f"cuFuncGetAttribute(MAX_THREADS_PER_BLOCK) for kernel '{self.name}'",
                      drv.cuFuncGetAttribute, fa.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, self.function)
        if self.block_threads > limit:
            raise LaunchError(f"checking the block of kernel '{self.name}'", None,
                              f"block {list(self.block)} has {self.block_threads} threads; the compiled "
                              f"kernel allows at most {limit} (its register use limits it)")

    def _smem_budget(self) -> str:
        """Why a dynamic shared memory size may not fit: the device's opt-in limit and static use."""
        drv = _cu.driver()
        try:
            optin = _cu.call("cuDeviceGetAttribute", drv.cuDeviceGetAttribute,
                          drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                          self._cu_device)
            static = _cu.call("cuFuncGetAttribute", drv.cuFuncGetAttribute,
                           drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, self.function)
        except LaunchError:
            return ""
        return (f"the device allows {optin} B of shared memory per block; the kernel uses {static} B "
                f"statically, leaving {optin - static} B for the {self.dynamic_smem} B asked for")

    def unload(self) -> None:
        """Unload the module and release the primary context. Safe to call twice."""
        if self.module is None and self.context is None:
            return
        drv = _cu.driver()
        try:
            if self.module is not None:
                _cu.call("cuCtxSetCurrent", drv.cuCtxSetCurrent, self.context)
                from .workspace import release_workspace
                release_workspace(self)
                self._release_partials()
                if self.manifest.distributed:
                    from . import nvshmem
                    nvshmem.module_finalize(self.module)
                _cu.call(f"cuModuleUnload for kernel '{self.name}'", drv.cuModuleUnload, self.module)
        finally:
            self.module = self.function = None
            self._resident = None
            if self.context is not None:
                self.context = None
                _cu.call(f"cuDevicePrimaryCtxRelease on device {self.device}",
                      drv.cuDevicePrimaryCtxRelease, self._cu_device)

    def task_profile(self) -> list:
        """The task records (runtime/profile.py TaskRecord) of this kernel's latest launch, for a kernel linked
        with `profile_tasks`; waits for the device first. Raises LaunchError for a kernel linked without."""
        from . import profile
        self._require_loaded("reading the task profile")
        capacity = self.manifest.profile_tasks
        if not capacity:
            raise LaunchError(f"reading the task profile of kernel '{self.name}'", None,
                              "it was linked without profile_tasks (pipeline field, `pipelink link --profile-tasks N`)")
        drv = _cu.driver()
        _cu.call("cuCtxSetCurrent", drv.cuCtxSetCurrent, self.context)
        _cu.call("cuCtxSynchronize (before reading the task profile)", drv.cuCtxSynchronize)

        def read(symbol: str, nbytes: int) -> bytes:
            ptr, size = _cu.call(f"cuModuleGetGlobal({symbol})", drv.cuModuleGetGlobal, self.module, symbol.encode())
            if size < nbytes:
                raise LaunchError(f"reading {symbol}", None, f"it holds {size} bytes, the manifest says {nbytes}")
            buf = (ctypes.c_uint8 * nbytes)()
            _cu.call(f"cuMemcpyDtoH ({symbol})", drv.cuMemcpyDtoH, ctypes.addressof(buf), ptr, nbytes)
            return bytes(buf)

        next_slot = int.from_bytes(read(profile.NEXT_SYMBOL, 8), "little")
        ring = read(profile.RING_SYMBOL, capacity * profile.WORDS * 8)
        return profile.decode(ring, next_slot, capacity, [c.name for c in self.manifest.components])

    def __enter__(self) -> "Kernel":
        return self

    def __exit__(self, *exc) -> None:
        self.unload()

    def _require_loaded(self, doing: str) -> None:
        if self.function is None:
            said = doing if f"kernel '{self.name}'" in doing else f"{doing} for kernel '{self.name}'"
            raise LaunchError(said, None, "the kernel is not loaded (use Kernel.load)")

    # --- arguments -------------------------------------------------------------------------

    @property
    def user_params(self) -> tuple[ParamSpec, ...]:
        """The parameters a caller passes (the launcher supplies the implicit ones)."""
        return self._user_params

    def bind(self, args: tuple, kwargs: dict) -> list:
        """The Python values of the arguments in parameter order, checked for missing/extra ones."""
        names = [p.name for p in self.user_params]
        if len(args) > len(names):
            raise ArgumentError(f"kernel '{self.name}' takes {len(names)} arguments ({', '.join(names)}) "
                                f"but {len(args)} were given")
        bound = dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in names:
                raise ArgumentError(f"kernel '{self.name}' has no parameter '{key}' (it has {', '.join(names)})")
            if key in bound:
                raise ArgumentError(f"argument '{key}' of kernel '{self.name}' given by position and by keyword")
            bound[key] = value
        missing = [n for n in names if n not in bound]
        if missing:
            raise ArgumentError(f"kernel '{self.name}' is missing argument(s) {', '.join(map(repr, missing))}")
        return [bound[n] for n in names]

    def pack_args(self, *args, **kwargs) -> list:
        """ctypes objects, one per parameter in order, holding the bytes the kernel receives."""
        return self._pack_all(self.bind(args, kwargs))

    def _pack_all(self, values: list) -> list:
        """Scalars and pointers first (checked one by one), then the tensor maps, whose declared
        extents are evaluated over the integer scalars: every map is checked before any is encoded."""
        packed = [None if p.tensor_map is not None else self.pack_one(p, v) for p, v in zip(self.user_params, values)]
        if any(p.tensor_map is not None for p in self.user_params):
            env = self.shape_env(values)
            layouts = [self._tensor_map_layout(p, v, env) if p.tensor_map is not None else None
                       for p, v in zip(self.user_params, values)]
            packed = [self._tensor_map_encoded(p, layout) if layout is not None else done
                      for p, layout, done in zip(self.user_params, layouts, packed)]
        return packed

    def pack_one(self, param: ParamSpec, value, env: dict | None = None):
        if param.tensor_map is not None:
            return self._tensor_map_encoded(param, self._tensor_map_layout(param, value, env or {}))
        if param.pointer:
            return ctypes.c_void_p(self._pointer(param, value))
        return self._scalar(param, value)

    def _tensor_map_layout(self, param: ParamSpec, value, env: dict):
        """What the launcher reads off `value`, checked against the declaration (no driver call)."""
        from . import tensormap
        layout = tensormap.layout_of(value, lambda v: self._dtype_of(v, param.dtype))
        if layout is None:
            raise ArgumentError(f"argument '{param.name}' is a {param.describe()}: expected a CUDA tensor or array, "
                                f"got {type(value).__name__}")
        if _is_torch_like(value):
            dev = value.device
            kind = getattr(dev, "type", str(dev).split(":")[0])
            if kind != "cuda":
                raise ArgumentError(f"argument '{param.name}' is a {kind} tensor; kernel '{self.name}' needs it on "
                                    f"cuda:{self.device}")
            self._check_device(param, f"cuda:{dev.index}", dev.index)
        elif (_cuda_array_interface(value) or {}).get("mask") is not None:
            raise ArgumentError(f"argument '{param.name}' is a masked array; the kernel cannot honour a mask")
        why = tensormap.check(param.name, param.dtype, param.tensor_map, layout, env)
        if why:
            raise ArgumentError(f"argument '{param.name}' {why}")
        return layout

    def _tensor_map_encoded(self, param: ParamSpec, layout):
        """The descriptor for a checked layout, encoded once per layout."""
        from . import tensormap
        key = ("tmap", param.name, layout, param.tensor_map)
        cached = self._memo.get(key)
        if cached is None:
            cached = tensormap.encode(param.dtype, param.tensor_map, layout)
            if not isinstance(cached, ctypes.Array):
                raise LaunchError(f"cuTensorMapEncodeTiled for argument '{param.name}' of kernel '{self.name}'",
                                  *_cu.error_text(cached))
            self._memo[key] = cached
        return cached

    @staticmethod
    def _dtype_of(value, want: str | None = None) -> str | None:
        """The tensor's pipelink dtype; a 2-byte void array counts as bf16 where `want` is bf16."""
        if _is_torch_like(value):
            return _TORCH_DTYPES.get(str(value.dtype).removeprefix("torch."))
        typestr = (_cuda_array_interface(value) or {}).get("typestr")
        if want == "bf16" and typestr in _BF16_VOID_TYPESTRS:
            return "bf16"
        return _TYPESTRS.get(typestr)

    def _pointer(self, param: ParamSpec, value) -> int:
        """The device address an argument for a pointer parameter stands for, after the checks."""
        if _is_torch_like(value):
            return self._torch_pointer(param, value)
        cai = _cuda_array_interface(value)
        if cai is not None:
            return self._cai_pointer(param, cai)
        if hasattr(value, "__dlpack__") and hasattr(value, "__dlpack_device__"):
            return self._dlpack_pointer(param, value)
        if isinstance(value, int) and not isinstance(value, bool):
            if not 0 <= value < 1 << 64:
                raise ArgumentError(f"argument '{param.name}': {value} is not a 64-bit device address")
            return value  # a raw device pointer: the caller vouches for it
        raise ArgumentError(f"argument '{param.name}' is a pointer ({param.describe()}): expected a CUDA tensor "
                            f"or array, or a device pointer int, got {type(value).__name__}")

    def _check_device(self, param: ParamSpec, where: str, ordinal: int | None) -> None:
        if ordinal is not None and ordinal != self.device:
            raise ArgumentError(f"argument '{param.name}' is on {where}, but kernel '{self.name}' "
                                f"runs on cuda:{self.device}")

    def _torch_pointer(self, param: ParamSpec, t) -> int:
        dev = t.device
        kind = getattr(dev, "type", str(dev).split(":")[0])
        if kind != "cuda":
            raise ArgumentError(f"argument '{param.name}' is a {kind} tensor; kernel '{self.name}' needs it "
                                f"on cuda:{self.device}")
        index = getattr(dev, "index", None)
        self._check_device(param, f"cuda:{index}", index)
        dtype = t.dtype
        pl_dtype = _TORCH_DTYPE_CACHE.get(dtype)
        if pl_dtype is None:  # str() of a torch dtype is slow enough to matter on every launch
            pl_dtype = _TORCH_DTYPE_CACHE[dtype] = _TORCH_DTYPES.get(str(dtype).removeprefix("torch."), "")
        if pl_dtype != param.dtype:
            raise ArgumentError(f"argument '{param.name}' is a {param.describe()} parameter but the tensor's "
                                f"dtype is {dtype} ({pl_dtype or 'no pipelink dtype'})")
        if not t.is_contiguous():
            raise ArgumentError(f"argument '{param.name}' is not contiguous; the kernel indexes it densely "
                                f"(pass .contiguous())")
        return int(t.data_ptr())

    def _cai_pointer(self, param: ParamSpec, cai: dict) -> int:
        if not isinstance(cai, dict):
            raise ArgumentError(f"argument '{param.name}': its __cuda_array_interface__ is a {type(cai).__name__}, "
                                "not a dict")
        shape, strides, data = cai.get("shape"), cai.get("strides"), cai.get("data")
        ints = lambda v: isinstance(v, (tuple, list)) and all(  # noqa: E731
            isinstance(x, int) and not isinstance(x, bool) for x in v)
        if not ints(shape) or any(d < 0 for d in shape) or (strides is not None and not ints(strides)) or not (
                isinstance(data, (tuple, list)) and len(data) == 2 and isinstance(data[0], int)
                and not isinstance(data[0], bool) and 0 <= data[0] < 1 << 64):
            raise ArgumentError(f"argument '{param.name}': its __cuda_array_interface__ is malformed (shape "
                                f"{shape!r}, strides {strides!r}, data {data!r}): shape a tuple of ints >= 0, "
                                "strides None or ints, data (address, read-only flag)")
        typestr = cai.get("typestr")
        dtype = _TYPESTRS.get(typestr)
        if param.dtype == "bf16" and typestr in _BF16_VOID_TYPESTRS:
            dtype = "bf16"
        if dtype != param.dtype:
            raise ArgumentError(f"argument '{param.name}' is a {param.describe()} parameter but the array's "
                                f"typestr is {typestr!r} ({dtype or 'no pipelink dtype'})")
        if cai.get("mask") is not None:
            raise ArgumentError(f"argument '{param.name}' is a masked array; the kernel cannot honour a mask")
        itemsize = DTYPE_BYTES[param.dtype]
        if not _c_contiguous(cai.get("shape", ()), cai.get("strides"), itemsize):
            raise ArgumentError(f"argument '{param.name}' is not C-contiguous (shape {tuple(cai.get('shape', ()))}, "
                                f"strides {tuple(cai['strides'])}); pass a contiguous copy")
        ptr, readonly = cai["data"]
        if readonly and not param.const:
            raise ArgumentError(f"argument '{param.name}' is read-only but kernel '{self.name}' writes through it")
        if ptr:
            ordinal = self.pointer_device(ptr)
            if ordinal == -1:
                raise ArgumentError(f"argument '{param.name}' (address {ptr:#x}) is not CUDA device memory")
            self._check_device(param, f"cuda:{ordinal}", ordinal)
        return int(ptr)

    def _dlpack_pointer(self, param: ParamSpec, value) -> int:
        dev_type, dev_id = value.__dlpack_device__()
        if int(dev_type) != DLPACK_CUDA:
            raise ArgumentError(f"argument '{param.name}' is not in CUDA device memory (DLPack device type "
                                f"{int(dev_type)}; only {DLPACK_CUDA}, CUDA, is accepted)")
        self._check_device(param, f"cuda:{dev_id}", int(dev_id))
        try:
            from torch.utils import dlpack
        except ImportError:
            raise ArgumentError(f"argument '{param.name}' offers only __dlpack__; reading its pointer needs torch, "
                                f"which is not importable. Pass a torch tensor, an object with "
                                f"__cuda_array_interface__, or a device pointer int") from None
        return self._torch_pointer(param, dlpack.from_dlpack(value))

    def pointer_device(self, ptr: int) -> int | None:
        """Device ordinal owning `ptr`; -1 when it is not CUDA memory; None when nobody can tell
        (the kernel is not loaded, so there is no driver to ask)."""
        if self.function is None:
            return None
        drv = _cu.driver()
        err, ordinal = drv.cuPointerGetAttribute(
            drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
        if err == drv.CUresult.CUDA_ERROR_INVALID_VALUE:  # not allocated, mapped or registered by CUDA
            return -1
        if err != drv.CUresult.CUDA_SUCCESS:
            name, text = _cu.error_text(err)
            raise LaunchError(f"cuPointerGetAttribute(DEVICE_ORDINAL, {ptr:#x})", name, text)
        return int(ordinal)

    def _scalar(self, param: ParamSpec, value):
        if _is_array_like(value):
            raise ArgumentError(f"argument '{param.name}' is a scalar {param.dtype}, got a {type(value).__name__} "
                                f"(pass a Python number, e.g. .item())")
        if param.dtype in INTEGER_DTYPES:
            return self._int_scalar(param, value)
        if param.dtype == "bool":
            return self._bool_scalar(param, value)
        if isinstance(value, (str, bytes)) or _is_bool(value) or not (
                hasattr(type(value), "__float__") or hasattr(type(value), "__index__")):
            raise ArgumentError(f"argument '{param.name}' is a {param.dtype}, got {type(value).__name__}")
        try:
            x = float(value)
            if math.isinf(x) and str(value).lower().lstrip("+-") not in ("inf", "infinity"):
                raise OverflowError  # a finite value past a double (Decimal('1e400')): not an infinity asked for
            if param.dtype == "f64":
                return ctypes.c_double(x)
            if param.dtype == "f32":
                struct.pack("<f", x)  # raises OverflowError where c_float would silently give inf
                return ctypes.c_float(x)
            convert, ctype = _SMALL_FLOATS[param.dtype]
            return ctype(convert(x))
        except OverflowError:
            raise ArgumentError(f"argument '{param.name}' = {value!r} is out of range for {param.dtype}") from None

    def _int_scalar(self, param: ParamSpec, value):
        if _is_bool(value):
            raise ArgumentError(f"argument '{param.name}' is an integer ({param.dtype}), got a bool")
        try:
            v = operator.index(value)
        except TypeError:
            raise ArgumentError(f"argument '{param.name}' is an integer ({param.dtype}), "
                                f"got {type(value).__name__}") from None
        lo, hi = int_range(param.dtype)
        if not lo <= v <= hi:
            raise ArgumentError(f"argument '{param.name}' = {v} is out of range for {param.dtype} [{lo}, {hi}]")
        return _INT_CTYPES[param.dtype](v)

    def _bool_scalar(self, param: ParamSpec, value):
        if _is_bool(value):  # numpy.bool_ has no __index__
            return ctypes.c_bool(bool(value))
        try:
            v = operator.index(value)
        except TypeError:
            v = None
        if v not in (0, 1):
            raise ArgumentError(f"argument '{param.name}' is a bool, got {value!r}")
        return ctypes.c_bool(v)

    # --- the grid --------------------------------------------------------------------------

    def total_tiles(self, **shapes) -> int:
        """The product of the tile expressions over `shapes` (1 when the manifest lists none)."""
        for name, value in shapes.items():  # 1.5 had been taken as 1, 'a' had raised from deep inside
            if isinstance(value, bool) or not hasattr(type(value), "__index__"):
                raise ArgumentError(f"shape {name} of kernel '{self.name}' is an integer, got {value!r}")
        shapes = {name: operator.index(value) for name, value in shapes.items()}
        key = ("tiles", *sorted(shapes.items()))
        if key not in self._memo:  # every launch asks: evaluate once per shape
            self._memo[key] = self._total_tiles(shapes)
        return self._memo[key]

    def _tile_extents(self, shapes: dict) -> list[int]:
        return [tile.evaluate(shapes) for tile in self.tiles] or [1]

    def _total_tiles(self, shapes: dict) -> int:
        self._check_task_extents(shapes)
        total = 1
        for tile in self.tiles:
            try:
                n = tile.evaluate(shapes)
            except _expr.ExprError as exc:
                raise ArgumentError(f"tile count {tile.text!r} of kernel '{self.name}': {exc}") from None
            if n < 0:
                raise ArgumentError(f"tile count {tile.text!r} of kernel '{self.name}' is {n} for {shapes}")
            over = tile.c_int_overflow(shapes)
            if over:  # the kernel computes the count in int: a step past it wraps, and the tiles walked differ
                raise ArgumentError(f"tile count {tile.text!r} of kernel '{self.name}' for {shapes}: the kernel "
                                    f"computes it in a 32-bit int, and {over} does not fit")
            total *= n
        if total > INT32_MAX:  # the kernel counts its tiles in an int
            raise ArgumentError(f"kernel '{self.name}' has {total} tiles for {shapes}, more than the {INT32_MAX} a "
                                "launch walks")
        return total

    def _check_task_extents(self, shapes: dict) -> None:
        """A persistent kernel's tile count is the sum of its components' task counts, each a product of grid
        extents: one extent below zero (a runtime value out of its range, such as 0 slices where the grid adds
        a task for slices > 1) would hide in the sum, and its tasks would be claimed as another component's.
        Each extent must be >= 0, named with its component."""
        for name, text in (self.manifest.tasks or {}).items():
            for factor in _factors(_expr.parse(text).tree):
                extent = _expr.parse(ast.unparse(factor))
                try:
                    n = extent.evaluate(shapes)
                except _expr.ExprError:
                    continue  # a name the shapes do not give, or a division by zero: the total reports it
                if n < 0:
                    raise ArgumentError(f"component '{name}' of kernel '{self.name}' has a tile extent "
                                        f"{extent.text} = {n} for {shapes}: a runtime value is out of the range "
                                        "its contract describes")
        # A task of a load entry fills and drains loader.slots slots of the ring: none, or fewer than none,
        # and the loader and the compute warps walk the ring out of step (a hang, or slots read as they refill).
        for name, text in (self.manifest.ring_slots or {}).items():
            try:
                slots = _expr.parse(text).evaluate(shapes)
                tasks = _expr.parse(self.manifest.tasks.get(name, "1")).evaluate(shapes)
            except _expr.ExprError:
                continue  # a name the shapes do not give: the total reports it
            if slots < 1 and tasks > 0:
                raise ArgumentError(f"component '{name}' of kernel '{self.name}' fills {text} = {slots} slots of "
                                    f"the loader ring a task for {shapes}: a runtime value is out of the range "
                                    "its contract describes (a task must fill at least one slot)")

    def num_sms(self) -> int:
        """Multiprocessors on the device (monkeypatch in tests)."""
        self._require_loaded("cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)")
        drv = _cu.driver()
        return _cu.call(f"cuDeviceGetAttribute(MULTIPROCESSOR_COUNT) on device {self.device}", drv.cuDeviceGetAttribute,
                     drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, self._cu_device)

    def max_active_blocks_per_sm(self) -> int:
        """Blocks of this kernel one multiprocessor holds at once, given block and dynamic smem."""
        what = f"cuOccupancyMaxActiveBlocksPerMultiprocessor for kernel '{self.name}'"
        self._require_loaded(what)
        drv = _cu.driver()
        return _cu.call(what, drv.cuOccupancyMaxActiveBlocksPerMultiprocessor, self.function,
                     self.block_threads, self.dynamic_smem)

    @property
    def cluster_ctas(self) -> int:
        """CTAs in one of the kernel's clusters (1 without `__cluster_dims__`): a grid is whole clusters."""
        return self.manifest.cluster[0] if self.manifest.cluster else 1

    def max_active_clusters(self) -> int:
        """Clusters of this kernel the whole device holds at once (a cluster's CTAs share one GPC, so this can
        be fewer than the multiprocessors' blocks over the cluster size)."""
        what = f"cuOccupancyMaxActiveClusters for kernel '{self.name}'"
        self._require_loaded(what)
        drv = _cu.driver()
        config = drv.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = self.cluster_ctas, 1, 1
        config.blockDimX, config.blockDimY, config.blockDimZ = self.block
        config.sharedMemBytes = self.dynamic_smem
        return _cu.call(what, drv.cuOccupancyMaxActiveClusters, self.function, config)

    def resident_blocks(self) -> int:
        """Blocks the whole device holds at once, in whole clusters; asked of the driver once per load."""
        if self._resident is None:
            per_sm = self.max_active_blocks_per_sm()
            if per_sm < 1:
                raise LaunchError(f"occupancy of kernel '{self.name}'", None,
                                  f"no block of {self.block_threads} threads with {self.dynamic_smem} B dynamic "
                                  f"shared memory fits on a multiprocessor")
            resident = self.num_sms() * per_sm
            if self.cluster_ctas > 1:
                clusters = min(self.max_active_clusters(), resident // self.cluster_ctas)
                if clusters < 1:
                    raise LaunchError(f"occupancy of kernel '{self.name}'", None,
                                      f"no cluster of {self.cluster_ctas} blocks of {self.block_threads} threads "
                                      f"with {self.dynamic_smem} B dynamic shared memory fits on the device")
                resident = clusters * self.cluster_ctas
            self._resident = resident
        return self._resident

    def _whole_clusters(self, ctas: int) -> int:
        """`ctas` rounded up to whole clusters (the CTAs past the tiles find none and end)."""
        n = self.cluster_ctas
        return -(-ctas // n) * n

    def grid_for(self, **shapes) -> int:
        """Blocks for a persistent grid-stride launch: every tile, but no more than fit at once.
        A kernel whose manifest asks for a balanced grid gets the fewest blocks that still need no
        more rounds of tiles, so every block walks the same number of tiles."""
        tiles = self.total_tiles(**shapes)
        policy = self.manifest.grid_policy
        if policy == "stream_k":
            return self.stream_k_plan(shapes)[0]
        return self._whole_clusters(max(1, balanced_grid(tiles, self.resident_blocks()) if policy == "balanced"
                                        else min(tiles, self.resident_blocks())))

    def stream_k_plan(self, shapes: dict, grid: int | None = None) -> tuple[int, int, int]:
        """(grid, tiles split over the CTAs, pieces per tile) of a kernel with a split reduction
        (streamk.py); `split_reduction = False` on the kernel keeps every tile whole."""
        from .streamk import stream_k_plan
        if self.manifest.stream_k is None:
            raise ArgumentError(f"kernel '{self.name}' has no split reduction (its manifest has no stream_k)")
        key = ("stream_k", grid, self.split_reduction, *sorted(shapes.items()))
        if key not in self._memo:
            tiles = self.total_tiles(**shapes)
            try:
                blocks = self.manifest.stream_k.blocks_expr.evaluate(shapes)
            except (_expr.ExprError, AttributeError) as exc:
                raise ArgumentError(f"reduction blocks of kernel '{self.name}': {exc}") from None
            resident = self.resident_blocks()
            rows = tiles // max(1, self._tile_extents(shapes)[-1]) if tiles else 0
            if not self.split_reduction:
                plan = (grid or self._whole_clusters(balanced_grid(tiles, resident)), 0, 1)
            else:
                n = self.cluster_ctas
                plan = stream_k_plan(tiles, blocks, resident, grid, rows, n)
                if grid is None and plan[0] % n:  # planned again for whole clusters
                    plan = stream_k_plan(tiles, blocks, resident, self._whole_clusters(plan[0]), rows, n)
            self._memo[key] = plan
        return self._memo[key]

    def _partials_for(self, slots: int) -> int:
        """The partial slots of a split reduction: allocated and zeroed once per kernel, for every CTA
        the device holds or the launch's split tiles, and grown when a launch needs more (launches
        leave their flags zero). A grown buffer replaces the old one, which is kept until unload: a
        prepared launch or a captured graph may still point at it."""
        slot_bytes = 4 * self.manifest.stream_k.slot_floats
        need = max(slots, self.resident_blocks())
        if self._partials is None or self._partials[1] < need:
            self._require_loaded("the partial sums of a split reduction")
            drv = _cu.driver()
            _cu.call("cuCtxSetCurrent", drv.cuCtxSetCurrent, self.context)  # this thread may have none current
            size = need * slot_bytes
            ptr = _cu.call(f"cuMemAlloc({size}) for the partial sums of kernel '{self.name}'", drv.cuMemAlloc, size)
            _cu.call("cuMemsetD8 (the partial sums' flags)", drv.cuMemsetD8, ptr, 0, size)
            if self._partials is not None:
                self._retired_partials.append(self._partials[0])
            self._partials = (ptr, need)
        return int(self._partials[0])

    def _release_partials(self) -> None:
        drv = _cu.driver()
        for ptr in [self._partials[0]] if self._partials is not None else []:
            _cu.call("cuMemFree (the partial sums)", drv.cuMemFree, ptr)
        for ptr in self._retired_partials:
            _cu.call("cuMemFree (the partial sums)", drv.cuMemFree, ptr)
        self._partials, self._retired_partials = None, []

    def shape_env(self, values: list) -> dict[str, int]:
        """Integer scalar arguments by name: what the tile expressions are evaluated over. A distributed kernel's
        also hold this process's RANK and WORLD (NVSHMEM's), which its extents may use."""
        env = {}
        for p, v in zip(self.user_params, values):
            if p.is_shape:
                if isinstance(v, bool) or not hasattr(type(v), "__index__"):
                    raise ArgumentError(f"argument '{p.name}' is an integer ({p.dtype}), got {v!r}")
                env[p.name] = operator.index(v)
        if self.manifest.distributed:
            from . import nvshmem
            if nvshmem.initialized():
                env["RANK"], env["WORLD"] = nvshmem.rank(), nvshmem.world()
        return env

    # --- launching -------------------------------------------------------------------------

    def launch(self, *args, grid=None, stream=None, **kwargs) -> None:
        """Launch asynchronously on `stream` (None: the legacy default stream, 0).

        grid=None sizes the grid with `grid_for` over the integer scalar arguments. A parameter
        named `grid` or `stream` must be passed by position.
        """
        self.prepare(*args, grid=grid, **kwargs).launch(stream)

    def prepare(self, *args, grid=None, **kwargs) -> "PreparedLaunch":
        """Check and pack the arguments once; `PreparedLaunch.launch()` then repeats the launch at
        the cost of the driver call, the same arguments every time (a persistent kernel keeps its place
        in its event workspace on the device), so a CUDA graph may capture it and replay it. A persistent
        kernel's workspace is allocated here where it is missing or too small: prepare before a capture.
        The arrays must stay where they are: prepare again after reallocating one."""
        values = self.bind(args, kwargs)
        packed = self._pack_all(values)
        env = self.shape_env(values)
        if self._buffer_params:
            from .buffers import buffer_problem
            why = buffer_problem(self.name, self._buffer_params,
                                 {p.name: v for p, v in zip(self.user_params, values)}, env)
            if why:
                raise ArgumentError(why)
        for name, value in self.manifest.specialized.items():
            if env.get(name) != value:
                raise ArgumentError(f"kernel '{self.name}' was linked for {name} = {value}; got {env.get(name)}")
        if self.manifest.cluster_tiles:
            self._check_cluster_tiles(env)
        chosen_grid = grid is None  # the launcher's grid goes with its split plan
        if grid is None:
            unknown = sorted(set().union(*(t.names for t in self.tiles)) - env.keys())
            if unknown:
                raise ArgumentError(f"the tile counts of kernel '{self.name}' use {', '.join(unknown)}, which "
                                    f"are not integer parameters: pass grid= (e.g. kernel.grid_for(...))")
            grid = self.grid_for(**env)
        dims = _grid_dims(grid)
        if dims[1:] != (1, 1):  # the glue walks tiles by blockIdx.x: a second row of CTAs would run every tile again
            raise ArgumentError(f"kernel '{self.name}' takes a one-dimensional grid (its tiles are walked over "
                                f"blockIdx.x), got {list(dims)}")
        if dims[0] % self.cluster_ctas:
            raise ArgumentError(f"kernel '{self.name}' runs in clusters of {self.cluster_ctas} CTAs "
                                f"(__cluster_dims__): a grid of {dims[0]} is not whole clusters")
        workspace = None
        slots = {}
        if self.manifest.persistent:
            self._require_loaded("the event workspace")
            from .workspace import ensure_workspace
            implicit = ensure_workspace(self, *self._events_for(env, dims))
            workspace = implicit["workspace"]
            slots = {p.kind: _implicit_value(p) for p in IMPLICIT_PARAMS}
            for kind, slot in slots.items():
                slot.value = implicit[kind]
        if self.manifest.stream_k is not None:
            from .streamk import partial_slots
            ctas = math.prod(dims)
            _, sk_tiles, split = self.stream_k_plan(env, None if chosen_grid else ctas)
            need = partial_slots(ctas, self.total_tiles(**env), sk_tiles, split)
            values_of = {"partials": self._partials_for(need) if need else 0, "stream_k_tiles": sk_tiles,
                         "split_k": split}
            for p in STREAM_K_PARAMS:
                slots[p.kind] = _implicit_value(p)
                slots[p.kind].value = values_of[p.kind]
        if slots:
            it = iter(packed)
            packed = [slots[p.implicit] if p.implicit else next(it) for p in self.params]
        return PreparedLaunch(self, packed, dims, workspace, values)

    def _check_cluster_tiles(self, env: dict) -> None:
        """Each component that declares the cluster walks whole clusters of tiles at these shapes (before the driver
        sees the launch: it would hang)."""
        key = ("cluster tiles", *sorted(env.items()))
        if key not in self._memo:  # every launch asks: evaluate once per shape
            self._memo[key] = cluster_tiles_problem(self.name, self.cluster_ctas, self.manifest.cluster_tiles, env)
        if self._memo[key]:
            raise ArgumentError(self._memo[key])

    # --- event tensors (persistent kernels) ------------------------------------------------

    def event_words(self, **shapes) -> int:
        """64-bit words of event counters this launch needs."""
        key = ("words", *sorted(shapes.items()))
        if key not in self._memo:  # every launch asks: evaluate once per shape
            ws = self.manifest.workspace
            self._memo[key] = sum(e.words(shapes) for e in ws.events) if ws is not None else 0
        return self._memo[key]

    def _events_for(self, env: dict, dims) -> tuple[int, int]:
        """(header words, event words) of a persistent launch of this shape and grid."""
        if self.manifest.dispatch == "static" and math.prod(dims) > self.resident_blocks():
            # Static dispatch waits across CTAs: every CTA must be resident at once, or a waiting
            # CTA can hold the multiprocessor a notifying one needs.
            raise ArgumentError(f"kernel '{self.name}' dispatches tasks statically across CTAs that wait for each "
                                f"other: grid {math.prod(dims)} exceeds the {self.resident_blocks()} blocks the "
                                "device holds at once")
        ws = self.manifest.workspace
        return (ws.header_words if ws is not None else 0), self.event_words(**env)

    def share_workspace(self, other: "Kernel") -> None:
        """Use `other`'s event workspace: the same memory and launch sequence (never launch both at once)."""
        from .workspace import share_workspace
        share_workspace(self, other)

    def _check_timeout(self, stream: int, workspace: int) -> None:
        from .workspace import read_timeout
        read_timeout(self, stream, workspace)

    def launch_packed(self, packed: list, grid: tuple[int, int, int], stream: int = 0) -> None:
        """cuLaunchKernel with already packed arguments (the ctypes objects of `pack_args`)."""
        self._require_loaded("cuLaunchKernel")
        if len(packed) != len(self.params) and len(packed) != len(self.user_params):
            raise ArgumentError(f"{len(packed)} packed arguments for {len(self.params)} parameters")
        slots = _param_slots(packed)
        self._launch_slots(ctypes.addressof(slots) if packed else 0, grid, stream)

    def _launch_slots(self, kernel_params: int, grid: tuple[int, int, int], stream: int) -> None:
        drv = _cu.driver()
        _cu.call("cuCtxSetCurrent", drv.cuCtxSetCurrent, self.context)  # this thread may have none current
        what = lambda: (f"cuLaunchKernel for kernel '{self.name}' (grid {list(grid)}, block {list(self.block)}, "  # noqa: E731
                        f"{self.dynamic_smem} B dynamic smem)")  # built only when a launch fails
        try:
            if self.manifest.dependent_launch:  # the glue waits for the grid before it (griddepcontrol.wait)
                key = ("launch config", grid, stream)
                config = self._memo.get(key)
                if config is None:
                    config = self._memo[key] = dependent_launch_config(drv, grid, self.block, self.dynamic_smem, stream)
                err = drv.cuLaunchKernelEx(config, self.function, kernel_params, 0)[0]
            else:
                err = drv.cuLaunchKernel(self.function, *grid, *self.block, self.dynamic_smem, drv.CUstream(stream),
                                         kernel_params, 0)[0]
        except Exception as exc:  # libcuda missing, or an argument of the wrong Python type
            raise LaunchError(what(), type(exc).__name__, str(exc)) from exc
        if err != drv.CUresult.CUDA_SUCCESS:
            raise LaunchError(what(), *_cu.error_text(err))


def dependent_launch_config(drv, grid: tuple[int, int, int], block: tuple[int, int, int], smem: int, stream: int):
    """A CUlaunchConfig with programmatic stream serialization: the kernel may start while the one
    before it in the stream is still running (its glue waits for that grid before reading anything)."""
    attr = drv.CUlaunchAttribute()
    attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    attr.value.programmaticStreamSerializationAllowed = 1
    config = drv.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = smem
    config.hStream = drv.CUstream(stream)
    config.attrs = [attr]
    config.numAttrs = 1
    return config


def _capturing(stream: int) -> bool:
    """Whether `stream` is being captured into a CUDA graph (nothing may wait for it then)."""
    drv = _cu.driver()
    status = _cu.call("cuStreamIsCapturing", drv.cuStreamIsCapturing, drv.CUstream(stream))
    return status != drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


def _param_slots(packed: list):
    """kernelParams: a void*[n], each pointing at one ctypes value, the form every cuda-bindings
    version takes as-is. cuLaunchKernel copies the values before it returns, so the values may
    change between launches while the array stays."""
    return (ctypes.c_void_p * max(len(packed), 1))(*[ctypes.addressof(a) for a in packed])


@dataclass
class PreparedLaunch:
    """A launch whose arguments are checked and packed (`Kernel.prepare`)."""

    kernel: Kernel
    packed: list              # ctypes values in parameter order, the implicit ones included
    dims: tuple[int, int, int]
    workspace: int | None = None  # persistent: the event workspace this launch uses
    keep: object = field(default=None, repr=False)  # the arrays, kept alive as long as this is

    def __post_init__(self):
        self._slots = _param_slots(self.packed)  # built once: every launch passes the same values
        self._params_address = ctypes.addressof(self._slots) if self.packed else 0
        ws = self.kernel.manifest.workspace
        self._debug = ws is not None and ws.debug
        self._distributed = self.kernel.manifest.distributed

    def launch(self, stream=None) -> None:
        """Launch asynchronously on `stream` (None: the legacy default stream, 0). Nothing on the host
        changes from one launch to the next: a CUDA graph may capture this and replay it. A distributed
        kernel's launch is collective: a barrier across the ranks follows it in the stream."""
        k, handle = self.kernel, _stream_handle(stream)
        k._require_loaded("cuLaunchKernel")
        k._launch_slots(self._params_address, self.dims, handle)
        if self._distributed:  # no rank starts its next launch before every rank has finished this one
            from . import nvshmem
            nvshmem.barrier_on_stream(handle)
        if self._debug and not _capturing(handle):  # a debug build reports a wait that gave up
            k._check_timeout(handle, self.workspace)
