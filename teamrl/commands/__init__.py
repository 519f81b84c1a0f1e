"""The commands beside ``teamrl train``: ``play``, ``plot``, ``report`` and the ``quickstart``
demo."""
