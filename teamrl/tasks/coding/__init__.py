"""Coding tasks: helper + main functions (MAGRPO) and coder + unit tester (AT-GRPO)."""
