"""The fused-norm GEMVs (case_studies/llama32_1b_decode/linear: qkv_rope_normed, gemv_swiglu_normed) on a GPU
against torch in float64, and bit for bit against rmsnorm followed by qkv_rope / gemv_swiglu.

Fresh random inputs every run (the seed is in the failure message), outputs poisoned with NaN so an
unwritten element fails, batches 1, 3, 8 and 11 (a second pass over W, and a second norm prologue), ragged
K (not a multiple of the 2048-column chunk), every kernel launched twice. The float64 reference rounds the
normed rows to bf16 as the kernel stages them, then multiplies in float64."""
import os
import sys
from pathlib import Path

import pytest

CASE = Path(__file__).resolve().parent.parent / "case_studies" / "llama32_1b_decode"
sys.path.insert(0, str(CASE))

import decode_parts  # noqa: E402

pytestmark = pytest.mark.gpu

BATCHES = [1, 3, 8, 11]
EPS = decode_parts.RMS_EPS
# bf16 outputs: a relative half-ulp of 2^-9 from the one rounding, plus fp32 accumulation over K.
RTOL, ATOL = 1e-2, 1e-2
Q, KV, D = decode_parts.Q_HEADS, decode_parts.KV_HEADS, decode_parts.HEAD_DIM


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    objects = {**decode_parts.build_normed(tmp_path_factory.mktemp("normed")),
               **decode_parts.build_all(tmp_path_factory.mktemp("plain"),
                                        [p for p in decode_parts.MORE_PARTS if p.name in ("qkv_rope", "gemv_swiglu")]
                                        + [p for p in decode_parts.PARTS if p.name == "rmsnorm"])}
    out = {}
    for name in ("qkv_rope_normed", "gemv_swiglu_normed", "qkv_rope", "gemv_swiglu", "rmsnorm"):
        linked = decode_parts.link_alone(objects[name])
        assert linked.ok, [d.render() for d in linked.diagnostics]
        out[name] = linked.kernel()
    yield out
    for k in out.values():
        k.unload()


@pytest.fixture(scope="module")
def inv_freq():
    import torch
    return torch.tensor(decode_parts.llama3_inv_freq(), dtype=torch.float32, device="cuda")


def _inputs(seed, B, N, K):
    """Raw residual rows x (a few units: a scale far from 1), the norm's weight, W [N, K]."""
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = (3 * torch.randn(B, K, generator=g, device="cuda")).to(torch.bfloat16)
    norm_w = (1 + 0.1 * torch.randn(K, generator=g, device="cuda")).to(torch.bfloat16)
    w = (torch.randn(N, K, generator=g, device="cuda") / K ** 0.5).to(torch.bfloat16)
    return x, norm_w, w, g


def _xn_ref(x, norm_w):
    """RMSNorm in float64, rounded to bf16 as the kernel stages it, back in float64."""
    import torch
    x64 = x.double()
    xn = x64 * (x64.square().mean(dim=1, keepdim=True) + EPS).rsqrt() * norm_w.double()
    return xn.to(torch.bfloat16).double()


def _poisoned(*shape):
    import torch
    return torch.full(shape, float("nan"), dtype=torch.bfloat16, device="cuda")


def _judge(got, ref, what):
    import torch
    got = got.double()
    assert not torch.isnan(got).any(), f"{what}: {int(torch.isnan(got).sum())} elements unwritten (NaN)"
    err = (got - ref).abs()
    bad = err > ATOL + RTOL * ref.abs()
    assert not bad.any(), f"{what}: {int(bad.sum())} of {got.numel()} elements off, max error {float(err.max()):.3g}"


def _rope_ref(t, pos, inv_freq):
    import torch
    ang = pos.double()[:, None, None] * inv_freq.double()[None, None, :]
    c, s = ang.cos(), ang.sin()
    x1, x2 = t[..., : D // 2], t[..., D // 2:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


def _bits_equal(a, b):
    """Bit for bit (NaN poison included)."""
    import torch
    return torch.equal(a.view(torch.int16), b.view(torch.int16))


# --- qkv_rope_normed ------------------------------------------------------------------------------------

def _positions(g, B, Lmax):
    import torch
    pos = torch.randint(0, Lmax, (B,), generator=g, device="cuda", dtype=torch.int32)
    if B > 1:
        pos[-1] = Lmax - 1
    return pos


@pytest.mark.parametrize("B", BATCHES)
@pytest.mark.parametrize("K,Lmax", [(decode_parts.HIDDEN, 4100), (40, 3), (2056, 37)], ids=lambda v: str(v))
def test_qkv_rope_normed(kernels, inv_freq, B, K, Lmax):
    import torch
    seed = fresh_seed()
    x, norm_w, w, g = _inputs(seed, B, decode_parts.QKV, K)
    pos = _positions(g, B, Lmax)
    y = (_xn_ref(x, norm_w) @ w.double().T).view(B, Q + 2 * KV, D)
    q_ref, k_ref, v_ref = _rope_ref(y[:, :Q], pos, inv_freq), _rope_ref(y[:, Q:Q + KV], pos, inv_freq), y[:, Q + KV:]
    rows = torch.arange(B, device="cuda")
    for launch in range(2):
        q = _poisoned(B, Q, D)
        k_cache, v_cache = _poisoned(B * KV, Lmax, D), _poisoned(B * KV, Lmax, D)
        kernels["qkv_rope_normed"].launch(w=w, x=x, norm_w=norm_w, eps=EPS, pos=pos, inv_freq=inv_freq, q=q,
                                          k_cache=k_cache, v_cache=v_cache, B=B, K=K, Lmax=Lmax)
        torch.cuda.synchronize()
        what = f"qkv_rope_normed B={B} K={K} Lmax={Lmax} seed={seed} launch {launch}"
        _judge(q, q_ref, what + " (q)")
        for name, cache, ref in (("k", k_cache, k_ref), ("v", v_cache, v_ref)):
            c = cache.view(B, KV, Lmax, D)
            _judge(c[rows, :, pos.long()], ref, what + f" ({name} at pos)")
            written = torch.zeros(B, KV, Lmax, dtype=torch.bool, device="cuda")
            written[rows, :, pos.long()] = True
            stray = ~torch.isnan(c.double()).all(dim=-1) & ~written
            assert not stray.any(), f"{what}: {int(stray.sum())} {name} cache rows written outside pos"


# --- gemv_swiglu_normed ---------------------------------------------------------------------------------

@pytest.mark.parametrize("B", BATCHES)
@pytest.mark.parametrize("I,K", [(decode_parts.INTERMEDIATE, decode_parts.HIDDEN), (13, 40), (1001, 2056), (1, 8)],
                         ids=lambda v: str(v))
def test_gemv_swiglu_normed(kernels, B, I, K):
    import torch
    seed = fresh_seed()
    x, norm_w, w, _ = _inputs(seed, B, 2 * I, K)
    w = (w.float() * 3).to(torch.bfloat16)  # gate sums of a few units: silu's curved part
    y = _xn_ref(x, norm_w) @ w.double().T
    gate, up = y[:, :I], y[:, I:]
    ref = gate * torch.sigmoid(gate) * up
    for launch in range(2):
        h = _poisoned(B, I)
        kernels["gemv_swiglu_normed"].launch(w=w, x=x, norm_w=norm_w, eps=EPS, h=h, B=B, I=I, K=K)
        torch.cuda.synchronize()
        _judge(h, ref, f"gemv_swiglu_normed B={B} I={I} K={K} seed={seed} launch {launch}")


# --- bit for bit against the separate norm --------------------------------------------------------------

@pytest.mark.parametrize("B", [1, 8, 11])
@pytest.mark.parametrize("K", [decode_parts.HIDDEN, 2056, 40])
def test_qkv_rope_normed_is_rmsnorm_then_qkv_rope_bit_for_bit(kernels, inv_freq, B, K):
    import torch
    seed = fresh_seed()
    x, norm_w, w, g = _inputs(seed, B, decode_parts.QKV, K)
    Lmax = 64
    pos = _positions(g, B, Lmax)
    xn = _poisoned(B, K)
    kernels["rmsnorm"].launch(x=x, weight=norm_w, xn=xn, eps=EPS, B=B, H=K)
    outs = []
    for name, args in (("qkv_rope", {"x": xn}), ("qkv_rope_normed", {"x": x, "norm_w": norm_w, "eps": EPS})):
        q = _poisoned(B, Q, D)
        k_cache, v_cache = _poisoned(B * KV, Lmax, D), _poisoned(B * KV, Lmax, D)
        kernels[name].launch(w=w, **args, pos=pos, inv_freq=inv_freq, q=q, k_cache=k_cache, v_cache=v_cache,
                             B=B, K=K, Lmax=Lmax)
        outs.append((q, k_cache, v_cache))
    torch.cuda.synchronize()
    assert not torch.isnan(xn.double()).any(), f"rmsnorm B={B} K={K} seed={seed}: xn unwritten"
    for what, a, b in zip(("q", "k_cache", "v_cache"), *outs):
        assert _bits_equal(a, b), (f"B={B} K={K} seed={seed}: {what} of qkv_rope_normed differs from rmsnorm -> "
                                   f"qkv_rope in {int((a.view(torch.int16) != b.view(torch.int16)).sum())} elements")


@pytest.mark.parametrize("B", [1, 8, 11])
@pytest.mark.parametrize("I,K", [(decode_parts.INTERMEDIATE, decode_parts.HIDDEN), (1001, 2056)], ids=lambda v: str(v))
def test_gemv_swiglu_normed_is_rmsnorm_then_gemv_swiglu_bit_for_bit(kernels, B, I, K):
    import torch
    seed = fresh_seed()
    x, norm_w, w, _ = _inputs(seed, B, 2 * I, K)
    xn = _poisoned(B, K)
    kernels["rmsnorm"].launch(x=x, weight=norm_w, xn=xn, eps=EPS, B=B, H=K)
    h1, h2 = _poisoned(B, I), _poisoned(B, I)
    kernels["gemv_swiglu"].launch(w=w, x=xn, h=h1, B=B, I=I, K=K)
    kernels["gemv_swiglu_normed"].launch(w=w, x=x, norm_w=norm_w, eps=EPS, h=h2, B=B, I=I, K=K)
    torch.cuda.synchronize()
    assert not torch.isnan(h1.double()).any() and not torch.isnan(h2.double()).any(), f"seed={seed}: h unwritten"
    assert _bits_equal(h1, h2), (f"B={B} I={I} K={K} seed={seed}: gemv_swiglu_normed differs from rmsnorm -> "
                                 f"gemv_swiglu in {int((h1.view(torch.int16) != h2.view(torch.int16)).sum())} elements")
