"""A/B of the Hopper layer built from different object folders (each holding the five teams' objects, e.g.
two commits' builds): every layer linked, checked once per T against the fp32 reference, then timed
alternating (GPU only), with the separate-kernel graph of the first folders; optionally a task profile.

    python case_studies/moe_four_owners/ab.py DIR [DIR ...] [--separate N] [--rounds R] [--profile]
    python case_studies/moe_four_owners/ab.py DIR --out-of-line moe_expert_hopper
    python case_studies/moe_four_owners/ab.py DIR --splits 2 --splits 4

`--splits N` also times DIR's layer with N expert shares a tile at every T (the launcher's `expert_splits`
chooses otherwise).

`--static` also links the first folder's layer with static dispatch (each CTA's fixed task order, so the
linker counts whole-call events once per CTA) in place of the pipeline's dynamic dispatch.

`--out-of-line NAME` also links DIR's layer with NAME's entry called through a `__noinline__` glue wrapper
(its own register allocation; an experiment, not a linker option: results/ab_combine_expert_2026-12-02.txt,
results/router_out_of_line_tried_2026-12-03.txt, docs/architecture.md); with `--profile`, its task profile too."""
from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import builds  # noqa: E402
import layer  # noqa: E402

NAMES = ("router", "dispatch", "expert_hopper", "expert_merge", "combine")


def link_out_of_line(objects: list[Path], entries: list[str], profile_tasks: int = 0):
    """The layer with each of `entries` called through a __noinline__ wrapper the generate pass adds
    (`profile_tasks`: with a task profile of that many records)."""
    import pipelink.linker.passes as passes
    generate = passes.pass_generate

    def wrapped(ctx):
        generate(ctx)
        for name in entries:
            m = re.search(r'extern "C" __device__ void ' + name + r"\((.*?)\);\n", ctx.glue)
            if m is None:
                raise SystemExit(f"--out-of-line: the glue declares no entry {name}")
            args = ", ".join(p.strip().split()[-1].lstrip("*") for p in m.group(1).split(","))
            wrapper = f"static __device__ __noinline__ void pl_call_{name}({m.group(1)}) {{ {name}({args}); }}\n"
            glue = ctx.glue[:m.end()] + wrapper + ctx.glue[m.end():]
            ctx.glue = re.sub(r"(\n\s+)" + name + r"\(tile,", r"\1pl_call_" + name + "(tile,", glue)
    saved = passes.PASSES
    passes.PASSES = [(n, wrapped if n == "generate" else f) for n, f in saved]
    try:
        from pipelink.core.diagnostics import DiagnosticSink
        from pipelink.core.pipeline import load_pipeline
        spec = load_pipeline(str(builds.HOPPER_PIPELINE), DiagnosticSink())
        if profile_tasks:
            import dataclasses
            spec = dataclasses.replace(spec, profile_tasks=profile_tasks)
        return passes.link([str(o) for o in objects], passes.LinkOptions(pipeline=spec, cache=False))
    finally:
        passes.PASSES = saved


def with_splits(impl, n: int):
    """`impl`'s kernel launched with n expert shares a tile whatever T (its buffers sized for n)."""
    import launchers

    class FixedSplits(launchers.PipelinkLayer):
        def splits(self, shape, T):
            return n
    return FixedSplits(impl.kernel, impl.geometry)


def component_spans(records) -> dict[str, tuple[float, float, float]]:
    """Per component of a launch's task records, in the order they first appear: its first task's start, its
    first met waits and its last task's end, us from the launch's first start."""
    t0 = min(r.start for r in records)
    spans = {}
    for c in dict.fromkeys(r.component for r in records):
        mine = [r for r in records if r.component == c]
        spans[c] = ((min(r.start for r in mine) - t0) / 1000, (min(r.ready for r in mine) - t0) / 1000,
                    (max(r.done for r in mine) - t0) / 1000)
    return spans


def print_profile(impl, shape, weights) -> None:
    """When each component's tasks ran, T = 16 and 4096 (the third launch): first start, first met waits, last
    done, us. `impl` is the fused layer or its separate kernels (the records of those linked with a profile:
    a sequential kernel has none; the global timer is one clock for all)."""
    for T in (16, 4096):
        x = layer.make_tokens(shape, T, 4)
        buffers = layer.poisoned_buffers(impl.layout(shape, T))
        for _ in range(3):
            impl.run(shape, x, weights, buffers)
        records = [r for k in impl.kernels if k.manifest.profile_tasks for r in k.task_profile()]
        t0 = min(r.start for r in records)
        parts = [f"{c.removeprefix('moe_')} {start:.1f}/{ready:.1f}-{done:.1f}"
                 for c, (start, ready, done) in component_spans(records).items()]
        work = sorted((r.done - t0) / 1000 for r in records
                      if r.component == "moe_expert_hopper" and r.done - r.ready > 2000)
        if work:
            parts.append(f"experts with work {len(work)}, 90% done at {work[int(0.9 * len(work))]:.1f}")
        print(f"  T={T}: " + "; ".join(parts), flush=True)


def compare(impls: dict, shape, weights, rounds: int) -> None:
    """At every T of layer.TOKEN_COUNTS, fresh tokens: each implementation checked against the fp32 reference
    (poisoned outputs; a wrong one ends the run), then timed GPU only in `rounds` rounds whose order rotates,
    and one line of medians printed."""
    import torch
    import run
    for T in layer.TOKEN_COUNTS:
        x = layer.make_tokens(shape, T, int.from_bytes(os.urandom(2), "little"))
        buffers = {n: layer.poisoned_buffers(i.layout(shape, T)) for n, i in impls.items()}
        for n, impl in impls.items():
            impl.run(shape, x, weights, buffers[n])
            torch.cuda.synchronize()
            verdict = layer.judge(shape, x, weights, buffers[n])
            if not verdict.ok:
                sys.exit(f"{n}, T={T}: wrong: {verdict}")
        times = {n: [] for n in impls}
        names = list(impls)
        for k in range(rounds):
            for n in names[k % len(names):] + names[:k % len(names)]:
                times[n].append(run.gpu_only_us(impls[n], shape, x, weights, buffers[n], rounds=3))
        print(f"T={T:5} " + "  ".join(f"{n} {statistics.median(t):7.1f}" for n, t in times.items()), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--separate", type=int, default=2, help="separate-kernel graphs of the first N folders")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--out-of-line", action="append", default=[], metavar="ENTRY")
    ap.add_argument("--profile", action="store_true",
                    help="also a task profile of the first folder's layer, fused and as separate kernels")
    ap.add_argument("--static", action="store_true", help="also the first folder's layer with static dispatch")
    ap.add_argument("--splits", type=int, action="append", default=[], metavar="N",
                    help="also the first folder's layer with N expert shares a tile at every T")
    args = ap.parse_args()
    objects = {d.name: [d / f"moe_{n}.o" for n in NAMES] for d in args.dirs}
    links = {name: builds.link_hopper(objs) for name, objs in objects.items()}
    if args.out_of_line:
        first = args.dirs[0].name
        links[f"{first} out of line"] = link_out_of_line(objects[first], args.out_of_line)
    if args.static:
        first = args.dirs[0].name
        links[f"{first} static"] = builds.link_pipelink(objects[first], pipeline=builds.HOPPER_PIPELINE, dispatch="static")
    for name, r in links.items():
        if not r.ok:
            sys.exit("\n".join(d.render() for d in r.diagnostics))
        print(f"{name}: {r.manifest.resources.registers} registers, {r.manifest.resources.frame_bytes} B frame",
              flush=True)
    separates = {name: builds.link_separate(objects[name], links[name].manifest.geometry)
                 for name in list(objects)[:args.separate]}
    try:
        import torch  # noqa: F401  (what follows runs on a GPU)
    except ImportError:
        print("no torch here: linked only")
        return 0
    import launchers
    impls = {n: launchers.PipelinkLayer.from_link(r) for n, r in links.items()}
    first = args.dirs[0].name
    for n in args.splits:
        impls[f"{first} splits={n}"] = with_splits(impls[first], n)
    for n, kernels in separates.items():
        impls[f"{n} separate graph"] = launchers.CapturedLayer(launchers.PipelinkSeparate.from_links(kernels))
    shape = layer.SHAPES["qwen3-30b-a3b"]
    weights = layer.make_weights(shape, int.from_bytes(os.urandom(2), "little"))
    compare(impls, shape, weights, args.rounds)
    if args.profile:
        first = args.dirs[0].name
        profiled = builds.link_pipelink(objects[first], pipeline=builds.HOPPER_PIPELINE, profile_tasks=1 << 16)
        print(f"task profile, {first} fused:")
        print_profile(launchers.PipelinkLayer.from_link(profiled), shape, weights)
        if args.out_of_line:
            ool = link_out_of_line(objects[first], args.out_of_line, profile_tasks=1 << 16)
            print(f"task profile, {first} out of line:")
            print_profile(launchers.PipelinkLayer.from_link(ool), shape, weights)
        alone = builds.link_separate(objects[first], profiled.manifest.geometry, profile_tasks=1 << 16)
        print(f"task profile, {first} as separate kernels (launched in order, not captured):")
        print_profile(launchers.PipelinkSeparate.from_links(alone), shape, weights)
    return 0


if __name__ == "__main__":
    sys.exit(main())
