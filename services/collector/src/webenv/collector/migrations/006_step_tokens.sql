-- What a policy-gradient trainer needs from each stored step (006): the prompt's token count, the generated
-- token ids and their logprobs as the policy sampled them, and the policy (or LoRA adapter) version that chose
-- the step (an episode may span a hot checkpoint swap).
ALTER TABLE {db}.steps ADD COLUMN IF NOT EXISTS prompt_tokens Int32;
ALTER TABLE {db}.steps ADD COLUMN IF NOT EXISTS completion_token_ids Array(Int32);
ALTER TABLE {db}.steps ADD COLUMN IF NOT EXISTS completion_logprobs Array(Float32);
ALTER TABLE {db}.steps ADD COLUMN IF NOT EXISTS policy_version String
