"""Suggestions for a mistyped name: the closest known one, for error messages (names and keyword arguments)."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable
from typing import Any


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the known name closest to ``name`` (difflib's ratio >= 0.6), else ``""``."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def parameter_names(func: Callable[..., Any]) -> list[str]:
    """The names ``func`` (a function or a class) takes as keywords, in its signature's order (no ``*args``)."""
    params = inspect.signature(func).parameters.values()
    return [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def check_keywords(func: Callable[..., Any], given: Iterable[str], what: str, also: Iterable[str] = ()) -> None:
    """A ``TypeError`` naming every keyword in ``given`` that ``func`` does not take, each with the closest it does.

    ``also``: further names the caller accepts (options it handles itself).  The message lists every
    accepted name, so a mistyped field of an environment or agent says what was meant.  A ``func`` that
    takes ``**kwargs`` is not checked (it decides itself).
    """
    if any(p.kind is p.VAR_KEYWORD for p in inspect.signature(func).parameters.values()):
        return
    accepted = list(dict.fromkeys([*parameter_names(func), *also]))  # once each, in order
    unknown = [key for key in given if key not in accepted]
    if unknown:
        named = "; ".join(f"{key!r}{did_you_mean(key, accepted)}" for key in unknown)
        raise TypeError(f"{what} takes no parameter {named}; it takes {', '.join(accepted)}")
