"""NVSHMEM on the host: what a distributed kernel (manifest `distributed`: its contracts use RANK, WORLD or
notify another rank's events) needs before it launches.

One process per GPU; every rank runs the same persistent kernel. NVSHMEM is set up once per process:

    from pipelink.runtime import nvshmem
    nvshmem.init_from_torch()          # torch.distributed's ranks (one rank without it), or
    nvshmem.init(rank, world, uid)     # the caller's: rank 0 makes `uid = nvshmem.unique_id()` and sends it

Then `Kernel.load` initializes the kernel's module for NVSHMEM (its device library's state), the launcher
takes the event workspace from NVSHMEM's symmetric heap (the same offset on every rank, so a counter's
local address names every rank's copy), and a barrier across the ranks follows each launch in its stream:
a rank's next launch notifies counters that every other rank's previous launch must have finished with.
So preparing a distributed kernel is collective (the heap grows on every rank at once: prepare the same
shapes on every rank), and so is every launch.

`symmetric(shape, dtype)` allocates a buffer on the symmetric heap, for data that components reach on other
ranks (`nvshmem_ptr`, puts): it has `__cuda_array_interface__`, so kernels and torch take it as it is.

Through ctypes, on the host library of the nvidia-nvshmem-cu13 wheel whose headers and device library the
link used (core/nvshmem_home.py), and only on its exported entry points: `nvshmemx_hostlib_init_attr`, not
the header's inline `nvshmemx_init_attr`, which calls into the static device library.
"""
from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass, field

from ..core.diagnostics import PipelinkRunError
from ..core.model import DTYPE_BYTES
from ..core.nvshmem_home import PINNED, nvshmem_home, nvshmem_version
from . import driver as _cu

UNIQUE_ID_BYTES = 128
INIT_WITH_UNIQUEID = 1 << 3  # NVSHMEMX_INIT_WITH_UNIQUEID
STATUS_INITIALIZED = 2       # nvshmemx_init_status(): NVSHMEM_STATUS_IS_INITIALIZED

_TYPESTR = {"f32": "<f4", "f16": "<f2", "bf16": "<V2", "f64": "<f8", "i8": "|i1", "u8": "|u1", "i16": "<i2",
            "u16": "<u2", "i32": "<i4", "u32": "<u4", "i64": "<i8", "u64": "<u8"}


class NvshmemError(PipelinkRunError, RuntimeError):
    """NVSHMEM is missing, not set up, or one of its calls failed (PL196)."""

    code = "PL196"


# The ABI structs of nvshmemx_init_attr_t (v2) and its unique-id arguments, as the 3.x headers lay them out;
# their sizes are asserted below and in the tests.
class _UniqueId(ctypes.Structure):
    _fields_ = [("version", ctypes.c_int), ("internal", ctypes.c_char * 124)]


class _UniqueIdArgs(ctypes.Structure):
    _fields_ = [("version", ctypes.c_int), ("id", ctypes.POINTER(_UniqueId)), ("myrank", ctypes.c_int),
                ("nranks", ctypes.c_int)]


class _InitArgs(ctypes.Structure):
    _fields_ = [("version", ctypes.c_int), ("uid_args", _UniqueIdArgs), ("cuda_device_id", ctypes.c_int),
                ("content", ctypes.c_char * 92)]


class _InitAttr(ctypes.Structure):
    _fields_ = [("version", ctypes.c_int), ("mpi_comm", ctypes.c_void_p), ("args", _InitArgs)]


assert (ctypes.sizeof(_UniqueId), ctypes.sizeof(_UniqueIdArgs), ctypes.sizeof(_InitArgs),
        ctypes.sizeof(_InitAttr)) == (128, 24, 128, 144)


def _init_attr(device: int | None) -> _InitAttr:
    """NVSHMEMX_INIT_ATTR_INITIALIZER (v2), with the device when one is named."""
    attr = _InitAttr()
    attr.version = (2 << 16) + ctypes.sizeof(_InitAttr)
    attr.args.version = (2 << 16) + ctypes.sizeof(_InitArgs)
    attr.args.uid_args.version = (1 << 16) + ctypes.sizeof(_UniqueIdArgs)
    attr.args.uid_args.myrank = attr.args.uid_args.nranks = -1
    attr.args.cuda_device_id = -1 if device is None else device
    return attr


@dataclass
class _State:
    lib: object = None
    rank: int | None = None
    world: int | None = None
    device: int | None = None
    context: object = None
    modules: set = field(default_factory=set)  # CUmodule handles initialized for NVSHMEM
    heap: dict = field(default_factory=dict)   # symmetric allocations: address -> bytes


_state = _State()


def library():
    """The NVSHMEM host library (loaded once)."""
    if _state.lib is None:
        home = nvshmem_home()
        path = home / "lib" / "libnvshmem_host.so.3" if home is not None else None
        if path is None or not path.exists():
            raise NvshmemError(f"NVSHMEM's host library was not found: install nvidia-nvshmem-cu13=={PINNED} "
                               "(pipelink's own dependency), the release a distributed link was linked against")
        if nvshmem_version(home) != PINNED:  # its device state would not match the device library in the kernel
            raise NvshmemError(f"the NVSHMEM at {home} is release {nvshmem_version(home) or 'unknown'}; distributed "
                               f"kernels are linked against {PINNED}: install nvidia-nvshmem-cu13=={PINNED} or set "
                               "PIPELINK_NVSHMEM_HOME to a folder of that release")
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as exc:
            raise NvshmemError(f"loading {path} failed: {exc}") from exc
        lib.nvshmemx_get_uniqueid.argtypes = [ctypes.POINTER(_UniqueId)]
        lib.nvshmemx_set_attr_uniqueid_args.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(_UniqueId),
                                                        ctypes.POINTER(_InitAttr)]
        lib.nvshmemx_hostlib_init_attr.argtypes = [ctypes.c_uint, ctypes.POINTER(_InitAttr)]
        lib.nvshmemx_hostlib_finalize.restype = None
        lib.nvshmem_malloc.argtypes = [ctypes.c_size_t]
        lib.nvshmem_malloc.restype = ctypes.c_void_p
        lib.nvshmem_free.argtypes = [ctypes.c_void_p]
        lib.nvshmem_free.restype = None
        lib.nvshmemx_barrier_all_on_stream.argtypes = [ctypes.c_void_p]
        lib.nvshmemx_barrier_all_on_stream.restype = None
        lib.nvshmem_barrier_all.restype = None
        lib.nvshmemx_cumodule_init.argtypes = [ctypes.c_void_p]
        lib.nvshmemx_cumodule_finalize.argtypes = [ctypes.c_void_p]
        _state.lib = lib
    return _state.lib


def initialized() -> bool:
    return _state.rank is not None


def rank() -> int:
    _require("the rank")
    return _state.rank


def world() -> int:
    _require("the world size")
    return _state.world


def device() -> int:
    """The CUDA device NVSHMEM runs on in this process."""
    _require("the device")
    return _state.device


def _require(what: str) -> None:
    if not initialized():
        raise NvshmemError(f"{what}: NVSHMEM is not set up in this process; call pipelink.runtime.nvshmem."
                           "init_from_torch() (or init(rank, world, unique_id)) first, on every rank")


def unique_id() -> bytes:
    """A fresh NVSHMEM unique id (rank 0 makes it; every rank passes the same bytes to init)."""
    uid = _UniqueId()
    uid.version = (1 << 16) + ctypes.sizeof(_UniqueId)
    if library().nvshmemx_get_uniqueid(ctypes.byref(uid)) != 0:
        raise NvshmemError("nvshmemx_get_uniqueid failed")
    return bytes(ctypes.string_at(ctypes.addressof(uid), UNIQUE_ID_BYTES))


def init(rank: int = 0, world: int = 1, uid: bytes | None = None, device: int = 0) -> None:
    """Set NVSHMEM up in this process as `rank` of `world`, on `device` (its primary context, the one torch
    and the launcher use). Every rank passes the same `uid` (from rank 0's `unique_id()`); a world of one
    makes its own. Again with the same rank and world: nothing to do."""
    if not (isinstance(world, int) and world >= 1 and isinstance(rank, int) and 0 <= rank < world):
        raise ValueError(f"rank {rank} of a world of {world}: need 0 <= rank < world")
    if initialized():
        if (_state.rank, _state.world, _state.device) != (rank, world, device):
            raise NvshmemError(f"NVSHMEM is already set up as rank {_state.rank} of {_state.world} on device "
                               f"{_state.device} in this process")
        return
    if uid is None:
        if world != 1:
            raise ValueError("a world of more than one rank needs rank 0's unique_id() on every rank")
        uid = unique_id()
    if len(uid) != UNIQUE_ID_BYTES:
        raise ValueError(f"a unique id is {UNIQUE_ID_BYTES} bytes (nvshmem.unique_id()), got {len(uid)}")
    lib = library()
    drv = _cu.driver()
    _cu.call("cuInit", drv.cuInit, 0)
    cu_device = _cu.call(f"cuDeviceGet({device})", drv.cuDeviceGet, device)
    context = _cu.call(f"cuDevicePrimaryCtxRetain on device {device}", drv.cuDevicePrimaryCtxRetain, cu_device)
    _cu.call("cuCtxSetCurrent", drv.cuCtxSetCurrent, context)
    id_struct = _UniqueId.from_buffer_copy(uid)
    attr = _init_attr(device)
    if lib.nvshmemx_set_attr_uniqueid_args(rank, world, ctypes.byref(id_struct), ctypes.byref(attr)) != 0:
        raise NvshmemError("nvshmemx_set_attr_uniqueid_args failed")
    if lib.nvshmemx_hostlib_init_attr(INIT_WITH_UNIQUEID, ctypes.byref(attr)) != 0 \
            or lib.nvshmemx_init_status() < STATUS_INITIALIZED:
        _cu.call(f"cuDevicePrimaryCtxRelease on device {device}", drv.cuDevicePrimaryCtxRelease, cu_device)
        raise NvshmemError(f"NVSHMEM did not start as rank {rank} of {world} (nvshmemx_hostlib_init_attr; "
                           "NVSHMEM_DEBUG=INFO says why)")
    if lib.nvshmem_my_pe() != rank or lib.nvshmem_n_pes() != world:
        raise NvshmemError(f"NVSHMEM started as PE {lib.nvshmem_my_pe()} of {lib.nvshmem_n_pes()}, "
                           f"not rank {rank} of {world}")
    _state.rank, _state.world, _state.device, _state.context = rank, world, device, (cu_device, context)


def init_from_torch(group=None, device: int | None = None) -> None:
    """init() with torch.distributed's rank and world (rank 0's unique id broadcast over `group`); without
    an initialized process group, a world of one. `device`: torch's current CUDA device by default."""
    import torch
    import torch.distributed as dist

    if device is None:
        device = torch.cuda.current_device()
    if not (dist.is_available() and dist.is_initialized()):
        init(0, 1, None, device)
        return
    r, w = dist.get_rank(group), dist.get_world_size(group)
    box = [unique_id() if r == 0 else None]
    dist.broadcast_object_list(box, src=0, group=group)
    init(r, w, box[0], device)


def finalize() -> None:
    """Free what is left on the symmetric heap and shut NVSHMEM down (collective; after every distributed
    kernel of this process is unloaded)."""
    if not initialized():
        return
    lib = library()
    for ptr in list(_state.heap):
        free(ptr)
    lib.nvshmemx_hostlib_finalize()
    cu_device, _ = _state.context
    _state.rank = _state.world = _state.device = _state.context = None
    _cu.call("cuDevicePrimaryCtxRelease", _cu.driver().cuDevicePrimaryCtxRelease, cu_device)


def malloc(nbytes: int, what: str = "a symmetric buffer") -> int:
    """`nbytes` on the symmetric heap (collective: every rank asks for the same size at the same point)."""
    _require(f"allocating {what}")
    ptr = library().nvshmem_malloc(max(int(nbytes), 1))
    if not ptr:
        raise NvshmemError(f"nvshmem_malloc({nbytes}) for {what} failed: the symmetric heap is full "
                           "(NVSHMEM_SYMMETRIC_SIZE sets its size)")
    _state.heap[int(ptr)] = int(nbytes)
    return int(ptr)


def free(ptr: int) -> None:
    """Give back a symmetric allocation (collective)."""
    if _state.heap.pop(int(ptr), None) is not None:
        library().nvshmem_free(ctypes.c_void_p(int(ptr)))


def barrier() -> None:
    """A barrier across every rank, on the host (each rank's earlier work on the device is done first)."""
    _require("a barrier across the ranks")
    library().nvshmem_barrier_all()


def barrier_on_stream(stream: int) -> None:
    """A barrier across every rank, in `stream`'s order."""
    _require("a barrier across the ranks")
    library().nvshmemx_barrier_all_on_stream(ctypes.c_void_p(int(stream)))


def module_init(module) -> None:
    """Initialize a loaded module that links NVSHMEM's device library (its device state)."""
    _require("loading a distributed kernel")
    handle = int(module)
    if library().nvshmemx_cumodule_init(ctypes.c_void_p(handle)) != 0:
        raise NvshmemError("nvshmemx_cumodule_init failed for the kernel's module (was it linked against "
                           f"nvidia-nvshmem-cu13=={PINNED}?)")
    _state.modules.add(handle)


def module_finalize(module) -> None:
    handle = int(module)
    if handle in _state.modules:
        _state.modules.discard(handle)
        library().nvshmemx_cumodule_finalize(ctypes.c_void_p(handle))


@dataclass
class Symmetric:
    """A C-contiguous buffer on NVSHMEM's symmetric heap: the same offset on every rank. Kernels and torch
    take it through `__cuda_array_interface__` (torch.as_tensor(buf, device='cuda'))."""

    ptr: int
    shape: tuple[int, ...]
    dtype: str

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * DTYPE_BYTES[self.dtype]

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": self.shape, "typestr": _TYPESTR[self.dtype], "data": (self.ptr, False), "version": 3,
                "strides": None}

    def free(self) -> None:
        free(self.ptr)


def symmetric(shape, dtype: str) -> Symmetric:
    """A zeroed buffer of `shape` and pipelink `dtype` ('f32', 'bf16', ...) on the symmetric heap (collective)."""
    if dtype not in _TYPESTR:
        raise ValueError(f"dtype {dtype!r}: one of {', '.join(_TYPESTR)}")
    shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    buf = Symmetric(0, shape, dtype)
    buf.ptr = malloc(buf.nbytes, f"a symmetric {dtype} buffer {list(shape)}")
    _cu.call("cuMemsetD8 (a new symmetric buffer)", _cu.driver().cuMemsetD8, buf.ptr, 0, max(buf.nbytes, 1))
    return buf


__all__ = ["NvshmemError", "Symmetric", "barrier", "barrier_on_stream", "device", "finalize", "free", "init",
           "init_from_torch", "initialized", "library", "malloc", "module_finalize", "module_init", "rank",
           "symmetric", "unique_id", "world"]
