"""The web console: what arrives, what is stored, what was rejected, and plots of any size, for people.

``windvane serve`` answers ``GET /`` on its HTTP port with it;
``windvane console STORE_URL`` serves the same pages for a store without
ingesting. Pages are rendered on the server (Jinja2, every value escaped);
htmx refreshes their live parts and uPlot draws plots whose points the
server chooses (:mod:`windvane.arrays.downsample`), both shipped inside the
package. :mod:`console.app` holds :class:`~console.app.Console` and lists
the routes, :mod:`console.access` who may see and do what,
:mod:`console.views` what each page reads (:class:`~console.views.Source`:
what the console looks at). This module imports only the light parts: the
command line reads :class:`ConsoleConfig` without the server.
"""

from __future__ import annotations

from .config import ConsoleConfig
from .errors import ConsoleError

__all__ = ["ConsoleConfig", "ConsoleError"]
