"""Small utilities every layer may use: time, retries, logs, metrics, files, settings
rules.
"""
