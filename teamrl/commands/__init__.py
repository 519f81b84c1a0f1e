"""The commands beside ``teamrl train``: ``play``, ``plot`` and the ``quickstart`` demo."""
