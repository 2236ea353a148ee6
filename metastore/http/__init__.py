"""HTTP plumbing both APIs share: bodies, parameters, errors, the caller, the tenant, typed
app state, API documents.
"""
