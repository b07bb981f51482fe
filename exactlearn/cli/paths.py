"""Output paths of the command line (``demo --plot FILE``, ``demo --minilm --write FILE``),
checked before any output (docs: reference/cli.md): one line, exit 2."""

from __future__ import annotations

import os


def check_output_file(path: str, option: str, bad_input) -> None:
    """``path`` names a file that can be written: not empty, not a folder, in a folder that
    exists and is writable, and not an existing file that cannot be written; otherwise
    ``bad_input`` (the caller's one-line error) naming ``option``."""
    if not path.strip():
        raise bad_input(f"{option} needs a file name, got {path!r}")
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise bad_input(f"cannot write {option} {path}: it is a folder")
    if path.endswith(("/", os.sep)) or os.path.basename(path) in (".", ".."):
        # abspath drops the slash, the "." and the "..": a folder's name, never a file's
        raise bad_input(f"cannot write {option} {path}: it names a folder, not a file")
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise bad_input(f"cannot write {option} {path}: {folder} is not a writable folder")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise bad_input(f"cannot write {option} {path}: permission denied")
