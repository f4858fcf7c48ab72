"""A name -> function table, so a config string picks an algorithm piece.

Each concept (advantage estimator, policy loss, KL estimator, aggregation mode) owns one
`Registry`; an unknown name fails with the list of valid ones so a config typo is a one-line fix.
"""

from __future__ import annotations

from typing import Callable, TypeVar

F = TypeVar("F", bound=Callable)


class Registry:
    def __init__(self, kind: str):
        self.kind = kind  # e.g. "advantage estimator"; used in error messages
        self._table: dict[str, Callable] = {}

    def register(self, name: str, *aliases: str) -> Callable[[F], F]:
        def decorator(fn: F) -> F:
            for key in (name, *aliases):
                if key in self._table:
                    raise ValueError(f"{self.kind} '{key}' is already registered")
                self._table[key] = fn
            return fn

        return decorator

    def get(self, name: str) -> Callable:
        try:
            return self._table[name]
        except KeyError:
            valid = ", ".join(self.names())
            raise KeyError(f"unknown {self.kind} '{name}'; choose one of: {valid}") from None

    def names(self) -> list[str]:
        return sorted(self._table)

    def __contains__(self, name: str) -> bool:
        return name in self._table
