"""ZConfig support: the ``<neostore>`` storage section (see component.xml).

A ZODB configuration file imports it with ``%import windvane.neostore``; ZConfig
then builds a :class:`NeoStorageFactory`, and ZODB calls its ``open()``.
"""

from __future__ import annotations

from typing import Any

from ZODB.config import BaseConfig


class NeoStorageFactory(BaseConfig):  # type: ignore[misc]  # ZODB is untyped
    """The ``<neostore>`` section: ``open()`` returns a :class:`neostore.zodb.NeoStorage`."""

    # Optional keys passed on to NeoStorage only when the section sets them,
    # so the Store's own defaults stay the single source of truth.
    _OPTIONAL = ("name", "compression_level", "compression_threads", "commit_lock_timeout")

    def open(self) -> Any:
        """A new NeoStorage for the section's URL and options."""
        from .zodb import NeoStorage

        config = self.config
        options: dict[str, Any] = {"read_only": config.read_only, "pack_gc": config.pack_gc}
        for key in self._OPTIONAL:
            value = getattr(config, key, None)
            if value is not None:
                options[key] = value
        return NeoStorage(config.url, **options)
