"""DeepMind Control Suite tasks of MuJoCo Playground (`playground/<Task>`) through the harness's
environment table: the adapter's truncation at the time limit with the true final observation, a NaN
in the physics as the only termination, a fresh reset for every episode (computed only at the steps
where one ended), the ids refused in one line, no MUJOCO_LOG.TXT, and the continuous scripts training
on CartpoleBalance from the command line and resuming exactly. Budgets are tiny (hundreds of env steps):
these check the plumbing, not the learning (docs/results.md has the suite's runs)."""

from __future__ import annotations

import base64
import json
import re
import zlib

import flax.serialization
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _helpers import (
    load_script,
    rewound_copy,
    run_args,
    run_script,
    skip_module_without_playground,
    steps_trained,
    tree_equal,
)

skip_module_without_playground()
h = load_script("ppo_jax_scan")
BALANCE = "playground/CartpoleBalance"
N, T, LIMIT = 4, 12, 5  # every hand-driven test: 4 envs, 12 steps, episodes cut at 5 steps


@pytest.fixture(scope="module")
def balance():
    return h.make_env(BALANCE)


@pytest.fixture(scope="module")
def reset(balance):
    """key -> (obs, state) of N fresh envs, compiled (MuJoCo's reset run op by op costs seconds)."""
    return jax.jit(lambda key: h.reset_envs(balance, key, N))


@pytest.fixture(scope="module")
def drive(balance, reset):
    """(seed, edit of the first state) -> (the first obs [N, ...], the EnvSteps [T, N, ...]) of N envs
    under a constant action, the time limit LIMIT; the program also takes the runs vmapped."""
    spec = balance._replace(params=balance.params.replace(max_steps_in_episode=LIMIT))

    def steps(state, key):
        def body(state, key):
            step = h.step_envs(spec, jax.random.split(key, N), state, jnp.full((N, 1), 0.3))
            return step.state, step

        return jax.lax.scan(body, state, jax.random.split(key, T))[1]

    program = jax.jit(steps)

    def run(seed: int = 0, edit=lambda state: state):
        obs, state = reset(jax.random.PRNGKey(seed))  # the time limit plays no part in a reset
        return obs, program(edit(state), jax.random.PRNGKey(seed + 1))

    return run, steps, spec


def test_the_env_table_builds_a_dm_control_task_with_its_time_limit(balance):
    assert not balance.discrete and balance.action_dim == 1 and balance.obs_shape == (5,)
    assert balance.params.max_steps_in_episode == 1000 and balance.step is h.step_resetting_ended
    assert list(balance.action_low) == [-1.0] and list(balance.action_high) == [1.0]


def test_a_time_out_is_a_truncation_with_the_final_observation_and_a_fresh_reset(drive):
    """Episodes cut at steps 5 and 10: truncated, not terminated; the final observation is where the
    cart went (the physics stepped on), the next one a fresh reset's, which differs between episodes
    and envs."""
    run, _, _ = drive
    first_obs, steps = run()
    cut = np.zeros((T, N), bool)
    cut[[LIMIT - 1, 2 * LIMIT - 1]] = True
    assert (np.asarray(steps.truncated) == cut).all() and not np.asarray(steps.terminated).any()
    final, after = np.asarray(steps.final_obs), np.asarray(steps.obs)
    assert (final[~cut] == after[~cut]).all()  # within an episode the two are the same
    assert (final[cut] != after[cut]).any(axis=-1).all()  # at the cut: the reached one, and a reset's
    starts = np.stack([np.asarray(first_obs), after[LIMIT - 1], after[2 * LIMIT - 1]])  # [3, N, 5]
    assert len(np.unique(starts.reshape(-1, 5), axis=0)) == 3 * N  # every episode's start its own
    moved = np.abs(final[LIMIT - 1] - np.asarray(first_obs)).max()
    assert moved > 1e-3  # the final observation is five steps on, not the first


def test_a_nan_in_the_physics_terminates_and_never_reaches_the_learner(drive):
    """Playground's done is its NaN check of the physics: the env's episode terminates, its reward and
    observation of that step read 0, and the next episode starts from a finite reset."""
    run, _, _ = drive
    poison = lambda x: x.at[0].set(jnp.nan) if jnp.issubdtype(x.dtype, jnp.floating) else x
    _, steps = run(edit=lambda state: state.replace(physics=tuple(map(poison, state.physics))))
    assert bool(steps.terminated[0, 0]) and not bool(steps.truncated[0, 0])
    assert not np.asarray(steps.terminated[0, 1:]).any()  # the other envs step on
    assert np.isfinite(np.asarray(steps.reward)).all() and np.isfinite(np.asarray(steps.final_obs)).all()
    assert float(steps.reward[0, 0]) == 0.0 and np.isfinite(np.asarray(steps.obs[0, 0])).all()


@pytest.mark.slow  # lockstep_cond's exactness under vmap: tests/test_craftax.py checks it in the default run
def test_runs_vmapped_together_reset_as_each_run_alone(drive):
    """The reset branch is taken for every run when any run's env ended (lockstep_cond): two runs whose
    episodes end at different steps, vmapped, give each run's own transitions bit for bit. (A few of the
    solver's internal fields of the physics differ in the last bit: XLA fuses the branch's batched
    reset differently.)"""
    _, steps, spec = drive
    keys = jax.random.split(jax.random.PRNGKey(7), 2)

    def one(key, offset):
        _, state = h.reset_envs(spec, key, N)
        return steps(state.replace(time=state.time + offset), key)

    together = jax.jit(jax.vmap(one))(keys, jnp.array([0, 2]))
    alone = [jax.jit(one)(keys[i], i * 2) for i in range(2)]
    assert not tree_equal(together.truncated[0], together.truncated[1])  # they end at different steps
    for i in range(2):
        run = jax.tree.map(lambda x, i=i: x[i], together)
        assert tree_equal(run._replace(state=None), alone[i]._replace(state=None))
        assert tree_equal(run.state.time, alone[i].state.time)
        for x, y in zip(run.state.physics, alone[i].state.physics, strict=True):
            np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-9)


def test_a_checkpoint_of_the_physics_round_trips(reset):
    _, state = reset(jax.random.PRNGKey(3))
    restored = flax.serialization.from_bytes(
        jax.eval_shape(lambda: state), flax.serialization.to_bytes(state)
    )
    assert tree_equal(restored, state)


def test_bad_playground_ids_are_refused_in_one_line(monkeypatch):
    with pytest.raises(
        h.ArgsError, match=r"playground/Nope is not a DM Control task .*playground/CheetahRun"
    ):
        h.make_env("playground/Nope")
    with pytest.raises(h.ArgsError, match=r"playground/Go1JoystickFlatTerrain needs assets that Playground"):
        h.make_env("playground/Go1JoystickFlatTerrain")
    dqn = load_script("dqn_jax")
    with pytest.raises(dqn.ArgsError, match=r"discrete"):
        dqn.make_algorithm(dqn.Flags(env_id=BALANCE))
    monkeypatch.setattr(
        h.importlib.util, "find_spec", lambda name: None if name == "mujoco_playground" else 1
    )
    with pytest.raises(
        h.ArgsError,
        match=r"not installed: pip install playground==0.2.0 \(in vibe_rl's repository: pip install -e",
    ):
        h.make_env(BALANCE)


# the same function serves both suites: -m slow checks Brax's model too
@pytest.mark.parametrize(
    "env_id", ["playground/CheetahRun", pytest.param("brax/halfcheetah", marks=pytest.mark.slow)]
)
def test_no_mujoco_log_file_is_written_in_the_working_directory(env_id, tmp_path, monkeypatch):
    """Both models carry an attribute MuJoCo 4.0 deprecates: its warning goes to the console only."""
    monkeypatch.chdir(tmp_path)
    h.make_env(env_id)
    assert list(tmp_path.iterdir()) == []


# The command line of each continuous script at a tiny budget: two chunks.
PPO = ["--num-envs", "4", "--num-steps", "16", "--total-timesteps", "256", "--num-chunks", "2"]
REPLAY = ["--learning-starts", "64", "--batch-size", "16", "--buffer-size", "256", "--log-frequency", "64",
          "--total-timesteps", "256", "--num-chunks", "2", "--hidden-size", "16"]  # fmt: skip
TINY = {
    "ppo_jax_scan": PPO,
    "ppo_rnn_jax": [*PPO, "--hidden-size", "16"],
    "ppo_multigpu": PPO,
    "sac_jax": REPLAY,
    "td3_jax": REPLAY,
}
# Each flow compiles the MJX physics into two processes' programs (a minute and a half on 2 cores): they
# run with `pytest -m slow`. The default run trains on Playground where CI's quick benchmark does
# (ppo_jax_scan on playground/CartpoleBalance, from the command line, scored by its evaluation).
FLOWS = [
    pytest.param(name, marks=pytest.mark.slow)
    for name in ("ppo_jax_scan", "sac_jax", "ppo_rnn_jax", "ppo_multigpu", "td3_jax")
]


@pytest.mark.parametrize("flow", FLOWS)
def test_each_continuous_script_trains_on_cartpole_balance_and_resumes_exactly(flow, tmp_path):
    """From the command line: a run, and the same run rewound to its first chunk's checkpoint (moved
    to another directory) and resumed, end with the same state and evaluation; PPO's run draws its
    evaluation for Brax's viewer."""
    module, flags = load_script(flow), [*TINY[flow], "--env-id", BALANCE, "--eval-episodes", "2"]
    video = ["--capture-video"] if flow == "ppo_jax_scan" else []
    straight = run_script(flow, *flags, *video, "--output-dir", str(tmp_path / "a"), timeout=600)
    assert straight.returncode == 0, straight.stderr[-3000:]
    (run_b,) = rewound_copy(tmp_path / "a", tmp_path / "b")
    resumed = run_script(flow, "--resume", str(run_b), timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert steps_trained(resumed.stdout) == steps_trained(straight.stdout) // 2  # the second chunk

    (run_a,) = (tmp_path / "a").iterdir()
    algo = module.make_algorithm(run_args(module, run_a))
    template = jax.eval_shape(algo.init, jax.random.PRNGKey(0))
    newest = lambda d: module.read_checkpoint(
        sorted((d / "checkpoints").glob("step_*.msgpack"))[-1], template
    )
    (done_a, state_a), (done_b, state_b) = newest(run_a), newest(run_b)
    assert done_a == done_b == algo.num_iterations and tree_equal(state_a, state_b)
    evaluations = [json.loads((d / "eval.json").read_text()) for d in (run_a, run_b)]
    assert evaluations[0] == evaluations[1] and evaluations[0]["lengths"] == [1000, 1000]
    if video:
        page = (run_a / "videos" / "eval.html").read_text()  # Brax's viewer, the scene zlib'd in base64
        scene = re.search(r'var system = "([^"]+)"', page).group(1)
        scene = json.loads(zlib.decompress(base64.b64decode(scene)))
        assert scene["link_names"] == ["cart", "pole_1"] and len(scene["states"]["x"]) == 1000  # an episode
