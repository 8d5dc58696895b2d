"""Every numeric flag of every script is legal, or refused before anything compiles: exit status 2
and one line on stderr that names it (docs: "Bad input, faults").

Each case calls a script's main() in this process with its initial_state replaced by one that
raises Accepted: the harness calls initial_state once every check of the flags has passed and
before anything compiles, so reaching it means the command line would run. A case costs
milliseconds (no compile).

Every int and float field of every script's Args is tried at 0, -1 and a huge value (10**12,
1e30), and every float at NaN too. REFUSED says which of those each algorithm flag refuses, and
HARNESS which of those each run and machine flag refuses (checked below the banner, tried once:
the harness is the same text in every script, tests/test_harness.py); the rest must be accepted,
so a lost refusal fails here as much as a legal value refused. The huge sizes (MEMORY_FLAGS) are
refused by the harness's estimates of memory and of the steps' count, whose line may name the
sizes it multiplies rather than the flag. EXTRA_CASES are the relations between flags (a batch
larger than the replay buffer, a frequency that leaves no update, ...) with their boundaries.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from _helpers import exit_of_main, load_script

# an overflow in a check would print its warning on the user's stderr: a second line
pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

SCRIPTS = (
    "ppo_jax_scan",
    "ppo_rnn_jax",
    "ppo_multigpu",
    "dqn_jax",
    "c51_jax",
    "iqn_jax",
    "rainbow_jax",
    "pqn_jax",
    "sac_jax",
    "td3_jax",
)

ZERO, NEG, HUGE, NAN = "0", "-1", "huge", "nan"  # the probe values
PROBES = {"int": (ZERO, NEG, HUGE), "float": (ZERO, NEG, HUGE, NAN)}
ON_THE_COMMAND_LINE = {("int", HUGE): str(10**12), ("float", HUGE): "1e30"}

# A range, as the probe values it refuses. A float's range has no upper end unless it says so:
# a huge learning rate or coefficient is legal (a non-finite run stops at a chunk's end).
COUNT = {ZERO, NEG}  # a positive integer; a huge one is legal
COUNT_IN_RUN = {ZERO, NEG, HUGE}  # a positive integer that must fit the run or divide a size
NONNEG_IN_RUN = {NEG, HUGE}  # an integer >= 0 that must fit the run (or the devices)
POSITIVE = {ZERO, NEG, NAN}  # a float > 0
NONNEG = {NEG, NAN}  # a float >= 0
UNIT = {NEG, HUGE, NAN}  # [0, 1]
OPEN_UNIT = {ZERO, NEG, HUGE, NAN}  # (0, 1]
EVERY = {ZERO, NEG, HUGE}  # refused whatever its value (ppo_multigpu: only with --distributed)

# the run and machine flags, checked by the harness below the banner: tried with ppo_jax_scan alone
HARNESS = dict(
    seed={HUGE},  # every seed of the run in [-2^31, 2^31)
    num_seeds=COUNT_IN_RUN,  # at most 2^20
    num_chunks=COUNT,  # a huge one: a chunk per iteration
    checkpoint_frequency={NEG},  # 0: a tenth of the run; a huge one: the end only
    eval_episodes=COUNT_IN_RUN,  # a huge one: its evaluation exceeds the memory
    eval_frequency={NEG},  # 0: the end only
    cpu_devices=NONNEG_IN_RUN,  # at most 1024
    sweep_max_programs=set(),  # read only with --sweep
)
HARNESS_FLAGS = set(HARNESS)
# sizes whose huge value the harness refuses (the memory estimate, at most 2^31 - 1 steps a seed)
MEMORY_FLAGS = {"total_timesteps", "hidden_size", "buffer_size"}

PPO = dict(
    total_timesteps=COUNT,
    learning_rate=POSITIVE,
    num_envs=COUNT_IN_RUN,  # a batch larger than the run
    num_steps=COUNT_IN_RUN,
    gamma=UNIT,
    gae_lambda=UNIT,
    num_minibatches=COUNT_IN_RUN,  # must divide the batch (ppo_rnn_jax: the envs)
    update_epochs=COUNT_IN_RUN,  # below 2**31, a scan's length
    clip_coef=POSITIVE,
    ent_coef=NONNEG,
    vf_coef=NONNEG,
    max_grad_norm=POSITIVE,
    target_kl=NONNEG,  # or unset; 0 stops after the first epoch
    hidden_size=COUNT,
)
REPLAY = dict(  # DQN and C51
    total_timesteps=COUNT,
    learning_rate=POSITIVE,
    num_envs=COUNT_IN_RUN,  # must divide the frequencies
    buffer_size=COUNT,
    gamma=UNIT,
    target_network_frequency=COUNT_IN_RUN,  # a target update while learning
    batch_size=COUNT_IN_RUN,  # at most the buffer, and the run's transitions
    start_e=UNIT,
    end_e=UNIT,
    exploration_fraction=OPEN_UNIT,
    learning_starts=NONNEG_IN_RUN,  # a gradient step in the run
    train_frequency=COUNT_IN_RUN,
    log_frequency=COUNT,  # a huge one: one logged point
)
ACTOR_CRITIC = dict(  # SAC and TD3
    total_timesteps=COUNT,
    num_envs=COUNT_IN_RUN,  # at most the buffer
    buffer_size=COUNT,
    gamma=UNIT,
    tau=OPEN_UNIT,
    batch_size=COUNT_IN_RUN,
    learning_starts=NONNEG_IN_RUN,
    policy_frequency=COUNT_IN_RUN,  # at most the run, an actor update while learning
    hidden_size=COUNT,
    log_frequency=COUNT,
)
REFUSED: dict[str, dict[str, set[str]]] = {
    "ppo_jax_scan": PPO,
    "ppo_rnn_jax": PPO,
    "ppo_multigpu": PPO
    | dict(data_devices=NONNEG_IN_RUN, shuffle_group_envs=NONNEG_IN_RUN)
    | dict(num_processes=EVERY, process_id=EVERY),
    "dqn_jax": REPLAY | dict(tau=OPEN_UNIT),
    "c51_jax": REPLAY
    | dict(n_atoms=EVERY, v_min={HUGE, NAN}, v_max={HUGE, NAN}),  # huge atoms: not distinct float32 numbers
    "iqn_jax": REPLAY
    | dict(
        target_update_rate=OPEN_UNIT, kappa=POSITIVE, num_tau_samples=COUNT_IN_RUN
    )  # huge: the loss's pairs
    | dict(num_tau_prime_samples=COUNT_IN_RUN, num_quantile_samples=COUNT_IN_RUN)  # the pairs; the choice's
    | dict(quantile_embedding_dim=COUNT_IN_RUN),  # huge: its embedding layer exceeds the memory
    "rainbow_jax": REPLAY
    | dict(n_atoms=EVERY, v_min={HUGE, NAN}, v_max={HUGE, NAN}, n_step=COUNT_IN_RUN)  # huge: fills too late
    | dict(priority_exponent=UNIT, importance_exponent=UNIT, noisy_std=POSITIVE, adam_eps=NONNEG),
    "pqn_jax": dict(
        total_timesteps=COUNT,
        learning_rate=POSITIVE,
        num_envs=COUNT_IN_RUN,
        num_steps=COUNT_IN_RUN,
        gamma=UNIT,
        q_lambda=UNIT,
        num_minibatches=COUNT_IN_RUN,
        update_epochs=COUNT_IN_RUN,
        max_grad_norm=POSITIVE,
        reward_scale=POSITIVE,
        start_e=UNIT,
        end_e=UNIT,
        exploration_fraction=OPEN_UNIT,
        hidden_size=COUNT,
    ),
    "sac_jax": ACTOR_CRITIC
    | dict(policy_lr=POSITIVE, q_lr=POSITIVE, target_network_frequency=COUNT_IN_RUN, alpha=NONNEG),
    "td3_jax": ACTOR_CRITIC
    | dict(learning_rate=POSITIVE, policy_noise=NONNEG, exploration_noise=NONNEG, noise_clip=NONNEG),
}


def refused(name: str, field: str) -> set[str]:
    """The probe values a flag of a script refuses."""
    if field in HARNESS_FLAGS:
        return HARNESS[field]
    return REFUSED[name][field] | ({HUGE} if field in MEMORY_FLAGS else set())


def numeric_fields(name: str) -> dict[str, str]:
    """Args's int and float fields (optional ones too): {name: "int" or "float"}; and for ppo_jax_scan, which
    stands for every script's harness, RunFlags' too."""
    module = load_script(name)
    flags = module.Flags if name == "ppo_jax_scan" else module.Args
    kinds = {f.name: str(f.type).split(" | ")[0] for f in dataclasses.fields(flags)}
    return {field: kind for field, kind in kinds.items() if kind in ("int", "float")}


class Accepted(Exception):  # noqa: N818 (no error: the run would start)
    """Raised in place of the harness's initial_state: every check of the flags passed."""


def reached_initial_state(*_: object) -> None:
    raise Accepted


def verdict(name: str, flags: list[str], tmp_path: Path, monkeypatch, capsys) -> tuple[object, str]:
    """(2 or another exit status, or Accepted; stderr) of `name.py FLAGS --output-dir tmp_path`."""
    module = load_script(name)
    monkeypatch.setattr(module, "initial_state", reached_initial_state)
    try:
        return exit_of_main(module, [*flags, "--output-dir", str(tmp_path)], monkeypatch, capsys)
    except Accepted:
        return Accepted, capsys.readouterr().err


def one_line_refusal(code: object, err: str) -> str:
    """The refusal's line: status 2, one line on stderr, no traceback."""
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "error:" in lines[0], f"status {code}, stderr:\n{err}"
    return lines[0]


def names(line: str, field: str) -> bool:
    return f"--{field.replace('_', '-')}" in line or field in line  # "num_envs * num_steps = ..." names both


PROBE_CASES = [
    pytest.param(name, field, kind, value, id=f"{name}-{field}={value}")
    for name in SCRIPTS
    for field, kind in numeric_fields(name).items()
    for value in PROBES[kind]
]


@pytest.mark.parametrize(("name", "field", "kind", "value"), PROBE_CASES)
def test_a_numeric_flag_is_legal_or_refused_in_one_line(
    name, field, kind, value, tmp_path, monkeypatch, capsys
):
    flag, given = f"--{field.replace('_', '-')}", ON_THE_COMMAND_LINE.get((kind, value), value)
    code, err = verdict(name, [flag, given], tmp_path, monkeypatch, capsys)
    if value in refused(name, field):
        line = one_line_refusal(code, err)
        named = names(line, field) or (field in MEMORY_FLAGS and value == HUGE)  # the sizes' estimate
        assert named, f"{flag} {given}: the refusal does not name it: {line}"
    else:
        assert code is Accepted, f"{flag} {given} is legal, but: status {code}, stderr:\n{err}"


def test_every_numeric_flag_has_a_range():
    """A new int or float flag needs its line in REFUSED, or in HARNESS for a run or machine flag."""
    for name in SCRIPTS:
        assert set(numeric_fields(name)) - HARNESS_FLAGS == set(REFUSED[name]), name
    assert set(numeric_fields("ppo_jax_scan")) - set(REFUSED["ppo_jax_scan"]) == HARNESS_FLAGS


# (script, flags, the refusal's start, or None where the flags are legal)
ALL_PPO = ("ppo_jax_scan", "ppo_rnn_jax", "ppo_multigpu")
EXTRA_CASES = [
    *(
        (name, flags, message)
        for name in ALL_PPO
        for flags, message in (
            ([], None),  # the defaults; --target-kl unset
            (["--clip-coef", "-0.2"], "--clip-coef must be positive, got -0.2"),
            (["--max-grad-norm", "-1"], "--max-grad-norm must be positive, got -1.0"),
            (["--vf-coef", "-1"], "--vf-coef must be >= 0, got -1.0"),
            (["--target-kl", "-1"], "--target-kl must be >= 0 (or unset), got -1.0"),
            (["--ent-coef", "0", "--vf-coef", "0", "--gamma", "0", "--gae-lambda", "1"], None),
            (["--target-kl", "0"], None),  # stops after the first epoch
            (["--update-epochs", str(2**31)], "--update-epochs must be below 2**31"),
            (["--update-epochs", str(2**31 - 1)], None),
        )
    ),
    (
        "ppo_multigpu",
        ["--distributed", "--coordinator-address", "host:1234", "--num-processes", "0", "--process-id", "0"],
        "--process-id 0 must lie in [0, --num-processes 0)",
    ),  # fmt: skip
    (
        "ppo_multigpu",
        ["--distributed", "--coordinator-address", "host:1234", "--num-processes", "2", "--process-id", "-1"],
        "--process-id -1 must lie in [0, --num-processes 2)",
    ),  # fmt: skip
    ("pqn_jax", ["--reward-scale", "0"], "--reward-scale must be positive, got 0.0"),
    ("pqn_jax", ["--reward-scale", "-1"], "--reward-scale must be positive, got -1.0"),
    ("pqn_jax", ["--exploration-fraction", "0"], "--start-e, --end-e and --exploration-fraction must lie in"),
    ("pqn_jax", ["--exploration-fraction", "1", "--start-e", "0", "--end-e", "1"], None),
    ("dqn_jax", ["--exploration-fraction", "1", "--tau", "1"], None),
    ("c51_jax", ["--exploration-fraction", "1"], None),
    # C51's support: n_atoms distinct finite float32 numbers on [v_min, v_max]
    # (10^7 atoms are distinct, but its Q-network's last layer, 84 x 2 x 10^7, exceeds this machine's memory)
    ("c51_jax", ["--n-atoms", "10000000"], "--n-atoms 10000000: the training state and its evaluation need"),
    (
        "c51_jax",
        ["--n-atoms", "100000000"],
        "--n-atoms 100000000 atoms on [--v-min -100.0, --v-max 100.0] are",
    ),
    ("c51_jax", ["--v-min", "-16777215", "--v-max", "16777215"], None),  # below 2^24: x and x + 1 differ
    ("c51_jax", ["--v-max", "16777216"], "[--v-min -100.0, --v-max 16777216.0]: each below 2^24 in"),
    ("c51_jax", ["--v-max", "1e39"], "--n-atoms 101 atoms on [--v-min -100.0, --v-max 1e+39] are not"),
    ("c51_jax", ["--v-min", "-1", "--v-max", "-0.5", "--n-atoms", "2"], None),
]
# the fault probe's reproductions (issue 81), each refused before compiling, and their boundaries
LATE = "--n-step 10000 fills its window at env step 10,000 (x --num-envs 1), after the first gradient step, "
LATE += "at env step 1,010 (--learning-starts 1000): at most 1,010"
EXTRA_CASES += [
    *(  # exited 0 with no gradient step; learning waited for the window to env step 10,000
        ("rainbow_jax", ["--n-step", "10000", *run, "--learning-starts", "1000"], LATE)
        for run in (["--total-timesteps", "5000"], [])
    ),
    ("rainbow_jax", ["--n-step", "1010", "--learning-starts", "1000"], None),  # full at the first update
    ("rainbow_jax", ["--n-step", "100000000"], "--n-step 100000000 fills its window at env step 100,000,000"),
    (
        "rainbow_jax",
        ["--num-envs", "4", "--train-frequency", "8", "--n-step", "2503"],
        "--n-step 2503 fills its window at env step 10,012 (x --num-envs 4), after the first gradient step, "
        "at env step 10,008 (--learning-starts 10000): at most 2,502",
    ),
    ("rainbow_jax", ["--num-envs", "4", "--train-frequency", "8", "--n-step", "2502"], None),
    ("rainbow_jax", ["--priority-exponent", "1e9"], "--priority-exponent 1000000000.0: at most 6.3, where"),
    ("rainbow_jax", ["--priority-exponent", "6.3"], None),
    *(  # trained 500k steps onto one atom
        (name, ["--v-min", "-1e38", "--v-max", "1e38"], "[--v-min -1e+38, --v-max 1e+38]: each below 2^24")
        for name in ("c51_jax", "rainbow_jax")
    ),
    ("rainbow_jax", ["--v-min", "-16777215", "--v-max", "16777215"], None),
]
for name in ("dqn_jax", "c51_jax"):  # buffer 10,000, learning after env step 10,000
    EXTRA_CASES += [
        (name, ["--batch-size", "10000"], None),
        (
            name,
            ["--batch-size", "10001"],
            "--batch-size 10001 exceeds the 10,000 transitions of the replay buffer",
        ),
        (name, ["--total-timesteps", "1000", "--learning-starts", "0", "--batch-size", "1000"], None),
        (
            name,
            ["--total-timesteps", "1000", "--learning-starts", "0", "--batch-size", "1001"],
            "--batch-size 1001 exceeds the 1,000 transitions of the run (--total-timesteps)",
        ),
        (name, ["--total-timesteps", "20000", "--target-network-frequency", "20000"], None),
        (
            name,
            ["--total-timesteps", "20000", "--target-network-frequency", "20010"],
            "--target-network-frequency 20010 leaves no target update in 20,000 env steps",
        ),
        (
            name,
            [
                "--total-timesteps",
                "20000",
                "--learning-starts",
                "15000",
                "--target-network-frequency",
                "12000",
            ],
            "--target-network-frequency 12000 leaves no target update",
        ),
    ]
EXTRA_CASES += [  # IQN: a gradient step's B x N x N' pairs and B x K quantiles, each below 2^31
    ("iqn_jax", ["--num-tau-samples", "4096", "--num-tau-prime-samples", "4095"], None),
    (
        "iqn_jax",
        ["--num-tau-samples", "4096", "--num-tau-prime-samples", "4096"],
        "--batch-size 128 x --num-tau",
    ),
    ("iqn_jax", ["--num-quantile-samples", str(2**24 - 1)], None),
    ("iqn_jax", ["--num-quantile-samples", str(2**24)], "--batch-size 128 x --num-quantile-samples 16777216"),
    (
        "iqn_jax",
        ["--qr-dqn", "--num-tau-samples", "4096", "--num-tau-prime-samples", "1"],
        "--batch-size 128 x",
    ),
    ("iqn_jax", ["--exploration-fraction", "1", "--target-update-rate", "1", "--kappa", "1e-6"], None),
    (
        "iqn_jax",
        ["--batch-size", "10001"],
        "--batch-size 10001 exceeds the 10,000 transitions of the replay buffer",
    ),
]
for name in ("sac_jax", "td3_jax"):  # buffer 100,000, 50,000 steps, learning from step 5,000
    frequencies = ["--policy-frequency"] + (["--target-network-frequency"] if name == "sac_jax" else [])
    update = {"--policy-frequency": "actor update", "--target-network-frequency": "target update"}
    EXTRA_CASES += [
        (name, ["--total-timesteps", "200000", "--batch-size", "100000"], None),
        (
            name,
            ["--total-timesteps", "200000", "--batch-size", "100001"],
            "--batch-size 100001 exceeds the 100,000 transitions of the replay",
        ),
        (name, ["--num-envs", "3", "--buffer-size", "100", "--batch-size", "99"], None),
        (
            name,
            ["--num-envs", "3", "--buffer-size", "100", "--batch-size", "100"],
            "--batch-size 100 exceeds the 99 transitions of the replay buffer (--buffer-size)",
        ),
        (name, ["--total-timesteps", "1000", "--learning-starts", "0", "--batch-size", "1000"], None),
        (
            name,
            ["--total-timesteps", "1000", "--learning-starts", "0", "--batch-size", "1001"],
            "--batch-size 1001 exceeds the 1,000 transitions of the run (--total-timesteps)",
        ),
        *((name, [flag, "45000"], None) for flag in frequencies),
        *((name, [flag, "50000", "--learning-starts", "0"], None) for flag in frequencies),  # at step 0
        *(
            (name, [flag, "50000"], f"{flag} 50000 leaves no {update[flag]} in the run's 50,000 steps")
            for flag in frequencies
        ),
        *((name, [flag, "50001"], f"{flag} 50001 exceeds the run's 50,000 steps") for flag in frequencies),
    ]


@pytest.mark.parametrize(
    ("name", "flags", "message"),
    [pytest.param(*case, id=f"{case[0]} {' '.join(case[1])}") for case in EXTRA_CASES],
)
def test_the_relations_between_flags(name, flags, message, tmp_path, monkeypatch, capsys):
    code, err = verdict(name, flags, tmp_path, monkeypatch, capsys)
    if message is None:
        assert code is Accepted, f"{flags} are legal, but: status {code}, stderr:\n{err}"
    else:
        assert f"{name}.py: error: {message}" in one_line_refusal(code, err)
