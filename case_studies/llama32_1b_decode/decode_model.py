"""Llama-3.2-1B for the decode case study: the configuration, the reference model (Hugging Face transformers,
random weights or a safetensors checkpoint) and `DecodeModel`, its weights in the layout the pipelink decode
kernels take, shared by the megakernel and every baseline.

The pure helpers (the layout plan, shapes, bytes per step, picking a kernel's arguments) need no torch and are
tested on the CPU (tests/test_llama_decode_driver.py); torch and transformers are imported inside functions.
"""
from __future__ import annotations

from dataclasses import dataclass, field

# The workspaces' extents follow the components' contracts, which decode_parts reads (their only owner).
from decode_parts import argmax_workspace_shape, attn_workspace_shape  # noqa: F401 (attn_workspace_shape: API)

# --- the configuration -------------------------------------------------------------------------------------

HIDDEN = 2048
INTERMEDIATE = 8192
LAYERS = 16
Q_HEADS = 32
KV_HEADS = 8
HEAD_DIM = 64
VOCAB = 128256
QKV_ROWS = (Q_HEADS + 2 * KV_HEADS) * HEAD_DIM  # 3072: q rows, then k rows, then v rows
EPS = 1e-5
ROPE_THETA = 500000.0

LLAMA32_1B = dict(
    hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS,
    num_attention_heads=Q_HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, vocab_size=VOCAB,
    rms_norm_eps=EPS, rope_theta=ROPE_THETA,
    rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192},
    tie_word_embeddings=True, max_position_embeddings=131072,
    hidden_act="silu", attention_bias=False, mlp_bias=False,
)

# The per-layer tensors: name -> the Hugging Face parameters (of layer {l}) concatenated along rows, in order.
LAYER_PLAN = {
    "attn_norm_w": ("model.layers.{l}.input_layernorm.weight",),
    "w_qkv": ("model.layers.{l}.self_attn.q_proj.weight", "model.layers.{l}.self_attn.k_proj.weight",
              "model.layers.{l}.self_attn.v_proj.weight"),
    "w_o": ("model.layers.{l}.self_attn.o_proj.weight",),
    "mlp_norm_w": ("model.layers.{l}.post_attention_layernorm.weight",),
    "w_gu": ("model.layers.{l}.mlp.gate_proj.weight", "model.layers.{l}.mlp.up_proj.weight"),
    "w_down": ("model.layers.{l}.mlp.down_proj.weight",),
}
GLOBAL_PLAN = {
    "embed_w": "model.embed_tokens.weight",
    "final_norm_w": "model.norm.weight",
    "w_lm": "lm_head.weight",  # tied: the same tensor as embed_w
}


def layer_sources(name: str, layer: int) -> list[str]:
    """The Hugging Face parameter names whose row-concatenation is `name`[layer]."""
    return [s.format(l=layer) for s in LAYER_PLAN[name]]


def stack_layers(state: dict, NL: int, cat, stack) -> dict:
    """The per-layer tensors of LAYER_PLAN from a Hugging Face state dict: each layer's sources concatenated
    along rows (`cat(list, 0)`), the layers stacked (`stack(list)`): torch.cat/torch.stack or NumPy's."""
    return {name: stack([cat([state[s] for s in layer_sources(name, l)], 0) for l in range(NL)])
            for name in LAYER_PLAN}


def weight_shapes(H: int = HIDDEN, I: int = INTERMEDIATE, V: int = VOCAB, NL: int = LAYERS) -> dict[str, tuple]:
    """The extents of every weight tensor the kernels take (all bf16 but inv_freq, f32)."""
    qkv = (Q_HEADS + 2 * KV_HEADS) * HEAD_DIM
    return {
        "embed_w": (V, H), "w_lm": (V, H), "final_norm_w": (H,),
        "attn_norm_w": (NL, H), "w_qkv": (NL, qkv, H), "w_o": (NL, H, Q_HEADS * HEAD_DIM),
        "mlp_norm_w": (NL, H), "w_gu": (NL, 2 * I, H), "w_down": (NL, H, I),
        "inv_freq": (HEAD_DIM // 2,),
    }


# W packed for the loader-ring GEMVs (linear/packing.py), made from the row-major weights when a kernel takes them:
# name -> (the row-major weight, the component that reads it, which size is its output: "H", "I", "V" or None).
PACKED_WEIGHTS = {
    "w_qkv_packed": ("w_qkv", "qkv_rope_normed_lr", None),
    "w_o_packed": ("w_o", "gemv_residual_lr", "H"),
    "w_gu_packed": ("w_gu", "gemv_swiglu_normed_lr", "I"),
    "w_down_packed": ("w_down", "gemv_residual_lr", "H"),
    "w_lm_packed": ("w_lm", "lm_head_lr", "V"),
}


def packed_weight_shapes(H: int = HIDDEN, I: int = INTERMEDIATE, V: int = VOCAB, NL: int = LAYERS) -> dict[str, tuple]:
    """The extents of the PACKED_WEIGHTS (layers first where the row-major weight has them)."""
    from linear import packing
    sizes, shapes = {"H": H, "I": I, "V": V, None: 0}, weight_shapes(H, I, V, NL)
    out = {}
    for name, (src, component, size) in PACKED_WEIGHTS.items():
        lead = shapes[src][:-2]
        out[name] = lead + packing.packed_shape(component, sizes[size], shapes[src][-1])
    return out


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def scratch_shapes(B: int, Lmax: int, H: int = HIDDEN, I: int = INTERMEDIATE, V: int = VOCAB) -> dict[str, tuple]:
    """The activations and workspaces a step writes (dtype by name: `scratch_dtypes`)."""
    return {
        "x": (B, H), "x1": (B, H), "xn": (B, H),
        "q": (B, Q_HEADS, HEAD_DIM), "o": (B, Q_HEADS, HEAD_DIM), "h": (B, I),
        "attn_part": attn_workspace_shape(B, Lmax), "logits": (B, V), "head_part": argmax_workspace_shape(B, V),
        "attn_arrived": (B * KV_HEADS,),  # attn_last's counts: zeros, and zeros again after every launch
    }


def scratch_dtypes() -> dict[str, str]:
    return {"x": "bf16", "x1": "bf16", "xn": "bf16", "q": "bf16", "o": "bf16", "h": "bf16",
            "attn_part": "f32", "logits": "bf16", "head_part": "u64", "attn_arrived": "i32"}


def cache_shape(B: int, Lmax: int, NL: int = LAYERS) -> tuple[int, int, int, int]:
    """k_cache and v_cache: [NL, B * 8, Lmax, 64], head-major ([layer][b][kv head][position][dim])."""
    return (NL, B * KV_HEADS, Lmax, HEAD_DIM)


def weight_bytes_per_step(B: int = 1, H: int = HIDDEN, I: int = INTERMEDIATE, V: int = VOCAB,
                          NL: int = LAYERS) -> int:
    """Bytes of weights one decode step reads at least once (bf16): every layer's norms and matrices, the
    final norm, the LM head, and the B embedding rows. The GEMVs read W once for up to 8 batch rows, so this
    is the floor at B <= 8."""
    s = weight_shapes(H, I, V, NL)
    per_layer = sum(_prod(s[n][1:]) for n in ("attn_norm_w", "w_qkv", "w_o", "mlp_norm_w", "w_gu", "w_down"))
    return 2 * (NL * per_layer + _prod(s["w_lm"]) + _prod(s["final_norm_w"]) + B * H)


def kv_bytes_per_step(B: int, L: int, NL: int = LAYERS) -> int:
    """Bytes of KV cache the attention reads in one step over L positions (K and V, bf16)."""
    return 2 * NL * B * KV_HEADS * L * HEAD_DIM * 2


HBM_PEAK = 4.8e12  # H200 HBM3e, bytes/s: the case study's machine
# Other cards' HBM peaks (bytes/s, datasheets), for the report of a run on one of them: the first name the
# machine's contains.
HBM_PEAKS = (("H200", 4.8e12), ("H100 NVL", 3.9e12), ("H100 PCIe", 2.0e12), ("H100", 3.35e12))


def hbm_peak(machine: str) -> tuple[str, float, bool]:
    """(card, HBM peak in bytes/s, known) for the machine a run names (nvidia-smi's name first); the H200's
    peak, known False, for a card not listed."""
    for name, peak in HBM_PEAKS:
        if name in (machine or ""):
            return name, peak, True
    return "H200", HBM_PEAK, False


def floor_us(nbytes: int, peak: float = HBM_PEAK) -> float:
    """The time reading `nbytes` at the peak bandwidth takes, in microseconds."""
    return nbytes / peak * 1e6


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def pick_args(names, call: dict, common: dict, kernel: str = "kernel") -> dict:
    """The keyword arguments of a kernel whose parameters are `names`: each from `call` (this launch's
    tensors) or else `common` (the step's shared scalars and tensors); what the kernel does not take is
    dropped. A parameter found in neither raises KeyError naming it."""
    out = {}
    for n in names:
        if n in call:
            out[n] = call[n]
        elif n in common:
            out[n] = common[n]
        else:
            raise KeyError(f"{kernel}: no value for parameter '{n}' (this launch has {sorted(call)}, "
                           f"the step {sorted(common)})")
    return out


# --- the reference model (torch, transformers) -------------------------------------------------------------

def hf_config():
    from transformers import LlamaConfig
    return LlamaConfig(**LLAMA32_1B)


def build_reference(seed: int = 0, checkpoint: str | None = None, device: str = "cuda"):
    """LlamaForCausalLM in bf16 on `device`: random weights from `seed`, or a safetensors checkpoint (a file
    or a directory of *.safetensors) loaded over them. Eval mode, sdpa attention."""
    import torch
    from transformers import LlamaForCausalLM

    config = hf_config()
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)
    with torch.device(device):
        model = LlamaForCausalLM(config)
    # The rotary frequencies stay float32, as a bf16 checkpoint loaded with from_pretrained keeps them
    # (`.to(bfloat16)` would round the buffers too).
    rotary = model.model.rotary_emb
    fp32_buffers = {name: buf.detach().clone() for name, buf in rotary.named_buffers(recurse=False)
                    if buf.is_floating_point()}
    model = model.to(torch.bfloat16).eval()
    for name, buf in fp32_buffers.items():
        setattr(rotary, name, buf)
    if checkpoint:
        state = load_safetensors(checkpoint)
        missing, unexpected = model.load_state_dict(state, strict=False)
        missing = [m for m in missing if m != "lm_head.weight" and "rotary_emb" not in m]
        if missing or unexpected:
            raise ValueError(f"checkpoint {checkpoint}: missing {missing[:5]}, unexpected {unexpected[:5]}")
        if getattr(config, "tie_word_embeddings", False) and hasattr(model, "tie_weights"):
            model.tie_weights()
    return model


def load_safetensors(path: str) -> dict:
    from pathlib import Path
    from safetensors.torch import load_file
    p = Path(path)
    files = sorted(p.glob("*.safetensors")) if p.is_dir() else [p]
    if not files:
        raise FileNotFoundError(f"no .safetensors under {path}")
    state = {}
    for f in files:
        state.update(load_file(str(f), device="cpu"))
    return state


@dataclass
class DecodeModel:
    """The weights in the pipelink decode layout (all contiguous cuda tensors), plus the sizes."""

    tensors: dict                     # name -> tensor (weight_shapes' names)
    H: int = HIDDEN
    I: int = INTERMEDIATE
    V: int = VOCAB
    NL: int = LAYERS
    eps: float = EPS
    theta: float = ROPE_THETA
    packed_w: dict = field(default_factory=dict)  # (name, rows per task) -> packed W (`packed`)

    def __getitem__(self, name):
        return self.tensors[name]

    @classmethod
    def from_hf(cls, model) -> "DecodeModel":
        import torch
        cfg = model.config
        state = dict(model.named_parameters())
        state.update({k: v for k, v in model.named_buffers()})
        NL = cfg.num_hidden_layers
        stacked = stack_layers({k: v.detach() for k, v in state.items()}, NL, torch.cat, torch.stack)
        t = {name: v.to(torch.bfloat16).contiguous() for name, v in stacked.items()}
        t["embed_w"] = state[GLOBAL_PLAN["embed_w"]].detach().to(torch.bfloat16).contiguous()
        lm = model.get_output_embeddings().weight.detach()
        t["w_lm"] = t["embed_w"] if lm.data_ptr() == state[GLOBAL_PLAN["embed_w"]].data_ptr() \
            else lm.to(torch.bfloat16).contiguous()
        t["final_norm_w"] = state[GLOBAL_PLAN["final_norm_w"]].detach().to(torch.bfloat16).contiguous()
        t["inv_freq"] = model.model.rotary_emb.inv_freq.detach().to(torch.float32).contiguous()
        dm = cls(t, H=cfg.hidden_size, I=cfg.intermediate_size, V=cfg.vocab_size, NL=NL, eps=cfg.rms_norm_eps,
                 theta=float(getattr(cfg, "rope_theta", ROPE_THETA)))
        dm.check()
        return dm

    def packed(self, names, geometry: dict) -> dict:
        """The PACKED_WEIGHTS among `names` (a kernel's parameters), packed for the rows per task of `geometry`
        (the linked kernel's values), by name; each made once per rows per task."""
        from linear import packing
        out = {}
        for name in names:
            if name not in PACKED_WEIGHTS:
                continue
            src, component, size = PACKED_WEIGHTS[name]
            key = (name, packing.rows_per_task(component, geometry))
            if key not in self.packed_w:
                n = {"H": self.H, "I": self.I, "V": self.V, None: 0}[size]
                self.packed_w[key] = packing.pack(self.tensors[src], component, n, geometry)
            out[name] = self.packed_w[key]
        return out

    def check(self) -> None:
        want = weight_shapes(self.H, self.I, self.V, self.NL)
        for name, shape in want.items():
            got = tuple(self.tensors[name].shape)
            if got != shape:
                raise ValueError(f"{name}: shape {got}, the kernels take {shape}")
            if not self.tensors[name].is_contiguous() or self.tensors[name].data_ptr() % 16:
                raise ValueError(f"{name}: not contiguous or not 16-byte aligned")


@dataclass
class DecodeState:
    """One batch size and cache capacity: the KV caches, the scratch, the token and position tensors."""

    B: int
    Lmax: int
    tensors: dict

    def __getitem__(self, name):
        return self.tensors[name]

    @classmethod
    def allocate(cls, dm: DecodeModel, B: int, Lmax: int, device: str = "cuda") -> "DecodeState":
        import torch
        dtypes = {"bf16": torch.bfloat16, "f32": torch.float32, "u64": torch.int64, "i32": torch.int32}
        t = {}
        for name, shape in scratch_shapes(B, Lmax, dm.H, dm.I, dm.V).items():
            dtype = scratch_dtypes()[name]
            t[name] = torch.zeros(shape, dtype=dtypes[dtype], device=device)
            if dtype == "u64":  # the launcher takes torch.uint64 for a u64 parameter (a view of int64 storage)
                t[name] = t[name].view(torch.uint64)
        for name in ("k_cache", "v_cache"):
            t[name] = torch.zeros(cache_shape(B, Lmax, dm.NL), dtype=torch.bfloat16, device=device)
        t["token"] = torch.zeros(B, dtype=torch.int32, device=device)
        t["pos"] = torch.zeros(B, dtype=torch.int32, device=device)
        return cls(B, Lmax, t)

    def fill_cache_random(self, seed: int = 1) -> None:
        import torch
        g = torch.Generator(device=self["k_cache"].device).manual_seed(seed)
        for name in ("k_cache", "v_cache"):
            self[name].normal_(generator=g)

    def common_args(self, dm: DecodeModel, L: int) -> dict:
        """Every argument of a whole decode step by the megakernel's parameter names (L = pos + 1)."""
        args = dict(dm.tensors)
        args.update(self.tensors)
        args.update(B=self.B, H=dm.H, I=dm.I, V=dm.V, NL=dm.NL, eps=dm.eps, L=L, Lmax=self.Lmax,
                    theta=dm.theta)
        return args
