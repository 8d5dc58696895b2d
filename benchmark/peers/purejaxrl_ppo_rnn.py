"""PureJaxRL's ppo_rnn.py (its make_train as one jit) at its own CartPole config, for the speed report.

    export VIBE_RL_PUREJAXRL_DIR=/work/purejaxrl        # a PureJaxRL checkout (not on PyPI)
    /work/peers-venv/bin/python benchmark/peers/purejaxrl_ppo_rnn.py --total-timesteps 50000
    ... --repeats 3 --num-seeds 8                        # best of 3 calls, 8 seeds in one vmap

PureJaxRL is not vendored: purejaxrl/ppo_rnn.py and purejaxrl/wrappers.py are read from the
checkout and executed with the substitutions below (each must match exactly, or the runner
stops). It needs gymnax < 1.0 (the 5-value env.step): run it in the peers venv.
The config is ppo_rnn.py's own (from its __main__ block: CartPole-v1, 4 envs x 128 steps,
4 epochs x 4 minibatches of whole env sequences, lr 2.5e-4 annealed, clip 0.2, ent 0.01,
vf 0.5, grad norm 0.5, gamma 0.99, GAE lambda 0.95, 500k steps; a GRU of 128 between a
128-wide ReLU embedding and 128-wide ReLU heads, fixed in the file) with the PPO flags set
on it. The flags' defaults (common.PPO_FLAGS) equal that config, so the runner only changes
DEBUG (its per-episode print callback would be timed) and TOTAL_TIMESTEPS (an int, not 5e5).

vibe_rl's side (benchmark/speed.py, `--only rnn`) is vibe_rl/ppo_rnn_jax.py's make_train with
the same values. What still differs there, in the code rather than the hyperparameters:
tanh activations (PureJaxRL: ReLU) and gain sqrt(2) on the heads' hidden layers (PureJaxRL: 2),
a bootstrap from V(final_obs) at CartPole's time limit (one more batched pass of the core over
the rollout per iteration; PureJaxRL treats a truncation as a termination), and the rollout's
random numbers drawn in one batch before it.

Then a greedy evaluation of each seed's final policy, the GRU's hidden state carried through
each episode (from zeros, as ppo_rnn.py starts one), written to
{output_dir}/{env_id}__purejaxrl_ppo_rnn__{seed}__{time}/eval.json with ppo_rnn.py's final
training return.
"""

from __future__ import annotations

import gymnax
import jax.numpy as jnp
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

PEER = "purejaxrl_ppo_rnn"

# ppo_rnn.py was written for flax < 0.7.1, whose GRUCell took its size from the carry and had a
# class-level initialize_carry(rng, batch_dims, size). flax 0.12 (the peers venv's) requires
# `features` and has an instance method initialize_carry(rng, input_shape). Both calls are
# rewritten to the new API with the same sizes (features = the carry's width, 128) and the same
# zero initial carry; nothing else in the file changes.
PPO_RNN_SUBSTITUTIONS = [
    (
        "nn.GRUCell()(rnn_state, ins)",
        "nn.GRUCell(features=rnn_state.shape[-1])(rnn_state, ins)",
        1,
    ),
    (
        "nn.GRUCell.initialize_carry(\n"
        "            jax.random.PRNGKey(0), (batch_size,), hidden_size\n        )",
        "nn.GRUCell(features=hidden_size, parent=None).initialize_carry(\n"
        "            jax.random.PRNGKey(0), (batch_size, hidden_size)\n        )",
        1,
    ),
]


def main() -> None:
    args = parse_ppo_args(__doc__.splitlines()[0], speed_flags=True)
    wrappers, ppo_rnn_path = load_purejaxrl_wrappers(), purejaxrl_file("ppo_rnn.py")
    ppo_rnn = load_module(
        "purejaxrl_ppo_rnn_module", ppo_rnn_path, patched_source(ppo_rnn_path, PPO_RNN_SUBSTITUTIONS)
    )

    config = override_config(
        PEER,
        default_config(ppo_rnn_path),
        {
            "ENV_NAME": args.env_id,
            "TOTAL_TIMESTEPS": args.total_timesteps,
            "NUM_ENVS": args.num_envs,
            "NUM_STEPS": args.num_steps,
            "UPDATE_EPOCHS": args.update_epochs,
            "NUM_MINIBATCHES": args.num_minibatches,
            "LR": args.learning_rate,
            "ANNEAL_LR": True,
            "CLIP_EPS": args.clip_coef,
            "ENT_COEF": args.ent_coef,
            "VF_COEF": args.vf_coef,
            "MAX_GRAD_NORM": args.max_grad_norm,
            "GAMMA": args.gamma,
            "GAE_LAMBDA": args.gae_lambda,
            "DEBUG": False,  # True prints every finished episode from inside the jit
        },
    )
    train = ppo_rnn.make_train(config)  # adds NUM_UPDATES and MINIBATCH_SIZE to config
    steps = config["NUM_UPDATES"] * config["NUM_STEPS"] * config["NUM_ENVS"]
    if steps != args.total_timesteps:
        print(f"note: ppo_rnn.py trains {steps} steps ({config['NUM_UPDATES']} whole updates)")

    keys = seed_keys(args.seed, args.num_seeds)
    compiled = compile_train(PEER, train, args.num_seeds, keys)
    out = time_train(compiled, keys, args.repeats, steps * args.num_seeds)

    env, env_params = gymnax.make(args.env_id)
    env = wrappers.FlattenObservationWrapper(env)  # what ppo_rnn.py's network was trained on
    network = ppo_rnn.ActorCriticRNN(env.action_space(env_params).n, config=config)
    # runner_state = (train_state, env_state, last_obs, last_done, hstate, rng); hstate [.., NUM_ENVS, H]
    hidden_size = out["runner_state"][4].shape[-1]

    def act(params, obs, hidden):
        """One step of one episode: obs [obs_dim], hidden [1, H]; the network reads [time 1, batch 1]."""
        inputs = (obs[None, None, :], jnp.zeros((1, 1), dtype=bool))  # no reset inside an episode
        hidden, pi, _ = network.apply(params, hidden, inputs)
        return pi.mode()[0, 0], hidden

    evaluate = make_greedy_eval(
        act, env, env_params, args.eval_episodes, initial_carry=jnp.zeros((1, hidden_size))
    )
    for i in range(args.num_seeds):
        seed = args.seed + i
        result = seed_slice(out, args.num_seeds, i)
        train_return = final_training_return(result["metric"])  # ppo_rnn.py names it "metric"
        print(f"final training return {train_return:.1f} (seed {seed}, episodes ended in the last update)")
        extra = {"final_training_return": train_return, "peer_config": config}
        write_evaluated_run(args, PEER, evaluate, result["runner_state"][0].params, seed, extra)


if __name__ == "__main__":
    main()
