"""Route mode: the Python side of the shim's virtual OpenCL platform (native/shim/route.c).

One job per module: ``platform`` (entry: op -> handler, start and exit), ``state`` (the
Route object), ``objects`` (contexts, queues, buffers, programs, kernels, events),
``info`` (clGet*Info answers), ``device`` (the virtual device, combined from the
cluster's), ``kernel_meta`` (real kernels' arguments), ``encode`` (info value bytes),
``programs``, ``buffers``, ``transfers``, ``enqueue`` (launches), ``events``, ``held``
(commands held back for user events), ``callbacks`` (clSetEventCallback's thread),
``summary`` (the end-of-run table), ``signals`` (the app's signal handlers, deferred
while a call runs), ``local_cluster``, ``errors``.
"""
