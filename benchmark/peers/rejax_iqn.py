"""rejax IQN at rejax's own CartPole-v1 config (IQN.train as one jit), for the speed report.

    /work/peers-venv/bin/python benchmark/peers/rejax_iqn.py                 # 100k CartPole steps
    ... --total-timesteps 20000 --repeats 3 --num-seeds 8   # best of 3 calls, 8 seeds in one vmap

rejax 0.1.3 needs gymnax < 1.0 (gymnax 1.0's env.step returns 6 values): run it in the peers
venv. rejax is a PyPI package, used as installed. Its configs are not part of the package:
REJAX_CONFIG below is the `iqn:` section of configs/gymnax/cartpole.yaml in rejax's repository
at tag v0.1.3 (commit 4587115ef2462f60219b8c65efdd6f7f3e027968), the values as they are there.
A flag given (spelled as vibe_rl/iqn_jax.py's, in iqn_jax's units) overrides its value; every
value set is printed. Without flags the config is rejax's.

rejax's config in iqn_jax's flags (benchmark/speed.py, `--only iqn`, runs ours with these):

    rejax (cartpole.yaml)          iqn_jax
    total_timesteps 100_000        --total-timesteps 100000
    num_envs 1, num_epochs 1       --num-envs 1 --train-frequency 1 (a gradient step per env step)
    buffer_size 100_000            --buffer-size 100000
    fill_buffer 1000               --learning-starts 1000
    batch_size 1                   --batch-size 1 ("the original paper had no minibatches")
    num_tau_samples 64             --num-tau-samples 64
    num_tau_prime_samples 64       --num-tau-prime-samples 64
    (32, fixed in its network's q) --num-quantile-samples 32
    (64: its last hidden width)    --quantile-embedding-dim 64
    learning_rate 0.0003           --learning-rate 0.0003
    target_update_freq 1           --target-network-frequency 1
    polyak 0.99                    --target-update-rate 0.01 (= 1 - polyak)
    kappa 1.0                      --kappa 1.0
    eps_start 1, eps_end 0.01      --start-e 1 --end-e 0.01
    exploration_fraction 0.5       --exploration-fraction 0.5
    gamma 0.99                     --gamma 0.99

What still differs (rejax's config or code; iqn_jax has no flag for them):
- the network: rejax's psi is an MLP 64-64 with swish (the config's agent_kwargs), its phi a
  Dense(64) of the 64 cosines (i = 0 .. 63, as ours), then Dense(64) swish and Dense(A) after the
  product; iqn_jax's psi is the MLP 120-84 ReLU, phi a Dense(84), the head one Dense(A) after the
  product. Per fraction rejax computes 64 x 64 + 64 x 64 + 64 x A multiply-adds, iqn_jax
  64 x 84 + 84 x A (the torso runs once per observation in both).
- rejax draws uniform random actions until fill_buffer (a lax.cond around the network);
  iqn_jax is epsilon-greedy from the first step (epsilon near 1 then).
- rejax computes the target quantiles and picks the next action with the online network (its
  target parameters are Polyak-averaged every step but never read by its loss); iqn_jax takes
  both from the target network (--double-dqn: the action from the online one).
- rejax samples the replay buffer without replacement through jax.random.choice(replace=False,
  p=...) over the whole buffer of 100k rows at every gradient step; iqn_jax with replacement
  (randint over the filled rows).
- rejax's Adam has optax's eps 1e-8 behind optax.clip(inf); iqn_jax's eps is 0.01 / batch_size.
- rejax stores `done` (termination or time limit) and does not bootstrap at CartPole's time
  limit; iqn_jax bootstraps from the real next observation there.
- rejax's eval_callback (128 episodes every eval_freq = 5000 steps, inside train()) is replaced by
  a no-op with eval_freq = total_timesteps and no initial evaluation, as in rejax_td3.py, so the
  timed call is training only. (rejax's IQN logs no training return; none is printed.)

Then a greedy evaluation of each seed (the mean of rejax's own 32 sampled quantiles, from a fixed
key, epsilon 0), written to {output_dir}/{env_id}__rejax_iqn__{seed}__{time}/eval.json.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
from common import (
    add_speed_flags,
    check_speed_flags,
    compile_train,
    make_greedy_eval,
    seed_keys,
    seed_slice,
    time_train,
    write_evaluated_run,
)
from rejax import IQN

PEER = "rejax_iqn"

# configs/gymnax/cartpole.yaml, section iqn, rejax v0.1.3 (see the docstring).
REJAX_CONFIG = {
    "env": "CartPole-v1",
    "agent_kwargs": {"activation": "swish"},
    "num_envs": 1,
    "buffer_size": 100_000,
    "fill_buffer": 1000,
    "batch_size": 1,
    "num_tau_samples": 64,
    "num_tau_prime_samples": 64,
    "learning_rate": 0.0003,
    "num_epochs": 1,
    "total_timesteps": 100_000,
    "eval_freq": 5000,
    "target_update_freq": 1,
    "polyak": 0.99,
    "kappa": 1.0,
    "eps_start": 1,
    "eps_end": 0.01,
    "exploration_fraction": 0.5,
    "gamma": 0.99,
    "normalize_observations": False,
}

# iqn_jax flag -> (rejax key, rejax value from iqn_jax's value).
FLAG_TO_CONFIG = {
    "total_timesteps": ("total_timesteps", int),
    "num_envs": ("num_envs", int),
    "buffer_size": ("buffer_size", int),
    "learning_starts": ("fill_buffer", int),
    "batch_size": ("batch_size", int),
    "num_tau_samples": ("num_tau_samples", int),
    "num_tau_prime_samples": ("num_tau_prime_samples", int),
    "learning_rate": ("learning_rate", float),
    "target_network_frequency": ("target_update_freq", int),
    "target_update_rate": ("polyak", lambda x: 1.0 - x),
    "kappa": ("kappa", float),
    "start_e": ("eps_start", float),
    "end_e": ("eps_end", float),
    "exploration_fraction": ("exploration_fraction", float),
    "gamma": ("gamma", float),
}
INT_FLAGS = {"total_timesteps", "num_envs", "buffer_size", "learning_starts", "batch_size"}
INT_FLAGS |= {"num_tau_samples", "num_tau_prime_samples", "target_network_frequency"}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    for flag in FLAG_TO_CONFIG:
        kind = int if flag in INT_FLAGS else float
        parser.add_argument(f"--{flag.replace('_', '-')}", type=kind, default=None, help="default: rejax's")
    parser.add_argument("--eval-episodes", type=int, default=32)
    parser.add_argument("--output-dir", type=str, default="runs")
    parser.add_argument("--exp-name", type=str, default="")
    add_speed_flags(parser)
    return check_speed_flags(parser, parser.parse_args())


def no_evaluation(algo: IQN, ts: object, key: jax.Array) -> jax.Array:
    """Stands in for rejax's eval_callback, which would run 128 episodes inside train()."""
    return jnp.zeros(())


def main() -> None:
    args = parse_args()
    config, changed = dict(REJAX_CONFIG), []
    for flag, (key, convert) in FLAG_TO_CONFIG.items():
        if getattr(args, flag) is not None:
            config[key] = convert(getattr(args, flag))
            if config[key] != REJAX_CONFIG[key]:
                changed.append(f"{key}={config[key]!r} (rejax: {REJAX_CONFIG[key]!r})")
    # The evaluation callback is replaced by a no-op, called once, at the end.
    config |= {"eval_freq": config["total_timesteps"], "skip_initial_evaluation": True}
    changed.append(f"eval_freq={config['eval_freq']} (rejax: {REJAX_CONFIG['eval_freq']}, callback off)")
    print(f"{PEER} config: rejax's CartPole-v1 IQN config, runner sets: " + ", ".join(changed))
    args.env_id, args.total_timesteps = config["env"], config["total_timesteps"]  # for the run directory

    algo = IQN.create(**config).replace(eval_callback=no_evaluation)
    # rejax runs ceil(eval_freq / num_envs) train iterations of one step of all envs (one eval block,
    # eval_freq = total_timesteps): whole iterations, rounded up.
    steps = -(-config["total_timesteps"] // config["num_envs"]) * config["num_envs"]
    if steps != config["total_timesteps"]:
        print(f"note: rejax trains {steps} steps (whole iterations of {config['num_envs']})")

    keys = seed_keys(args.seed, args.num_seeds)
    compiled = compile_train(PEER, algo.train, args.num_seeds, keys)
    states, _ = time_train(compiled, keys, args.repeats, steps * args.num_seeds)

    def greedy(ts: object, obs: jax.Array) -> jax.Array:
        """The mean of rejax's 32 sampled quantiles (its network's q), from a fixed key; epsilon 0."""
        q = algo.agent.apply(ts.q_ts.params, obs[None], jax.random.PRNGKey(0), method="q")  # [1, A]
        return jnp.argmax(q[0])

    evaluate = make_greedy_eval(greedy, algo.env, algo.env_params, args.eval_episodes)
    for i in range(args.num_seeds):
        seed = args.seed + i
        state = seed_slice(states, args.num_seeds, i)
        write_evaluated_run(args, PEER, evaluate, state, seed, {"peer_config": config})


if __name__ == "__main__":
    main()
