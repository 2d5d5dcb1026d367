"""webenv collector: asynchronous rollouts, the trajectory store, the Redis work queue, export, replay, CLI."""

__version__ = "0.1.0"
