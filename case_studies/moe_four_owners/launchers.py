"""The MoE layer several ways, each a `run(shape, x, weights, buffers)` on torch's current stream:
pipelink's fused kernel, the classic fused kernel, the classic four separate kernels, plain torch,
torch with `torch._grouped_mm`, and any of them captured once into a CUDA graph and replayed
(`CapturedLayer`)."""
from __future__ import annotations

import ctypes
import math

from layer import AGREED_GEOMETRY, Layout, ModelShape, expert_splits, kernel_args, router_slices

CLASSIC_THREADS = 128
# What the integrator computed at assembly time: the largest component's shared memory (the expert:
# 6 stages of (32 + 128) x 72 bf16, h 32 x 776 bf16, 32 tokens), and each separate kernel's own.
CLASSIC_FUSED_SMEM = 6 * 160 * 72 * 2 + 32 * 776 * 2 + 32 * 4
CLASSIC_SMEM = {"router": 4 * (32 + 128) * 72 * 2, "dispatch": 4 * 129 * 4, "expert": CLASSIC_FUSED_SMEM,
                "combine": 0}


def _splits(kernel, geometry: dict, shape: ModelShape, T: int) -> int:
    """The split expert's shares per tile for T tokens, over the CTAs `kernel` (the one that runs the split
    expert's tasks) keeps resident."""
    sms = kernel.num_sms()
    return expert_splits(shape, T, geometry["EXPERT_TILE_M"], sms, geometry.get("EXPERT_SHARE_MAX"),
                         kernel.resident_blocks() // sms)


def _prepared(cache: dict, args: dict, prepare):
    """Arguments are checked and packed once per set of arrays (Kernel.prepare); a repeated call costs the
    driver call. A prepared launch keeps its arrays alive: a few are kept, the oldest dropped first."""
    key = tuple(v.data_ptr() if hasattr(v, "data_ptr") else v for v in args.values())
    if key not in cache:
        if len(cache) >= 8:
            cache.pop(next(iter(cache)))
        cache[key] = prepare()
    return cache[key]


class PipelinkSeparate:
    """pipelink kernels of one layer, launched in order. As the fair unfused control: the same pipelink objects
    as a fused layer, each linked as a kernel of its own (`standalone`: its waits are met by the launch order)
    with programmatic dependent launch; each kernel gets its own block resources (shared memory, registers)
    instead of the joint ones. PipelinkLayer is the one-kernel case: the fused layer."""

    def __init__(self, kernels: list):
        self.kernels = kernels  # loaded pipelink Kernels in the layer's order: router -> dispatch -> ... -> combine
        self.geometry = {}
        for k in kernels:
            self.geometry.update(k.manifest.geometry)
        # the split or Hopper expert's kernel, if the layer has one: it sets the shares per tile
        self.expert = next((k for k in kernels if "splits" in [p.name for p in k.user_params]), None)
        self._prepared = {}

    @classmethod
    def from_links(cls, link_results) -> "PipelinkSeparate":
        return cls([r.kernel() for r in link_results])

    def splits(self, shape: ModelShape, T: int) -> int:
        return _splits(self.expert, self.geometry, shape, T) if self.expert is not None else 0

    def slices(self, shape: ModelShape, T: int) -> int:
        """The router's K slices: the same in the fused layer and its separate kernels (the SMs, not the
        resident blocks, which differ between them)."""
        g = self.geometry
        return router_slices(T, g["ROUTER_TOKENS"], shape.H // g["ROUTER_K_CHUNK"], self.kernels[0].num_sms())

    def layout(self, shape: ModelShape, T: int) -> Layout:
        return Layout(shape, T, self.geometry, self.splits(shape, T), self.slices(shape, T))

    def run(self, shape: ModelShape, x, weights: dict, buffers: dict) -> None:
        args = kernel_args(shape, x.shape[0], x, weights, buffers, self.slices(shape, x.shape[0]))
        if self.expert is not None:
            args["splits"] = self.splits(shape, x.shape[0])
        launches = _prepared(self._prepared, args, lambda: [
            k.prepare(**{p.name: args[p.name] for p in k.user_params}) for k in self.kernels])
        import torch
        stream = torch.cuda.current_stream()
        for launch in launches:
            launch.launch(stream)


class PipelinkLayer(PipelinkSeparate):
    """pipelink's fused layer: one kernel (the manifest's geometry with it)."""

    def __init__(self, kernel, geometry: dict):
        super().__init__([kernel])
        self.kernel, self.geometry = kernel, geometry

    @property
    def split(self) -> bool:  # a layer with the split or Hopper expert: it takes `splits` and `part`
        return self.expert is not None

    @classmethod
    def from_link(cls, link_result) -> "PipelinkLayer":
        return cls(link_result.kernel(), link_result.manifest.geometry)


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


class CapturedLayer:
    """`impl` captured once into a torch CUDA graph per problem (shape, T, output buffers), then replayed.

    The graph reads its own copies of the inputs, never the caller's arrays: x is copied in before
    every replay, the weights whenever a different set of weight tensors is passed (a model's graph
    reads its parameters in place, so the copy is not part of a replay). It writes the caller's
    buffers, as the other implementations do; the buffers are restored to what the caller passed
    (poisoned) after the capture's warm-up, so the first replay, not the warm-up, fills them.
    Capture: two warm-up calls on a side stream (prepared launches, loaded functions, library
    handles all exist before the capture), then one call on the capture stream."""

    KEEP = 4  # graphs kept (each holds its buffers and its memory pool)

    def __init__(self, impl):
        self.impl = impl
        self._weights = {}  # shape name -> (the caller's tensors last copied, our copies)
        self._graphs = {}   # (shape name, T, buffer addresses) -> (graph, x copy, buffers held)

    def layout(self, shape: ModelShape, T: int) -> Layout:
        return self.impl.layout(shape, T)

    def _static_weights(self, shape: ModelShape, weights: dict) -> dict:
        held = self._weights.get(shape.name)
        if held is None:
            copies = {k: v.clone() for k, v in weights.items()}
            self._weights[shape.name] = (dict(weights), copies)
            return copies
        source, copies = held
        if set(source) != set(weights) or any(source[k] is not weights[k] for k in weights):
            for k, v in weights.items():  # same shapes: the captured graphs stay valid
                copies[k].copy_(v)
            self._weights[shape.name] = (dict(weights), copies)  # held: an address is never reused
        return copies

    def run(self, shape: ModelShape, x, weights: dict, buffers: dict) -> None:
        w = self._static_weights(shape, weights)
        key = (shape.name, x.shape[0], tuple((n, b.data_ptr()) for n, b in sorted(buffers.items())))
        entry = self._graphs.get(key)
        if entry is None:
            entry = self._capture(shape, x, w, buffers)
            if len(self._graphs) >= self.KEEP:
                self._graphs.pop(next(iter(self._graphs)))
            self._graphs[key] = entry
        graph, x_in, _ = entry
        x_in.copy_(x)
        graph.replay()

    def _capture(self, shape: ModelShape, x, w: dict, buffers: dict):
        import torch
        x_in = x.clone()
        before = {n: b.clone() for n, b in buffers.items()}
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.impl.run(shape, x_in, w, buffers)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.impl.run(shape, x_in, w, buffers)
        for n, b in buffers.items():
            b.copy_(before[n])
        return graph, x_in, dict(buffers)


def grouped_mm_moe(shape: ModelShape, x, weights: dict):
    """The MoE layer with `torch._grouped_mm`, as a user writes it: router (fp32 logits, softmax,
    top-k, renormalized), tokens permuted expert by expert, one grouped GEMM each for gate, up and
    down with the experts' end offsets, SwiGLU, and the weighted sum of each token's TOPK rows.
    No host synchronization, so a CUDA graph can capture it. Returns (y bf16 [T, H], ids [T, TOPK]
    int64, routing weights fp32 [T, TOPK])."""
    import torch
    import torch.nn.functional as F
    T, K, E = x.shape[0], shape.TOPK, shape.E
    logits = x.float() @ weights["w_router"].float().t()  # the kernel's router accumulates in fp32 too
    probs = torch.softmax(logits, dim=1)
    w, ids = probs.topk(K, dim=1)
    w = w / w.sum(dim=1, keepdim=True)
    sorted_ids, order = ids.flatten().sort(stable=True)  # (token, k) pairs expert by expert
    offs = torch.searchsorted(sorted_ids, torch.arange(E, device=x.device), right=True).to(torch.int32)
    a = x.index_select(0, order // K)
    gate = torch._grouped_mm(a, weights["w_gate"].transpose(1, 2), offs=offs, out_dtype=torch.bfloat16)
    up = torch._grouped_mm(a, weights["w_up"].transpose(1, 2), offs=offs, out_dtype=torch.bfloat16)
    h = F.silu(gate) * up
    down = torch._grouped_mm(h, weights["w_down"].transpose(1, 2), offs=offs, out_dtype=torch.bfloat16)
    rows = down.index_select(0, order.argsort()).view(T, K, shape.H)  # back to (token, k) order
    y = (rows.float() * w.unsqueeze(2)).sum(dim=1).to(torch.bfloat16)
    return y, ids, w


def grouped_mm_unavailable(shapes) -> str | None:
    """Why the `_grouped_mm` path cannot run here (None: it can): torch lacks it, or it refuses the
    shapes' dtypes and strides (tried once per shape with two experts, one of them given no token)."""
    import torch
    if not hasattr(torch, "_grouped_mm"):
        return f"torch {torch.__version__} has no torch._grouped_mm"
    for s in shapes:
        probe = ModelShape(s.name, H=s.H, E=2, TOPK=1, I=s.I)
        g = torch.Generator(device="cuda").manual_seed(0)
        rand = lambda *d: torch.randn(*d, generator=g, device="cuda").to(torch.bfloat16)  # noqa: E731
        weights = {"w_router": torch.zeros(2, s.H, device="cuda", dtype=torch.bfloat16),
                   "w_gate": rand(2, s.I, s.H), "w_up": rand(2, s.I, s.H), "w_down": rand(2, s.H, s.I)}
        weights["w_router"][0] = 1.0  # positive tokens all go to expert 0: expert 1's group is empty
        try:
            y, _, _ = grouped_mm_moe(probe, rand(16, s.H).abs(), weights)
            torch.cuda.synchronize()
        except (RuntimeError, TypeError, NotImplementedError) as exc:
            return f"torch._grouped_mm refused the {s.name} shapes (H={s.H}, I={s.I}): " + str(exc).splitlines()[0]
        if tuple(y.shape) != (16, s.H):
            return f"torch._grouped_mm gave an output of shape {tuple(y.shape)} for the {s.name} probe"
    return None


class GroupedMmLayer:
    """torch with `torch._grouped_mm` (grouped_mm_moe): writes topk_ids, topk_w and y, so the routing is
    checked like the kernels' (the other buffers are the kernels' own and stay as they were)."""

    def layout(self, shape: ModelShape, T: int) -> Layout:
        return Layout(shape, T, AGREED_GEOMETRY)

    def run(self, shape: ModelShape, x, weights: dict, buffers: dict) -> None:
        y, ids, w = grouped_mm_moe(shape, x, weights)
        T = x.shape[0]
        buffers["y"].view(T, shape.H).copy_(y)
        buffers["topk_ids"].view(T, shape.TOPK).copy_(ids)
        buffers["topk_w"].view(T, shape.TOPK).copy_(w)
