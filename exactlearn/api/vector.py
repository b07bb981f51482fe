"""``learn(outputs=m)``: a box of m outputs, asked through its scalar view (docs: explanation/biases.md#vector-outputs).

The plan runs on a random combination ``r . y`` of the m outputs
(:class:`exactlearn.oracle.OutputsView`); every output's readout is then solved from the
answers recorded on the way and certified (:func:`outputs_step`), and ``verify=N``
compares every output (:func:`verify_outputs`).
"""

from __future__ import annotations

from exactlearn.errors import BadBlackBox
from exactlearn.limits import readable_int


def check_outputs(outputs, K, oracle, noise, noise_rel, snap, executor, max_height) -> None:
    """``outputs=m``: a positive int, and only where the vector step is written (one line)."""
    if isinstance(outputs, bool) or not isinstance(outputs, int) or outputs < 1:
        raise ValueError(f"outputs must be a positive integer, got {outputs!r}")
    from exactlearn.limits import MAX_OUTPUTS
    if outputs > MAX_OUTPUTS:
        raise ValueError(f"outputs = {readable_int(outputs)} is past MAX_OUTPUTS = "
                         f"{readable_int(MAX_OUTPUTS)}")
    for given, what in ((executor is not None, "executor="), (max_height is not None, "max_height="),
                        (snap, "snap=True")):
        if given:
            raise ValueError(f"outputs= is not supported yet with {what} (docs: "
                             f"explanation/biases.md#vector-outputs)")
    if K.multimodular and getattr(oracle, "over", None) is None:
        raise ValueError("outputs= over the modular field needs a box that can be asked modulo "
                         "other primes (a model's Oracle); a box fixed to one prime is not "
                         "supported yet")
    if not K.is_exact and isinstance(noise, (list, tuple)) and len(noise) != outputs:
        raise ValueError(f"noise must be one number or a list of outputs={outputs} numbers, "
                         f"got {len(noise)}")


def check_outputs_memory(d, H, outputs, K, plan, plan_queries) -> None:
    """The recorded answers of a vector box -- ``plan_queries`` (the plan's own count) times
    what the field's run asks beyond it, m values each, at the field's cost of a value
    (:func:`exactlearn.limits.outputs_memory_problem`) -- within ``MAX_PLAN_BYTES``, before
    any query (docs: reference/cli.md#limits); the run itself stops past it
    (:class:`~exactlearn.oracle.OutputsView`)."""
    from exactlearn.limits import outputs_memory_problem
    problem = outputs_memory_problem(d, H, outputs, K.name, plan_queries, plan or "paper")
    if problem is not None:
        raise ValueError(problem)


def draw_view(view, K, rng, noise, noise_rel=None):
    """Draw the combination r of an attempt (exact fields: nonzero integers; real field: a
    random unit vector, or with ``noise_rel`` one output drawn at random, so that the scalar
    view's error is that output's ``eta_k + noise_rel |y_k|``) and clear the records; returns
    the scalar view's noise ``sum_j |r_j| eta_j`` over the real field (``noise`` otherwise)."""
    from exactlearn.pipeline.outputs import draw_combination
    if K.is_exact:
        r = draw_combination(view.m, rng)
    elif noise_rel is not None:
        k = rng.randrange(view.m)
        r = [1 if j == k else 0 for j in range(view.m)]
    else:
        from exactlearn.strategies.real.outputs import draw_unit
        r = draw_unit(view.m, rng)
    view.redraw(r)
    if K.is_exact:
        return noise
    from exactlearn.strategies.real.outputs import combined_noise
    return combined_noise(K, r, noise, view.m)


def alone_note(view, message: str) -> str:
    """A failed attempt whose plan ran on one output alone (the real field with ``noise_rel``,
    declared or measured by ``noise="auto"``): which one, and that ``retries=`` draws another
    (docs: explanation/biases.md#vector-outputs); "" otherwise or when ``message`` says so."""
    if view is None or view.K.is_exact or view.m == 1 or "the plan ran on output" in message:
        return ""
    alone = [j for j, x in enumerate(view.r) if x != 0]
    if len(alone) != 1:
        return ""
    return (f" [the plan ran on output {alone[0] + 1} of {view.m} alone (a relative error "
            f"bound: noise_rel= or noise='auto'): a head whose readout in that output is 0 is "
            f"invisible there -- a degenerate draw; retries= draws another output]")


def outputs_step(recovered, view, K, d, bias, multimodular, options, noise) -> tuple:
    """Every output's readout from the answers recorded on the scalar view, certified."""
    if not K.is_exact:
        from exactlearn.strategies.real.outputs import learn_outputs_real
        return learn_outputs_real(recovered, d, view.records, K, view.m, noise,
                                  options.state.outcome, view.r, bias=bias,
                                  noise_rel=options.noise_rel)
    from exactlearn.pipeline.outputs import learn_outputs, learn_outputs_modular
    if multimodular is not None:
        return learn_outputs_modular(recovered, d, view, multimodular, view.m, bias)
    return learn_outputs(recovered, d, view.records, K, view.m, bias)


def verify_outputs(verify_box, view, heads, d, H, K, rng, R, n, real=None) -> tuple:
    """``verify=N`` for vector outputs: N fresh random queries, every output compared with
    ``==`` (exact fields) or, over the real field, within its tolerance (``real``: the
    outcome, the declared noise and noise_rel;
    :func:`~exactlearn.strategies.real.outputs_verify.verify_outputs_real`)."""
    from exactlearn.model import VectorEvaluator
    from exactlearn.errors import DegenerateDraw, FieldError
    m = view.m
    if not K.is_exact:
        from exactlearn.strategies.real.outputs_verify import verify_outputs_real
        outcome, noise, noise_rel = real
        try:
            return verify_outputs_real(verify_box, view.records, heads, d, outcome, K, m, noise,
                                       noise_rel, rng, R, n)
        except (FieldError, ValueError, TypeError, DegenerateDraw, BadBlackBox) as exc:
            return False, f"verification failed: a fresh random query could not be compared ({exc})"
    constant = getattr(heads, "constant", 0)
    if not isinstance(constant, tuple):
        constant = tuple(0 for _ in range(m))
    rows = VectorEvaluator(tuple(heads), d, K, constant).rows if heads else \
        [(lambda tokens, c=c: K(c)) for c in constant]
    for _ in range(n):
        length = rng.randint(1, 2 * H + 1)
        tokens = [tuple(rng.randint(-R, R) for _ in range(d)) for _ in range(length)]
        view.records.clear()
        try:
            verify_box(tokens)
            ys = view.records[-1][1]
            agrees = all(K.eq(ev(tokens), y) for ev, y in zip(rows, ys))
        except (FieldError, ValueError, TypeError, DegenerateDraw, BadBlackBox) as exc:
            # an answer not in the field, or not m values: a failure, as for a scalar box
            return False, f"verification failed: a fresh random query could not be compared ({exc})"
        if not agrees:
            return False, ("verification failed: a fresh random query disagrees with the certified "
                           "heads on some output")
    return True, None
