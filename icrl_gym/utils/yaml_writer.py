"""A small block-style YAML writer: the metadata block of a model card (:mod:`icrl_gym.model_card`).

It writes mappings, sequences and scalars (null, booleans, finite numbers, strings, quoted where a
YAML reader would take them for something else); no YAML library is needed to write a card.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any

_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]*")
_RESERVED = {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "~"}


def _yaml_scalar(value: Any) -> str:
    """One YAML scalar: null, a boolean, a finite number, or a string (plain when unambiguous, else JSON-quoted).

    A JSON string literal is a valid YAML double-quoted scalar, so quoting with :func:`json.dumps`
    is always safe.
    """
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"a card's metadata holds only finite numbers, got {value!r}")
        mantissa, exponent, power = repr(value).partition("e")
        # YAML 1.1 readers (PyYAML) take "1e-05" for a string: give the mantissa a point
        return f"{mantissa}.0e{power}" if exponent and "." not in mantissa else repr(value)
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _RESERVED:
        return text
    return json.dumps(text, ensure_ascii=False)


def to_yaml(value: Mapping[str, Any] | list[Any], indent: int = 0) -> list[str]:
    """Lines of block-style YAML for a mapping or a sequence of scalars, mappings and sequences.

    Sequence items start at the indentation of their key (``tags:`` then ``- bandits``), as the
    Hub's own cards write them.
    """
    pad = " " * indent
    lines: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(item, (Mapping, list)) and item:
                lines.append(f"{pad}{_yaml_scalar(key)}:")
                lines.extend(to_yaml(item, indent + 2 if isinstance(item, Mapping) else indent))
            else:
                lines.append(f"{pad}{_yaml_scalar(key)}: {_yaml_empty(item)}")
        return lines
    for item in value:
        if isinstance(item, (Mapping, list)) and item:
            nested = to_yaml(item, indent + 2)
            lines.append(f"{pad}- {nested[0].lstrip()}")
            lines.extend(nested[1:])
        else:
            lines.append(f"{pad}- {_yaml_empty(item)}")
    return lines


def _yaml_empty(value: Any) -> str:
    """A scalar, or the flow form of an empty mapping or sequence."""
    if isinstance(value, Mapping):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _yaml_scalar(value)
