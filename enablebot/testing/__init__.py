"""Test and demo helpers: local HTTP servers that answer like the real services."""
