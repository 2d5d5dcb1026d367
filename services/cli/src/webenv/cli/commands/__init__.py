"""The commands of ``webenv``, a module a command or group (assembled by ``webenv.cli.main``)."""
