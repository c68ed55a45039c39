"""Several hosts on one machine: an emulated cluster for `run --hosts K --link RATE[,delay=D]`.

topology.py  pure: block placement of ranks on hosts, the link (rate, delay), names, addresses, tbf
netns.py     the harness: a run's namespaces, veth pairs, bridge and qdiscs; entering a namespace;
             sweeping what a SIGKILLed launcher left
drills.py    the launcher's side of host faults: cut a link, kill a host, at a time or on request

Between hosts, ranks talk tcp over the veth links (shaped by tbf); inside a host, ipc (or tcp with
transport: tcp). A link's delay is added by the sending rank's transport (comm/delay.py): this kernel
has no netem.
"""
