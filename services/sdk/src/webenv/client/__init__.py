"""Typed clients for webenv services: channels with the platform's defaults, the Environment client (unary calls
and the multiplexed StepStream, one step-index rule) and following a run or job to its end (``follow``/``to_end``).
The Gymnasium environment over it, ``WebEnv``, is an ecosystem adapter: `webenv.compat.gym` (libs/compat)."""

from webenv.client.channel import SERVICE_CONFIG, channel_settings, make_channel, make_sync_channel
from webenv.client.environment import EnvironmentClient, StepStream, observation_spec, open_tabs, tabs_text
from webenv.client.watch import follow, to_end

__all__ = ["SERVICE_CONFIG", "EnvironmentClient", "StepStream", "channel_settings", "follow", "make_channel",
           "make_sync_channel", "observation_spec", "open_tabs", "tabs_text", "to_end"]
