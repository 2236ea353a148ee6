"""Where a catalog's tables keep their files, and how the server and clients reach them:
settings, credentials, vending, remote signing.
"""
