"""Can L2 carry a weight stream across a decode layer's latency-bound calls? (l2_ahead.cu) A persistent kernel shaped
as the loader-ring decode step at B = 1 (one CTA an SM, 8 compute warps and a loader warp, a ring of 4 x 32 KB):
a round is a layer of calls, each after an all-to-all hand-off; q/k/v, the output projection, gate/up and down
drain their W's bytes a CTA from the ring, attention and its merge run chains of dependent loads. Timed per round,
alternating, against the same kernel with the loader asking L2 for W past its copies while the ring is full, in
several forms, and against the stream alone and the hand-offs and latency calls alone.

    python bench/l2_ahead/l2_ahead.py [--rounds 48] [--samples 15] [--lat-loads 12] [--out DIR]

Writes results.json and RESULTS.md (command, machine, date) into --out (default: this folder). Needs a GPU, CuPy
and the pinned nvcc. Every launch is checked: each CTA's sum of the W words it drained (in closed form on the host)
and the hand-off vector after the last round.
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

KB = 1024
SLOT = 32 * KB
# The decode layer at B = 1 a CTA (132 of them): q/k/v 12.6 MB, attention's splits and merge (no W), the output
# projection 8.4 MB, gate/up 67.1 MB, down 33.6 MB. -1: a call with no body (the hand-off alone).
LAYER = (3 * SLOT, 0, 0, 2 * SLOT, 16 * SLOT, 8 * SLOT)
CALL_NAMES = ("q/k/v", "attention", "merge", "output", "gate/up", "down")
GOLDEN = 2654435761


def variants(ahead: list[int]) -> dict[str, dict]:
    """name -> the kernel's calls, ahead_bytes, ahead_kind (1 bulk, 2 line evict_last, 3 line), copy_policy."""
    out = {
        "stream alone": dict(calls=(sum(LAYER),), ahead=0, kind=0, policy=0),
        "hand-offs and latency calls alone": dict(calls=tuple(-1 if b else 0 for b in LAYER), ahead=0, kind=0, policy=0),
        "layer (ring only)": dict(calls=LAYER, ahead=0, kind=0, policy=0),
        "layer, copies evict_first": dict(calls=LAYER, ahead=0, kind=0, policy=1),
    }
    for a in ahead:
        out[f"layer + bulk L2 ahead {a // KB} KB"] = dict(calls=LAYER, ahead=a, kind=1, policy=0)
    a = ahead[len(ahead) // 2]
    out[f"layer + line L2 evict_last ahead {a // KB} KB"] = dict(calls=LAYER, ahead=a, kind=2, policy=0)
    out[f"layer + line L2 ahead {a // KB} KB"] = dict(calls=LAYER, ahead=a, kind=3, policy=0)
    out[f"layer + bulk L2 ahead {a // KB} KB, copies evict_first"] = dict(calls=LAYER, ahead=a, kind=1, policy=1)
    return out


def expected_x(x0: np.ndarray, handoffs: int) -> np.ndarray:
    """The hand-off vector after `handoffs` hand-offs (l2_ahead.cu's word_of over the sum before, all mod 2^32)."""
    x = x0.astype(np.uint64)
    i = np.arange(len(x0), dtype=np.uint64)
    for h in range(1, handoffs + 1):
        s = int(x.sum()) % (1 << 32)
        x = (np.uint64(s * GOLDEN % (1 << 32)) + np.uint64(h * 131) + i) % np.uint64(1 << 32)
    return x.astype(np.uint32)


def expected_sums(ctas: int, rounds: int, per_round: int, w_bytes: int) -> np.ndarray:
    """Each CTA's sum of the W words it drained: word i of W is i * GOLDEN, so a stretch's sum is closed-form."""
    out = np.zeros(ctas, dtype=np.uint64)
    if per_round == 0:
        return out.astype(np.uint32)
    modulus = w_bytes // per_round * per_round
    for cta in range(ctas):
        total = 0
        for r in range(rounds):
            a = ((r * ctas + cta) * per_round % modulus) // 4
            b = a + per_round // 4
            total += GOLDEN * ((a + b - 1) * (b - a) // 2)
        out[cta] = total % (1 << 32)
    return out.astype(np.uint32)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=48, help="layers a launch")
    ap.add_argument("--samples", type=int, default=15)
    ap.add_argument("--lat-loads", type=int, default=12, help="dependent loads of a latency call")
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--ahead", type=int, nargs="+", default=[128 * KB, 256 * KB, 512 * KB],
                    help="bytes a CTA asked of L2 past its copies, at most (multiples of 32 KB)")
    ap.add_argument("--out", default=str(HERE))
    args = ap.parse_args(argv)
    if not 1 <= args.slots <= 32 or any(a % SLOT for a in args.ahead):
        ap.error("--slots 1..32; --ahead multiples of 32768")
    import cupy as cp
    from pipelink import toolchain
    from pipelink.authoring.builder import pipelink_include_dir

    cubin = Path(tempfile.mkdtemp()) / "l2_ahead.cubin"
    subprocess.run([str(toolchain.nvcc_path()), "-arch=sm_90a", "-cubin", "-O3", f"-I{pipelink_include_dir()}",
                    "-o", str(cubin), str(HERE / "l2_ahead.cu")], check=True)
    kernel = cp.RawModule(path=str(cubin)).get_function("layer_rounds")
    dev = cp.cuda.Device()
    ctas = dev.attributes["MultiProcessorCount"]
    ring_bytes = args.slots * SLOT
    kernel.max_dynamic_shared_size_bytes = ring_bytes
    n = ctas * 8
    rng = np.random.default_rng()
    x0_host = rng.integers(0, 1 << 32, n, dtype=np.uint32)
    x0 = cp.asarray(x0_host)
    w_bytes = 1 << 31  # 2 GB: many times the L2
    w = (cp.arange(w_bytes // 4, dtype=cp.uint32) * np.uint32(GOLDEN))
    chase_n = 1 << 20  # 4 MB: stays in L2 unless the stream pushes it out
    perm = rng.permutation(chase_n).astype(np.uint32)  # one cycle through every entry
    nxt = np.empty(chase_n, dtype=np.uint32)
    nxt[perm] = np.roll(perm, -1)
    chase = cp.asarray(nxt)
    counter = cp.zeros(1, dtype=cp.uint64)
    x = cp.zeros(2 * n, dtype=cp.uint32)
    sink = cp.zeros(ctas, dtype=cp.uint32)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    table = variants(args.ahead)
    prepared = {}
    for name, v in table.items():
        calls = np.asarray(v["calls"], dtype=np.int32)
        per_round = int(np.maximum(calls, 0).sum())
        prepared[name] = dict(v, calls_dev=cp.asarray(calls), per_round=per_round,
                              stamps=cp.zeros(args.rounds * len(calls) * 2, dtype=cp.uint64),
                              sums=expected_sums(ctas, args.rounds, per_round, w_bytes),
                              x_want=expected_x(x0_host, args.rounds * len(calls)))

    def launch(name: str) -> float:
        v = prepared[name]
        calls = len(v["calls"])
        counter.fill(0)
        x.fill(0xFFFFFFFF)  # poisoned: every word must be written
        sink.fill(0xFFFFFFFF)
        start.record()
        kernel((ctas,), (288,), (w, np.int64(w_bytes), x, counter, x0, chase, sink, v["stamps"], np.int32(args.rounds),
                                 np.int32(calls), v["calls_dev"], np.int32(args.lat_loads), np.int32(args.slots),
                                 np.int32(v["ahead"]), np.int32(v["kind"]), np.int32(v["policy"])),
               shared_mem=ring_bytes)
        stop.record()
        stop.synchronize()
        last = (args.rounds * calls) & 1
        if not np.array_equal(cp.asnumpy(x[last * n:(last + 1) * n]), v["x_want"]):
            raise SystemExit(f"{name}: the hand-off vector after the last round differs from the host's")
        if not np.array_equal(cp.asnumpy(sink), v["sums"]):
            raise SystemExit(f"{name}: a CTA's sum of the W it drained differs from the host's")
        return cp.cuda.get_elapsed_time(start, stop) * 1000.0 / args.rounds

    for name in table:  # warm-up, and the first check of each
        launch(name)
    samples = {name: [] for name in table}
    spans = {name: [] for name in table}
    for _ in range(args.samples):  # alternating
        for name in table:
            samples[name].append(launch(name))
            st = cp.asnumpy(prepared[name]["stamps"]).reshape(args.rounds, -1, 2).astype(np.int64)
            spans[name].append(st[2:, :, 1] - st[2:, :, 0])  # CTA 0's calls, the first two rounds left out
    results = []
    for name, v in prepared.items():
        us = statistics.median(samples[name])
        call_us = np.median(np.concatenate(spans[name]), axis=0) / 1000.0
        row = {"variant": name, "calls_bytes_per_cta": list(v["calls"]), "ahead_bytes": v["ahead"],
               "ahead_kind": v["kind"], "copy_policy": v["policy"], "us_per_round": us,
               "min": min(samples[name]), "max": max(samples[name]),
               "tb_s": v["per_round"] * ctas / (us * 1e-6) / 1e12 if v["per_round"] else None,
               "cta0_call_us": [round(float(c), 3) for c in call_us]}
        results.append(row)
        print(f"{name:52s} {us:8.2f} us/round" + (f"  {row['tb_s']:.2f} TB/s" if row["tb_s"] else "")
              + "  CTA 0's calls: " + " ".join(f"{c:.2f}" for c in call_us), flush=True)

    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    doc = {"command": "python " + " ".join([str(Path(sys.argv[0]))] + sys.argv[1:]),
           "machine": f"{props['name'].decode()}, {ctas} SMs",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "ctas": ctas, "slots": args.slots, "slot_bytes": SLOT, "rounds": args.rounds, "samples": args.samples,
           "lat_loads": args.lat_loads, "layer_calls": dict(zip(CALL_NAMES, LAYER)), "results": results}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(doc, indent=1) + "\n")
    layer_mb = sum(LAYER) * ctas / 1e6
    lines = ["# Weight stream across a layer's latency-bound calls: the ring alone, and W asked of L2 ahead", "",
             f"`{doc['command']}` on {doc['machine']}, {doc['date']}; {ctas} CTAs (one an SM), a ring of "
             f"{args.slots} x 32 KB, {args.rounds} layers a launch ({layer_mb:.1f} MB of W a layer), median of "
             f"{args.samples} alternating launches. A layer's calls: " + ", ".join(
                 f"{c} {b // KB} KB a CTA" if b else f"{c} {args.lat_loads} dependent loads"
                 for c, b in zip(CALL_NAMES, LAYER)) + ", each after an all-to-all hand-off.", "",
             "| variant | us per layer | W TB/s | CTA 0's calls, us (median) |", "| --- | ---: | ---: | --- |"]
    for row in results:
        lines.append(f"| {row['variant']} | {row['us_per_round']:.2f} | "
                     + (f"{row['tb_s']:.2f}" if row["tb_s"] else "-") + " | "
                     + " / ".join(f"{c:.2f}" for c in row["cta0_call_us"]) + " |")
    (out / "RESULTS.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
