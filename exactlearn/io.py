"""Model files: exact JSON in and out (docs: reference/model-files.md).

Both formats (``exactlearn.mha/1`` for multi-head attention,
``exactlearn.transformer/1`` for the one-layer Transformer) are JSON objects;
their parsers live with the models (:meth:`MultiHeadAttention.from_json
<exactlearn.model.MultiHeadAttention.from_json>`, :meth:`OneLayerTransformer.from_json
<exactlearn.transformer_model.OneLayerTransformer.from_json>`).  Number literals
are read as their decimal text, so ``0.1`` is exactly 1/10; every failure to
read becomes a one-line :class:`~exactlearn.errors.ModelError`.
"""

from __future__ import annotations

import json

from exactlearn.errors import ModelError
from exactlearn.fields.base import as_mpq


def dump_json(obj, path) -> None:
    """Write a model file (JSON, one space indent, final newline)."""
    with open(path, "w") as fh:
        json.dump(obj, fh, indent=1)
        fh.write("\n")


def load_json(path):
    """Read a JSON file, turning every failure into a one-line ModelError."""
    try:
        with open(path) as fh:
            text = fh.read()
    except FileNotFoundError:
        raise ModelError(f"model file not found: {path}") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError, OSError) as exc:
        raise ModelError(f"cannot read model file {path}: {exc.__class__.__name__}") from None
    try:
        # JSON number literals are decimals: keep their text so they are read exactly
        return json.loads(text, parse_constant=_reject_constant, parse_float=str)
    except json.JSONDecodeError as exc:
        raise ModelError(f"model file {path} is not valid JSON: {exc.msg} (line {exc.lineno})") from None
    except RecursionError:
        raise ModelError(f"model file {path} is nested too deeply to be a model") from None


def _reject_constant(name):
    raise ModelError(f"model file: {name} is not an exact number")


def check_format(obj, expected: str, default=None) -> None:
    """A model file's top level: a JSON object whose ``format`` is ``expected`` (a missing
    key reads as ``default``); otherwise a one-line :class:`ModelError`.

    >>> check_format({"format": "exactlearn.mha/1"}, "exactlearn.mha/1")
    >>> check_format([1], "exactlearn.mha/1")
    Traceback (most recent call last):
    ...
    exactlearn.errors.ModelError: model file: top level must be a JSON object
    """
    if not isinstance(obj, dict):
        raise ModelError("model file: top level must be a JSON object")
    fmt = obj.get("format", default)
    if fmt != expected:
        raise ModelError(f"model file: unknown format {fmt!r} (expected {expected!r})")


def exact_vector(v, n: int, what: str) -> tuple:
    """A length-n list of exact numbers as a tuple of ``mpq`` (entries as
    :func:`~exactlearn.fields.base.as_mpq` reads them); otherwise a one-line
    :class:`ModelError` that starts with ``what``."""
    if not isinstance(v, (list, tuple)) or len(v) != n:
        raise ModelError(f"{what} must be a vector of length {n}")
    try:
        return tuple(as_mpq(x) for x in v)
    except ValueError as exc:
        raise ModelError(f"{what} entry: {exc}") from None


def exact_matrix(A, rows: int, cols: int, what: str) -> tuple:
    """A rows x cols nested list of exact numbers as a tuple of row tuples (see
    :func:`exact_vector`).

    >>> exact_matrix([[1, "1/2"], [0, "0.25"]], 2, 2, "W")
    ((mpq(1,1), mpq(1,2)), (mpq(0,1), mpq(1,4)))
    """
    if (not isinstance(A, (list, tuple)) or len(A) != rows
            or any(not isinstance(r, (list, tuple)) or len(r) != cols for r in A)):
        raise ModelError(f"{what} must be a {rows}x{cols} matrix")
    return tuple(exact_vector(r, cols, what) for r in A)
