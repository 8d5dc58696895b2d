#!/usr/bin/env bash
# One GPU measurement run: the speed numbers of the scripts on a CUDA machine, each measured
# exactly as a user runs it (python vibe_rl/<script>.py ..., python -m benchmark.ceiling ...,
# python benchmark/peers/purejaxrl_ppo.py ...), one process per measurement.
#
#   OUT=/some/dir bash benchmark/gpu.sh                 # from the repo root, on the GPU machine
#   OUT=/tmp/gpu-smoke GPU_SMOKE=1 PYTHON=/work/venv/bin/python \
#       PEERS_PYTHON=/work/peers-venv/bin/python bash benchmark/gpu.sh   # CPU smoke: tiny budgets
#   GPU_STEPS=e,f GPU_DEADLINE_S=300 ...               # some steps, another deadline
#
# What it needs beside the repo (git-ignored, carried to the machine): .whl/ (py3.12 wheels of
# what the scripts need and the machine lacks: gymnax, tyro, tensorboardX, distrax, tfp-nightly,
# brax, mujoco, ...), .whl-peers/ (gymnax 0.0.9, PureJaxRL's 5-value step, installed into its
# own target) and .peers/purejaxrl/ (PureJaxRL's ppo.py and wrappers.py), all three built by
# benchmark/gpu_wheels.sh. Without .whl/ (or with GPU_SMOKE=1) nothing is installed and PYTHON's
# own packages are used. A smoke run with GPU_INSTALL=1 and a Python 3.12 venv holding jax 0.11.2
# and the GPU image's other packages checks the wheels install and import (docs/gpu.md).
#
# Steps, in the order they run, the most wanted first, so that the deadline cuts the least wanted
# (GPU_STEPS=a,b,... picks some; default a, b, c, d, e, f, g, h, i, k and o):
#   a  device check, wheel install, import check
#   o  the driver's host work per chunk (python -m benchmark.oneoff.driver_overhead): PPO CartPole at 1, 8,
#      64 and 256 seeds, DQN's 1M buffer at 1 and 8, against the chunk's compute (GPU_O_FLAGS, e.g.
#      "--num-seeds 1,64 --dqn-seeds 1", picks fewer)
#   c  ppo_jax_scan vs PureJaxRL ppo.py, CartPole-v1, 2048 / 8192 / 4 envs (GPU_C_ENVS; interleaved)
#   d  seeds in one program (--num-seeds 8, 64; 1 is step c's 4-env pair), ours and PureJaxRL's
#   h  ppo_jax_scan brax/hopper at Brax's published PPO config (2048 envs x 160 steps per update),
#      then Brax's own ppo.train at that config and budget (benchmark/peers/brax_train.py)
#   m  a sweep of 16 configurations x 4 seeds of PPO-CNN on Breakout-MinAtar (1M steps a run),
#      against one run of one configuration and one seed (64 single runs' estimate: 64 x its time)
#   l  Craftax-1M: ppo_jax_scan and ppo_rnn_jax on craftax/Craftax-Symbolic-v1, 5 seeds each, the
#      suite's 1M entries, then Craftax_Baselines' ppo.py and ppo_rnn.py at the same config, 5 repeats
#   n  Craftax-Symbolic-v1 for 10M steps at Craftax_Baselines' default config (1024 envs x 64
#      steps), ppo_jax_scan and ppo_rnn_jax, one seed each, then Craftax_Baselines' ppo.py
#   e  pqn_jax Breakout-MinAtar, the suite's config and budget, 3 seeds, evaluated every 500k steps
#   i  dqn_jax Breakout-MinAtar, the suite's config and budget, 3 seeds, evaluated every 200k steps
#   k  ppo_jax_scan Breakout-MinAtar, the suite's CNN config, 10M steps, 3 seeds, evaluated every 2M
#   b  raw gymnax ceiling, CartPole-v1, 4 / 2048 / 8192 envs
#   f  sac_jax and td3_jax, Pendulum-v1, the suite's config
#   g  ppo_multigpu (replicated, then --fsdp) at 2048 envs, step c's 2048-env config, one GPU
# The Breakout steps (e, i, k) give the wall time to the suite's bar: the progress lines with an
# evaluation are kept in summary.txt, each with the seconds since training began.
#
# Every step runs under its own `timeout`; a step whose timeout does not fit in what is left of
# GPU_DEADLINE_S (default 540 s from the start) is skipped ("skipped: deadline"). The output
# goes to $OUT/gpu.log (a header line with the exact command per step) and the lines that
# matter to $OUT/summary.txt; run directories and per-step logs to /tmp/runs (GPU_RUNS_DIR).

set -u
export PYTHONUNBUFFERED=1

START=$(date +%s)
: "${OUT:?set OUT to the folder the results go to}"
mkdir -p "$OUT"
SMOKE=${GPU_SMOKE:-0}
DEADLINE=${GPU_DEADLINE_S:-540}
[ "$SMOKE" = 1 ] && DEADLINE=${GPU_DEADLINE_S:-3600}
STEPS=${GPU_STEPS:-a,b,c,d,e,f,g,h,i,k,o}
PY=${PYTHON:-python3}
PEERS_PY=${PEERS_PYTHON:-$PY}
RUNS=${GPU_RUNS_DIR:-/tmp/runs}
SITE=${GPU_SITE:-/tmp/site}
PEERS_SITE=${GPU_PEERS_SITE:-/tmp/peers-site}
LOG=$OUT/gpu.log
SUMMARY=$OUT/summary.txt
mkdir -p "$RUNS/logs"
: >"$LOG"
: >"$SUMMARY"

if [ -d .peers/purejaxrl ]; then
    export VIBE_RL_PUREJAXRL_DIR=${VIBE_RL_PUREJAXRL_DIR:-$PWD/.peers/purejaxrl}
fi
if [ -d .peers/craftax_baselines ]; then
    export VIBE_RL_CRAFTAX_BASELINES_DIR=${VIBE_RL_CRAFTAX_BASELINES_DIR:-$PWD/.peers/craftax_baselines}
fi

# Our scripts see PYTHONPATH=$SITE (after the install), PureJaxRL's runner $PEERS_SITE:$SITE
# (gymnax 0.0.9 first; distrax, tfp and gymnasium from $SITE).
# GPU_INSTALL=1 forces the install (a smoke run with a python 3.12 that has what the GPU
# machine has), 0 skips it; default: install unless GPU_SMOKE=1 or .whl/ holds no wheel.
INSTALL=${GPU_INSTALL:-auto}
if [ "$INSTALL" = auto ]; then
    INSTALL=0
    if [ "$SMOKE" != 1 ] && compgen -G ".whl/*.whl" >/dev/null; then INSTALL=1; fi
fi
if [ "$INSTALL" = 1 ]; then
    OURS_PATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
    PEERS_PATH=$PEERS_SITE:$SITE${PYTHONPATH:+:$PYTHONPATH}
else
    OURS_PATH=${PYTHONPATH:-}
    PEERS_PATH=${PYTHONPATH:-}
fi

# Budgets: GPU values, or tiny ones for the CPU smoke run (every command line still checked).
if [ "$SMOKE" = 1 ]; then
    CEIL_STEPS=50
    T4=1024; T2048=262144; T8192=1048576      # 2 iterations at 4 envs, 1 at 2048 and 8192
    TSEEDS=512; TDQN_BUFFER=2048
    TPQN=2048; TSAC=6000; TDQN=16000; TCNN=16384
    EPQN=1024; EDQN=8000; ECNN=8192           # an evaluation every half of the budget
    BRAX_ENVS=64; TBRAX=20480                 # 64 envs x 160 steps, two iterations
    BRAX_OWN=(--batch-size 32 --num-minibatches 4)  # Brax's: 8 training steps of 64 envs x 40
    TCRAFTAX=8192; TCRAFTAX10=131072           # 2 updates of 256 x 16; 2 of 1024 x 64
    TSWEEP=8192                                # 1 update of 64 x 128 a run
    SCALE=${GPU_TIMEOUT_SCALE:-6}             # timeouts x6: the 2-core CPU compiles slowly
else
    CEIL_STEPS=20000                          # benchmark.ceiling's default
    T4=250000                                 # half ppo_jax_scan's default budget (steps/s only)
    T2048=${GPU_T2048:-16777216}              # 64 iterations of 2048 x 128
    T8192=${GPU_T8192:-33554432}              # 32 iterations of 8192 x 128
    TSEEDS=250000; TDQN_BUFFER=50000
    TPQN=3500000; EPQN=500000                 # the suite's Breakout-MinAtar budget; evaluations
    TSAC=20000                                # the suite's Pendulum-v1 50k cut to a steps/s measurement
    TDQN=${GPU_TDQN:-1200000}; EDQN=200000    # the suite's Breakout-MinAtar budget
    TCNN=${GPU_TCNN:-10000000}; ECNN=2000000  # the suite's PPO Breakout-MinAtar budget
    BRAX_ENVS=2048; TBRAX=${GPU_TBRAX:-2621440}   # 8 iterations of Brax's hopper config, 2048 x 160
    BRAX_OWN=()                               # brax_train.py's hopper config as it is
    TCRAFTAX=1000000; TCRAFTAX10=10000000     # Craftax-1M; 10M
    TSWEEP=${GPU_TSWEEP:-1000000}
    SCALE=${GPU_TIMEOUT_SCALE:-1}
fi

say() { echo "$*" | tee -a "$LOG"; }
left() { echo $((DEADLINE - ($(date +%s) - START))); }
want() { case ",$STEPS," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# install_wheels TARGET WHEEL...: the carried wheels, as they are (no index, no dependencies)
install_wheels() {
    local target=$1
    shift
    timeout 180 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$target" "$@" 2>&1 | tee -a "$LOG"
}

# run_step ID NAME TIMEOUT ours|peers|plain COMMAND...
run_step() {
    local id=$1 name=$2 limit=$(($3 * SCALE)) kind=$4
    shift 4
    want "$id" || return 0
    local rest path steplog=$RUNS/logs/$name.log
    rest=$(left)
    case $kind in
        ours) path=$OURS_PATH ;;
        peers) path=$PEERS_PATH ;;
        *) path=${PYTHONPATH:-} ;;
    esac
    say ""
    say "=== [$id] $name | at $(($(date +%s) - START))s, timeout ${limit}s, ${rest}s left | PYTHONPATH=$path | $*"
    echo "=== [$id] $name: $*" >>"$SUMMARY"
    if [ "$rest" -lt "$limit" ]; then
        say "skipped: deadline"
        echo "skipped: deadline" >>"$SUMMARY"
        return 0
    fi
    local t0 rc
    t0=$(date +%s.%N)
    # -k 15: the scripts finish their current chunk on SIGTERM; SIGKILL 15 s later
    PYTHONPATH=$path timeout -k 15 "$limit" "$@" 2>&1 | tee "$steplog" >>"$LOG"
    rc=${PIPESTATUS[0]}
    local wall
    wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    local status="rc=$rc"
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && status="rc=$rc (timed out)"
    say "--- [$id] $name: $status, ${wall}s wall"
    {
        summarize "$steplog"
        echo "--- $status, ${wall}s wall (process start to exit)"
    } >>"$SUMMARY"
}

# The lines of a step's log that matter (the timing lines, errors); many seeds' evaluations
# and final training returns condensed to the first four and their mean.
summarize() {
    awk '
        /DeprecationWarning/ { next }
        /eval return/ {
            n++; m = $0; sub(/.*eval return /, "", m); split(m, a, " "); v = a[1] + 0; s += v
            if (n == 1 || v < lo) lo = v
            if (n == 1 || v > hi) hi = v
            if (n <= 4) ev[n] = $0
            next
        }
        /^final training return/ { f++; fs += $4; if (f <= 4) fr[f] = $0; next }
        /^\| |^PPO CartPole, /{ if (++k <= 40) print; next }
        /^trained |env steps\/s|^compiled|^repeat |^note:|^stopped|Traceback|Error|error:/ { if (++k <= 40) print; next }
        /^\[[#-]+\].*\| eval / { if (++k <= 40) print }
        /^\[[#-]+\]/ { last = $0 }
        END {
            for (i = 1; i <= (f < 4 ? f : 4); i++) print fr[i]
            if (f > 4) printf "final training return: mean %.2f over %d seeds\n", fs / f, f
            for (i = 1; i <= (n < 4 ? n : 4); i++) print ev[i]
            if (n > 4) printf "eval return: mean %.2f over %d seeds (min %.2f, max %.2f)\n", s / n, n, lo, hi
            if (last != "") print "last progress line: " last
        }' "$1"
}

CARTPOLE="--env-id CartPole-v1"

# ---------------------------------------------------------------------- a: the machine --
if want a; then
    say "=== [a] device check ($(date -u +%FT%TZ), smoke=$SMOKE, deadline ${DEADLINE}s, steps $STEPS)"
    say "git: $(git log -1 --format='%h %s' 2>/dev/null) $(git status --porcelain 2>/dev/null | grep -v '^??' | wc -l) modified tracked file(s)"
    { command -v nvidia-smi >/dev/null && timeout 30 nvidia-smi; } 2>&1 | tee -a "$LOG" >/dev/null
    { command -v nvidia-smi >/dev/null && timeout 30 nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader; } 2>&1 | tee -a "$LOG" >>"$SUMMARY"
    timeout 60 "$PY" -c 'import sys, jax; print(sys.version.split()[0], jax.__version__, jax.devices())' 2>&1 | tee -a "$LOG" >>"$SUMMARY"
    timeout 60 "$PY" -m pip list 2>/dev/null | grep -i -E '^(jax|jaxlib|jax-cuda.*|flax|optax|chex|numpy|scipy|typing.extensions|orbax-checkpoint|ml.dtypes|protobuf|etils|absl-py|matplotlib|seaborn|pillow) ' | tee -a "$LOG"
    if [ "$INSTALL" = 1 ]; then
        say "--- installing .whl/*.whl into $SITE and .whl-peers/*.whl into $PEERS_SITE"
        install_wheels "$SITE" .whl/*.whl
        if compgen -G ".whl-peers/*.whl" >/dev/null; then
            install_wheels "$PEERS_SITE" .whl-peers/*.whl
        fi
        say "installed: $(cd "$SITE" && ls -d *.dist-info | sed 's/\.dist-info$//' | tr '\n' ' ')"
        say "installed (peers): $(cd "$PEERS_SITE" 2>/dev/null && ls -d *.dist-info | sed 's/\.dist-info$//' | tr '\n' ' ')"
        # tyro -> typeguard needs typing_extensions >= 4.14; carried only as a fallback
        if ! PYTHONPATH=$OURS_PATH timeout 60 "$PY" -c 'import tyro' >>"$LOG" 2>&1 && compgen -G ".whl/fallback/*.whl" >/dev/null; then
            say "--- import tyro failed: installing .whl/fallback/*.whl too"
            install_wheels "$SITE" .whl/fallback/*.whl
        fi
    else
        say "--- no wheel install (GPU_SMOKE=$SMOKE, .whl/*.whl $(compgen -G '.whl/*.whl' >/dev/null && echo present || echo absent))"
    fi
fi
run_step a imports 240 ours "$PY" -c 'import importlib.metadata, jax, gymnax, distrax, tyro, tensorboardX, mujoco, optax, flax
from brax import envs
import mujoco.mjx
print("ours:", jax.__version__, jax.default_backend(), "gymnax", importlib.metadata.version("gymnax"), "mujoco", mujoco.__version__, "flax", flax.__version__, "optax", optax.__version__)'
run_step a imports_peers 120 peers "$PEERS_PY" -c 'import importlib.metadata as m, jax, gymnax, distrax, flax, optax
print("peers: jax", jax.__version__, "gymnax", m.version("gymnax"), "distrax", m.version("distrax"))'

# -------------------------------------------- o: the driver's host work between chunks --
run_step o driver_overhead 240 ours "$PY" -m benchmark.oneoff.driver_overhead --ppo-steps "$TSEEDS" \
    --dqn-steps "$TDQN_BUFFER" ${GPU_O_FLAGS:-}

# ------------------------------------------------------ c: ours vs PureJaxRL, CartPole --
for n in ${GPU_C_ENVS:-2048 8192 4}; do
    case $n in 4) t=$T4 lim=90 ;; 2048) t=$T2048 lim=90 ;; 8192) t=$T8192 lim=120 ;; esac
    run_step c "ppo_scan_${n}env" "$lim" ours "$PY" vibe_rl/ppo_jax_scan.py $CARTPOLE --num-envs "$n" \
        --total-timesteps "$t" --output-dir "$RUNS" --exp-name "ppo_scan_${n}env"
    run_step c "purejaxrl_${n}env" "$lim" peers "$PEERS_PY" benchmark/peers/purejaxrl_ppo.py $CARTPOLE \
        --num-envs "$n" --total-timesteps "$t" --output-dir "$RUNS" --exp-name "purejaxrl_${n}env"
done

# --------------------------------------------------------- d: seeds in one program --
# --num-seeds 1 at 4 envs and 250k steps is step c's 4-env pair (the same commands).
for s in ${GPU_SEEDS:-8 64}; do
    run_step d "ppo_scan_${s}seeds" 90 ours "$PY" vibe_rl/ppo_jax_scan.py $CARTPOLE --num-envs 4 \
        --total-timesteps "$TSEEDS" --num-seeds "$s" --output-dir "$RUNS" --exp-name "ppo_scan_${s}seeds"
    run_step d "purejaxrl_${s}seeds" 90 peers "$PEERS_PY" benchmark/peers/purejaxrl_ppo.py $CARTPOLE \
        --num-envs 4 --total-timesteps "$TSEEDS" --num-seeds "$s" --output-dir "$RUNS" --exp-name "purejaxrl_${s}seeds"
done

# ---------------------------------------------------------------- h: Brax hopper, PPO --
# Brax's published hopper PPO config (brax_train.py's ("ppo", "hopper"); suite.toml's brax/hopper
# entry is it at 128 envs): 2048 envs, 16 minibatches of 1024 unrolls of 20 steps (2048 x 160 per
# update), 4 epochs, lr 3e-4 constant, clip 0.3, entropy 0.01, no value or gradient clipping.
# Then Brax's own ppo.train at that config (its default for hopper) and budget, two evaluations.
run_step h brax_hopper 200 ours "$PY" vibe_rl/ppo_jax_scan.py --env-id brax/hopper --total-timesteps "$TBRAX" \
    --num-envs "$BRAX_ENVS" --num-steps 160 --num-minibatches 16 --update-epochs 4 --learning-rate 3e-4 \
    --no-anneal-lr --gamma 0.99 --gae-lambda 0.95 --ent-coef 0.01 --clip-coef 0.3 --no-clip-vloss \
    --max-grad-norm 1e9 --normalize-obs --normalize-reward --output-dir "$RUNS" --exp-name brax_hopper
run_step h brax_own_ppo_hopper 200 ours "$PY" benchmark/peers/brax_train.py --algo ppo --env-id brax/hopper \
    --total-timesteps "$TBRAX" --num-envs "$BRAX_ENVS" "${BRAX_OWN[@]}" --eval-points 2 --output-dir "$RUNS" --exp-name brax_own_hopper

# ---------------------------------------------- m: a sweep, PPO-CNN on Breakout-MinAtar --
BREAKOUT_CNN="--env-id Breakout-MinAtar --num-envs 64 --num-steps 128 --num-minibatches 8 --network cnn
    --hidden-size 128 --total-timesteps $TSWEEP"
run_step m sweep_16x4 240 ours "$PY" vibe_rl/ppo_jax_scan.py $BREAKOUT_CNN --num-seeds 4 \
    --sweep learning-rate=3e-4,1e-3 ent-coef=0.01,0.02 clip-coef=0.1,0.2 gae-lambda=0.9,0.95 \
    --output-dir "$RUNS" --exp-name sweep_16x4
run_step m sweep_one_run 120 ours "$PY" vibe_rl/ppo_jax_scan.py $BREAKOUT_CNN --learning-rate 1e-3 \
    --ent-coef 0.02 --output-dir "$RUNS" --exp-name sweep_one_run

# ------------------------------------------------ l: Craftax-1M, ours and Craftax_Baselines --
# The suite's Craftax-1M entries (benchmark/suite.toml): the paper's 1M config, 256 envs x 16 steps,
# lr 3e-4, and Craftax_Baselines' values for the rest. Their files at the same config: 5 repeats
# (their jit(vmap(train)) over 5 keys), as our 5 seeds are one program.
CRAFTAX_1M="--env-id craftax/Craftax-Symbolic-v1 --num-envs 256 --num-steps 16 --learning-rate 3e-4
    --num-minibatches 8 --update-epochs 4 --gae-lambda 0.8 --max-grad-norm 1.0 --ent-coef 0.01 --hidden-size 512"
run_step l craftax1m_ppo 240 ours "$PY" vibe_rl/ppo_jax_scan.py $CRAFTAX_1M --total-timesteps "$TCRAFTAX" \
    --num-seeds 5 --output-dir "$RUNS" --exp-name craftax1m_ppo
run_step l craftax1m_ppo_rnn 240 ours "$PY" vibe_rl/ppo_rnn_jax.py $CRAFTAX_1M --total-timesteps "$TCRAFTAX" \
    --num-seeds 5 --output-dir "$RUNS" --exp-name craftax1m_ppo_rnn
for rnn in "" --rnn; do
    VIBE_RL_PEERS_PYTHON=$PY run_step l "craftax_baselines_1m${rnn:+_rnn}" 240 ours "$PY" \
        benchmark/peers/craftax_baselines.py --env-name Craftax-Symbolic-v1 --total-timesteps "$TCRAFTAX" \
        --num-envs 256 --seeds 1 --num-repeats 5 $rnn -- --num_steps 16 --lr 3e-4
done

# ------------------------------------------------------------- n: Craftax-Symbolic-v1, 10M --
CRAFTAX_10M="--env-id craftax/Craftax-Symbolic-v1 --num-envs 1024 --num-steps 64 --learning-rate 2e-4
    --num-minibatches 8 --update-epochs 4 --gae-lambda 0.8 --max-grad-norm 1.0 --ent-coef 0.01 --hidden-size 512"
run_step n craftax10m_ppo 240 ours "$PY" vibe_rl/ppo_jax_scan.py $CRAFTAX_10M --total-timesteps "$TCRAFTAX10" \
    --output-dir "$RUNS" --exp-name craftax10m_ppo
run_step n craftax10m_ppo_rnn 240 ours "$PY" vibe_rl/ppo_rnn_jax.py $CRAFTAX_10M --total-timesteps "$TCRAFTAX10" \
    --output-dir "$RUNS" --exp-name craftax10m_ppo_rnn
VIBE_RL_PEERS_PYTHON=$PY run_step n craftax_baselines_10m 240 ours "$PY" benchmark/peers/craftax_baselines.py \
    --env-name Craftax-Symbolic-v1 --total-timesteps "$TCRAFTAX10" --num-envs 1024 --seeds 1

# ----------------------------------------------------- e: PQN, Breakout-MinAtar (suite) --
run_step e pqn_breakout 150 ours "$PY" vibe_rl/pqn_jax.py --env-id Breakout-MinAtar --total-timesteps "$TPQN" \
    --num-seeds 3 --eval-frequency "$EPQN" \
    --num-envs 32 --num-steps 32 --num-minibatches 32 --update-epochs 2 --learning-rate 5e-4 --q-lambda 0.65 \
    --exploration-fraction 0.07 --end-e 0.01 --reward-scale 1.0 --hidden-size 128 --num-chunks 25 \
    --output-dir "$RUNS" --exp-name pqn_breakout

# ----------------------------------------------------- i: DQN, Breakout-MinAtar (suite) --
run_step i dqn_breakout 150 ours "$PY" vibe_rl/dqn_jax.py --env-id Breakout-MinAtar --total-timesteps "$TDQN" \
    --num-seeds 3 --eval-frequency "$EDQN" \
    --num-envs 8 --buffer-size 100000 --batch-size 32 --learning-rate 5e-4 --train-frequency 8 \
    --target-network-frequency 8000 --learning-starts 5000 --end-e 0.01 --exploration-fraction 0.1 \
    --loss huber --double-dqn --log-frequency 8000 --num-chunks 15 --output-dir "$RUNS" --exp-name dqn_breakout

# ------------------------------------------- k: PPO-CNN, Breakout-MinAtar (suite) --
run_step k ppo_cnn_breakout 180 ours "$PY" vibe_rl/ppo_jax_scan.py --env-id Breakout-MinAtar \
    --total-timesteps "$TCNN" --num-seeds 3 --eval-frequency "$ECNN" --num-envs 64 --num-steps 128 \
    --num-minibatches 8 --learning-rate 1e-3 --ent-coef 0.02 --network cnn --hidden-size 128 \
    --output-dir "$RUNS" --exp-name ppo_cnn_breakout

# ------------------------------------------------------------------- b: the ceiling --
for n in 4 2048 8192; do
    run_step b "ceiling_$n" 60 ours "$PY" -m benchmark.ceiling $CARTPOLE --num-envs "$n" --num-steps "$CEIL_STEPS"
done

# ---------------------------------------------------- f: SAC and TD3, Pendulum (suite) --
run_step f sac_pendulum 90 ours "$PY" vibe_rl/sac_jax.py --env-id Pendulum-v1 --total-timesteps "$TSAC" \
    --output-dir "$RUNS" --exp-name sac_pendulum
run_step f td3_pendulum 90 ours "$PY" vibe_rl/td3_jax.py --env-id Pendulum-v1 --total-timesteps "$TSAC" \
    --output-dir "$RUNS" --exp-name td3_pendulum

# ----------------------------------- g: ppo_multigpu on one GPU, step c's 2048-env config --
# ppo_jax_scan at this config is step c's ppo_scan_2048env (the same flags).
run_step g multigpu_2048env 120 ours "$PY" vibe_rl/ppo_multigpu.py $CARTPOLE --num-envs 2048 \
    --total-timesteps "$T2048" --output-dir "$RUNS" --exp-name multigpu_2048env
run_step g multigpu_fsdp_2048env 120 ours "$PY" vibe_rl/ppo_multigpu.py $CARTPOLE --num-envs 2048 \
    --total-timesteps "$T2048" --fsdp --output-dir "$RUNS" --exp-name multigpu_fsdp_2048env

# ------------------------------------------------------------------------------ the end --
# The run directories' small files (no TensorBoard events, no checkpoints) come back too.
(cd "$RUNS" && find . -maxdepth 3 \( -name eval.json -o -name args.json -o -name metrics.jsonl \) -print0 |
    tar -czf "$OUT/runs.tgz" --null -T - 2>/dev/null)
say ""
say "=== done in $(($(date +%s) - START))s (deadline ${DEADLINE}s)"
echo "=== done in $(($(date +%s) - START))s" >>"$SUMMARY"
