"""Llama-3.2-1B decode as one linked megakernel: correctness against Hugging Face transformers and per-step
latency against the baselines, on one GPU.

    python case_studies/llama32_1b_decode/run.py [--checkpoint PATH] [--quick]

1. Builds Llama-3.2-1B with random weights (seeded; or loads a safetensors checkpoint) in bf16 on cuda.
2. Lays its weights out for the pipelink kernels (model.DecodeModel), shared by every variant.
3. Latency: at every batch size and context (the cache length attended, filled with random values), every
   variant's step is timed with CUDA events, the variants alternating round-robin, median over --iters.
4. Correctness: feeds a fixed prompt token by token (positions 0..P-1), then decodes greedily for --steps
   steps. At every step each pipelink variant's logits are compared with the reference's (max abs error), and
   its greedy token with the reference's argmax; every variant is fed the reference's token (so the logits
   stay comparable after a near-tie flips), a mismatch is printed with the reference's top-2 margin. The same
   steps run through the reference in fp32 (the same weights upcast, exact; --no-fp32-reference: not): each
   variant's tokens and logits against it too, and the bf16 reference's own, where two bf16 implementations
   split near-ties differently.
5. Writes results/<name>.json and renders it (decode_report.py): results/RESULTS.md for the default name
   (decode), results/<name>.md for any other.
"""
from __future__ import annotations

import argparse
import copy
import datetime
import json
import shlex
import statistics
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent.parent))

import decode_kernels  # noqa: E402
import decode_parts  # noqa: E402
import decode_report as report  # noqa: E402
from decode_model import DecodeModel, DecodeState, build_reference  # noqa: E402

# Fixed prompt: token ids (the Llama-3 tokenizer's "<|begin_of_text|>The quick brown fox jumps over the lazy
# dog."; with random weights any ids do).
PROMPT = [128000, 791, 4062, 14198, 39935, 35308, 927, 279, 16053, 5679, 13]
BATCHES = [1, 8]
CONTEXTS = [16, 256, 1024, 4096, 16384]

# pipelink_X: the megakernel of pipeline X, or of pipeline X linked with other options (decode_kernels owns both).
PIPELINK_VARIANTS = (tuple(f"pipelink_{v}" for v in (*decode_kernels.MEGA_PIPELINES, *decode_kernels.MEGA_OPTIONS))
                     + ("parts_graph", "parts_ring_graph", "parts_lr_graph"))
TORCH_VARIANTS = ("torch_eager", "torch_graph")
# What the results table compares: the split-KV step, its loader-ring form (the summary line's), the whole-context
# step (the attention swap), each step's components as separate kernels in a graph, and the reference; the other
# steps are experiments, asked for by name.
DEFAULT_VARIANTS = ("pipelink_split", "pipelink_lr", "pipelink_head", "parts_graph", "parts_lr_graph") + TORCH_VARIANTS


def log(*a):
    print(*a, flush=True)


def machine() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.max.sm",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=30)
        return out.stdout.strip() or out.stderr.strip()
    except Exception as exc:  # no nvidia-smi
        return f"unknown ({exc})"


# --- the variants -----------------------------------------------------------------------------------------

def load_variants(objects, wanted, errors, pipelines: Path | None = None, load: bool = True):
    """{name: MegaStep or PartsStep} for the pipelink variants that link and load; failures into `errors`.
    `pipelines`: a folder of pipeline files the megakernels link with instead of pipelines/ (same names);
    `load`: False to link only (no GPU)."""
    from decode_kernels import LinkFailed, MegaStep, PartsStep
    made = {}
    for name in wanted:
        try:
            if name.startswith("pipelink_"):  # a megakernel: decode_kernels.MEGA_PIPELINES / MEGA_OPTIONS
                made[name] = MegaStep(objects, name[len("pipelink_"):], pipelines=pipelines, load=load)
            elif name == "parts_graph":
                made[name] = PartsStep(objects, "split", dependent=True, load=load)
                log(f"parts_graph: dependent launch {made[name].dependent}")
            elif name == "parts_ring_graph":  # the ring step's components as separate kernels
                made[name] = PartsStep(objects, "split", dependent=True, ring=True, load=load)
            elif name == "parts_lr_graph":  # the loader-ring step's components as separate kernels
                made[name] = PartsStep(objects, "split", dependent=True, lr=True, load=load)
        except Exception as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"
            log(f"{name}: not available: {errors[name]}")
            if not isinstance(exc, LinkFailed):  # the linker's refusal is its diagnostics; anything else a fault
                traceback.print_exc()
    return made


def manifests_of(step) -> dict:
    """{unit: Manifest} of a MegaStep (its one kernel, unit None) or a PartsStep (a kernel per unit)."""
    from decode_kernels import MegaStep
    return {None: step.manifest} if isinstance(step, MegaStep) else dict(step.manifests)


def describe(variants) -> dict:
    """What each pipelink variant launches: kernel names, blocks, dynamic shared memory, dependent launch."""

    def one(m):
        return dict(kernel=m.kernel, block=list(m.block), dynamic_smem=m.dynamic_smem, persistent=m.persistent,
                    dependent_launch=m.dependent_launch,
                    **({"registers": m.resources.registers, "frame_bytes": m.resources.frame_bytes}
                       if m.resources is not None else {}))
    out = {}
    for name, v in variants.items():
        try:
            per = {u: one(m) for u, m in manifests_of(v).items()}
            out[name] = per[None] if None in per else per
        except Exception as exc:  # a manifest field this pipelink does not have
            out[name] = f"{type(exc).__name__}: {exc}"
    return out


def pipelink_launcher(variant, dm, state, L):
    """A function launching one step of a pipelink variant on a stream."""
    from decode_kernels import MegaStep
    if isinstance(variant, MegaStep):
        prepared = variant.prepare(dm, state, L)
        fn = lambda stream: prepared.launch(stream)  # noqa: E731
        fn.keep = prepared
        return fn
    return variant.prepare(dm, state, L)


def as_graph(fn):
    """`fn(stream)` captured into a torch CUDA graph (after a warm-up on a side stream): a replay function."""
    import torch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn(side)
        fn(side)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(torch.cuda.current_stream())
    def replay(stream=None):
        graph.replay()
    replay.keep = (graph, fn)  # the graph's tensors live as long as the replay function
    return replay


# --- correctness ------------------------------------------------------------------------------------------

def fp32_reference(model):
    """The reference model in fp32: the same weights (bf16 values are exact in fp32), fp32 arithmetic."""
    return copy.deepcopy(model).float()


def correctness(model, dm, variants, steps, B, atol, rtol, errors, fp32: bool = True):
    """Teacher-forced greedy decoding: the reference's tokens go into every variant (and, with `fp32`, into the
    reference in fp32, which every variant and the bf16 reference are compared with as well)."""
    import torch
    from decode_baselines import HFStep
    P = len(PROMPT)
    total = P + steps - 1  # the logits at the last prompt position give the first generated token
    Lmax = -(-total // 256) * 256
    ref = HFStep(model, B, Lmax)
    ref32 = HFStep(fp32_reference(model), B, Lmax) if fp32 else None
    bf16_vs_fp32 = dict(max_abs_err=0.0, argmax_match=0, generated=0, mismatches=[])
    states = {}
    for name, v in variants.items():
        states[name] = DecodeState.allocate(dm, B, Lmax)
    stats = {name: dict(max_abs_err=0.0, ref_absmax=0.0, argmax_match=0, generated=0, mismatches=[],
                        tokens=[], token_is_logit_argmax=0, steps=0) for name in variants}
    ref_tokens = []
    stream = torch.cuda.current_stream()
    tok = PROMPT[0]
    for i in range(total):
        pos = i
        ref.set([tok] * B, pos)
        ref_logits = ref.step().float()
        ref_next = int(ref_logits[0].argmax())
        top2 = torch.topk(ref_logits[0], 2).values
        margin = float(top2[0] - top2[1])
        generated = i >= P - 1
        if ref32 is not None:
            ref32.set([tok] * B, pos)
            logits32 = ref32.step().float()
            next32 = int(logits32[0].argmax())
            top2_32 = torch.topk(logits32[0], 2).values
            bf16_vs_fp32["max_abs_err"] = max(bf16_vs_fp32["max_abs_err"], float((ref_logits - logits32).abs().max()))
            if generated and bf16_vs_fp32["generated"] < steps:
                bf16_vs_fp32["generated"] += 1
                bf16_vs_fp32["argmax_match"] += int(ref_next == next32)
                if ref_next != next32:
                    bf16_vs_fp32["mismatches"].append(dict(step=i, fp32=next32, bf16=ref_next,
                                                           fp32_top2_margin=float(top2_32[0] - top2_32[1])))
        for name, v in list(variants.items()):
            st, s = states[name], stats[name]
            try:
                st["token"].fill_(tok)
                st["pos"].fill_(pos)
                launch = pipelink_launcher(v, dm, st, pos + 1)
                launch(stream)
                torch.cuda.synchronize()
            except Exception as exc:
                errors[f"{name} (correctness)"] = s["failed"] = f"{type(exc).__name__}: {exc}"
                log(f"{name}: correctness run failed at step {i}: {exc}")
                traceback.print_exc()
                del variants[name]
                continue
            got = st["logits"].float()
            err = float((got - ref_logits).abs().max())
            s["max_abs_err"] = max(s["max_abs_err"], err)
            s["ref_absmax"] = max(s["ref_absmax"], float(ref_logits.abs().max()))
            s["steps"] += 1
            got_tok = [int(t) for t in st["token"].tolist()]
            if ref32 is not None:  # against the reference in fp32
                f = s.setdefault("fp32", dict(max_abs_err=0.0, argmax_match=0, generated=0))
                f["max_abs_err"] = max(f["max_abs_err"], float((got - logits32).abs().max()))
                if generated and f["generated"] < steps:
                    f["generated"] += 1
                    f["argmax_match"] += int(all(t == next32 for t in got_tok))
            s["token_is_logit_argmax"] += int(got_tok[0] == int(got[0].argmax()))
            if generated and len(s["tokens"]) < steps:
                s["generated"] += 1
                s["tokens"].append(got_tok[0])
                same = all(t == ref_next for t in got_tok)
                s["argmax_match"] += int(same)
                if not same:
                    m = dict(step=i, position=pos, ref=ref_next, got=got_tok, ref_top2_margin=margin, max_abs_err=err)
                    s["mismatches"].append(m)
                    log(f"{name}: argmax mismatch at step {i}: reference {ref_next}, got {got_tok}, "
                        f"reference top-2 margin {margin:.4g}, max abs error {err:.4g}")
        if generated and len(ref_tokens) < steps:
            ref_tokens.append(ref_next)
        tok = PROMPT[i + 1] if i + 1 < P else ref_next
    for name, s in stats.items():
        s["within_tolerance"] = "failed" not in s and s["max_abs_err"] <= atol + rtol * s["ref_absmax"]
        f = s.get("fp32")
        log(f"{name}: {s['steps']} steps, max abs error {s['max_abs_err']:.4g} (reference |logit| max "
            f"{s['ref_absmax']:.4g}), tokens match {s['argmax_match']}/{s['generated']}"
            + (f"; against fp32: max abs error {f['max_abs_err']:.4g}, tokens match {f['argmax_match']}/{f['generated']}"
               if f else ""))
    out = dict(batch=B, prompt=PROMPT, steps=steps, atol=atol, rtol=rtol, reference_tokens=ref_tokens,
               variants=stats)
    if ref32 is not None:
        log(f"the bf16 reference against fp32: max abs error {bf16_vs_fp32['max_abs_err']:.4g}, tokens match "
            f"{bf16_vs_fp32['argmax_match']}/{bf16_vs_fp32['generated']}")
        out["reference_bf16_vs_fp32"] = bf16_vs_fp32
        del ref32  # its weights and cache leave the GPU before the latency runs
        torch.cuda.empty_cache()
    return out


# --- latency ----------------------------------------------------------------------------------------------

def time_round_robin(fns: dict, warmup: int, iters: int) -> dict:
    """Median, min and mean microseconds per call of each fn(stream), the fns alternating in every round."""
    import torch
    stream = torch.cuda.current_stream()
    sleep = getattr(torch.cuda, "_sleep", None)
    for name, fn in fns.items():  # one variant at a time first: a fault names its variant
        for _ in range(warmup):
            fn(stream)
        try:
            torch.cuda.synchronize()
        except RuntimeError as exc:
            raise RuntimeError(f"{name} failed in its warm-up: {exc}") from exc
    events = {name: [] for name in fns}
    for _ in range(iters):
        for name, fn in fns.items():
            if sleep is not None:
                sleep(20000)  # keep the GPU busy while the host enqueues the step
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(stream)
            fn(stream)
            end.record(stream)
            events[name].append((start, end))
    torch.cuda.synchronize()
    out = {}
    for name, pairs in events.items():
        us = [1000.0 * s.elapsed_time(e) for s, e in pairs]
        out[name] = dict(median_us=statistics.median(us), min_us=min(us), mean_us=statistics.fmean(us), n=len(us))
    return out


def bench_config(model, dm, variants, B, ctx, warmup, iters, torch_variants, errors):
    """Every variant at batch B, context ctx (the cache holds ctx positions, the step attends all of them)."""
    import torch
    from decode_baselines import HFStep
    pos = ctx - 1
    fns, keep = {}, []
    g = torch.Generator(device="cuda").manual_seed(1000 + ctx + B)
    tokens = torch.randint(0, dm.V, (B,), generator=g, device="cuda", dtype=torch.int32)
    for name, v in variants.items():
        try:
            st = DecodeState.allocate(dm, B, ctx)
            st.fill_cache_random(seed=ctx)
            st["token"].copy_(tokens)
            st["pos"].fill_(pos)
            fns[name] = as_graph(pipelink_launcher(v, dm, st, ctx))
            keep.append(st)
        except Exception as exc:
            errors[f"{name} B={B} ctx={ctx}"] = f"{type(exc).__name__}: {exc}"
            log(f"{name} at B={B} ctx={ctx}: {exc}")
    for name in torch_variants:
        hf = HFStep(model, B, ctx)  # each variant its own cache
        hf.set(tokens.long(), pos)
        hf.step()  # the cache's tensors exist after a first step
        hf.fill_cache_random(seed=ctx)
        if name == "torch_eager":
            fns[name] = hf.step_fn()
        else:
            try:
                hf.capture()
                fns[name] = hf.replay_fn()
            except Exception as exc:
                errors[f"{name} B={B} ctx={ctx}"] = f"{type(exc).__name__}: {exc}"
                log(f"{name} at B={B} ctx={ctx}: {exc}")
        keep.append(hf)
    res = time_round_robin(fns, warmup, iters)
    rows = [dict(B=B, ctx=ctx, variant=name, **r) for name, r in res.items()]
    for r in rows:
        log(f"B={B} ctx={ctx:6d} {r['variant']:16s} median {r['median_us']:9.2f} us  min {r['min_us']:9.2f} us")
    del fns, keep
    torch.cuda.empty_cache()
    return rows


def link_variants(args, errors: dict, load: bool = True) -> dict:
    """Every pipelink variant asked for, with the case study's objects, each --values set's and each --objects
    folder's (VARIANT@NAME); `load`: False to link only."""
    wanted = [v for v in args.variants if v in PIPELINK_VARIANTS]
    if not wanted:
        return {}
    log("building and linking the pipelink components")
    from decode_kernels import build_objects
    build = Path(tempfile.mkdtemp(prefix="llama_decode_build_"))
    objects = build_objects(build)
    variants = load_variants(objects, wanted, errors, load=load)
    for vs in args.values:
        log(f"building and linking with {vs.name}: " + ", ".join(f"{c}.{k} = {v}" for c, k, v in vs.values))
        try:
            objs = decode_parts.build_value_set(build / vs.name, vs, objects)
        except Exception as exc:
            errors[vs.name] = f"{type(exc).__name__}: {exc}"
            log(f"{vs.name}: not available: {errors[vs.name]}")
            continue
        variants.update({f"{name}@{vs.name}": step
                         for name, step in load_variants(objs, wanted, errors, load=load).items()})
    for name, folder in args.objects:
        objs = {p.stem: p for p in sorted(folder.glob("*.o"))}
        log(f"linking with the objects of {folder} as @{name}: {len(objs)} objects")
        pipelines = folder / "pipelines" if (folder / "pipelines").is_dir() else None
        variants.update({f"{v}@{name}": step
                         for v, step in load_variants(objs, wanted, errors, pipelines, load=load).items()})
    return variants


def gpu_present() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def link_only(args) -> int:
    """Where torch has no GPU to run on: build and link every pipelink variant asked for and say what each
    would launch; 1 when one does not link."""
    errors: dict = {}
    for name, step in link_variants(args, errors, load=False).items():
        for unit, m in manifests_of(step).items():
            log(f"{name}{f' ({unit})' if unit else ''}: kernel {m.kernel}, {m.block[0]} threads, "
                f"{m.dynamic_smem} bytes of dynamic smem"
                + (f", {m.resources.registers} registers, {m.resources.frame_bytes} B frame" if m.resources else ""))
    log("no GPU here (torch with CUDA): built and linked; the correctness run against transformers and the "
        "timings need one")
    return 1 if errors else 0


# --- main -------------------------------------------------------------------------------------------------

def _value_set(text: str):
    try:
        return decode_parts.parse_value_set(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _objects_dir(text: str):
    name, sep, folder = text.partition(":")
    if not sep or not name.isidentifier() or not Path(folder).is_dir():
        raise argparse.ArgumentTypeError(f"'{text}': expected NAME:DIR, DIR a folder of component objects")
    return name, Path(folder)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--checkpoint", help="a safetensors file or directory to load instead of random weights")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=64, help="generated steps of the correctness run")
    ap.add_argument("--no-fp32-reference", dest="fp32_reference", action="store_false",
                    help="compare with the bf16 reference only (not also with the reference run in fp32)")
    ap.add_argument("--correct-batch", type=int, default=1, help="batch of the correctness run (rows alike)")
    ap.add_argument("--batches", type=int, nargs="+", default=BATCHES)
    ap.add_argument("--contexts", type=int, nargs="+", default=CONTEXTS)
    ap.add_argument("--iters", type=int, default=100, help="timed steps per variant and configuration (>= 50)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--atol", type=float, default=0.1)
    ap.add_argument("--rtol", type=float, default=0.02)
    ap.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS), choices=PIPELINK_VARIANTS + TORCH_VARIANTS,
                    metavar="VARIANT", help=f"of {', '.join(PIPELINK_VARIANTS + TORCH_VARIANTS)} (default: "
                                            f"{' '.join(DEFAULT_VARIANTS)})")
    ap.add_argument("--values", action="append", default=[], type=_value_set, metavar="NAME:COMPONENT.KEY=VALUE[,...]",
                    help="also build every pipelink variant with these contract values (e.g. "
                         "qkv8:qkv_rope_normed.QKV_ROWS=8), timed as VARIANT@NAME in the same round-robin; repeatable")
    ap.add_argument("--objects", action="append", default=[], type=_objects_dir, metavar="NAME:DIR",
                    help="also link every pipelink variant from the components' objects in DIR (NAME.o each, e.g. "
                         "another commit's build; its pipeline files too where DIR/pipelines holds them), timed as "
                         "VARIANT@NAME in the same round-robin; repeatable")
    ap.add_argument("--skip-correctness", action="store_true")
    ap.add_argument("--skip-bench", action="store_true")
    ap.add_argument("--quick", action="store_true", help="B=1 only, contexts 16 and 1024, 50 iterations")
    ap.add_argument("--out", default=str(HERE / "results"), help="results folder")
    ap.add_argument("--name", default="decode", help="results/<name>.json")
    args = ap.parse_args(argv)
    if args.quick:
        args.batches, args.contexts, args.iters = [1], [16, 1024], 50

    if not gpu_present():
        return link_only(args)
    import torch
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    errors: dict = {}
    results = dict(command=" ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]), machine=machine(),
                   date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   torch=torch.__version__, seed=args.seed, checkpoint=args.checkpoint, errors=errors)
    try:
        import transformers
        results["transformers"] = transformers.__version__
    except ImportError:
        pass

    log("building the reference model")
    model = build_reference(args.seed, args.checkpoint)
    dm = DecodeModel.from_hf(model)
    results["weight_bytes_per_step"] = {str(B): report.weight_bytes(B) for B in args.batches}

    results["value_sets"] = {vs.name: [list(v) for v in vs.values] for vs in args.values}
    results["object_sets"] = {name: str(folder) for name, folder in args.objects}
    variants = link_variants(args, errors)
    torch_variants = [v for v in args.variants if v.startswith("torch_")]
    results["kernels"] = describe(variants)

    def save():
        path = out_dir / f"{args.name}.json"
        report.write_whole({path: json.dumps(results, indent=1) + "\n", report.markdown_path(path): report.render(results)})
        return path

    # The latency first: each configuration's rows are saved as they come, whatever happens after them.
    if not args.skip_bench:
        rows = []
        for B in args.batches:
            for ctx in args.contexts:
                log(f"latency: B={B} ctx={ctx}")
                rows += bench_config(model, dm, variants, B, ctx, args.warmup, args.iters, torch_variants, errors)
                results["latency"] = rows
                save()
    if not args.skip_correctness:
        log(f"correctness: prompt of {len(PROMPT)} tokens, {args.steps} generated steps")
        results["correctness"] = correctness(model, dm, dict(variants), args.steps, args.correct_batch,
                                             args.atol, args.rtol, errors, args.fp32_reference)
        save()
    path = save()
    log(f"wrote {path} and {report.markdown_path(path)}")
    log(report.summary_line(results))
    for v in variants.values():
        v.unload()
    return 0


if __name__ == "__main__":
    sys.exit(main())
