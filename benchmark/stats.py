"""Statistics for results that can be cited, after Agarwal et al. 2021, "Deep Reinforcement
Learning at the Edge of the Statistical Precipice" (NeurIPS; the rliable library), in numpy.

- iqm: the interquartile mean, rliable's and scipy.stats.trim_mean(x, 0.25)'s definition.
- stratified_bootstrap_ci: a percentile bootstrap interval that resamples the seeds (runs)
  with replacement within each task (env), never across tasks.
- normalise: min-max scores, a random policy at 0 and a reference score at 1.
- performance_profile: the fraction of runs whose score exceeds each tau.
- mean_ci_band: learning curves' mean over seeds, with a percentile bootstrap band.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike


def iqm(scores: ArrayLike) -> float:
    """The interquartile mean: sort, drop floor(n / 4) scores at each end, average the rest
    (n = 3: the mean; n = 8: the mean of the middle 4)."""
    x = np.sort(np.asarray(scores, np.float64).ravel())
    cut = len(x) // 4
    return float(x[cut : len(x) - cut].mean())


def stratified_bootstrap_ci(
    scores_per_task: Sequence[ArrayLike],
    statistic: Callable[[np.ndarray], float] = iqm,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float]:
    """The percentile bootstrap interval of statistic(all runs pooled). Each of the `reps`
    samples draws, for every task, as many of its seeds as it has, with replacement, from that
    task alone; with one task it is the ordinary bootstrap of its seeds. The same seed gives
    the same interval."""
    rng = np.random.default_rng(seed)
    tasks = [np.asarray(s, np.float64).ravel() for s in scores_per_task]
    samples = np.concatenate([t[rng.integers(0, len(t), (reps, len(t)))] for t in tasks], axis=1)  # [R, N]
    values = np.array([statistic(sample) for sample in samples])
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(values, [tail, 100 - tail])
    return float(low), float(high)


def normalise(score: ArrayLike, random_score: float, reference_score: float) -> np.ndarray | float:
    """Min-max normalisation: random_score -> 0, reference_score -> 1."""
    normalised = (np.asarray(score, np.float64) - random_score) / (reference_score - random_score)
    return float(normalised) if normalised.ndim == 0 else normalised


def performance_profile(scores: ArrayLike, taus: ArrayLike) -> np.ndarray:
    """For each tau, the fraction of runs (all tasks' seeds pooled) whose score is > tau."""
    x = np.asarray(scores, np.float64).ravel()
    return (x[None, :] > np.asarray(taus, np.float64).ravel()[:, None]).mean(axis=1)


def mean_ci_band(
    curves: Sequence[tuple[ArrayLike, ArrayLike]],
    num_points: int = 100,
    reps: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(grid, mean, low, high) of per-seed (steps, values) curves: each curve is linearly
    interpolated onto `num_points` steps spanning the range every curve covers; mean is the mean
    over seeds and [low, high] a percentile bootstrap band of that mean (seeds resampled with
    replacement, pointwise). One seed gives a band of zero width; with 3 seeds the bootstrap has
    only 10 distinct samples, so read the band as a rough one. Empty arrays if the curves share
    no step."""
    curves = [(np.asarray(s, np.float64), np.asarray(v, np.float64)) for s, v in curves if len(s)]
    if not curves:
        return (np.zeros(0),) * 4
    start, stop = max(s[0] for s, _ in curves), min(s[-1] for s, _ in curves)
    if stop < start:
        return (np.zeros(0),) * 4
    grid = np.unique(np.linspace(start, stop, num_points))
    ys = np.stack([np.interp(grid, s, v) for s, v in curves])  # [S, G]
    rng = np.random.default_rng(seed)
    means = ys[rng.integers(0, len(ys), (reps, len(ys)))].mean(axis=1)  # [R, G]
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(means, [tail, 100 - tail], axis=0)
    return grid, ys.mean(axis=0), low, high
