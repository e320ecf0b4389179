"""The ring GEMVs (case_studies/llama32_1b_decode/linear: gemv_residual_ring, gemv_swiglu_normed_ring) on a GPU,
bit for bit against gemv_residual and gemv_swiglu_normed: the same arithmetic, W's first K chunk read from a
shared-memory slot that the prefetch entry's bulk copies filled (linked alone, the entry runs right before the
task; the first launch runs on 8 CTAs, so each walks many tiles through both slots and both mbarrier phases).

Fresh random inputs every run (the seed is in the failure message), outputs poisoned with NaN, batches 1, 3, 8
and 11, K below, at and above the 2048-column chunk (8192: three chunks stream from global memory), N and I
giving several tiles per CTA, every kernel launched twice."""
import os
import sys
from pathlib import Path

import pytest

CASE = Path(__file__).resolve().parent.parent / "case_studies" / "llama32_1b_decode"
sys.path.insert(0, str(CASE))

import decode_parts  # noqa: E402

pytestmark = pytest.mark.gpu
EPS = decode_parts.RMS_EPS
PAIRS = {"gemv_residual_ring": "gemv_residual", "gemv_swiglu_normed_ring": "gemv_swiglu_normed"}


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    parts = decode_parts.RING_PARTS + tuple(p for p in decode_parts.PARTS + decode_parts.NORMED_PARTS
                                            if p.name in PAIRS.values())
    objects = decode_parts.build_all(tmp_path_factory.mktemp("ring"), parts)
    out = {}
    for name in list(PAIRS) + list(PAIRS.values()):
        linked = decode_parts.link_alone(objects[name])
        assert linked.ok, [d.render() for d in linked.diagnostics]
        out[name] = linked.kernel()
    yield out
    for k in out.values():
        k.unload()


def _gen(seed):
    import torch
    return torch.Generator(device="cuda").manual_seed(seed)


def _nan(*shape):
    import torch
    return torch.full(shape, float("nan"), dtype=torch.bfloat16, device="cuda")


@pytest.mark.parametrize("B", [1, 3, 8, 11])
@pytest.mark.parametrize("N,K", [(2048, 2048), (2048, 8192), (1000, 40), (4104, 2056)], ids=str)
def test_gemv_residual_ring_is_gemv_residual(kernels, B, N, K):
    import torch
    seed = int.from_bytes(os.urandom(4), "little")
    g = _gen(seed)
    w = (torch.randn(N, K, generator=g, device="cuda") / K ** 0.5).to(torch.bfloat16)
    x = torch.randn(B, K, generator=g, device="cuda").to(torch.bfloat16)
    r = torch.randn(B, N, generator=g, device="cuda").to(torch.bfloat16)
    want = _nan(B, N)
    kernels["gemv_residual"].launch(w=w, x=x, r=r, y=want, B=B, N=N, K=K)
    for launch in range(2):
        got = _nan(B, N)
        kernels["gemv_residual_ring"].launch(w=w, x=x, r=r, y=got, B=B, N=N, K=K, grid=8 if launch == 0 else None)
        torch.cuda.synchronize()
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), \
            f"B={B} N={N} K={K} seed={seed} launch {launch}: {(got.float() - want.float()).abs().nan_to_num(1e9).max()}"


@pytest.mark.parametrize("B", [1, 3, 8, 11])
@pytest.mark.parametrize("I,K", [(8192, 2048), (1001, 40), (4100, 2056)], ids=str)
def test_gemv_swiglu_normed_ring_is_gemv_swiglu_normed(kernels, B, I, K):
    import torch
    seed = int.from_bytes(os.urandom(4), "little")
    g = _gen(seed)
    w = (torch.randn(2 * I, K, generator=g, device="cuda") / K ** 0.5).to(torch.bfloat16)
    x = (3 * torch.randn(B, K, generator=g, device="cuda")).to(torch.bfloat16)
    norm_w = (1 + 0.1 * torch.randn(K, generator=g, device="cuda")).to(torch.bfloat16)
    want = _nan(B, I)
    kernels["gemv_swiglu_normed"].launch(w=w, x=x, norm_w=norm_w, eps=EPS, h=want, B=B, I=I, K=K)
    for launch in range(2):
        got = _nan(B, I)
        kernels["gemv_swiglu_normed_ring"].launch(w=w, x=x, norm_w=norm_w, eps=EPS, h=got, B=B, I=I, K=K,
                                                  grid=8 if launch == 0 else None)
        torch.cuda.synchronize()
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), \
            f"B={B} I={I} K={K} seed={seed} launch {launch}: {(got.float() - want.float()).abs().nan_to_num(1e9).max()}"
