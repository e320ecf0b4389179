"""The Llama-3.2-1B decode parts: building each team's components against their contracts and linking them.

- norm/   rmsnorm (one row per task, notifies `normed`)
- linear/ gemv_bf16, gemv_residual (each linked alone) and gemv_normed (waits for `normed`)
- pipelines/norm_gemv.json: rmsnorm -> gemv_normed in one persistent kernel
- attention/ attn_head (linked alone), attn_split and attn_merge (flash-decoding)
- pipelines/attn_split.json: attn_split -> attn_merge in one persistent kernel
- linear/ qkv_rope (fused q/k/v GEMV, RoPE, KV-cache append) and gemv_swiglu (each linked alone), lm_head
  and argmax_merge (greedy decoding head)
- pipelines/lm_head_argmax.json: lm_head -> argmax_merge in one persistent kernel
- linear/ qkv_rope_normed and gemv_swiglu_normed: the two with the RMSNorm as their prologue (each linked alone)
- linear/ *_ring (gemv_residual, gemv_swiglu_normed, qkv_rope_normed, lm_head): W through a shared-memory ring
  their prefetch entries fill
- embedding/ embed: the token embedding lookup (linked alone)
- pipelines/decode_step*.json: the whole step (embedding, NL layers, final norm, greedy head) in one kernel
- llama3_inv_freq: the rotary frequencies qkv_rope takes, Llama-3 frequency scaling included

The team folders' `build.sh` run `pipelink build` on the same sources and contracts; this module builds
with `pipelink.authoring.builder.build_component` in-process, for the tests.
"""
from __future__ import annotations

import json
import math
import os
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
PIPELINE = HERE / "pipelines" / "norm_gemv.json"
ATTN_PIPELINE = HERE / "pipelines" / "attn_split.json"
HEAD_PIPELINE = HERE / "pipelines" / "lm_head_argmax.json"

# Llama-3.2-1B: hidden 2048, intermediate 8192, 32 query heads and 8 KV heads of 64.
HIDDEN, INTERMEDIATE, HEAD_DIM, Q_HEADS, KV_HEADS = 2048, 8192, 64, 32, 8
QKV = (Q_HEADS + 2 * KV_HEADS) * HEAD_DIM  # 3072: the fused q/k/v projection's rows
VOCAB = 128256
ROPE_THETA = 500000.0
# config.rope_scaling of Llama-3.2-1B (rope_type "llama3")
ROPE_SCALING = {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}
RMS_EPS = 1e-5


def _f32(v: float) -> float:
    """v rounded to the nearest float32 (as a Python float)."""
    return struct.unpack("<f", struct.pack("<f", v))[0]


def llama3_inv_freq(theta: float = 500000.0, factor: float = 32.0, low: float = 1.0, high: float = 4.0,
                    original: int = 8192, head_dim: int = 64) -> list[float]:
    """The head_dim / 2 rotary frequencies (radians per position) of Llama-3's scaled RoPE, as transformers'
    ROPE_INIT_FUNCTIONS["llama3"] computes them in float32: every step rounded to float32 in torch's order
    (`scalar / tensor` is `tensor.reciprocal() * scalar` there). The one power is rounded from float64, so an
    entry may differ from torch's powf by an ulp."""
    low_wavelen, high_wavelen = original / low, original / high
    two_pi = _f32(2 * math.pi)
    out = []
    for i in range(0, head_dim, 2):
        inv = _f32(1.0 / _f32(theta ** _f32(i / head_dim)))           # 1 / base^(2i/d)
        wavelen = _f32(_f32(1.0 / inv) * two_pi)                       # 2 pi / inv_freq
        scaled = _f32(inv / factor) if wavelen > low_wavelen else inv  # long wavelengths: divided by factor
        if not wavelen < high_wavelen and not wavelen > low_wavelen:   # in between: interpolated
            smooth = _f32(_f32(_f32(_f32(1.0 / wavelen) * original) - low) / _f32(high - low))
            scaled = _f32(_f32(_f32(_f32(1.0 - smooth) * scaled) / factor) + _f32(smooth * scaled))
        out.append(scaled)
    return out


@dataclass(frozen=True)
class Part:
    folder: str   # the team's folder
    name: str     # the component's name: <folder>/<name>.cu and <name>.json

    @property
    def source(self) -> Path:
        return HERE / self.folder / f"{self.name}.cu"

    @property
    def contract(self) -> Path:
        return HERE / self.folder / f"{self.name}.json"


def provided(part: Part, name: str) -> int:
    """A constant the part's contract provides (a link-time constant: its default), read from the contract
    so that the team's folder stays its only owner."""
    value = json.loads(part.contract.read_text())["geometry"]["provides"][name]
    return value["default"] if isinstance(value, dict) else value


PARTS = (Part("norm", "rmsnorm"), Part("linear", "gemv_bf16"), Part("linear", "gemv_residual"),
         Part("linear", "gemv_normed"))
ALONE = ("rmsnorm", "gemv_bf16", "gemv_residual")   # each linked alone as its own kernel
PIPELINED = ("rmsnorm", "gemv_normed")              # linked by pipelines/norm_gemv.json

ATTENTION_PARTS = (Part("attention", "attn_head"), Part("attention", "attn_split"), Part("attention", "attn_merge"),
                   Part("attention", "attn_last"))
ATTN_PIPELINED = ("attn_split", "attn_merge")       # linked by pipelines/attn_split.json
PART_RECORD = provided(ATTENTION_PARTS[1], "PART_RECORD")  # f32 per (b, h, split): acc [4][64], m [4], l [4]


def attn_workspace_shape(B: int, L: int) -> tuple[int, ...]:
    """The extents attn_split's contract declares for its workspace `part` ([B * 8, S, PART_RECORD], S the
    number of splits it cuts the context into), evaluated from the contract's own expressions."""
    from pipelink.core.expr import parse

    contract = json.loads(ATTENTION_PARTS[1].contract.read_text())
    (part,) = [p for p in contract["entry"]["params"] if p["name"] == "part"]
    env = {"B": B, "L": L, **{k: provided(ATTENTION_PARTS[1], k) for k in contract["geometry"]["provides"]},
           **{k: v["default"] for k, v in contract["geometry"].get("consumes", {}).items()}}  # a pipeline may give less
    return tuple(parse(extent).evaluate(env) for extent in part["shape"])


def build_all(out_dir: Path, parts=PARTS) -> dict[str, Path]:
    """Build every part (of `parts`) into out_dir/<name>.o; raises with the diagnostics if one fails."""
    from pipelink.authoring.builder import build_component
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.core.loader import load_contract_file

    out_dir.mkdir(parents=True, exist_ok=True)

    def one(part):
        sink = DiagnosticSink()
        contract = load_contract_file(part.contract, sink)
        out = out_dir / f"{part.name}.o"
        ok = contract is not None and build_component(contract, part.contract.read_bytes(), part.source, out, sink)
        if not ok or sink.errors:
            raise RuntimeError(f"building {part.name} failed:\n" + "\n".join(d.render() for d in sink.items))
        return part.name, out

    # Each build is an nvcc process: as many at once as there are cores.
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        return dict(pool.map(one, parts))


def link_alone(obj: Path, pipeline: dict | None = None):
    """One component linked alone as its own kernel (pipelink.link's result); `pipeline`: link options (a pipeline
    file's fields) other than the defaults."""
    import pipelink
    return pipelink.link([str(obj)], pipeline=dict(pipeline, pipeline=1) if pipeline else None)


def link_norm_gemv(objects: dict[str, Path]):
    """rmsnorm -> gemv_normed as one persistent kernel (pipelines/norm_gemv.json)."""
    import pipelink
    return pipelink.link([str(objects[n]) for n in PIPELINED], pipeline=str(PIPELINE))


def build_attention(out_dir: Path) -> dict[str, Path]:
    """Build the attention team's three components into out_dir/<name>.o."""
    return build_all(out_dir, ATTENTION_PARTS)


def link_attn_split(objects: dict[str, Path]):
    """attn_split -> attn_merge (flash-decoding) as one persistent kernel (pipelines/attn_split.json)."""
    import pipelink
    return pipelink.link([str(objects[n]) for n in ATTN_PIPELINED], pipeline=str(ATTN_PIPELINE))


# attn_split -> the output projection that merges the splits' records itself (gemv_residual_lr_merged), as in
# pipelines/decode_step_lrm.json: the splits sized for its 128 CTAs, o_proj after every split task.
ATTN_O_MERGED = {"pipeline": 1, "name": "attn_o_merged", "deal": "continue", "geometry": {"SPLIT_TASKS": 128},
                 "calls": [{"name": "attn_split", "bind": {"part": "part"}},
                           {"name": "o_proj", "component": "gemv_residual_lr_merged",
                            "bind": {"w": "w_o", "part": "part", "r": "x", "y": "y", "K": "H"},
                            "after": ["attn_split"]}]}


def link_attn_o_merged(objects: dict[str, Path]):
    """attn_split -> gemv_residual_lr_merged as one persistent kernel (ATTN_O_MERGED)."""
    import pipelink
    return pipelink.link([str(objects["attn_split"]), str(objects["gemv_residual_lr_merged"])], pipeline=ATTN_O_MERGED)


MORE_PARTS = (Part("linear", "qkv_rope"), Part("linear", "gemv_swiglu"), Part("linear", "lm_head"),
              Part("linear", "argmax_merge"))
MORE_ALONE = ("qkv_rope", "gemv_swiglu", "lm_head")  # each linked alone (lm_head: nobody waits for its event)
HEAD_PIPELINED = ("lm_head", "argmax_merge")        # linked by pipelines/lm_head_argmax.json
LM_ROWS = provided(MORE_PARTS[2], "LM_ROWS")         # lm_head's vocabulary rows per task
SWIGLU_COLS = provided(MORE_PARTS[1], "SWIGLU_COLS")  # gemv_swiglu's outputs per task


NORMED_PARTS = (Part("linear", "qkv_rope_normed"), Part("linear", "gemv_swiglu_normed"))
NORMED_ALONE = ("qkv_rope_normed", "gemv_swiglu_normed")  # each linked alone

EMBED_PARTS = (Part("embedding", "embed"),)
# W through a two-slot shared-memory ring filled by bulk copies from a prefetch entry (linear/ring.cuh):
# pipelines/decode_step_ring.json. Same arithmetic as the plain GEMVs.
RING_PARTS = (Part("linear", "gemv_residual_ring"), Part("linear", "gemv_swiglu_normed_ring"),
              Part("linear", "qkv_rope_normed_ring"), Part("linear", "lm_head_ring"))
EMBED_COLS = provided(EMBED_PARTS[0], "EMBED_COLS")  # embed's columns per task: 256 threads, 16 bytes each
# Every component of the case study, once.
# The same GEMVs with W from the kernel's loader ring (entry.load; pipelines/decode_step_lr.json).
LOADER_PARTS = (Part("linear", "gemv_residual_lr"), Part("linear", "gemv_swiglu_normed_lr"),
                Part("linear", "qkv_rope_normed_lr"), Part("linear", "lm_head_lr"),
                Part("linear", "gemv_residual_lr_pieces"), Part("linear", "gemv_residual_lr_merged"),
                Part("linear", "lm_head_normed_lr"))
# gemv_residual with its task's W asked of L2 before it waits (pipelines/decode_step_pf.json: the output projection).
PF_PARTS = (Part("linear", "gemv_residual_pf"),)
ALL_PARTS = EMBED_PARTS + PARTS + ATTENTION_PARTS + MORE_PARTS + NORMED_PARTS + RING_PARTS + LOADER_PARTS + PF_PARTS


def argmax_workspace_shape(B: int, V: int) -> tuple[int, int]:
    """The extents lm_head's contract declares for its u64 workspace `part`: [B, ceil_div(V, LM_ROWS)]."""
    return (B, -(-V // LM_ROWS))


def build_more(out_dir: Path) -> dict[str, Path]:
    """Build qkv_rope, gemv_swiglu, lm_head and argmax_merge into out_dir/<name>.o."""
    return build_all(out_dir, MORE_PARTS)


def link_lm_head_argmax(objects: dict[str, Path]):
    """lm_head -> argmax_merge (greedy decoding head) as one persistent kernel (pipelines/lm_head_argmax.json)."""
    import pipelink
    return pipelink.link([str(objects[n]) for n in HEAD_PIPELINED], pipeline=str(HEAD_PIPELINE))


def build_normed(out_dir: Path) -> dict[str, Path]:
    """Build qkv_rope_normed and gemv_swiglu_normed into out_dir/<name>.o."""
    return build_all(out_dir, NORMED_PARTS)


def build_embedding(out_dir: Path) -> dict[str, Path]:
    """Build the embedding team's component (embed) into out_dir/embed.o."""
    return build_all(out_dir, EMBED_PARTS)


# --- contract values as an experiment ------------------------------------------------------------------------
# A team tunes its components by changing numbers in its contracts (rows a task, splits). `run.py --values`
# builds the step a second time with other numbers, from copies of the contracts, so both versions alternate
# in one run; the team's files stay as they are.

@dataclass(frozen=True)
class ValueSet:
    """Contract values to build some components with instead of their files': `name` labels the variant
    (`pipelink_split@name`), `values` is ((component, geometry name, value), ...)."""
    name: str
    values: tuple

    def components(self) -> list[str]:
        return sorted({c for c, _, _ in self.values})


def parse_value_set(text: str) -> ValueSet:
    """'NAME:component.KEY=VALUE[,component.KEY=VALUE...]' (e.g. 'qkv8:qkv_rope_normed.QKV_ROWS=8');
    ValueError says what is wrong."""
    name, sep, rest = text.partition(":")
    if not sep or not name or not all(ch.isalnum() or ch in "_-" for ch in name):
        raise ValueError(f"{text!r}: expected NAME:component.KEY=VALUE[,...] with a name of letters, digits, _ or -")
    known = {p.name for p in ALL_PARTS}
    values = []
    for item in rest.split(","):
        target, eq, value = item.partition("=")
        component, dot, key = target.partition(".")
        if not eq or not dot or not key:
            raise ValueError(f"{item!r}: expected component.KEY=VALUE")
        if component not in known:
            raise ValueError(f"{item!r}: no component {component!r} (one of: {', '.join(sorted(known))})")
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"{item!r}: {value!r} is not an integer") from None
        part = next(p for p in ALL_PARTS if p.name == component)
        with_values(json.loads(part.contract.read_text()), {key: number}, component)  # a name it provides
        values.append((component, key, number))
    return ValueSet(name, tuple(values))


def with_values(contract: dict, values: dict[str, int], component: str) -> dict:
    """A copy of `contract` with geometry values replaced; every name must be one the contract provides."""
    doc = json.loads(json.dumps(contract))
    provides = doc.get("geometry", {}).get("provides", {})
    for key, value in values.items():
        if key not in provides:
            raise ValueError(f"{component} provides no {key} (it provides: {', '.join(sorted(provides)) or 'nothing'})")
        if isinstance(provides[key], dict):
            provides[key]["default"] = value
        else:
            provides[key] = value
    return doc


@dataclass(frozen=True)
class _PartAt:
    """A part whose contract is a copy elsewhere (build_all reads name, source, contract)."""
    name: str
    source: Path
    contract: Path


def build_value_set(out_dir: Path, vset: ValueSet, objects: dict[str, Path]) -> dict[str, Path]:
    """`objects` with the components `vset` names rebuilt from copies of their contracts carrying its values
    (written to out_dir/<component>.json)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    by_name = {p.name: p for p in ALL_PARTS}
    copies = []
    for component in vset.components():
        part = by_name[component]
        values = {k: v for c, k, v in vset.values if c == component}
        doc = with_values(json.loads(part.contract.read_text()), values, component)
        path = out_dir / f"{component}.json"
        path.write_text(json.dumps(doc, indent=2) + "\n")
        copies.append(_PartAt(component, part.source, path))
    return {**objects, **build_all(out_dir, tuple(copies))}
