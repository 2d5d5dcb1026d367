-- What a step-by-step replay of an episode needs beyond the target element (003): the observation's interactive
-- elements with their boxes (JSON, protobuf JSON mapping), when the run kept ELEMENTS, so a viewer can mark the
-- element an action addressed on the step's screenshot.
ALTER TABLE {db}.steps ADD COLUMN IF NOT EXISTS elements_json String
