"""Calls on a GPU: the decode team's rmsnorm, gemv_swiglu and gemv_residual called twice per layer over
NL layers of stacked weights (two MLP halves a layer, the residual stream ping-ponging between x and x1),
then the final norm and the greedy head, all in one persistent kernel; against torch in float64 that
rounds to bf16 where the kernel does. Fresh random inputs every run (the seed is in the failure
message), every output poisoned, both dispatches, each kernel launched twice. The `_ring` kernels run the down
projections as gemv_residual_ring: W through a shared-memory ring its prefetch entry fills by bulk copies, before a
task waits and (static dispatch) for the CTA's next task. `static_deal` deals each call's tasks on from where the
previous call's ended (pipeline `deal`)."""
import json
import os
import sys
from pathlib import Path

import pytest

CASE = Path(__file__).resolve().parent.parent / "case_studies" / "llama32_1b_decode"
sys.path.insert(0, str(CASE))
import decode_parts  # noqa: E402

pytestmark = pytest.mark.gpu
EPS = 1e-5
PARTS = tuple(p for p in decode_parts.PARTS + decode_parts.MORE_PARTS + decode_parts.RING_PARTS
              if p.name in ("rmsnorm", "gemv_swiglu", "gemv_residual", "lm_head", "argmax_merge", "gemv_residual_ring"))
KERNELS = ("static", "dynamic", "static_ring", "dynamic_ring", "static_deal")


def half(tag: str, src: str, dst: str, first: bool, down: str = "gemv_residual") -> list[dict]:
    """One MLP half of a layer: dst = src + W_down(silu(W_gate xn) * W_up xn), xn = rmsnorm(src)."""
    norm = {"name": f"norm_{tag}", "component": "rmsnorm", "per_layer": True, "stacked": ["weight"],
            "bind": {"x": src, "weight": f"norm_w_{tag}"}}
    if first:
        norm["after_previous_layer"] = ["down_b"]
    else:
        norm["after"] = ["down_a"]
    return [norm,
            {"name": f"gate_up_{tag}", "component": "gemv_swiglu", "per_layer": True, "stacked": ["w"],
             "bind": {"w": f"w_gu_{tag}", "x": "xn", "K": "H"}, "after": [f"norm_{tag}"]},
            {"name": f"down_{tag}", "component": down, "per_layer": True, "stacked": ["w"],
             "bind": {"w": f"w_down_{tag}", "x": "h", "r": src, "y": dst, "N": "H", "K": "I"},
             "after": [f"gate_up_{tag}"]}]


def pipeline(kind: str) -> dict:
    dispatch, _, rest = kind.partition("_")
    down = "gemv_residual_ring" if rest == "ring" else "gemv_residual"
    deal = {"deal": "continue"} if rest == "deal" else {}  # each call's tasks dealt on from the last one's
    return {"pipeline": 1, "name": f"mlp_stack_{kind}", "layers": "NL", "dispatch": dispatch, **deal,
            "calls": half("a", "x", "x1", True, down) + half("b", "x1", "x", False, down) + [
                {"name": "final_norm", "component": "rmsnorm", "bind": {"weight": "final_w"}, "after": ["down_b"]},
                {"name": "lm_head", "bind": {"w": "w_lm", "x": "xn", "part": "head_part", "K": "H"},
                 "after": ["final_norm"]},
                {"name": "argmax_merge", "bind": {"part": "head_part"}}]}


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    import pipelink
    tmp = tmp_path_factory.mktemp("calls")
    objects = decode_parts.build_all(tmp, PARTS)
    out = {}
    for kind in KERNELS:
        p = tmp / f"{kind}.json"
        p.write_text(json.dumps(pipeline(kind)))
        down = "gemv_residual_ring" if kind.endswith("_ring") else "gemv_residual"
        linked = pipelink.link([str(objects[n]) for n in ("rmsnorm", "gemv_swiglu", down, "lm_head", "argmax_merge")],
                               pipeline=str(p))
        assert linked.ok, [d.render() for d in linked.diagnostics]
        out[kind] = linked.kernel()
    yield out
    for k in out.values():
        k.unload()


def bf16(t):
    import torch
    return t.to(torch.bfloat16).double()


def reference(x, w, NL):
    """float64, rounded to bf16 where the kernel writes bf16."""
    import torch
    x = x.double()
    for layer in range(NL):
        for tag in ("a", "b"):
            xn = bf16(x * (x.square().mean(dim=1, keepdim=True) + EPS).rsqrt() * w[f"norm_w_{tag}"][layer].double())
            gu = xn @ w[f"w_gu_{tag}"][layer].double().T
            I = gu.shape[1] // 2
            g, u = gu[:, :I], gu[:, I:]
            h = bf16(g / (1 + torch.exp(-g)) * u)
            x = bf16(x + h @ w[f"w_down_{tag}"][layer].double().T)
    xn = bf16(x * (x.square().mean(dim=1, keepdim=True) + EPS).rsqrt() * w["final_w"].double())
    return x, xn @ w["w_lm"].double().T


@pytest.mark.parametrize("dispatch", KERNELS)
# NL = 0: no layer runs, the calls after the loop wait for nothing (their wait on the last layer had read before the
# first layer's counters and spun forever)
@pytest.mark.parametrize("B,NL,H,I,V", [(1, 3, 1024, 2048, 4099), (3, 2, 2056, 1000, 1001), (8, 4, 512, 1536, 8192),
                                        (2, 0, 512, 1536, 1000)])
def test_layers_of_calls_match_torch(kernels, dispatch, B, NL, H, I, V):
    import torch
    seed = int.from_bytes(os.urandom(4), "little")
    g = torch.Generator(device="cuda").manual_seed(seed)
    rnd = lambda *s, scale=1.0: (torch.randn(*s, generator=g, device="cuda") * scale).to(torch.bfloat16)  # noqa: E731
    w = {}
    layers = max(NL, 1)  # a layer's weights even for NL = 0: a tensor may hold more than the launch reads
    for tag in ("a", "b"):
        w[f"norm_w_{tag}"] = (1 + 0.1 * torch.randn(layers, H, generator=g, device="cuda")).to(torch.bfloat16)
        w[f"w_gu_{tag}"] = rnd(layers, 2 * I, H, scale=H ** -0.5)
        w[f"w_down_{tag}"] = rnd(layers, H, I, scale=0.5 * I ** -0.5)
    w["final_w"] = (1 + 0.1 * torch.randn(H, generator=g, device="cuda")).to(torch.bfloat16)
    w["w_lm"] = rnd(V, H, scale=H ** -0.5)
    x0 = rnd(B, H)
    ref_x, ref_logits = reference(x0, w, NL)
    nan = lambda *s: torch.full(s, float("nan"), dtype=torch.bfloat16, device="cuda")  # noqa: E731
    what = f"{dispatch} B={B} NL={NL} H={H} I={I} V={V} seed={seed}"
    for launch in range(2):  # the second launch finds the counters as the first left them
        x, x1, xn, h, logits = x0.clone(), nan(B, H), nan(B, H), nan(B, I), nan(B, V)
        token = torch.full((B,), -1, dtype=torch.int32, device="cuda")
        part = torch.full(decode_parts.argmax_workspace_shape(B, V), -1, dtype=torch.int64, device="cuda")
        # a ring kernel's first launch on 16 CTAs: many tasks a CTA, the next one's W copied while this one runs
        grid = 16 if dispatch.endswith("_ring") and launch == 0 else None
        kernels[dispatch].launch(x=x, x1=x1, xn=xn, h=h, logits=logits, token=token, head_part=part.view(torch.uint64),
                                 grid=grid,
                                 w_lm=w["w_lm"], final_w=w["final_w"], eps=EPS, B=B, H=H, I=I, V=V, NL=NL,
                                 **{k: v for k, v in w.items() if k not in ("w_lm", "final_w")})
        torch.cuda.synchronize()
        err = (x.double() - ref_x).abs()
        assert not torch.isnan(x).any() and err.max() < 0.05 + 0.02 * ref_x.abs().max(), \
            f"{what} launch {launch}: residual stream max error {err.max():.4g}"
        lerr = (logits.double() - ref_logits).abs()
        assert not torch.isnan(logits).any() and lerr.max() < 0.05 + 0.02 * ref_logits.abs().max(), \
            f"{what} launch {launch}: logits max error {lerr.max():.4g}"
        lf = logits.float()
        assert (token == torch.argmax(lf, dim=1).int()).all(), f"{what}: tokens {token.tolist()} vs the logits' argmax"
