"""RESULTS.md from a results JSON of run.py: the tables of the case study, from the data alone."""
from __future__ import annotations

import json
import sys
from pathlib import Path


def render(doc: dict) -> str:
    out = ["# MoE case study: results", "",
           f"`{doc['command']}` on an {doc['device']}, {doc['date']} (inputs seed {doc['seed']}).", ""]
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
    if "variants" in doc:
        out += ["## Modified-geometry test", "",
                "One team changes one constant of its own component and rebuilds only that component. Classic: "
                "plain nvJitLink over the teams' builds, each with the values it hard-coded, and the integrator's "
                "hand-written glue. pipelink: the teams' contracts. Each kernel ran once (qwen3-30b-a3b shape, "
                "T=256) in a child process with a 10 s watchdog.", "",
                "| variant (team: change) | classic | pipelink |", "|---|---|---|"]
        for v in doc["variants"]:
            out.append(f"| {v['variant']} ({v['team']}: {v['change']}) | {v['classic']['outcome']}: "
                       f"{_short(v['classic']['detail'])} | {v['pipelink']['outcome']}: {_short(v['pipelink']['detail'])} |")
        out.append("")
    return "\n".join(out)


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
