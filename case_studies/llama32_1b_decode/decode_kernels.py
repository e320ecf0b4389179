"""The pipelink variants of a decode step over one `DecodeModel`:

- `MegaStep`: the whole step as one linked kernel (pipelines/decode_step.json: split-KV attention,
  attn_split -> attn_merge; pipelines/decode_step_head.json: attn_head over the whole context).
- `PartsStep`: the same components linked as separate kernels (each alone; attn_split -> attn_merge and
  lm_head -> argmax_merge as their two-component pipelines, since the second half waits on the first's event),
  launched in order per layer, meant to be captured into one CUDA graph; linked with dependent_launch where the
  link allows it.

Building and linking run on the CPU; loading and launching need the GPU (torch is imported inside functions).
The launch order of `PartsStep` is the pure `parts_schedule`, tested on the CPU.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import decode_parts  # noqa: E402

MEGA_PIPELINES = {"split": HERE / "pipelines" / "decode_step.json",
                  "head": HERE / "pipelines" / "decode_step_head.json",
                  "ring": HERE / "pipelines" / "decode_step_ring.json",
                  "ring_od": HERE / "pipelines" / "decode_step_ring_od.json",
                  "last": HERE / "pipelines" / "decode_step_last.json",
                  "lr": HERE / "pipelines" / "decode_step_lr.json",
                  "lr_last": HERE / "pipelines" / "decode_step_lr_last.json",
                  "lrp": HERE / "pipelines" / "decode_step_lrp.json",
                  "lrm": HERE / "pipelines" / "decode_step_lrm.json",
                  "lr_hn": HERE / "pipelines" / "decode_step_lr_hn.json",
                  "pf": HERE / "pipelines" / "decode_step_pf.json"}
# Steps linked from one of those pipelines with other link options: variant -> (pipeline variant, fields).
# X_per_task: every task adds to its call's whole-call events (the glue before they were counted per CTA).
MEGA_OPTIONS = {f"{v}_per_task": (v, {"counts_per_cta": False}) for v in MEGA_PIPELINES}
# lr_sN: the loader step with a ring of N slots (the pipeline's loader_slots; decode_step_lr.json has 5 since
# 2026-12-06 09:09, so lr_s4 is the step before).
MEGA_OPTIONS.update({f"lr_s{n}": ("lr", {"loader_slots": n}) for n in (2, 3, 4, 5, 8, 10)})
# X_deal: the static walk deals each call's tasks on from where the previous call's ended (pipeline `deal`).
MEGA_OPTIONS.update({f"{v}_deal": (v, {"deal": "continue"}) for v in ("split", "head", "lr")})
# X_waitN: waiters sleep N ns between two reads of a counter (pipeline `wait_backoff_ns`; 64 by default).
MEGA_OPTIONS.update({f"{v}_wait{n}": (v, {"wait_backoff_ns": n}) for v in ("split", "head") for n in (0, 16, 256)})
# X_stN: attention's splits sized for N tasks (the pipeline's `geometry` SPLIT_TASKS; 256 by default, about the CTAs
# of two blocks an SM, where the loader step runs one).
MEGA_OPTIONS.update({f"{v}_st{n}": (v, {"geometry": {"SPLIT_TASKS": n}}) for v in ("split", "lr") for n in (128,)})
# decode_step_lr.json deals on with 128 splits' tasks (measured faster at B 1 and 8, ctx 1024 and 4096): the
# lr_deal_st128* names below are lr* kept under the names their results carry; lr_restart_st256 is the loader
# step as it was before (each call from CTA 0, splits for 256 tasks).
MEGA_OPTIONS["lr_deal_st128"] = ("lr", {"deal": "continue", "geometry": {"SPLIT_TASKS": 128}})
MEGA_OPTIONS["lr_restart_st256"] = ("lr", {"deal": "restart", "geometry": {"SPLIT_TASKS": 256}})
# lr_aheadN: the loader also asks L2 for the W of the CTA's task N tasks on in the same call, before it waits for
# a slot (the pipeline's `load_ahead`); lr_deal_st128_aheadN the same on lr_deal_st128.
MEGA_OPTIONS.update({f"lr_ahead{n}": ("lr", {"load_ahead": n}) for n in (1, 2, 4, 6)})
MEGA_OPTIONS.update({f"lr_deal_st128_ahead{n}": ("lr", {"deal": "continue", "geometry": {"SPLIT_TASKS": 128},
                                                         "load_ahead": n}) for n in (1, 2, 4, 6)})
# lr_ahead2_asksA: load_ahead 2 with the load entries making only some of its L2 requests (the linear team's
# LR_L2_ASKS, a value of the kernel): 1 the loader's calls ahead, 2 the entries' own (a task's slots past the ring,
# norm_w); 3, both, is lr_ahead2.
MEGA_OPTIONS.update({f"lr_ahead2_asks{a}": ("lr", {"load_ahead": 2, "geometry": {"SPLIT_TASKS": 128, "LR_L2_ASKS": a}})
                     for a in (1, 2)})
# lr_aheadN_lines: load_ahead N with every L2 request of the entries as line prefetches by the loader's 32 lanes
# (LR_L2_ASKS 7) instead of bulk requests through the SM's copy engine, which the ring's own copies queue behind.
MEGA_OPTIONS.update({f"lr_ahead{n}_lines": ("lr", {"load_ahead": n, "geometry": {"SPLIT_TASKS": 128, "LR_L2_ASKS": 7}})
                     for n in (1, 2, 4)})
# lr_deal_st128_ifN: at most N of the ring's slots in flight (the pipeline's loader_in_flight: the loader waits for
# the copy it issued N slots before to land before it issues the next); _ahead4_ifN with load_ahead 4 too.
MEGA_OPTIONS.update({f"lr_deal_st128_if{n}": ("lr", {"deal": "continue", "geometry": {"SPLIT_TASKS": 128},
                                                     "loader_in_flight": n}) for n in (1, 2)})
MEGA_OPTIONS.update({f"lr_deal_st128_ahead4_if{n}": ("lr", {"deal": "continue", "geometry": {"SPLIT_TASKS": 128},
                                                            "load_ahead": 4, "loader_in_flight": n}) for n in (1, 2)})
# X_ef: the ring's copies hint L2 to evict their lines first (the pipeline's loader_l2): W is read once a step, and
# L2 keeps the activations and the KV cache. The lr pipelines set it themselves since 2026-12-06 (lr_l2normal is
# the step without it); the _ef names stay so the earlier results name the kernel they measured.
MEGA_OPTIONS.update({f"{v}_ef": (v, {"loader_l2": "evict_first"}) for v in ("lr", "lr_last")})
MEGA_OPTIONS["lr_ahead2_ef"] = ("lr", {"load_ahead": 2, "loader_l2": "evict_first"})
# lr_s5_ef: a fifth slot with the hint (5 slots paid at B = 8 and cost at B = 1 without it).
MEGA_OPTIONS["lr_s5_ef"] = ("lr", {"loader_slots": 5, "loader_l2": "evict_first"})
# lr_ef_stN / lr_ef_waitN: the hint with attention's splits sized for N tasks, or the waiters' backoff at N ns.
MEGA_OPTIONS.update({f"lr_ef_st{n}": ("lr", {"loader_l2": "evict_first", "geometry": {"SPLIT_TASKS": n}})
                     for n in (64, 256)})
MEGA_OPTIONS.update({f"lr_ef_wait{n}": ("lr", {"loader_l2": "evict_first", "wait_backoff_ns": n}) for n in (0, 16)})
# lr_ef_ifN: the hint with at most N of the ring's slots in flight (loader_in_flight; 2 was ahead at B = 8 without it).
MEGA_OPTIONS.update({f"lr_ef_if{n}": ("lr", {"loader_l2": "evict_first", "loader_in_flight": n}) for n in (2,)})
# lr_ef_sN: the hint with a ring of N slots; with slots of 16 KB (run.py --values, the _RING_K values halved) 9 of
# them keep the arena under 196 KB, so 60 KB of L1 stay (5 slots of 32 KB leave 28 KB).
MEGA_OPTIONS.update({f"lr_ef_s{n}": ("lr", {"loader_slots": n, "loader_l2": "evict_first"}) for n in (8, 9, 10)})
# lrp_ef: the loader step whose down projection waits for gate/up's pieces of h in its entry, with the hint.
MEGA_OPTIONS["lrp_ef"] = ("lrp", {"loader_l2": "evict_first"})
# X_acqrel: a task's notifying threads fence with a release (fence.acq_rel.gpu) instead of __threadfence() (the
# pipeline's notify_fence): the fence is on every hand-off's path, after the producer's last task.
MEGA_OPTIONS.update({f"{v}_acqrel": (base, {**fields, "notify_fence": "acq_rel"})
                     for v, (base, fields) in (("lr_ef", MEGA_OPTIONS["lr_ef"]), ("lrp_ef", MEGA_OPTIONS["lrp_ef"]))})
# X_nw: the normed GEMVs' load entries ask L2 for norm_w with a call's first task on the CTA (LR_L2_ASKS 11),
# without load_ahead: in the loader step's profile the normed calls' first tasks spend 1.2 us between x's copies in
# and x normed (the output projection 0.1), which a miss to HBM for norm_w under W's stream would explain.
MEGA_OPTIONS.update({f"{v}_nw": (base, {**fields, "geometry": {"SPLIT_TASKS": 128, "LR_L2_ASKS": 11}})
                     for v, (base, fields) in (("lr_ef", MEGA_OPTIONS["lr_ef"]), ("lrp_ef", MEGA_OPTIONS["lrp_ef"]),
                                               ("lrp_ef_acqrel", MEGA_OPTIONS["lrp_ef_acqrel"]))})
# lr_ef_gapN: load_ahead N asked only while the ring holds an earlier call's slots (load_ahead_when call_behind): W
# of the CTA's next tasks asked of L2 while attention and the hand-offs hold the compute warps, not while they
# stream the loader's call (asked whenever the ring was full, 12-23% slower); the entries' own requests left out
# (LR_L2_ASKS 1).
MEGA_OPTIONS.update({f"lr_ef_gap{n}": ("lr", {"load_ahead_when": "call_behind", "loader_l2": "evict_first",
                                              "load_ahead": n, "geometry": {"SPLIT_TASKS": 128, "LR_L2_ASKS": 1}})
                     for n in (2, 4)})
# lr_gapD_pN: lr_ef_gapD (L2 asked for up to D tasks on while the ring holds an earlier call's slots) with each
# request after a pause of N ns (load_ahead_gap_ns), so the asks during attention and the hand-offs go out as a paced
# stream, one task's W (64 KB a gate/up task) an SM every N ns at most, rather than every CTA's burst at once.
MEGA_OPTIONS.update({f"lr_gap{d}_p{n}": ("lr", {"load_ahead_when": "call_behind", "load_ahead": d, "load_ahead_gap_ns": n,
                                                 "geometry": {"SPLIT_TASKS": 128, "LR_L2_ASKS": 1}})
                     for d, n in ((2, 2000), (2, 4000), (2, 8000), (4, 2000), (4, 4000))})
# lrm_st64: the merged output projection's step with attention's splits sized for 64 tasks: each CTA's merge reads
# half the records where the context is long enough for 16 splits a row (B = 1 from ctx 2048).
MEGA_OPTIONS["lrm_st64"] = ("lrm", {"geometry": {"SPLIT_TASKS": 64}})
# lr_ifb_off: the loader step without pacing the refills of the call before's slots (decode_step_lr.json has
# loader_in_flight_behind 1 since 2026-12-06), all of a call's copies at the step's 2 in flight: the control for an
# A/B of that field. lr_if_all: neither cap, the step as it was before both.
MEGA_OPTIONS["lr_ifb_off"] = ("lr", {"loader_in_flight_behind": 0})
MEGA_OPTIONS["lr_if_all"] = ("lr", {"loader_in_flight": 0, "loader_in_flight_behind": 0})
# lr_ifN: the step with N slots' copies on their way instead of 2, its refills of the call before's slots still one
# at a time (lr_if1: one everywhere, the two caps one).
MEGA_OPTIONS.update({f"lr_if{n}": ("lr", {"loader_in_flight": n}) for n in (1, 3)})
# lr_if_all_bN: the refills of the call before's slots (a call's first 4 positions on the CTA, filled as the call
# before ends and its hand-off goes out) at most N in flight, the rest of the call with no cap.
MEGA_OPTIONS.update({f"lr_if_all_b{n}": ("lr", {"loader_in_flight": 0, "loader_in_flight_behind": n}) for n in (1, 2)})
# lr_ifb_fr: the refills of the call before's slots paced only until the compute warps release the call's first slot
# on the CTA (loader_in_flight_behind_until first_release): a call whose task spans the ring (q/k/v's four slots,
# down's eight) streams the rest of its first task two at a time once its hand-off is over, not one at a time;
# lr_ifb_fr_if3: the same with three on their way after it.
MEGA_OPTIONS["lr_ifb_fr"] = ("lr", {"loader_in_flight_behind_until": "first_release"})
MEGA_OPTIONS["lr_ifb_fr_if3"] = ("lr", {"loader_in_flight_behind_until": "first_release", "loader_in_flight": 3})
# lr_nwl: the normed GEMVs read norm_w with an L2 evict_last hint (LR_L2_ASKS 19: 3 and bit 16), so the layers'
# norm weights stay in L2 across steps; the normed calls' first tasks take 1.25 us from x's copies in to x normed
# where the plain projection's take 0.09 (PERFORMANCE.md). lr_ifb_fr_nwl: with the refills paced until the release.
MEGA_OPTIONS["lr_nwl"] = ("lr", {"geometry": {"LR_L2_ASKS": 19}})
MEGA_OPTIONS["lr_ifb_fr_nwl"] = ("lr", {"loader_in_flight_behind_until": "first_release", "geometry": {"LR_L2_ASKS": 19}})
# lr_l2normal: the loader step's copies without the hint, whatever decode_step_lr.json sets.
MEGA_OPTIONS["lr_l2normal"] = ("lr", {"loader_l2": "normal"})
# lr_last_*: the loader step with the splits merged by the last one (attn_last), dealt on, 128 splits, load_ahead N.
MEGA_OPTIONS["lr_last_deal_st128"] = ("lr_last", {"deal": "continue", "geometry": {"SPLIT_TASKS": 128}})
MEGA_OPTIONS.update({f"lr_last_deal_st128_ahead{n}": ("lr_last", {"deal": "continue", "geometry": {"SPLIT_TASKS": 128},
                                                                  "load_ahead": n}) for n in (2, 4)})
# X_dynamic: every task claimed from the launch's one counter instead of each CTA's fixed order (pipeline `dispatch`;
# `after` events then count a task at a time).
MEGA_OPTIONS.update({f"{v}_dynamic": (v, {"dispatch": "dynamic", "counts_per_cta": False}) for v in ("split", "head")})


def all_parts() -> tuple:
    """Every component of the case study (decode_parts.ALL_PARTS)."""
    return decode_parts.ALL_PARTS


def build_objects(out_dir: Path) -> dict[str, Path]:
    """Build every component into out_dir/<name>.o."""
    return decode_parts.build_all(Path(out_dir), all_parts())


def pipeline_components(path: Path) -> list[str]:
    """The component names a pipeline file lists, each once, in the order of their first appearance."""
    doc = json.loads(Path(path).read_text())
    names = []
    for c in doc.get("components", []) + doc.get("calls", []):
        name = c if isinstance(c, str) else c.get("component", c.get("name"))
        if name not in names:
            names.append(name)
    return names


class LinkFailed(RuntimeError):
    """A variant the linker refused (its diagnostics in the message): an answer about the inputs, not a fault of
    the script, so callers report it without a traceback."""


def _checked(result, what: str):
    if not result.ok:
        raise LinkFailed(f"linking {what} failed:\n" + "\n".join(d.render() for d in result.diagnostics))
    return result


def link_mega(objects: dict[str, Path], variant: str, profile_tasks: int = 0, pipelines: Path | None = None):
    """The whole decode step as one kernel (variant: a key of MEGA_PIPELINES or MEGA_OPTIONS); `profile_tasks`:
    with a task profile of that many records (Kernel.task_profile); `pipelines`: a folder holding the pipeline
    files to link instead of pipelines/ (another commit's, for an A/B)."""
    import pipelink
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.core.pipeline import load_pipeline
    base, options = MEGA_OPTIONS.get(variant, (variant, {}))
    path = MEGA_PIPELINES[base] if pipelines is None else Path(pipelines) / MEGA_PIPELINES[base].name
    names = pipeline_components(path)
    missing = [n for n in names if n not in objects]
    if missing:
        raise RuntimeError(f"{path.name} lists {missing}, which were not built")
    pipeline = str(path)
    if profile_tasks or options:
        pipeline = dataclasses.replace(load_pipeline(path, DiagnosticSink()), profile_tasks=profile_tasks, **options)
    return _checked(pipelink.link([str(objects[n]) for n in names], pipeline=pipeline), path.name)


def link_part(objects: dict[str, Path], names, pipeline: Path | None, dependent: bool, options: dict | None = None):
    """One unit of PartsStep: a component alone, or a two-component pipeline; with dependent_launch when
    `dependent` and the link allows it; `options`: pipeline fields to link it with. Returns (LinkResult,
    dependent_launch used)."""
    import pipelink
    from pipelink.core.diagnostics import DiagnosticSink
    from pipelink.core.pipeline import PipelineSpec, load_pipeline
    if pipeline is not None:
        spec = load_pipeline(pipeline, DiagnosticSink())
        if spec is None:
            raise RuntimeError(f"cannot read {pipeline}")
    else:
        spec = PipelineSpec(name=f"{names[0]}_alone")
    # A launch of its own: what the step's earlier launches notify is met by the launch order; the events
    # between the unit's own components (the splits before their merge) stay.
    spec = dataclasses.replace(spec, standalone=True, **(options or {}))
    inputs = [str(objects[n]) for n in names]
    if dependent:
        result = pipelink.link(inputs, pipeline=dataclasses.replace(spec, dependent_launch=True))
        if result.ok:
            return result, True
    return _checked(pipelink.link(inputs, pipeline=spec), "+".join(names)), False


# The units PartsStep launches: key -> (components, pipeline file or None).
PART_UNITS = {
    "embed": (("embed",), None),
    "rmsnorm": (("rmsnorm",), None),
    "qkv_rope_normed": (("qkv_rope_normed",), None),
    "gemv_swiglu_normed": (("gemv_swiglu_normed",), None),
    "attn_split": (decode_parts.ATTN_PIPELINED, decode_parts.ATTN_PIPELINE),
    "attn_head": (("attn_head",), None),
    "gemv_residual": (("gemv_residual",), None),
    "lm_head": (decode_parts.HEAD_PIPELINED, decode_parts.HEAD_PIPELINE),
}


# The separate-kernel units decode_step_ring.json's GEMVs replace (same parameters, same arithmetic).
RING_UNITS = {"gemv_residual": ("gemv_residual_ring",), "gemv_swiglu_normed": ("gemv_swiglu_normed_ring",),
              "qkv_rope_normed": ("qkv_rope_normed_ring",), "lm_head": ("lm_head_ring", "argmax_merge")}
# ... and those decode_step_lr.json's GEMVs replace: each a kernel with its own loader warp and ring, W packed.
LR_UNITS = {"gemv_residual": ("gemv_residual_lr",), "gemv_swiglu_normed": ("gemv_swiglu_normed_lr",),
            "qkv_rope_normed": ("qkv_rope_normed_lr",), "lm_head": ("lm_head_lr", "argmax_merge")}
# The loader settings of decode_step_lr.json that its separate-kernel control links each `_lr` unit with too: the
# same ring and copies, one kernel at a time.
LOADER_FIELDS = ("loader_slots", "loader_in_flight", "loader_l2")


def lr_loader_options() -> dict:
    """The loader fields decode_step_lr.json sets (LOADER_FIELDS)."""
    doc = json.loads(MEGA_PIPELINES["lr"].read_text())
    return {k: doc[k] for k in LOADER_FIELDS if k in doc}


# The calls whose W an `_lr` unit takes packed: call -> the model's tensor (decode_model.PACKED_WEIGHTS).
PACKED_W = {"qkv": "w_qkv_packed", "o_proj": "w_o_packed", "gate_up": "w_gu_packed", "down": "w_down_packed",
            "head": "w_lm_packed"}


def parts_schedule(NL: int, attention: str = "split", embed: bool = True) -> list[tuple[str, int | None, str]]:
    """The launches of one step, in order: (unit, layer or None, which call), the megakernel's calls
    (pipelines/decode_step.json) one kernel each. `attention` is 'split' or 'head'. Per layer: norm + q/k/v
    + RoPE + cache append, attention, o-projection + residual (x -> x1), norm + gate/up + SwiGLU,
    down-projection + residual (x1 -> x); then the final norm and the greedy head."""
    attn = {"split": "attn_split", "head": "attn_head"}[attention]
    out = [("embed", None, "embed")] if embed else []
    for l in range(NL):
        out += [("qkv_rope_normed", l, "qkv"), (attn, l, "attn"), ("gemv_residual", l, "o_proj"),
                ("gemv_swiglu_normed", l, "gate_up"), ("gemv_residual", l, "down")]
    out += [("rmsnorm", None, "final_norm"), ("lm_head", None, "head")]
    return out


def call_args(call: str, layer: int | None, t: dict) -> dict:
    """The per-launch tensors of one call by the component's parameter names; `t` holds the step's tensors by
    the megakernel's names (DecodeState.common_args). Scalars come from the step (`pick_args`' common)."""
    l = layer
    H, I = t["H"], t["I"]
    if call == "embed":
        return dict(token=t["token"], w=t["embed_w"], embed_w=t["embed_w"], table=t["embed_w"], x=t["x"],
                    y=t["x"], out=t["x"], K=H)
    if call == "attn_norm":
        return dict(x=t["x"], weight=t["attn_norm_w"][l], xn=t["xn"])
    if call == "qkv":  # the norm is the GEMV's prologue
        return dict(w=t["w_qkv"][l], x=t["x"], norm_w=t["attn_norm_w"][l], q=t["q"], k_cache=t["k_cache"][l],
                    v_cache=t["v_cache"][l], K=H)
    if call == "attn":
        return dict(q=t["q"], k=t["k_cache"][l], v=t["v_cache"][l], k_cache=t["k_cache"][l],
                    v_cache=t["v_cache"][l], o=t["o"], part=t["attn_part"])
    if call == "o_proj":
        return dict(w=t["w_o"][l], x=t["o"].reshape(t["B"], -1), r=t["x"], y=t["x1"], N=H,
                    K=t["o"].shape[1] * t["o"].shape[2])
    if call == "mlp_norm":
        return dict(x=t["x1"], weight=t["mlp_norm_w"][l], xn=t["xn"])
    if call == "gate_up":
        return dict(w=t["w_gu"][l], x=t["x1"], norm_w=t["mlp_norm_w"][l], h=t["h"], K=H)
    if call == "down":
        return dict(w=t["w_down"][l], x=t["h"], r=t["x1"], y=t["x"], N=H, K=I)
    if call == "final_norm":
        return dict(x=t["x"], weight=t["final_norm_w"], xn=t["xn"])
    if call == "head":
        return dict(w=t["w_lm"], x=t["xn"], logits=t["logits"], part=t["head_part"], token=t["token"], K=H)
    raise KeyError(call)


def launch_units(kernels: dict, NL: int, attention: str, t: dict, packed: frozenset = frozenset()) -> list:
    """The PreparedLaunch of every launch of one step (kernels: unit -> loaded Kernel; `packed`: the units that
    take W packed, their calls' W from t["<unit>:packed"][PACKED_W[call]])."""
    from decode_model import pick_args
    launches = []
    for unit, layer, call in parts_schedule(NL, attention, embed="embed" in kernels):
        k = kernels[unit]
        args = call_args(call, layer, t)
        if unit in packed:
            w = t[f"{unit}:packed"][PACKED_W[call]]
            args["w"] = w if layer is None else w[layer]
        args = pick_args([p.name for p in k.user_params], args, t, f"{unit} ({call})")
        launches.append(k.prepare(**args))
    return launches


class MegaStep:
    """The linked megakernel of one attention variant, prepared for one DecodeState."""

    def __init__(self, objects: dict, variant: str, profile_tasks: int = 0, pipelines: Path | None = None,
                 load: bool = True):
        """`load`: load the kernel onto the GPU (False: linked only, `manifest` says what it would launch)."""
        self.variant = variant
        self.linked = link_mega(objects, variant, profile_tasks, pipelines)
        self.manifest = self.linked.manifest
        self.kernel = self.linked.kernel() if load else None
        self.names = [p.name for p in self.kernel.user_params] if load else []

    def prepare(self, dm, state, L: int, layers: int | None = None):
        """`layers`: run that many of the model's layers (NL is the kernel's runtime value), not all."""
        from decode_model import pick_args
        packed = dm.packed(self.names, self.manifest.geometry)
        common = state.common_args(dm, L)
        if layers is not None:
            if not 0 <= layers <= dm.NL:
                raise ValueError(f"layers {layers}: the model has {dm.NL}")
            common["NL"] = layers
        args = pick_args(self.names, packed, common, f"megakernel ({self.variant})")
        return self.kernel.prepare(**args)

    def unload(self):
        if self.kernel is not None:
            self.kernel.unload()


class PartsStep:
    """The components as separate kernels, in order; `prepare` returns a callable launching one step."""

    def __init__(self, objects: dict, attention: str = "split", dependent: bool = True, ring: bool = False,
                 load: bool = True, lr: bool = False):
        """`ring`: the GEMVs that decode_step_ring.json swaps in (RING_UNITS), the fair control of that step;
        `lr`: those of decode_step_lr.json (LR_UNITS), the loader-ring step's, with its loader settings;
        `load`: load each kernel onto the GPU (False: linked only, `manifests` says what each would launch)."""
        self.attention = attention
        units = {u for u, _, _ in parts_schedule(1, attention, embed="embed" in objects)}
        self.kernels, self.dependent, self.manifests = {}, {}, {}
        swap = LR_UNITS if lr else RING_UNITS if ring else {}
        self.packed = frozenset(swap) if lr else frozenset()
        loader = lr_loader_options() if lr else {}
        for unit in sorted(units):
            names, pipe = PART_UNITS[unit]
            if unit in swap:  # (the head's two components meet through their event: persistent)
                names, pipe = swap[unit], None
            result, dep = link_part(objects, names, pipe, dependent, loader if unit in swap else None)
            self.manifests[unit] = result.manifest
            if load:  # else linked only
                self.kernels[unit] = result.kernel()
            self.dependent[unit] = dep

    def prepare(self, dm, state, L: int):
        t = state.common_args(dm, L)
        for unit in self.packed:  # the W of each unit's calls, packed for its own kernel's geometry
            calls = {call for u, _, call in parts_schedule(1, self.attention) if u == unit}
            t[f"{unit}:packed"] = dm.packed([PACKED_W[c] for c in calls], self.manifests[unit].geometry)
        launches = launch_units(self.kernels, dm.NL, self.attention, t, self.packed)
        embed = "embed" in self.kernels

        def step(stream):
            if not embed:  # no embedding component: the row lookup in torch
                t["x"].copy_(t["embed_w"].index_select(0, t["token"].long()))
            for launch in launches:
                launch.launch(stream)
        step.keep = (launches, t)
        return step

    def unload(self):
        for k in self.kernels.values():
            k.unload()
