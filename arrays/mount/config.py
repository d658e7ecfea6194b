"""The names of a mount's file tree, and the settings of its server, held once: its command's options take
their defaults from here, and the client finds files by these names without loading the server's side."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: The name of the directory that follows the newest commit.
HEAD = "head"
#: What a file's sidecar is called after the file's own name.
SIDECAR = ".json"
#: The directory of a snapshot under which plain BigArrays appear by their path.
ARRAYS = "arrays"
#: How a mapping is read, told to the kernel: "sequential" lets it read far ahead of each fault (the mount
#: widens that read-ahead), "random" reads only the pages touched, for strided and scattered access.
Access = Literal["sequential", "random"]


@dataclass(frozen=True)
class MountConfig:
    """How often the server follows the store, and how long an unused snapshot directory stays known."""

    #: Seconds between looks at the store's last commit (how far ``head`` may lag behind a commit).
    poll: float = 0.5
    #: Seconds after which a snapshot directory nobody looked at is dropped (never ``head``'s).
    idle: float = 300.0
