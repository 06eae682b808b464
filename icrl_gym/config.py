"""The configuration contract: every configuration dataclass is a :class:`DictConfig` with checked fields.

- :class:`DictConfig`: a JSON-ready dict and back, unknown keys an error (never silently dropped);
- :class:`Allowed` and :func:`check_fields`: what a field accepts (a number in a range, one of a few
  words, or a pattern), and one ``ValueError`` that names every refused field, its value and the rule;
  :func:`checked` declares a field's rule beside its default (what ``check_fields(config)`` checks);
- :class:`Choice`: the base of the enumerations of a field that takes one of a few words (the spec kinds).
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

T = TypeVar("T")
C = TypeVar("C", bound="DictConfig")  # typing.Self needs Python 3.11; the package supports 3.10
E = TypeVar("E", bound="Choice")


class Choice(str, Enum):
    """One of a few words a field takes, as an enumeration whose members are the words themselves.

    A member is a ``str`` equal to its word (``BanditReward.BERNOULLI == "bernoulli"``), written to
    JSON as the word and shown as the word (``str``, ``format`` and ``repr``), so records, configs and
    messages read as they did with plain strings (``enum.StrEnum`` needs Python 3.11).
    """

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, format_spec: str) -> str:
        return format(str(self.value), format_spec)

    def __repr__(self) -> str:
        return repr(str(self.value))

    @classmethod
    def words(cls) -> tuple[str, ...]:
        """The allowed words, in the order of the members."""
        return tuple(str(member.value) for member in cls)

    @classmethod
    def lookup(cls: type[E], value: Any) -> E | None:
        """The member ``value`` names (a member or its word), None for anything else."""
        if isinstance(value, cls):
            return value
        return cls._value2member_map_.get(value) if isinstance(value, str) else None  # type: ignore[return-value]

    @classmethod
    def parse(cls: type[E], field: str, value: Any) -> E:
        """The member ``value`` names; a ``ValueError`` naming ``field``, the value and the allowed words otherwise."""
        member = cls.lookup(value)
        if member is None:
            raise ValueError(cls.problem(field, value))
        return member

    @classmethod
    def problem(cls, field: str, value: Any) -> str:
        """The message of a refused ``value`` of ``field``."""
        return f"{field} must be one of {cls.words()}, got {value!r}"


def dataclass_from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Build dataclass ``cls`` from ``data``; unknown keys are an error, not silently dropped."""
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} fields {unknown}; known fields are {sorted(known)}")
    return cls(**data)


class DictConfig:
    """Mixin of the configuration dataclasses: a JSON-ready dict and back, unknown keys an error."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable fields."""
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any]) -> C:
        """Inverse of :meth:`to_dict` (unknown keys are an error, not silently dropped)."""
        return dataclass_from_dict(cls, data)


@dataclass(frozen=True)
class Allowed:
    """The values a configuration field accepts: a number in a range, one of a few words, or a pattern."""

    low: float = -math.inf
    """Smallest allowed number (excluded when ``strict``)."""
    high: float = math.inf
    """Largest allowed number."""
    strict: bool = False
    """Whether ``low`` itself is refused."""
    integer: bool = False
    """Whether the number must be an int."""
    choices: tuple[str, ...] = ()
    """The allowed words (then the bounds do not apply)."""
    pattern: str = ""
    """A regular expression the whole string must match, described by ``text``."""
    text: str = ""
    """How the allowed values read in the error (for ``pattern``)."""

    def admits(self, value: Any) -> bool:
        """Whether ``value`` is allowed (never a bool for a number, never NaN or an infinity)."""
        if self.choices:
            return value in self.choices
        if self.pattern:
            return isinstance(value, str) and re.fullmatch(self.pattern, value) is not None
        kind = int if self.integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value):
            return False
        return (value > self.low if self.strict else value >= self.low) and value <= self.high

    def __str__(self) -> str:
        if self.choices:
            return "one of " + ", ".join(map(repr, self.choices))
        if self.pattern:
            return self.text or f"a string matching {self.pattern!r}"
        what = "an integer" if self.integer else "a finite number"
        low, high = (self._shown(self.low), self._shown(self.high))
        if self.low > -math.inf and self.high < math.inf:
            return f"{what} in {'(' if self.strict else '['}{low}, {high}]"
        if self.low > -math.inf:
            return f"{what} {'>' if self.strict else '>='} {low}"
        return f"{what} <= {high}" if self.high < math.inf else what

    def _shown(self, bound: float) -> str:
        """A bound as the error shows it: an integer field's in full (2**63 - 1 is not 9.22337e+18)."""
        return str(int(bound)) if self.integer and math.isfinite(bound) else f"{bound:g}"


POSITIVE_INT = Allowed(low=1, integer=True)
NONNEGATIVE_INT = Allowed(low=0, integer=True)
POSITIVE = Allowed(low=0, strict=True)
NONNEGATIVE = Allowed(low=0)
PROBABILITY = Allowed(low=0, high=1)
"""A probability or a fraction: a number in [0, 1]."""
DEVICE = Allowed(pattern=r"auto|cpu|mps|cuda(:\d+)?", text="'auto', 'cpu', 'mps', 'cuda' or 'cuda:N'")


def checked(default: T, rule: Allowed) -> T:
    """A dataclass field with ``default`` whose values ``rule`` allows (checked by ``check_fields(config)``)."""
    return dataclasses.field(default=default, metadata={"rule": rule})


def declared_rules(config: Any) -> dict[str, Allowed]:
    """The rule of every field of dataclass ``config`` declared with :func:`checked`, in the order of the fields.

    A subclass that declares a field again only to change its default keeps the rule of the class
    that declared it with one.
    """
    rules = {}
    for f in dataclasses.fields(config):
        for cls in type(config).__mro__:
            own = vars(cls).get("__dataclass_fields__", {}).get(f.name)
            if own is not None and "rule" in own.metadata:
                rules[f.name] = own.metadata["rule"]
                break
    return rules


def check_fields(config: Any, allowed: dict[str, Allowed] | None = None) -> None:
    """One ``ValueError`` naming every field of ``config`` that ``allowed`` refuses, its value and what is allowed.

    ``allowed`` maps a field to its rule; by default the rules ``config``'s fields declare (:func:`declared_rules`).
    """
    if allowed is None:
        allowed = declared_rules(config)
    name = type(config).__name__
    problems = [
        f"{name}.{field} must be {rule}, got {getattr(config, field)!r}"
        for field, rule in allowed.items()
        if not rule.admits(getattr(config, field))
    ]
    if problems:
        raise ValueError("; ".join(problems))
