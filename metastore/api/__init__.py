"""The HTTP API (aiohttp): the native API under /api/v1 and health."""
