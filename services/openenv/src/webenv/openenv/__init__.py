"""webenv's OpenEnv server: catalog tasks on the browser farm behind openenv-core's HTTP and WebSocket protocol."""

__version__ = "0.1.0"
