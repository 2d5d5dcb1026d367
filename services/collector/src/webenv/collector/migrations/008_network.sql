-- The farm's network trace (008): the requests an episode's pages made (CloseSessionResponse.network_events), kept
-- with the episode as a serialized webenv.v1.Trajectory holding only its network_events (hex), read back into the
-- trajectory, so a re-score grades WebArena-Verified's NetworkEventEvaluator without a browser.
ALTER TABLE {db}.episodes ADD COLUMN IF NOT EXISTS network_events_pb String
