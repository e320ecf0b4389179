"""The case study's RESULTS.md from results/results.json and results/link_cost.json (no GPU needed):

    python case_studies/qwen3_32b_mlp/report.py

run.py writes both files after a GPU run; this regenerates the table and the summary line, e.g.
after build.py --link-cost measured the relink/rebuild ratio.
"""
from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent


def results_md(doc: dict, line: str) -> str:
    """The results table (GPU time per call, ms, medians over alternating rounds) and the summary line."""
    out = [f"# Results: {doc['device']}, {doc['date']}, torch {doc['torch']}, {doc['rounds']} rounds",
           f"Command: `{doc['command']}` (seed {doc['seed']}). Ratios > 1: pipelink faster.", "",
           "## Gate/up GEMM + SwiGLU (N = 51200, K = 5120)", "",
           "| M | tile | pipelink fused | cuBLAS + eager act | cuBLAS + compiled act | fused vs compiled | "
           "fused vs eager | plain GEMM + compiled act | GEMM alone: pipelink / cuBLAS (TFLOP/s) |",
           "|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in doc["results"]:
        ms, tf = r["ms"], r["tflops"]
        out.append(f"| {r['M']} | {r['tile']} | {ms['pipelink_swiglu']:.3f} | {ms['cublas_eager_act']:.3f} | "
                   f"{ms['cublas_compiled_act']:.3f} | {ms['cublas_compiled_act'] / ms['pipelink_swiglu']:.2f}x | "
                   f"{ms['cublas_eager_act'] / ms['pipelink_swiglu']:.2f}x | {ms['pipelink_plain_then_compiled_act']:.3f} | "
                   f"{tf['pipelink_plain_gemm']:.0f} / {tf['cublas_gemm']:.0f} |")
    out += ["", "## Down projection + bias + residual (N = 5120, K = 25600)", "",
            "| M | tile | pipelink fused | cuBLAS linear + add | cuBLAS linear + compiled add | fused vs linear+add | "
            "GEMM alone: pipelink / cuBLAS (TFLOP/s) |", "|---:|---|---:|---:|---:|---:|---:|"]
    for r in doc["results"]:
        ms, tf = r["ms"], r["tflops"]
        out.append(f"| {r['M']} | {r['down_tile']} | {ms['pipelink_residual']:.3f} | {ms['cublas_linear_then_add']:.3f} | "
                   f"{ms['cublas_linear_then_compiled_add']:.3f} | "
                   f"{ms['cublas_linear_then_add'] / ms['pipelink_residual']:.2f}x | "
                   f"{tf['pipelink_plain_down_gemm']:.0f} / {tf['cublas_down_gemm']:.0f} |")
    if all("pipelink_swiglu_graph" in r["ms"] for r in doc["results"]):
        out += ["", "## Inside CUDA graphs, and the fair unfused control", "",
                "Each variant captured once and replayed: the fused kernel; the same mainloop with the plain "
                "epilogue, then the compiled activation (the unfused control); cuBLAS + compiled activation.", "",
                "| M | pipelink fused | plain GEMM + compiled act | cuBLAS + compiled act | fused vs unfused control | "
                "fused vs cuBLAS + compiled act |", "|---:|---:|---:|---:|---:|---:|"]
        for r in doc["results"]:
            ms = r["ms"]
            f, u, c = (ms["pipelink_swiglu_graph"], ms["pipelink_plain_then_compiled_act_graph"],
                       ms["cublas_compiled_act_graph"])
            out.append(f"| {r['M']} | {f:.3f} | {u:.3f} | {c:.3f} | {u / f:.2f}x | {c / f:.2f}x |")
    if all("pipelink_swiglu_whole_tiles" in r["ms"] for r in doc["results"]):
        out += ["", "## Split reductions (stream-K) against whole tiles", "",
                "The launcher splits the k-blocks of a single row of tiles over every SM and keeps several rows "
                "whole (pipelink/runtime/streamk.py); `whole` is the same kernel told not to split "
                "(`kernel.split_reduction = False`), on the balanced grid.", "",
                "| M | gate/up tile | fused: launcher's plan / whole | down tile | down GEMM: launcher's plan / whole / "
                "whole on every SM |", "|---:|---|---:|---|---:|"]
        for r in doc["results"]:
            ms = r["ms"]
            out.append(f"| {r['M']} | {r['tile']} | {ms['pipelink_swiglu']:.4f} / {ms['pipelink_swiglu_whole_tiles']:.4f} | "
                       f"{r['down_tile']} | {ms['pipelink_plain_down_gemm']:.4f} / "
                       f"{ms['pipelink_plain_down_gemm_whole_tiles']:.4f} / "
                       f"{ms.get('pipelink_plain_down_gemm_whole_tiles_all_sms', float('nan')):.4f} |")
    weights = [f"M={r['M']}: {r['weight_tb_s']['pipelink_swiglu']:.2f} vs {r['weight_tb_s']['cublas_gemm']:.2f}"
               for r in doc["results"] if r["M"] <= 128]
    out += ["", "Gate/up weights streamed (TB/s, pipelink fused vs cuBLAS GEMM; H200 HBM3e peak 4.8): "
            + "; ".join(weights) + ".", "", line, ""]
    return "\n".join(out)


def summary(doc: dict, link_cost: Path) -> str:
    rows = doc["results"]
    big = [r for r in rows if r["M"] >= 128]
    ratio = lambda r, k: r["ms"][k] / r["ms"]["pipelink_swiglu"]  # noqa: E731
    a = min((ratio(r, "cublas_compiled_act") for r in big), default=float("nan"))
    b = next((ratio(r, "cublas_compiled_act") for r in rows if r["M"] == 16), float("nan"))
    c = min((ratio(r, "cublas_eager_act") for r in big), default=float("nan"))
    gemm = [min(r["ms"]["cublas_gemm"] / r["ms"]["pipelink_plain_gemm"],
                r["ms"]["cublas_down_gemm"] / r["ms"]["pipelink_plain_down_gemm"]) for r in rows if r["M"] >= 1024]
    d = min(gemm, default=float("nan"))
    e = json.loads(link_cost.read_text())["ratio"] if link_cost.exists() else float("nan")
    return (f"summary: swiglu vs cublas+compiled-act min {a:.2f}x at M>=128, {b:.2f}x at M=16; vs cublas+eager-act "
            f"min {c:.2f}x at M>=128; gemm vs cublas min {d:.2f}x at M>=1024; relink/rebuild {e:.2f}")


def main() -> None:
    doc = json.loads((HERE / "results" / "results.json").read_text())
    line = summary(doc, HERE / "results" / "link_cost.json")
    (HERE / "results" / "RESULTS.md").write_text(results_md(doc, line))
    print(line)


if __name__ == "__main__":
    main()
