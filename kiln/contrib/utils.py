"""``tvm.contrib.utils``: the temporary folder TVM scripts export libraries into.

Example, as TVM's tutorials write it::

    temp = utils.tempdir()
    path = temp.relpath("deploy.so")
    lib.export_library(path)
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

__all__ = ["TempDirectory", "tempdir"]


class TempDirectory:
    """A temporary folder, removed with :meth:`remove` or when the object is collected.

    Parameters
    ----------
    custom_path : str or Path, optional
        Use this folder (created if missing) instead of a new one; it is then never removed.
    keep_for_debug : bool
        Keep a new folder instead of removing it.

    Attributes
    ----------
    temp_dir : str
        The folder's path.
    """

    def __init__(self, custom_path: str | Path | None = None, keep_for_debug: bool = False):
        if custom_path is not None:
            Path(custom_path).mkdir(parents=True, exist_ok=True)
            self.temp_dir = str(Path(custom_path).resolve())
        else:
            self.temp_dir = tempfile.mkdtemp(prefix="kiln-")
        self._owned = custom_path is None and not keep_for_debug

    @property
    def path(self) -> Path:
        """The folder as a :class:`pathlib.Path` (TVM's ``TempDirectory.path``)."""
        return Path(self.temp_dir)

    def relpath(self, name: str) -> str:
        """The path of ``name`` inside the folder."""
        return str(Path(self.temp_dir) / name)

    def listdir(self) -> list[str]:
        """Names of the entries in the folder."""
        return sorted(p.name for p in Path(self.temp_dir).iterdir())

    def remove(self) -> None:
        """Delete the folder and everything in it (a folder given as ``custom_path`` stays)."""
        if getattr(self, "_owned", False):
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self._owned = False

    def __enter__(self) -> TempDirectory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __del__(self) -> None:
        self.remove()

    def __repr__(self) -> str:
        return f"TempDirectory({self.temp_dir!r})"


def tempdir(custom_path: str | Path | None = None, keep_for_debug: bool = False) -> TempDirectory:
    """A new temporary folder (see :class:`TempDirectory`)."""
    return TempDirectory(custom_path, keep_for_debug)
