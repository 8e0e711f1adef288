"""The error a malformed params file raises, in a module with no imports of its own.

`finlib.core.config` (loading) and `finlib.core.params` (the schema) both raise it; defining it
here lets the schema name it without importing the loader that imports the schema.
"""
from __future__ import annotations


class ConfigError(ValueError):
    """A params file is malformed; the message names the file and the key."""
