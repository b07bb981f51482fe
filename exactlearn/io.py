"""Model files: exact JSON in and out (README, "Model files").

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
