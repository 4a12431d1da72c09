"""PCI addresses in one canonical form, so NVML's, sysfs's and lspci's spellings compare equal.

NVML writes an 8-digit domain in upper case (``00000000:07:00.0``), lspci and sysfs a 4-digit
one in lower case (``0000:07:00.0``), old tools none at all (``07:00.0``).
"""

from __future__ import annotations

import re
from typing import Optional

#: domain:bus:device.function, domain 4 to 8 hex digits.
BDF_RE = re.compile(r"^([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")


def bus_key(bus_id: str) -> str:
    """Canonical PCI address, sysfs/lspci form: ``"00000000:07:00.0"`` -> ``"0000:07:00.0"``.

    NVML writes an 8-digit domain in upper case, lspci and sysfs a 4-digit one in lower case;
    compare addresses only through this. Raises ValueError for text that is not an address.
    """
    text = str(bus_id).strip()
    m = BDF_RE.match(text)
    if not m:
        m2 = re.match(r"^([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$", text)
        if not m2:
            raise ValueError(f"not a PCI address: {bus_id!r}")
        return f"0000:{m2.group(1).lower()}:{m2.group(2).lower()}.{m2.group(3)}"
    domain = int(m.group(1), 16)
    return f"{domain:04x}:{m.group(2).lower()}:{m.group(3).lower()}.{m.group(4)}"


def try_bus_key(bus_id) -> Optional[str]:
    """:func:`bus_key`, or None when ``bus_id`` is not an address (e.g. a NotAvailable)."""
    if not isinstance(bus_id, str):
        return None
    try:
        return bus_key(bus_id)
    except ValueError:
        return None


def short_bus_id(bus_id) -> str:
    """'00000000:07:00.0' / '0000:07:00.0' / '07:00.0' -> '07:00.0' (case-folded), for comparing
    addresses of one host (the domain dropped); any other text is only case-folded."""
    s = str(bus_id).lower()
    return s.split(":", 1)[1] if s.count(":") == 2 else s
