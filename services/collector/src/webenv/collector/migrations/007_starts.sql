-- Episode starts (007): an episode begun by replaying the first steps of a stored one (RunSpec.starts) records that
-- episode and how many steps were replayed, so a trainer takes none of them as the policy's.
ALTER TABLE {db}.episodes ADD COLUMN IF NOT EXISTS start_episode_id String;
ALTER TABLE {db}.episodes ADD COLUMN IF NOT EXISTS start_steps Int32
