"""The command line: ``exactlearn learn | random-model | demo`` (:mod:`exactlearn.cli.main`).

``python -m exactlearn.cli`` runs it too.  The names below are those the flat
``exactlearn.cli`` module of version 0.1 offered.
"""

from exactlearn.cli.main import (FIELD_NAMES, BadInput, build_parser, field_by_name, main,
                                 make_field, random_model, summary)

__all__ = ["main", "build_parser", "BadInput", "FIELD_NAMES", "field_by_name", "make_field",
           "random_model", "summary"]
