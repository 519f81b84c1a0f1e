"""teamrl: train teams of LLM agents to cooperate with multi-agent RL."""

__version__ = "0.1.0"
