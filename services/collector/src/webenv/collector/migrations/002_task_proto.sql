-- The full task (serialized webenv.v1.Task, hex) on every episode, so a trace can re-open the same task
-- (its setup, its site session) when it is replayed.
ALTER TABLE {db}.episodes ADD COLUMN IF NOT EXISTS task_pb String;
