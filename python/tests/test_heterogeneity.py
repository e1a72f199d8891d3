"""chorus.heterogeneity, the twin of C++'s step_delays: the generator's published
sequence, the same draws as C++ (tests/test_heterogeneity.cpp), the closed forms,
the slowdown, and clear errors."""

from __future__ import annotations

import math
import time

import pytest

import chorus
from chorus.heterogeneity import Jitter, SlowRank, SplitMix64, StepDelays


def test_splitmix64_draws_the_published_sequence():
    random = SplitMix64(1234567)
    assert [random.next() for _ in range(5)] == [6457827717110365317, 3203168211198807973, 9817491932198370423,
                                                 4593380528125082431, 16408922859458223821]


def test_the_same_draws_as_cpp():
    # tests/test_heterogeneity.cpp, "the draws Python's twin must match": seed 7, rank 1.
    pareto = StepDelays(1, 2, jitter="pareto:2:1.5", seed=7)
    assert pareto.delay_after(0) == pytest.approx(0.006916231568, rel=1e-9)
    assert pareto.delay_after(0) == pytest.approx(0.00210721848, rel=1e-9)
    assert StepDelays(1, 2, jitter="lognormal:3:0.5", seed=7).delay_after(0) == pytest.approx(0.007079283552, rel=1e-9)
    assert StepDelays(1, 2, jitter="exponential:4", seed=7).delay_after(0) == pytest.approx(0.007444343218, rel=1e-9)


def _draws(spec: str, count: int = 40000):
    random, shape = SplitMix64(11), Jitter.parse(spec)
    return sorted(shape.draw(random) * 1e3 for _ in range(count))


def test_jitter_matches_its_closed_forms():
    exponential = _draws("exponential:4")
    assert sum(exponential) / len(exponential) == pytest.approx(4.0, rel=0.03)
    pareto = _draws("pareto:2:1.5")
    assert pareto[0] >= 2.0
    assert pareto[len(pareto) // 2] == pytest.approx(2.0 * 2 ** (1 / 1.5), rel=0.03)
    lognormal = _draws("lognormal:3:0.8")
    assert lognormal[len(lognormal) // 2] == pytest.approx(3.0, rel=0.03)
    assert max(_draws("pareto:1000:0.5", 2000)) == 1e4  # capped at 10 s


def test_a_slow_rank_sleeps_factor_minus_one_times_its_compute():
    slow, other = StepDelays(2, 3, slow=["2:4"]), StepDelays(1, 3, slow=[SlowRank(2, 4.0)])
    assert slow.factor == 4.0 and not other.delays
    assert slow.delay_after(0.25) == pytest.approx(0.75)
    started = time.monotonic()
    with slow.step():
        time.sleep(0.01)
    assert slow.slept_seconds >= 0.03
    assert time.monotonic() - started >= 0.04


@pytest.mark.parametrize("spec", ["3", "x:2", "-1:2", "1.5:2", "2:0.5", "1:2:3", "2:nan"])
def test_bad_slow_ranks_are_clear_errors(spec):
    with pytest.raises(chorus.InvalidArgument):
        SlowRank.parse(spec)


@pytest.mark.parametrize("spec", ["", "pareto", "pareto:1", "pareto:1:0", "exponential:1:2", "lognormal:1:-1",
                                  "gauss:1", "none:1", "exponential:abc"])
def test_bad_jitter_is_a_clear_error(spec):
    with pytest.raises(chorus.InvalidArgument):
        Jitter.parse(spec)


def test_a_slow_rank_beyond_the_job_is_a_clear_error():
    with pytest.raises(chorus.InvalidArgument, match="slow rank 5 of a job of 4 ranks"):
        StepDelays(0, 4, slow=["5:2"])
    assert math.isclose(StepDelays(0, 4, slow=["3:2"]).factor, 1.0)
