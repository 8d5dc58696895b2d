"""PureJaxRL's ppo.py (its make_train as one jit) with vibe_rl's PPO flags, for the speed report.

    export VIBE_RL_PUREJAXRL_DIR=/work/purejaxrl        # a PureJaxRL checkout (not on PyPI)
    /work/peers-venv/bin/python benchmark/peers/purejaxrl_ppo.py --total-timesteps 50000
    ... --repeats 3 --num-seeds 8                        # best of 3 calls, 8 seeds in one vmap

PureJaxRL is not vendored: purejaxrl/ppo.py and purejaxrl/wrappers.py are read from the
checkout and executed with the few substitutions below (each must match exactly, or the
runner stops). It needs gymnax < 1.0 (the 5-value env.step): run it in the peers venv.
The config is ppo.py's own (from its __main__ block) with the flags below set on it;
the defaults are CleanRL's CartPole config, equal to ppo.py's, so the runner only changes
DEBUG (its per-episode print callback would be timed) and TOTAL_TIMESTEPS (an int, not
5e5). Then a greedy evaluation of each seed's final policy, written to
{output_dir}/{env_id}__purejaxrl_ppo__{seed}__{time}/eval.json with ppo.py's final
training return.
"""

from __future__ import annotations

import gymnax
import jax
import numpy as np
from common import (
    compile_train,
    default_config,
    load_module,
    make_greedy_eval,
    override_config,
    parse_ppo_args,
    patched_source,
    purejaxrl_file,
    seed_keys,
    seed_slice,
    time_train,
    write_run,
)

PEER = "purejaxrl_ppo"

# wrappers.py imports brax and navix at the top, for its Brax/Navix wrapper classes that
# ppo.py never uses (the names are only looked up inside those classes' methods); neither
# package is needed for gymnax envs, so the peers venv has neither. Drop the imports.
WRAPPERS_SUBSTITUTIONS = [
    ("from brax import envs\n", "", 1),
    ("from brax.envs.wrappers.training import EpisodeWrapper, AutoResetWrapper\n", "", 1),
    ("import navix as nx\n", "", 1),
]
# ppo.py itself runs as it is on jax 0.10 with gymnax < 1.0.
PPO_SUBSTITUTIONS: list[tuple[str, str, int]] = []


def main() -> None:
    args = parse_ppo_args(__doc__.splitlines()[0], speed_flags=True)
    wrappers_path, ppo_path = purejaxrl_file("wrappers.py"), purejaxrl_file("ppo.py")
    # ppo.py does `from wrappers import ...`: register the patched module under that name.
    wrappers = load_module("wrappers", wrappers_path, patched_source(wrappers_path, WRAPPERS_SUBSTITUTIONS))
    ppo = load_module("purejaxrl_ppo_module", ppo_path, patched_source(ppo_path, PPO_SUBSTITUTIONS))

    config = override_config(
        PEER,
        default_config(ppo_path),
        {
            "ENV_NAME": args.env_id,
            "TOTAL_TIMESTEPS": args.total_timesteps,
            "NUM_ENVS": args.num_envs,
            "NUM_STEPS": args.num_steps,
            "UPDATE_EPOCHS": args.update_epochs,
            "NUM_MINIBATCHES": args.num_minibatches,
            "LR": args.learning_rate,
            "ANNEAL_LR": True,  # CleanRL anneals the learning rate linearly to 0
            "CLIP_EPS": args.clip_coef,
            "ENT_COEF": args.ent_coef,
            "VF_COEF": args.vf_coef,
            "MAX_GRAD_NORM": args.max_grad_norm,
            "GAMMA": args.gamma,
            "GAE_LAMBDA": args.gae_lambda,
            "DEBUG": False,  # True prints every finished episode from inside the jit
        },
    )
    train = ppo.make_train(config)  # adds NUM_UPDATES and MINIBATCH_SIZE to config
    steps = config["NUM_UPDATES"] * config["NUM_STEPS"] * config["NUM_ENVS"]
    if steps != args.total_timesteps:
        print(f"note: ppo.py trains {steps} steps ({config['NUM_UPDATES']} whole updates)")

    keys = seed_keys(args.seed, args.num_seeds)
    compiled = compile_train(PEER, train, args.num_seeds, keys)
    out = time_train(compiled, keys, args.repeats, steps * args.num_seeds)

    env, env_params = gymnax.make(args.env_id)
    env = wrappers.FlattenObservationWrapper(env)  # what ppo.py's network was trained on
    network = ppo.ActorCritic(env.action_space(env_params).n, activation=config["ACTIVATION"])

    def act(params, obs):
        pi, _ = network.apply(params, obs)
        return pi.mode()

    evaluate = make_greedy_eval(act, env, env_params, args.eval_episodes)
    for i in range(args.num_seeds):
        seed = args.seed + i
        result = seed_slice(out, args.num_seeds, i)
        info = result["metrics"]  # traj_batch.info of every update: [NUM_UPDATES, NUM_STEPS, NUM_ENVS]
        ended = np.asarray(info["returned_episode"][-1])
        last = np.asarray(info["returned_episode_returns"][-1])[ended]
        train_return = float(last.mean()) if last.size else float("nan")
        print(f"final training return {train_return:.1f} (seed {seed}, episodes ended in the last update)")
        returns, lengths = evaluate(result["runner_state"][0].params, jax.random.PRNGKey(10_000 + seed))
        write_run(
            args,
            args.exp_name or PEER,
            returns.tolist(),
            lengths.tolist(),
            seed=seed,
            extra={"final_training_return": train_return, "peer_config": config},
        )


if __name__ == "__main__":
    main()
