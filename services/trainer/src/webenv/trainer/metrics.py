"""Trainer metrics (the sdk runtime adds the per-RPC counters and latencies)."""

from prometheus_client import Counter, Gauge

JOBS = Counter("webenv_trainer_jobs_total", "Training jobs by outcome (accepted, succeeded, failed, stopped).",
               ["outcome"])
JOBS_RUNNING = Gauge("webenv_trainer_jobs_running", "Jobs loading data or training now.")
TRAIN_STEPS = Counter("webenv_trainer_steps_total", "Optimiser steps taken.")
EPISODES_READ = Counter("webenv_trainer_episodes_read_total", "Stored episodes read for training.")
EXAMPLES_PER_SECOND = Gauge("webenv_trainer_examples_per_second", "Training examples per second of the running job.")
TOKENS_PER_SECOND = Gauge("webenv_trainer_tokens_per_second", "Tokens per second of the running causal-LM job.")
CHECKPOINTS = Counter("webenv_trainer_checkpoints_total", "Checkpoints published.")
