"""Output files named on the command line, checked before the work: a report or a run's results written to
a folder that does not exist or a read-only disk failed with a traceback after the work was done."""

from __future__ import annotations

import argparse
import stat
from pathlib import Path

OUTPUT_ARGUMENTS = ("json", "csv", "html", "write_fixed", "output")  # every command's file outputs


def unwritable(path: Path) -> str:
    """Why ``path`` cannot be written, in a sentence with what to do ("" when it can). Tried by opening it to
    append (nothing is truncated; a file this made is removed again); a pipe or a device is taken as it is."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        return f"cannot write {path}: {exc.strerror or exc}; choose another file."
    if mode is not None and stat.S_ISDIR(mode):
        return f"cannot write {path}: it is a folder; give a file name in it."
    if mode is not None and not stat.S_ISREG(mode):
        return ""  # /dev/stdout, a FIFO: opening one here could block
    try:
        with path.open("ab"):
            pass
    except OSError as exc:
        folder = path.parent
        why = "the folder does not exist" if not folder.is_dir() else exc.strerror or str(exc)
        return f"cannot write {path}: {why}; choose another file (nothing was run)."
    if mode is None:
        path.unlink(missing_ok=True)
    return ""


def check_outputs(args: argparse.Namespace) -> str:
    """The first output argument that cannot be written, as a sentence ("" when all can)."""
    for name in OUTPUT_ARGUMENTS:
        value = getattr(args, name, None)
        if isinstance(value, Path) and (problem := unwritable(value)):
            return problem
    return ""
