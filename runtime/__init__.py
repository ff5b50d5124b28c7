"""Projection model, ranking, broker/node routing, partition advisor and further models."""
