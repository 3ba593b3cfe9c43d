"""A tiny calculator: the example project `make demo` builds and tests inside a sandbox."""


def add(a, b):
    return a + b


def mul(a, b):
    return a * b


def evaluate(expr):
    """Evaluates 'a op b' for op in + and *."""
    a, op, b = expr.split()
    ops = {"+": add, "*": mul}
    if op not in ops:
        raise ValueError(f"unknown operator {op!r}")
    return ops[op](int(a), int(b))
