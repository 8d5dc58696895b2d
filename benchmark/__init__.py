"""Benchmarks of the vibe_rl scripts: learning checks, speed, ceilings, peers."""
