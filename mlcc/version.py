"""The package version, in a module of its own: every layer may read it without importing
the package's __init__ (which imports the api, which imports those layers)."""
__version__ = "0.1.0"
