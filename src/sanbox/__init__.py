"""Sanbox: self-hosted agent computers (persistent, isolated microVMs that AI agents own)."""

__version__ = "0.1.0"
