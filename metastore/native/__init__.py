"""The native API under ``/api/v1``: tenants, catalogs, entities, atomic commits, grants,
principals, events and admin jobs.
"""
