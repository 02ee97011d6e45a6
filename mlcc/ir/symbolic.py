"""Symbolic sizes for bounded dynamic shapes (--shape x=1..8,3,32,32).

A `SymInt` is an integer expression over the model's dynamic dimensions (`DimVar`: a name and
a range lo..hi). It supports +, -, *, //, % with ints and other SymInts, and `smin` / `smax`;
every expression knows an interval [lo, hi] that holds for every size in the ranges. An
expression whose interval is one number becomes that int, so static code stays static.

Comparisons are decided by the intervals (`N >= 1` is true for N in 1..8) or by the
expressions being the same; when neither decides them (`N == 1` for N in 1..8) they raise
`SymbolicError`, which the compiler reports as "unsupported" naming the node: an operator whose
lowering would need to choose by the actual size is refused, never compiled for one size and
run at another. `int()` of a SymInt raises the same way.

The form is canonical enough for equal shapes to compare equal: a polynomial (monomial ->
coefficient) over atoms, an atom being a variable or an opaque floor division / modulo / min /
max of polynomials.
"""
from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Iterable

from ..errors import UnsupportedError


class SymbolicError(UnsupportedError):
    """A decision that depends on a dynamic size (the message names the dimension)."""


@dataclass(frozen=True)
class DimVar:
    name: str            # the ONNX dim_param, or "input:axis" when the model names none
    lo: int
    hi: int
    index: int           # position in the model's list of dynamic dimensions (the C dims[])
    step: int = 1        # every size is a multiple of step (--shape x=1,3,64..960:32)
    # a size the data decides (docs/dynamic-outputs.md): the key of Value.dyn whose run-time
    # count this is, known only once its node has run (not an entry of dims[]; count_var)
    count: str = ""

    @property
    def symbol(self) -> str:
        """The name in expressions of manifest.json: the name itself when it is an identifier
        (N, batch), else _d<index> ("p2o.DynamicDimension.1", "x:3")."""
        ok = self.name.isidentifier() and self.name not in ("min", "max")
        return self.name if ok and not self.name.startswith("_d") else f"_d{self.index}"


def count_var(key: str, maximum: int) -> DimVar:
    """The run-time count of the data-dependent size `key` (Value.dyn), 0..maximum; its index
    (negative, apart from dims[]) is a stable hash of the key, so that output is deterministic."""
    return DimVar(f"the count of {key!r}", 0, maximum, -1 - zlib.crc32(key.encode()),
                  count=key)


def _dims_entry(v: DimVar) -> str:
    if v.count:
        raise SymbolicError(f"{v.name} is known only at run time, after its node has run")
    return f"dims[{v.index}]"


# An atom: ("var", DimVar) | ("div", Poly, Poly) | ("mod", Poly, Poly) | ("min"/"max", Poly,
# Poly). A Poly: tuple of (monomial, coefficient) sorted, monomial a sorted tuple of atoms.
def _atom_key(atom) -> str:
    if atom[0] == "var":
        return f"v{atom[1].index:04d}"
    return f"{atom[0]}({_poly_key(atom[1])},{_poly_key(atom[2])})"


def _poly_key(poly) -> str:
    return "+".join(f"{c}*" + "*".join(_atom_key(a) for a in mono) for mono, c in poly)


def _norm(terms: dict) -> tuple:
    return tuple(sorted(((m, c) for m, c in terms.items() if c != 0),
                        key=lambda mc: (len(mc[0]), [_atom_key(a) for a in mc[0]])))


def _imul(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int]:
    p = [a[0] * b[0], a[0] * b[1], a[1] * b[0], a[1] * b[1]]
    return min(p), max(p)


def _atom_interval(atom) -> tuple[int, int]:
    kind = atom[0]
    if kind == "var":           # the variable's atom is size / step (an integer)
        return atom[1].lo // atom[1].step, atom[1].hi // atom[1].step
    a, b = _poly_interval(atom[1]), _poly_interval(atom[2])
    if kind == "div":          # both non-negative, divisor positive (checked when built)
        return a[0] // b[1], a[1] // b[0]
    if kind == "mod":
        return 0, b[1] - 1
    if kind == "min":
        return min(a[0], b[0]), min(a[1], b[1])
    return max(a[0], b[0]), max(a[1], b[1])


def _poly_interval(poly) -> tuple[int, int]:
    lo = hi = 0
    for mono, c in poly:
        iv = (c, c)
        for atom in mono:
            iv = _imul(iv, _atom_interval(atom))
        lo, hi = lo + iv[0], hi + iv[1]
    return lo, hi


def _bounds(d: "SymInt") -> tuple[int, int]:
    """d's interval, tightened where d divides by constants (a comparison's question): with
    floor(a / b) in [(a - b + 1) / b, a / b] (a >= 0, b > 0), a difference such as W // 2 - W
    is bounded by polynomials without the division, whose like terms cancel (scaled by the
    divisors' lcm L to stay in integers)."""
    divisors = [atom[2][0][1] for mono, _ in d.poly if len(mono) == 1
                for atom in mono if atom[0] == "div" and len(atom[2]) == 1 and not atom[2][0][0]]
    if not divisors:
        return d.lo, d.hi
    scale = math.lcm(*divisors)
    lower: dict = {}
    upper: dict = {}

    def add(terms, mono, c):
        terms[mono] = terms.get(mono, 0) + c

    for mono, c in d.poly:
        atom = mono[0] if len(mono) == 1 else None
        if atom is not None and atom[0] == "div" and len(atom[2]) == 1 and not atom[2][0][0]:
            b = atom[2][0][1]
            f = c * (scale // b)
            for m2, c2 in atom[1]:            # c floor(a / b) L between f (a - b + 1) and f a
                add(lower, m2, f * c2)
                add(upper, m2, f * c2)
            add(lower if c > 0 else upper, (), -f * (b - 1))
        else:
            add(lower, mono, c * scale)
            add(upper, mono, c * scale)
    lo2 = _poly_interval(_norm(lower))[0]
    hi2 = _poly_interval(_norm(upper))[1]
    return max(d.lo, -(-lo2 // scale)), min(d.hi, hi2 // scale)


def _has_division(poly) -> bool:
    return any(atom[0] in ("div", "mod") for mono, _ in poly for atom in mono)


def _vars_of(poly) -> list[DimVar]:
    found: dict[int, DimVar] = {}
    for mono, _ in poly:
        for atom in mono:
            if atom[0] == "var":
                found[atom[1].index] = atom[1]
            else:
                for v in _vars_of(atom[1]) + _vars_of(atom[2]):
                    found[v.index] = v
    return [found[k] for k in sorted(found)]


def _poly(x) -> tuple:
    if isinstance(x, SymInt):
        return x.poly
    return _norm({(): int(x)})


class SymInt:
    """An integer expression over dynamic dimensions (see the module's docstring)."""

    __slots__ = ("poly", "lo", "hi")

    def __init__(self, poly: tuple):
        self.poly = poly
        self.lo, self.hi = _poly_interval(poly)

    @staticmethod
    def var(v: DimVar) -> "SymInt":
        """The size of v: step x (its atom, size / step), so that divisions by the step's
        factors stay polynomials (ceil(H / 2) of H = 32 k is 16 k)."""
        return SymInt(_norm({(("var", v),): v.step}))

    @staticmethod
    def make(poly: tuple) -> "int | SymInt":
        s = SymInt(poly)
        return s.lo if s.lo == s.hi else s

    @property
    def dims(self) -> list[DimVar]:
        return _vars_of(self.poly)

    def _names(self) -> str:
        return ", ".join(f"{v.name} ({v.lo}..{v.hi}{f' step {v.step}' if v.step > 1 else ''})"
                         for v in self.dims)

    def undecided(self, what: str) -> SymbolicError:
        if any(v.count for v in self.dims):
            return SymbolicError(f"{what} depends on {self._names()}, which the data decides; "
                                 f"mlcc cannot plan it (docs/dynamic-outputs.md)")
        return SymbolicError(f"{what} depends on the size of {self._names()}; not supported "
                             f"with a dynamic size (give it a fixed --shape)")

    def _undecided_comparison(self, what: str) -> SymbolicError:
        """undecided(), with a hint where the sizes are divided: sizes that are multiples of
        the divisor (a range with a step) may make both sides one expression."""
        exc = self.undecided(what)
        if _has_division(self.poly) and any(v.step == 1 for v in self.dims):
            exc = SymbolicError(f"{exc.message}; if the sizes are multiples of a number (e.g. "
                                f"32 for a detector), a range with a step, LO..HI:STEP, may "
                                f"decide it")
        return exc

    # -- arithmetic
    def __add__(self, other):
        if not isinstance(other, (int, SymInt)):
            return NotImplemented
        terms = dict(self.poly)
        for m, c in _poly(other):
            terms[m] = terms.get(m, 0) + c
        return SymInt.make(_norm(terms))

    __radd__ = __add__

    def __neg__(self):
        return SymInt.make(_norm({m: -c for m, c in self.poly}))

    def __sub__(self, other):
        if not isinstance(other, (int, SymInt)):
            return NotImplemented
        return self + (-other)

    def __rsub__(self, other):
        return (-self) + other

    def __mul__(self, other):
        if not isinstance(other, (int, SymInt)):
            return NotImplemented
        terms: dict = {}
        for m1, c1 in self.poly:
            for m2, c2 in _poly(other):
                m = tuple(sorted(m1 + m2, key=_atom_key))
                terms[m] = terms.get(m, 0) + c1 * c2
        return SymInt.make(_norm(terms))

    __rmul__ = __mul__

    def __floordiv__(self, other):
        return _binary("div", self, other)

    def __rfloordiv__(self, other):
        return _binary("div", other, self)

    def __mod__(self, other):
        return _binary("mod", self, other)

    def __rmod__(self, other):
        return _binary("mod", other, self)

    def __rtruediv__(self, other):
        if not isinstance(other, (int, float)):
            return NotImplemented
        return FloatQuotient(float(other), self)

    # -- comparisons: decided or refused
    def _cmp(self, other, op: str) -> bool:
        if not isinstance(other, (int, SymInt)):
            return NotImplemented
        d = self - other
        lo, hi = (d, d) if isinstance(d, int) else _bounds(d)
        result = {"<": (hi < 0, lo >= 0), "<=": (hi <= 0, lo > 0), ">": (lo > 0, hi <= 0),
                  ">=": (lo >= 0, hi < 0)}[op]
        if result[0]:
            return True
        if result[1]:
            return False
        raise d._undecided_comparison(f"a comparison ({self} {op} {other})")

    def __lt__(self, other):
        return self._cmp(other, "<")

    def __le__(self, other):
        return self._cmp(other, "<=")

    def __gt__(self, other):
        return self._cmp(other, ">")

    def __ge__(self, other):
        return self._cmp(other, ">=")

    def __eq__(self, other):
        if not isinstance(other, (int, SymInt)):
            return NotImplemented
        d = self - other
        if isinstance(d, int):
            return d == 0
        lo, hi = _bounds(d)
        if lo > 0 or hi < 0:
            return False
        if lo == hi == 0:
            return True
        raise d._undecided_comparison(f"a comparison ({self} == {other})")

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self):
        return hash(_poly_key(self.poly))

    def __bool__(self):
        return bool(self != 0)

    def __int__(self):
        raise self.undecided(f"the value {self}")

    __index__ = __int__

    # -- output
    def __repr__(self):
        return _render(self.poly, lambda v: v.name, "//")

    def c_expr(self, var_name=_dims_entry) -> str:
        """The expression in C over int64_t dims (every division of non-negative values)."""
        return _render(self.poly, var_name, "/", c=True)

    def text(self) -> str:
        """The expression over the dimensions' symbols (DimVar.symbol), for manifest.json."""
        return _render(self.poly, lambda v: v.symbol, "//")

    def evaluate(self, env: dict[str, int]) -> int:
        return _eval_poly(self.poly, env)


@dataclass(frozen=True)
class FloatQuotient:
    """numerator / size as a C float computed at run time (a mean's scale, 1 / count)."""
    numerator: float
    size: SymInt

    def c_expr(self, float_literal) -> str:
        return f"{float_literal(self.numerator)} / (float)({self.size.c_expr()})"

    def __repr__(self):
        return f"{self.numerator}/({self.size!r})"


def _binary(kind: str, a, b):
    if isinstance(a, int) and isinstance(b, int):
        return a // b if kind == "div" else a % b
    pa, pb = _poly(a), _poly(b)
    ia, ib = _poly_interval(pa), _poly_interval(pb)
    if ia[1] <= 0 and ib[0] >= 1 and ia[0] < 0:
        # a non-positive numerator (the ceiling idiom -(-x // k)): floor(a / b) is
        # -ceil(-a / b), over non-negative values (C's division truncates)
        q = -_binary("div", -a + b - 1, b)
        return q if kind == "div" else a - q * b
    if ib[0] < 1 or ia[0] < 0:
        raise SymInt(pa if not isinstance(a, int) else pb).undecided(
            f"a division of values that may be negative or zero ({a} {kind} {b})")
    q = _exact_quotient(pa, pb)
    if q is not None:
        return SymInt.make(q) if kind == "div" else 0
    if isinstance(b, int) and kind == "div" and len(pa) == 1 and pa[0][1] == 1 and \
            len(pa[0][0]) == 1 and pa[0][0][0][0] == "div":
        inner = pa[0][0][0]            # (x // c) // b = x // (c * b), c and b positive
        if len(inner[2]) == 1 and not inner[2][0][0]:
            return _binary("div", SymInt(inner[1]), inner[2][0][1] * b)
    if isinstance(b, int):
        if kind == "div" and all(c % b == 0 for m, c in pa if m):
            # (b X + c) // b = X + c // b for any integer X
            return SymInt.make(_norm({m: c // b for m, c in pa if m})) + _norm_const(pa) // b
        if kind == "mod" and all(c % b == 0 for m, c in pa if m):
            return _norm_const(pa) % b
        if ia[0] // b == ia[1] // b:
            q = ia[0] // b
            if kind == "div":
                return q
            return a - q * b
    return SymInt.make(_norm({((kind, pa, pb),): 1}))


def _exact_quotient(pa, pb):
    """pa / pb when pb is one term that divides every term of pa exactly, or when pa is an
    integer multiple of pb ((64 P + 64) / (16 P + 16) = 4), else None."""
    if len(pb) != 1:
        ta, tb = dict(pa), dict(pb)
        if set(ta) != set(tb) or any(ta[m] % tb[m] for m in tb):
            return None
        ratios = {ta[m] // tb[m] for m in tb}
        return _norm({(): ratios.pop()}) if len(ratios) == 1 else None
    mono_b, cb = pb[0]
    terms = {}
    for mono, c in pa:
        rest = list(mono)
        for atom in mono_b:
            if atom not in rest:
                return None
            rest.remove(atom)
        if c % cb:
            return None
        terms[tuple(rest)] = c // cb
    return _norm(terms)


def _norm_const(poly) -> int:
    return next((c for m, c in poly if not m), 0)


def smin(a, b):
    return _minmax("min", a, b)


def smax(a, b):
    return _minmax("max", a, b)


def _minmax(kind: str, a, b):
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b) if kind == "min" else max(a, b)
    d = a - b
    lo, hi = (d, d) if isinstance(d, int) else (d.lo, d.hi)
    if hi <= 0:
        return a if kind == "min" else b
    if lo >= 0:
        return b if kind == "min" else a
    return SymInt.make(_norm({((kind, _poly(a), _poly(b)),): 1}))


def _render(poly, var_name, div: str, c: bool = False) -> str:
    if not poly:
        return "0"
    parts = []
    for mono, coef in sorted(poly, key=lambda mc: (len(mc[0]) == 0,)):
        factors = []
        for a in mono:
            if a[0] == "var" and a[1].step > 1 and coef % a[1].step == 0:
                coef //= a[1].step          # step x (size / step) is the size itself
                factors.append(var_name(a[1]))
            elif a[0] == "var" and a[1].step > 1:
                factors.append(f"({var_name(a[1])} {div} {a[1].step})")
            else:
                factors.append(_render_atom(a, var_name, div, c))
        if abs(coef) != 1 or not factors:
            factors = [str(abs(coef))] + factors
        text = "*".join(factors)
        parts.append(("-" if coef < 0 else "+") + text)
    out = "".join(parts)
    return out[1:] if out.startswith("+") else out


def _render_atom(atom, var_name, div: str, c: bool) -> str:
    kind = atom[0]
    if kind == "var":
        return var_name(atom[1])
    a, b = _render(atom[1], var_name, div, c), _render(atom[2], var_name, div, c)
    if kind in ("div", "mod"):
        return f"(({a}) {div if kind == 'div' else '%'} ({b}))"
    if c:
        x, y = f"({a})", f"({b})"
        return f"({x} {'<' if kind == 'min' else '>'} {y} ? {x} : {y})"
    return f"{kind}({a}, {b})"


def _eval_atom(atom, env) -> int:
    if atom[0] == "var":
        return int(env[atom[1].name]) // atom[1].step
    a, b = _eval_poly(atom[1], env), _eval_poly(atom[2], env)
    return {"div": lambda: a // b, "mod": lambda: a % b, "min": lambda: min(a, b),
            "max": lambda: max(a, b)}[atom[0]]()


def _eval_poly(poly, env) -> int:
    total = 0
    for mono, coef in poly:
        term = coef
        for atom in mono:
            term *= _eval_atom(atom, env)
        total += term
    return total


# -- helpers for code that handles shapes holding SymInts

def is_symbolic(x) -> bool:
    """Whether x (an int, a SymInt, or a nested list/tuple/dict of them) holds a SymInt."""
    if isinstance(x, (SymInt, FloatQuotient)):
        return True
    if isinstance(x, dict):
        return any(is_symbolic(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return any(is_symbolic(v) for v in x)
    return False


def as_dim(x) -> "int | SymInt":
    """A dimension read from a shape array: a SymInt as it is, anything else as an int."""
    return x if isinstance(x, SymInt) else int(x)


def same_shape(a, b) -> bool:
    """Shapes equal at every size (a pass's question; never raises: when sizes decide it,
    the shapes are not the same)."""
    if a is None or b is None or len(a) != len(b):
        return a is None and b is None
    return all(isinstance(x - y, int) and x - y == 0 for x, y in zip(a, b))


def is_one(d) -> bool:
    """d is the static size 1 (a dynamic size never counts as one, even if its range has 1)."""
    return isinstance(d, int) and d == 1


def upper(x) -> int:
    """The largest value x takes over the ranges (x itself for an int)."""
    return x.hi if isinstance(x, SymInt) else int(x)


def evaluate(x, env: dict[str, int]):
    """x (an int, a SymInt or a nested list/tuple of them) at the sizes in env."""
    if isinstance(x, SymInt):
        return x.evaluate(env)
    if isinstance(x, (list, tuple)):
        return type(x)(evaluate(v, env) for v in x)
    return x


def prod(values: Iterable) -> "int | SymInt":
    out: int | SymInt = 1
    for v in values:
        out = out * v
    return out


def dim_vars(x) -> list[DimVar]:
    """The dynamic dimensions x (nested) depends on, in index order."""
    found: dict[int, DimVar] = {}
    if isinstance(x, SymInt):
        for v in x.dims:
            found[v.index] = v
    elif isinstance(x, dict):
        for y in x.values():
            for v in dim_vars(y):
                found[v.index] = v
    elif isinstance(x, (list, tuple)):
        for y in x:
            for v in dim_vars(y):
                found[v.index] = v
    return [found[k] for k in sorted(found)]
