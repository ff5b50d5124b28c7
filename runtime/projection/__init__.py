"""Projection: the bound model and the models beside it, device sets, live projection inside an app."""
