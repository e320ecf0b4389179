"""Timing kernels on a GPU for the benchmarks (torch needed): CUDA events, warm-up, alternating
samples, medians, inputs rotated over more than the L2 cache.

A sample times `launches` back-to-back launches between two CUDA events, queued behind a GPU
sleep long enough for the host to queue them all: the host's launch cost stays out of it.
"""
from __future__ import annotations

import math
import statistics

L2_BYTES = 60 * 2**20  # H200
SLEEP_CYCLES = 4_000_000  # ~2 ms at 2 GHz: longer than the host needs to queue a sample
HOST_US_PER_LAUNCH = 40   # generous: what one Python launch costs the host
GPU_CYCLES_PER_US = 2000


def problem_bytes(problem) -> int:
    import torch
    return sum(v.numel() * v.element_size() for v in problem.args.values() if torch.is_tensor(v))


def input_sets(make, want_bytes: int = 2 * L2_BYTES, most: int = 256) -> list:
    """`make(i)` problems, enough that cycling through them touches more than `want_bytes`."""
    first = make(0)
    count = max(2, min(most, math.ceil(want_bytes / max(problem_bytes(first), 1))))
    return [first] + [make(i) for i in range(1, count)]


_SCRUB = {}


def scrub_l2() -> None:
    """Overwrite more than the L2 so the next sample starts from the same cold cache."""
    import torch
    buf = _SCRUB.get("buf")
    if buf is None:
        buf = _SCRUB["buf"] = torch.empty(2 * L2_BYTES // 4, dtype=torch.float32, device="cuda")
    buf.zero_()


def time_sample(kernel, sets: list, start_index: int, launches: int, grid=None, scrub: bool = False) -> float:
    """Microseconds per launch over `launches` launches, cycling through `sets`."""
    import torch
    if scrub:
        scrub_l2()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(max(SLEEP_CYCLES, launches * HOST_US_PER_LAUNCH * GPU_CYCLES_PER_US))
    begin.record()
    for i in range(launches):
        kernel.launch(grid=grid, **sets[(start_index + i) % len(sets)].args)
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) * 1000.0 / launches


def launches_for(kernel, sets: list, target_us: float = 2000.0, least: int = 20, most: int = 400, grid=None) -> int:
    """Launches per sample so that one sample holds about `target_us` of GPU work."""
    one = time_sample(kernel, sets, 0, 5, grid)
    return max(least, min(most, round(target_us / max(one, 1e-3))))


def alternate(kernels: dict, sets: list, samples: int, launches: int = 1, grid=None, warmup: int = 3,
              same_inputs: bool = False) -> dict:
    """Time each kernel `samples` times, alternating them (the order flips every round, and
    `samples` is rounded up to even so each kernel goes first equally often).

    By default every launch of a round reads its own input set, so the second kernel never finds the
    first one's inputs in the L2. With `same_inputs`, both kernels of a round read the same sets
    from a scrubbed L2: what differs between them is then the kernel alone (the parity benchmark).
    Returns {name: {"median_us", "samples_us"}}."""
    import torch
    names = list(kernels)
    samples += samples % 2
    for name in names:
        for i in range(warmup):
            kernels[name].launch(grid=grid, **sets[i % len(sets)].args)
    torch.cuda.synchronize()
    out = {n: [] for n in names}
    cursor = 0
    for i in range(samples):
        for name in (names if i % 2 == 0 else list(reversed(names))):
            out[name].append(time_sample(kernels[name], sets, cursor, launches, grid, scrub=same_inputs))
            if not same_inputs:
                cursor += launches
        if same_inputs:
            cursor += launches
    return {n: {"median_us": statistics.median(s), "samples_us": s} for n, s in out.items()}


def paired_difference_pct(a: list[float], b: list[float]) -> float:
    """Median over rounds of 100 * (a - b) / b, pairing the samples of one round: what varies from
    round to round (clocks, a slow round) cancels, which the ratio of two medians does not do."""
    if len(a) != len(b) or not a:
        raise ValueError("paired samples need the same, non-zero count")
    return statistics.median(100.0 * (x - y) / y for x, y in zip(a, b))


def bootstrap_halfwidth(a: list[float], b: list[float], resamples: int = 2000, seed: int = 0) -> float:
    """Half the width of the 95% bootstrap interval of `paired_difference_pct`, in percent points."""
    import random
    rng = random.Random(seed)
    diffs = [100.0 * (x - y) / y for x, y in zip(a, b)]
    meds = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(resamples))
    return (meds[int(0.975 * (resamples - 1))] - meds[int(0.025 * (resamples - 1))]) / 2.0


def alternate_until(kernels: dict, sets: list, first: str, second: str, block: int, most: int,
                    halfwidth_pct: float, launches: int = 1, grid=None) -> dict:
    """`alternate(same_inputs=True)` in blocks of `block` rounds until the paired difference of
    `first` vs `second` is known to within `halfwidth_pct` (95% bootstrap), or `most` rounds."""
    total = {n: [] for n in kernels}
    while True:
        t = alternate(kernels, sets, block, launches, grid, warmup=0 if total[first] else 3, same_inputs=True)
        for n in kernels:
            total[n] += t[n]["samples_us"]
        hw = bootstrap_halfwidth(total[first], total[second])
        if hw <= halfwidth_pct or len(total[first]) >= most:
            return {n: {"median_us": statistics.median(s), "samples_us": s} for n, s in total.items()} | {
                "paired_diff_pct": paired_difference_pct(total[first], total[second]), "halfwidth_pct": hw}
