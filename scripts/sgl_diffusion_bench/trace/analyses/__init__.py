"""Analyses of a loaded ``Trace``: each returns plain data (dicts/lists), never prints or renders."""
