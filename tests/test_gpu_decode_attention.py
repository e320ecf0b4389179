"""The Llama-3.2-1B decode attention (case_studies/llama32_1b_decode/attention) on a GPU against torch in
float64: attn_head linked alone, attn_split -> attn_merge (flash-decoding) as one persistent kernel, and
attn_last (flash-decoding whose last split merges) linked alone.

GQA with 32 query heads over 8 KV heads of 64 (query head 4h + g reads KV head h), q [B, 32, 64], k and v
[B, 8, Lmax, 64] (a cache of capacity Lmax, positions 0..L-1 attended; the positions past L are NaN, so a
read of one fails), o [B, 32, 64], all bf16. Fresh random inputs every run (the seed is in the failure message),
the output and the split workspace poisoned with NaN so an unwritten element fails, batches 1, 3 and 8,
context lengths from one position to 4097 (cut into 1, 4, 11, 16 or 32 splits of uneven lengths: the split count
depends on B and L), every kernel launched twice
(the persistent one keeps its place in its event counters between launches). The components as built walk on
the tensor cores (ATTN_WALK 2, checked against float64, also with a ring of 4 stages); value sets build the lane
walk (ATTN_WALK 1) in its ring and register forms (checked bit for bit against each other and against float64)."""
import os
import sys
from pathlib import Path

import pytest

CASE = Path(__file__).resolve().parent.parent / "case_studies" / "llama32_1b_decode"
sys.path.insert(0, str(CASE))

import decode_parts  # noqa: E402

pytestmark = pytest.mark.gpu

BATCHES = [1, 3, 8]
LENGTHS = [1, 7, 33, 256, 1000, 4097]
VARIANTS = ["attn_head", "attn_split", "attn_last"]
# bf16 outputs: a relative half-ulp of 2^-9 from the one rounding; the fp32 softmax and sums add far less.
RTOL, ATOL = 1e-2, 1e-2


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    objects = decode_parts.build_attention(tmp_path_factory.mktemp("attention"))
    out = {}
    linked = decode_parts.link_alone(objects["attn_head"])
    assert linked.ok, [d.render() for d in linked.diagnostics]
    out["attn_head"] = linked.kernel()
    linked = decode_parts.link_attn_split(objects)
    assert linked.ok, [d.render() for d in linked.diagnostics]
    out["attn_split"] = linked.kernel()
    linked = decode_parts.link_alone(objects["attn_last"])
    assert linked.ok, [d.render() for d in linked.diagnostics]
    out["attn_last"] = linked.kernel()
    yield out
    for k in out.values():
        k.unload()


def _inputs(seed, B, L, q_scale=1.0, Lmax=None):
    """q, and the caches k, v [B, 8, Lmax, 64] (Lmax: L unless given) with positions L.. set to NaN."""
    import torch
    Lmax = L if Lmax is None else Lmax
    g = torch.Generator(device="cuda").manual_seed(seed)
    H, KV, D = decode_parts.Q_HEADS, decode_parts.KV_HEADS, decode_parts.HEAD_DIM
    q = (q_scale * torch.randn(B, H, D, generator=g, device="cuda")).to(torch.bfloat16)
    k = torch.randn(B, KV, Lmax, D, generator=g, device="cuda").to(torch.bfloat16)
    v = torch.randn(B, KV, Lmax, D, generator=g, device="cuda").to(torch.bfloat16)
    k[:, :, L:] = float("nan")
    v[:, :, L:] = float("nan")
    return q, k, v


def _reference(q, k, v, L=None):
    """softmax(q k^T / sqrt(64)) v in float64 over positions 0..L-1, each KV head repeated for its 4 query
    heads."""
    import torch
    if L is not None:
        k, v = k[:, :, :L], v[:, :, :L]
    group = decode_parts.Q_HEADS // decode_parts.KV_HEADS
    k64 = k.double().repeat_interleave(group, dim=1)  # [B, 32, L, 64]
    v64 = v.double().repeat_interleave(group, dim=1)
    s = torch.einsum("bhd,bhld->bhl", q.double(), k64) / decode_parts.HEAD_DIM ** 0.5
    return torch.einsum("bhl,bhld->bhd", torch.softmax(s, dim=-1), v64)


def _poisoned(*shape, dtype=None):
    import torch
    return torch.full(shape, float("nan"), dtype=dtype or torch.bfloat16, device="cuda")


def _judge(got, ref, what):
    import torch
    got = got.double()
    assert not torch.isnan(got).any(), f"{what}: {int(torch.isnan(got).sum())} elements unwritten (NaN)"
    err = (got - ref).abs()
    bad = err > ATOL + RTOL * ref.abs()
    assert not bad.any(), f"{what}: {int(bad.sum())} of {got.numel()} elements off, max error {float(err.max()):.3g}"


def _run(kernels, variant, q, k, v, B, L):
    import torch
    Lmax = k.shape[2]
    o = _poisoned(B, decode_parts.Q_HEADS, decode_parts.HEAD_DIM)
    # pos: the position each row's cache append would write in the launch (none here), which the prefetch entries
    # leave out and copy after the waits; the last one and others, so the copy lands in every round and split
    # the shapes reach
    pos = torch.tensor([(L - 1 - 37 * b) % L for b in range(B)], dtype=torch.int32, device="cuda")
    if variant == "attn_head":
        kernels["attn_head"].launch(q=q, k=k, v=v, pos=pos, o=o, B=B, L=L, Lmax=Lmax)
    elif variant == "attn_split":
        part = _poisoned(*decode_parts.attn_workspace_shape(B, L), dtype=torch.float32)
        kernels["attn_split"].launch(q=q, k=k, v=v, pos=pos, part=part, B=B, L=L, Lmax=Lmax, o=o)
    else:  # attn_last: the last split of (b, h) merges, and puts its count back to 0
        part = _poisoned(*decode_parts.attn_workspace_shape(B, L), dtype=torch.float32)
        arrived = torch.zeros(B * decode_parts.KV_HEADS, dtype=torch.int32, device="cuda")
        kernels["attn_last"].launch(q=q, k=k, v=v, pos=pos, part=part, arrived=arrived, o=o, B=B, L=L, Lmax=Lmax)
        torch.cuda.synchronize()
        assert not arrived.any(), f"attn_last left counts {arrived.tolist()}"
    torch.cuda.synchronize()
    return o


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("B", BATCHES)
@pytest.mark.parametrize("L", LENGTHS)
def test_decode_attention(kernels, variant, B, L):
    seed = fresh_seed()
    q, k, v = _inputs(seed, B, L)
    ref = _reference(q, k, v)
    for launch in range(2):  # twice: fresh outputs each time, the same answer
        o = _run(kernels, variant, q, k, v, B, L)
        _judge(o, ref, f"{variant} B={B} L={L} seed={seed} launch {launch}")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("L", [300, 4097])
def test_decode_attention_with_peaked_scores(kernels, variant, L):
    # q scaled by 8: scores of tens, a softmax dominated by a few positions, possibly in a later split than
    # the first one seen: the running max must be rescaled, within a group, across groups and across splits
    seed = fresh_seed()
    B = 3
    q, k, v = _inputs(seed, B, L, q_scale=8.0)
    o = _run(kernels, variant, q, k, v, B, L)
    _judge(o, _reference(q, k, v), f"{variant} peaked B={B} L={L} seed={seed}")


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("B", [1, 3])
@pytest.mark.parametrize("L,Lmax", [(1, 2), (7, 4096), (256, 259), (1000, 1300), (4097, 4600)], ids=lambda v: str(v))
def test_decode_attention_in_a_larger_cache(kernels, variant, B, L, Lmax):
    # the cache's capacity is its stride: positions L..Lmax-1 (NaN here) are never read
    seed = fresh_seed()
    q, k, v = _inputs(seed, B, L, Lmax=Lmax)
    ref = _reference(q, k, v, L)
    for launch in range(2):
        o = _run(kernels, variant, q, k, v, B, L)
        _judge(o, ref, f"{variant} B={B} L={L} Lmax={Lmax} seed={seed} launch {launch}")


def test_the_variants_agree(kernels):
    # both variants on the same inputs: the split order changes only the fp32 rounding before the bf16 one
    import torch
    seed = fresh_seed()
    B, L = 8, 1000
    q, k, v = _inputs(seed, B, L)
    a = _run(kernels, "attn_head", q, k, v, B, L).double()
    b = _run(kernels, "attn_split", q, k, v, B, L).double()
    assert torch.allclose(a, b, rtol=RTOL, atol=ATOL), f"seed={seed}: max difference {float((a - b).abs().max()):.3g}"


def test_the_last_split_merges_as_attn_merge_does(kernels):
    # the same records merged in the same order: bit for bit the two-component pipeline's output
    import torch
    seed = fresh_seed()
    for B, L in ((1, 1024), (8, 4097), (3, 33)):
        q, k, v = _inputs(seed, B, L)
        a = _run(kernels, "attn_split", q, k, v, B, L)
        b = _run(kernels, "attn_last", q, k, v, B, L)
        assert torch.equal(a, b), f"seed={seed} B={B} L={L}: max difference {float((a.double() - b.double()).abs().max()):.3g}"


@pytest.fixture(scope="module")
def walks(tmp_path_factory):
    """attn_head and attn_split on the lane walk (ATTN_WALK 1) built to walk every length through the K/V ring
    (ATTN_RING_ROUNDS 1; and with 3 stages), and to walk none through it (every round in registers)."""
    out = {}
    base = decode_parts.build_attention(tmp_path_factory.mktemp("walk_base"))  # each value set's starting point
    for name, rounds, stages in (("ring", 1, 2), ("ring3", 1, 3), ("registers", 1 << 30, 2)):
        values = tuple((c, key, value) for c in ("attn_head", "attn_split")
                       for key, value in (("ATTN_WALK", 1), ("ATTN_RING_ROUNDS", rounds), ("ATTN_STAGES", stages)))
        objects = decode_parts.build_value_set(tmp_path_factory.mktemp(f"walk_{name}"),
                                               decode_parts.ValueSet(name, values), base)
        head, split = decode_parts.link_alone(objects["attn_head"]), decode_parts.link_attn_split(objects)
        assert head.ok and split.ok, [d.render() for d in head.diagnostics + split.diagnostics]
        out[name] = {"attn_head": head.kernel(), "attn_split": split.kernel()}
    yield out
    for ks in out.values():
        for k in ks.values():
            k.unload()


@pytest.mark.parametrize("variant", ["attn_head", "attn_split"])
def test_the_ring_walk_is_the_register_walk(walks, variant):
    # the lane walk's ring changes where K and V wait, not the arithmetic: the same positions in the same order,
    # bit for bit
    import torch
    seed = fresh_seed()
    for B, L, Lmax in ((1, 1, 1), (1, 65, 70), (3, 1000, 1000), (8, 4097, 4600), (1, 16384, 16384)):
        q, k, v = _inputs(seed, B, L, Lmax=Lmax)
        base = _run(walks["registers"], variant, q, k, v, B, L)
        _judge(base, _reference(q, k, v, L), f"{variant} (registers) B={B} L={L} seed={seed}")
        for ring in ("ring", "ring3"):
            o = _run(walks[ring], variant, q, k, v, B, L)
            assert torch.equal(o, base), (f"{variant} {ring} seed={seed} B={B} L={L}: max difference "
                                          f"{float((o.double() - base.double()).abs().max()):.3g}")


@pytest.fixture(scope="module")
def mma_walks(tmp_path_factory):
    """The three attention components built to walk on the tensor cores (ATTN_WALK 2), with rings of 2 and 4
    stages."""
    base = decode_parts.build_attention(tmp_path_factory.mktemp("mma_base"))
    out = {}
    for stages in (2, 4):
        values = tuple((c, key, value) for c in ("attn_head", "attn_split", "attn_last")
                       for key, value in (("ATTN_WALK", 2), ("ATTN_STAGES", stages)))
        objects = decode_parts.build_value_set(tmp_path_factory.mktemp(f"mma{stages}"),
                                               decode_parts.ValueSet(f"mma{stages}", values), base)
        linked = {"attn_head": decode_parts.link_alone(objects["attn_head"]),
                  "attn_split": decode_parts.link_attn_split(objects),
                  "attn_last": decode_parts.link_alone(objects["attn_last"])}
        for name, result in linked.items():
            assert result.ok, (name, [d.render() for d in result.diagnostics])
        out[stages] = {name: result.kernel() for name, result in linked.items()}
    yield out
    for ks in out.values():
        for k in ks.values():
            k.unload()


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("stages", [2, 4])
def test_the_tensor_core_walk(mma_walks, variant, stages):
    # P is rounded to bf16 before P V (the scores, the softmax state and acc stay fp32): within the bf16
    # output's tolerance of the float64 reference, not bit for bit the lane walk; lengths that leave a warp's
    # tile partly past the end, a cache larger than the context, and peaked scores
    seed = fresh_seed()
    for B, L, Lmax, q_scale in ((1, 1, 1, 1.0), (3, 7, 4096, 1.0), (1, 65, 70, 1.0), (8, 1000, 1000, 1.0),
                                (3, 4097, 4600, 8.0), (8, 4097, 4097, 1.0), (1, 16384, 16384, 1.0)):
        q, k, v = _inputs(seed, B, L, q_scale=q_scale, Lmax=Lmax)
        ref = _reference(q, k, v, L)
        for launch in range(2):
            o = _run(mma_walks[stages], variant, q, k, v, B, L)
            _judge(o, ref, f"{variant} tensor cores, {stages} stages, B={B} L={L} Lmax={Lmax} q x{q_scale} "
                           f"seed={seed} launch {launch}")
