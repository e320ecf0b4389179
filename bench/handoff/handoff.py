"""A hand-off between all the CTAs of a persistent kernel, timed per round (handoff.cu): the counter protocol the
glue uses (fence, add, one thread polling, then the staging), the same with a release add and a relaxed poll, the
same with the count spread over 8 counters on lines of their own (8 lanes polling), and words that carry their round (the staging is the wait), alone and beside a weight stream of S bytes a CTA a round. Two CTAs an SM (or one: --ctas-per-sm), 8 words a CTA a round.
Then the counter protocol under a stream that runs through the hand-off (a warp bulk-copying slots of T bytes, two in
flight, all the time, as the decode step's loader does), its count polled by one compute thread or by 4 waiter warps.
Last, the glue's protocol under that stream slowed down (the stream warp sleeping G ns after each slot lands), with
the stream's rate measured: how much background traffic a hand-off bears.

    python bench/handoff/handoff.py [--rounds 2000] [--samples 15] [--stream 0 16384 65536] [--through 0 32768]
                                    [--gap-slot 32768] [--gaps 0 500 1000 2000 4000 8000] [--ctas-per-sm 2]

Writes bench/handoff/results.json and RESULTS.md (command, machine, date). Needs a GPU, CuPy and the pinned nvcc.
"""
from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))


def expected(x0: np.ndarray, rounds: int) -> np.ndarray:
    """x after `rounds` rounds (handoff.cu's word_of over the sum of the round before, all mod 2^32)."""
    x = x0.astype(np.uint64)
    i = np.arange(len(x0), dtype=np.uint64)
    for r in range(1, rounds + 1):
        s = int(x.sum()) % (1 << 32)
        x = (np.uint64(s * 2654435761 % (1 << 32)) + np.uint64(r * 131) + i) % np.uint64(1 << 32)
    return x.astype(np.uint32)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--stream", type=int, nargs="+", default=[0, 16384, 65536])
    ap.add_argument("--through", type=int, nargs="+", default=[0, 32768],
                    help="slot bytes of the stream through the hand-off (two slots a CTA; 0: none)")
    ap.add_argument("--gap-slot", type=int, default=32768, help="slot bytes of the slowed stream")
    ap.add_argument("--gaps", type=int, nargs="*", default=[0, 500, 1000, 2000, 4000, 8000],
                    help="ns the stream warp sleeps after each slot lands (none: no such table)")
    ap.add_argument("--ctas-per-sm", type=int, choices=(1, 2), default=2,
                    help="CTAs an SM (the split step runs two, the loader step one)")
    ap.add_argument("--out", default=str(HERE))
    args = ap.parse_args(argv)
    import cupy as cp
    from pipelink import toolchain

    cubin = Path(tempfile.mkdtemp()) / "handoff.cubin"
    from pipelink.authoring.builder import pipelink_include_dir
    subprocess.run([str(toolchain.nvcc_path()), "-arch=sm_90a", "-cubin", "-O3", f"-I{pipelink_include_dir()}",
                    "-o", str(cubin), str(HERE / "handoff.cu")], check=True)
    mod = cp.RawModule(path=str(cubin))
    kernels = {"counter": mod.get_function("counter_rounds"), "release": mod.get_function("release_rounds"),
               "spread": mod.get_function("spread_rounds"), "tagged": mod.get_function("tagged_rounds")}
    through_kernels = {"counter_bg": mod.get_function("counter_bg_rounds"),
                       "waiter_bg": mod.get_function("waiter_bg_rounds")}
    bg_threads = 256 + 32 * 5  # 8 compute warps, the stream warp, 4 waiter warps
    dev = cp.cuda.Device()
    sms = dev.attributes["MultiProcessorCount"]
    # unused dynamic shared memory that leaves room for just that many CTAs an SM (the SM has 228 KB)
    grid, threads = args.ctas_per_sm * sms, 256
    pad = 96 * 1024 if args.ctas_per_sm == 2 else 140 * 1024
    through_pad = 0 if args.ctas_per_sm == 2 else pad
    for k in kernels.values():
        k.max_dynamic_shared_size_bytes = pad
    slots = [*args.through, *([args.gap_slot] if args.gaps else [])]
    if any(t < 0 or t % 16 or 2 * t > pad for t in slots) or any(g < 0 or g >= 1 << 20 for g in args.gaps):
        raise SystemExit(f"--through/--gap-slot: slots of a multiple of 16 bytes, two a CTA within {pad} bytes; "
                         "--gaps: 0 to 1048575 ns")
    for k in through_kernels.values():
        k.max_dynamic_shared_size_bytes = max(2 * max(slots), through_pad, 16)
    n = grid * 8
    rng = np.random.default_rng()
    x0_host = rng.integers(0, 1 << 32, n, dtype=np.uint32)
    x0 = cp.asarray(x0_host)
    want = expected(x0_host, args.rounds)
    w = (cp.arange(1 << 29, dtype=cp.uint32) * np.uint32(2654435761)).view(cp.uint8)  # 2 GB, past the L2
    w_vecs = np.int64(w.size // 16)
    counter = cp.zeros(8 * 16, dtype=cp.uint64)  # spread's 8 counters, 128 bytes apart; the others use the first
    x_plain = cp.zeros(2 * n, dtype=cp.uint32)
    x_tagged = cp.zeros(2 * n, dtype=cp.uint64)
    sink = cp.zeros(grid, dtype=cp.uint32)
    fills = cp.zeros(grid, dtype=cp.uint64)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    stream_tb_s: dict[str, list[float]] = {}  # a through kernel's stream rate, launch by launch

    def launch(name: str, stream: int, gap: int = 0) -> float:
        counter.fill(0)
        fills.fill(0)
        x_plain.fill(0xFFFFFFFF)  # poisoned: every word must be written
        x_tagged.fill(0)
        start.record()
        if name in through_kernels:
            through_kernels[name]((grid,), (bg_threads,), (x_plain, counter, x0, w, w_vecs, np.int32(stream),
                                                          np.int32(args.rounds), sink, np.uint32(gap), fills),
                                  shared_mem=max(2 * stream, through_pad))
        elif name in ("counter", "release", "spread"):
            kernels[name]((grid,), (threads,), (x_plain, counter, x0, w, w_vecs, np.int32(stream),
                                                np.int32(args.rounds), sink), shared_mem=pad)
        else:
            kernels[name]((grid,), (threads,), (x_tagged, x0, w, w_vecs, np.int32(stream), np.int32(args.rounds),
                                                sink), shared_mem=pad)
        stop.record()
        stop.synchronize()
        ms = cp.cuda.get_elapsed_time(start, stop)
        last = args.rounds & 1
        if name in ("counter", "release", "spread") or name in through_kernels:
            got = cp.asnumpy(x_plain[last * n:(last + 1) * n])
        else:
            t = cp.asnumpy(x_tagged[last * n:(last + 1) * n])
            if not np.all((t >> np.uint64(32)) == np.uint64(args.rounds)):
                raise SystemExit(f"{name}: a word of the last round carries another round")
            got = (t & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        if not np.array_equal(got, want):
            raise SystemExit(f"{name}, stream {stream}: x after {args.rounds} rounds differs from the host's")
        if name in through_kernels:
            stream_tb_s.setdefault(name, []).append(int(fills.sum().get()) * stream / (ms * 1e-3) / 1e12)
        return ms * 1000.0 / args.rounds

    def measure(names, arg: int, row: dict, gap: int = 0) -> dict:
        """`row` with each kernel's median, min and max us a round at `arg` (and `gap`): one warm-up launch
        each, then args.samples rounds alternating between them; a through kernel's stream rate too."""
        for name in names:  # warm-up
            launch(name, arg, gap)
        stream_tb_s.clear()
        samples = {name: [] for name in names}
        for _ in range(args.samples):  # alternating
            for name in names:
                samples[name].append(launch(name, arg, gap))
        row.update(rounds=args.rounds, samples=args.samples)
        for name, s in samples.items():
            row[name] = {"median_us_per_round": statistics.median(s), "min": min(s), "max": max(s)}
            if name in stream_tb_s:
                row[name]["stream_tb_s"] = statistics.median(stream_tb_s[name])
        return row

    results = []
    for stream in args.stream:
        row = measure(kernels, stream, {"stream_bytes_per_cta": stream})
        if stream:
            row["stream_tb_s_counter"] = grid * stream / (row["counter"]["median_us_per_round"] * 1e-6) / 1e12
        results.append(row)
        print(f"stream {stream:6d} B/CTA/round: " + ", ".join(f"{k} {row[k]['median_us_per_round']:.3f}" for k in kernels)
              + " us/round", flush=True)

    through = []
    for slot in args.through:
        row = measure(through_kernels, slot, {"slot_bytes": slot})
        through.append(row)
        print(f"through {slot:6d} B slots: " + ", ".join(f"{k} {row[k]['median_us_per_round']:.3f}"
                                                        for k in through_kernels) + " us/round", flush=True)

    slowed = []
    for gap in args.gaps:
        row = measure({"counter_bg": through_kernels["counter_bg"]}, args.gap_slot,
                      {"slot_bytes": args.gap_slot, "gap_ns": gap}, gap)
        slowed.append(row)
        print(f"slowed {args.gap_slot:6d} B slots, gap {gap:6d} ns: stream {row['counter_bg']['stream_tb_s']:.2f} TB/s, "
              f"counter_bg {row['counter_bg']['median_us_per_round']:.3f} us/round", flush=True)

    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    doc = {"command": "python " + " ".join([str(Path(sys.argv[0]))] + sys.argv[1:]),
           "machine": f"{props['name'].decode()}, {sms} SMs",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "grid": grid, "ctas_per_sm": args.ctas_per_sm, "words_per_cta": 8, "results": results, "through": through,
           "slowed": slowed}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
    lines = ["# Hand-off between all CTAs of a persistent kernel", "",
             f"`{doc['command']}` on {doc['machine']}, {doc['date']}; {grid} CTAs ({('one', 'two')[args.ctas_per_sm - 1]} an "
             "SM), 8 words a CTA a round, "
             f"{args.rounds} rounds a launch, median of {args.samples} alternating launches.", "",
             "| weight stream a CTA a round | counter (fence, add, poll, stage) us/round | release add, relaxed poll "
             "us/round | spread over 8 counters us/round | tagged words us/round |",
             "| ---: | ---: | ---: | ---: | ---: |"]
    for row in results:
        lines.append(f"| {row['stream_bytes_per_cta']} B | " + " | ".join(
            f"{row[k]['median_us_per_round']:.3f}" for k in kernels) + " |")
    lines += ["", "Under a stream through the hand-off: a warp of each CTA bulk-copies slots of the large buffer into "
              "shared memory, two in flight, until the rounds end; the count polled by one compute thread (the glue's "
              "way) or by lane 0 of 4 waiter warps started 128 ns apart, the compute warps waiting on an mbarrier.", "",
              "| slot (two a CTA) | counter, one poller us/round | 4 waiter warps us/round |", "| ---: | ---: | ---: |"]
    for row in through:
        lines.append(f"| {row['slot_bytes']} B | " + " | ".join(
            f"{row[k]['median_us_per_round']:.3f}" for k in through_kernels) + " |")
    if slowed:
        lines += ["", f"The glue's protocol under a slower stream: slots of {args.gap_slot} B, two a CTA, each refilled "
                  "a gap after it lands; the stream's rate is its bytes copied over the launch.", "",
                  "| gap after a slot lands | stream TB/s | counter, one poller us/round |", "| ---: | ---: | ---: |"]
        for row in slowed:
            c = row["counter_bg"]
            lines.append(f"| {row['gap_ns']} ns | {c['stream_tb_s']:.2f} | {c['median_us_per_round']:.3f} |")
    (out / "RESULTS.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
