"""webenv trainer: turns judged trajectories from the store into versioned policy checkpoints."""

__version__ = "0.1.0"
