"""The webenv gateway: the contract over HTTP/JSON, live streams over WebSocket, and the web console."""

__version__ = "0.1.0"
