"""Transport and communicator: how ranks move arrays between each other."""

from playground.comm.communicator import Communicator, PendingOp

__all__ = ["Communicator", "PendingOp"]
