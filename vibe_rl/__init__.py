# Copyright (c) 2026 the vibe_rl authors. SPDX-License-Identifier: MIT (the text: vibe_rl's LICENSE file)
"""vibe_rl: single-file deep RL in JAX. Each script in this folder stands alone."""
