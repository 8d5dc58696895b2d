"""benchmark/stats.py: the IQM, the stratified bootstrap, normalisation, performance profiles and
the learning curves' band, on hand-computed values."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest
from _helpers import ROOT

sys.path.insert(0, str(ROOT))  # the harness is a package of the repository, not installed
stats = importlib.import_module("benchmark.stats")


def test_iqm_is_the_25_percent_trimmed_mean():
    assert stats.iqm([1, 2, 3, 4, 5, 6, 7, 8]) == 4.5  # the middle 4: (3 + 4 + 5 + 6) / 4
    assert stats.iqm([8, 1, 7, 2, 6, 3, 5, 4]) == 4.5  # order does not matter
    assert stats.iqm([1.0, 2.0, 30.0]) == pytest.approx(11.0)  # n = 3 drops nothing: the mean
    assert stats.iqm([0, 0, 1, 100]) == 0.5  # n = 4: the middle 2
    assert stats.iqm([5, 1, 2, 3, 100]) == pytest.approx(
        10 / 3
    )  # n = 5: drops 1 at each end: (2 + 3 + 5) / 3
    assert stats.iqm([7.0]) == 7.0


def test_bootstrap_ci_contains_the_estimate_and_is_deterministic():
    scores = [[10.0, 12.0, 9.0, 30.0, 11.0, 13.0]]
    low, high = stats.stratified_bootstrap_ci(scores)
    assert low <= stats.iqm(scores[0]) <= high and low < high
    assert (low, high) == stats.stratified_bootstrap_ci(scores, seed=0)
    assert (low, high) != stats.stratified_bootstrap_ci(scores, seed=1)
    assert low >= 9.0 and high <= 30.0  # within the scores' range


def test_bootstrap_ci_has_zero_width_when_all_seeds_agree():
    assert stats.stratified_bootstrap_ci([[3.5, 3.5, 3.5]]) == (3.5, 3.5)
    assert stats.stratified_bootstrap_ci([[1.0, 1.0], [2.0, 2.0, 2.0]], statistic=np.mean) == (1.6, 1.6)


def test_stratification_never_mixes_tasks():
    # Task A's seeds all score 0, task B's all 1: every stratified sample holds 3 zeros and 3 ones,
    # so its IQM is 0.5. Resampling the 6 runs pooled would give IQMs from 0 to 1.
    assert stats.stratified_bootstrap_ci([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]) == (0.5, 0.5)
    assert stats.stratified_bootstrap_ci([[0.0] * 4, [1.0] * 4]) == (0.5, 0.5)
    low, high = stats.stratified_bootstrap_ci([[0.0, 0.0, 0.0, 1.0, 1.0, 1.0]])  # one task: not stratified
    assert low < 0.5 < high


def test_normalise_maps_random_to_0_and_reference_to_1():
    assert stats.normalise(22.0, 22.0, 500.0) == 0.0
    assert stats.normalise(500.0, 22.0, 500.0) == 1.0
    assert stats.normalise(-700.0, -1200.0, -200.0) == 0.5  # Pendulum: negative returns
    np.testing.assert_allclose(stats.normalise([0.0, 5.0, 10.0], 0.0, 10.0), [0.0, 0.5, 1.0])


def test_performance_profile_counts_runs_strictly_above_tau():
    scores = [0.0, 0.2, 0.5, 0.5, 1.0]
    profile = stats.performance_profile(scores, [-0.1, 0.0, 0.5, 0.9, 1.0])
    np.testing.assert_allclose(profile, [1.0, 0.8, 0.2, 0.2, 0.0])


def test_mean_ci_band_interpolates_onto_a_common_grid():
    curves = [([0, 10], [0.0, 10.0]), ([0, 5, 10], [2.0, 7.0, 12.0])]  # y = x and y = x + 2
    grid, mean, low, high = stats.mean_ci_band(curves, num_points=3)
    np.testing.assert_allclose(grid, [0, 5, 10])
    np.testing.assert_allclose(mean, [1.0, 6.0, 11.0])
    np.testing.assert_allclose(low, [0.0, 5.0, 10.0])  # the bootstrap means lie between the two seeds
    np.testing.assert_allclose(high, [2.0, 7.0, 12.0])
    grid, mean, low, high = stats.mean_ci_band([([100, 200, 300], [1.0, 2.0, 3.0])] * 3)  # equal seeds
    assert grid[0] == 100 and grid[-1] == 300 and np.array_equal(low, high) and np.allclose(mean, low)
    # the grid spans only the steps every curve covers
    grid, *_ = stats.mean_ci_band([([0, 100], [0.0, 1.0]), ([50, 200], [0.0, 1.0])], num_points=11)
    assert grid[0] == 50 and grid[-1] == 100
