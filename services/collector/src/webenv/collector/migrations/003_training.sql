-- Provenance for learning: the policy version that chose each episode's actions ("<name>@<version>" for
-- trained checkpoints), and the element id each step's target resolved to (turns selector-addressed oracle
-- demonstrations into the element-id actions a policy sees).
ALTER TABLE {db}.episodes ADD COLUMN IF NOT EXISTS policy_version String;
ALTER TABLE {db}.steps ADD COLUMN IF NOT EXISTS target_element_id String;
