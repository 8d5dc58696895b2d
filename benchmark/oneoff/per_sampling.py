"""Prioritized replay's sampling inside a compiled loop: a sum tree in fixed arrays against a cumulative
sum searched per batch, at a replay capacity R, as rainbow_jax.py's gradient step uses them.

Each way runs `--steps` gradient steps' worth of replay work in one jax.lax.scan: sample B indices in
proportion to their priorities, then set those B priorities anew (and, as each env step does, enter
one new transition at the maximum priority). The scan is compiled once and timed after, best of the
rounds, the ways interleaved; it prints microseconds per gradient step.

    python -m benchmark.oneoff.per_sampling --capacities 100000 1000000 --batch-size 32
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp


class SumTree(NamedTuple):
    nodes: jax.Array  # [2P] node i sums nodes 2i and 2i + 1; the leaves are nodes [P, P + R)


def tree_update(tree: SumTree, capacity: int, rows: jax.Array, mass: jax.Array) -> SumTree:
    """Set the leaves of rows [B] to mass [B], then each level's parents from their two children."""
    leaves = tree.nodes.shape[0] // 2
    nodes, index = tree.nodes.at[leaves + rows].set(mass), leaves + rows
    for _ in range(int(math.log2(leaves))):
        index = index // 2
        nodes = nodes.at[index].set(nodes[2 * index] + nodes[2 * index + 1])
    return SumTree(nodes)


def tree_sample(tree: SumTree, key: jax.Array, batch: int) -> jax.Array:
    """B rows, the i-th drawn within the i-th of B equal slices of the total mass (stratified)."""
    leaves, total = tree.nodes.shape[0] // 2, tree.nodes[1]
    target = (jnp.arange(batch) + jax.random.uniform(key, (batch,))) * total / batch  # [B]

    def descend(_: int, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        index, target = carry
        left = tree.nodes[2 * index]
        right = target >= left
        return 2 * index + right, jnp.where(right, target - left, target)

    index, _ = jax.lax.fori_loop(0, int(math.log2(leaves)), descend, (jnp.ones(batch, jnp.int32), target))
    return index - leaves


def cumsum_sample(mass: jax.Array, key: jax.Array, batch: int) -> jax.Array:
    cdf = jnp.cumsum(mass)  # [R]
    target = (jnp.arange(batch) + jax.random.uniform(key, (batch,))) * cdf[-1] / batch
    return jnp.minimum(jnp.searchsorted(cdf, target, side="right"), mass.shape[0] - 1)


def program(way: str, capacity: int, batch: int, steps: int) -> Callable[[jax.Array], jax.Array]:
    leaves = 1 << math.ceil(math.log2(capacity))

    def step(carry: tuple, index: jax.Array) -> tuple[tuple, None]:
        store, highest, key = carry  # highest: the largest priority so far, a new transition's
        key, sample_key, priority_key = jax.random.split(key, 3)
        new = jax.random.uniform(priority_key, (batch,)) + 0.01  # [B] the batch's new priorities
        highest = jnp.maximum(highest, new.max())
        if way == "sum tree":
            rows = tree_sample(store, sample_key, batch)
            store = tree_update(store, capacity, rows, new)
            store = tree_update(store, capacity, (index % capacity)[None], highest[None])
        else:
            rows = cumsum_sample(store, sample_key, batch)
            store = store.at[rows].set(new).at[index % capacity].set(highest)
        return (store, highest, key), None

    def run(key: jax.Array) -> jax.Array:
        if way == "sum tree":
            store = tree_update(
                SumTree(jnp.zeros(2 * leaves)), capacity, jnp.arange(capacity), jnp.ones(capacity)
            )
        else:
            store = jnp.ones(capacity)
        (store, _, _), _ = jax.lax.scan(step, (store, jnp.float32(1), key), jnp.arange(steps))
        return store.nodes[1] if way == "sum tree" else store.sum()

    return jax.jit(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacities", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps", type=int, default=2000, help="gradient steps timed per call")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"jax {jax.__version__} on {jax.default_backend()}; B = {args.batch_size}; best of {args.rounds}")
    for capacity in args.capacities:
        ways = {way: program(way, capacity, args.batch_size, args.steps) for way in ("sum tree", "cumsum")}
        for run in ways.values():
            run(jax.random.PRNGKey(0)).block_until_ready()  # compiled
        best = dict.fromkeys(ways, math.inf)
        for r in range(args.rounds):
            for way, run in ways.items():
                start = time.perf_counter()
                run(jax.random.PRNGKey(r)).block_until_ready()
                best[way] = min(best[way], time.perf_counter() - start)
        row = ", ".join(f"{way} {1e6 * s / args.steps:.1f} us" for way, s in best.items())
        print(f"R = {capacity:,}: {row} per gradient step ({best['cumsum'] / best['sum tree']:.2f}x)")


if __name__ == "__main__":
    main()
