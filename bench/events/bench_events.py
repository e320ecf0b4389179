"""Benchmarks of the persistent, event-driven kernels on a GPU.

A. The cost of being dynamic: one linked kernel serves every batch size; at each size it is timed
   against a link specialized for that size (`--specialize`), alternating the two.
B. Imbalance: MoE-style dispatch with skewed routing, static against dynamic dispatch.

Each timing is one launch between CUDA events, queued behind a GPU sleep so the host's launch
cost is not in it; warm-up first; the median of REPS alternating samples; inputs rotate over
enough buffer sets to exceed the L2 cache; fresh random data.

    python bench/events/bench_events.py [--reps 31] [--out bench/events]
"""
import argparse
import dataclasses
import datetime
import json
import sys
from pathlib import Path

import torch

from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.pipeline import load_pipeline
from pipelink.harness.problems import PROBLEMS, max_error, moe_problem
from pipelink.harness.shipped import REPO, build_shipped, shipped_pipelines
from pipelink.harness.timing import L2_BYTES, alternate, input_sets
from pipelink.linker.passes import LinkOptions, link



def linked(objects, name, dispatch=None, specialize=None):
    pipe = next(p for p in shipped_pipelines() if p.name == name)
    spec = load_pipeline(pipe.path, DiagnosticSink())
    spec = dataclasses.replace(spec, dispatch=dispatch or spec.dispatch, specialize=dict(specialize or {}))
    result = link([objects[n] for n in pipe.components], LinkOptions(pipeline=spec))
    if not result.ok:
        sys.exit("\n".join(d.render() for d in result.diagnostics))
    return result.kernel()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=31)
    ap.add_argument("--out", default=str(REPO / "bench" / "events"))
    ap.add_argument("--batches", default="1,2,4,8,16,32,64,128,256")
    args = ap.parse_args()
    sink = DiagnosticSink()
    objects = {o.stem: str(o) for o in build_shipped(Path("/tmp/pipelink-bench-build"), sink, log=lambda *_: None)}
    props = torch.cuda.get_device_properties(0)
    results = {"date": datetime.date.today().isoformat(), "gpu": props.name, "sms": props.multi_processor_count,
               "command": "python bench/events/bench_events.py " + " ".join(sys.argv[1:]), "reps": args.reps,
               "batch": [], "imbalance": []}

    def checked(kernel, problem):
        kernel.launch(**problem.args)
        torch.cuda.synchronize()
        err = max_error(problem)
        assert err <= problem.tolerance, err

    workloads = {
        "splitk_gemv": ("M", lambda b, s: PROBLEMS["splitk_gemv"](b, 16384, s)),
        "moe_dispatch": ("T", lambda b, s: moe_problem(b, 2048, s, E=32, TOPK=4)),
    }
    generic = {name: linked(objects, name) for name in workloads}
    for name, (dim, make) in workloads.items():
        for b in (int(v) for v in args.batches.split(",")):
            special = linked(objects, name, specialize={dim: b})
            sets = input_sets(lambda i: make(b, 1000 * b + i), 2 * L2_BYTES)
            checked(generic[name], sets[0])
            checked(special, sets[1])
            t = alternate({"dynamic_shapes": generic[name], "specialized": special}, sets, args.reps)
            d, s = t["dynamic_shapes"]["median_us"], t["specialized"]["median_us"]
            row = {"pipeline": name, dim: b, "dynamic_us": d, "specialized_us": s, "diff_pct": 100 * (d - s) / s,
                   "samples": {k: v["samples_us"] for k, v in t.items()}}
            results["batch"].append(row)
            print(f"{name} {dim}={b}: one kernel {d:.2f} us, specialized {s:.2f} us ({row['diff_pct']:+.1f}%)",
                  flush=True)
            special.unload()
    # A persistent megakernel holds one CTA per SM; 512 experts with skewed routing make the expert
    # tasks' costs differ by an order of magnitude.
    static, dynamic = linked(objects, "moe_dispatch", "static"), linked(objects, "moe_dispatch", "dynamic")
    grid = props.multi_processor_count
    for skew in (0.0, 4.0, 16.0):
        sets = input_sets(lambda i: moe_problem(4096, 1024, 77 + i, E=512, TOPK=4, skew=skew), 2 * L2_BYTES)
        for kernel, p in ((static, sets[0]), (dynamic, sets[1])):
            kernel.launch(grid=grid, **p.args)
            torch.cuda.synchronize()
            assert max_error(p) <= p.tolerance
        counts = sets[0].args["counts"].float()
        t = alternate({"static": static, "dynamic": dynamic}, sets, args.reps, grid=grid)
        row = {"skew": skew, "max_over_mean_rows": (counts.max() / counts.mean()).item(),
               "static_us": t["static"]["median_us"], "dynamic_us": t["dynamic"]["median_us"],
               "samples": {k: v["samples_us"] for k, v in t.items()}}
        results["imbalance"].append(row)
        print(f"moe skew {skew}: busiest expert {row['max_over_mean_rows']:.1f}x the mean; static "
              f"{row['static_us']:.1f} us, dynamic {row['dynamic_us']:.1f} us", flush=True)
    out = Path(args.out)
    (out / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out / "RESULTS.md").write_text(render(results))


def render(res) -> str:
    lines = ["# Event-driven kernels: benchmark results", "",
             f"Machine: {res['gpu']} ({res['sms']} SMs). Date: {res['date']}. Command: `{res['command']}`.",
             f"Median of {res['reps']} alternating samples per cell, one launch each, timed with CUDA events behind "
             "a GPU sleep; inputs rotated over more than twice the L2; raw samples in results.json.", "",
             "## One kernel for every batch size vs a link specialized for each", "",
             "| pipeline | batch | one kernel (us) | specialized (us) | difference |", "| --- | --- | --- | --- | --- |"]
    for r in res["batch"]:
        dim = "M" if "M" in r else "T"
        lines.append(f"| {r['pipeline']} | {dim}={r[dim]} | {r['dynamic_us']:.2f} | {r['specialized_us']:.2f} | "
                     f"{r['diff_pct']:+.1f}% |")
    worst = max(abs(r["diff_pct"]) for r in res["batch"])
    lines += ["", f"Largest |difference|: {worst:.1f}%.", "",
              "## Skewed routing: static vs dynamic dispatch (moe_dispatch, T=4096, H=1024, E=512, top-4, "
              "one CTA per SM)", "",
              "| skew | busiest expert / mean | static (us) | dynamic (us) | dynamic speed-up |",
              "| --- | --- | --- | --- | --- |"]
    for r in res["imbalance"]:
        lines.append(f"| {r['skew']} | {r['max_over_mean_rows']:.1f}x | {r['static_us']:.1f} | {r['dynamic_us']:.1f} | "
                     f"{r['static_us'] / r['dynamic_us']:.2f}x |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
