"""The network lab (lecture 5.1): ping-pong between two ranks over the real transport, our
communicator beside bare pyzmq, alpha and beta fitted and saved as this machine's calibration."""
