"""Speed of vibe_rl/dqn_jax.py on CartPole-v1 with the default (CleanRL) config, and where
the time goes: acting + env stepping, replay-buffer insert, replay-buffer sample, gradient
updates.

    python -m benchmark.dqn_speed                 # default config, 1 env
    python -m benchmark.dqn_speed --num-envs 8 --train-frequency 80 --target-network-frequency 480

Every figure is the best of a few timed repeats of one compiled lax.scan, all taken side
by side in this one process, so their ratios hold even on a busy machine where the
absolute numbers do not. The pieces, each a scan over the same number of scan steps:

  full      dqn.build_dqn(...).step at steady state (past learning_starts): what training runs
  act_env   Q-network forward, epsilon-greedy, env.step (no buffer, no learning)
  insert    act_env + buffer_add (the difference is the insert)
  sample    buffer_sample alone, once per gradient step
  update    buffer_sample + loss + gradient + Adam, once per gradient step (minus sample = update)
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

from benchmark.ceiling import best_time, ceiling_sps

ROOT = Path(__file__).resolve().parents[1]


def load_dqn():
    spec = importlib.util.spec_from_file_location("dqn_jax", ROOT / "vibe_rl" / "dqn_jax.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["dqn_jax"] = module
    spec.loader.exec_module(module)
    return module


def measure(num_envs: int, train_frequency: int, target_network_frequency: int, iterations: int) -> dict:
    dqn = load_dqn()
    args = dqn.validate_args(
        dqn.Args(
            num_envs=num_envs,
            train_frequency=train_frequency,
            target_network_frequency=target_network_frequency,
        )
    )
    spec = dqn.make_env(args.env_id)
    env, env_params = spec.env, spec.env_params
    network = dqn.make_q_network(args, spec)
    program = dqn.build_dqn(args, spec)

    # A steady state: the buffer full, learning on (global step past learning_starts).
    warm_iterations = args.learning_starts // num_envs + 1
    state = jax.jit(program.init)(jax.random.PRNGKey(0))
    state, _ = jax.jit(lambda s: jax.lax.scan(program.step, s, jnp.arange(warm_iterations)))(state)
    state = jax.block_until_ready(state)
    start = warm_iterations

    @jax.jit
    def full(s):
        return jax.lax.scan(program.step, s, start + jnp.arange(iterations))[0].params

    step_envs = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def act_env_step(carry, with_insert: bool):
        s = carry
        key, action_key, env_key = jax.random.split(s.key, 3)
        q = network.apply(s.params, s.obs)
        action = dqn.epsilon_greedy(action_key, q, jnp.asarray(0.05))
        obs, env_state, reward, terminated, _, info = step_envs(
            jax.random.split(env_key, num_envs), s.env_state, action, env_params
        )
        buffer = s.buffer
        if with_insert:
            transition = dqn.Transition(s.obs, action, reward, terminated, info["final_observation"])
            buffer = dqn.buffer_add(buffer, transition)
        return s._replace(env_state=env_state, obs=obs, buffer=buffer, key=key), None

    @jax.jit
    def act_env(s):
        return jax.lax.scan(lambda c, _: act_env_step(c, False), s, None, iterations)[0].obs

    @jax.jit
    def insert(s):
        buffer = jax.lax.scan(lambda c, _: act_env_step(c, True), s, None, iterations)[0].buffer
        return buffer.obs.sum() + buffer.reward.sum()  # depends on every insert: nothing is elided

    num_updates = iterations * num_envs // train_frequency

    @jax.jit
    def sample(s):
        def body(total, key):
            batch = dqn.buffer_sample(s.buffer, key, args.batch_size)
            return total + batch.obs.sum() + batch.reward.sum(), None

        keys = jax.random.split(s.key, num_updates)
        return jax.lax.scan(body, jnp.asarray(0.0), keys)[0]

    tx = dqn.optax.adam(args.learning_rate)

    @jax.jit
    def update(s):
        def loss_fn(params, batch):
            next_q = network.apply(s.target_params, batch.next_obs)
            target = dqn.td_target(batch.reward, batch.terminated, next_q, next_q, args.gamma, False)
            q = network.apply(params, batch.obs)
            q_pred = jnp.take_along_axis(q, batch.action[:, None], axis=-1)[:, 0]
            return dqn.td_loss(q_pred, jax.lax.stop_gradient(target), args.loss)

        def body(carry, key):
            params, opt_state = carry
            batch = dqn.buffer_sample(s.buffer, key, args.batch_size)
            grads = jax.grad(loss_fn)(params, batch)
            updates, opt_state = tx.update(grads, opt_state, params)
            return (dqn.optax.apply_updates(params, updates), opt_state), None

        keys = jax.random.split(s.key, num_updates)
        return jax.lax.scan(body, (s.params, s.opt_state), keys)[0][0]

    times = {
        name: best_time(lambda f=f: f(state))
        for name, f in [
            ("full", full),
            ("act_env", act_env),
            ("insert", insert),
            ("sample", sample),
            ("update", update),
        ]
    }
    steps = iterations * num_envs
    parts = {
        "act_env": times["act_env"],
        "buffer_insert": max(times["insert"] - times["act_env"], 0.0),
        "buffer_sample": times["sample"],
        "gradient_update": max(times["update"] - times["sample"], 0.0),
    }
    parts["other (cond, target update, bookkeeping)"] = max(times["full"] - sum(parts.values()), 0.0)
    return {
        "config": {
            k: v
            for k, v in dataclasses.asdict(args).items()
            if k
            in (
                "env_id",
                "num_envs",
                "batch_size",
                "buffer_size",
                "train_frequency",
                "target_network_frequency",
            )
        },
        "env_steps_timed": steps,
        "gradient_steps_timed": num_updates,
        "sps_full": steps / times["full"],
        "ceiling_sps_random_actions": ceiling_sps(args.env_id, num_envs),
        "seconds": times,
        "fraction_of_full": {k: v / times["full"] for k, v in parts.items()},
    }


def chunk_overhead(total_timesteps: int = 500_000, num_chunks: int = 10) -> dict:
    """The CLI's chunked run (num_chunks compiled calls, each followed by a checkpoint
    write) against the single program train(key), default config otherwise."""
    import tempfile

    dqn = load_dqn()
    args = dqn.validate_args(dqn.Args(total_timesteps=total_timesteps, num_chunks=num_chunks))
    program = dqn.build_dqn(args, dqn.make_env(args.env_id))
    key = jax.random.PRNGKey(0)
    train = jax.jit(program.train)
    init = jax.jit(program.init)
    run_chunk = jax.jit(program.run_chunk)  # as the CLI compiles it
    run_dir = Path(tempfile.mkdtemp())

    def chunked():
        state = init(key)
        for chunk in range(args.num_chunks):
            state, metrics = run_chunk(state, jnp.asarray(chunk * args.blocks_per_chunk))
            jax.tree.map(lambda x: x.block_until_ready(), metrics)
            dqn.save_checkpoint(run_dir, jax.tree.map(jax.device_get, state))
        return state.params

    single = best_time(lambda: train(key)[0].params, repeats=2)
    chunks = best_time(chunked, repeats=2)
    return {"single_program_s": single, "chunked_s": chunks, "overhead_fraction": chunks / single - 1}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--num-envs", type=int, default=1)
    parser.add_argument("--train-frequency", type=int, default=10)
    parser.add_argument("--target-network-frequency", type=int, default=500)
    parser.add_argument("--iterations", type=int, default=20_000, help="scan steps per timed call")
    parser.add_argument("--chunk-overhead", action="store_true", help="also time chunked vs single program")
    options = parser.parse_args()
    result = measure(
        options.num_envs, options.train_frequency, options.target_network_frequency, options.iterations
    )
    if options.chunk_overhead:
        result["chunking"] = chunk_overhead()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
