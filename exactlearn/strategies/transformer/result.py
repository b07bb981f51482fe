"""What the one-layer Transformer learner returns, and the conditions it relies on.

arXiv:2608.03294 states that a one-layer Transformer is learned up to
functional equivalence "under additional conditions", which it does not spell
out in the material available to us.  :data:`CONDITIONS` are this learner's
(docs: howto/transformer.md); every result's JSON repeats them.

C1  every neuron that matters (u_j != 0, some gamma_{jh} != 0) has
    beta_j != 0, i.e. single tokens can switch it;
C2  no two such neurons have parallel hyperplanes (beta_i || beta_j) unless
    their (gamma_{j1}, ..., gamma_{jH}) are parallel too (positively: they
    merge; negatively: they leave a linear term, written as two neurons);
C3  margin: in every cone crossed by the path some scale |M c| <= 64 * 24
    makes the final token dominate, i.e. no neuron changes sign along any query
    family of the cone's plan (checked by the cone certificate, escalated);
C4  generic draws: within a cone plan the rho of distinct heads differ and
    every c-value is nonzero (redrawn, as for attention), the path meets no
    intersection of two hyperplanes;
C5  visibility: each head read by a neuron is visible (w_h^S != 0) in a cone
    next to that neuron's kink -- implied by C1, since Delta_k carries
    u_j gamma_{jh} != 0;
C6  an ordered field: rational (exact) or real (its tolerances); at most H
    distinct W overall.

A violation that the learner detects ends in ``status = "failed"`` with the
reason; the certificate (:mod:`.certificate`) catches the rest (C1, C2 show up
only there).

>>> [c[:3] for c in CONDITIONS]
['C1:', 'C2:', 'C3:', 'C4:', 'C5:', 'C6:']
"""

from __future__ import annotations

from dataclasses import dataclass, field as dc_field

from exactlearn.fields.base import Field
from exactlearn.transformer_model import OneLayerTransformer

CONDITIONS = [
    "C1: every neuron that matters has beta_j = sum_h O_h^T b_j != 0 (single tokens switch it)",
    "C2: no two neurons have parallel beta unless their (O_h^T b_j)_h are parallel too (positively: "
    "merged; negatively: a linear term, written as two neurons)",
    "C3: margin: in each cone crossed by the path, final tokens M*c + delta with |M*c| <= 64*24 "
    "dominate the query directions in [-2,2]^d (no neuron changes sign along a query family)",
    "C4: generic draws: distinct rho per head and nonzero c-values in each cone plan; the path "
    "avoids intersections of two hyperplanes (redrawn when detected)",
    "C5: visibility: each head read by a neuron is visible in a cone next to that neuron's kink "
    "(implied by C1)",
    "C6: ordered field (rational exact, real within tolerance); at most H distinct W overall",
]


@dataclass
class TransformerLearnResult:
    """What :func:`~exactlearn.strategies.transformer.learn.learn_transformer` returns;
    ``status`` is "certified" or "failed"."""

    status: str
    model: OneLayerTransformer | None
    error: str | None
    d: int
    heads_bound: int
    field: Field
    queries: int                     # every query the black box answered (learning + certificate)
    max_length: int                  # the longest of them all
    attempts: int = 1
    learning_queries: int = 0        # kink search and cone plans, over all attempts
    learning_max_length: int = 0
    certificate_queries: int = 0     # fresh queries actually asked by the certificate
    certificate_max_length: int = 0
    learner_seconds: float = 0.0
    oracle_seconds: float = 0.0
    cones: list = dc_field(default_factory=list)
    kinks: int = 0
    observations: int = 0
    fresh_queries: list = dc_field(default_factory=list)
    fresh_kinds: dict = dc_field(default_factory=dict)
    certificate_ran: bool = False

    @property
    def certified(self) -> bool:
        return self.status == "certified"

    @property
    def heads(self) -> tuple:
        return self.model.heads if self.model is not None else ()

    def to_json(self) -> dict:
        K = self.field
        fmt = K.format
        model = self.model.to_json(fmt) if self.model is not None else None
        return {
            "status": self.status,
            "field": K.name,
            "d": self.d,
            "heads_bound": self.heads_bound,
            "canonical_heads": len(self.heads),
            "queries": self.queries,
            "max_length": self.max_length,
            "learning_queries": self.learning_queries,
            "learning_max_length": self.learning_max_length,
            "certificate_queries": self.certificate_queries,
            "certificate_max_length": self.certificate_max_length,
            "heads": model["heads"] if model else [],
            "error": self.error,
            "learner_seconds": round(self.learner_seconds, 6),
            "oracle_seconds": round(self.oracle_seconds, 6),
            "format": "exactlearn.transformer/1",
            "model": model,
            "neurons": self.model.r if self.model is not None else 0,
            "attempts": self.attempts,
            "kinks": self.kinks,
            "cones": self.cones,
            "field_info": K.describe(),
            "conditions": CONDITIONS,
            "certificate": {
                "observations": self.observations,
                "fresh_queries": len(self.fresh_queries),
                "fresh_kinds": self.fresh_kinds,
                "agreed": self.certified if self.certificate_ran else None,
                "queries": [[[fmt(a) for a in t] for t in q] for q in self.fresh_queries],
            },
        }
