"""rejax TD3 at rejax's own Pendulum-v1 config (TD3.train as one jit), for the speed report.

    /work/peers-venv/bin/python benchmark/peers/rejax_td3.py                 # 10k Pendulum steps
    ... --total-timesteps 2000 --repeats 3 --num-seeds 8    # best of 3 calls, 8 seeds in one vmap

rejax 0.1.3 needs gymnax < 1.0 (gymnax 1.0's env.step returns 6 values): run it in the peers
venv. rejax is a PyPI package, used as installed. Its configs are not part of the package:
REJAX_CONFIG below is the `td3:` section of configs/gymnax/pendulum.yaml in rejax's repository
at tag v0.1.3 (commit 4587115ef2462f60219b8c65efdd6f7f3e027968), the values as they are there.
A flag given (spelled as vibe_rl/td3_jax.py's, in td3_jax's units) overrides its value; every
value set is printed. Without flags the config is rejax's.

rejax's config in td3_jax's flags (benchmark/speed.py, `--only td3`, runs ours with these):

    rejax (pendulum.yaml)          td3_jax
    total_timesteps 10_000         --total-timesteps 10000
    num_envs 1, num_epochs 1       --num-envs 1 (one gradient step per env step)
    buffer_size 10_000             --buffer-size 10000
    fill_buffer 1000               --learning-starts 1000 (uniform random actions until then)
    batch_size 100                 --batch-size 100
    learning_rate 0.001            --learning-rate 0.001 (Adam, actor and critics)
    gamma 0.99                     --gamma 0.99
    polyak 0.95                    --tau 0.05 (= 1 - polyak)
    policy_delay 2                 --policy-frequency 2
    exploration_noise 0.3          --exploration-noise 0.15  (rejax: in action units; td3_jax:
    target_noise 0.2               --policy-noise 0.1         in half the action range, which
    target_noise_clip 0.5          --noise-clip 0.25          is 2 on Pendulum's [-2, 2])
    64-64 hidden layers (fixed)    --hidden-size 64

What still differs (rejax's config or code; td3_jax has no flag for them):
- rejax: `normalize_observations: true` (a running mean/variance of the observations, updated
  every step, normalises what the networks read); td3_jax reads the raw observations.
- rejax: swish activations (the config's actor_kwargs / critic_kwargs); td3_jax: ReLU.
- rejax: `max_grad_norm: 100` is optax.clip, each gradient element clipped to +-100 (rejax's
  TD3 uses it so); td3_jax does not clip.
- rejax's critic loss is optax.l2_loss, half the squared error (td3_jax: the squared error), and
  its actor ascends the mean of both critics (td3_jax: the first critic, as the paper).
- rejax samples the replay buffer without replacement (jax.random.choice with replace=False
  over the whole buffer); td3_jax with replacement (randint over the filled rows).
- rejax updates the target networks every policy_delay env steps from the start, td3_jax with
  each actor step (after learning_starts); rejax takes its first gradient step one env step
  later (global_step > fill_buffer, td3_jax: >= learning_starts).
- rejax stores `done` (termination or time limit) and does not bootstrap at Pendulum's time
  limit; td3_jax bootstraps from the real next observation there.
- rejax's eval_callback (128 episodes every eval_freq = 100 steps, inside train()) is replaced by
  a no-op with eval_freq = total_timesteps and no initial evaluation, as in rejax_ppo.py, so
  the timed call is training only. (rejax's TD3 logs no training return; none is printed.)

Then a greedy evaluation of each seed (rejax's own act: the actor on normalised observations,
no noise), written to {output_dir}/{env_id}__rejax_td3__{seed}__{time}/eval.json.
"""

from __future__ import annotations

import argparse

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
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
from rejax import TD3

PEER = "rejax_td3"

# configs/gymnax/pendulum.yaml, section td3, rejax v0.1.3 (see the docstring).
REJAX_CONFIG = {
    "env": "Pendulum-v1",
    "actor_kwargs": {"activation": "swish"},
    "critic_kwargs": {"activation": "swish"},
    "num_envs": 1,
    "buffer_size": 10_000,
    "fill_buffer": 1000,
    "batch_size": 100,
    "learning_rate": 0.001,
    "num_epochs": 1,
    "total_timesteps": 10_000,
    "eval_freq": 100,
    "gamma": 0.99,
    "polyak": 0.95,
    "max_grad_norm": 100,
    "exploration_noise": 0.3,
    "target_noise": 0.2,
    "target_noise_clip": 0.5,
    "policy_delay": 2,
    "normalize_observations": True,
}

# td3_jax flag -> (rejax key, rejax value from td3_jax's value, given the half action range).
FLAG_TO_CONFIG = {
    "total_timesteps": ("total_timesteps", lambda x, half: int(x)),
    "num_envs": ("num_envs", lambda x, half: int(x)),
    "learning_rate": ("learning_rate", lambda x, half: x),
    "buffer_size": ("buffer_size", lambda x, half: int(x)),
    "batch_size": ("batch_size", lambda x, half: int(x)),
    "gamma": ("gamma", lambda x, half: x),
    "tau": ("polyak", lambda x, half: 1.0 - x),
    "learning_starts": ("fill_buffer", lambda x, half: int(x)),
    "policy_frequency": ("policy_delay", lambda x, half: int(x)),
    "exploration_noise": ("exploration_noise", lambda x, half: x * half),
    "policy_noise": ("target_noise", lambda x, half: x * half),
    "noise_clip": ("target_noise_clip", lambda x, half: x * half),
}
FLAG_TYPES = {"total_timesteps": int, "num_envs": int, "buffer_size": int, "batch_size": int}
FLAG_TYPES |= {"learning_starts": int, "policy_frequency": int}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1)
    for flag in FLAG_TO_CONFIG:
        kind = FLAG_TYPES.get(flag, float)
        parser.add_argument(f"--{flag.replace('_', '-')}", type=kind, default=None, help="default: rejax's")
    parser.add_argument("--eval-episodes", type=int, default=32)
    parser.add_argument("--output-dir", type=str, default="runs")
    parser.add_argument("--exp-name", type=str, default="")
    add_speed_flags(parser)
    return check_speed_flags(parser, parser.parse_args())


def half_action_range(env_id: str) -> float:
    """td3_jax's noise unit: half the width of the action box (one value for every dimension)."""
    env, env_params = gymnax.make(env_id)
    space = env.action_space(env_params)
    half = np.broadcast_to((np.asarray(space.high) - np.asarray(space.low)) / 2.0, space.shape)
    if not np.allclose(half, half.flat[0]):
        raise RuntimeError(
            f"{env_id}: the action dimensions have different ranges; rejax's noise is one scalar"
        )
    return float(half.flat[0])


def no_evaluation(algo: TD3, ts: object, key: jax.Array) -> jax.Array:
    """Stands in for rejax's eval_callback, which would run 128 episodes inside train()."""
    return jnp.zeros(())


def main() -> None:
    args = parse_args()
    half = half_action_range(REJAX_CONFIG["env"])
    config, changed = dict(REJAX_CONFIG), []
    for flag, (key, convert) in FLAG_TO_CONFIG.items():
        if getattr(args, flag) is not None:
            config[key] = convert(getattr(args, flag), half)
            if config[key] != REJAX_CONFIG[key]:
                changed.append(f"{key}={config[key]!r} (rejax: {REJAX_CONFIG[key]!r})")
    # The evaluation callback is replaced by a no-op, called once, at the end.
    config |= {"eval_freq": config["total_timesteps"], "skip_initial_evaluation": True}
    changed.append(f"eval_freq={config['eval_freq']} (rejax: {REJAX_CONFIG['eval_freq']}, callback off)")
    print(f"{PEER} config: rejax's Pendulum-v1 TD3 config, runner sets: " + ", ".join(changed))
    args.env_id, args.total_timesteps = config["env"], config["total_timesteps"]  # for the run directory

    algo = TD3.create(**config).replace(eval_callback=no_evaluation)
    # rejax runs ceil(eval_freq / (num_envs * policy_delay)) train iterations of policy_delay env
    # steps of all envs (one eval block, eval_freq = total_timesteps): whole iterations, rounded up.
    per_iteration = config["num_envs"] * config["policy_delay"]
    steps = -(-config["total_timesteps"] // per_iteration) * per_iteration
    if steps != config["total_timesteps"]:
        print(f"note: rejax trains {steps} steps (whole iterations of {per_iteration})")

    keys = seed_keys(args.seed, args.num_seeds)
    compiled = compile_train(PEER, algo.train, args.num_seeds, keys)
    states, _ = time_train(compiled, keys, args.repeats, steps * args.num_seeds)

    def greedy(ts: object, obs: jax.Array) -> jax.Array:
        return algo.make_act(ts)(obs, None)  # rejax's own act: normalised obs, no exploration noise

    evaluate = make_greedy_eval(greedy, algo.env, algo.env_params, args.eval_episodes)
    for i in range(args.num_seeds):
        seed = args.seed + i
        state = seed_slice(states, args.num_seeds, i)
        write_evaluated_run(args, PEER, evaluate, state, seed, {"peer_config": config})


if __name__ == "__main__":
    main()
