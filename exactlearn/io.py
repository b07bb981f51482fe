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
from exactlearn.limits import (MAX_ENTRY_DIGITS, MAX_JSON_OBJECTS, MAX_JSON_VALUES,
                               MAX_MODEL_FILE_BYTES, more_digits_than)


def dump_json(obj, path) -> None:
    """Write a model file (JSON, one space indent, final newline)."""
    with open(path, "w") as fh:
        json.dump(obj, fh, indent=1)
        fh.write("\n")


def load_json(path):
    """Read a JSON file, turning every failure into a one-line ModelError.

    Sizes are checked before they cost anything (docs/reference/model-files.md, "Limits"): a
    regular file larger than :data:`~exactlearn.limits.MAX_MODEL_FILE_BYTES` is refused before
    it is read, anything else (a pipe, a device) is read in chunks up to that size; a NUL
    byte (never in JSON text) stops the read at once; a text with more than
    :data:`~exactlearn.limits.MAX_JSON_VALUES` values or
    :data:`~exactlearn.limits.MAX_JSON_OBJECTS` objects, or an integer literal of more than
    :data:`~exactlearn.limits.MAX_ENTRY_DIGITS` digits, is refused before it is converted; an
    object that gives a key twice is refused.
    """
    text = _read_text(path)
    if text.count(",") >= MAX_JSON_VALUES:
        raise ModelError(f"model file {path} holds more than {MAX_JSON_VALUES} values "
                         f"(MAX_JSON_VALUES; docs/reference/model-files.md)")
    if text.count("{") > MAX_JSON_OBJECTS:
        raise ModelError(f"model file {path} holds more than {MAX_JSON_OBJECTS} JSON objects "
                         f"(MAX_JSON_OBJECTS; docs/reference/model-files.md)")
    try:
        # JSON number literals are decimals: keep their text so they are read exactly
        return json.loads(text, parse_constant=_reject_constant, parse_float=str,
                          parse_int=_parse_int, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as exc:
        raise ModelError(f"model file {path} is not valid JSON: {exc.msg} (line {exc.lineno})") from None
    except RecursionError:
        raise ModelError(f"model file {path} is nested too deeply to be a model") from None
    except MemoryError:
        raise ModelError(f"model file {path} is too large to parse in this memory") from None


_CHUNK = 1 << 20


def _read_text(path) -> str:
    """The file's text, read within :data:`MAX_MODEL_FILE_BYTES` (see :func:`load_json`)."""
    import os
    limit = MAX_MODEL_FILE_BYTES
    too_big = (f"model file {path} is larger than {limit} bytes "
               f"(MAX_MODEL_FILE_BYTES; docs/reference/model-files.md)")
    try:
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size > limit:
                raise ModelError(too_big)
            data = bytearray()
            while True:
                chunk = fh.read(min(_CHUNK, limit + 1 - len(data)))
                if not chunk:
                    break
                if b"\0" in chunk:
                    raise ModelError(f"model file {path} is not a text file (it holds a NUL byte)")
                data += chunk
                if len(data) > limit:
                    raise ModelError(too_big)
        return data.decode("utf-8")
    except FileNotFoundError:
        raise ModelError(f"model file not found: {path}") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError, OSError) as exc:
        raise ModelError(f"cannot read model file {path}: {exc.__class__.__name__}") from None


def _parse_int(text: str) -> int:
    """JSON integer literals, with their digits counted before the conversion."""
    if len(text) > MAX_ENTRY_DIGITS + 1:
        raise ModelError(f"model file: an integer of {len(text.lstrip('-'))} digits; numbers are "
                         f"limited to {MAX_ENTRY_DIGITS} digits (MAX_ENTRY_DIGITS)")
    return int(text)


def _unique_keys(pairs) -> dict:
    """A JSON object whose keys are all different (a key given twice is refused: which one
    the file meant is not ours to guess)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ModelError(f"model file: key {twice!r} is given twice in one object")
    return out


def _reject_constant(name):
    raise ModelError(f"model file: {name} is not an exact number")


def check_format(obj, expected, default=None) -> None:
    """A model file's top level: a JSON object whose ``format`` is ``expected`` (a string, or
    a tuple of the formats accepted; a missing key reads as ``default``); otherwise a
    one-line :class:`ModelError` naming every format accepted.

    >>> check_format({"format": "exactlearn.mha/1"}, "exactlearn.mha/1")
    >>> check_format([1], "exactlearn.mha/1")
    Traceback (most recent call last):
    ...
    exactlearn.errors.ModelError: model file: top level must be a JSON object
    >>> check_format({"format": "x/9"}, ("x/1", "x/2"))
    Traceback (most recent call last):
    ...
    exactlearn.errors.ModelError: model file: unknown format 'x/9' (expected 'x/1' or 'x/2')
    """
    if not isinstance(obj, dict):
        raise ModelError("model file: top level must be a JSON object")
    fmt = obj.get("format", default)
    accepted = (expected,) if isinstance(expected, str) else tuple(expected)
    if fmt not in accepted:
        raise ModelError(f"model file: unknown format {fmt!r} (expected "
                         f"{' or '.join(map(repr, accepted))})")


def exact_vector(v, n: int, what: str) -> tuple:
    """A length-n list of exact numbers as a tuple of ``mpq`` (entries as
    :func:`~exactlearn.fields.base.as_mpq` reads them); otherwise a one-line
    :class:`ModelError` that starts with ``what``."""
    if not isinstance(v, (list, tuple)) or len(v) != n:
        raise ModelError(f"{what} must be a vector of length {n}")
    out = []
    read = _READ
    for k, x in enumerate(v):
        q = read.get(x) if type(x) is str else None
        if q is not None:                   # a short text already read and checked
            out.append(q)
            continue
        try:
            q = as_mpq(x)
        except ValueError as exc:
            raise ModelError(f"{what} entry {k + 1}: {exc}") from None
        if more_digits_than(q.numerator, MAX_ENTRY_DIGITS) or \
                more_digits_than(q.denominator, MAX_ENTRY_DIGITS):
            raise ModelError(f"{what} entry {k + 1}: more than {MAX_ENTRY_DIGITS} digits "
                             f"(MAX_ENTRY_DIGITS)")          # a number, as text would be
        if type(x) is str and len(x) <= 40 and len(read) < 4096:
            read[x] = q
        out.append(q)
    return tuple(out)


#: Short entry texts :func:`exact_vector` has read (``mpq`` is immutable, and reading a text
#: is a function of the text alone): a model file repeats few distinct entries, and reading
#: each of a d = 32 file's 17,000 anew took about 0.05 s of the CLI's start.
_READ: dict = {}


def exact_matrix(A, rows: int, cols: int, what: str) -> tuple:
    """A rows x cols nested list of exact numbers as a tuple of row tuples (see
    :func:`exact_vector`).

    >>> exact_matrix([[1, "1/2"], [0, "0.25"]], 2, 2, "W")
    ((mpq(1,1), mpq(1,2)), (mpq(0,1), mpq(1,4)))
    """
    if (not isinstance(A, (list, tuple)) or len(A) != rows
            or any(not isinstance(r, (list, tuple)) or len(r) != cols for r in A)):
        raise ModelError(f"{what} must be a {rows}x{cols} matrix")
    return tuple(exact_vector(r, cols, f"{what} row {i + 1}") for i, r in enumerate(A))
