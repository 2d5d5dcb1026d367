"""A safe evaluator for the small `condition` expressions rubrics carry.

Rubric conditions such as ``float(text.strip('$')) < 50`` come from task files and task generators,
i.e. from data, so they are never handed to ``eval``. They are parsed with :mod:`ast`, checked
against a whitelist of node types, names, functions and string methods at compile time (anything
else raises :class:`UnsafeExpression` naming the construct), and then interpreted by walking the
tree. Work is bounded: exponents, string/list repetition and string growth are capped both when
constants make it visible at compile time and at run time.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

MAX_EXPR_CHARS = 1000
MAX_NODES = 200
MAX_EXPONENT = 64
MAX_SEQ_LEN = 100_000
MAX_INT_BITS = 4096

_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "float": float,
    "int": int,
    "str": str,
    "len": len,
    "abs": abs,
    "min": min,
    "max": max,
    "round": round,
    "bool": bool,
}

# Methods callable on str values (and only on str values).
_STR_METHODS = frozenset(
    {
        "strip", "lstrip", "rstrip", "lower", "upper", "casefold", "title", "replace", "split",
        "startswith", "endswith", "count", "find", "isdigit", "isnumeric", "isalpha", "removeprefix",
        "removesuffix",
    }
)

_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMPOPS: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: operator.contains(b, a),
    ast.NotIn: lambda a, b: not operator.contains(b, a),
}

_NODE_NAMES: dict[type[ast.AST], str] = {
    ast.Attribute: "attribute access",
    ast.Lambda: "lambda",
    ast.ListComp: "list comprehension",
    ast.SetComp: "set comprehension",
    ast.DictComp: "dict comprehension",
    ast.GeneratorExp: "generator expression",
    ast.Subscript: "subscript",
    ast.Starred: "starred expression",
    ast.NamedExpr: "assignment expression",
    ast.JoinedStr: "f-string",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.Dict: "dict display",
    ast.Set: "set display",
}


class UnsafeExpression(ValueError):
    """The expression uses something outside the whitelist (or is malformed/too large).

    ``construct`` names the offending AST node type (e.g. ``Attribute``) for error metadata;
    ``reason`` is the UPPER_SNAKE machine reason.
    """

    def __init__(self, message: str, construct: str, reason: str = "UNSAFE_CONDITION") -> None:
        super().__init__(message)
        self.construct = construct
        self.reason = reason


class EvaluationError(ValueError):
    """The expression was valid but failed on this data (e.g. ``float('abc')``, a bound hit)."""


def _node_desc(node: ast.AST) -> str:
    return _NODE_NAMES.get(type(node), type(node).__name__)


@dataclass(frozen=True)
class SafeExpression:
    """A validated expression, ready to evaluate against bound names."""

    source: str
    names: frozenset[str]
    tree: ast.Expression

    def evaluate(self, env: Mapping[str, Any]) -> Any:
        """Evaluate with the given names bound. Raises :class:`EvaluationError` on data errors."""
        try:
            return _Interpreter(env).visit(self.tree.body)
        except EvaluationError:
            raise
        except (ValueError, TypeError, ZeroDivisionError, OverflowError, IndexError, AttributeError) as exc:
            raise EvaluationError(f"{type(exc).__name__}: {exc}") from None
        except RecursionError:
            raise EvaluationError("expression too deeply nested") from None


def compile_expression(source: str, names: frozenset[str] | set[str] = frozenset({"text"})) -> SafeExpression:
    """Parse and validate ``source``; the result is cached per (source, names)."""
    return _compile_cached(source, frozenset(names))


@lru_cache(maxsize=4096)
def _compile_cached(source: str, names: frozenset[str]) -> SafeExpression:
    if len(source) > MAX_EXPR_CHARS:
        raise UnsafeExpression(
            f"expression is {len(source)} characters, more than the limit of {MAX_EXPR_CHARS}",
            "Expression",
            reason="CONDITION_TOO_LARGE",
        )
    if not source.strip():
        raise UnsafeExpression("expression is empty", "Expression", reason="INVALID_CONDITION")
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as exc:
        raise UnsafeExpression(
            f"syntax error at column {exc.offset}: {exc.msg}", "SyntaxError", reason="INVALID_CONDITION"
        ) from None
    count = sum(1 for _ in ast.walk(tree))
    if count > MAX_NODES:
        raise UnsafeExpression(
            f"expression has {count} nodes, more than the limit of {MAX_NODES}", "Expression",
            reason="CONDITION_TOO_LARGE",
        )
    _Validator(names).visit(tree.body)
    return SafeExpression(source=source, names=names, tree=tree)


def _const_value(node: ast.AST) -> Any:
    """The value of a constant-only subexpression (bounded), or None when it is not constant."""
    try:
        return _Interpreter({}).visit(node) if _is_constant(node) else None
    except (EvaluationError, ValueError, TypeError, ZeroDivisionError, OverflowError):
        return None


def _is_constant(node: ast.AST) -> bool:
    return all(not isinstance(n, (ast.Name, ast.Call)) for n in ast.walk(node))


class _Validator:
    """Walks the tree and refuses anything outside the whitelist."""

    def __init__(self, names: frozenset[str]) -> None:
        self.names = names

    def visit(self, node: ast.AST) -> None:
        method = getattr(self, f"visit_{type(node).__name__}", None)
        if method is None:
            raise UnsafeExpression(f"{_node_desc(node)} is not allowed", type(node).__name__)
        method(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if not isinstance(node.value, (str, int, float, bool, type(None))):
            raise UnsafeExpression(f"constant of type {type(node.value).__name__} is not allowed", "Constant")
        if isinstance(node.value, str) and len(node.value) > MAX_EXPR_CHARS:
            raise UnsafeExpression("string constant too long", "Constant", reason="CONDITION_TOO_LARGE")

    def visit_Name(self, node: ast.Name) -> None:
        if node.id not in self.names:
            allowed = ", ".join(sorted(self.names)) or "none"
            raise UnsafeExpression(f"name '{node.id}' is not allowed (bound names: {allowed})", "Name")

    def visit_Tuple(self, node: ast.Tuple) -> None:
        self._seq(node.elts)

    def visit_List(self, node: ast.List) -> None:
        self._seq(node.elts)

    def _seq(self, elts: list[ast.expr]) -> None:
        if len(elts) > 100:
            raise UnsafeExpression("sequence display too long", "Tuple", reason="CONDITION_TOO_LARGE")
        for e in elts:
            self.visit(e)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        for v in node.values:
            self.visit(v)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> None:
        if not isinstance(node.op, (ast.Not, ast.USub, ast.UAdd)):
            raise UnsafeExpression(f"operator {type(node.op).__name__} is not allowed", type(node.op).__name__)
        self.visit(node.operand)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self.visit(node.test)
        self.visit(node.body)
        self.visit(node.orelse)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if type(node.op) not in _BINOPS:
            raise UnsafeExpression(f"operator {type(node.op).__name__} is not allowed", type(node.op).__name__)
        self.visit(node.left)
        self.visit(node.right)
        if isinstance(node.op, ast.Pow):
            exp = _const_value(node.right)
            if _is_constant(node.right) and (exp is None or not _small_exponent(exp)):
                raise UnsafeExpression(
                    f"exponent too large (limit {MAX_EXPONENT})", "Pow", reason="EXPRESSION_TOO_COSTLY"
                )
        if isinstance(node.op, ast.Mod) and _may_be_sequence(node.left) and not isinstance(node.left, ast.Name):
            raise UnsafeExpression("string formatting with % is not allowed", "Mod")
        if isinstance(node.op, ast.Mult):
            for seq_side, n_side in ((node.left, node.right), (node.right, node.left)):
                if not (_is_constant(n_side) and _may_be_sequence(seq_side)):
                    continue
                n = _const_value(n_side)
                if n is None or (isinstance(n, int) and not isinstance(n, bool) and abs(n) > MAX_SEQ_LEN):
                    raise UnsafeExpression(
                        f"repetition count too large (limit {MAX_SEQ_LEN})", "Mult", reason="EXPRESSION_TOO_COSTLY"
                    )

    def visit_Compare(self, node: ast.Compare) -> None:
        for op in node.ops:
            if type(op) not in _CMPOPS:
                raise UnsafeExpression(f"comparison {type(op).__name__} is not allowed", type(op).__name__)
        self.visit(node.left)
        for c in node.comparators:
            self.visit(c)

    def visit_Call(self, node: ast.Call) -> None:
        if node.keywords:
            raise UnsafeExpression("keyword arguments are not allowed", "keyword")
        if isinstance(node.func, ast.Name):
            if node.func.id not in _FUNCTIONS:
                raise UnsafeExpression(
                    f"call of '{node.func.id}' is not allowed (allowed: {', '.join(sorted(_FUNCTIONS))})", "Call"
                )
        elif isinstance(node.func, ast.Attribute):
            attr = node.func.attr
            if attr.startswith("_"):
                raise UnsafeExpression(f"attribute access '{attr}' is not allowed", "Attribute")
            if attr not in _STR_METHODS:
                raise UnsafeExpression(
                    f"method '{attr}' is not allowed (allowed: {', '.join(sorted(_STR_METHODS))})", "Attribute"
                )
            self.visit(node.func.value)
        else:
            self.visit(node.func)  # names the construct when it is itself refused (e.g. a lambda)
            raise UnsafeExpression(f"call of {_node_desc(node.func)} is not allowed", "Call")
        if len(node.args) > 10:
            raise UnsafeExpression("too many arguments", "Call")
        for a in node.args:
            if isinstance(a, ast.Starred):
                raise UnsafeExpression("starred arguments are not allowed", "Starred")
            self.visit(a)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        raise UnsafeExpression(f"attribute access '{node.attr}' is not allowed", "Attribute")

    def visit_Subscript(self, node: ast.Subscript) -> None:
        # Only constant indexes/slices on values (e.g. `text.split()[0]`, `text[:3]`).
        sl = node.slice
        parts = [sl.lower, sl.upper, sl.step] if isinstance(sl, ast.Slice) else [sl]
        for p in parts:
            if p is None:
                continue
            if not (_is_constant(p) and isinstance(_const_value(p), int)):
                raise UnsafeExpression("subscript with a non-constant index is not allowed", "Subscript")
        self.visit(node.value)


_NUMERIC_FUNCS = frozenset({"float", "int", "len", "abs", "round", "bool"})


def _may_be_sequence(node: ast.AST) -> bool:
    """Whether ``node`` might evaluate to a str/list/tuple (so ``* n`` would repeat it)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, ast.Call):
        return not (isinstance(node.func, ast.Name) and node.func.id in _NUMERIC_FUNCS)
    if isinstance(node, ast.BinOp):
        return _may_be_sequence(node.left) or _may_be_sequence(node.right)
    if isinstance(node, (ast.UnaryOp, ast.Compare)):
        return False
    if isinstance(node, ast.IfExp):
        return _may_be_sequence(node.body) or _may_be_sequence(node.orelse)
    return True


def _small_exponent(exp: Any) -> bool:
    return isinstance(exp, (int, float)) and not isinstance(exp, bool) and abs(exp) <= MAX_EXPONENT


class _Interpreter:
    """Evaluates a validated tree. Runtime bounds mirror the compile-time ones."""

    def __init__(self, env: Mapping[str, Any]) -> None:
        self.env = env

    def visit(self, node: ast.AST) -> Any:
        return getattr(self, f"visit_{type(node).__name__}")(node)

    def visit_Constant(self, node: ast.Constant) -> Any:
        return node.value

    def visit_Name(self, node: ast.Name) -> Any:
        if node.id not in self.env:
            raise EvaluationError(f"name '{node.id}' is not bound")
        return self.env[node.id]

    def visit_Tuple(self, node: ast.Tuple) -> Any:
        return tuple(self.visit(e) for e in node.elts)

    def visit_List(self, node: ast.List) -> Any:
        return [self.visit(e) for e in node.elts]

    def visit_BoolOp(self, node: ast.BoolOp) -> Any:
        if isinstance(node.op, ast.And):
            result: Any = True
            for v in node.values:
                result = self.visit(v)
                if not result:
                    return result
            return result
        result = False
        for v in node.values:
            result = self.visit(v)
            if result:
                return result
        return result

    def visit_UnaryOp(self, node: ast.UnaryOp) -> Any:
        v = self.visit(node.operand)
        if isinstance(node.op, ast.Not):
            return not v
        if isinstance(node.op, ast.USub):
            return -v
        return +v

    def visit_IfExp(self, node: ast.IfExp) -> Any:
        return self.visit(node.body) if self.visit(node.test) else self.visit(node.orelse)

    def visit_BinOp(self, node: ast.BinOp) -> Any:
        left, right = self.visit(node.left), self.visit(node.right)
        if isinstance(node.op, ast.Pow):
            if not _small_exponent(right):
                raise EvaluationError(f"exponent too large (limit {MAX_EXPONENT})")
            if isinstance(left, int) and abs(left).bit_length() * abs(right) > MAX_INT_BITS:
                raise EvaluationError("power result too large")
        elif isinstance(node.op, ast.Mult):
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > MAX_SEQ_LEN:
                    raise EvaluationError(f"repetition result too large (limit {MAX_SEQ_LEN})")
        elif isinstance(node.op, ast.Mod) and isinstance(left, str):
            raise EvaluationError("string formatting with % is not allowed")
        elif isinstance(node.op, ast.Add):
            if isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
                if len(left) + len(right) > MAX_SEQ_LEN:
                    raise EvaluationError(f"concatenation result too large (limit {MAX_SEQ_LEN})")
        result = _BINOPS[type(node.op)](left, right)
        if isinstance(result, int) and result.bit_length() > MAX_INT_BITS:
            raise EvaluationError("integer result too large")
        return result

    def visit_Compare(self, node: ast.Compare) -> bool:
        left = self.visit(node.left)
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = self.visit(comp)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True

    def visit_Call(self, node: ast.Call) -> Any:
        args = [self.visit(a) for a in node.args]
        if isinstance(node.func, ast.Name):
            fn = _FUNCTIONS[node.func.id]
            if fn is int and args and isinstance(args[0], str) and len(args[0]) > 100:
                raise EvaluationError("int() of a string longer than 100 characters")
            if fn is round and len(args) > 1 and (not isinstance(args[1], int) or abs(args[1]) > 100):
                raise EvaluationError("round() digits must be an integer within +-100")
            return fn(*args)
        assert isinstance(node.func, ast.Attribute)
        target = self.visit(node.func.value)
        if not isinstance(target, str):
            raise EvaluationError(f"method '{node.func.attr}' is only allowed on strings, not {type(target).__name__}")
        if node.func.attr == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
            occurrences = target.count(args[0]) if args[0] else len(target) + 1
            if len(target) + occurrences * max(0, len(args[1]) - len(args[0])) > MAX_SEQ_LEN:
                raise EvaluationError(f"replace result too large (limit {MAX_SEQ_LEN})")
        return getattr(target, node.func.attr)(*args)

    def visit_Subscript(self, node: ast.Subscript) -> Any:
        value = self.visit(node.value)
        if not isinstance(value, (str, list, tuple)):
            raise EvaluationError(f"subscript is only allowed on strings and lists, not {type(value).__name__}")
        sl = node.slice
        if isinstance(sl, ast.Slice):
            lo = self.visit(sl.lower) if sl.lower else None
            hi = self.visit(sl.upper) if sl.upper else None
            st = self.visit(sl.step) if sl.step else None
            return value[lo:hi:st]
        return value[self.visit(sl)]
