"""Dimension expressions as text: "((W-1) // (4))+1", "min(N, 4)" in manifest.json (ir.symbolic's
form) and an ONNX dim_param such as "past_sequence_length + 1" (what exporters write for the
mask of a decoding step with a KV cache). One evaluator for both: integers, names, + - * // %,
unary minus, min and max, over values that support them (ints at run time, SymInts at compile
time). A leaf module like errors: it imports nothing from mlcc."""
from __future__ import annotations

import ast

_OPS = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
        ast.Mult: lambda a, b: a * b, ast.FloorDiv: lambda a, b: a // b,
        ast.Mod: lambda a, b: a % b}


def names_of(text: str) -> set[str] | None:
    """The names an expression reads, or None if `text` is not an expression of this form."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        return None
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in ("min", "max")
                    and len(node.args) == 2 and not node.keywords):
                return None
        elif isinstance(node, ast.BinOp):
            if type(node.op) not in _OPS:
                return None
        elif isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, ast.USub):
                return None
        elif isinstance(node, ast.Constant):
            if type(node.value) is not int:
                return None
        elif not isinstance(node, (ast.Expression, ast.Load, ast.operator, ast.unaryop)):
            return None
    names.discard("min")
    names.discard("max")
    return names


def eval_dim(text: str, env: dict, minmax=(min, max)):
    """The value of expression `text` with the names in `env`; `minmax`: the functions that
    min and max call (ir.symbolic's smin and smax over SymInts). ValueError if `text` is not an
    expression of this form or reads a name `env` does not hold."""
    if text in env:
        return env[text]

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name) and node.id in env:
            return env[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("min", "max") and len(node.args) == 2 and not node.keywords:
            return minmax[node.func.id == "max"](ev(node.args[0]), ev(node.args[1]))
        raise ValueError(f"dimension {text!r}")
    try:
        return ev(ast.parse(text.strip(), mode="eval"))
    except SyntaxError:
        raise ValueError(f"dimension {text!r}") from None
