"""webenv's client: the ``webenv`` command (``webenv.cli.main``, one module a command group in
``webenv.cli.commands``) and the workflows it drives across the services over the contract: the learning loop
(``learn``, its arms in ``signals``), the world-model build (``wmbuild``), replaying a trace (``replay``) and the
launcher of the whole local stack (``stack``)."""
