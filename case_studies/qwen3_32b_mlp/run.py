"""Run the Qwen3-32B MLP case study on a GPU: correctness at every shape, then the benchmark.

    python case_studies/qwen3_32b_mlp/build.py        # build and link (no GPU needed)
    python case_studies/qwen3_32b_mlp/run.py          # on the GPU: writes results/results.json, RESULTS.md

Shapes: hidden 5120, intermediate 25600 (gate/up GEMM N = 51200, K = 5120; down GEMM N = 5120,
K = 25600), tokens M in {16, 128, 1024, 2048, 4096, 8192}; bf16 in, fp32 accumulate, bf16 out.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
sys.path.insert(0, str(HERE))

try:
    import torch  # noqa: E402
    import torch.nn.functional as F  # noqa: E402
except ImportError:  # building and linking need neither: build.py
    print(f"{Path(sys.argv[0]).name} runs the kernels: it needs torch and a CUDA GPU (build.py builds and links "
          "without them)", file=sys.stderr)
    sys.exit(2)

from pipelink.runtime.launch import Kernel  # noqa: E402
from report import results_md, summary  # noqa: E402
from smoke import watched  # noqa: E402

HIDDEN, INTER = 5120, 25600
MS = (16, 128, 1024, 2048, 4096, 8192)
TILES = ("128x256", "128x128", "64x128")


def tile_for(M: int, N: int) -> str:
    """The mainloop a user links for an M x N output (a fixed rule, set from a sweep of every tile
    shape at every M, whole tiles and split, in results/results.json): at decode one row of small
    tiles streams the weights best (its reduction split over every SM, stream-K); from M = 128 the
    gate/up GEMM runs on ping-pong 128x128 tiles, whose two warpgroups overlap one's epilogue with the
    other's MMAs. The narrow down projection (N = 5120) stays on 64x128 tiles up to M = 128 and takes
    128x128 tiles from M = 1024, split in halves where that shortens the rounds (split-K)."""
    if N >= 16384:
        return "64x128" if M <= 16 else "128x128"
    return "64x128" if M <= 128 else "128x128"


def load(name: str) -> Kernel:
    build = HERE / "build"
    return Kernel.load((build / f"{name}.cubin").read_bytes(), json.loads((build / f"{name}.json").read_text()))


def interleave(w_gate: torch.Tensor, w_up: torch.Tensor) -> torch.Tensor:
    """Rows 2j = gate j, 2j+1 = up j: what the SwiGLU epilogue reads from one accumulator tile."""
    return torch.stack([w_gate, w_up], dim=1).reshape(-1, w_gate.shape[1]).contiguous()


def time_alternating(fns: dict, rounds: int, warmup: int = 3) -> dict[str, list[float]]:
    """Median-ready samples (ms) per variant: each round times every variant once, in rotated order."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    torch.cuda.synchronize()
    names = list(fns)
    samples = {n: [] for n in names}
    starts = {n: torch.cuda.Event(enable_timing=True) for n in names}
    ends = {n: torch.cuda.Event(enable_timing=True) for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            starts[n].record()
            fns[n]()
            ends[n].record()
        torch.cuda.synchronize()
        for n in order:
            samples[n].append(starts[n].elapsed_time(ends[n]))
    return samples


def check(name: str, got: torch.Tensor, ref: torch.Tensor, failures: list) -> float:
    """Max error relative to the reference's scale; records a failure above bf16's reach."""
    got = got.float()
    if not torch.isfinite(got).all():
        failures.append(f"{name}: non-finite values (unwritten or poisoned outputs left)")
        return float("inf")
    scale = ref.abs().max().item() or 1.0
    err = (got - ref).abs().max().item() / scale
    if err > 2e-2:
        failures.append(f"{name}: max error {err:.3g} of the output's scale")
    return err


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ms", default=",".join(map(str, MS)))
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--out", default=str(HERE / "results"))
    args = ap.parse_args()
    ms = [int(m) for m in args.ms.split(",")]
    if not torch.cuda.is_available():
        print("run.py runs the kernels: torch sees no CUDA GPU here (build.py builds and links without one)",
              file=sys.stderr)
        sys.exit(2)
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    seed = int(time.time())
    torch.manual_seed(seed)
    kernels = {f"{k}_{t}": load(f"{k}_{t}") for k in ("swiglu", "plain", "residual") for t in TILES}
    # The same kernels walking whole tiles only (no stream-K split): what the split buys.
    whole = {f"{k}_{t}": load(f"{k}_{t}") for k in ("swiglu", "plain", "residual") for t in TILES}
    for k in whole.values():
        k.split_reduction = False
    # Weights scaled like a trained layer's: outputs of order 1.
    w_gate = (torch.randn(INTER, HIDDEN, device=dev) / HIDDEN ** 0.5).bfloat16()
    w_up = (torch.randn(INTER, HIDDEN, device=dev) / HIDDEN ** 0.5).bfloat16()
    w_gu = torch.cat([w_gate, w_up]).contiguous()         # what a torch user multiplies by
    w_gu_il = interleave(w_gate, w_up)                     # the same weights, interleaved for the epilogue
    w_down = (torch.randn(HIDDEN, INTER, device=dev) / INTER ** 0.5).bfloat16()
    bias = (torch.randn(HIDDEN, device=dev) * 0.1).bfloat16()

    def act(gu):
        return F.silu(gu[:, :INTER]) * gu[:, INTER:]
    act_compiled = torch.compile(act)
    act_il_compiled = torch.compile(lambda y: F.silu(y[:, 0::2]) * y[:, 1::2])
    add_compiled = torch.compile(lambda y, r: y + r)

    results, failures = [], []
    for M in ms:
        x = torch.randn(M, HIDDEN, device=dev).bfloat16()
        h_in = (torch.randn(M, INTER, device=dev)).bfloat16()
        resid = torch.randn(M, HIDDEN, device=dev).bfloat16()
        tile, tile_d = tile_for(M, 2 * INTER), tile_for(M, HIDDEN)
        h = torch.empty(M, INTER, device=dev, dtype=torch.bfloat16)
        d = torch.empty(M, 2 * INTER, device=dev, dtype=torch.bfloat16)
        y = torch.empty(M, HIDDEN, device=dev, dtype=torch.bfloat16)
        yd = torch.empty(M, HIDDEN, device=dev, dtype=torch.bfloat16)
        N1, N2 = 2 * INTER, HIDDEN
        fused = {t: kernels[f"swiglu_{t}"].prepare(a=x, b=w_gu_il, M=M, N=N1, K=HIDDEN, h=h) for t in TILES}
        plain = {t: kernels[f"plain_{t}"].prepare(a=x, b=w_gu_il, M=M, N=N1, K=HIDDEN, d=d) for t in TILES}
        plain_down = {t: kernels[f"plain_{t}"].prepare(a=h_in, b=w_down, M=M, N=N2, K=INTER, d=yd) for t in TILES}
        resid_k = {t: kernels[f"residual_{t}"].prepare(a=h_in, b=w_down, M=M, N=N2, K=INTER, y=y, bias=bias,
                                                       residual=resid) for t in TILES}
        fused_whole = whole[f"swiglu_{tile}"].prepare(a=x, b=w_gu_il, M=M, N=N1, K=HIDDEN, h=h)
        plain_whole = whole[f"plain_{tile}"].prepare(a=x, b=w_gu_il, M=M, N=N1, K=HIDDEN, d=d)
        down_whole = whole[f"plain_{tile_d}"].prepare(a=h_in, b=w_down, M=M, N=N2, K=INTER, d=yd)
        # Every tile shape with whole tiles only, for the split-or-not rule (streamk.py) and tile_for.
        sweep_whole = {**{f"pipelink_plain_gemm_{t}_whole_tiles": whole[f"plain_{t}"].prepare(
                          a=x, b=w_gu_il, M=M, N=N1, K=HIDDEN, d=d).launch for t in TILES},
                       **{f"pipelink_plain_down_gemm_{t}_whole_tiles": whole[f"plain_{t}"].prepare(
                          a=h_in, b=w_down, M=M, N=N2, K=INTER, d=yd).launch for t in TILES},
                       **{f"pipelink_residual_{t}_whole_tiles": whole[f"residual_{t}"].prepare(
                          a=h_in, b=w_down, M=M, N=N2, K=INTER, y=y, bias=bias, residual=resid).launch for t in TILES},
                       **{f"pipelink_residual_{t}": resid_k[t].launch for t in TILES},
                       # whole tiles on every SM instead of the balanced grid: what the grid policy buys
                       "pipelink_plain_down_gemm_whole_tiles_all_sms": whole[f"plain_{tile_d}"].prepare(
                           a=h_in, b=w_down, M=M, N=N2, K=INTER, d=yd,
                           grid=whole[f"plain_{tile_d}"].resident_blocks()).launch}
        # Correctness against fp32 (outputs poisoned first, fresh inputs per run).
        with torch.no_grad():
            gu_ref = x.float() @ w_gu.float().T
            h_ref = F.silu(gu_ref[:, :INTER]) * gu_ref[:, INTER:]
            d_ref = x.float() @ w_gu_il.float().T
            y_ref = h_in.float() @ w_down.float().T + bias.float() + resid.float()
            yd_ref = h_in.float() @ w_down.float().T
        errs = {}
        for t in TILES:
            for out, run, ref, name in ((h, fused[t], h_ref, f"swiglu_{t}"), (d, plain[t], d_ref, f"plain_{t}"),
                                        (y, resid_k[t], y_ref, f"residual_{t}"), (yd, plain_down[t], yd_ref, f"plain_down_{t}"),
                                        *(((h, fused_whole, h_ref, f"swiglu_{t}_whole"), (d, plain_whole, d_ref, f"plain_{t}_whole"))
                                          if t == tile else ()),
                                        *(((yd, down_whole, yd_ref, f"plain_down_{t}_whole"),) if t == tile_d else ())):
                out.fill_(float("nan"))
                watched(f"M={M} {name}", run.launch, seconds=20.0)
                torch.cuda.synchronize()
                errs[name] = check(f"M={M} {name}", out, ref, failures)
        del gu_ref, h_ref, d_ref, y_ref, yd_ref
        gu = torch.empty(M, N1, device=dev, dtype=torch.bfloat16)
        yc = torch.empty(M, HIDDEN, device=dev, dtype=torch.bfloat16)
        # CUDA graphs: the fused kernel, the fair unfused control (the same mainloop with the plain
        # epilogue, then the compiled activation) and cuBLAS + compiled activation, each captured once.
        graphs = {
            "pipelink_swiglu_graph": lambda s: fused[tile].launch(s),
            "pipelink_plain_then_compiled_act_graph": lambda s: (plain[tile].launch(s), act_il_compiled(d)),
            "cublas_compiled_act_graph": lambda s: act_compiled(torch.matmul(x, w_gu.T, out=gu)),
        }
        captured = {}
        for name, body in graphs.items():
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    body(side)  # warm-up: compiled code and cuBLAS handles exist before capture
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                body(torch.cuda.current_stream())
            captured[name] = g
        h.fill_(float("nan"))
        captured["pipelink_swiglu_graph"].replay()
        torch.cuda.synchronize()
        errs["swiglu_graph"] = check(f"M={M} swiglu (graph replay)", h, F.silu(
            (x.float() @ w_gu.float().T)[:, :INTER]) * (x.float() @ w_gu.float().T)[:, INTER:], failures)
        fns = {
            "pipelink_swiglu": fused[tile].launch,
            **{f"pipelink_swiglu_{t}": fused[t].launch for t in TILES if t != tile},
            **{f"pipelink_plain_gemm_{t}": plain[t].launch for t in TILES if t != tile},
            **{f"pipelink_plain_down_gemm_{t}": plain_down[t].launch for t in TILES if t != tile_d},
            "cublas_eager_act": lambda: act(torch.matmul(x, w_gu.T, out=gu)),
            "cublas_compiled_act": lambda: act_compiled(torch.matmul(x, w_gu.T, out=gu)),
            "cublas_gemm": lambda: torch.matmul(x, w_gu.T, out=gu),
            "pipelink_plain_gemm": plain[tile].launch,
            "pipelink_plain_then_compiled_act": lambda: (plain[tile].launch(), act_il_compiled(d)),
            "pipelink_residual": resid_k[tile_d].launch,
            "cublas_linear_then_add": lambda: torch.add(F.linear(h_in, w_down, bias), resid, out=yc),
            "cublas_linear_then_compiled_add": lambda: add_compiled(F.linear(h_in, w_down, bias), resid),
            "cublas_down_gemm": lambda: torch.matmul(h_in, w_down.T, out=yc),
            "pipelink_plain_down_gemm": plain_down[tile_d].launch,
            "pipelink_swiglu_whole_tiles": fused_whole.launch,
            "pipelink_plain_gemm_whole_tiles": plain_whole.launch,
            "pipelink_plain_down_gemm_whole_tiles": down_whole.launch,
            **{name: g.replay for name, g in captured.items()},
            **{k: v for k, v in sweep_whole.items() if k not in ("pipelink_plain_gemm_whole_tiles",)},
        }
        samples = time_alternating(fns, args.rounds)
        # After hundreds of launches and replays: the split tiles' flags are still left as found.
        h.fill_(float("nan"))
        watched(f"M={M} swiglu after the benchmark", fused[tile].launch, seconds=20.0)
        torch.cuda.synchronize()
        errs["swiglu_after_benchmark"] = check(f"M={M} swiglu after the benchmark", h, F.silu(
            (x.float() @ w_gu.float().T)[:, :INTER]) * (x.float() @ w_gu.float().T)[:, INTER:], failures)
        med = {k: statistics.median(v) for k, v in samples.items()}
        flops1, flops2 = 2 * M * N1 * HIDDEN, 2 * M * N2 * INTER
        row = {"M": M, "tile": tile, "down_tile": tile_d, "ms": med, "errors": errs,
               "tflops": {"pipelink_plain_gemm": flops1 / med["pipelink_plain_gemm"] / 1e9,
                          "cublas_gemm": flops1 / med["cublas_gemm"] / 1e9,
                          "pipelink_plain_down_gemm": flops2 / med["pipelink_plain_down_gemm"] / 1e9,
                          "cublas_down_gemm": flops2 / med["cublas_down_gemm"] / 1e9},
               "weight_tb_s": {k: w_gu.numel() * 2 / med[k] / 1e9 for k in ("pipelink_swiglu", "cublas_gemm")}}
        results.append(row)
        print(f"M={M:5d} [{tile}] swiglu {med['pipelink_swiglu']:.3f} ms | cublas+eager {med['cublas_eager_act']:.3f} "
              f"| cublas+compiled {med['cublas_compiled_act']:.3f} | gemm {med['pipelink_plain_gemm']:.3f} vs cublas "
              f"{med['cublas_gemm']:.3f} | down+res {med['pipelink_residual']:.3f} vs {med['cublas_linear_then_add']:.3f}"
              f" | err {max(errs.values()):.2e}", flush=True)
        x = h_in = resid = h = d = y = yd = gu = yc = captured = None  # the shape's tensors, freed before the next
        torch.cuda.empty_cache()
        doc = save(args, seed, failures, results)  # after every shape: a run cut short keeps what it measured
    print("\n".join(failures) or "all outputs correct")
    line = summary(doc, HERE / "results" / "link_cost.json")
    (Path(args.out) / "RESULTS.md").write_text(results_md(doc, line))
    print(line)
    sys.exit(1 if failures else 0)


def save(args, seed: int, failures: list, results: list) -> dict:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    doc = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(), "seed": seed,
           "torch": torch.__version__, "rounds": args.rounds, "command": " ".join(sys.argv),
           "failures": failures, "results": results}
    (out / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "results.min.json").write_text(json.dumps(doc))
    return doc


if __name__ == "__main__":
    main()
