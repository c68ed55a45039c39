"""The simulator: the real collectives on simulated ranks, in virtual time (`python -m playground simulate`).

engine.py (the discrete-event clock and a greenlet per rank), network.py (ports, links, CPUs),
transport.py (the simulator as a Transport under the ordinary Communicator), whose per-message work
is the native module's event core (native/sim_*.c); fold.py (the opt-in folded mode: one rank runs
for all when their timelines are the same), driver.py (one timed collective), options.py (the
command line, validated), model.py and crossover.py (the closed forms beside it), command.py (the
command). docs/simulator.md says where a simulated message's time goes.
"""
