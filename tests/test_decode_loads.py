"""Which global loads of the Llama-3.2-1B decode parts may take the read-only (non-coherent) path, read from
the linked kernels' SASS. In the fused decode step every activation (x, xn, q, o, h, r), the KV cache, the
positions and the tokens are written by other CTAs of the same launch, so only constants may be loaded with
ld.global.nc (SASS `LDG...CONSTANT`): the weights, streamed past L1 by gemv.cuh (`LDG.E.NA.LTC256B.128.CONSTANT`:
256 bytes asked of DRAM, and an L2 evict_first policy in the descriptor) and embed (`LDG.E.NA.128.CONSTANT`), the
norms' weights (`LDG.E.128.CONSTANT`) and qkv_rope's inv_freq (`LDG.E.CONSTANT`).
Everything else must be a coherent load (`LDG...STRONG.GPU`: ld.global.cg, a plain `LDG.E.NA.128`:
ld.global.L1::no_allocate, or `LDGSTS.E.BYPASS.128`: cp.async.cg, through L2 into shared memory, as the GEMVs
stage x and attention's rings take K and V); a cp.async through L1 (`LDGSTS` without `BYPASS`: cp.async.ca)
could read a line another CTA has since written. Also read there: the GEMVs multiply on the tensor cores (HMMA)."""
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

CASE = Path(__file__).resolve().parent.parent / "case_studies" / "llama32_1b_decode"
sys.path.insert(0, str(CASE))

import decode_parts  # noqa: E402

W_STREAM, NORM_W, SCALAR = "LDG.E.NA.LTC256B.128.CONSTANT", "LDG.E.128.CONSTANT", "LDG.E.CONSTANT"
TABLE = "LDG.E.NA.128.CONSTANT"  # embed's rows of the table
COPY_L2 = "LDGSTS.E.BYPASS.128"  # cp.async.cg: 16 bytes through L2 into shared memory
# the read-only loads each kernel may have; attention reads only tensors written in the launch
ALLOWED = {
    "rmsnorm": {NORM_W},
    "gemv_bf16": {W_STREAM},
    "gemv_residual": {W_STREAM},
    "norm_gemv": {NORM_W, W_STREAM},
    "qkv_rope": {W_STREAM, SCALAR},
    "gemv_swiglu": {W_STREAM},
    "lm_head_argmax": {W_STREAM},
    "qkv_rope_normed": {W_STREAM, NORM_W, SCALAR},
    "gemv_swiglu_normed": {W_STREAM, NORM_W},
    "attn_head": set(),
    "attn_split_merge": set(),
    "embed": {TABLE},
    "attn_o_merged": set(),  # the output projection merging the splits' records itself: W by the loader's bulk copies
}



@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    out = tmp_path_factory.mktemp("loads")
    objects = decode_parts.build_all(out, decode_parts.PARTS + decode_parts.ATTENTION_PARTS + decode_parts.MORE_PARTS
                                     + decode_parts.NORMED_PARTS + decode_parts.EMBED_PARTS
                                     + tuple(p for p in decode_parts.LOADER_PARTS if p.name == "gemv_residual_lr_merged"))
    linked = {name: decode_parts.link_alone(objects[name])
              for name in ("rmsnorm", "gemv_bf16", "gemv_residual", "qkv_rope", "gemv_swiglu", "qkv_rope_normed",
                           "gemv_swiglu_normed", "attn_head", "embed")}
    linked["norm_gemv"] = decode_parts.link_norm_gemv(objects)
    linked["attn_split_merge"] = decode_parts.link_attn_split(objects)
    linked["lm_head_argmax"] = decode_parts.link_lm_head_argmax(objects)
    linked["attn_o_merged"] = decode_parts.link_attn_o_merged(objects)
    for name, result in linked.items():
        assert result.ok, (name, [d.render() for d in result.diagnostics])
    return linked


def _loads(result) -> Counter:
    from pipelink import toolchain
    sass = toolchain.disassemble(result.cubin)
    return Counter(m.group(1) for m in re.finditer(r"\b(LDG(?:STS)?\.[A-Z0-9_.]+)", sass))


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_only_constants_take_the_read_only_path(kernels, name):
    loads = _loads(kernels[name])
    read_only = {op for op in loads if op.endswith(".CONSTANT")}
    assert read_only <= ALLOWED[name], f"{name}: read-only loads {sorted(read_only - ALLOWED[name])} in {dict(loads)}"
    copies = [op for op in loads if op.startswith("LDGSTS")]
    coherent = [op for op in loads if ".STRONG.GPU" in op or op == "LDG.E.NA.128"] + [
        op for op in copies if ".BYPASS." in op]  # with or without an L2 prefetch size (LTC128B, LTC256B)
    assert coherent, f"{name}: no coherent load of its inputs in {dict(loads)}"
    through_l1 = [op for op in copies if ".BYPASS." not in op]
    assert not through_l1, f"{name}: cp.async through L1 {through_l1}"


def test_qkv_rope_reads_only_inv_freq_as_a_read_only_scalar(kernels):
    for name in ("qkv_rope", "qkv_rope_normed"):
        loads = _loads(kernels[name])
        assert loads[SCALAR] == 1, (name, dict(loads))  # inv_freq[d]; pos[b] is coherent
        assert loads["LDG.E.STRONG.GPU"] >= 1, (name, dict(loads))


def test_attention_streams_the_cache_coherently(kernels):
    for name in ("attn_head", "attn_split_merge"):
        loads = _loads(kernels[name])
        # k and v: cp.async.cg into the walks' rings (the lane walk's short splits: ld.global.L1::no_allocate)
        assert loads[COPY_L2] >= 2, (name, dict(loads))


GEMV_KERNELS = ("gemv_bf16", "gemv_residual", "norm_gemv", "qkv_rope", "gemv_swiglu", "lm_head_argmax",
                "qkv_rope_normed", "gemv_swiglu_normed")


@pytest.mark.parametrize("name", GEMV_KERNELS)
def test_gemvs_multiply_on_the_tensor_cores(kernels, name):
    """gemv.cuh's products are mma.sync (two m16n8k16 a 32-wide block of K), not scalar fmas: the scalar
    walk spent about four instructions an fma unpacking bf16, which bounded the decode step."""
    from pipelink import toolchain
    sass = toolchain.disassemble(kernels[name].cubin)
    ops = Counter(m.group(1) for m in re.finditer(r"\b(HMMA|FFMA)\b", sass))
    assert ops["HMMA"] >= 2, (name, dict(ops))
    if name in ("gemv_bf16", "gemv_residual"):  # no epilogue math: any fma would be the product itself
        assert ops["FFMA"] == 0, (name, dict(ops))


def test_the_normed_load_entries_ask_l2_for_their_constants_only_when_told(tmp_path):
    """The normed GEMVs' load entries ask L2 for norm_w (one bulk prefetch, `UBLKPF.L2`), and q/k/v's for pos and
    inv_freq too (line prefetches, `CCTL.E.PF2`), with a call's first task on a CTA where the kernel's LR_L2_ASKS
    has bit 3 (11), with or without load_ahead; with its default (3) and no load_ahead the requests fold away."""
    from pipelink import toolchain
    names = ("gemv_swiglu_normed_lr", "qkv_rope_normed_lr")
    objects = decode_parts.build_all(tmp_path, tuple(p for p in decode_parts.LOADER_PARTS if p.name in names))
    got = {}
    for name in names:
        for asks in (3, 11):
            linked = decode_parts.link_alone(objects[name], {"geometry": {"LR_L2_ASKS": asks}})
            assert linked.ok, [d.render() for d in linked.diagnostics]
            sass = toolchain.disassemble(linked.cubin)
            got[name, asks] = (len(re.findall(r"\bUBLKPF\.L2\b", sass)), bool(re.search(r"\bCCTL\.E\.PF2\b", sass)))
    assert got == {("gemv_swiglu_normed_lr", 3): (0, False), ("gemv_swiglu_normed_lr", 11): (1, False),
                   ("qkv_rope_normed_lr", 3): (0, False), ("qkv_rope_normed_lr", 11): (1, True)}, got
