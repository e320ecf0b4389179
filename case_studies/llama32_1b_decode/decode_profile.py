"""Where a decode step's time goes: each separate-kernel launch of the step timed by the profiler (CUPTI), per
call and layer summed, with the weight bytes it reads and the bandwidth that makes; and (--launch) steps of a
chosen variant, the last one between cudaProfilerStart/Stop: a target for Nsight Compute and compute-sanitizer;
(--layers) megakernels timed with 0 to all layers, for a layer's time without task stamps.

    python case_studies/llama32_1b_decode/decode_profile.py [--B 1] [--ctx 1024] [--ring] [--out FILE]
    ncu --profile-from-start off --section SpeedOfLight ... python .../decode_profile.py --launch pipelink_split
    compute-sanitizer --tool racecheck python .../decode_profile.py --launch pipelink_split --times 1
    python .../decode_profile.py --layers pipelink_lr pipelink_split [--B 1] [--ctx 1024]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent))

from decode_model import DecodeModel, DecodeState, build_reference, hbm_peak, weight_shapes  # noqa: E402


def call_weight_bytes(call: str, B: int) -> int:
    """Bytes of weights (bf16) one call of the step reads."""
    s = weight_shapes()
    n = {"qkv": ["w_qkv", "attn_norm_w"], "o_proj": ["w_o"], "gate_up": ["w_gu", "mlp_norm_w"], "down": ["w_down"],
         "head": ["w_lm"], "final_norm": ["final_norm_w"], "embed": []}.get(call, [])
    total = 0
    for name in n:
        shape = s[name][1:] if name not in ("w_lm", "final_norm_w") else s[name]
        p = 1
        for e in shape:
            p *= e
        total += 2 * p
    return total + (2 * B * s["w_lm"][1] if call == "embed" else 0)


# What the components' profile marks stamp (linear/gemv.cuh, attention/attention.cuh), for the marks table.
MARKS_LEGEND = ("marks: the GEMVs 0 x's copies in (a call's first task), 1 x staged (and normed), 2 the first pass of W "
                "used, 3 W walked, 4 the sums stored, 5 the norm's scales in (a normed call's first task, before "
                "norm_w is applied); attention's splits 0 the split walked")


def profile_parts(step, schedule, stream, steps: int = 5) -> dict:
    """{call: dict(us, bytes, launches)} over `steps` eager steps (kernels in launch order = `schedule`)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    step(stream)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step(stream)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA" and "memcpy" not in e.name.lower()
               and "memset" not in e.name.lower()]
    kernels.sort(key=lambda e: e.time_range.start)
    if len(kernels) != steps * len(schedule):
        raise RuntimeError(f"expected {steps * len(schedule)} kernels, the profiler saw {len(kernels)}")
    per = defaultdict(lambda: dict(us=0.0, launches=0))
    for i, e in enumerate(kernels):
        unit, layer, call = schedule[i % len(schedule)]
        per[call]["us"] += (e.time_range.end - e.time_range.start) / steps
        per[call]["launches"] += 1
    for c in per:
        per[c]["launches"] //= steps
    return dict(per)


def provenance() -> dict:
    """The command, machine and date a profile written with --out came from (as run.py records them)."""
    import datetime
    import shlex

    from run import machine
    return dict(command=" ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]), machine=machine(),
                date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))


def layer_fit(times: dict[int, float]) -> tuple[float, float]:
    """Least squares of t = rest + layers * per_layer over {layers: us}: (per_layer, rest)."""
    xs, ys = list(times), list(times.values())
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return slope, my - slope * mx


def time_layers(args, objects, dm, st) -> int:
    """Each megakernel of --layers with NL = 0, 1, 2, 4, 8 and all, every launch alternating (CUDA events,
    medians): the slope is a layer's time and the intercept the embedding, final norm, LM head and launch's,
    measured without the task stamps that --tasks adds."""
    from decode_kernels import MegaStep
    from run import time_round_robin
    counts = sorted({0, 1, 2, 4, 8, dm.NL})
    steps, fns = [], {}
    for v in args.layers:  # main() checked the names: megakernels, pipelink_ before them or not
        steps.append(MegaStep(objects, v.removeprefix("pipelink_")))
        for n in counts:
            fns[(v, n)] = steps[-1].prepare(dm, st, args.ctx, layers=n).launch
    timed = time_round_robin(fns, warmup=5, iters=args.iters)
    rows = []
    print(f"B={args.B} ctx={args.ctx}, median us per launch of NL layers ({args.iters} rounds)")
    print(f"{'variant':24s} " + " ".join(f"{'NL=' + str(n):>9s}" for n in counts) + f" {'us/layer':>9s} {'rest us':>8s}")
    for v in args.layers:
        times = {n: timed[(v, n)]["median_us"] for n in counts}
        per_layer, rest = layer_fit(times)
        rows.append(dict(variant=v, median_us={str(n): t for n, t in times.items()}, us_per_layer=per_layer,
                         rest_us=rest))
        print(f"{v:24s} " + " ".join(f"{times[n]:9.1f}" for n in counts) + f" {per_layer:9.2f} {rest:8.1f}")
    if args.out:
        Path(args.out).write_text(json.dumps(dict(**provenance(), B=args.B, ctx=args.ctx, iters=args.iters,
                                                  layers=rows), indent=1) + "\n")
    for s in steps:
        s.unload()
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--B", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--ring", action="store_true", help="the ring GEMVs' separate kernels")
    ap.add_argument("--launch", help="run steps of this variant (pipelink_split|pipelink_head|pipelink_ring|"
                                     "pipelink_ring_od|pipelink_last|pipelink_lr|pipelink_split_per_task|parts_graph|parts_ring_graph|parts_lr_graph), for ncu or compute-sanitizer")
    ap.add_argument("--times", type=int, default=4, help="--launch: steps run (the last one profiled)")
    ap.add_argument("--tasks", metavar="VARIANT", help="link this megakernel (a key of decode_kernels.MEGA_PIPELINES or "
                                                       "MEGA_OPTIONS: split, lr, lr_deal_st128_ahead4, ...; pipelink_ "
                                                       "before it or not) with a task profile, run a few steps and print "
                                                       "where the last one's time went")
    ap.add_argument("--layers", nargs="+", metavar="VARIANT",
                    help="time these megakernels (pipelink_*) running 0, 1, 2, 4, 8 and all layers, alternating: "
                         "a layer's and the rest's time without task stamps")
    ap.add_argument("--iters", type=int, default=50, help="--layers: timed rounds")
    ap.add_argument("--out", help="write the profile as JSON here")
    args = ap.parse_args(argv)
    from decode_kernels import MEGA_OPTIONS, MEGA_PIPELINES
    known = (*MEGA_PIPELINES, *MEGA_OPTIONS)
    if args.tasks:
        args.tasks = args.tasks.removeprefix("pipelink_")
    for v in [args.tasks] * bool(args.tasks) + [v.removeprefix("pipelink_") for v in args.layers or ()]:
        if v not in known:  # before the model and the objects are built
            ap.error(f"no megakernel variant '{v}': one of {', '.join(sorted(known))}")
    import torch
    from decode_kernels import MegaStep, PartsStep, build_objects, parts_schedule
    model = build_reference(0)
    dm = DecodeModel.from_hf(model)
    objects = build_objects(Path(tempfile.mkdtemp(prefix="llama_profile_")))
    st = DecodeState.allocate(dm, args.B, args.ctx)
    st.fill_cache_random(seed=args.ctx)
    st["token"].fill_(791)
    st["pos"].fill_(args.ctx - 1)
    stream = torch.cuda.current_stream()
    if args.tasks:
        from pipelink.runtime import profile
        step = MegaStep(objects, args.tasks, profile_tasks=1 << 18)
        prepared = step.prepare(dm, st, args.ctx)
        for _ in range(args.times):
            prepared.launch(stream)
        torch.cuda.synchronize()
        records = step.kernel.task_profile()
        print(f"megakernel {args.tasks}, B={args.B} ctx={args.ctx}, step {args.times}:")
        print(profile.render(records))
        # per layer: each call's span and the hand-off before it
        path = MEGA_PIPELINES[MEGA_OPTIONS.get(args.tasks, (args.tasks, {}))[0]]
        calls = json.loads(path.read_text())["calls"]
        layered = {c["name"] for c in calls if c.get("per_layer")}
        phases = profile.phases(records, dm.NL, layered)
        print(profile.render_phases(phases))
        # static dispatch: what a CTA's first task of a call costs over its later ones (x staged, the norm)
        split = profile.first_and_later(records, dm.NL, layered, step.kernel.resident_blocks())
        print(profile.render_first_and_later(split))
        # static dispatch: how long each call's slowest CTA holds it up past the median one
        tails = profile.tails(records, dm.NL, layered, step.kernel.resident_blocks())
        print(profile.render_tails(tails))
        # whether the tails come from SMs that stream slower all launch long (their share of the memory system):
        # each SM's median later task, and whether the same SMs are slow in every call
        speeds = profile.sm_speeds(records, dm.NL, layered, step.kernel.resident_blocks())
        print(profile.render_sm_speeds(speeds))
        # inside the tasks: the GEMVs' marks (first tasks: 0 x's copies in, 1 x staged; 2 warp 0's first pass of
        # W in, 3 its walk over W done, 4 the sums stored) and attention's (0 the split walked), first tasks of a
        # call against later ones
        marks = profile.marks(records, dm.NL, layered, step.kernel.resident_blocks())
        print(profile.render_marks(marks))
        print(MARKS_LEGEND)
        # the loader warp's records (a loader step): how long it waited for free slots, how far ahead of each task
        # it issued the task's copies
        loader = profile.loader_leads(records, dm.NL, layered)
        print(profile.render_loader_leads(loader))
        leads = [{k: (None if v != v else v) for k, v in lead.__dict__.items()} for lead in loader]  # NaN: null
        # the loaders' copies over a layer beside the calls running: where the memory idles
        weights = {c: call_weight_bytes("head" if c == "lm_head" else c, args.B) for c in layered | {"lm_head"}}
        issue, issue_mean = profile.loader_issue(records, dm.NL, layered, weights)
        print(profile.render_loader_issue(issue, issue_mean))
        if args.out:
            span, sms, per = profile.summarize(records)
            Path(args.out).write_text(json.dumps(dict(**provenance(), B=args.B, ctx=args.ctx, variant=args.tasks,
                                                      span_us=span, sms=sms,
                                                      components=[c.__dict__ for c in per],
                                                      phases=[p.__dict__ for p in phases],
                                                      first_and_later=split, tails=tails, marks=marks,
                                                      sm_speeds={c: {str(sm): us for sm, us in v.items()}
                                                                 for c, v in speeds.items()},
                                                      loader=leads, loader_issue_tb_per_s=issue_mean,
                                                      loader_issue=[b.__dict__ for b in issue]), indent=1)
                                           + "\n")
        step.unload()
        return 0
    if args.layers:
        return time_layers(args, objects, dm, st)
    if args.launch:
        v = args.launch
        step = (MegaStep(objects, v.removeprefix("pipelink_")) if v.startswith("pipelink_")
                else PartsStep(objects, "split", ring=(v == "parts_ring_graph"), lr=(v == "parts_lr_graph")))
        if isinstance(step, MegaStep):
            prepared = step.prepare(dm, st, args.ctx)
            launch = prepared.launch
        else:
            launch = step.prepare(dm, st, args.ctx)
        for _ in range(args.times - 1):
            launch(stream)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        launch(stream)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()
        print(f"{v}: {args.times} steps at B={args.B} ctx={args.ctx}, next token {st['token'].tolist()}")
        return 0
    parts = PartsStep(objects, "split", dependent=False, ring=args.ring)
    step = parts.prepare(dm, st, args.ctx)
    per = profile_parts(step, parts_schedule(dm.NL, "split", embed="embed" in parts.kernels), stream)
    total = sum(p["us"] for p in per.values())
    rows = []
    card, peak, _ = hbm_peak(torch.cuda.get_device_name())
    print(f"separate kernels{' (ring GEMVs)' if args.ring else ''}, B={args.B} ctx={args.ctx}: "
          f"{total:.1f} us of kernel time per step (%peak: of the {card}'s {peak / 1e12:.2f} TB/s)")
    print(f"{'call':12s} {'launches':>8s} {'us/step':>9s} {'us/launch':>9s} {'MB/launch':>9s} {'TB/s':>6s} {'%peak':>6s}")
    for call, p in per.items():
        nbytes = call_weight_bytes(call, args.B)
        per_launch = p["us"] / p["launches"]
        tbs = nbytes / (per_launch * 1e-6) / 1e12 if nbytes else 0.0
        rows.append(dict(call=call, launches=p["launches"], us_per_step=p["us"], us_per_launch=per_launch,
                         weight_bytes_per_launch=nbytes, tb_per_s=tbs))
        print(f"{call:12s} {p['launches']:8d} {p['us']:9.1f} {per_launch:9.2f} {nbytes / 1e6:9.2f} {tbs:6.2f} "
              f"{100 * tbs * 1e12 / peak:5.1f}%")
    if args.out:
        Path(args.out).write_text(json.dumps(dict(**provenance(), B=args.B, ctx=args.ctx, ring=args.ring, total_us=total,
                                                  calls=rows), indent=1) + "\n")
    parts.unload()
    return 0


if __name__ == "__main__":
    sys.exit(main())
