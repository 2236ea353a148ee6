"""The Iceberg REST Catalog API: the routes, each turning an HTTP request into a call of
the Iceberg layer.
"""
