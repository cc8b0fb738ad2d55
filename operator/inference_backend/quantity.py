"""Parsing of human and Kubernetes quantities: parameter counts ("8B") and resource quantities ("64Gi", "15900m")."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

PARAMETERS_PATTERN = r"^([1-9][0-9]{0,3}(\.[0-9]{1,12})?|0\.0{0,2}[1-9][0-9]{0,11})[KMBT]$"
"""A parameter count: 1 to 4 digits (no leading zero) and up to 12 decimals (``model inspect`` prints exact counts
such as 8.030261248B), or 0.x with a non-zero digit among the first three decimals; then K, M, B or T. At least
one parameter (0.001K), below 10,000T: sizing arithmetic stays finite."""
QUANTITY_PATTERN = r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]{1,2}|Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
"""A non-negative Kubernetes quantity (k8s.io/apimachinery resource.Quantity grammar) with a decimal exponent
of at most two digits."""
QUANTITY_MAX = Decimal(2**63)
"""8Ei: quantities the CRD admits stay below it (resource.Quantity.Value() is an int64)."""
_PARAM_SCALE = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}

# Kubernetes resource.Quantity suffixes (k8s.io/apimachinery/pkg/api/resource/suffix.go).
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}
_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,2})?)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)?$"
)


def parse_parameters(text: str) -> int:
    """Parse a parameter count such as ``350M``, ``1.5B`` or ``8B`` into a number of parameters."""
    text = text.strip()
    if not re.match(PARAMETERS_PATTERN, text):
        raise ValueError(f"{text!r} is not a parameter count such as 350M, 1.5B or 70B")
    count = int(Decimal(text[:-1]) * _PARAM_SCALE[text[-1]])
    if count <= 0:
        raise ValueError(f"{text!r} is not a parameter count such as 350M, 1.5B or 70B (it rounds to 0)")
    return count


def parse_quantity(value: object) -> Decimal:
    """Parse a Kubernetes resource quantity into a plain Decimal (``"64Gi"`` -> 68719476736).

    Raises ValueError, and nothing else, for anything that is not one: booleans, non-finite floats, other types,
    malformed text and exponents beyond two digits (node lists come from anywhere)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value!r} is not a Kubernetes quantity (not finite)")
    if isinstance(value, int | float):
        return Decimal(str(value))
    match = _QUANTITY.match(value.strip())
    if not match:
        raise ValueError(f"{value!r} is not a Kubernetes quantity")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        base = Decimal(number)
    except InvalidOperation as exc:
        raise ValueError(f"{value!r} is not a Kubernetes quantity") from exc
    if not base.is_finite() or abs(base.adjusted()) > 99:
        raise ValueError(f"{value!r} is out of range for a Kubernetes quantity")
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    return base * _DECIMAL[suffix]


GIB = 2**30


def decimal_text(value: float) -> str:
    """``value`` written exactly, in plain decimal notation: the shortest digits that read back as the same float
    (Python's repr), without an exponent (1048576.0 -> "1048576", 1e-05 -> "0.00001", 0.9 -> "0.9"). Not ``:g``,
    which keeps six significant digits (1048576 -> "1.04858e+06")."""
    if not math.isfinite(value):
        raise ValueError(f"{value!r} is not a finite number")
    text = format(Decimal(repr(float(value))), "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def gib(nbytes: float) -> float:
    """Bytes to GiB, rounded to 0.1 for reports."""
    return round(nbytes / GIB, 1)
