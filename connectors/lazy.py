"""Packages whose heavy parts are imported on first use, so that their configuration stays light to import."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_attributes(package: str, where: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` that imports each name of ``where`` from the submodule
    it maps to on first use (``{"ForwardServer": "server"}``)."""

    def __getattr__(name: str) -> Any:
        try:
            module = where[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    return __getattr__
