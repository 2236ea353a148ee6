"""Persistence backends behind one narrow contract (``base.Persistence``).

Service code never calls a backend directly: it goes through the commit engine
(``metastore.engine.commits``) and reads through the typed object store
(``metastore.engine.objects``).
"""
