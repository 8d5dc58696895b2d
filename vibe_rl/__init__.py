"""vibe_rl: single-file deep RL in JAX. Each script in this folder stands alone."""
