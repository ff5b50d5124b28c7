"""Mini-emulation: run part of a kernel launch in Oclgrind and collect device-independent statistics."""
