"""The simulator: the real collectives on simulated ranks, in virtual time (`python -m playground simulate`).

engine.py (the discrete-event clock and a greenlet per rank), network.py (ports, links, CPUs),
transport.py (the simulator as a Transport under the ordinary Communicator), driver.py (one timed
collective), options.py (the command line, validated), model.py and crossover.py (the closed
forms beside it), command.py (the command).
"""
