"""PureJaxRL's dqn.py (its make_train as one jit), at its own default config, for the speed report.

    export VIBE_RL_PUREJAXRL_DIR=/work/purejaxrl        # a PureJaxRL checkout (not on PyPI)
    /work/peers-venv/bin/python benchmark/peers/purejaxrl_dqn.py --total-timesteps 50000
    ... --repeats 3 --num-seeds 8                        # best of 3 calls, 8 seeds in one vmap

PureJaxRL is not vendored: purejaxrl/dqn.py is read from the checkout and executed with the
substitutions below (each must match exactly, or the runner stops). It needs gymnax < 1.0
(the 5-value env.step and gymnax.wrappers.purerl) and flashbax: run it in the peers venv.
The config is dqn.py's own (the literal in its main(): CartPole-v1, 10 envs, 500k steps,
buffer 10k, batch 128, lr 2.5e-4, epsilon 1 -> 0.05 over 250k steps, learning from 10k,
a gradient step every 10 env steps, target copied every 500); a flag given (spelled as in
vibe_rl/dqn_jax.py) overrides its value, and every value set is printed. TOTAL_TIMESTEPS
is always set, as an int (the file has 5e5). Then a greedy evaluation of each seed's final
Q-network, written to {output_dir}/{env_id}__purejaxrl_dqn__{seed}__{time}/eval.json with
dqn.py's final training return.

Note on seeds: dqn.py replaces the train key by PRNGKey(0) after the env reset ("use a
dummy rng here"), so its seeds differ only in their first env reset. The runner keeps it:
it is the peer's code, and it does not change what a training step costs.
"""

from __future__ import annotations

import gymnax
import numpy as np
from common import (
    compile_train,
    default_config,
    load_module,
    make_greedy_eval,
    override_config,
    parse_dqn_args,
    patched_source,
    purejaxrl_file,
    seed_keys,
    seed_slice,
    time_train,
    write_evaluated_run,
)
from gymnax.wrappers.purerl import FlattenObservationWrapper

PEER = "purejaxrl_dqn"

DQN_SUBSTITUTIONS = [
    # wandb is only called from main() and from a callback taken when WANDB_MODE is
    # "online"; the runner calls neither, so it need not be installed. A None makes any
    # use of it fail loudly.
    ("import wandb\n", "wandb = None  # stubbed out by benchmark/peers/purejaxrl_dqn.py\n", 1),
    # jax.tree_map is gone from current JAX (it fails on 0.10.2); jax.tree.map is the same function.
    ("jax.tree_map(", "jax.tree.map(", 1),
]

# dqn_jax flag -> dqn.py config key (same meaning and units: env steps, summed over envs).
FLAG_TO_CONFIG = {
    "env_id": "ENV_NAME",
    "num_envs": "NUM_ENVS",
    "learning_rate": "LR",
    "buffer_size": "BUFFER_SIZE",
    "batch_size": "BUFFER_BATCH_SIZE",
    "gamma": "GAMMA",
    "tau": "TAU",
    "target_network_frequency": "TARGET_UPDATE_INTERVAL",
    "start_e": "EPSILON_START",
    "end_e": "EPSILON_FINISH",
    "learning_starts": "LEARNING_STARTS",
    "train_frequency": "TRAINING_INTERVAL",
}


def main() -> None:
    args = parse_dqn_args(__doc__.splitlines()[0])
    dqn_path = purejaxrl_file("dqn.py")
    dqn = load_module("purejaxrl_dqn_module", dqn_path, patched_source(dqn_path, DQN_SUBSTITUTIONS))

    defaults = default_config(dqn_path)
    total = int(args.total_timesteps or defaults["TOTAL_TIMESTEPS"])
    values = {"TOTAL_TIMESTEPS": total}
    values.update(
        {key: getattr(args, flag) for flag, key in FLAG_TO_CONFIG.items() if getattr(args, flag) is not None}
    )
    if args.exploration_fraction is not None:  # dqn_jax's fraction of the budget; dqn.py's is in steps
        values["EPSILON_ANNEAL_TIME"] = args.exploration_fraction * total
    config = override_config(PEER, defaults, values)
    args.env_id, args.total_timesteps = config["ENV_NAME"], total  # what the run directory records

    train = dqn.make_train(config)  # adds NUM_UPDATES (vector steps) to config
    steps = int(config["NUM_UPDATES"]) * config["NUM_ENVS"]
    if steps != total:
        print(f"note: dqn.py trains {steps} steps ({config['NUM_UPDATES']} vector steps)")

    keys = seed_keys(args.seed, args.num_seeds)
    compiled = compile_train(PEER, train, args.num_seeds, keys)
    out = time_train(compiled, keys, args.repeats, steps * args.num_seeds)

    env, env_params = gymnax.make(config["ENV_NAME"])
    env = FlattenObservationWrapper(env)  # what dqn.py's network was trained on
    network = dqn.QNetwork(action_dim=env.action_space(env_params).n)

    def act(params, obs):
        return network.apply(params, obs).argmax(-1)

    evaluate = make_greedy_eval(act, env, env_params, args.eval_episodes)
    for i in range(args.num_seeds):
        seed = args.seed + i
        result = seed_slice(out, args.num_seeds, i)
        # metrics["returns"][t]: the mean over envs of each env's last finished episode's return
        train_return = float(np.asarray(result["metrics"]["returns"][-1]))
        print(f"final training return {train_return:.1f} (seed {seed}, mean of each env's last episode)")
        extra = {"final_training_return": train_return, "peer_config": config}
        write_evaluated_run(args, PEER, evaluate, result["runner_state"][0].params, seed, extra)


if __name__ == "__main__":
    main()
