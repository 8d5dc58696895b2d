"""The default run (`pytest -q`) is bound by XLA compiling many small programs, each run for a
few thousand steps: it compiles them with XLA's cheaper backend settings (about a third less
compile time). Processes the tests start inherit them. The learning tests (`-m slow`), which
train for minutes, keep XLA's defaults, as users run them."""

from __future__ import annotations

import os

import pytest

FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"


def pytest_configure(config: pytest.Config) -> None:
    flags = os.environ.get("XLA_FLAGS", "")
    if "slow" in config.option.markexpr.replace("not slow", "") or FAST_COMPILE in flags:
        return  # a learning run is compiled as a user's would be; xdist workers inherit the flags
    os.environ["XLA_FLAGS"] = f"{flags} {FAST_COMPILE}".strip()
