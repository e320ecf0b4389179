"""Parity: linked kernels against their one-unit controls, on a GPU.

For every configuration (pipeline x tile geometry x problem shape x dispatch): link with pipelink;
compile the one-unit control (the same component sources and the same glue as one translation
unit, `pipelink link --emit-monolithic`) with nvcc as `pipelink build` compiles the components, and
link it with the same nvJitLink options (the link's optional `control` pass); compare the kernels'
.text byte for byte; check both against a reference; time both, alternating, medians of SAMPLES
samples of LAUNCHES launches each, fresh random data rotated over more than the L2; in each round
both kernels read the same inputs from a scrubbed L2. Persistent kernels share one event workspace,
so the two differ in nothing but their modules. Rounds are added, SAMPLES at a time, until the
paired difference (the median of each round's difference) is known to +-0.05% or --max-samples
is reached.

The shipped pipelines always run; the role-structured ones of the Qwen3-32B MLP case study (a
CUTLASS sm90 mainloop with three epilogues) run where the pinned nvidia-cutlass headers are
installed. --sass-only needs no GPU (nor torch): it links, compiles the controls and compares the
.text of every configuration, into sass_identity.json.

    python bench/parity/parity.py [--samples 30] [--launches 20] [--max-samples 300] [--out bench/parity]
    python bench/parity/parity.py --sass-only [--only swiglu_128x256,rowsum] [--objects DIR]
"""
import argparse
import datetime
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from pipelink.authoring.builder import BuildOptions, build_component, cutlass_include_dir
from pipelink.core.diagnostics import DiagnosticSink
from pipelink.core.jsonread import parse
from pipelink.core.loader import load_contract_bytes, load_contract_file
from pipelink.core.model import Source
from pipelink.core.pipeline import load_pipeline
from pipelink.linker.monolithic import compare_text
from pipelink.linker.passes import LinkOptions, link
from pipelink.harness.problems import (chain_problem, gemm_problem, gemv_problem, max_error, moe_problem, rowsum_problem,
                                       splitk_problem)
from pipelink.harness.shipped import REPO, build_shipped, shipped_pipelines

HALFWIDTH_PCT = 0.05  # rounds are added until the paired difference is known this well (95%)

# pipeline -> list of (geometry label, {component: {geometry name: value}}, [shapes], make(shape, seed), dispatches)
BIG = [(1024, 1024), (4096, 4096), (8192, 8192)]
CONFIGS = [
    ("rowsum", [("TILE_M=16", {"tile_load": {"TILE_M": 16}}), ("TILE_M=32", {}),
                ("TILE_M=64", {"tile_load": {"TILE_M": 64}})],
     BIG, lambda s, seed, g: rowsum_problem(*s, seed), [None]),
    ("ring_gemv", [("TILE_M=16 STAGES=4", {}), ("TILE_M=16 STAGES=2", {"ring_load": {"STAGES": 2}}),
                   ("TILE_M=32 STAGES=3", {"ring_load": {"TILE_M": 32, "STAGES": 3}})],
     BIG, lambda s, seed, g: gemv_problem(*s, seed), [None]),
    ("splitk_gemv", [("KCHUNK=512", {"splitk_partial": {"KCHUNK": 512}}), ("KCHUNK=1024", {}),
                     ("KCHUNK=2048", {"splitk_partial": {"KCHUNK": 2048}})],
     [(256, 16384), (1024, 8192), (4096, 4096)],
     lambda s, seed, g: splitk_problem(*s, seed, kchunk=g.get("splitk_partial", {}).get("KCHUNK", 1024)),
     ["static", "dynamic"]),
    ("tile_chain", [("TM=32 TN=128", {}), ("TM=16 TN=256", {"tile_silu_store": {"TM": 16, "TN": 256}})],
     [(1024, 1024), (4096, 4096), (8192, 4096)], lambda s, seed, g: chain_problem(*s, seed), ["static", "dynamic"]),
    ("moe_dispatch", [("-", {})], [(256, 2048, 32, 4), (1024, 2048, 64, 8), (4096, 1024, 128, 8)],
     lambda s, seed, g: moe_problem(s[0], s[1], seed, E=s[2], TOPK=s[3]), ["static", "dynamic"]),
]


# The role-structured pipelines of the Qwen3-32B MLP case study: a CUTLASS sm90 TMA + wgmma mainloop
# (one source, a contract per tile shape) and three epilogues. Configurations only where the CUTLASS
# headers are installed; GEMM shapes (M, N, K), N the accumulator's width (for SwiGLU: gate and up).
STUDY = REPO / "case_studies" / "qwen3_32b_mlp"
STUDY_COMPONENTS = {  # component -> its source folder (the mainloop team ships one source, two contracts)
    "hopper_gemm_128x256": "hopper_gemm", "hopper_gemm_128x128": "hopper_gemm", "hopper_gemm_64x128": "hopper_gemm",
    "epi_store_bf16": "epi_store_bf16", "epi_swiglu": "epi_swiglu", "epi_bias_residual": "epi_bias_residual",
}
# 64x128 at M = 64 and 128x128 at M = 128: one row of tiles, so the launcher splits the reduction (stream-K).
GEMM_SHAPES = {"128x256": [(2048, 5120, 5120), (4096, 10240, 5120)], "128x128": [(128, 5120, 25600), (4096, 10240, 5120)],
               "64x128": [(64, 5120, 5120), (128, 10240, 5120)]}


def _gemm(epilogue):
    return lambda s, seed, g: gemm_problem(epilogue, *s, seed)


CUTLASS_CONFIGS = [(f"{epi}_{tile}", [("-", {})], GEMM_SHAPES[tile], _gemm(epi), [None])
                   for epi in ("swiglu", "plain", "residual") for tile in ("128x256", "128x128", "64x128")]


def pipeline_path(name: str) -> Path:
    shipped = {p.name: p.path for p in shipped_pipelines()}
    return shipped.get(name) or STUDY / "pipelines" / f"{name}.json"


def study_objects(out: Path, log=print) -> dict:
    """The case study's components, built with `pipelink build` into `out` (in parallel: the mainloop
    takes half a minute or more per tile shape)."""
    out.mkdir(parents=True, exist_ok=True)

    def one(name):
        sink = DiagnosticSink()
        path = REPO / "contracts" / f"{name}.json"
        contract = load_contract_file(path, sink)
        src = REPO / "components" / STUDY_COMPONENTS[name] / f"{STUDY_COMPONENTS[name]}.cu"
        start = time.perf_counter()
        if contract is None or not build_component(contract, path.read_bytes(), src, out / f"{name}.o", sink):
            sys.exit("\n".join(d.render() for d in sink.items))
        log(f"built {name}.o in {time.perf_counter() - start:.0f} s")
        return name, str(out / f"{name}.o")
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return dict(pool.map(one, STUDY_COMPONENTS))


def variant_objects(objects: dict, edits: dict, tmp: Path) -> dict:
    """The shipped objects, with the components named in `edits` rebuilt with other geometry."""
    out = dict(objects)
    for name, provides in edits.items():
        raw = parse((REPO / "contracts" / f"{name}.json").read_bytes())
        raw["geometry"]["provides"].update(provides)
        text = json.dumps(raw).encode()
        sink = DiagnosticSink()
        contract = load_contract_bytes(text, Source(f"{name}.json"), sink)
        obj = tmp / f"{name}-{'-'.join(f'{k}{v}' for k, v in provides.items())}.o"
        if not obj.exists() and not build_component(contract, text, REPO / "components" / name / f"{name}.cu", obj,
                                                    sink, BuildOptions(archs=("sm_90",))):
            sys.exit("\n".join(d.render() for d in sink.items))
        out[name] = str(obj)
    return out


def link_both(objects: dict, pipeline: str, dispatch):
    """The linked kernel and its one-unit control's cubin."""
    sink = DiagnosticSink()
    spec = load_pipeline(str(pipeline_path(pipeline)), sink)
    if spec is None:
        sys.exit("\n".join(d.render() for d in sink.items))
    if dispatch:
        spec = replace(spec, dispatch=dispatch)
    result = link([objects[n] for n in spec.components], LinkOptions(pipeline=spec, monolithic=True, cache=False),
                  extra=("control",))
    if not result.ok:
        sys.exit("\n".join(d.render() for d in result.diagnostics))
    return result, result.context.control_cubin


def configurations(args, tmp: Path):
    """(pipeline, geometry label, edits, shapes, make, dispatch, objects) for every configuration to run."""
    only = set(args.only.split(",")) if args.only else None
    configs = [c for c in CONFIGS if only is None or c[0] in only]
    study = [c for c in CUTLASS_CONFIGS if only is None or c[0] in only]
    objects = {}
    if configs:
        sink = DiagnosticSink()
        objects = {o.stem: str(o) for o in build_shipped(tmp / "shipped", sink, log=lambda *_: None)}
        if sink.has_errors:
            sys.exit("\n".join(d.render() for d in sink.items))
    if study and cutlass_include_dir() is None:
        print("skipping the CUTLASS pipelines: the nvidia-cutlass headers are not installed", flush=True)
        study = []
    if study:
        if args.objects:
            objects.update({n: str(Path(args.objects) / f"{n}.o") for n in STUDY_COMPONENTS})
        else:
            objects.update(study_objects(tmp / "study"))
    for pipeline, geometries, shapes, make, dispatches in configs + study:
        for label, edits in geometries:
            variant = variant_objects(objects, edits, tmp)
            for dispatch in dispatches:
                yield pipeline, label, edits, shapes, make, dispatch, variant


def sass_only(args, tmp: Path) -> None:
    """Link, compile the control, compare .text: every configuration, no GPU."""
    rows = []
    for pipeline, label, _, _, _, dispatch, objects in configurations(args, tmp):
        start = time.perf_counter()
        result, control = link_both(objects, pipeline, dispatch)
        row = {"pipeline": pipeline, "geometry": label, "dispatch": dispatch or "-",
               **compare_text(result.cubin, control, result.manifest.kernel),
               "seconds": round(time.perf_counter() - start, 1)}
        rows.append(row)
        print(f"{pipeline:18} {label:20} {row['dispatch']:8} .text {row['linked_bytes']} B linked, "
              f"{row['control_bytes']} B control: {'identical' if row['identical'] else 'DIFFERENT from byte ' + str(row['first_difference'])}",
              flush=True)
    doc = {"date": datetime.date.today().isoformat(), "machine": f"{os.cpu_count()} cores, no GPU needed",
           "command": "python bench/parity/parity.py " + " ".join(sys.argv[1:]),
           "control": "one unit, nvcc as `pipelink build` runs it, linked with the link's nvJitLink options",
           "configurations": rows}
    (Path(args.out) / "sass_identity.json").write_text(json.dumps(doc, indent=1) + "\n")
    if not all(r["identical"] for r in rows):
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--launches", type=int, default=20,
                    help="launches per sample (0: about 2 ms of GPU work, 20 to 400; for short persistent kernels "
                         "the host then cannot queue launches fast enough and gaps enter the samples)")
    ap.add_argument("--max-samples", type=int, default=300,
                    help="more rounds, `--samples` at a time, until the paired difference is known to +-0.05%% "
                         "(95%% bootstrap) or this many")
    ap.add_argument("--out", default=str(REPO / "bench" / "parity"))
    ap.add_argument("--sass-only", action="store_true", help="no GPU: compare the .text only (sass_identity.json)")
    ap.add_argument("--only", help="comma-separated pipeline names")
    ap.add_argument("--objects", help="a folder with the case study's objects already built (else built here)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="pipelink-parity-"))
    if args.sass_only:
        return sass_only(args, tmp)
    import torch

    from pipelink.formats.cubin import read_cubin
    from pipelink.harness.timing import alternate_until, input_sets, launches_for
    from pipelink.runtime.launch import Kernel
    props = torch.cuda.get_device_properties(0)
    rows = []
    seed = int(torch.randint(0, 2**31 - 1, (1,)).item())
    for pipeline, label, edits, shapes, make, dispatch, objects in configurations(args, tmp):
        result, control_cubin_bytes = link_both(objects, pipeline, dispatch)
        name = result.manifest.kernel
        linked_text, control_text = read_cubin(result.cubin)[name].text, read_cubin(control_cubin_bytes)[name].text
        identical = linked_text == control_text
        # The control is another cubin with the same kernel: the manifest, with its hash.
        control_manifest = replace(result.manifest, cubin_sha256=hashlib.sha256(control_cubin_bytes).hexdigest())
        linked_k, control_k = result.kernel(), Kernel.load(control_cubin_bytes, control_manifest)
        # One event workspace for both: the same addresses, so data placement cannot differ.
        control_k.share_workspace(linked_k)
        for shape in shapes:
            seed += 1
            sets = input_sets(lambda i: make(shape, seed * 1000 + i, edits))
            errors = []
            for kernel, problem in ((linked_k, sets[0]), (control_k, sets[1])):
                kernel.launch(**problem.args)
                torch.cuda.synchronize()
                errors.append(max_error(problem))
                assert errors[-1] <= problem.tolerance, (pipeline, label, dispatch, shape, errors)
            launches = args.launches or launches_for(linked_k, sets)
            t = alternate_until({"linked": linked_k, "control": control_k}, sets, "linked", "control",
                                args.samples, max(args.samples, args.max_samples), HALFWIDTH_PCT, launches)
            lt, ct = t["linked"]["median_us"], t["control"]["median_us"]
            row = {"pipeline": pipeline, "geometry": label, "dispatch": dispatch or "-", "shape": list(shape),
                   "sass_identical": identical, "text_bytes": len(linked_text), "launches": launches,
                   "linked_us": lt,
                   "control_us": ct, "diff_pct": 100.0 * (lt - ct) / ct, "max_error": max(errors),
                   "paired_diff_pct": t["paired_diff_pct"], "paired_halfwidth_pct": t["halfwidth_pct"],
                   "rounds": len(t["linked"]["samples_us"]),
                   "linked_samples_us": t["linked"]["samples_us"],
                   "control_samples_us": t["control"]["samples_us"]}
            rows.append(row)
            print(f"{pipeline:18} {label:20} {row['dispatch']:8} {str(shape):22} identical={identical} "
                  f"linked {lt:9.2f} us control {ct:9.2f} us ({row['diff_pct']:+.2f}%; paired "
                  f"{row['paired_diff_pct']:+.3f}% +-{row['paired_halfwidth_pct']:.3f} over {row['rounds']} "
                  "rounds)", flush=True)
            save(args, props, rows)
        linked_k.unload()
        control_k.unload()
    save(args, props, rows)


def save(args, props, rows) -> None:
    """results.json and RESULTS.md for the configurations measured so far (after every one: a run
    cut short keeps what it measured)."""
    res = {"date": datetime.date.today().isoformat(), "gpu": props.name, "samples": args.samples,
           "launches_per_sample": f"{args.launches}" if args.launches else "about 2 ms of (20 to 400)",
           "command": "python bench/parity/parity.py " + " ".join(sys.argv[1:]),
           "configurations": rows}
    out = Path(args.out)
    (out / "results.json").write_text(json.dumps(res, indent=1) + "\n")
    (out / "RESULTS.md").write_text(render(res))


def render(res) -> str:
    rows = res["configurations"]
    lines = ["# Parity: linked kernels against one-unit controls", "",
             f"Machine: {res['gpu']}. Date: {res['date']}. Command: `{res['command']}`.",
             f"Each time is the median of {res['samples']} samples, each {res['launches_per_sample']} back-to-back "
             "launches "
             "(CUDA events, queued behind a GPU sleep), linked and control alternating; in each round both read the same "
             "inputs from a scrubbed L2, rotating over more than twice the L2; fresh random data; every output checked against a float64 reference. Raw samples in "
             "results.json.", "",
             "Difference: of the two medians. Paired: the median over rounds of each round's linked-vs-control "
             "difference (what varies between rounds cancels), with its 95% bootstrap half-width; rounds are added "
             "until that half-width is 0.05% or the round limit is reached.", "",
             "| pipeline | geometry | dispatch | shape | SASS identical | linked (us) | control (us) | difference "
             "| paired | rounds |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    paired = all("paired_diff_pct" in r for r in rows)
    for r in rows:
        pair = (f"{r['paired_diff_pct']:+.3f}% +-{r['paired_halfwidth_pct']:.3f} | {r['rounds']}" if paired
                else "- | -")
        lines.append(f"| {r['pipeline']} | {r['geometry']} | {r['dispatch']} | {'x'.join(map(str, r['shape']))} | "
                     f"{'yes' if r['sass_identical'] else 'NO'} | {r['linked_us']:.2f} | {r['control_us']:.2f} | "
                     f"{r['diff_pct']:+.2f}% | {pair} |")
    diffs = [abs(r["diff_pct"]) for r in rows]
    same = sum(r["sass_identical"] for r in rows)
    summary = (f"**{len(rows)} configurations, {len({r['pipeline'] for r in rows})} pipelines: {same} SASS-identical; "
               f"median |difference| {statistics.median(diffs):.3f}%, max |difference| {max(diffs):.3f}%")
    if paired:
        pd = [abs(r["paired_diff_pct"]) for r in rows]
        summary += f"; paired: median {statistics.median(pd):.3f}%, max {max(pd):.3f}%"
    lines += ["", summary + ".**"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
