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
        out += ["## Correctness", "",
                f"{ok} of {len(tests)} runs correct: both model shapes x T in 16, 128, 1024, 4096 x the three kernels "
                "(pipelink's twice in a row, no reset), fresh random bf16 inputs, outputs poisoned with NaN, against "
                "an fp32 torch reference on the kernel's own routing (which must itself be a top-k of the fp32 "
                f"logits). Largest error: {max(r['max_err'] for r in tests):.4f} x rms(reference) "
                "(tolerance 0.05).", ""]
    if "bench" in doc:
        names = list(doc["bench"][0]["median_us"])
        out += ["## Time per MoE layer", "",
                "Per call: what the caller waits for, CUDA events around one call (its launches and host work), "
                "L2 scrubbed before each, median of 20, implementations alternating. GPU only: 10 calls queued "
                "behind a GPU sleep, back to back, median of 5 rounds. Microseconds.", "",
                "| shape | T | " + " | ".join(f"{n} per call" for n in names) + " | "
                + " | ".join(f"{n} GPU only" for n in doc["bench"][0]["gpu_only_us"]) + " |",
                "|---|---:|" + "---:|" * (len(names) + len(doc["bench"][0]["gpu_only_us"]))]
        for r in doc["bench"]:
            out.append(f"| {r['shape']} | {r['T']} | " + " | ".join(f"{r['median_us'][n]:.0f}" for n in names) + " | "
                       + " | ".join(f"{v:.0f}" for v in r["gpu_only_us"].values()) + " |")
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


def _short(text: str) -> str:
    text = text.split(" Search for ")[0]
    return text.replace("|", "/")[:150]


if __name__ == "__main__":
    src = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent / "results" / "all.json")
    print(render(json.loads(src.read_text())))
