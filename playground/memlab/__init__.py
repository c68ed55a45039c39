"""The memory lab (seed §1.4-1.6 and §4.1-4.4): caches, strides, gathers, paging, fragmentation.

Measurement helpers call the C module `_playground_native` (see native/native.c); the models of
§4 (address translation, contiguous vs paged allocation, page-size trade-off) are pure Python so
their hand-checked cases are unit tests. Nodes in `nodes/` turn both into scenarios; each
scenario's tables, notes, checks and plot come from `<scenario>_report` here (`plots` draws them).
"""
