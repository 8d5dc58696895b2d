"""The default run (`pytest -q`) is bound by XLA compiling many small programs, each run for a
few thousand steps: it compiles them with XLA's cheaper backend settings and without XLA
CPU's fusion emitters, in this process and in the processes it starts. That halves the
suite's compile time; the programs run up to 2x slower, which tiny runs do not feel, and
they round differently from XLA's defaults (so the tests that compare two different programs
whose bits these flags change do it to float rounding; the same program, e.g. a resumed run,
is compared bit for bit). The learning tests (`-m slow`), which train for minutes, keep XLA's defaults, as
users run them.

The scripts' persistent compilation cache is, for the tests, a fresh directory per session
(never the user's ~/.cache/vibe_rl/jax), used by the test processes themselves too: a session
compiles as on a new machine, and a program compiled once (a run stopped and resumed, a tiny
configuration two tests share, in either xdist worker) is loaded the next time."""

from __future__ import annotations

import functools
import inspect
import os
import shutil
import tempfile

import jax
import pytest

from vibe_rl.ppo_jax_scan import defer_renderer_imports

# tyro reads each dataclass's source at every parse (it clears its own caches after each call), and
# Python 3.11's inspect finds a class by parsing its whole module: ~70 ms per command line for a
# 2,300-line script. The tests parse about a thousand; each class's source is read once here.
_getsource = inspect.getsource
_class_source = functools.cache(_getsource)
inspect.getsource = lambda obj: _class_source(obj) if isinstance(obj, type) else _getsource(obj)

OWN_CACHE = pytest.StashKey[bool]()
FAST_COMPILE = (
    "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    " --xla_cpu_use_fusion_emitters=false"
)


def pytest_configure(config: pytest.Config) -> None:
    # as in the scripts (start_jax): gymnax's seaborn (pandas with it) and pyplot load when first used, which
    # no test does; 1.5-2.5 s less of each worker's collection
    defer_renderer_imports()
    if "VIBE_RL_TEST_JAX_CACHE" not in os.environ:  # xdist workers inherit the controller's
        os.environ["VIBE_RL_TEST_JAX_CACHE"] = tempfile.mkdtemp(prefix="vibe_rl-test-jax-cache-")
        config.stash[OWN_CACHE] = True
    # In this process too: a program that another test (or the other worker) compiled is loaded.
    jax.config.update("jax_compilation_cache_dir", os.environ["VIBE_RL_TEST_JAX_CACHE"])
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    flags = os.environ.get("XLA_FLAGS", "")
    if "slow" in config.option.markexpr.replace("not slow", "") or FAST_COMPILE in flags:
        return  # a learning run is compiled as a user's would be; xdist workers inherit the flags
    os.environ["XLA_FLAGS"] = f"{flags} {FAST_COMPILE}".strip()


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.stash.get(OWN_CACHE, False):
        shutil.rmtree(os.environ.pop("VIBE_RL_TEST_JAX_CACHE"), ignore_errors=True)
