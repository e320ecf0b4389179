"""Where a Hopper MoE layer's time goes outside its tasks: the fused kernel and its separate-kernel graph, each
kernel's start and end as the profiler (CUPTI) records them over calls back to back, beside the fused
kernel's task records (first task start to last task done, from a build with a task profile).

For each T it prints, per implementation, medians over the calls: the time per call (start of one call's first
kernel to the next call's), and per kernel its start and end from the call's first kernel start, so the head
(router, dispatch), the experts' stream and the tail (merge, combine) of the two can be laid side by side; for
the fused kernel also its task span and what lies outside it (launch, prologue, epilogue).

    python case_studies/moe_four_owners/launch_probe.py [--calls 20] [--T 16 --T 128]    # on a GPU
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent))

import ab  # noqa: E402
import builds  # noqa: E402
import layer  # noqa: E402


def kernel_events(run_once, calls: int) -> list:
    """(name, start us, end us) of every kernel the profiler saw over `calls` calls, in start order."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    run_once()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.cuda._sleep(20_000_000)  # the host queues every call before the first one runs
        for _ in range(calls):
            run_once()
        torch.cuda.synchronize()
    ks = [e for e in prof.events() if e.device_type.name == "CUDA" and "sleep" not in e.name.lower() and "spin" not in e.name.lower()
          and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]
    ks.sort(key=lambda e: e.time_range.start)
    return [(e.name, e.time_range.start, e.time_range.end) for e in ks]


def per_call(events: list, per: int) -> tuple[float, list]:
    """Median time per call and, per kernel of a call, its median start and end from the call's first start."""
    calls = [events[i:i + per] for i in range(0, len(events) - per + 1, per)]
    starts = [c[0][1] for c in calls]
    period = statistics.median(b - a for a, b in zip(starts, starts[1:]))
    rows = []
    for j in range(per):
        rows.append((calls[0][j][0], statistics.median(c[j][1] - c[0][1] for c in calls),
                     statistics.median(c[j][2] - c[0][1] for c in calls)))
    return period, rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--T", type=int, action="append", default=[])
    args = ap.parse_args()
    import torch
    import launchers
    out = Path(tempfile.mkdtemp())
    base = builds.build_all(out / "base", classic=False)
    objs = builds.build_hopper(out / "hopper", base)
    fused_link = builds.link_hopper(objs)
    profiled_link = builds.link_hopper(objs, profile_tasks=1 << 16)
    for r in (fused_link, profiled_link):
        if not r.ok:
            sys.exit("\n".join(d.render() for d in r.diagnostics))
    separate = launchers.PipelinkSeparate.from_links(builds.link_separate(objs, fused_link.manifest.geometry))
    impls = {"fused": launchers.PipelinkLayer.from_link(fused_link),
             "separate graph": launchers.CapturedLayer(separate),
             "separate, launched": separate}
    profiled = launchers.PipelinkLayer.from_link(profiled_link)
    shape = layer.SHAPES["qwen3-30b-a3b"]
    weights = layer.make_weights(shape, int.from_bytes(os.urandom(2), "little"))
    for T in args.T or [16, 128]:
        x = layer.make_tokens(shape, T, int.from_bytes(os.urandom(2), "little"))
        print(f"T={T}", flush=True)
        for name, impl in impls.items():
            buffers = layer.poisoned_buffers(impl.layout(shape, T))
            impl.run(shape, x, weights, buffers)
            torch.cuda.synchronize()
            verdict = layer.judge(shape, x, weights, buffers)
            if not verdict.ok:
                sys.exit(f"{name}, T={T}: wrong: {verdict}")
            per = 1 if name == "fused" else len(separate.kernels)
            period, rows = per_call(kernel_events(lambda: impl.run(shape, x, weights, buffers), args.calls), per)
            print(f"  {name}: {period:.1f} us a call; " + "; ".join(
                f"{n.removeprefix('pl_').removeprefix('moe_')} {a:.1f}-{b:.1f}" for n, a, b in rows), flush=True)
        buffers = layer.poisoned_buffers(profiled.layout(shape, T))
        spans, outside, parts = [], [], {}
        for _ in range(args.calls):
            ev = kernel_events(lambda: profiled.run(shape, x, weights, buffers), 1)
            recs = profiled.kernel.task_profile()
            spans.append((max(r.done for r in recs) - min(r.start for r in recs)) / 1000)
            outside.append(ev[-1][2] - ev[-1][1] - spans[-1])
            for c, span in ab.component_spans(recs).items():  # first start, first met waits, last done
                parts.setdefault(c, []).append(span)
        print(f"  fused with task records: tasks span {statistics.median(spans):.1f} us, the kernel "
              f"{statistics.median(outside):.1f} us longer (launch of its CTAs, prologue, last CTA out); per "
              "component first start/first waits met-last done: " + "; ".join(
                  f"{c.removeprefix('moe_')} " + "/".join(f"{statistics.median(v[i] for v in vs):.1f}" for i in (0, 1))
                  + f"-{statistics.median(v[2] for v in vs):.1f}" for c, vs in parts.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
