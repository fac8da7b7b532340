"""Where the sandbox's helpers are found.

Every launch helper (prlimit, setpriv, keyctl, bwrap, the network's slirp4netns, nft, ip …) is run
with ``SAFE_PATH``, never the server's own PATH, and the start-up probe looks them up there too
(``helper``), so what the probe judged is what launches run. /usr/local is root-owned as /usr is
(operators install tools there); a folder that only the server's PATH names is never trusted.
"""

from __future__ import annotations

import shutil

SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def helper(name: str) -> str | None:
    """Where a launch would find ``name`` (on SAFE_PATH), or None."""
    return shutil.which(name, path=SAFE_PATH)
