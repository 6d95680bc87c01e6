"""sealbench: measure coding agents honestly."""

__version__ = "0.1.0"
