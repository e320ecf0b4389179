"""The statistics of the benchmarks (no GPU): paired differences and their bootstrap interval."""
import random

import pytest

from pipelink.harness.timing import bootstrap_halfwidth, paired_difference_pct


def test_paired_difference_cancels_what_varies_between_rounds():
    rng = random.Random(1)
    rounds = [rng.choice((26.0, 44.0)) for _ in range(40)]  # bimodal from round to round, like split-K
    a = [r * 1.001 for r in rounds]                         # 0.1% slower in every round
    b = list(rounds)
    assert paired_difference_pct(a, b) == pytest.approx(0.1)
    assert bootstrap_halfwidth(a, b) == pytest.approx(0.0, abs=1e-9)


def test_halfwidth_shrinks_with_more_rounds():
    rng = random.Random(2)
    def rounds(n):
        base = [rng.choice((26.0, 44.0)) for _ in range(n)]
        return [x * (1 + rng.gauss(0, 0.002)) for x in base], [x * (1 + rng.gauss(0, 0.002)) for x in base]
    few = sum(bootstrap_halfwidth(*rounds(20), resamples=500) for _ in range(5))
    many = sum(bootstrap_halfwidth(*rounds(500), resamples=500) for _ in range(5))
    assert many < few / 2  # about 1/sqrt(rounds): 5x


def test_paired_samples_must_pair():
    with pytest.raises(ValueError):
        paired_difference_pct([1.0], [1.0, 2.0])
