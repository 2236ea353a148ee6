"""Apache Iceberg over the catalog service: table and view metadata, files, commits and
rebases (routes: ``routes``).
"""
