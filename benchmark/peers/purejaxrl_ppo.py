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
from common import (
    compile_train,
    default_config,
    final_training_return,
    load_module,
    load_purejaxrl_wrappers,
    make_greedy_eval,
    override_config,
    parse_ppo_args,
    patched_source,
    purejaxrl_file,
    seed_keys,
    seed_slice,
    time_train,
    write_evaluated_run,
)

PEER = "purejaxrl_ppo"

# ppo.py itself runs as it is on jax 0.10 with gymnax < 1.0.
PPO_SUBSTITUTIONS: list[tuple[str, str, int]] = []


def main() -> None:
    args = parse_ppo_args(__doc__.splitlines()[0], speed_flags=True)
    wrappers, ppo_path = load_purejaxrl_wrappers(), purejaxrl_file("ppo.py")
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
        train_return = final_training_return(result["metrics"])
        print(f"final training return {train_return:.1f} (seed {seed}, episodes ended in the last update)")
        extra = {"final_training_return": train_return, "peer_config": config}
        write_evaluated_run(args, PEER, evaluate, result["runner_state"][0].params, seed, extra)


if __name__ == "__main__":
    main()
