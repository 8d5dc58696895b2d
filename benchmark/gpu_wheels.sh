#!/usr/bin/env bash
# What benchmark/gpu.sh needs beside the repo on a GPU machine with no package registry, built
# here (where PyPI is reachable), into git-ignored folders of the repo root:
#
#   .whl/          Python 3.12 x86-64 wheels of what the scripts, brax_train.py and PureJaxRL's
#                  runner import and the GPU image lacks, at the versions of this venv
#   .whl-peers/    gymnax 0.0.9 (PureJaxRL's 5-value env.step), installed into its own target
#   .peers/purejaxrl/purejaxrl/{ppo,wrappers}.py   from the PureJaxRL checkout
#   .peers/craftax_baselines/   Craftax_Baselines' ppo.py, ppo_rnn.py, wrappers.py, models/, logz/
#
#   PYTHON=/work/venv/bin/python VIBE_RL_PUREJAXRL_DIR=/work/purejaxrl \
#       VIBE_RL_CRAFTAX_BASELINES_DIR=/work/craftax_baselines bash benchmark/gpu_wheels.sh
#
# Then carry them: the device tool's run with carry [".whl", ".whl-peers", ".peers"] and
# `OUT=$OUT bash benchmark/gpu.sh`. About 43 MB (mujoco-core and mujoco-studio are 22 of them).
#
# CARRY is the project's dependencies and theirs, less what the GPU image holds (the device
# tool's package list: jax and jaxlib 0.11.2, flax, optax, chex, orbax-checkpoint, numpy, scipy,
# matplotlib, seaborn, six, cloudpickle, typing-extensions, ...), less wandb (imported only with
# --track) and pygame (only for --capture-video on classic control). Checked 2026-11-26 on an
# H100: everything installed with --no-deps and imported, and every step of gpu.sh ran.

set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
: "${VIBE_RL_PUREJAXRL_DIR:?set VIBE_RL_PUREJAXRL_DIR to a PureJaxRL checkout (benchmark/peers/README.md)}"
: "${VIBE_RL_CRAFTAX_BASELINES_DIR:?set VIBE_RL_CRAFTAX_BASELINES_DIR to a Craftax_Baselines checkout (benchmark/peers/README.md)}"
CARRY="brax mujoco mujoco-core mujoco-studio mujoco-mjx glfw pyopengl websockets jaxopt ml-collections
    trimesh flask flask-cors blinker itsdangerous distrax tfp-nightly decorator gast dm-tree gymnax
    gymnasium farama-notifications tyro docstring-parser typeguard tensorboardx crc32c craftax imageio"

for folder in .whl .whl-peers .peers; do
    grep -qx "/$folder/" .git/info/exclude 2>/dev/null || echo "/$folder/" >>.git/info/exclude
done
pins=()
for name in $CARRY; do
    version=$("$PY" -m pip show "$name" 2>/dev/null | awk '/^Version:/ { print $2 }')
    [ -n "$version" ] || { echo "error: $name is not installed in $PY's environment" >&2; exit 1; }
    pins+=("$name==$version")
done
platforms=()
for tag in manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_24 \
    manylinux_2_17 manylinux2014 manylinux1; do
    platforms+=(--platform "${tag}_x86_64")
done
download() {
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        "${platforms[@]}" -d "$@"
}
rm -rf .whl .whl-peers .peers
download .whl "${pins[@]}"
download .whl-peers gymnax==0.0.9
mkdir -p .peers/purejaxrl/purejaxrl
for file in ppo.py wrappers.py; do
    cp "$VIBE_RL_PUREJAXRL_DIR/purejaxrl/$file" .peers/purejaxrl/purejaxrl/
done
mkdir -p .peers/craftax_baselines
(cd "$VIBE_RL_CRAFTAX_BASELINES_DIR" && cp -r ppo.py ppo_rnn.py wrappers.py models logz "$OLDPWD/.peers/craftax_baselines/")
echo "$(ls .whl | wc -l) wheels in .whl ($(du -sh .whl | cut -f1)), $(ls .whl-peers) in .whl-peers, PureJaxRL's files in .peers"
