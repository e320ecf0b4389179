"""Problems for the shipped pipelines: fresh random inputs, poisoned outputs, and a float64
reference, so a linked kernel can be run and judged on a GPU (torch required there)."""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Problem:
    args: dict          # kernel arguments by parameter name
    outputs: list[str]  # which args are outputs
    expected: dict      # output name -> float64 torch tensor
    tolerance: float    # max allowed |error| / (1 + |expected|)


def _silu(x):
    return x / (1.0 + (-x).exp())


def _tile_row_sums(values, tile_n: int, device: str):
    """The float64 sums of each row over each tile of `tile_n` columns (the ragged last tile padded
    with zeros, as the kernels do), and the NaN-poisoned output they go to."""
    import torch
    M, N = values.shape
    tiles_n = math.ceil(N / tile_n)
    padded = torch.zeros(M, tiles_n * tile_n, dtype=torch.float64)
    padded[:, :N] = values
    out = torch.full((M, tiles_n), float("nan"), dtype=torch.float32, device=device)
    return padded.view(M, tiles_n, tile_n).sum(-1), out


def rowsum_problem(M: int, N: int, seed: int, tile_n: int = 128, device: str = "cuda") -> Problem:
    import torch
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(M, N, generator=g, dtype=torch.float32)
    scale = float(torch.empty(1).uniform_(0.25, 2.0, generator=g))
    expected, out = _tile_row_sums(_silu(x.double()) * scale, tile_n, device)
    return Problem({"x": x.to(device), "out": out, "M": M, "N": N, "scale": scale}, ["out"],
                   {"out": expected}, 1e-4 * math.sqrt(tile_n))


def gemv_problem(M: int, N: int, seed: int, tile_n: int = 256, device: str = "cuda") -> Problem:
    import torch
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(M, N, generator=g, dtype=torch.float32)
    w = torch.randn(N, generator=g, dtype=torch.float32)
    expected, out = _tile_row_sums(x.double() * w.double(), tile_n, device)
    return Problem({"x": x.to(device), "w": w.to(device), "out": out, "M": M, "N": N}, ["out"],
                   {"out": expected}, 1e-4 * math.sqrt(tile_n))


def splitk_problem(M: int, K: int, seed: int, kchunk: int = 1024, device: str = "cuda") -> Problem:
    import torch
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(M, K, generator=g, dtype=torch.float32)
    w = torch.randn(K, generator=g, dtype=torch.float32)
    chunks = math.ceil(K / kchunk)
    partial = torch.full((chunks, M), float("nan"), dtype=torch.float32, device=device)
    y = torch.full((M,), float("nan"), dtype=torch.float32, device=device)
    return Problem({"x": x.to(device), "w": w.to(device), "partial": partial, "y": y, "M": M, "K": K}, ["y"],
                   {"y": x.double() @ w.double()}, 1e-4 * math.sqrt(K))


def chain_problem(M: int, N: int, seed: int, device: str = "cuda") -> Problem:
    import torch
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(M, N, generator=g, dtype=torch.float32)
    alpha, beta = (float(v) for v in torch.empty(2).uniform_(-2.0, 2.0, generator=g))
    h = torch.full((M, N), float("nan"), dtype=torch.float32, device=device)
    out = torch.full((M, N), float("nan"), dtype=torch.float32, device=device)
    expected = alpha * _silu(x.double()) + beta * x.double()
    return Problem({"x": x.to(device), "h": h, "out": out, "M": M, "N": N, "alpha": alpha, "beta": beta}, ["out"],
                   {"out": expected}, 1e-5)


def moe_problem(T: int, H: int, seed: int, E: int = 16, TOPK: int = 4, skew: float = 0.0,
                device: str = "cuda") -> Problem:
    """Random routing of T tokens to TOPK of E experts; skew > 0 sends most tokens to few experts."""
    import torch
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(T, H, generator=g, dtype=torch.float32)
    logits = torch.rand(T, E, generator=g) - skew * torch.arange(E, dtype=torch.float32) / E
    topk = logits.topk(TOPK, dim=1).indices.to(torch.int32)
    gate = torch.rand(T, TOPK, generator=g, dtype=torch.float32)
    scale = torch.rand(E, generator=g, dtype=torch.float32) + 0.5
    flat = topk.flatten().long()
    order = torch.argsort(flat, stable=True)
    slot = torch.empty(T * TOPK, dtype=torch.int32)
    slot[order] = torch.arange(T * TOPK, dtype=torch.int32)
    counts = torch.bincount(flat, minlength=E).to(torch.int32)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), counts.long().cumsum(0)]).to(torch.int32)
    expected = (gate.double().unsqueeze(-1) * scale.double()[topk.long()].unsqueeze(-1)
                * _silu(x.double()).unsqueeze(1)).sum(1)
    nan = lambda *shape: torch.full(shape, float("nan"), dtype=torch.float32, device=device)  # noqa: E731
    args = {"x": x, "topk": topk, "slot": slot.view(T, TOPK), "gate": gate, "scale": scale, "counts": counts,
            "offsets": offsets}
    args = {k: v.to(device).contiguous() for k, v in args.items()}
    args.update({"buf": nan(T * TOPK, H), "ybuf": nan(T * TOPK, H), "y": nan(T, H), "T": T, "H": H, "E": E,
                 "TOPK": TOPK})
    return Problem(args, ["y"], {"y": expected}, 1e-5)


def gemm_problem(epilogue: str, M: int, N: int, K: int, seed: int, device: str = "cuda") -> Problem:
    """A bf16 GEMM, D = x W^T accumulated in fp32, with one of the Qwen3-32B MLP case study's
    epilogues: "plain" (d = D in bf16), "swiglu" (h = silu(D[:, 2j]) * D[:, 2j+1], gate and up rows
    interleaved) or "residual" (y = D + bias + residual). The reference is an fp32 matmul of the same
    bf16 inputs on the device (in float64 on the host this size takes minutes), kept in float64."""
    import torch
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(M, K, generator=g).bfloat16().to(device)
    w = (torch.randn(N, K, generator=g) / K ** 0.5).bfloat16().to(device)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        acc = x.float() @ w.float().T
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    nan = lambda *shape: torch.full(shape, float("nan"), dtype=torch.bfloat16, device=device)  # noqa: E731
    args = {"a": x, "b": w, "M": M, "N": N, "K": K}
    if epilogue == "plain":
        out, want = "d", acc
        args["d"] = nan(M, N)
    elif epilogue == "swiglu":
        out, want = "h", torch.nn.functional.silu(acc[:, 0::2]) * acc[:, 1::2]
        args["h"] = nan(M, N // 2)
    elif epilogue == "residual":
        bias = (torch.randn(N, generator=g) * 0.1).bfloat16().to(device)
        residual = torch.randn(M, N, generator=g).bfloat16().to(device)
        out, want = "y", acc + bias.float() + residual.float()
        args.update(y=nan(M, N), bias=bias, residual=residual)
    else:
        raise ValueError(f"no epilogue named {epilogue!r}")
    # bf16 output: 2^-8 of the value, plus the accumulation order
    return Problem(args, [out], {out: want.double().cpu()}, 1e-2)


def softmax_problem(M: int, N: int, seed: int, device: str = "cuda") -> Problem:
    """Row softmax of x after 2-d tiles went through shared memory into y (tiled_softmax)."""
    import torch
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(M, N, generator=g, dtype=torch.float32) * 4
    y = torch.full((M, N), float("nan"), dtype=torch.float32, device=device)
    return Problem({"x": x.to(device), "y": y, "M": M, "N": N}, ["y"], {"y": torch.softmax(x.double(), dim=1)}, 1e-5)


def prefix_sum_problem(M: int, N: int, seed: int, tile: int = 1024, device: str = "cuda") -> Problem:
    """Inclusive prefix sum of M * N small non-negative i32 values (prefix_sum): exact, and -1
    (never a prefix of non-negative values) marks what the kernel did not write."""
    import torch
    g = torch.Generator(device="cpu").manual_seed(seed)
    n = M * N
    x = torch.randint(0, 16, (n,), generator=g, dtype=torch.int32)
    y = torch.full((n,), -1, dtype=torch.int32, device=device)
    carry = torch.full((math.ceil(n / tile),), -1, dtype=torch.int32, device=device)
    return Problem({"x": x.to(device), "y": y, "carry": carry, "N": n}, ["y"],
                   {"y": x.long().cumsum(0).double()}, 0.0)


def stencil_problem(M: int, N: int, seed: int, device: str = "cuda") -> Problem:
    """y = (h[k - 1] + h[k] + h[k + 1]) / 3, h = silu(x), edges clamped, over M * N values (halo_stencil)."""
    import torch
    g = torch.Generator(device="cpu").manual_seed(seed)
    n = M * N
    x = torch.randn(n, generator=g, dtype=torch.float32)
    h = _silu(x.double())
    padded = torch.cat([h[:1], h, h[-1:]])
    nan = lambda: torch.full((n,), float("nan"), dtype=torch.float32, device=device)  # noqa: E731
    return Problem({"x": x.to(device), "h": nan(), "y": nan(), "N": n}, ["y"],
                   {"y": (padded[:-2] + padded[1:-1] + padded[2:]) / 3}, 1e-5)


PROBLEMS = {"rowsum": rowsum_problem, "ring_gemv": gemv_problem, "splitk_gemv": splitk_problem,
            "tile_chain": chain_problem, "moe_dispatch": moe_problem, "tiled_softmax": softmax_problem,
            "prefix_sum": prefix_sum_problem, "halo_stencil": stencil_problem}


def max_error(problem: Problem) -> float:
    """Largest relative error over the outputs; NaN (an unwritten element) counts as infinite."""
    worst = 0.0
    for name in problem.outputs:
        got = problem.args[name].double().cpu()
        want = problem.expected[name]
        if got.isnan().any():
            return math.inf
        err = ((got - want).abs() / (1.0 + want.abs())).max().item() if want.numel() else 0.0
        worst = max(worst, err)
    return worst


def run_and_judge(kernel, pipeline: str, M: int, N: int, seed: int, grid: int | None = None) -> tuple[float, Problem]:
    import torch
    problem = PROBLEMS[pipeline](M, N, seed)
    kernel.launch(grid=grid, **problem.args)
    torch.cuda.synchronize()
    return max_error(problem), problem
