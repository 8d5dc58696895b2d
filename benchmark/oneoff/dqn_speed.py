"""Speed of vibe_rl/dqn_jax.py on CartPole-v1 with CleanRL's config, and where
the time goes: acting + env stepping, replay-buffer insert, replay-buffer sample, gradient
updates. CleanRL's plain DQN and lr 2.5e-4 are pinned (CLEANRL below): dqn_jax's defaults now
differ there (Double DQN, 1e-4; docs/dqn_jax.md, "Defaults"), and Double DQN costs one more
forward pass per gradient step.

    python -m benchmark.oneoff.dqn_speed                 # CleanRL's config, 1 env
    python -m benchmark.oneoff.dqn_speed --num-envs 8 --train-frequency 80 --target-network-frequency 480
    python -m benchmark.oneoff.dqn_speed --chunk-overhead                      # also the chunking cost
    python -m benchmark.oneoff.dqn_speed --steps 2000 --repeats 1 --chunk-overhead \\
        --chunk-timesteps 20000 --chunk-repeats 1                       # a smoke test, seconds

Every figure is the best of --repeats timed calls (after one compiling call) of one compiled
lax.scan, all taken side by side in this one process, so their ratios hold even on a busy
machine where the absolute numbers do not. The pieces, each a scan over --steps DQN steps:

  full      dqn_jax.step at steady state (past learning_starts, buffer full): what training runs
  act_env   Q-network forward, epsilon-greedy, the envs' step (no buffer, no learning)
  insert    act_env + buffer_add (the difference is the insert)
  sample    buffer_sample alone, once per gradient step
  update    dqn_jax.gradient_step (sample + loss + gradient + Adam), once per gradient step
            (minus sample = the update)

With --chunk-overhead, the whole training at CleanRL's config three ways (best of --chunk-repeats):

  single    jit(vmap(make_train(args))): the whole training as one program
  one_chunk the harness's run_chunk with all iterations in one call (its lax.cond per iteration, no
            host trips)
  chunked   run_chunk once per chunk of plan_chunks(num_iterations, --num-chunks), each followed by a host
            copy of the state, the non-finite check and save_checkpoint, in this thread (no logging): the
            driver before it wrote in a thread and checkpointed at --checkpoint-frequency (its cost now:
            benchmark.oneoff.driver_overhead)
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import tempfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from benchmark.ceiling import best_time, ceiling_sps
from vibe_rl import dqn_jax

# CleanRL dqn_jax.py's values where dqn_jax's defaults differ
CLEANRL = {"double_dqn": False, "learning_rate": 2.5e-4}


def measure(
    num_envs: int, train_frequency: int, target_network_frequency: int, num_steps: int, repeats: int
) -> dict:
    args = dqn_jax.Flags(
        num_envs=num_envs,
        train_frequency=train_frequency,
        target_network_frequency=target_network_frequency,
        **CLEANRL,
    )
    setup = dqn_jax.build_setup(args)  # validates the flags
    spec, obs_dtype = setup.spec, setup.obs_dtype
    step = functools.partial(dqn_jax.step, setup)

    # A steady state: the buffer full, learning on (global step past learning_starts).
    warm_steps = max(args.learning_starts, args.buffer_size) // num_envs + 1
    state = jax.jit(functools.partial(dqn_jax.init_state, setup))(jax.random.PRNGKey(0))
    state, _ = jax.jit(lambda s: jax.lax.scan(step, s, jnp.arange(warm_steps)))(state)
    state = jax.block_until_ready(state)
    start = warm_steps

    @jax.jit
    def full(s):
        return jax.lax.scan(step, s, start + jnp.arange(num_steps))[0].params

    def act_env_step(s: dqn_jax.RunnerState, index: jax.Array, with_insert: bool) -> dqn_jax.RunnerState:
        """dqn_jax.step's acting half, as it is written there, without the learning half."""
        key, action_key, env_key = jax.random.split(s.key, 3)
        exploration_steps = args.exploration_fraction * args.total_timesteps
        epsilon = dqn_jax.linear_schedule(args.start_e, args.end_e, exploration_steps, index * num_envs)
        action = dqn_jax.epsilon_greedy(action_key, setup.network.apply(s.params, s.obs), epsilon)
        env_step = dqn_jax.step_envs(spec, jax.random.split(env_key, num_envs), s.env_state, action)
        buffer = s.buffer
        if with_insert:
            final_obs = env_step.final_obs.astype(obs_dtype)
            buffer = dqn_jax.buffer_add(
                buffer, dqn_jax.Transition(s.obs, action, env_step.reward, env_step.terminated, final_obs)
            )
        return s._replace(
            env_state=env_step.state, obs=env_step.obs.astype(obs_dtype), buffer=buffer, key=key
        )

    def act_env_scan(s: dqn_jax.RunnerState, with_insert: bool) -> dqn_jax.RunnerState:
        body = lambda c, index: (act_env_step(c, index, with_insert), None)
        return jax.lax.scan(body, s, start + jnp.arange(num_steps))[0]

    @jax.jit
    def act_env(s):
        return act_env_scan(s, False).obs

    @jax.jit
    def insert(s):
        data = act_env_scan(s, True).buffer.data
        return data.obs.sum() + data.reward.sum()  # depends on every insert: nothing is elided

    num_updates = num_steps * num_envs // train_frequency

    @jax.jit
    def sample(s):
        def body(total, key):
            batch = dqn_jax.buffer_sample(s.buffer, key, args.batch_size)
            return total + batch.obs.sum() + batch.reward.sum(), None

        keys = jax.random.split(s.key, num_updates)
        return jax.lax.scan(body, jnp.asarray(0.0), keys)[0]

    @jax.jit
    def update(s):
        def body(carry, key):  # the buffer and target stay closed over: only what changes is carried
            params, opt_state = carry
            learned, _, _ = dqn_jax.gradient_step(setup, s._replace(params=params, opt_state=opt_state), key)
            return (learned.params, learned.opt_state), None

        keys = jax.random.split(s.key, num_updates)
        return jax.lax.scan(body, (s.params, s.opt_state), keys)[0][0]

    pieces = [
        ("full", full),
        ("act_env", act_env),
        ("insert", insert),
        ("sample", sample),
        ("update", update),
    ]
    times = {name: best_time(lambda f=f: f(state), repeats) for name, f in pieces}
    steps = num_steps * num_envs
    parts = {
        "act_env": times["act_env"],
        "buffer_insert": max(times["insert"] - times["act_env"], 0.0),
        "buffer_sample": times["sample"],
        "gradient_update": max(times["update"] - times["sample"], 0.0),
    }
    parts["other (cond, target update, bookkeeping)"] = max(times["full"] - sum(parts.values()), 0.0)
    shown = ("env_id", "num_envs", "batch_size", "buffer_size", "train_frequency", "target_network_frequency")
    return {
        "config": {k: v for k, v in dataclasses.asdict(args).items() if k in shown},
        "repeats": repeats,
        "env_steps_timed": steps,
        "gradient_steps_timed": num_updates,
        "sps_full": steps / times["full"],
        "ceiling_sps_random_actions": ceiling_sps(args.env_id, num_envs, num_steps, repeats),
        "seconds": times,
        "fraction_of_full": {k: v / times["full"] for k, v in parts.items()},
    }


def chunk_overhead(total_timesteps: int, num_chunks: int, repeats: int) -> dict:
    """The CLI's chunked run (one compiled call per chunk, each followed by a checkpoint write)
    against the single program train(key), one seed, CleanRL's config otherwise."""
    args = dqn_jax.Flags(total_timesteps=total_timesteps, num_chunks=num_chunks, **CLEANRL)
    algo = dqn_jax.make_algorithm(args)  # validates the flags
    iterations_per_chunk, chunks = dqn_jax.plan_chunks(algo.num_iterations, args.num_chunks)
    keys = jax.random.PRNGKey(0)[None]  # [S = 1]: a seed axis, as the CLI vmaps over the seeds
    init = jax.jit(jax.vmap(algo.init))
    train = jax.jit(jax.vmap(dqn_jax.make_train(args)))

    def compiled_chunk(iterations: int):  # jit(vmap(run_chunk)), as the harness's compile_chunk builds it
        return jax.jit(jax.vmap(functools.partial(dqn_jax.run_chunk, algo, iterations), in_axes=(0, None)))

    chunk, whole = compiled_chunk(iterations_per_chunk), compiled_chunk(algo.num_iterations)
    run_dir = Path(tempfile.mkdtemp(prefix="dqn_speed_"))

    def chunked():  # the earlier driver's work between chunks, without the logging
        state = init(keys)
        for index in range(chunks):
            first = index * iterations_per_chunk
            done = min(first + iterations_per_chunk, algo.num_iterations)
            state, metrics = chunk(state, np.int32(first))
            host_state, _ = jax.device_get((state, metrics))
            if not all(np.isfinite(x).all() for x in jax.tree.leaves(algo.model(host_state))):
                raise RuntimeError(f"non-finite parameters after chunk {index}")
            seed_state = jax.tree.map(lambda x: x[0], host_state)
            dqn_jax.save_checkpoint(run_dir, done, done * algo.env_steps_per_iteration, seed_state)
        return state.params

    single = best_time(lambda: train(keys)[0].params, repeats)
    one_chunk = best_time(lambda: whole(init(keys), np.int32(0))[0].params, repeats)
    chunked_s = best_time(chunked, repeats)
    return {
        "env_steps": algo.num_iterations * algo.env_steps_per_iteration,
        "num_chunks": chunks,
        "iterations_per_chunk": iterations_per_chunk,
        "repeats": repeats,
        "single_program_s": single,
        "one_chunk_s": one_chunk,
        "chunked_s": chunked_s,
        "overhead_fraction": chunked_s / single - 1,
        "one_chunk_overhead_fraction": one_chunk / single - 1,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--num-envs", type=int, default=1)
    parser.add_argument("--train-frequency", type=int, default=10)
    parser.add_argument("--target-network-frequency", type=int, default=500)
    parser.add_argument("--steps", type=int, default=20_000, help="DQN steps (of all envs) per timed call")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per piece (the best counts)")
    parser.add_argument("--chunk-overhead", action="store_true", help="also time chunked vs single program")
    parser.add_argument("--chunk-timesteps", type=int, default=500_000, help="env steps of the chunked run")
    parser.add_argument("--num-chunks", type=int, default=10, help="the chunked run's --num-chunks")
    parser.add_argument("--chunk-repeats", type=int, default=2, help="timed runs per way (the best counts)")
    options = parser.parse_args()
    result = measure(
        options.num_envs,
        options.train_frequency,
        options.target_network_frequency,
        options.steps,
        options.repeats,
    )
    if options.chunk_overhead:
        result["chunking"] = chunk_overhead(
            options.chunk_timesteps, options.num_chunks, options.chunk_repeats
        )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
