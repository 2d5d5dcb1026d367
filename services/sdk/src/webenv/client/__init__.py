"""Typed clients for webenv services."""

from webenv.client.channel import SERVICE_CONFIG, make_channel

__all__ = ["SERVICE_CONFIG", "make_channel"]
