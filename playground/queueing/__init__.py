"""The queueing labs (lecture 2.2-2.4): a real server under open-loop load, a batching server, a
pipeline of stage processes.

The nodes (`nodes.queue`, `nodes.batching`, `nodes.pipeline`) run the processes and return raw
stamps; everything computed from those stamps lives here, so it is unit-tested on synthetic
stamps without starting a process:

- `loadgen` (open-loop client, wire format) and `batchserver` (the server loop): the I/O;
- `queue_stats`, `batching_stats`, `pipeline_stats`: stamps -> measured figures, models beside;
- `queue_report`, `batching_report`, `pipeline_report`: those figures -> tables, notes, plot.
The formulas themselves are in `playground.models.queueing` and `playground.models.pipeline`.
"""
