"""Sanbox: self-hosted agent computers (persistent, isolated microVMs that AI agents own)."""

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["AsyncSanbox", "Sanbox", "__version__"]

if TYPE_CHECKING:
    from .sdk import AsyncSanbox, Sanbox


def __getattr__(name: str) -> Any:  # the SDK is imported on first use, not with every submodule
    if name in ("Sanbox", "AsyncSanbox"):
        from . import sdk

        return getattr(sdk, name)
    raise AttributeError(name)
