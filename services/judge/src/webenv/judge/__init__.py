"""webenv judge: grades trajectories against fact-group rubrics (deterministic criteria + LLM facts)."""

__version__ = "0.1.0"
