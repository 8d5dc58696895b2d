"""A user's own environment, as docs/runs.md ("Your own environment") writes one: a module that any script
trains on by id, `--env-id user_envs:make_reach` (or `:make_reach_continuous`), without being edited.
tests/test_harness.py trains dqn_jax and sac_jax on them from the command line, and resumes them.

Reach: a point on a line starts at a random position in [-1, 1] and should reach 0. Each step moves it by
the action (discrete: -0.1, 0 or +0.1; continuous: 0.1 * a, a in [-1, 1]); the reward is minus its distance
to 0; the episode ends (terminated) within 0.05 of 0, and the time limit cuts it after 20 steps.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct
from gymnax.environments import environment, spaces


@struct.dataclass
class ReachState(environment.EnvState):  # gymnax's EnvState holds `time`, the steps of the episode
    position: jax.Array  # []


@struct.dataclass
class ReachParams(environment.EnvParams):
    max_steps_in_episode: int = 20  # the time limit: gymnax's is_truncated reads it


class Reach(environment.Environment):
    def __init__(self, continuous: bool):
        super().__init__()
        self.continuous = continuous

    @property
    def default_params(self) -> ReachParams:
        return ReachParams()

    def reset_env(self, key: jax.Array, params: ReachParams) -> tuple[jax.Array, ReachState]:
        state = ReachState(time=0, position=jax.random.uniform(key, (), minval=-1.0, maxval=1.0))
        return state.position[None], state

    def step_env(self, key: jax.Array, state: ReachState, action: jax.Array, params: ReachParams) -> tuple:
        move = 0.1 * jnp.clip(action[0], -1.0, 1.0) if self.continuous else 0.1 * (action - 1)
        state = ReachState(time=state.time + 1, position=state.position + move)
        terminated = jnp.abs(state.position) < 0.05
        return state.position[None], state, -jnp.abs(state.position), terminated, {}

    def action_space(self, params: ReachParams | None = None) -> spaces.Space:
        return spaces.Box(-1.0, 1.0, (1,)) if self.continuous else spaces.Discrete(3)

    def observation_space(self, params: ReachParams) -> spaces.Box:
        return spaces.Box(-jnp.inf, jnp.inf, (1,))


def make_reach() -> tuple[Reach, ReachParams]:  # the callable an id names: the env and its params
    env = Reach(continuous=False)
    return env, env.default_params


def make_reach_continuous() -> tuple[Reach, ReachParams]:
    env = Reach(continuous=True)
    return env, env.default_params


def not_an_env() -> str:  # refused: a callable that returns something else
    return "Reach"
