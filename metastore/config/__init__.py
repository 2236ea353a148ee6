"""The node's configuration: one frozen value, read from defaults, environment and flags,
validated at startup.
"""
