"""A multi-process distributed-systems playground: real collectives over ZeroMQ and systems labs."""

__version__ = "0.1.0"
