"""Stable-Baselines3 PPO (PyTorch, CPU) with vibe_rl's PPO flags, for `python -m benchmark --peers`.

    pip install stable-baselines3 torch     # its own venv is fine: set VIBE_RL_SB3_PYTHON
    python benchmark/peers/sb3_ppo.py --env-id CartPole-v1 --total-timesteps 100000

The same network as ppo_jax_scan (separate 64-64 tanh actor and critic: SB3's MlpPolicy
default), n_steps = --num-steps per env, batch_size = num_envs * num_steps / num_minibatches,
the learning rate annealed linearly to 0. Then a deterministic evaluation, written to
{output_dir}/{env_id}__sb3_ppo__{seed}__{time}/eval.json.
"""

from __future__ import annotations

import time

import gymnasium as gym
import torch
from common import parse_ppo_args, write_run
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env


def evaluate(model: PPO, env_id: str, episodes: int, seed: int) -> tuple[list[float], list[int]]:
    """Deterministic (greedy) episodes, one after another."""
    env = gym.make(env_id)
    returns, lengths = [], []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        done, total, length = False, 0.0, 0
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total, length, done = total + float(reward), length + 1, terminated or truncated
        returns.append(total)
        lengths.append(length)
    return returns, lengths


def main() -> None:
    args = parse_ppo_args(__doc__.splitlines()[0])
    torch.set_num_threads(1)  # small networks: threads cost more than they give
    envs = make_vec_env(args.env_id, n_envs=args.num_envs, seed=args.seed)
    model = PPO(
        "MlpPolicy",
        envs,
        learning_rate=lambda remaining: args.learning_rate * remaining,  # annealed to 0
        n_steps=args.num_steps,
        batch_size=args.num_envs * args.num_steps // args.num_minibatches,
        n_epochs=args.update_epochs,
        gamma=args.gamma,
        gae_lambda=args.gae_lambda,
        clip_range=args.clip_coef,
        ent_coef=args.ent_coef,
        vf_coef=args.vf_coef,
        max_grad_norm=args.max_grad_norm,
        seed=args.seed,
        device="cpu",
    )
    start = time.perf_counter()
    model.learn(total_timesteps=args.total_timesteps)
    print(f"trained {args.total_timesteps} steps in {time.perf_counter() - start:.1f}s")
    returns, lengths = evaluate(model, args.env_id, args.eval_episodes, seed=10_000 + args.seed)
    write_run(args, args.exp_name or "sb3_ppo", returns, lengths)


if __name__ == "__main__":
    main()
