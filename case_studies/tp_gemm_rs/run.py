"""Tensor-parallel GEMM + reduce-scatter, one kernel per GPU, against cuBLAS + NCCL reduce-scatter.

The Qwen3-32B down projection (N = 5120 outputs, K = 25600) with K split over the ranks: rank r holds
X[:, K_r] and W[:, K_r] and ends with its M / WORLD rows of Y = X W^T. pipelink: the CUTLASS mainloop team's
GEMM linked with the collective team's epilogue (collective/epi_rs_owner: partials of other ranks' tiles go
straight into their owners' slots over NVLink, owned tiles wait for them and store the sum). Baseline:
torch.matmul (cuBLAS) then dist.reduce_scatter_tensor (NCCL), what a user writes. Both on the same inputs,
checked against an fp32 reference of the rank's rows (fresh random inputs, outputs poisoned), then timed
in alternation with CUDA events.

    torchrun --standalone --nproc-per-node=2 case_studies/tp_gemm_rs/run.py     # every GPU a rank
    python case_studies/tp_gemm_rs/run.py --quick                               # one GPU: a world of one

Run build.py first (no GPU needed). Rank 0 writes results/<name>.json and prints the summary line.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

N, K = 5120, 25600          # Qwen3-32B: hidden 5120, intermediate 25600 (the down projection's K)
MS = (1024, 2048, 4096, 8192)
TILE = "128x128"            # the default mainloop shape (pipelines/tp_rs_<tile>.json)


def setup():
    import torch
    import torch.distributed as dist

    from pipelink.runtime import nvshmem
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    if "WORLD_SIZE" in os.environ:
        dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    else:  # a world of one: NCCL on one rank keeps the baseline's shape
        dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29531", rank=0, world_size=1,
                                device_id=torch.device("cuda", 0))
    nvshmem.init_from_torch(device=local)
    return local


def load_kernel(local: int, tile: str, build: Path):
    import pipelink
    kernel = pipelink.load(build / f"tp_rs_{tile}.cubin", local)  # what build.py saved
    # Every rank must walk the tiles in the same order for the owners' waits to be cycle-free: whole tiles,
    # the same grid everywhere (no stream-K split, whose fix-ups wait across CTAs too).
    kernel.split_reduction = False
    return kernel


class Fused:
    """The linked kernel and its symmetric buffers for one M (allocated collectively)."""

    def __init__(self, kernel, M: int, world: int, tile: str):
        import torch

        from pipelink.runtime import nvshmem
        tm, tn = (int(x) for x in tile.split("x"))
        self.kernel, self.M = kernel, M
        self.parts = nvshmem.symmetric((world, M // world, N), "bf16")
        self.flags = nvshmem.symmetric((-(-M // tm), -(-N // tn)), "u64")
        self.y = torch.empty(M // world, N, dtype=torch.bfloat16, device="cuda")
        self.report = torch.zeros(4, dtype=torch.uint64, device="cuda")
        self.epoch, self.spin_bound = 0, 0

    def __call__(self, x, w):
        self.epoch += 1  # the flags count signals across launches: this launch waits for its own
        self.kernel.launch(a=x, b=w, M=self.M, N=N, K=x.shape[1], y=self.y, parts=self.parts, flags=self.flags,
                           epoch=self.epoch, spin_bound=self.spin_bound, report=self.report)
        return self.y

    def check_report(self, rank: int) -> None:
        """After a launch with a spin bound: raise if an owned tile gave up waiting for the other ranks."""
        tile, want, seen = (int(v) for v in self.report[:3].tolist())
        if tile:
            raise SystemExit(f"rank {rank}: owned tile {tile - 1} (launch {self.epoch}) waited for {want} signals "
                             f"from the other ranks and saw {seen}: a rank's partials never arrived")

    def free(self):
        self.parts.free()
        self.flags.free()


def unfused(x, w, out):
    import torch
    import torch.distributed as dist
    partial = torch.matmul(x, w.t())
    dist.reduce_scatter_tensor(out, partial)
    return out


def inputs(M: int, rank: int, world: int, seed: int):
    """Every rank draws the same full X and W (the seed), keeps its K slice; the reference is its rows."""
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, generator=g, device="cuda", dtype=torch.float32)
    w = torch.randn(N, K, generator=g, device="cuda", dtype=torch.float32) * K ** -0.5
    kr = K // world
    xs = x[:, rank * kr:(rank + 1) * kr].to(torch.bfloat16).contiguous()
    ws = w[:, rank * kr:(rank + 1) * kr].to(torch.bfloat16).contiguous()
    rows = slice(rank * (M // world), (rank + 1) * (M // world))
    ref = x[rows].to(torch.bfloat16).float() @ w.to(torch.bfloat16).float().t()
    del x, w
    return xs, ws, ref


def check(name: str, got, ref) -> float:
    import torch
    err = float((got.float() - ref).abs().max())
    scale = float(ref.abs().max())
    if not torch.isfinite(got.float()).all() or err > 0.02 * scale + 0.05:
        raise SystemExit(f"{name}: max abs error {err:.4g} against the fp32 reference (max |ref| {scale:.4g})")
    return err


def median_us(fn, iters: int, warmup: int, stream) -> float:
    import torch
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(stream)
        fn()
        b.record(stream)
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ms", type=int, nargs="+", default=list(MS))
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of fused and unfused")
    ap.add_argument("--quick", action="store_true", help="M = 1024 only, 10 iterations")
    ap.add_argument("--debug-spins", type=int, default=20_000_000,
                    help="the correctness launches' owned tiles give up (and report) after this many polls; 0: never")
    ap.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(4), "little"))
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--name", default="tp_rs")
    ap.add_argument("--build", default=str(HERE / "build"), help="where build.py left the linked kernels")
    ap.add_argument("--tile", default=TILE, choices=("128x128", "128x256", "64x128"))
    args = ap.parse_args()
    if args.quick:
        args.ms, args.iters, args.rounds = [1024], 10, 2

    try:
        import torch
        import torch.distributed as dist
    except ImportError:  # building and linking need neither: build.py
        print("run.py runs the kernels on two or more GPUs: it needs torch (build.py builds and links without)",
              file=sys.stderr)
        sys.exit(2)

    from pipelink.runtime import nvshmem
    local = setup()
    rank, world = nvshmem.rank(), nvshmem.world()
    if K % world or any(m % (world * int(args.tile.split("x")[0])) for m in args.ms):
        raise SystemExit(f"K and every M must split evenly over {world} ranks (M a multiple of {world} x the tile rows)")
    kernel = load_kernel(local, args.tile, Path(args.build))
    stream = torch.cuda.current_stream()
    rows = []
    for M in args.ms:
        x, w, ref = inputs(M, rank, world, args.seed + M)
        fused = Fused(kernel, M, world, args.tile)
        out = torch.empty(M // world, N, dtype=torch.bfloat16, device="cuda")
        fused.y.fill_(float("nan"))
        out.fill_(float("nan"))
        fused.spin_bound = args.debug_spins  # a wait that never ends is reported, not a hang
        y = fused(x, w)
        fused.check_report(rank)
        err_fused = check(f"pipelink M={M} rank {rank}", y, ref)
        err_unfused = check(f"cuBLAS + NCCL M={M} rank {rank}", unfused(x, w, out), ref)
        fused.y.fill_(float("nan"))  # again, after a second launch (the flags' next epoch)
        y = fused(x, w)
        fused.check_report(rank)
        err_fused = max(err_fused, check(f"pipelink M={M} rank {rank}, second launch", y, ref))
        fused.spin_bound = 0  # timed launches wait as long as it takes
        t_fused, t_unfused = [], []
        for _ in range(args.rounds):  # alternating: neither side always runs on a warmer GPU
            dist.barrier()
            t_fused.append(median_us(lambda: fused(x, w), args.iters, args.warmup, stream))
            dist.barrier()
            t_unfused.append(median_us(lambda: unfused(x, w, out), args.iters, args.warmup, stream))
        f, u = statistics.median(t_fused), statistics.median(t_unfused)
        flops = 2.0 * M * N * (K // world)  # one rank's GEMM
        row = {"M": M, "world": world, "rank": rank, "fused_us": f, "unfused_us": u, "speedup": u / f,
               "fused_tflops": flops / f / 1e6, "unfused_tflops": flops / u / 1e6,
               "max_abs_err_fused": err_fused, "max_abs_err_unfused": err_unfused}
        gathered = [None] * world
        dist.all_gather_object(gathered, row)
        if rank == 0:
            slowest = max(gathered, key=lambda r: r["fused_us"])  # a collective ends with its slowest rank
            print(f"M={M:5d} world={world}: pipelink {slowest['fused_us']:8.1f} us  cuBLAS+NCCL "
                  f"{max(r['unfused_us'] for r in gathered):8.1f} us  speedup "
                  f"{max(r['unfused_us'] for r in gathered) / slowest['fused_us']:.2f}x", flush=True)
            rows.append({"M": M, "ranks": gathered})
        fused.free()
        x = w = ref = None  # the shape's tensors, freed before the next
    if rank == 0:
        speedups = [max(r["unfused_us"] for r in e["ranks"]) / max(r["fused_us"] for r in e["ranks"]) for e in rows]
        doc = {"command": " ".join([sys.executable, *sys.argv]), "machine": torch.cuda.get_device_name(),
               "world": world, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
               "seed": args.seed, "tile": args.tile, "N": N, "K": K, "rows": rows}
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / f"{args.name}.json").write_text(json.dumps(doc, indent=1))
        print(f"summary: tp gemm+rs world {world} min speedup over cuBLAS + NCCL {min(speedups):.2f}x "
              f"(M {', '.join(str(e['M']) for e in rows)})")
    kernel.unload()
    nvshmem.finalize()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
