"""The catalog service: tenants, catalogs and their entities over the commit engine, with
quotas, consistency tokens and expiry.
"""
