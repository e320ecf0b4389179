"""The decode GEMVs that read W from shared memory (case_studies/llama32_1b_decode/linear), on a GPU, bit for bit
against the plain ones: the same products in the same order, only where W comes from differs.

- `_ring` (gemv_residual_ring, gemv_swiglu_normed_ring, qkv_rope_normed_ring, lm_head_ring): W's first K chunk
  from a shared-memory slot that the prefetch entry's bulk copies filled (linked alone, the entry runs right
  before the task).
- `_lr` (gemv_residual_lr, ...): W from the kernel's loader ring, which the loader warp fills ahead of the compute
  warps (linked alone: a persistent kernel with one loader warp a CTA), from W packed by linear/packing.py (so
  these tests check the packing too). `_lr_ahead`: the same object linked with `load_ahead` 2, its loader also
  asking L2 for the CTA's tasks two on (the W is the same; a request past the call's tasks would fault);
  `_lr_lines` likewise, its requests as line prefetches by the loader's lanes (LR_L2_ASKS 7).
  `_lr_if1`: linked with `loader_in_flight` 1, the loader issuing a slot's copy only once the one before landed.
  `_lr_ifb1`: linked with `loader_in_flight_behind` 1, so paced only where the call's slots are filled the first time
  on the CTA (their first `slots` positions), then all slots in flight.
  `_lr_ef`: linked with `loader_l2` evict_first, the ring's copies carrying that L2 cache hint.
  `_lr_fr`: `loader_in_flight_behind` 1 until the call's first slot is released (`loader_in_flight_behind_until`
  first_release), the cap asked again while the loader waits.
  `_lr_nwl`: linked with `LR_L2_ASKS` 19, the normed stages reading norm_w with an L2 evict_last hint.
- `lm_head_normed_lr` (and `_nwl`): the LM head with the final norm as its prologue, against rmsnorm followed by
  lm_head.

The first launch runs on 8 CTAs, so each walks many tasks through every slot and both mbarrier phases, partial
slots included (K = 40 and 2056). Fresh random inputs every run (the seed is in the failure message), outputs
poisoned with NaN, batches 1, 3, 8 and 11, K below, at and above the 2048-column chunk (8192: three chunks stream
from global memory), N and I giving several tiles per CTA, every kernel launched twice."""
import os
import sys
from pathlib import Path

import pytest

CASE = Path(__file__).resolve().parent.parent / "case_studies" / "llama32_1b_decode"
sys.path.insert(0, str(CASE))

import decode_parts  # noqa: E402
from linear import packing  # noqa: E402

pytestmark = pytest.mark.gpu
EPS = decode_parts.RMS_EPS
PLAIN = ("gemv_residual", "gemv_swiglu_normed", "qkv_rope_normed", "lm_head")
SUFFIXES = ("_ring", "_lr", "_lr_ahead", "_lr_lines", "_lr_if1", "_lr_ifb1", "_lr_ef", "_lr_fr", "_lr_nwl")
LINK_OPTIONS = {"_ahead": {"load_ahead": 2}, "_lines": {"load_ahead": 2, "geometry": {"LR_L2_ASKS": 7}},
                "_if1": {"loader_in_flight": 1}, "_ifb1": {"loader_in_flight_behind": 1},
                "_ef": {"loader_l2": "evict_first"},
                "_fr": {"loader_in_flight_behind": 1, "loader_in_flight_behind_until": "first_release"},
                "_nwl": {"geometry": {"LR_L2_ASKS": 19}}}  # suffix -> pipeline fields


@pytest.fixture(scope="module")
def kernels(tmp_path_factory):
    parts = decode_parts.RING_PARTS + decode_parts.LOADER_PARTS + tuple(
        p for p in decode_parts.PARTS + decode_parts.NORMED_PARTS + decode_parts.MORE_PARTS
        if p.name in PLAIN + ("rmsnorm",))
    objects = decode_parts.build_all(tmp_path_factory.mktemp("rings"), parts)
    out = {}
    for name in PLAIN + tuple(p + s for p in PLAIN for s in SUFFIXES):
        option = next((o for o in LINK_OPTIONS if name.endswith(o)), "")
        linked = decode_parts.link_alone(objects[name.removesuffix(option)], LINK_OPTIONS.get(option))
        assert linked.ok and "PL189" not in {d.code for d in linked.diagnostics}, [d.render() for d in linked.diagnostics]
        assert ("tile.ahead = 1;" in linked.glue) == (option in ("_ahead", "_lines")), name
        assert ("pl_ring__in_flight = 1u;" in linked.glue) == (option == "_if1"), name
        assert ("pl::ring::refills_until(" in linked.glue) == (option in ("_ifb1", "_fr")), name
        assert ("pl_ring__behind_until_release = 1u;" in linked.glue) == (option == "_fr"), name
        assert ("pl_ring__evict_first = 1u;" in linked.glue) == (option == "_ef"), name
        if "_lr" in name:  # a load entry makes a persistent kernel with a loader warp
            assert linked.manifest.schedule == "persistent" and linked.manifest.block == (288, 1, 1)
        out[name] = linked.kernel()
    for name in ("rmsnorm", "lm_head_normed_lr", "lm_head_normed_lr_nwl"):  # the normed head, and its control
        linked = decode_parts.link_alone(objects[name.removesuffix("_nwl")], LINK_OPTIONS["_nwl"] if
                                         name.endswith("_nwl") else None)
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


def _w(w, suffix, component, n):
    """W as the component of that suffix takes it: packed for the loader ring's."""
    return packing.pack(w, component + "_lr", n) if suffix.startswith("_lr") else w


def _same(got, want, what):
    import torch
    assert torch.equal(got.view(torch.int16), want.view(torch.int16)), \
        f"{what}: {(got.float() - want.float()).abs().nan_to_num(1e9).max()}"


@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize("B", [1, 3, 8, 11])
@pytest.mark.parametrize("N,K", [(2048, 2048), (2048, 8192), (1000, 40), (4104, 2056)], ids=str)
def test_gemv_residual(kernels, suffix, B, N, K):
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
        kernels["gemv_residual" + suffix].launch(w=_w(w, suffix, "gemv_residual", N), x=x, r=r, y=got, B=B, N=N, K=K,
                                                 grid=8 if launch == 0 else None)
        torch.cuda.synchronize()
        _same(got, want, f"{suffix} B={B} N={N} K={K} seed={seed} launch {launch}")


@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize("B", [1, 3, 8, 11])
@pytest.mark.parametrize("I,K", [(8192, 2048), (1001, 40), (4100, 2056)], ids=str)
def test_gemv_swiglu_normed(kernels, suffix, B, I, K):
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
        kernels["gemv_swiglu_normed" + suffix].launch(w=_w(w, suffix, "gemv_swiglu_normed", I), x=x, norm_w=norm_w,
                                                      eps=EPS, h=got, B=B, I=I, K=K,
                                                      grid=8 if launch == 0 else None)
        torch.cuda.synchronize()
        _same(got, want, f"{suffix} B={B} I={I} K={K} seed={seed} launch {launch}")


@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize("B", [1, 3, 8])
@pytest.mark.parametrize("K", [2048, 40])
def test_qkv_rope_normed(kernels, suffix, B, K):
    import torch
    seed = int.from_bytes(os.urandom(4), "little")
    g = _gen(seed)
    Lmax = 64
    w = (torch.randn(decode_parts.QKV, K, generator=g, device="cuda") / K ** 0.5).to(torch.bfloat16)
    x = (3 * torch.randn(B, K, generator=g, device="cuda")).to(torch.bfloat16)
    norm_w = (1 + 0.1 * torch.randn(K, generator=g, device="cuda")).to(torch.bfloat16)
    pos = torch.randint(0, Lmax, (B,), generator=g, device="cuda", dtype=torch.int32)
    inv_freq = torch.tensor(decode_parts.llama3_inv_freq(), dtype=torch.float32, device="cuda")
    outs = {}
    for name in ("qkv_rope_normed", "qkv_rope_normed" + suffix):
        q, kc, vc = _nan(B, 32, 64), _nan(B * 8, Lmax, 64), _nan(B * 8, Lmax, 64)
        wk = _w(w, suffix, "qkv_rope_normed", 0) if name.endswith(suffix) else w
        kernels[name].launch(w=wk, x=x, norm_w=norm_w, eps=EPS, pos=pos, inv_freq=inv_freq, q=q, k_cache=kc,
                             v_cache=vc, B=B, K=K, Lmax=Lmax, grid=8 if name.endswith(suffix) else None)
        torch.cuda.synchronize()
        outs[name] = (q, kc, vc)
    for got, want, what in zip(outs["qkv_rope_normed" + suffix], outs["qkv_rope_normed"], ("q", "k_cache", "v_cache")):
        _same(got, want, f"{suffix} {what} B={B} K={K} seed={seed}")


@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize("B", [1, 3, 8])
@pytest.mark.parametrize("V,K", [(decode_parts.VOCAB, 2048), (1001, 40)], ids=str)
def test_lm_head(kernels, suffix, B, V, K):
    import torch
    seed = int.from_bytes(os.urandom(4), "little")
    g = _gen(seed)
    w = (torch.randn(V, K, generator=g, device="cuda") / K ** 0.5).to(torch.bfloat16)
    x = torch.randn(B, K, generator=g, device="cuda").to(torch.bfloat16)
    outs = {}
    for name in ("lm_head", "lm_head" + suffix):
        logits = _nan(B, V)
        part = torch.full(decode_parts.argmax_workspace_shape(B, V), -1, dtype=torch.int64, device="cuda")
        wk = _w(w, suffix, "lm_head", V) if name.endswith(suffix) else w
        kernels[name].launch(w=wk, x=x, logits=logits, part=part.view(torch.uint64), B=B, V=V, K=K,
                             grid=16 if name.endswith(suffix) else None)
        torch.cuda.synchronize()
        outs[name] = (logits, part)
    _same(outs["lm_head" + suffix][0], outs["lm_head"][0], f"{suffix} logits B={B} V={V} K={K} seed={seed}")
    assert torch.equal(outs["lm_head" + suffix][1], outs["lm_head"][1]), \
        f"{suffix} argmax keys B={B} V={V} K={K} seed={seed}"


@pytest.mark.parametrize("suffix", ["", "_nwl"])
@pytest.mark.parametrize("B", [1, 3, 8, 11])
@pytest.mark.parametrize("V,K", [(decode_parts.VOCAB, 2048), (1001, 40), (1001, 2056)], ids=str)
def test_lm_head_normed_lr_is_rmsnorm_then_the_head(kernels, suffix, B, V, K):
    """lm_head_normed_lr (the final norm as the head's prologue, W from the loader ring) against rmsnorm followed
    by the plain lm_head, bit for bit: logits and argmax keys; launched on 16 CTAs, then on the whole grid."""
    import torch
    seed = int.from_bytes(os.urandom(4), "little")
    g = _gen(seed)
    w = (torch.randn(V, K, generator=g, device="cuda") / K ** 0.5).to(torch.bfloat16)
    x = (3 * torch.randn(B, K, generator=g, device="cuda")).to(torch.bfloat16)
    norm_w = (1 + 0.1 * torch.randn(K, generator=g, device="cuda")).to(torch.bfloat16)
    shape = decode_parts.argmax_workspace_shape(B, V)
    xn, want = _nan(B, K), _nan(B, V)
    want_part = torch.full(shape, -1, dtype=torch.int64, device="cuda")
    kernels["rmsnorm"].launch(x=x, weight=norm_w, xn=xn, eps=EPS, B=B, H=K)
    kernels["lm_head"].launch(w=w, x=xn, logits=want, part=want_part.view(torch.uint64), B=B, V=V, K=K)
    packed = packing.pack(w, "lm_head_lr", V)
    for launch in range(2):
        got = _nan(B, V)
        part = torch.full(shape, -1, dtype=torch.int64, device="cuda")
        kernels["lm_head_normed_lr" + suffix].launch(w=packed, x=x, norm_w=norm_w, eps=EPS, logits=got,
                                            part=part.view(torch.uint64), B=B, V=V, K=K,
                                            grid=16 if launch == 0 else None)
        torch.cuda.synchronize()
        _same(got, want, f"lm_head_normed_lr{suffix} logits B={B} V={V} K={K} seed={seed} launch {launch}")
        assert torch.equal(part, want_part), f"lm_head_normed_lr{suffix} argmax keys B={B} V={V} K={K} seed={seed}"


@pytest.mark.parametrize("component,n,K", [("gemv_residual_lr", 1000, 40), ("gemv_swiglu_normed_lr", 1001, 72),
                                           ("qkv_rope_normed_lr", 0, 40), ("lm_head_lr", 1001, 2056)], ids=str)
def test_packing_places_every_element(component, n, K):
    """linear/packing.py's pack (torch, on the GPU) puts each element where its pure `source` says: W's values are
    their own positions (from 1: 0 is the padding's), so every packed element names the element it holds."""
    import torch
    rows = 3072 if component.startswith("qkv") else 2 * n if "swiglu" in component else n
    w = torch.arange(1, rows * K + 1, device="cuda", dtype=torch.int64).reshape(rows, K)
    got = packing.pack(w.view(1, rows, K), component, n)[0].flatten().tolist()
    assert tuple(packing.pack(w, component, n).shape) == packing.packed_shape(component, n, K)
    table = packing.task_rows(component, n)
    want = [(lambda s: 0 if s is None else s[0] * K + s[1] + 1)(packing.source(table, K, i)) for i in range(len(got))]
    assert got == want


def test_a_profiled_loader_records_each_task_it_loads_on_the_tasks_sm(kernels, tmp_path):
    """lm_head_lr linked with load_ahead 2 and a task profile: the logits as the plain head's, and besides each
    task's record the loader's (runtime/profile.py: the loader flag), one per task, written on the SM that ran the
    task (a CTA's loader walks the CTA's own tasks), its stamps in order (got to the task, L2 requests ahead out,
    slots acquired and copies issued); loader_leads() reads them."""
    import torch
    from pipelink.runtime import profile
    objects = decode_parts.build_all(tmp_path, tuple(p for p in decode_parts.LOADER_PARTS if p.name == "lm_head_lr"))
    linked = decode_parts.link_alone(objects["lm_head_lr"], {"load_ahead": 2, "profile_tasks": 1 << 15})
    assert linked.ok, [d.render() for d in linked.diagnostics]
    kernel = linked.kernel()
    try:
        seed = int.from_bytes(os.urandom(4), "little")
        g = _gen(seed)
        B, V, K = 1, decode_parts.VOCAB, 2048
        w = (torch.randn(V, K, generator=g, device="cuda") / K ** 0.5).to(torch.bfloat16)
        x = torch.randn(B, K, generator=g, device="cuda").to(torch.bfloat16)
        outs = {}
        for name, k in (("lm_head", kernels["lm_head"]), ("lm_head_lr", kernel)):
            logits = _nan(B, V)
            part = torch.full(decode_parts.argmax_workspace_shape(B, V), -1, dtype=torch.int64, device="cuda")
            k.launch(w=_w(w, "_lr", "lm_head", V) if k is kernel else w, x=x, logits=logits,
                     part=part.view(torch.uint64), B=B, V=V, K=K, grid=16 if k is kernel else None)
            torch.cuda.synchronize()
            outs[name] = logits
        _same(outs["lm_head_lr"], outs["lm_head"], f"profiled lm_head_lr seed={seed}")
        records = kernel.task_profile()
        tasks = {r.task: r for r in records if not r.loader and r.component == "lm_head_lr"}
        loads = [r for r in records if r.loader]
        assert len(tasks) == -(-V // decode_parts.LM_ROWS) and sorted(r.task for r in loads) == sorted(tasks)
        assert {r.component for r in loads} == {"lm_head_lr"}
        for r in loads:
            assert r.start <= r.ready <= r.done <= r.notified and r.sm == tasks[r.task].sm, r
        (lead,) = profile.loader_leads(records, 1, set())
        assert lead.tasks == len(tasks) and lead.blocked_us > 0.0 and 0.0 <= lead.late <= 1.0
    finally:
        kernel.unload()


MLP_PIECES = {"pipeline": 1, "name": "mlp_pieces", "deal": "continue", "calls": [
    {"name": "gate_up", "component": "gemv_swiglu_normed_lr", "bind": {"w": "w_gu", "K": "H"}},
    {"name": "down", "component": "gemv_residual_lr_pieces",
     "bind": {"w": "w_down", "x": "h", "r": "x", "y": "y", "N": "H", "K": "I"}}]}


@pytest.mark.parametrize("B", [1, 2, 3, 8])
@pytest.mark.parametrize("H,I", [(2048, 8192), (1000, 2056), (40, 1000)], ids=str)
def test_the_down_projection_reading_hs_pieces_as_they_come(kernels, tmp_path, B, H, I):
    """gate/up -> down (gemv_residual_lr_pieces) linked as one kernel: down waits in its entry for gate/up's pieces
    of h (8 columns a gate/up task, the event h_piece), staging them before each slot of W as far as they are
    ready. On 8 CTAs and on the whole GPU (down's tasks start while other CTAs still run gate/up), bit for bit
    the plain gemv_swiglu_normed then gemv_residual: the same products in the same order. B 1 and 2 keep all of
    h resident and stage it in pieces; 3 and 8 stage h a 2048-column chunk at a time, each after its pieces."""
    import pipelink
    import torch
    objects = decode_parts.build_all(tmp_path, tuple(p for p in decode_parts.LOADER_PARTS
                                                     if p.name in ("gemv_swiglu_normed_lr", "gemv_residual_lr_pieces")))
    linked = pipelink.link([str(objects["gemv_swiglu_normed_lr"]), str(objects["gemv_residual_lr_pieces"])],
                           pipeline=MLP_PIECES)
    assert linked.ok, [d.render() for d in linked.diagnostics]
    assert "down waits n->: for 1 in its entry" in linked.link_map
    k = linked.kernel()
    seed = int.from_bytes(os.urandom(4), "little")
    g = _gen(seed)
    w_gu = (torch.randn(2 * I, H, generator=g, device="cuda") / H ** 0.5).to(torch.bfloat16)
    w_down = (torch.randn(H, I, generator=g, device="cuda") / I ** 0.5).to(torch.bfloat16)
    x = (3 * torch.randn(B, H, generator=g, device="cuda")).to(torch.bfloat16)
    norm_w = (1 + 0.1 * torch.randn(H, generator=g, device="cuda")).to(torch.bfloat16)
    h_want, y_want = _nan(B, I), _nan(B, H)
    kernels["gemv_swiglu_normed"].launch(w=w_gu, x=x, norm_w=norm_w, eps=EPS, h=h_want, B=B, I=I, K=H)
    kernels["gemv_residual"].launch(w=w_down, x=h_want, r=x, y=y_want, B=B, N=H, K=I)
    try:
        for launch in range(3):
            h, y = _nan(B, I), _nan(B, H)
            k.launch(w_gu=packing.pack(w_gu, "gemv_swiglu_normed_lr", I), w_down=packing.pack(w_down, "gemv_residual_lr", H),
                     x=x, norm_w=norm_w, eps=EPS, h=h, y=y, B=B, I=I, H=H, grid=8 if launch == 0 else None)
            torch.cuda.synchronize()
            _same(h, h_want, f"h B={B} H={H} I={I} seed={seed} launch {launch}")
            _same(y, y_want, f"y B={B} H={H} I={I} seed={seed} launch {launch}")
    finally:
        k.unload()
