"""Writing a file whole or not at all.

Records, blobs, cached projections, bench results and worker results are read by other
processes (a node, a later run, the parent of a killed worker) that must never see half a
file: each is written to a unique temporary file in the target's folder, then renamed over
the target, which POSIX makes atomic within one file system.
"""

from __future__ import annotations

import os
import tempfile
import threading


def write_atomic(path: str, data: bytes, private: bool = False) -> None:
    """Write ``data`` to ``path``: whole or absent, also with concurrent writers (threads of
    a recorded app, two processes) or a writer killed part-way. The file is readable by its
    owner only when ``private`` (launch records and their buffer blobs hold the app's data),
    else as the umask lets ``open()`` make it."""
    if private:  # mkstemp makes it 0600
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".tmp-")
    else:  # unique per process and thread; the mode is what the umask leaves of 0666
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
