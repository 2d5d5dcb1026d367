"""The learning loop's arms (webenv.cli.signals) against the collector's own run-spec validation (webenv.collector.spec):
each spends the same budget, shapes a run spec the collector accepts and a training job with the loop's options. It
lives here, not in services/cli, because it holds the client to another service's code."""

from __future__ import annotations

from webenv.cli.signals import ARMS
from webenv.collector import spec as specs
from webenv.v1 import collector_pb2, trainer_pb2


def test_every_arm_of_the_ablation_spends_the_same_budget_with_a_valid_spec():
    planned = {}
    for name, arm in ARMS.items():
        run = collector_pb2.RunSpec(policy="agent@2", episodes=300)
        arm.collect(run, group_size=4, branch_step=2)
        specs.validate(run)
        planned[name] = run.episodes
        job = trainer_pb2.JobSpec(data=trainer_pb2.TrainingData(filter=collector_pb2.ExportFilter(passed=True)))
        arm.job(job, step_normalize=True, kl_coef=0.2, kl_reference="agent@1")
        assert job.algorithm == arm.algorithm and job.options.step_normalize
        assert (job.options.kl_coef, job.options.kl_reference) == (0.2, "agent@1"), "the loop's --kl-coef reaches the job"
        assert job.data.filter.HasField("passed") == (name == "filtered_bc"), "only filtered BC drops the failures"
    assert set(planned.values()) == {300}, planned
    assert ARMS["branching"].branching and ARMS["group"].groups
