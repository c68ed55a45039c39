"""Transport and communicator: how ranks move arrays between each other."""

from playground.comm.communicator import Communicator, Request

__all__ = ["Communicator", "Request"]
