"""The remaining per-layer Llama-3.2-1B decode parts (case_studies/llama32_1b_decode/linear) on a GPU against
torch in float64: qkv_rope and gemv_swiglu linked alone, lm_head -> argmax_merge (greedy decoding head) as
one persistent kernel.

Fresh random inputs every run (the seed is in the failure message), outputs poisoned (NaN for bf16, -1 for
tokens, out-of-range keys for the argmax workspace) so an unwritten element fails, batches 1, 3 and 8 (and
11: a second pass over W), ragged sizes (K not a multiple of the 2048-column chunk, I not a multiple of the
4 outputs of a task, V not a multiple of the 8 rows of a task), every kernel launched twice."""
import os
import sys
from pathlib import Path

import pytest

CASE = Path(__file__).resolve().parent.parent / "case_studies" / "llama32_1b_decode"
sys.path.insert(0, str(CASE))

import decode_parts  # noqa: E402

pytestmark = pytest.mark.gpu

BATCHES = [1, 3, 8, 11]
# bf16 outputs: a relative half-ulp of 2^-9 from the one rounding, plus fp32 accumulation over K.
RTOL, ATOL = 1e-2, 1e-2
Q, KV, D = decode_parts.Q_HEADS, decode_parts.KV_HEADS, decode_parts.HEAD_DIM


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    objects = decode_parts.build_more(tmp_path_factory.mktemp("more"))
    out = {}
    for name in ("qkv_rope", "gemv_swiglu"):
        linked = decode_parts.link_alone(objects[name])
        assert linked.ok, [d.render() for d in linked.diagnostics]
        out[name] = linked.kernel()
    linked = decode_parts.link_lm_head_argmax(objects)
    assert linked.ok, [d.render() for d in linked.diagnostics]
    out["lm_head_argmax"] = linked.kernel()
    yield out
    for k in out.values():
        k.unload()


def _gen(seed):
    import torch
    return torch.Generator(device="cuda").manual_seed(seed)


def _weights(g, N, K):
    import torch
    return (torch.randn(N, K, generator=g, device="cuda") / K ** 0.5).to(torch.bfloat16)


def _activations(g, B, K):
    import torch
    return torch.randn(B, K, generator=g, device="cuda").to(torch.bfloat16)


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


# --- qkv_rope -------------------------------------------------------------------------------------------

def hf_llama3_inv_freq(device="cuda"):
    """The rotary frequencies as transformers computes them for Llama-3.2-1B (rope_type "llama3":
    _compute_default_rope_parameters, then _compute_llama3_parameters), float32, on the CPU as at model init."""
    import math
    import torch
    base, dim = decode_parts.ROPE_THETA, D
    sc = decode_parts.ROPE_SCALING
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
    factor, low_freq_factor = sc["factor"], sc["low_freq_factor"]
    high_freq_factor, old_context_len = sc["high_freq_factor"], sc["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    inv_freq_llama = torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)
    assert inv_freq_llama.dtype == torch.float32
    return inv_freq_llama.to(device)


@pytest.fixture(scope="module")
def inv_freq():
    import torch
    f = hf_llama3_inv_freq()
    # the host helper the decode step uses: the same float32 values up to an ulp of the power
    ours = torch.tensor(decode_parts.llama3_inv_freq(), dtype=torch.float32, device="cuda")
    assert torch.allclose(ours, f, rtol=3e-7, atol=0), (ours - f).abs().max()
    return f


def _rope_ref(t, pos, inv_freq):
    """Half-split rotary embedding in float64: t [B, heads, 64], pos [B], inv_freq the f32 frequencies [32]
    (each read exactly, the angle pos * inv_freq and its cos and sin in float64)."""
    import torch
    ang = pos.double()[:, None, None] * inv_freq.double()[None, None, :]
    c, s = ang.cos(), ang.sin()
    x1, x2 = t[..., : D // 2], t[..., D // 2:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)


@pytest.mark.parametrize("B", BATCHES)
@pytest.mark.parametrize("K,Lmax", [(decode_parts.HIDDEN, 4100), (40, 1), (2056, 37)], ids=lambda v: str(v))
def test_qkv_rope(kernels, inv_freq, B, K, Lmax):
    import torch
    seed = fresh_seed()
    g = _gen(seed)
    w, x = _weights(g, decode_parts.QKV, K), _activations(g, B, K)
    pos = torch.randint(0, Lmax, (B,), generator=g, device="cuda", dtype=torch.int32)
    if B > 1:
        pos[-1] = Lmax - 1  # the last slot of the cache
    y = (x.double() @ w.double().T).view(B, Q + 2 * KV, D)
    q_ref = _rope_ref(y[:, :Q], pos, inv_freq)
    k_ref = _rope_ref(y[:, Q:Q + KV], pos, inv_freq)
    v_ref = y[:, Q + KV:]
    rows = torch.arange(B, device="cuda")
    for launch in range(2):
        q = _poisoned(B, Q, D)
        k_cache, v_cache = _poisoned(B * KV, Lmax, D), _poisoned(B * KV, Lmax, D)
        kernels["qkv_rope"].launch(w=w, x=x, pos=pos, inv_freq=inv_freq, q=q, k_cache=k_cache, v_cache=v_cache,
                                   B=B, K=K, Lmax=Lmax)
        torch.cuda.synchronize()
        what = f"qkv_rope B={B} K={K} Lmax={Lmax} seed={seed} launch {launch}"
        _judge(q, q_ref, what + " (q)")
        for name, cache, ref in (("k", k_cache, k_ref), ("v", v_cache, v_ref)):
            c = cache.view(B, KV, Lmax, D)
            _judge(c[rows, :, pos.long()], ref, what + f" ({name} at pos)")
            written = torch.zeros(B, KV, Lmax, dtype=torch.bool, device="cuda")
            written[rows, :, pos.long()] = True
            stray = ~torch.isnan(c.double()).all(dim=-1) & ~written
            assert not stray.any(), f"{what}: {int(stray.sum())} {name} cache rows written outside pos"


def test_qkv_rope_large_positions_and_out_of_range(kernels, inv_freq):
    import torch
    seed = fresh_seed()
    g = _gen(seed)
    B, K, Lmax = 3, decode_parts.HIDDEN, 131072
    w, x = _weights(g, decode_parts.QKV, K), _activations(g, B, K)
    pos = torch.tensor([Lmax - 1, 100000, Lmax], dtype=torch.int32, device="cuda")  # the last is outside
    y = (x.double() @ w.double().T).view(B, Q + 2 * KV, D)
    q = _poisoned(B, Q, D)
    k_cache, v_cache = _poisoned(B * KV, Lmax, D), _poisoned(B * KV, Lmax, D)
    kernels["qkv_rope"].launch(w=w, x=x, pos=pos, inv_freq=inv_freq, q=q, k_cache=k_cache, v_cache=v_cache,
                               B=B, K=K, Lmax=Lmax)
    torch.cuda.synchronize()
    what = f"qkv_rope large positions seed={seed}"
    _judge(q, _rope_ref(y[:, :Q], pos, inv_freq), what + " (q, rotated also for the position outside the cache)")
    k = k_cache.view(B, KV, Lmax, D)
    _judge(k[[0, 1], :, pos[:2].long()], _rope_ref(y[:2, Q:Q + KV], pos[:2], inv_freq), what + " (k)")
    assert torch.isnan(k_cache.view(B, KV, Lmax, D)[2].double()).all(), what + ": row 2 (pos = Lmax) wrote k"
    assert torch.isnan(v_cache.view(B, KV, Lmax, D)[2].double()).all(), what + ": row 2 (pos = Lmax) wrote v"


# --- gemv_swiglu ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("B", BATCHES)
@pytest.mark.parametrize("I,K", [(decode_parts.INTERMEDIATE, decode_parts.HIDDEN), (13, 40), (1001, 2056), (1, 8)],
                         ids=lambda v: str(v))
def test_gemv_swiglu(kernels, B, I, K):
    import torch
    seed = fresh_seed()
    g = _gen(seed)
    w = (_weights(g, 2 * I, K).float() * 3).to(torch.bfloat16)  # gate sums of a few units: silu's curved part
    x = _activations(g, B, K)
    y = x.double() @ w.double().T
    gate, up = y[:, :I], y[:, I:]
    ref = gate * torch.sigmoid(gate) * up
    for launch in range(2):
        h = _poisoned(B, I)
        kernels["gemv_swiglu"].launch(w=w, x=x, h=h, B=B, I=I, K=K)
        torch.cuda.synchronize()
        _judge(h, ref, f"gemv_swiglu B={B} I={I} K={K} seed={seed} launch {launch}")


# --- lm_head -> argmax_merge ----------------------------------------------------------------------------

def _poisoned_part(B, V):
    """The u64 workspace, every key an out-of-range index V + 5 with the largest value: a key left unwritten
    wins the maximum and yields token V + 5."""
    import torch
    key = (0xFFFFFFFF << 32) | (0xFFFFFFFF - (V + 5))
    signed = key - (1 << 64) if key >= 1 << 63 else key
    return torch.full(decode_parts.argmax_workspace_shape(B, V), signed, dtype=torch.int64,
                      device="cuda").view(torch.uint64)


def _run_head(kernels, w, x, B, V, K, what):
    import torch
    logits, token = _poisoned(B, V), torch.full((B,), -1, dtype=torch.int32, device="cuda")
    kernels["lm_head_argmax"].launch(w=w, x=x, logits=logits, part=_poisoned_part(B, V), B=B, V=V, K=K,
                                     token=token)
    torch.cuda.synchronize()
    _judge(logits, x.double() @ w.double().T, what + " (logits)")
    # the greedy token against the same bf16 logits: the largest value, its first index among equal ones
    lf = logits.float()
    best = lf.max(dim=1).values
    first = torch.stack([(lf[b] == best[b]).nonzero()[0, 0] for b in range(B)]).int()
    assert (token == first).all(), f"{what}: tokens {token.tolist()}, the first maxima {first.tolist()}"
    assert (token == torch.argmax(lf, dim=1).int()).all(), f"{what}: tokens differ from torch.argmax"
    return logits, token


@pytest.mark.parametrize("B", BATCHES)
@pytest.mark.parametrize("V,K", [(decode_parts.VOCAB, decode_parts.HIDDEN), (1001, 40), (8, 8), (3, 2056)],
                         ids=lambda v: str(v))
def test_lm_head_argmax(kernels, B, V, K):
    seed = fresh_seed()
    g = _gen(seed)
    w, x = _weights(g, V, K), _activations(g, B, K)
    for launch in range(2):  # twice: the persistent kernel keeps its place in its event counter
        _run_head(kernels, w, x, B, V, K, f"lm_head_argmax B={B} V={V} K={K} seed={seed} launch {launch}")


@pytest.mark.parametrize("B", [1, 3, 8])
def test_lm_head_argmax_ties_take_the_lowest_index(kernels, B):
    import torch
    seed = fresh_seed()
    g = _gen(seed)
    V, K = 5003, decode_parts.HIDDEN
    w, x = _weights(g, V, K), _activations(g, B, K)
    # rows 4999, 77 and 4000 (in different tasks and CTAs) are the same large multiple of batch row b's x:
    # equal logits, the largest of the row; the token must be 77
    for b in range(B):
        w_b = w.clone()
        row = (x[b].float() / x[b].float().norm() * 4).to(torch.bfloat16)
        for n in (4999, 77, 4000):
            w_b[n] = row
        logits, token = _run_head(kernels, w_b, x, B, V, K, f"lm_head_argmax ties B={B} b={b} seed={seed}")
        assert logits[b, 77] == logits[b, 4000] == logits[b, 4999], "the tied rows' logits differ"
        assert int(token[b]) == 77, f"ties B={B} b={b} seed={seed}: token {int(token[b])}, expected 77"
    # an all-equal row: every logit 0 (+0 and -0 alike), the first index wins
    zero = torch.zeros(B, K, dtype=torch.bfloat16, device="cuda")
    _, token = _run_head(kernels, w, zero, B, V, K, f"lm_head_argmax zero input B={B} seed={seed}")
    assert (token == 0).all(), token.tolist()


def test_lm_head_marks_its_phases_in_a_profiled_link(tmp_path):
    """The LM head linked with a task profile: the results as without, and every task's marks (gemv.cuh: on a
    CTA's first task of the call only 0 thread 0's copies of x in and 1 x staged; 2 warp 0's first pass of W in;
    3 its walk over W done; 4 the sums stored) in order between its waits met and its end; argmax_merge stamps
    none."""
    import dataclasses
    import pipelink
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.core.pipeline import load_pipeline
    objects = decode_parts.build_more(tmp_path)
    spec = dataclasses.replace(load_pipeline(decode_parts.HEAD_PIPELINE, DiagnosticSink()), profile_tasks=1 << 14)
    linked = pipelink.link([str(objects[n]) for n in decode_parts.HEAD_PIPELINED], pipeline=spec)
    assert linked.ok, [d.render() for d in linked.diagnostics]
    kernel = linked.kernel()
    try:
        seed = fresh_seed()
        g = _gen(seed)
        B, V, K = 3, decode_parts.VOCAB, decode_parts.HIDDEN
        w, x = _weights(g, V, K), _activations(g, B, K)
        _run_head({"lm_head_argmax": kernel}, w, x, B, V, K, f"profiled lm_head_argmax seed={seed}")
        records = kernel.task_profile()
        head = [r for r in records if r.component == "lm_head"]
        assert len(head) == -(-V // decode_parts.LM_ROWS)
        grid = kernel.resident_blocks()
        for r in head:
            m = r.marks
            first = r.task < grid  # x is staged by a CTA's first task of the call
            assert (m[0] != 0) == first and (m[1] != 0) == first and all(m[2:5]) and m[5] == 0, r
            steps = [r.ready, *(m[:2] if first else ()), *m[2:5], r.done]
            assert steps == sorted(steps), r
        assert all(not any(r.marks) for r in records if r.component == "argmax_merge")
    finally:
        kernel.unload()
