"""Entry points above the engine: the session database, dispatcher, process runner."""
