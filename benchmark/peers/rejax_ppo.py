"""rejax PPO with vibe_rl's PPO flags, for `python -m benchmark --peers`.

    pip install rejax==0.1.3 "gymnax<1.0"    # its own venv: set VIBE_RL_REJAX_PYTHON
    python benchmark/peers/rejax_ppo.py --env-id CartPole-v1 --total-timesteps 100000

rejax 0.1.3 needs gymnax < 1.0 (gymnax 1.0's env.step returns 6 values). Matched to
ppo_jax_scan: num_envs, num_steps, epochs, minibatches, lr, clip, ent/vf coefficients,
gamma, GAE lambda, grad clipping, 64-64 tanh networks; rejax does not anneal the learning
rate. rejax's train() is one jitted program (its evaluation only at the end); compile time
is printed apart, as vibe_rl's scripts do. Then a deterministic (greedy) evaluation,
written to {output_dir}/{env_id}__rejax_ppo__{seed}__{time}/eval.json.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
from common import parse_ppo_args, write_run
from rejax import PPO
from rejax.evaluate import evaluate


def main() -> None:
    args = parse_ppo_args(__doc__.splitlines()[0])
    algo = PPO.create(
        env=args.env_id,
        num_envs=args.num_envs,
        num_steps=args.num_steps,
        num_epochs=args.update_epochs,
        num_minibatches=args.num_minibatches,
        learning_rate=args.learning_rate,
        max_grad_norm=args.max_grad_norm,
        total_timesteps=args.total_timesteps,
        eval_freq=args.total_timesteps,  # one evaluation, at the end
        skip_initial_evaluation=True,
        gamma=args.gamma,
        gae_lambda=args.gae_lambda,
        clip_eps=args.clip_coef,
        ent_coef=args.ent_coef,
        vf_coef=args.vf_coef,
        agent_kwargs={"activation": "tanh"},
    )
    key = jax.random.PRNGKey(args.seed)
    start = time.perf_counter()
    train = jax.jit(algo.train).lower(key).compile()
    print(f"compiled rejax PPO train in {time.perf_counter() - start:.1f}s")
    start = time.perf_counter()
    state, _ = jax.block_until_ready(train(key))
    print(f"trained {args.total_timesteps} steps in {time.perf_counter() - start:.1f}s")

    def greedy(obs: jax.Array, _key: jax.Array) -> jax.Array:
        dist = algo.actor.apply(state.actor_ts.params, obs[None], method="_action_dist")
        return jnp.squeeze(dist.mode())

    lengths, returns = evaluate(
        greedy, jax.random.PRNGKey(10_000 + args.seed), algo.env, algo.env_params, args.eval_episodes
    )
    write_run(args, args.exp_name or "rejax_ppo", returns.tolist(), lengths.tolist())


if __name__ == "__main__":
    main()
