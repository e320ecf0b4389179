"""RESULTS.md from a results JSON of run.py: the tables of the case study, from the data alone."""
from __future__ import annotations

import json
import sys
from pathlib import Path


def render(doc: dict) -> str:
    out = ["# MoE case study: results", "",
           f"`{doc['command']}` on an {doc['device']}, {doc['date']} (inputs seed {doc['seed']}).", ""]
    summary = None
    if "tests" in doc:
        tests = doc["tests"]
        ok = sum(r["ok"] for r in tests)
        kernels = list(dict.fromkeys(r["kernel"] for r in tests))
        graphs = [k for k in kernels if k.endswith(" graph")]
        if kernels == ["pipelink fused", "classic fused", "separate kernels"]:  # the first runs' wording
            what = "the three kernels (pipelink's twice in a row, no reset)"
        else:
            what = (f"{len(kernels)} implementations ({', '.join(kernels)}; pipelink's fused kernel twice in a row, "
                    "no reset" + ("; each graph captured on one token set, then replayed on another, its input "
                                  "copied in and its outputs poisoned again" if graphs else "") + ")")
        out += ["## Correctness", "",
                f"{ok} of {len(tests)} runs correct: both model shapes x T in 16, 128, 1024, 4096 x {what}, "
                "fresh random bf16 inputs, outputs poisoned with NaN, against "
                "an fp32 torch reference on the kernel's own routing (which must itself be a top-k of the fp32 "
                f"logits). Largest error: {max(r['max_err'] for r in tests):.4f} x rms(reference) "
                "(tolerance 0.05).", ""]
    if "bench" in doc:
        bench = doc["bench"]
        names = _union(r["median_us"] for r in bench)
        gpu_names = _union(r["gpu_only_us"] for r in bench)
        out += ["## Time per MoE layer", "",
                "Per call: what the caller waits for, CUDA events around one call (its launches and host work), "
                "L2 scrubbed before each, median of 20, implementations alternating. GPU only: 10 calls queued "
                "behind a GPU sleep, back to back, median of 5 rounds. Microseconds.", ""]
        if any(n.endswith(" graph") for n in names):
            out += ["\"... graph\": the same implementation captured once per problem into a CUDA graph and "
                    "replayed; a call is the copy of x into the graph's input plus the replay. The separate "
                    "kernels are captured as plain launches: no programmatic dependent launch (the launcher "
                    "has no launch attributes and the components do not wait on the grid dependency).", ""]
        if any(n.startswith("pipelink separate") for n in names):
            out += ["\"pipelink separate\": the same four pipelink objects, each linked as a kernel of its own "
                    "(`standalone`: the launch order meets its waits) with its own shared memory and registers, "
                    "launched in order with programmatic dependent launch: the fair unfused control.", ""]
        if any(n.startswith("torch grouped_mm") for n in names):
            out += ["\"torch grouped_mm\": router in fp32, softmax top-k, tokens permuted expert by expert, "
                    "`torch._grouped_mm` for gate, up and down with the experts' end offsets, SwiGLU, weighted "
                    "sum; the same inputs and routing weights as the kernels.", ""]
        for name, why in doc.get("skipped", {}).items():
            out += [f"Skipped: {name}: {_short(why)}", ""]
        out += ["| shape | T | " + " | ".join(f"{n} per call" for n in names) + " | "
                + " | ".join(f"{n} GPU only" for n in gpu_names) + " |",
                "|---|---:|" + "---:|" * (len(names) + len(gpu_names))]
        for r in bench:
            out.append(f"| {r['shape']} | {r['T']} | " + " | ".join(_us(r["median_us"].get(n)) for n in names) + " | "
                       + " | ".join(_us(r["gpu_only_us"].get(n)) for n in gpu_names) + " |")
        out.append("")
        targets, summary = _targets(bench)
        out += targets
    if "variants" in doc:
        out += ["## Modified-geometry test", "",
                "One team changes one constant of its own component and rebuilds only that component. Classic: "
                "plain nvJitLink over the teams' builds, each with the values it hard-coded, and the integrator's "
                "hand-written glue. pipelink: the teams' contracts. Each kernel ran once (qwen3-30b-a3b shape, "
                "T=256) in a child process with a 10 s watchdog.", "",
                *(["The Hopper layer: the same change with the Hopper expert in moe_expert's place (its own "
                   "expert, so the expert team's changes to moe_expert do not apply: -).", ""]
                  if any("pipelink hopper" in v for v in doc["variants"]) else [])]
        hopper = any("pipelink hopper" in v for v in doc["variants"])
        out += ["| variant (team: change) | classic | pipelink |" + (" pipelink, Hopper layer |" if hopper else ""),
                "|---|---|---|" + ("---|" if hopper else "")]
        for v in doc["variants"]:
            h = v.get("pipelink hopper")
            out.append(f"| {v['variant']} ({v['team']}: {v['change']}) | {v['classic']['outcome']}: "
                       f"{_short(v['classic']['detail'])} | {v['pipelink']['outcome']}: {_short(v['pipelink']['detail'])} |"
                       + ((f" {h['outcome']}: {_short(h['detail'])} |" if h else " - |") if hopper else ""))
        out.append("")
    if summary:
        out.append(summary)
    return "\n".join(out)


HBM_TBPS, BF16_DENSE_TFLOPS = 4.8, 989.0  # H200: HBM3e bandwidth; dense bf16 tensor-core peak (SXM)
TARGET_SHAPE = "qwen3-30b-a3b"
FUSED = ("pipelink fused", "pipelink split", "pipelink hopper")  # one link per T: the fastest
SEPARATE = ("pipelink separate graph", "separate kernels graph")  # the first layer's unfused controls
# The fair unfused control of each fused link: its own components, each a kernel, in a CUDA graph.
SEPARATE_OF = {"pipelink fused": SEPARATE, "pipelink split": ("pipelink split separate graph",),
               "pipelink hopper": ("pipelink hopper separate graph",)}
GROUPED = "torch grouped_mm graph"


def _targets(bench: list[dict]) -> tuple[list[str], str | None]:
    """The issue's targets at the model shape, from the GPU-only times: pipelink's fused layer (the fastest of
    its links at each T) against torch routing + _grouped_mm in a CUDA graph and against the same
    components launched separately in a CUDA graph; the T=16 time over the weight-read floor; achieved
    bandwidth and FLOP rate. Returns the section and the summary line (the document's last)."""
    rows = [r for r in bench if r["shape"] == TARGET_SHAPE and "weights_read_bytes" in r]
    if not rows or not all(any(n in r["gpu_only_us"] for n in FUSED) for r in rows):
        return [], None
    from layer import SHAPES
    shape = SHAPES[TARGET_SHAPE]
    links = [n for n in FUSED if any(n in r["gpu_only_us"] for r in rows)]
    which = (f"the faster of `{links[0]}` and `{links[1]}` at each T (both one kernel)" if len(links) == 2 else
             "the fastest of " + ", ".join(f"`{n}`" for n in links[:-1]) + f" and `{links[-1]}` at each T (each one kernel)"
             if len(links) > 2 else f"`{links[0]}`")
    table = ["| T | pipelink fused us (link) | grouped_mm graph us | separate graph us | vs grouped_mm graph | "
             "vs separate graph | floor us | over floor | TB/s | TFLOP/s |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    vs_grouped, vs_separate, t16, fallback = [], [], None, False
    for r in rows:
        g = r["gpu_only_us"]
        link = min((n for n in FUSED if n in g), key=lambda n: g[n])
        fused = g[link]
        grouped = g.get(GROUPED)
        own = [n for n in SEPARATE_OF[link] if n in g]
        separate = min((g[n] for n in own or SEPARATE if n in g), default=None)
        fallback |= not own
        mark = "" if own else "*"
        floor = r["weights_read_bytes"] / (HBM_TBPS * 1e12) * 1e6
        flops = 6.0 * r["T"] * shape.TOPK * shape.H * shape.I
        if grouped is not None:
            vs_grouped.append(grouped / fused)
        if separate is not None:
            vs_separate.append(separate / fused)
        if r["T"] == 16:
            t16 = fused / floor
        table.append(f"| {r['T']} | {fused:.1f} ({link.removeprefix('pipelink ')}) | {_us(grouped)} | {_us(separate)}{mark} | "
                   + (f"{grouped / fused:.2f}x" if grouped else "-") + " | "
                   + (f"{separate / fused:.2f}x" if separate else "-") + f" | {floor:.1f} | {fused / floor:.2f}x | "
                   f"{r['weights_read_bytes'] / fused / 1e6:.2f} | {flops / fused / 1e6:.1f} |")
    control = ("separate graph: the fused link's own components, each linked as a kernel of its own, in a CUDA "
               "graph (`pipelink <link> separate graph`)" +
               ("; * where the run has none for that link: the faster of the first layer's two separate-kernel "
                "graphs" if fallback else ""))
    out = ["## Against the targets (qwen3-30b-a3b, GPU only)", "",
           f"pipelink fused: {which}; {control}; floor: the weights the fp32 routing "
           f"touches (router, and gate, up and down of each touched expert, bf16) read once at {HBM_TBPS} TB/s. "
           f"Rates: those bytes, and 6 T TOPK H I FLOPs, over pipelink's time (H200: {HBM_TBPS} TB/s, "
           f"{BF16_DENSE_TFLOPS:.0f} dense bf16 TFLOP/s).", "", *table]
    summary = (f"summary: qwen3-30b-a3b fused vs grouped_mm graph min {min(vs_grouped):.2f}x, vs separate graph "
               f"min {min(vs_separate):.2f}x, T=16 at {t16:.2f}x the weight-read floor"
               if vs_grouped and vs_separate and t16 is not None else None)
    return out + [""], summary


def _union(dicts) -> list[str]:
    """The keys of all the dicts, in first-seen order (a row may lack a column)."""
    return list(dict.fromkeys(k for d in dicts for k in d))


def _us(value) -> str:
    return "-" if value is None else f"{value:.0f}"


def _short(text: str) -> str:
    text = text.split(" Search for ")[0]
    return text.replace("|", "/")[:150]


if __name__ == "__main__":
    src = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "results" / "all.json")
    print(render(json.loads(src.read_text())))
