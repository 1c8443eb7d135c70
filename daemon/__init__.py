"""The Sluicegate process shell: config, store, transports, verbs, CLI, SDK."""

__version__ = "0.1.0"
