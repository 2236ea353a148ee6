"""The data model: keys, the stored records and their Avro codec, the commit index, ids,
changes and their preconditions, names and locations.
"""
