"""The Llama-3.2-1B decode parts (case_studies/llama32_1b_decode) on a GPU against torch in float64: rmsnorm,
gemv_bf16 and gemv_residual each linked alone, and rmsnorm -> gemv_normed as one persistent kernel.

Fresh random inputs every run (the seed is in the failure message), outputs poisoned with NaN so an
unwritten element fails, batches 1, 3 and 8, shapes with ragged edges (N not a multiple of the 8 rows of a
task, K not a multiple of the 2048-column chunk), repeated launches of the persistent kernels."""
import os
import sys
from pathlib import Path

import pytest

CASE = Path(__file__).resolve().parent.parent / "case_studies" / "llama32_1b_decode"
sys.path.insert(0, str(CASE))

import decode_parts  # noqa: E402

pytestmark = pytest.mark.gpu

BATCHES = [1, 3, 8]
# (N, K): tiny, ragged N and K, several K chunks, and the model's projections (q/k/v, gate, down).
SHAPES = [(1, 8), (13, 40), (1000, 2056), (2048, 2048), (decode_parts.QKV, decode_parts.HIDDEN),
          (decode_parts.INTERMEDIATE, decode_parts.HIDDEN), (decode_parts.HIDDEN, decode_parts.INTERMEDIATE),
          (77, 4104)]
WIDTHS = [8, 40, 2048, 2056, 8192]
EPS = 1e-5
# bf16 outputs: a relative half-ulp of 2^-9 from the one rounding, plus fp32 accumulation over K.
RTOL, ATOL = 1e-2, 1e-2


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    objects = decode_parts.build_all(tmp_path_factory.mktemp("decode"))
    out = {}
    for name in decode_parts.ALONE:
        linked = decode_parts.link_alone(objects[name])
        assert linked.ok, [d.render() for d in linked.diagnostics]
        out[name] = linked.kernel()
    linked = decode_parts.link_norm_gemv(objects)
    assert linked.ok, [d.render() for d in linked.diagnostics]
    out["norm_gemv"] = linked.kernel()
    yield out
    for k in out.values():
        k.unload()


def _inputs(seed, B, N, K):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(B, K, generator=g, device="cuda").to(torch.bfloat16)
    w = (torch.randn(N, K, generator=g, device="cuda") / K ** 0.5).to(torch.bfloat16)
    r = torch.randn(B, N, generator=g, device="cuda").to(torch.bfloat16)
    return x, w, r


def _poisoned(*shape):
    import torch
    return torch.full(shape, float("nan"), dtype=torch.bfloat16, device="cuda")


def _norm_ref(x, weight):
    x64 = x.double()
    return x64 * (x64.square().mean(dim=1, keepdim=True) + EPS).rsqrt() * weight.double()


def _judge(got, ref, what):
    import torch
    got = got.double()
    assert not torch.isnan(got).any(), f"{what}: {int(torch.isnan(got).sum())} elements unwritten (NaN)"
    err = (got - ref).abs()
    bad = err > ATOL + RTOL * ref.abs()
    assert not bad.any(), f"{what}: {int(bad.sum())} of {got.numel()} elements off, max error {float(err.max()):.3g}"


@pytest.mark.parametrize("B", BATCHES)
@pytest.mark.parametrize("H", WIDTHS)
def test_rmsnorm_alone(kernels, B, H):
    import torch
    seed = fresh_seed()
    x, _, _ = _inputs(seed, B, 1, H)
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    weight = (1 + 0.1 * torch.randn(H, generator=g, device="cuda")).to(torch.bfloat16)
    for launch in range(2):  # twice: its event counter carries over between launches
        xn = _poisoned(B, H)
        kernels["rmsnorm"].launch(x=x, weight=weight, xn=xn, eps=EPS, B=B, H=H)
        torch.cuda.synchronize()
        _judge(xn, _norm_ref(x, weight), f"rmsnorm B={B} H={H} seed={seed} launch {launch}")


@pytest.mark.parametrize("B", BATCHES)
@pytest.mark.parametrize("N,K", SHAPES, ids=lambda v: str(v))
def test_gemv_alone(kernels, B, N, K):
    import torch
    seed = fresh_seed()
    x, w, _ = _inputs(seed, B, N, K)
    y = _poisoned(B, N)
    kernels["gemv_bf16"].launch(w=w, x=x, y=y, B=B, N=N, K=K)
    torch.cuda.synchronize()
    _judge(y, x.double() @ w.double().T, f"gemv_bf16 B={B} N={N} K={K} seed={seed}")


@pytest.mark.parametrize("B", BATCHES)
@pytest.mark.parametrize("N,K", SHAPES, ids=lambda v: str(v))
def test_gemv_residual_alone(kernels, B, N, K):
    import torch
    seed = fresh_seed()
    x, w, r = _inputs(seed, B, N, K)
    y = _poisoned(B, N)
    kernels["gemv_residual"].launch(w=w, x=x, r=r, y=y, B=B, N=N, K=K)
    torch.cuda.synchronize()
    _judge(y, r.double() + x.double() @ w.double().T, f"gemv_residual B={B} N={N} K={K} seed={seed}")


@pytest.mark.parametrize("B", BATCHES + [11])  # 11: a second pass over W for rows 8..10
@pytest.mark.parametrize("N,K", [s for s in SHAPES if s[1] >= 8], ids=lambda v: str(v))
def test_norm_then_gemv_in_one_kernel(kernels, B, N, K):
    import torch
    seed = fresh_seed()
    x, w, _ = _inputs(seed, B, N, K)
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    weight = (1 + 0.1 * torch.randn(K, generator=g, device="cuda")).to(torch.bfloat16)
    for launch in range(2):  # twice: the persistent kernel keeps its place in its event counters
        xn, y = _poisoned(B, K), _poisoned(B, N)
        kernels["norm_gemv"].launch(x=x, weight=weight, xn=xn, eps=EPS, B=B, H=K, w=w, y=y, N=N, K=K)
        torch.cuda.synchronize()
        what = f"norm_gemv B={B} N={N} K={K} seed={seed} launch {launch}"
        _judge(xn, _norm_ref(x, weight), what + " (xn)")
        # y from the bf16 xn the kernel wrote (checked above): the GEMV's own error, not the norm's rounding
        _judge(y, xn.double() @ w.double().T, what + " (y)")
        # and against the float64 chain, with the rounding of xn to bf16 in between
        _judge(y, _norm_ref(x, weight) @ w.double().T, what + " (y against the float64 chain)")
