"""OpenCL microbenchmarks (our own; SHOC is the inspiration) that measure device profiles.

One module per family: ``gmem`` (global memory), ``lmem`` (local memory), ``compute``
(instruction classes), ``overhead`` (launch, transfers); ``runner`` assembles a profile.
Every benchmark verifies its result before its time counts (``common.GarbageResult``).
"""
