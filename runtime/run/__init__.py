"""``clproj run``: the app under the shim, and everything around it (runtime.run.cli)."""
