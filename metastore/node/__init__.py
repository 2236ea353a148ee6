"""The node's wiring: the aiohttp app, its resources, the route table and its privileges,
middlewares, the server and the command line.
"""
