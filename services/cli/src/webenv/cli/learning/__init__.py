"""The learning loop across the services (`webenv train`): every arrow an RPC, every number from the store.

    oracle demos (train sites) -> trainer BC (warm start, v1) -> policy LoadCheckpoint -> evaluate
    then N times: collect with the current version (train sites, sampling temperature)
                  -> judge (in the collector) -> trainer, the arm's algorithm (signals.py), from the parent
                  -> LoadCheckpoint -> evaluate (greedy)

Every checkpoint is evaluated on the suites of `SUITES`, each saying what "unseen" means for its row: validation
websites (the one the loop chooses on: the checkpoint reported is the best on validation, never on test), test
websites (new instances of known templates on websites never trained on), with `holdout_family` a site family
never trained on (its sites are left out of every training run and the trainer refuses its episodes,
TrainingData.exclude_families), and MiniWoB++ tasks the oracle solves (zero-shot: the family "miniwob" is
excluded from every training job). Policies are shown only the instruction, the observation and their own
history (`webenv.solutions`); the oracle, which is shown the solution, runs the same test tasks under the same step
caps as the ceiling of each task kind. Caps are at least the oracle's length plus `oracle_slack` (Horizons), so a
task the policy fails is one it could have solved in the steps it had.

Iterations are bounded-staleness off-policy: iteration k collects with version k, and version k+1 is
trained from k on the judged rollouts of every iteration so far plus the demonstrations (filtered BC keeps
the passed ones), so data is at most k versions old; each checkpoint records the versions its data came
from (data_policy_versions). With a few dozen successes per iteration on 2 cores, training on the last
iteration alone forgot more than it learned (measured in the first small runs: 10% -> 6.7% on test sites). Evaluation always uses the same seeded test-split
tasks, so versions are compared on the same tasks; success is read back from the stored episodes
(ReadEpisodes) grouped by policy version, with Wilson 95% intervals. The trainer is reached through
WatchJob, which is retried while the trainer restarts: a job resumes from its last resume state.

The package's rooms, one concern each (`Loop` is put together from the parts, each in its own module):

    options.py   the defaults table (LoopConfig: every option's default, `webenv train` flag, help, bounds);
                 its defaults are the reported recipe
    loop.py      Loop: the iterations, the checkpoint chosen on validation, the result
    runs.py      runs on the collector (started again after a collector restart), scored from the store
    suites.py    the evaluation suites, the baselines and the oracle's ceiling, the answer reach
    training.py  training jobs on the trainer, followed through its restarts, loaded by the policy
    starts.py    demonstrations, the BC warm start, each iteration's collection and its demo starts, the reference BC
    dyna.py      Dyna: world-model rollouts against the same budget of real ones
    records.py   Evaluation, Timing, the suites' meanings, why an episode failed
    report.py    learning.md, learning.json, learning.png
"""

from .loop import Loop
from .options import HANDMADE_FILE, RECIPE, LoopConfig
from .records import SUITES, Evaluation, Timing, reason_key, wilson
from .report import plot, write_report

__all__ = ["HANDMADE_FILE", "RECIPE", "SUITES", "Evaluation", "Loop", "LoopConfig", "Timing", "plot", "reason_key",
           "wilson", "write_report"]
