"""The concurrency labs (lecture section 3): threads vs processes, the GIL, waiting, lost updates.

`timing` keeps set service times honest on a shared machine (also used by the queueing labs),
`runners` runs one task serially, on threads or in processes with wall and CPU time,
`interleavings` enumerates every order of read/add/write steps; `concurrency_report` and
`race_report` turn the nodes' results into tables, notes and checks.
"""
