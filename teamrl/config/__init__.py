"""The run's configuration: the typed schema, its sections and fields, their rules and the
reference generated from their help strings. ``from teamrl.config import load_config, Config``
is the import users and the rest of teamrl use; the modules beside this face hold the parts."""

from teamrl.config.schema import (
    BUILTIN_CONFIGS,
    AgentConfig,
    AlgorithmConfig,
    Config,
    ConfigError,
    DistributedConfig,
    EndpointConfig,
    EnvConfig,
    EvalConfig,
    GenerationConfig,
    LogConfig,
    ModelConfig,
    TeamConfig,
    TrainConfig,
    agent_setting,
    check_max_turns,
    dump_config,
    from_dict,
    load_config,
    to_dict,
)

__all__ = [
    "BUILTIN_CONFIGS",
    "AgentConfig",
    "AlgorithmConfig",
    "Config",
    "ConfigError",
    "DistributedConfig",
    "EndpointConfig",
    "EnvConfig",
    "EvalConfig",
    "GenerationConfig",
    "LogConfig",
    "ModelConfig",
    "TeamConfig",
    "TrainConfig",
    "agent_setting",
    "check_max_turns",
    "dump_config",
    "from_dict",
    "load_config",
    "to_dict",
]
