"""The MoE layer the four teams' components make up: model shapes, buffers, inputs and the torch
reference (GPU, torch needed for everything but the shapes and the layout)."""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelShape:
    name: str
    H: int      # hidden size
    E: int      # experts
    TOPK: int   # experts per token
    I: int      # expert intermediate size


QWEN3_30B_A3B = ModelShape("qwen3-30b-a3b", H=2048, E=128, TOPK=8, I=768)
SMALL = ModelShape("small", H=512, E=16, TOPK=2, I=256)
SHAPES = {s.name: s for s in (QWEN3_30B_A3B, SMALL)}
TOKEN_COUNTS = (16, 128, 1024, 4096)

# The geometry the integrator hard-coded into the classic build: the teams' values at assembly time.
AGREED_GEOMETRY = {"ROUTER_TOKENS": 32, "DISPATCH_TOKENS": 64, "EXPERT_TILE_M": 32, "COMBINE_TILE_N": 2048}


def expected_tiles(shape: ModelShape, T: int, tile_m: int) -> float:
    """The expert tiles T tokens use when routing is uniform: each expert's rows (binomial, T tokens each
    picking it with probability TOPK / E) padded to whole tiles, summed over the E experts."""
    p = shape.TOPK / shape.E
    if T <= 0 or p <= 0:
        return 0.0
    if p >= 1:
        return shape.E * math.ceil(T / tile_m)
    mean, sd = T * p, math.sqrt(T * p * (1 - p))
    lo, hi = max(0, int(mean - 12 * sd) - 2), min(T, int(mean + 12 * sd) + 2)  # the mass beyond is < 1e-30
    log_p, log_q = math.log(p), math.log1p(-p)
    total = 0.0
    for k in range(lo, hi + 1):
        pmf = math.exp(math.lgamma(T + 1) - math.lgamma(k + 1) - math.lgamma(T - k + 1) + k * log_p + (T - k) * log_q)
        total += pmf * math.ceil(k / tile_m)
    return shape.E * total


# What starting a task costs besides its blocks (its tokens, the x rows, filling the ring), in 64-column
# blocks streamed: an estimate (a block is ~25 us of one CTA's stream at the qwen shape; a fill ~2 us).
TASK_OVERHEAD_BLOCKS = 0.1


def expert_splits(shape: ModelShape, T: int, tile_m: int = 32, sms: int = 132, share_max: int | None = None,
                  blocks_per_sm: int = 1) -> int:
    """Tasks per expert tile for the split and Hopper experts: the count whose waves of tasks over the GPU's
    `sms * blocks_per_sm` resident CTAs end soonest, in units of one 64-column block of I streamed (a
    task's length: its share of the blocks, and TASK_OVERHEAD_BLOCKS), plus what merging costs: each
    share's fp32 copy of every routed row written and read again (1/48 of a block's weight bytes a row),
    spread over the CTAs. One share writes its bf16 rows itself: no merge. Ties go to fewer shares. At least
    as many shares as keep one within `share_max` columns (the expert's EXPERT_SHARE_MAX: what its h buffer
    holds), at most one block a share. The tiles: `expected_tiles`."""
    pairs = T * shape.TOPK
    tiles = max(1, round(expected_tiles(shape, T, tile_m)))
    blocks = shape.I // 64
    least = math.ceil(blocks / (share_max // 64)) if share_max else 1
    slots = max(1, sms * blocks_per_sm)

    def finish(splits: int) -> float:  # waves x a task's length, and the merge's share
        merge = pairs * splits / 48 / slots if splits > 1 else 0.0
        return math.ceil(tiles * splits / slots) * (math.ceil(blocks / splits) + TASK_OVERHEAD_BLOCKS) + merge
    return min(range(max(1, least), blocks + 1), key=lambda n: (finish(n), n))


# The router's picking task sums this many partial logits at most; past it a slice's fill dominates.
ROUTER_SLICES_MAX = 8


def router_slices(T: int, router_tokens: int, k_chunks: int, sms: int = 132) -> int:
    """K slices per router token block (its `score_slices`): enough router tasks to spread the reads of the
    router weight (every block reads all of it) over the `sms` CTAs, at most ROUTER_SLICES_MAX and one K
    chunk a slice, and all of them in one wave: a block's S slices and its picking task, S + 1 tasks a block
    (4 slices at T=1024 made 160 tasks over 132 SMs, and the router's last task ended at 45.6 us where the
    unsliced router's did at 39.4). 1 (a block's one task scores and picks, no partials) where fewer than two
    slices a block fit."""
    blocks = math.ceil(T / router_tokens)
    slices = min(ROUTER_SLICES_MAX, k_chunks, sms // blocks - 1)
    return slices if slices >= 2 else 1


@dataclass(frozen=True)
class Layout:
    """Element counts of every buffer of one launch, from the geometry the kernel was built with;
    `splits` > 0 for the split expert (its fp32 shares, `part`); `slices` the router's K slices (its
    fp32 partial logits, `score_parts`)."""
    shape: ModelShape
    T: int
    geometry: dict
    splits: int = 0
    slices: int = 1

    @property
    def tiles(self) -> int:  # expert tiles: every expert's segment padded to whole tiles
        m = self.geometry["EXPERT_TILE_M"]
        return math.ceil(self.T * self.shape.TOPK / m) + self.shape.E

    def sizes(self) -> dict[str, int]:
        s, T, g = self.shape, self.T, self.geometry
        m, dt = g["EXPERT_TILE_M"], g["DISPATCH_TOKENS"]
        return {"topk_ids": T * s.TOPK, "topk_w": T * s.TOPK, "slot": T * s.TOPK,
                "pair_tile": math.ceil(T / dt) * dt * s.TOPK, "row_token": self.tiles * m,
                "tile_expert": self.tiles, "tile_rows": self.tiles, "ys": self.tiles * m * s.H, "y": T * s.H,
                "score_parts": self.slices * T * s.E,
                **({"part": self.splits * self.tiles * m * s.H} if self.splits else {})}


def make_weights(shape: ModelShape, seed: int) -> dict:
    """Fresh random bf16 weights scaled like a trained layer's (unit-variance logits and outputs)."""
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    s = shape

    def randn(*dims, scale):
        return (torch.randn(*dims, generator=g, device="cuda", dtype=torch.float32) * scale).to(torch.bfloat16)

    return {"w_router": randn(s.E, s.H, scale=s.H ** -0.5), "w_gate": randn(s.E, s.I, s.H, scale=s.H ** -0.5),
            "w_up": randn(s.E, s.I, s.H, scale=s.H ** -0.5), "w_down": randn(s.E, s.H, s.I, scale=s.I ** -0.5)}


def make_tokens(shape: ModelShape, T: int, seed: int):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(T, shape.H, generator=g, device="cuda", dtype=torch.float32).to(torch.bfloat16)


def poisoned_buffers(layout: Layout) -> dict:
    """Every buffer the kernel writes, poisoned: NaN for values, -1 for indices (unwritten = wrong)."""
    import torch
    out = {}
    for name, n in layout.sizes().items():
        if name in ("ys", "y"):
            out[name] = torch.empty((n,), dtype=torch.bfloat16, device="cuda")
        elif name in ("topk_w", "part", "score_parts"):
            out[name] = torch.empty((n,), dtype=torch.float32, device="cuda")
        else:
            out[name] = torch.empty((n,), dtype=torch.int32, device="cuda")
    return poison(out)


def poison(buffers: dict) -> dict:
    """Poison the buffers in place (NaN for values, -1 for indices) and return them."""
    for b in buffers.values():
        b.fill_(float("nan") if b.is_floating_point() else -1)
    return buffers


def kernel_args(shape: ModelShape, T: int, x, weights: dict, buffers: dict, score_slices: int = 1) -> dict:
    return dict(x=x, **weights, **buffers, T=T, H=shape.H, E=shape.E, TOPK=shape.TOPK, I=shape.I,
                score_slices=score_slices)


@dataclass
class Verdict:
    routing_ok: bool
    routing_detail: str
    max_err: float           # max |y - ref| / rms(ref), over the tokens
    unwritten: int           # output elements still NaN
    tolerance: float

    @property
    def ok(self) -> bool:
        return self.routing_ok and self.unwritten == 0 and self.max_err <= self.tolerance


TOLERANCE = 0.05  # max |error| / rms(ref): bf16 inputs, h and outputs rounded to bf16 (measured ~0.01)
TIE = 1e-3        # routing logits closer than this may pick either expert


def reference_logits(shape: ModelShape, x, weights):
    return x.float() @ weights["w_router"].float().t()


def check_routing(shape: ModelShape, x, weights, topk_ids, topk_w) -> tuple[bool, str, object]:
    """The kernel's choice must be a top-k of the fp32 logits (up to ties within TIE) and its weights
    the renormalized softmax of those logits. Returns (ok, detail, the kernel's ids as [T, TOPK])."""
    import torch
    T, K = x.shape[0], shape.TOPK
    ids = topk_ids.view(T, K).long()
    if bool(((ids < 0) | (ids >= shape.E)).any()):
        return False, "expert ids out of range (unwritten or corrupt)", None
    if bool((ids.sort(dim=1).values[:, 1:] == ids.sort(dim=1).values[:, :-1]).any()):
        return False, "an expert chosen twice for one token", None
    logits = reference_logits(shape, x, weights)
    chosen = logits.gather(1, ids)
    kth = logits.topk(K, dim=1).values[:, -1]
    if bool((chosen.min(dim=1).values < kth - TIE).any()):
        bad = int((chosen.min(dim=1).values < kth - TIE).sum())
        return False, f"{bad} tokens routed to an expert outside their top-{K}", None
    want = torch.softmax(chosen, dim=1)
    got = topk_w.view(T, K)
    werr = float((got - want).abs().max()) if got.isfinite().all() else float("inf")
    if werr > 1e-3:
        return False, f"routing weights off by {werr:.2e}", None
    return True, f"top-{K} ok, weights within {werr:.1e}", ids


def reference_output(shape: ModelShape, x, weights, ids):
    """fp32 reference of the expert MLPs and the combine, for the routing the kernel chose."""
    import torch
    T = x.shape[0]
    logits = reference_logits(shape, x, weights)
    w = torch.softmax(logits.gather(1, ids), dim=1)
    xf = x.float()
    y = torch.zeros(T, shape.H, dtype=torch.float32, device=x.device)
    for e in ids.unique().tolist():
        tok, k = (ids == e).nonzero(as_tuple=True)
        a = xf[tok]
        h = torch.nn.functional.silu(a @ weights["w_gate"][e].float().t()) * (a @ weights["w_up"][e].float().t())
        y.index_add_(0, tok, (h @ weights["w_down"][e].float().t()) * w[tok, k].unsqueeze(1))
    return y


def judge(shape: ModelShape, x, weights, buffers) -> Verdict:
    import torch
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        T = x.shape[0]
        y = buffers["y"].view(T, shape.H).float()
        unwritten = int(y.isnan().sum())
        ok, detail, ids = check_routing(shape, x, weights, buffers["topk_ids"], buffers["topk_w"])
        if not ok:
            return Verdict(False, detail, float("inf"), unwritten, TOLERANCE)
        ref = reference_output(shape, x, weights, ids)
        rms = float(ref.pow(2).mean().sqrt())
        diff = (y - ref).abs()
        err = float(diff.nan_to_num(nan=0.0).max()) / rms if rms > 0 else float("inf")
        return Verdict(True, detail, err, unwritten, TOLERANCE)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


def torch_moe(shape: ModelShape, x, weights):
    """A plain torch MoE layer in bf16, the way a model file writes it (Qwen3-MoE style): router,
    softmax, top-k, renormalize, then a loop over the experts that received tokens."""
    import torch
    K = shape.TOPK
    logits = x @ weights["w_router"].t()
    probs = torch.softmax(logits, dim=1, dtype=torch.float32)
    w, ids = probs.topk(K, dim=1)
    w = (w / w.sum(dim=1, keepdim=True)).to(x.dtype)
    y = torch.zeros_like(x)
    mask = torch.nn.functional.one_hot(ids, shape.E).permute(2, 1, 0)  # [E, K, T]
    for e in (mask.sum(dim=(1, 2)) > 0).nonzero().flatten().tolist():
        k, tok = torch.where(mask[e])
        a = x[tok]
        h = torch.nn.functional.silu(a @ weights["w_gate"][e].t()) * (a @ weights["w_up"][e].t())
        y.index_add_(0, tok, (h @ weights["w_down"][e].t()) * w[tok, k, None])
    return y
