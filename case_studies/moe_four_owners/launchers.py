"""The MoE layer four ways, each a callable `run(x, weights, buffers)` on the current stream:
pipelink's fused kernel, the classic fused kernel, the classic four separate kernels, plain torch."""
from __future__ import annotations

import ctypes
import math

from layer import AGREED_GEOMETRY, Layout, ModelShape, kernel_args

CLASSIC_THREADS = 128
# What the integrator computed at assembly time: the largest component's shared memory (the expert:
# 3 stages of (32 + 128) x 72 bf16, h 32 x 776 bf16, 32 tokens), and each separate kernel's own.
CLASSIC_FUSED_SMEM = 3 * 160 * 72 * 2 + 32 * 776 * 2 + 32 * 4
CLASSIC_SMEM = {"router": 32 * 132 * 4 + 32 * 136 * 2, "dispatch": 4 * 129 * 4, "expert": CLASSIC_FUSED_SMEM,
                "combine": 0}


class PipelinkLayer:
    def __init__(self, kernel, geometry: dict):
        self.kernel, self.geometry = kernel, geometry  # a loaded pipelink Kernel, the manifest's geometry
        self._prepared = {}

    @classmethod
    def from_link(cls, link_result) -> "PipelinkLayer":
        return cls(link_result.kernel(), link_result.manifest.geometry)

    def layout(self, shape: ModelShape, T: int) -> Layout:
        return Layout(shape, T, self.geometry)

    def run(self, shape: ModelShape, x, weights: dict, buffers: dict) -> None:
        # Arguments are checked and packed once per set of arrays (Kernel.prepare); a repeated call
        # costs the driver call (and the refill of the launcher's own arguments).
        args = kernel_args(shape, x.shape[0], x, weights, buffers)
        key = tuple(v.data_ptr() if hasattr(v, "data_ptr") else v for v in args.values())
        prepared = self._prepared.get(key)
        if prepared is None:
            if len(self._prepared) >= 8:  # a prepared launch keeps its arrays alive: keep few
                self._prepared.pop(next(iter(self._prepared)))
            prepared = self._prepared[key] = self.kernel.prepare(**args)
        prepared.launch()


class _MoeArgs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in ("x", "w_router", "w_gate", "w_up", "w_down", "topk_ids", "pair_tile",
                                               "slot", "row_token", "tile_expert", "tile_rows", "topk_w", "ys", "y")]
    _fields_ += [(n, ctypes.c_int) for n in ("T", "H", "I", "E", "TOPK")]


class _ClassicModule:
    """A cubin linked without contracts, launched through the driver (cuda-bindings)."""

    def __init__(self, cubin: bytes):
        import torch
        from cuda.bindings import driver as drv
        self.drv = drv
        torch.cuda.init()
        _check(drv.cuInit(0))
        dev = _check(drv.cuDeviceGet(torch.cuda.current_device()))
        _check(drv.cuCtxSetCurrent(_check(drv.cuDevicePrimaryCtxRetain(dev))))
        self.module = _check(drv.cuModuleLoadData(cubin))
        self.sms = torch.cuda.get_device_properties(0).multi_processor_count
        self.functions = {}

    def function(self, name: str, smem: int):
        if name not in self.functions:
            f = _check(self.drv.cuModuleGetFunction(self.module, name.encode()))
            _check(self.drv.cuFuncSetAttribute(
                f, self.drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, max(smem, 0)))
            self.functions[name] = f
        return self.functions[name]

    def launch(self, name: str, grid, smem: int, *args) -> None:
        import torch
        f = self.function(name, smem)
        slots = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        grid = tuple(grid) + (1,) * (3 - len(grid))
        _check(self.drv.cuLaunchKernel(f, *grid, CLASSIC_THREADS, 1, 1, smem,
                                       self.drv.CUstream(torch.cuda.current_stream().cuda_stream),
                                       ctypes.addressof(slots), 0))


def _check(result):
    err, *rest = result
    from cuda.bindings import driver as drv
    if err != drv.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"CUDA driver error {err.name}")
    return rest[0] if len(rest) == 1 else (rest or None)


def _args(shape: ModelShape, x, weights: dict, b: dict) -> _MoeArgs:
    ptr = lambda t: ctypes.c_void_p(t.data_ptr())  # noqa: E731
    return _MoeArgs(ptr(x), ptr(weights["w_router"]), ptr(weights["w_gate"]), ptr(weights["w_up"]),
                    ptr(weights["w_down"]), ptr(b["topk_ids"]), ptr(b["pair_tile"]), ptr(b["slot"]),
                    ptr(b["row_token"]), ptr(b["tile_expert"]), ptr(b["tile_rows"]), ptr(b["topk_w"]), ptr(b["ys"]),
                    ptr(b["y"]), x.shape[0], shape.H, shape.I, shape.E, shape.TOPK)


class ClassicFused:
    """The integrator's persistent kernel: counters zeroed before each launch, one CTA per SM."""

    def __init__(self, cubin: bytes):
        self.module = _ClassicModule(cubin)
        self.counters = None

    def layout(self, shape: ModelShape, T: int) -> Layout:
        return Layout(shape, T, AGREED_GEOMETRY)

    def run(self, shape: ModelShape, x, weights: dict, buffers: dict) -> None:
        import torch
        g, T = AGREED_GEOMETRY, x.shape[0]
        tiles = self.layout(shape, T).tiles
        words = 2 + math.ceil(T / g["DISPATCH_TOKENS"]) + 2 * tiles + 1
        if self.counters is None or self.counters.numel() < words:
            self.counters = torch.zeros(words, dtype=torch.int32, device="cuda")
        self.counters.zero_()
        self.module.launch("moe_classic_fused", (self.module.sms,), CLASSIC_FUSED_SMEM, _args(shape, x, weights, buffers),
                           ctypes.c_void_p(self.counters.data_ptr()))


class ClassicSeparate:
    """The four components as four kernels in stream order, one task per block."""

    def __init__(self, cubin: bytes):
        self.module = _ClassicModule(cubin)

    def layout(self, shape: ModelShape, T: int) -> Layout:
        return Layout(shape, T, AGREED_GEOMETRY)

    def run(self, shape: ModelShape, x, weights: dict, buffers: dict) -> None:
        g, T = AGREED_GEOMETRY, x.shape[0]
        a = _args(shape, x, weights, buffers)
        m = self.module
        m.launch("moe_classic_router", (math.ceil(T / g["ROUTER_TOKENS"]),), CLASSIC_SMEM["router"], a)
        m.launch("moe_classic_dispatch", (math.ceil(T / g["DISPATCH_TOKENS"]),), CLASSIC_SMEM["dispatch"], a)
        m.launch("moe_classic_expert", (self.layout(shape, T).tiles,), CLASSIC_SMEM["expert"], a)
        m.launch("moe_classic_combine", (T, math.ceil(shape.H / g["COMBINE_TILE_N"])), CLASSIC_SMEM["combine"], a)


class TorchLayer:
    """Plain torch (bf16, cuBLAS per expert): no buffers of ours, output copied into y."""

    def layout(self, shape: ModelShape, T: int) -> Layout:
        return Layout(shape, T, AGREED_GEOMETRY)

    def run(self, shape: ModelShape, x, weights: dict, buffers: dict) -> None:
        from layer import torch_moe
        buffers["y"].view(x.shape[0], shape.H).copy_(torch_moe(shape, x, weights))
