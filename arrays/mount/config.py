"""The settings of a mount's server, held once: its command's options take their defaults from here."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MountConfig:
    """How often the server follows the store, and how long an unused snapshot directory stays known."""

    #: Seconds between looks at the store's last commit (how far ``head`` may lag behind a commit).
    poll: float = 0.5
    #: Seconds after which a snapshot directory nobody looked at is dropped (never ``head``'s).
    idle: float = 300.0
