"""Errors a user can cause: each message is one line naming the field or file and the value."""


class ConfigError(ValueError):
    """A config value is unknown, has the wrong type, or is out of range."""
