"""The separate-kernels decode step's wiring on the CPU, in NumPy float64: every launch of
kernels.parts_schedule, with the tensors kernels.call_args hands it, run through a NumPy stand-in for its
component (what the component's README says it computes), must give the logits and greedy tokens of a plain
Llama forward over the same weights, for a few decode steps at batch 2. Small sizes (H 32, I 24, V 40, 2
layers; the heads stay 32 x 64 and 8 x 64). Checks the weight layout (model.stack_layers), the residual chain
and the cache slices; not the kernels themselves (the GPU tests do that)."""
import sys
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")

CASE = Path(__file__).resolve().parent.parent / "case_studies" / "llama32_1b_decode"
sys.path.insert(0, str(CASE))

import decode_kernels as kernels  # noqa: E402
import decode_model as model  # noqa: E402

H, I, V, NL = 32, 24, 40, 2
QH, KVH, D = model.Q_HEADS, model.KV_HEADS, model.HEAD_DIM
EPS = 1e-5


def _hf_state(rng):
    """A Hugging Face style state dict of random float64 weights."""
    s = {"model.embed_tokens.weight": rng.standard_normal((V, H)), "model.norm.weight": 1 + 0.1 * rng.standard_normal(H)}
    s["lm_head.weight"] = s["model.embed_tokens.weight"]
    for l in range(NL):
        p = f"model.layers.{l}."
        s[p + "input_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(H)
        s[p + "post_attention_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(H)
        s[p + "self_attn.q_proj.weight"] = rng.standard_normal((QH * D, H)) / H ** 0.5
        s[p + "self_attn.k_proj.weight"] = rng.standard_normal((KVH * D, H)) / H ** 0.5
        s[p + "self_attn.v_proj.weight"] = rng.standard_normal((KVH * D, H)) / H ** 0.5
        s[p + "self_attn.o_proj.weight"] = rng.standard_normal((H, QH * D)) / (QH * D) ** 0.5
        s[p + "mlp.gate_proj.weight"] = rng.standard_normal((I, H)) / H ** 0.5
        s[p + "mlp.up_proj.weight"] = rng.standard_normal((I, H)) / H ** 0.5
        s[p + "mlp.down_proj.weight"] = rng.standard_normal((H, I)) / I ** 0.5
    return s


def _inv_freq():
    return 500000.0 ** (-np.arange(0, D, 2) / D)


def _norm(x, w):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS) * w


def _rope(t, pos, inv_freq):
    """Half-split rotary embedding: t [..., 64] at position pos."""
    ang = pos * inv_freq
    c, s = np.cos(ang), np.sin(ang)
    a, b = t[..., :D // 2], t[..., D // 2:]
    return np.concatenate([a * c - b * s, b * c + a * s], -1)


def _silu(x):
    return x / (1 + np.exp(-x))


def _reference(state, tokens_per_step):
    """A plain Llama forward, one token per batch row per step: the logits of every step."""
    B = len(tokens_per_step[0])
    cache = [([[] for _ in range(B)], [[] for _ in range(B)]) for _ in range(NL)]
    out = []
    for pos, toks in enumerate(tokens_per_step):
        logits = []
        for b, tok in enumerate(toks):
            x = state["model.embed_tokens.weight"][tok]
            for l in range(NL):
                p = f"model.layers.{l}."
                a = _norm(x, state[p + "input_layernorm.weight"])
                q = (state[p + "self_attn.q_proj.weight"] @ a).reshape(QH, D)
                k = (state[p + "self_attn.k_proj.weight"] @ a).reshape(KVH, D)
                v = (state[p + "self_attn.v_proj.weight"] @ a).reshape(KVH, D)
                q, k = _rope(q, pos, _inv_freq()), _rope(k, pos, _inv_freq())
                cache[l][0][b].append(k)
                cache[l][1][b].append(v)
                K, Vv = np.stack(cache[l][0][b], 1), np.stack(cache[l][1][b], 1)  # [KVH, L, D]
                o = np.empty((QH, D))
                for hq in range(QH):
                    h = hq // (QH // KVH)
                    sc = K[h] @ q[hq] / D ** 0.5
                    w = np.exp(sc - sc.max())
                    o[hq] = (w / w.sum()) @ Vv[h]
                x = x + state[p + "self_attn.o_proj.weight"] @ o.reshape(-1)
                m = _norm(x, state[p + "post_attention_layernorm.weight"])
                g, u = state[p + "mlp.gate_proj.weight"] @ m, state[p + "mlp.up_proj.weight"] @ m
                x = x + state[p + "mlp.down_proj.weight"] @ (_silu(g) * u)
            logits.append(state["lm_head.weight"] @ _norm(x, state["model.norm.weight"]))
        out.append(np.stack(logits))
    return out


def _run_unit(unit, a):
    """What each component computes, in NumPy, writing its outputs in place."""
    if unit == "embed":
        a["x"][:] = a["w"][a["token"]]
    elif unit == "rmsnorm":
        a["xn"][:] = _norm(a["x"], a["weight"])
    elif unit == "qkv_rope_normed":
        B, Lmax = a["B"], a["Lmax"]
        y = _norm(a["x"], a["norm_w"]) @ a["w"].T
        q = y[:, :QH * D].reshape(B, QH, D)
        k = y[:, QH * D:(QH + KVH) * D].reshape(B, KVH, D)
        v = y[:, (QH + KVH) * D:].reshape(B, KVH, D)
        kc, vc = a["k_cache"].reshape(B, KVH, Lmax, D), a["v_cache"].reshape(B, KVH, Lmax, D)
        for b in range(B):
            p = int(a["pos"][b])
            a["q"][b] = _rope(q[b], p, a["inv_freq"])
            kc[b, :, p] = _rope(k[b], p, a["inv_freq"])
            vc[b, :, p] = v[b]
    elif unit in ("attn_split", "attn_head"):
        B, L = a["B"], a["L"]
        k = a["k"].reshape(B, KVH, -1, D)[:, :, :L]
        v = a["v"].reshape(B, KVH, -1, D)[:, :, :L]
        for b in range(B):
            for hq in range(QH):
                h = hq // (QH // KVH)
                sc = k[b, h] @ a["q"][b, hq] / D ** 0.5
                w = np.exp(sc - sc.max())
                a["o"][b, hq] = (w / w.sum()) @ v[b, h]
    elif unit == "gemv_residual":
        a["y"][:] = a["x"] @ a["w"].T + a["r"]
    elif unit == "gemv_swiglu_normed":
        xn = _norm(a["x"], a["norm_w"])
        g, u = xn @ a["w"][:a["I"]].T, xn @ a["w"][a["I"]:].T
        a["h"][:] = _silu(g) * u
    elif unit == "lm_head":
        a["logits"][:] = a["x"] @ a["w"].T
        a["token"][:] = a["logits"].argmax(-1)
    else:
        raise KeyError(unit)


def test_the_parts_schedule_computes_the_llama_forward():
    rng = np.random.default_rng(7)
    state = _hf_state(rng)
    B, Lmax, steps = 2, 8, 5
    w = model.stack_layers(state, NL, np.concatenate, np.stack)
    w.update(embed_w=state["model.embed_tokens.weight"], w_lm=state["lm_head.weight"],
             final_norm_w=state["model.norm.weight"], inv_freq=_inv_freq())
    shapes = model.weight_shapes(H, I, V, NL)
    assert {n: tuple(v.shape) for n, v in w.items()} == shapes
    t = dict(w)
    t.update({n: np.zeros(s) for n, s in model.scratch_shapes(B, Lmax, H, I, V).items()})
    t.update(k_cache=np.zeros(model.cache_shape(B, Lmax, NL)), v_cache=np.zeros(model.cache_shape(B, Lmax, NL)),
             token=np.zeros(B, dtype=np.int64), pos=np.zeros(B, dtype=np.int64))
    t.update(B=B, H=H, I=I, V=V, NL=NL, eps=EPS, Lmax=Lmax)
    prompt = [[3, 17], [5, 5], [39, 0]]
    fed, got = [], []
    for step in range(steps):
        t["token"][:] = prompt[step] if step < len(prompt) else t["token"]
        fed.append([int(x) for x in t["token"]])
        t["pos"][:] = step
        t["L"] = step + 1
        for unit, layer, call in kernels.parts_schedule(NL, "split" if step % 2 else "head"):
            _run_unit(unit, {**t, **kernels.call_args(call, layer, t)})
        got.append(t["logits"].copy())
        assert list(t["token"]) == list(t["logits"].argmax(-1))
    want = _reference(state, fed)
    for step in range(steps):
        np.testing.assert_allclose(got[step], want[step], rtol=1e-9, atol=1e-9, err_msg=f"step {step}")
