"""`python -m playground chaos`: short runs of drawn workloads, each hit by one fault at a drawn
moment, judged on their exit, root cause, logs, leaks and timing (docs/failures.md).

What goes where:
- kinds.py: the nouns: `FaultKind`, `Workload`, `ChaosRun`, `Observation`, `Verdict`, and under
  `--recover` `Recoverable` (a workload's faults a restart mends) and `History`;
- faults.py: `FAULTS`, every kind of fault and what it does (add a fault kind there);
- workloads.py: `WORKLOADS`, every workload, its command line, timeout, runner and judge (add a
  workload there);
- plan.py: a run drawn from the seed and its number alone (`draw`), or chosen (`outside`);
- launched.py: a launched run (`python -m playground run ...`) started, hit and observed;
- kvserver.py, kvclient.py: the standalone KV server and its client processes, hit and observed;
- checks.py: the verdict (`judge`), and what a run left behind (`leaks`);
- recovered.py: the verdict under `--recover`: the fault mended, the run read as a history;
- report.py: the table by fault kind; results.py: the results page's chaos section;
- command.py: the command: `ChaosConfig` from its flags, and the runs one after the other.
"""
