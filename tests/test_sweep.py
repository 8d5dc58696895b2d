"""--sweep: a grid of configurations trained with the seeds as one program per set of static values.

The traced flags (each script's Hyperparameters) are values in a run's state: a run whose state
holds other values trains exactly as a run built with those flags. The runs here are the
contract's tiny ones (tests/test_contract.py): they check the mechanism, not learning.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pytest
import tyro
from _helpers import load_script, tree_equal
from test_contract import SCRIPTS


def trained(algo, state):
    """The state after every iteration of the algorithm's plan."""
    return jax.jit(lambda s: jax.lax.scan(algo.iteration, s, jnp.arange(algo.num_iterations))[0])(state)


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_a_run_trains_with_the_traced_values_its_state_holds(name):
    module = load_script(name)
    base = tyro.cli(module.Args, args=[f for f in SCRIPTS[name].run if f != "--normalize-obs"])
    traced = module.Hyperparameters._fields
    assert "learning_rate" in traced or {"policy_lr", "q_lr"} <= set(traced)
    # every traced flag 10% off: inside every flag's allowed range (probabilities, coefficients, ...)
    other = dataclasses.replace(base, **{n: 0.9 * getattr(base, n) or 0.01 for n in traced})
    built, key = module.make_algorithm(other), jax.random.PRNGKey(0)
    algo = module.make_algorithm(base)
    swapped = trained(algo, algo.init(key)._replace(hyper=module.hyperparameters(other)))
    assert tree_equal(swapped, trained(built, built.init(key)))  # a flag read as a constant would differ
    assert not tree_equal(swapped, trained(algo, algo.init(key)))  # the values do reach the training
