"""rejax PPO with vibe_rl's PPO flags, for `python -m benchmark --peers` and the speed report.

    pip install rejax==0.1.3 "gymnax<1.0"    # its own venv: set VIBE_RL_REJAX_PYTHON
    python benchmark/peers/rejax_ppo.py --env-id CartPole-v1 --total-timesteps 100000
    ... --repeats 3 --num-seeds 8             # best of 3 calls, 8 seeds in one vmap
    ... --learning-rates 1e-4,1e-3 --num-seeds 2   # a population: vmap(PPO.create) over the rates

rejax 0.1.3 needs gymnax < 1.0 (gymnax 1.0's env.step returns 6 values). Matched to
ppo_jax_scan: num_envs, num_steps, epochs, minibatches, lr, clip, ent/vf coefficients,
gamma, GAE lambda, grad clipping, 64-64 tanh networks; rejax does not anneal the learning
rate, and it trains whole iterations (ceil(total / (envs x steps))). rejax's train() is one
jitted program; its own evaluation callback (128 episodes at every eval_freq steps) is
replaced by a no-op, so the timed call is training only. Compile time is printed apart,
as vibe_rl's scripts do. Then a deterministic (greedy) evaluation of each seed, written to
{output_dir}/{env_id}__rejax_ppo__{seed}__{time}/eval.json.

With --learning-rates, rejax's own way to train a hyperparameter population: `jax.vmap(PPO.create)`
over the rates (its hyperparameters are pytree leaves), then `jit(vmap(vmap(PPO.train)))` over
rates x seeds; it is timed as above (N = env steps of every run) and not evaluated.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from common import (
    compile_train,
    make_greedy_eval,
    parse_ppo_args,
    seed_keys,
    seed_slice,
    time_train,
    write_evaluated_run,
)
from rejax import PPO

PEER = "rejax_ppo"


def no_evaluation(algo: PPO, ts: object, key: jax.Array) -> jax.Array:
    """Stands in for rejax's eval_callback, which would run 128 episodes inside train()."""
    return jnp.zeros(())


def create(args: object, learning_rate: float | jax.Array) -> PPO:
    """rejax's PPO at vibe_rl's flags, with this learning rate; training only (no evaluation)."""
    algo = PPO.create(
        env=args.env_id,
        num_envs=args.num_envs,
        num_steps=args.num_steps,
        num_epochs=args.update_epochs,
        num_minibatches=args.num_minibatches,
        learning_rate=learning_rate,
        max_grad_norm=args.max_grad_norm,
        total_timesteps=args.total_timesteps,
        eval_freq=args.total_timesteps,  # one evaluation call, at the end (a no-op, below)
        skip_initial_evaluation=True,
        gamma=args.gamma,
        gae_lambda=args.gae_lambda,
        clip_eps=args.clip_coef,
        ent_coef=args.ent_coef,
        vf_coef=args.vf_coef,
        agent_kwargs={"activation": "tanh"},
    )
    return algo.replace(eval_callback=no_evaluation)


def main() -> None:
    args = parse_ppo_args(__doc__.splitlines()[0], speed_flags=True, population=True)
    algo = create(args, args.learning_rate)
    iteration = args.num_envs * args.num_steps
    steps = -(-args.total_timesteps // iteration) * iteration  # rejax rounds up to whole iterations

    keys = seed_keys(args.seed, args.num_seeds)
    if args.learning_rates:  # a population of rates x the seeds, one program
        rates = jnp.array([float(rate) for rate in args.learning_rates.split(",")])
        algos = jax.vmap(lambda rate: create(args, rate))(rates)
        seeds = keys if args.num_seeds > 1 else keys[None]
        train = jax.vmap(jax.vmap(PPO.train, in_axes=(None, 0)), in_axes=(0, None))
        compiled = compile_train(PEER, lambda k: train(algos, k), 1, seeds)
        time_train(compiled, seeds, args.repeats, steps * args.num_seeds * len(rates))
        return
    compiled = compile_train(PEER, algo.train, args.num_seeds, keys)
    states, _ = time_train(compiled, keys, args.repeats, steps * args.num_seeds)

    def greedy(params: object, obs: jax.Array) -> jax.Array:
        dist = algo.actor.apply(params, obs[None], method="_action_dist")
        return jnp.squeeze(dist.mode())

    evaluate = make_greedy_eval(greedy, algo.env, algo.env_params, args.eval_episodes)
    for i in range(args.num_seeds):
        seed = args.seed + i
        state = seed_slice(states, args.num_seeds, i)
        write_evaluated_run(args, PEER, evaluate, state.actor_ts.params, seed)


if __name__ == "__main__":
    main()
