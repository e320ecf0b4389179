"""The MoE case study in one command: build the four teams' components, link them with pipelink
and classically, then (on a GPU) check every kernel against torch, benchmark, and run the
modified-geometry test. Results go to results/ (all.json with every raw time, RESULTS.md).

    python case_studies/moe_four_owners/run.py [all|test|bench|variants|smoke|once|profile] [--out DIR]

`smoke` runs pipelink's kernel (plain and --debug-events) and the classic one once each in child
processes under the watchdog: the first thing to try after a change that might hang. `once` runs
each kernel once on two small problems in this process: the target for
`compute-sanitizer --tool memcheck|racecheck|synccheck python .../run.py once [--shape small]`, and of
`ncu -k regex:moe_layer_hopper ... python .../run.py once --shape qwen3-30b-a3b --tokens 4096 --impl "pipelink hopper"`
(racecheck did not finish the qwen shape within a minute). `profile` links pipelink's layers with a task
profile and prints, per T, where each component's time goes (waiting for its events, running, notifying).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import builds  # noqa: E402
import layer  # noqa: E402
import variants  # noqa: E402

RESULTS = HERE / "results"
SAMPLES = 20
WARMUP = 3
VARIANT_SHAPE, VARIANT_TOKENS = "qwen3-30b-a3b", 256


def log(*parts) -> None:
    print(*parts, flush=True)


def gpu_present() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def build_baseline(out: Path) -> tuple[builds.Builds, object, bytes]:
    start = time.perf_counter()
    base = builds.build_all(out / "base")
    if base.pipelink_build_errors:
        sys.exit("\n".join(base.pipelink_build_errors))
    linked = builds.link_pipelink(base.pipelink_objects)
    for d in linked.diagnostics:
        log(d.render())
    if not linked.ok:
        sys.exit("pipelink could not link the baseline")
    (out / "base" / "moe_layer.map").write_text(linked.link_map)
    classic = builds.link_classic(base.classic_objects)
    log(f"built 4 components twice (pipelink, classic) and linked both in {time.perf_counter() - start:.1f} s; "
        f"link map: {out / 'base' / 'moe_layer.map'}")
    return base, linked, classic


def build_expert_layer(out: Path, base: builds.Builds, expert: str = "split"):
    """The layer with the expert team's split expert, or (expert="hopper") its Hopper expert, the other teams'
    objects from `base`: (the link, its objects)."""
    start = time.perf_counter()
    build, link = {"split": (builds.build_split, builds.link_split),
                   "hopper": (builds.build_hopper, builds.link_hopper)}[expert]
    objects = build(out / expert, base)
    linked = link(objects)
    for d in linked.diagnostics:
        log(d.render())
    if not linked.ok:
        sys.exit(f"pipelink could not link the {expert} layer")
    (out / expert / f"moe_layer_{expert}.map").write_text(linked.link_map)
    log(f"built the {expert} expert and linked its layer in {time.perf_counter() - start:.1f} s; "
        f"link map: {out / expert / f'moe_layer_{expert}.map'}")
    return linked, objects


# The implementations, in the order of the benchmark's columns. "... graph": captured once per problem
# into a CUDA graph and replayed (launchers.CapturedLayer); the torch _grouped_mm ones only where
# torch has it and takes the shapes (grouped_mm_unavailable), never replaced by another path.
GRAPHED = {"pipelink fused graph": "pipelink fused", "pipelink split graph": "pipelink split",
           "pipelink hopper graph": "pipelink hopper",
           "pipelink separate graph": "pipelink separate", "pipelink split separate graph": "pipelink split separate",
           "pipelink hopper separate graph": "pipelink hopper separate", "separate kernels graph": "separate kernels",
           "torch grouped_mm graph": "torch grouped_mm"}
NOT_JUDGED = ("torch",)  # the per-expert loop writes y only: no routing buffers to check


def implementations(linked, classic_cubin: bytes, skipped: dict | None = None, controls: bool = True,
                    split=None, separate=None, hopper=None, separates: dict | None = None) -> dict:
    """Every implementation; `skipped` (if given) receives {name: why} for those that cannot run here.
    controls=False: the kernels and the torch loop only (no graphs, no _grouped_mm probe). `split`: the
    layer linked with the expert team's split expert ("pipelink split"); `hopper`: with its Hopper expert
    ("pipelink hopper"); `separate`: the four pipelink objects linked one kernel each (builds.link_separate:
    "pipelink separate"); `separates`: {name: links} of the other layers' separate controls ("pipelink split
    separate", "pipelink hopper separate")."""
    separates = separates or {}
    import launchers
    impls = {"pipelink fused": launchers.PipelinkLayer.from_link(linked),
             **({"pipelink split": launchers.PipelinkLayer.from_link(split)} if split is not None else {}),
             **({"pipelink hopper": launchers.PipelinkLayer.from_link(hopper)} if hopper is not None else {}),
             **({"pipelink separate": launchers.PipelinkSeparate.from_links(separate)} if separate is not None else {}),
             **{name: launchers.PipelinkSeparate.from_links(links) for name, links in separates.items()},
             "classic fused": launchers.ClassicFused(classic_cubin),
             "separate kernels": launchers.ClassicSeparate(classic_cubin),
             "torch": launchers.TorchLayer()}
    if not controls:
        return impls
    why = launchers.grouped_mm_unavailable(layer.SHAPES.values())
    if why is None:
        impls["torch grouped_mm"] = launchers.GroupedMmLayer()
    else:
        log(f"skipped: torch grouped_mm and its graph: {why}")
        if skipped is not None:
            skipped["torch grouped_mm"] = skipped["torch grouped_mm graph"] = why
    # The graphs wrap instances of their own (the pipelink one: its own loaded kernel and workspace).
    own = {"pipelink fused": lambda: launchers.PipelinkLayer.from_link(linked),
           "pipelink split": lambda: launchers.PipelinkLayer.from_link(split),
           "pipelink hopper": lambda: launchers.PipelinkLayer.from_link(hopper),
           "pipelink separate": lambda: launchers.PipelinkSeparate.from_links(separate),
           **{name: (lambda links=links: launchers.PipelinkSeparate.from_links(links))
              for name, links in separates.items()},
           "separate kernels": lambda: launchers.ClassicSeparate(classic_cubin),
           "torch grouped_mm": launchers.GroupedMmLayer}
    for name, eager in GRAPHED.items():
        if eager in impls:
            impls[name] = launchers.CapturedLayer(own[eager]())
    return impls


def run_tests(impls: dict, seed: int) -> list[dict]:
    """Every kernel, both model shapes, every token count: fresh inputs, poisoned outputs. pipelink's
    kernel runs twice without any reset between; a graph is captured on one token set (launch 1) and
    replayed on another (launch 2), its buffers poisoned again in place before the replay."""
    import torch
    rows = []
    for shape in layer.SHAPES.values():
        weights = layer.make_weights(shape, seed)
        for T in layer.TOKEN_COUNTS:
            x = layer.make_tokens(shape, T, seed + T)
            x_other = layer.make_tokens(shape, T, seed + T + 7919)
            for name, impl in impls.items():
                if name in NOT_JUDGED:
                    continue
                graphed = name in GRAPHED
                launches = ((1, x_other), (2, x)) if graphed else ((1, x), (2, x)) if name.startswith("pipelink") \
                    else ((1, x),)
                buffers = None
                for launch, xi in launches:
                    if graphed and buffers is not None:
                        layer.poison(buffers)  # the same buffers: the captured graph writes them
                    else:
                        buffers = layer.poisoned_buffers(impl.layout(shape, T))
                    impl.run(shape, xi, weights, buffers)
                    torch.cuda.synchronize()
                    v = layer.judge(shape, xi, weights, buffers)
                    rows.append({"shape": shape.name, "T": T, "kernel": name, "launch": launch, "ok": v.ok,
                                 "max_err": v.max_err, "unwritten": v.unwritten, "routing": v.routing_detail})
                    log(f"  {shape.name:14} T={T:5} {name:22} launch {launch}: {'ok ' if v.ok else 'FAIL'} "
                        f"max err {v.max_err:.4f} x rms, unwritten {v.unwritten}, {v.routing_detail}")
    return rows


def run_bench(impls: dict, seed: int) -> list[dict]:
    """Time per MoE layer, as the caller sees it: CUDA events around one call (its launches and any
    host work), from a scrubbed L2; the implementations alternate, the order rotating every round."""
    import torch
    from pipelink.harness.timing import scrub_l2
    rows = []
    names = list(impls)
    for shape in layer.SHAPES.values():
        weights = layer.make_weights(shape, seed)
        for T in layer.TOKEN_COUNTS:
            x = layer.make_tokens(shape, T, seed + T)
            bufs = {n: layer.poisoned_buffers(impls[n].layout(shape, T)) for n in names}
            times = {n: [] for n in names}
            for rnd in range(WARMUP + SAMPLES):
                order = names[rnd % len(names):] + names[:rnd % len(names)]
                for n in order:
                    scrub_l2()
                    torch.cuda.synchronize()
                    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    begin.record()
                    impls[n].run(shape, x, weights, bufs[n])
                    end.record()
                    end.synchronize()
                    if rnd >= WARMUP:
                        times[n].append(begin.elapsed_time(end) * 1000.0)
            gpu = {n: gpu_only_us(impls[n], shape, x, weights, bufs[n]) for n in names if n != "torch"}  # torch: syncs
            row = {"shape": shape.name, "T": T, "samples_us": times,
                   "median_us": {n: statistics.median(times[n]) for n in names}, "gpu_only_us": gpu,
                   "weights_read_bytes": weights_read_bytes(shape, x, weights)}
            rows.append(row)
            log(f"  {shape.name:14} T={T:5} " + "  ".join(f"{n} {row['median_us'][n]:9.1f} us" for n in names))
            log(f"  {'':14} {'GPU only':7} " + "  ".join(f"{n} {gpu[n]:9.1f} us" for n in gpu))
    return rows


def weights_read_bytes(shape, x, weights) -> int:
    """The bytes of weights a layer must read at least: the router's, and gate, up and down of every expert
    the fp32 reference routing touches (bf16)."""
    import torch
    ids = torch.topk(layer.reference_logits(shape, x, weights), shape.TOPK, dim=-1).indices
    touched = int(torch.unique(ids).numel())
    return 2 * (shape.E * shape.H + touched * 3 * shape.H * shape.I)


def gpu_only_us(impl, shape, x, weights, buffers, calls: int = 10, rounds: int = 5) -> float:
    """GPU time per call with the host out of the way: `calls` calls queued behind a GPU sleep,
    back to back (no L2 scrub between them); the median of `rounds`."""
    import torch
    out = []
    for _ in range(rounds):
        torch.cuda.synchronize()
        torch.cuda._sleep(20_000_000)  # ~10 ms: longer than the host needs to queue the calls
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(calls):
            impl.run(shape, x, weights, buffers)
        end.record()
        end.synchronize()
        out.append(begin.elapsed_time(end) * 1000.0 / calls)
    return statistics.median(out)


def _variant_outcome(vdir: Path, name: str, linked, seed: int) -> dict:
    """A variant's pipelink link: its first error, or what its kernel did once in a child under the watchdog."""
    if not linked.ok:
        first = next(d for d in linked.diagnostics if d.severity == "error")
        return {"outcome": "link-time diagnostic", "detail": first.render().splitlines()[0]}
    (vdir / f"{name}.cubin").write_bytes(linked.cubin)
    (vdir / f"{name}.json").write_text(json.dumps(linked.manifest.to_json()))
    return variants.classify_child("pipelink", vdir / f"{name}.cubin", vdir / f"{name}.json", VARIANT_SHAPE,
                                   VARIANT_TOKENS, seed)


def run_variants(out: Path, base: builds.Builds, seed: int, hopper_objects: list[Path] | None = None) -> list[dict]:
    """Each variant: the classic build, pipelink's four-component layer, and (`hopper_objects`: the Hopper
    layer's objects) the Hopper layer with the changed team's object, where the change is not moe_expert's
    (the Hopper layer has its own expert)."""
    rows = []
    for v in variants.VARIANTS:
        vdir = out / v.name
        b = builds.build_all(vdir, v.change, base)
        row = {"variant": v.name, "team": v.change.team, "change": f"{v.change.constant} = {v.change.value}",
               "what": v.what}
        # classic: plain nvJitLink; nothing to check, so it always links
        classic_cubin = vdir / "classic.cubin"
        classic_cubin.write_bytes(builds.link_classic(b.classic_objects))
        row["classic"] = variants.classify_child("classic", classic_cubin, None, VARIANT_SHAPE, VARIANT_TOKENS, seed)
        if b.pipelink_build_errors:
            row["pipelink"] = {"outcome": "build refused", "detail": b.pipelink_build_errors[0].splitlines()[0]}
        else:
            row["pipelink"] = _variant_outcome(vdir, "pipelink", builds.link_pipelink(b.pipelink_objects), seed)
            if hopper_objects is not None and v.change.team != "expert":
                router, dispatch, _, combine = b.pipelink_objects
                objects = [router, dispatch, *hopper_objects[2:4], combine]
                row["pipelink hopper"] = _variant_outcome(vdir, "pipelink_hopper", builds.link_hopper(objects), seed)
        rows.append(row)
        log(f"  {v.name:22} classic: {row['classic']['outcome']:24} pipelink: {row['pipelink']['outcome']}"
            + (f"  Hopper layer: {row['pipelink hopper']['outcome']}" if "pipelink hopper" in row else ""))
        log(f"  {'':22}   classic: {row['classic']['detail']}")
        log(f"  {'':22}   pipelink: {row['pipelink']['detail']}")
    return rows


def run_once(impls: dict, seed: int, only: str | None = None, tokens: int | None = None,
             names: list[str] | None = None) -> int:
    """Each implementation (or those `names`) once on the small shape (T=50) and the model shape (T=40, or
    `tokens`), or only on the shape `only`: the target for compute-sanitizer and Nsight Compute."""
    import torch
    failed = 0
    impls = {n: i for n, i in impls.items() if names is None or n in names}
    for shape, T in (("small", 50), (VARIANT_SHAPE, tokens or 40)):
        if only and shape != only:
            continue
        s = layer.SHAPES[shape]
        weights, x = layer.make_weights(s, seed), layer.make_tokens(s, T, seed + 1)
        for name, impl in impls.items():
            if name == "torch":
                continue
            buffers = layer.poisoned_buffers(impl.layout(s, T))
            impl.run(s, x, weights, buffers)
            torch.cuda.synchronize()
            v = layer.judge(s, x, weights, buffers)
            failed += not v.ok
            log(f"  {shape:14} T={T:4} {name:17} {'ok' if v.ok else 'FAIL'} (max err {v.max_err:.4f} x rms)")
    return 1 if failed else 0


def run_profile(out: Path, base: builds.Builds, seed: int, only: list[str] | None = None) -> int:
    """pipelink's layers (the four components; the split expert's; the Hopper expert's) linked with a task
    profile, each run at every T of the qwen shape: where each launch's time goes, component by component
    (results/profile.json; with `only`, those layers, printed and not saved)."""
    import launchers
    from pipelink.runtime import profile
    links = {"pipelink fused": lambda: builds.link_pipelink(base.pipelink_objects, profile_tasks=1 << 18),
             "pipelink split": lambda: builds.link_split(builds.build_split(out / "split", base), profile_tasks=1 << 18),
             "pipelink hopper": lambda: builds.link_hopper(builds.build_hopper(out / "hopper", base),
                                                           profile_tasks=1 << 18)}
    unknown = set(only or ()) - set(links)
    if unknown:
        sys.exit(f"profile: no layer named {sorted(unknown)}; the layers: {sorted(links)}")
    kernels = {name: link() for name, link in links.items() if not only or name in only}
    shape = layer.SHAPES[VARIANT_SHAPE]
    weights = layer.make_weights(shape, seed)
    doc = {"date": datetime.date.today().isoformat(), "seed": seed, "shape": shape.name,
           "command": "python case_studies/moe_four_owners/run.py profile", "runs": []}
    import torch
    doc["device"] = torch.cuda.get_device_name(0)
    for name, linked in kernels.items():
        if not linked.ok:
            sys.exit("\n".join(d.render() for d in linked.diagnostics))
        impl = launchers.PipelinkLayer.from_link(linked)
        for T in layer.TOKEN_COUNTS:
            x = layer.make_tokens(shape, T, seed + T)
            buffers = layer.poisoned_buffers(impl.layout(shape, T))
            for _ in range(3):
                impl.run(shape, x, weights, buffers)
            records = impl.kernel.task_profile()
            log(f"{name}, T={T}:")
            log(profile.render(records))
            span, sms, per = profile.summarize(records)
            doc["runs"].append({"kernel": name, "T": T, "span_us": span, "sms": sms,
                                "components": [c.__dict__ for c in per]})
        impl.kernel.unload()
    if only:
        return 0
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "profile.json").write_text(json.dumps(doc, indent=1))
    log(f"results: {RESULTS / 'profile.json'}")
    return 0


def run_smoke(out: Path, base: builds.Builds, linked, classic: bytes, seed: int) -> int:
    debug = builds.link_pipelink(base.pipelink_objects, debug_events=True)  # the same objects, relinked
    worlds = {"pipelink": linked, "pipelink --debug-events": debug}
    failed = 0
    for name, result in worlds.items():
        path = out / "base" / (name.split()[0] + ("-debug" if "debug" in name else ""))
        path.with_suffix(".cubin").write_bytes(result.cubin)
        path.with_suffix(".json").write_text(json.dumps(result.manifest.to_json()))
        for shape, T in (("small", 16), (VARIANT_SHAPE, 16), (VARIANT_SHAPE, 1024)):
            v = variants.classify_child("pipelink", path.with_suffix(".cubin"), path.with_suffix(".json"), shape, T, seed)
            failed += v["outcome"] != "correct"
            log(f"  {name:24} {shape:14} T={T:5}: {v['outcome']}: {v['detail']}")
    (out / "base" / "classic.cubin").write_bytes(classic)
    for shape, T in (("small", 16), (VARIANT_SHAPE, 16), (VARIANT_SHAPE, 1024)):
        v = variants.classify_child("classic", out / "base" / "classic.cubin", None, shape, T, seed)
        failed += v["outcome"] != "correct"
        log(f"  {'classic fused':24} {shape:14} T={T:5}: {v['outcome']}: {v['detail']}")
    return 1 if failed else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="?", default="all",
                    choices=["all", "smoke", "once", "test", "bench", "variants", "child", "profile"])
    ap.add_argument("--out", default=str(Path(os.environ.get("MOE_BUILD_DIR", "build/moe_four_owners"))))
    ap.add_argument("--seed", type=int, default=None, help="default: fresh every run")
    ap.add_argument("--world"), ap.add_argument("--cubin"), ap.add_argument("--manifest")
    ap.add_argument("--shape", default=None, help="child: the shape to run (default %s); once: only this shape"
                    % VARIANT_SHAPE)
    ap.add_argument("--tokens", type=int, default=None, help="child: T (default %d); once: T of the model shape "
                    "(default 40)" % VARIANT_TOKENS)
    ap.add_argument("--impl", action="append", help="once, test, bench, profile: only this implementation (repeatable)")
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little") % 1_000_000
    if args.what == "child":
        verdict = variants.child_main(args.world, Path(args.cubin), Path(args.manifest) if args.manifest else None,
                                      args.shape or VARIANT_SHAPE, args.tokens or VARIANT_TOKENS, seed)
        print(json.dumps(verdict), flush=True)
        os._exit(0)  # a hung kernel may still run: leave without waiting for it
    out = Path(args.out)
    base, linked, classic = build_baseline(out)
    split, split_objects = build_expert_layer(out, base)
    hopper, hopper_objects = build_expert_layer(out, base, "hopper")
    separate = builds.link_separate(base.pipelink_objects)
    separates = {"pipelink split separate": builds.link_separate(split_objects, split.manifest.geometry),
                 "pipelink hopper separate": builds.link_separate(hopper_objects, hopper.manifest.geometry)}
    if not gpu_present():
        log("no GPU here: built and linked; the tests, the benchmark and the modified-geometry test need one")
        return 0
    if args.what == "smoke":  # each baseline kernel once, in a child under the watchdog
        return run_smoke(out, base, linked, classic, seed)
    if args.what == "profile":
        return run_profile(out, base, seed, args.impl)
    if args.what == "once":
        return run_once(implementations(linked, classic, controls=False, split=split, separate=separate,
                                        hopper=hopper, separates=separates), seed,
                        args.shape, args.tokens, args.impl)
    import torch
    RESULTS.mkdir(exist_ok=True)
    doc = {"date": datetime.date.today().isoformat(), "device": torch.cuda.get_device_name(0), "seed": seed,
           "command": "python case_studies/moe_four_owners/run.py " + shlex.join(sys.argv[1:] if argv is None else argv)}
    failed = False
    skipped = {}
    impls = implementations(linked, classic, skipped, split=split, separate=separate, hopper=hopper,
                            separates=separates)
    if args.impl:  # a part of the comparison only (results/<what>.json, never RESULTS.md)
        impls = {n: i for n, i in impls.items() if n in args.impl}
        doc["only"] = list(impls)
    if skipped:
        doc["skipped"] = skipped
    if args.what in ("all", "test"):
        log("correctness (fresh random inputs, poisoned outputs, fp32 torch reference):")
        doc["tests"] = run_tests(impls, seed)
        failed |= not all(r["ok"] for r in doc["tests"])
    if args.what in ("all", "bench"):
        log("time per MoE layer (median of %d, scrubbed L2):" % SAMPLES)
        doc["bench"] = run_bench(impls, seed)
    if args.what in ("all", "variants"):
        log(f"modified-geometry test ({VARIANT_SHAPE}, T={VARIANT_TOKENS}):")
        doc["variants"] = run_variants(out, base, seed, hopper_objects)
        caught = ("correct", "link-time diagnostic", "build refused")  # pipelink ran it right or said why not
        failed |= not all(r[k]["outcome"] in caught for r in doc["variants"] for k in ("pipelink", "pipelink hopper")
                          if k in r)
    (RESULTS / f"{args.what}.json").write_text(json.dumps(doc, indent=1))
    if args.what == "all" and not args.impl:
        import report
        (RESULTS / "RESULTS.md").write_text(report.render(doc))
    log(f"results: {RESULTS / (args.what + '.json')}" + (f", {RESULTS / 'RESULTS.md'}" if args.what == "all" else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
