"""The command line: ``exactlearn learn | random-model | demo`` (:mod:`exactlearn.cli.main`)."""

from exactlearn.cli.main import main

__all__ = ["main"]
