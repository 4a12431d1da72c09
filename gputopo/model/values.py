"""Typed "not available" and "failed" values.

docs/architecture.md (model/): three states never look alike. A field that the driver, the bindings or the input
cannot give is ``NotAvailable(reason)``; a call that failed is ``Failed(error)``; a number that
is numerically bad stays a number (NaN/Inf) and is judged as such. Never float NaN for "n/a".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar, Union

T = TypeVar("T")


@dataclass(frozen=True)
class NotAvailable:
    """The value does not exist here: unsupported by driver/bindings, or absent from the input."""

    reason: str

    def __str__(self) -> str:
        return "n/a"

    def __bool__(self) -> bool:  # so `if value:` never mistakes it for data
        return False

    def to_json(self) -> dict:
        return {"not_available": self.reason}


@dataclass(frozen=True)
class Failed:
    """The value should exist but reading it failed with this error message."""

    error: str

    def __str__(self) -> str:
        return "ERR"

    def __bool__(self) -> bool:
        return False

    def to_json(self) -> dict:
        return {"error": self.error}


Field = Union[T, NotAvailable, Failed]


def is_value(x: Any) -> bool:
    """True when ``x`` holds real data (not NotAvailable, not Failed, not None)."""
    return x is not None and not isinstance(x, (NotAvailable, Failed))


def field_to_json(x: Any) -> Any:
    """Encode a possibly-missing value for JSON."""
    if isinstance(x, (NotAvailable, Failed)):
        return x.to_json()
    return x


def field_from_json(x: Any) -> Any:
    """Inverse of :func:`field_to_json`."""
    if isinstance(x, dict) and len(x) == 1:
        if "not_available" in x:
            return NotAvailable(x["not_available"])
        if "error" in x:
            return Failed(x["error"])
    return x


def show(x: Any, unit: str = "") -> str:
    """Human text for a field: the value with its unit, 'n/a' or 'ERR'."""
    if isinstance(x, (NotAvailable, Failed)) or x is None:
        return "n/a" if not isinstance(x, Failed) else "ERR"
    return f"{x}{unit}"
