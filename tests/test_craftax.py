"""Craftax (`craftax/<id>`) through the harness's environment table: the adapter's terminated and
truncated and final observation, the pool of fresh worlds the episodes start from, the score in the
logs, and every discrete script training on Craftax-Classic from the command line and resuming
exactly. Budgets are tiny (hundreds of env steps): these check the plumbing, not the learning
(docs/ppo_jax_scan.md has the Craftax-1M runs)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import (
    check_gif,
    load_script,
    read_events,
    read_jsonl,
    rewound_copy,
    run_args,
    run_script,
    steps_trained,
    tree_equal,
)

pytest.importorskip("craftax")
h = load_script("ppo_jax_scan")
CLASSIC = "craftax/Craftax-Classic-Symbolic-v1"
NOOP = 0  # Craftax-Classic's action 0


N, T = (
    16,
    16,
)  # every hand-driven test: 16 envs, 16 NOOP steps, one compiled program (the time limit is traced)


@pytest.fixture(scope="module")
def classic():
    return h.make_env(CLASSIC)


def noop_steps(spec, state, keys, params):
    """T NOOP steps of the N envs from state, the time limit params.max_steps_in_episode: EnvSteps [T, N]."""
    spec = spec._replace(params=params)

    def body(state, key):
        step = h.step_envs(spec, jax.random.split(key, N), state, jnp.full(N, NOOP))
        return step.state, step

    return jax.lax.scan(body, state, keys)[1]


@pytest.fixture(scope="module")
def reset(classic):
    """key -> (obs, state) of N fresh envs, compiled (Craftax's world generation op by op costs seconds)."""
    return jax.jit(lambda key: h.reset_envs(classic, key, N))


@pytest.fixture(scope="module")
def drive(classic, reset):
    """(time limit, seed, start state or None) -> (the first obs [N, ...], the EnvSteps [T, N, ...])."""
    program = jax.jit(lambda state, keys, params: noop_steps(classic, state, keys, params))

    def run(limit: int, seed: int = 0, edit=lambda state: state):
        obs, state = reset(jax.random.PRNGKey(seed))
        params = classic.params.replace(max_steps_in_episode=jnp.int32(limit))
        return obs, program(edit(state), jax.random.split(jax.random.PRNGKey(seed + 1), T), params)

    return run


def test_the_env_table_builds_craftax_with_its_sizes_and_score(classic):
    assert classic.discrete and classic.action_dim == 17 and classic.obs_shape == (1345,)
    assert classic.params.max_steps_in_episode == 10_000 and classic.metric_tags[1] == "craftax/score_percent"
    assert len(classic.info_names) == 22 and "collect_diamond" in classic.info_names  # the achievements
    every = np.ones((1, 22))  # one episode that unlocked all 22, its return their 22 rewards: 100%
    assert classic.summary(np.array([22.0]), every) == {
        "score_percent": 100.0,
        "achievements": dict.fromkeys(classic.info_names, 1.0),
    }
    full = h.make_env("craftax/Craftax-Symbolic-v1")
    assert (
        full.action_dim == 43
        and full.obs_shape == (8268,)
        and full.summary(np.array([226.0]), np.ones((1, 67)))["score_percent"] == 100
    )
    assert full.params.max_steps_in_episode == 100_000 and len(full.info_names) == 67


def test_a_time_out_is_a_truncation_with_the_final_observation_not_the_resets(drive):
    """A time limit of 5 steps, NOOPs: every episode is cut at steps 5, 10 and 15, truncated and not
    terminated; the final observation is the world reached, the next one a new world's."""
    first, steps = drive(5)
    terminated, truncated = np.asarray(steps.terminated), np.asarray(steps.truncated)
    assert not terminated.any()
    assert truncated[[4, 9, 14]].all() and truncated.sum() == 3 * N
    obs, final = np.asarray(steps.obs), np.asarray(steps.final_obs)
    np.testing.assert_array_equal(final[~truncated], obs[~truncated])  # no reset inside an episode
    for t in (4, 9):
        assert all((final[t, i] != obs[t, i]).any() for i in range(N))  # the reset's is another world's
    np.testing.assert_array_equal(final[4], final[4])
    assert all((obs[4, i] != first[i]).any() for i in range(N))  # not the first episode's world again


def test_death_is_a_termination_not_a_truncation(drive):
    """Env 0's player at -1 health dies on the first step: terminated, with its final observation."""

    def dying(state):
        health = state.env.craftax.player_health
        craftax = state.env.craftax.replace(player_health=health.at[0].set(-1))
        return state._replace(env=state.env.replace(craftax=craftax))

    _, steps = drive(10_000, edit=dying)
    terminated, truncated = np.asarray(steps.terminated), np.asarray(steps.truncated)
    assert terminated[0, 0] and not terminated[0, 1:].any() and not truncated.any()
    assert (np.asarray(steps.final_obs[0, 0]) != np.asarray(steps.obs[0, 0])).any()
    np.testing.assert_array_equal(steps.final_obs[0, 1:], steps.obs[0, 1:])


def distinct(rows: np.ndarray) -> int:
    return len({row.tobytes() for row in rows})


def test_envs_that_end_together_start_fresh_worlds_and_a_dry_pool_is_counted(drive):
    """16 envs cut every 3 steps, all at once. The first time they take the pool's 16 worlds: each a
    different one, none seen before. The pool refills N/8 = 2 worlds every 16 steps, so the second
    time it is dry: the 16 envs start from used worlds, and dry_starts counts all 16. At step 16 the
    refill puts 2 new worlds in the pool."""
    first, steps = drive(3)
    obs, ended = np.asarray(steps.obs), np.asarray(steps.truncated)
    assert ended[[2, 5, 8]].all()
    starts, pooled = obs[2], steps.state
    assert distinct(starts) == N and distinct(np.concatenate([starts, np.asarray(first)])) == 2 * N
    assert int(pooled.dry_starts[2].sum()) == 0 and int(pooled.dry_starts[5].sum()) == N
    assert not np.asarray(pooled.fresh[2]).any()  # the pool is used up
    assert {row.tobytes() for row in obs[5]} <= {row.tobytes() for row in np.asarray(pooled.start_obs[0])}
    assert int(pooled.fresh[14].sum()) == 0 and int(pooled.fresh[15].sum()) == 2  # the refill
    assert distinct(np.asarray(pooled.start_obs[15])[np.asarray(pooled.fresh[15])]) == 2


def test_the_pool_of_runs_vmapped_together_steps_as_each_run_alone(classic, reset, drive):
    """Two runs in one vmapped program (seeds, a sweep): the refill stays a real branch, taken by
    every run at once, and each run steps bit for bit as the run alone (drive's program)."""
    params = classic.params.replace(max_steps_in_episode=jnp.int32(7))
    states = [reset(jax.random.PRNGKey(seed))[1] for seed in range(2)]
    keys = [jax.random.split(jax.random.PRNGKey(seed + 1), T) for seed in range(2)]
    stack = lambda trees: jax.tree.map(lambda *xs: jnp.stack(xs), *trees)
    vmapped = jax.vmap(lambda state, keys: noop_steps(classic, state, keys, params))
    together = jax.jit(vmapped)(stack(states), stack(keys))
    for seed in range(2):
        assert tree_equal(jax.tree.map(lambda x, i=seed: x[i], together), drive(7, seed)[1])
    assert int(together.state.fresh[:, 15].sum()) > 0  # the refill ran


def test_bad_craftax_ids_are_refused_in_one_line(monkeypatch):
    with pytest.raises(
        h.ArgsError, match=r"craftax/Nope is not a Craftax environment; valid: craftax/Craftax-Sym"
    ):
        h.make_env("craftax/Nope")
    for pixels in ("Craftax-Pixels-v1", "Craftax-Classic-Pixels-v1"):
        with pytest.raises(h.ArgsError, match=rf"craftax/{pixels}: Craftax's pixel observations are not sup"):
            h.make_env(f"craftax/{pixels}")
    sac = load_script("sac_jax")
    with pytest.raises(sac.ArgsError, match=r"SAC needs continuous \(Box\) actions"):
        sac.make_algorithm(sac.Flags(env_id=CLASSIC))
    monkeypatch.setattr(h.importlib.util, "find_spec", lambda name: None if name == "craftax" else True)
    with pytest.raises(h.ArgsError, match=r"Craftax is not installed: pip install craftax==1.6.1"):
        h.make_env(CLASSIC)


def newest_state(run_dir, module=h):
    algo = module.make_algorithm(run_args(module, run_dir))
    template = jax.eval_shape(algo.init, jax.random.PRNGKey(0))
    return module.read_checkpoint(sorted((run_dir / "checkpoints").glob("step_*.msgpack"))[-1], template)


# The command line of each discrete script at a tiny budget: two chunks.
PPO = ["--num-envs", "8", "--num-steps", "16", "--total-timesteps", "512", "--num-chunks", "2"]
REPLAY = ["--num-envs", "8", "--learning-starts", "64", "--train-frequency", "8", "--batch-size", "16",
          "--target-network-frequency", "64", "--buffer-size", "256", "--log-frequency", "64",
          "--total-timesteps", "256", "--num-chunks", "2"]  # fmt: skip
TINY = {
    "ppo_jax_scan": PPO,
    "ppo_rnn_jax": [*PPO, "--hidden-size", "16"],
    "ppo_multigpu": PPO,
    "pqn_jax": [
        "--num-envs",
        "8",
        "--num-steps",
        "8",
        "--num-minibatches",
        "2",
        "--update-epochs",
        "1",
        "--total-timesteps",
        "256",
        "--num-chunks",
        "2",
    ],  # fmt: skip
    "dqn_jax": REPLAY,
    "c51_jax": [*REPLAY, "--n-atoms", "11", "--v-min", "-10", "--v-max", "10"],
    "rainbow_jax": [*REPLAY, "--n-atoms", "11", "--v-min", "-10", "--v-max", "10"],
    "iqn_jax": [
        *REPLAY,
        "--num-tau-samples",
        "8",
        "--num-tau-prime-samples",
        "8",
        "--num-quantile-samples",
        "4",
    ],
}


# Each flow compiles a Craftax program or two (20-60 s on 2 cores), so all run under `pytest -m slow`: each
# discrete script, and a video. The default run checks Craftax's pool and time limits (below) and the quick
# benchmark trains ppo_jax_scan on Craftax-Classic through the command line.
SLOW = (
    "dqn_jax",
    "ppo_rnn_jax",
    "ppo_multigpu",
    "pqn_jax",
    "c51_jax",
    "rainbow_jax",
    "iqn_jax",
    "two seeds and a video",
)
FLOWS = [pytest.param(name, marks=pytest.mark.slow) for name in ("ppo_jax_scan", *SLOW)]


@pytest.mark.parametrize("flow", FLOWS)
def test_each_discrete_script_trains_on_craftax_classic_and_resumes_exactly(flow, tmp_path):
    """From the command line: a run, and the same run rewound to its first chunk's checkpoint (moved
    to another directory) and resumed, end with the same state and evaluation. The logs hold the
    score where episodes ended and the dry starts; eval.json each achievement's success rate. The
    two-seed flow trains two seeds of ppo_jax_scan in one program (the pool's refill vmapped) and
    draws a GIF of each one's evaluation with Craftax's renderer."""
    script = flow if flow in TINY else "ppo_jax_scan"
    module, flags = load_script(script), [*TINY[script], "--env-id", CLASSIC, "--eval-episodes", "2"]
    seeds = [] if flow in TINY else ["--num-seeds", "2"]
    video = ["--capture-video"] if seeds else []
    straight = run_script(script, *flags, *seeds, *video, "--output-dir", str(tmp_path / "a"), timeout=600)
    assert straight.returncode == 0, straight.stderr[-3000:]
    runs_b = rewound_copy(tmp_path / "a", tmp_path / "b")
    resumed = run_script(script, "--resume", str(runs_b[0]), timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert steps_trained(resumed.stdout) == steps_trained(straight.stdout) // 2  # the second chunk

    runs_a = sorted((tmp_path / "a").iterdir())
    assert len(runs_a) == len(runs_b) == (2 if seeds else 1)
    algo = module.make_algorithm(run_args(module, runs_a[0]))
    for run_a, run_b in zip(runs_a, runs_b, strict=True):
        (done_a, state_a), (done_b, state_b) = newest_state(run_a, module), newest_state(run_b, module)
        assert done_a == done_b == algo.num_iterations and tree_equal(state_a, state_b)
        evaluations = [json.loads((d / "eval.json").read_text()) for d in (run_a, run_b)]
        assert evaluations[0] == evaluations[1]
        assert set(evaluations[0]["achievements"]) == set(algo.env.info_names)
        assert evaluations[0]["score_percent"] == pytest.approx(100 * evaluations[0]["mean"] / 22)
        points = read_jsonl(run_a / "metrics.jsonl")  # the score where episodes ended (NaN, left out, else)
        assert all(("craftax/score_percent" in p) == ("charts/episodic_return" in p) for p in points)
        assert all(p["craftax/dry_starts"] == 0 for p in points)
        assert "craftax/dry_starts" in read_events(run_a)
        if video:
            check_gif(run_a / "videos" / "eval.gif")
    if seeds:
        assert not tree_equal(*(newest_state(d, module)[1] for d in runs_a))  # two seeds, two runs
