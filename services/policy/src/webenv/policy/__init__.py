"""webenv policy service: chooses the next browser action for many episodes at once."""
