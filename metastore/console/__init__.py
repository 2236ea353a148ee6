"""The web console: static pages the node serves at ``/`` for people who would rather
look than read. It is a client of the node's own APIs like any other (the browser
calls the native and Iceberg APIs with the signed-in principal's token), so it can
show nothing its principal could not read through the APIs."""
