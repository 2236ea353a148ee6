"""The commit engine: commits and group commit over the persistence contract, the catalog's
objects, indexes of locations and dropped entities, leases, tasks, change events.
"""
