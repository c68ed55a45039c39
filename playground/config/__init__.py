"""A scenario's YAML turned into validated frozen dataclasses, a node's Params, and their fingerprint."""
