"""TVM's ``tvm.contrib.download``: fetch a test file once into Kiln's cache.

:func:`download_testdata` keeps files under ``<KILN_CACHE_DIR>/testdata/<module>/<relpath>`` and
returns the cached copy when it is there, so a machine without network access can run a script
whose data was put in place beforehand (the conformance runner builds the tutorials' models
locally and points them at those instead).
"""

from __future__ import annotations

import shutil
import urllib.request
from pathlib import Path

from kiln.config import settings
from kiln.errors import KilnError

__all__ = ["download", "download_testdata"]


def download(url: str, path: str | Path, overwrite: bool = False, retries: int = 3) -> None:
    """Download ``url`` to ``path`` (kept when it exists, unless ``overwrite``).

    Raises
    ------
    KilnError
        Every try failed (the message has the URL and the last error).
    """
    dest = Path(path)
    if dest.is_file() and not overwrite:
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")
    last: Exception | None = None
    for _ in range(max(retries, 1)):
        try:
            with urllib.request.urlopen(url, timeout=60) as resp, open(tmp, "wb") as f:
                shutil.copyfileobj(resp, f)
            tmp.replace(dest)
            return
        except OSError as err:
            last = err
    tmp.unlink(missing_ok=True)
    raise KilnError(f"download of {url} to {dest} failed: {last}")


def download_testdata(url: str, relpath: str, module: str | list[str] | None = None,
                      overwrite: bool = False) -> str:
    """The local path of test file ``relpath``, downloaded from ``url`` on first use.

    Parameters
    ----------
    url : str
        Where the file comes from.
    relpath : str
        Its name inside the cache folder of ``module``.
    module : str or list of str, optional
        Sub-folder(s) of ``<KILN_CACHE_DIR>/testdata``.
    overwrite : bool
        Download again even when the file is cached.
    """
    folder = settings.cache_dir / "testdata"
    if isinstance(module, str):
        folder = folder / module
    elif module:
        folder = folder.joinpath(*module)
    path = folder / relpath
    download(url, path, overwrite=overwrite)
    return str(path)
