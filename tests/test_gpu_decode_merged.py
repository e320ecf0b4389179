"""The output projection that merges attention's split states itself (linear/gemv_residual_lr_merged, the o_proj
of case_studies/llama32_1b_decode/pipelines/decode_step_lrm.json), on a GPU: attn_split -> gemv_residual_lr_merged
linked as one kernel (a loader warp a CTA, the merge in each CTA's first o_proj task), bit for bit attn_split ->
attn_merge (o) and then the plain gemv_residual of o: attention.cuh's merge_vectors folds the records with
attn_merge's arithmetic in the same order, and the ring GEMV multiplies as the plain one does. Fresh random inputs
every run (the seed is in the failure message), outputs poisoned with NaN, batches 1, 3 and 8, contexts from one
split to past where batch 1's splits stop growing (16 for 128 split tasks; 2 a row at batch 8, so a thread's 8
rows take 16 records), the first launch on 8 CTAs (each CTA's later o_proj tasks reuse the o its first one
merged) and the next on the whole GPU."""
import os
import sys
from pathlib import Path

import pytest

CASE = Path(__file__).resolve().parent.parent / "case_studies" / "llama32_1b_decode"
sys.path.insert(0, str(CASE))

import decode_parts  # noqa: E402
from linear import packing  # noqa: E402

pytestmark = pytest.mark.gpu
GEOMETRY = decode_parts.ATTN_O_MERGED["geometry"]  # the loader step's split tasks: one block an SM
SEPARATE = {"pipeline": 1, "name": "attn_split_merge", "components": ["attn_split", "attn_merge"],
            "schedule": "persistent", "dispatch": "static", "geometry": GEOMETRY}


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    import pipelink
    parts = decode_parts.ATTENTION_PARTS + tuple(p for p in decode_parts.PARTS + decode_parts.LOADER_PARTS
                                                 if p.name in ("gemv_residual", "gemv_residual_lr_merged"))
    objects = decode_parts.build_all(tmp_path_factory.mktemp("merged"), parts)
    out = {"merged": decode_parts.link_attn_o_merged(objects),
           "separate": pipelink.link([str(objects["attn_split"]), str(objects["attn_merge"])], pipeline=SEPARATE),
           "gemv": decode_parts.link_alone(objects["gemv_residual"])}
    for name, linked in out.items():
        assert linked.ok, (name, [d.render() for d in linked.diagnostics])
    assert out["merged"].manifest.block == (288, 1, 1) and out["merged"].manifest.resources.frame_bytes == 0
    assert "attn_split notifies ijk->:; o_proj waits i->0" in out["merged"].link_map
    kernels = {name: linked.kernel() for name, linked in out.items()}
    yield kernels
    for k in kernels.values():
        k.unload()


def _nan(*shape, dtype=None):
    import torch
    return torch.full(shape, float("nan"), dtype=dtype or torch.bfloat16, device="cuda")


@pytest.mark.parametrize("B", [1, 3, 8])
@pytest.mark.parametrize("L", [1, 130, 1024, 2500], ids=str)
@pytest.mark.parametrize("N", [2048, 1000], ids=str)
def test_the_merging_projection_is_attn_merge_then_the_projection(kernels, B, L, N):
    import torch
    H, KV, D = decode_parts.Q_HEADS * decode_parts.HEAD_DIM, decode_parts.KV_HEADS, decode_parts.HEAD_DIM
    seed = int.from_bytes(os.urandom(4), "little")
    g = torch.Generator(device="cuda").manual_seed(seed)
    Lmax = L + 3
    q = torch.randn(B, decode_parts.Q_HEADS, D, generator=g, device="cuda").to(torch.bfloat16)
    k = torch.randn(B, KV, Lmax, D, generator=g, device="cuda").to(torch.bfloat16)
    v = torch.randn(B, KV, Lmax, D, generator=g, device="cuda").to(torch.bfloat16)
    k[:, :, L:] = float("nan")
    v[:, :, L:] = float("nan")
    w_o = (torch.randn(N, H, generator=g, device="cuda") / H ** 0.5).to(torch.bfloat16)
    x = torch.randn(B, N, generator=g, device="cuda").to(torch.bfloat16)
    pos = torch.tensor([(L - 1 - 37 * b) % L for b in range(B)], dtype=torch.int32, device="cuda")
    shape = decode_parts.attn_workspace_shape(B, L)  # for 256 split tasks: room for the 128 of GEOMETRY
    o, y_want = _nan(B, decode_parts.Q_HEADS, D), _nan(B, N)
    kernels["separate"].launch(q=q, k=k, v=v, pos=pos, part=_nan(*shape, dtype=torch.float32), o=o, B=B, L=L,
                               Lmax=Lmax)
    kernels["gemv"].launch(w=w_o, x=o.view(B, H), r=x, y=y_want, B=B, N=N, K=H)
    torch.cuda.synchronize()
    assert not torch.isnan(y_want.float()).any(), f"the separate kernels left y unwritten (seed {seed})"
    w_packed = packing.pack(w_o, "gemv_residual_lr", N)
    for launch in range(2):
        y = _nan(B, N)
        kernels["merged"].launch(q=q, k=k, v=v, pos=pos, part=_nan(*shape, dtype=torch.float32), w_o=w_packed, x=x,
                                 y=y, B=B, L=L, Lmax=Lmax, H=H, N=N, grid=8 if launch == 0 else None)
        torch.cuda.synchronize()
        assert torch.equal(y.view(torch.int16), y_want.view(torch.int16)), (
            f"B={B} L={L} N={N} seed={seed} launch {launch}: max difference "
            f"{(y.float() - y_want.float()).abs().nan_to_num(1e9).max()}")
