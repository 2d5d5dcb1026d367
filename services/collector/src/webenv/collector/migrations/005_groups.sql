-- Group rollouts and branching (005): the group an episode was collected in (a group run's draw, or a branching
-- run's anchor episode), and for a fork its anchor episode and the step it was forked at, so a trainer compares
-- the rollouts of one task, or the continuations from one state.
ALTER TABLE {db}.episodes ADD COLUMN IF NOT EXISTS group_id String;
ALTER TABLE {db}.episodes ADD COLUMN IF NOT EXISTS parent_episode_id String;
ALTER TABLE {db}.episodes ADD COLUMN IF NOT EXISTS branch_step Int32
