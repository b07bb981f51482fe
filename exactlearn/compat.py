"""The module paths of exactlearn 0.1, kept working (docs: explanation/algorithm.md#how-it-works).

exactlearn 0.1 was a flat package (``exactlearn.learner``,
``exactlearn.learn_real``, ``exactlearn.plan``, ...).  Its modules now live in
layers -- ``algebra``, ``fields``, ``pipeline``, ``strategies``, ``cli``,
``demo`` -- and these old paths remain importable: ``import
exactlearn.learner`` gives a thin module that looks each name up in the
modules that now hold it.  New code should import from the new places (or
from ``exactlearn`` itself).

>>> from exactlearn.learner import learn, LearnResult
>>> from exactlearn.plan import paper_count
>>> import exactlearn.learn_real as lr
>>> learn.__module__, paper_count(2, 1), lr.max_parameter_error.__name__
('exactlearn.api', 15, 'max_parameter_error')
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types

#: old module -> the modules that now hold its public names (searched in order)
MOVED = {
    "exactlearn.learner": ("exactlearn.api", "exactlearn.oracle", "exactlearn.pipeline.analysis",
                           "exactlearn.pipeline.plan", "exactlearn.errors"),
    "exactlearn.learn_real": ("exactlearn.strategies.real.learn", "exactlearn.strategies.real",
                              "exactlearn.strategies.real.fit", "exactlearn.pipeline.plan",
                              "exactlearn.model", "exactlearn.errors"),
    "exactlearn.learn_efficient": ("exactlearn.strategies.efficient.learn",
                                   "exactlearn.strategies.efficient", "exactlearn.errors"),
    "exactlearn.plan_efficient": ("exactlearn.strategies.efficient.plan",),
    "exactlearn.snap": ("exactlearn.strategies.real.snap", "exactlearn.algebra.rationals"),
    "exactlearn.transformer_learn": ("exactlearn.strategies.transformer.learn",
                                     "exactlearn.strategies.transformer",
                                     "exactlearn.strategies.transformer.cones",
                                     "exactlearn.cli.transformer", "exactlearn.transformer_model",
                                     "exactlearn.errors"),
    "exactlearn.transformer": ("exactlearn.transformer_model", "exactlearn.oracle", "exactlearn.errors"),
    "exactlearn.plan": ("exactlearn.pipeline.plan",),
    "exactlearn.interpolate": ("exactlearn.pipeline.interpolate", "exactlearn.algebra.cauchy",
                               "exactlearn.errors"),
    "exactlearn.match": ("exactlearn.pipeline.match", "exactlearn.errors"),
    "exactlearn.solve": ("exactlearn.pipeline.solve",),
    "exactlearn.certify": ("exactlearn.pipeline.certify", "exactlearn.errors"),
    "exactlearn.multimodular": ("exactlearn.pipeline.multimodular", "exactlearn.errors"),
    "exactlearn.polys": ("exactlearn.algebra.polys",),
    "exactlearn.linalg": ("exactlearn.algebra.linalg", "exactlearn.errors"),
    "exactlearn.cli_real": ("exactlearn.cli.real",),
    "exactlearn.demo_symbolic": ("exactlearn.demo.symbolic",),
    "exactlearn.minilm": ("exactlearn.demo.minilm",),
}

#: names that changed on the way
RENAMED = {
    "exactlearn.learner": {"Degenerate": "DegenerateDraw", "_Recorder": "Recorder",
                           "over_analysis_fields": "over_analysis_fields"},
    "exactlearn.learn_real": {"fit_family": "fit_family_with_sensitivities"},
    "exactlearn.learn_efficient": {"fit_family": "poles_through_limit", "Degenerate": "DegenerateDraw"},
    "exactlearn.transformer_learn": {"Degenerate": "DegenerateDraw"},
}


class _Moved(types.ModuleType):
    """An old module path: each attribute is looked up in the modules that now hold it."""

    def __init__(self, name, targets):
        super().__init__(name, f"exactlearn 0.1 module path; now in {', '.join(targets)}")
        self.__targets = targets

    def __getattr__(self, attr):
        wanted = RENAMED.get(self.__name__, {}).get(attr, attr)
        for target in self.__targets:
            module = importlib.import_module(target)
            if hasattr(module, wanted):
                return getattr(module, wanted)
        raise AttributeError(f"module {self.__name__!r} (now {self.__targets[0]!r}) has no "
                             f"attribute {attr!r}")

    def _public(self) -> list:
        names = set(RENAMED.get(self.__name__, {}))
        for target in self.__targets:
            module = importlib.import_module(target)
            names.update(getattr(module, "__all__", None)
                         or (n for n in vars(module) if not n.startswith("_")))
        return sorted(names)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._public()))

    @property
    def __all__(self):                    # ``from exactlearn.learner import *`` works
        return self._public()


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return _Moved(spec.name, MOVED[spec.name])

    def exec_module(self, module):
        pass


def install() -> None:
    """Make the old module paths importable (done once, by ``import exactlearn``)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
