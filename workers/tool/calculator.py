"""A calculator that evaluates arithmetic by walking the AST, never with `eval`.

Only numbers, `+ - * / // % **`, unary signs, parentheses, a short list of math
functions and the constants `pi` and `e` are accepted; every other node (names,
attributes, subscripts, comprehensions, lambdas…) is refused with a sentence that says
which. Limits on expression length, exponents and result size keep one request from
burning the worker's CPU or memory.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from contracts.tools import CALCULATOR, MAX_EXPRESSION_CHARS
from workers.tool.registry import ToolError, ToolRegistry

MAX_EXPONENT = 1000
MAX_RESULT_BITS = 4000  # about 1,200 decimal digits
MAX_DEPTH = 50

Number = int | float


class CalculatorError(ToolError):
    """The expression is not allowed or cannot be computed; the message says why."""


_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
FUNCTIONS: dict[str, Callable[..., Number]] = {
    "sqrt": math.sqrt,
    "log": math.log,
    "exp": math.exp,
    "sin": math.sin,
    "cos": math.cos,
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
}
CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}

_NORMALISE = str.maketrans({"^": "**", "×": "*", "÷": "/", "−": "-"})


def _checked(value: Any) -> Number:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise CalculatorError("the result is not a real number")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculatorError("the result is too large or undefined")
    if isinstance(value, int) and value.bit_length() > MAX_RESULT_BITS:
        raise CalculatorError("the result is too large")
    return value


def _bits(value: Number) -> int:
    return value.bit_length() if isinstance(value, int) else 0


def _power(base: Number, exponent: Number) -> Number:
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"exponent {exponent:g} is too large (limit {MAX_EXPONENT})")
    exact = isinstance(base, int) and isinstance(exponent, int) and exponent > 0
    if exact and abs(base) > 1 and math.log2(abs(base)) * exponent > MAX_RESULT_BITS:
        raise CalculatorError("the result is too large")
    result = base**exponent
    if isinstance(result, complex):
        raise CalculatorError("the result is not a real number")
    return result


def _eval(node: ast.AST, depth: int = 0) -> Number:
    if depth > MAX_DEPTH:
        raise CalculatorError("the expression is nested too deeply")
    match node:
        case ast.Expression(body=body):
            return _eval(body, depth + 1)
        case ast.Constant(value=value) if isinstance(value, int | float) and not isinstance(
            value, bool
        ):
            return _checked(value)
        case ast.Name(id=name) if name in CONSTANTS:
            return CONSTANTS[name]
        case ast.Name(id=name):
            raise CalculatorError(f"unknown name '{name}': only numbers, pi and e are allowed")
        case ast.UnaryOp(op=op, operand=operand) if type(op) in _UNARY:
            return _checked(_UNARY[type(op)](_eval(operand, depth + 1)))
        case ast.BinOp(left=left, op=op, right=right) if type(op) in _BINARY:
            a, b = _eval(left, depth + 1), _eval(right, depth + 1)
            if isinstance(op, ast.Pow):
                return _checked(_power(a, b))
            if isinstance(op, ast.Mult) and _bits(a) + _bits(b) > MAX_RESULT_BITS:
                raise CalculatorError("the result is too large")
            try:
                return _checked(_BINARY[type(op)](a, b))
            except ZeroDivisionError:
                raise CalculatorError("division by zero") from None
        case ast.Call(func=ast.Name(id=name), args=args, keywords=[]) if name in FUNCTIONS:
            values = [_eval(arg, depth + 1) for arg in args]
            try:
                return _checked(FUNCTIONS[name](*values))
            except (ValueError, TypeError, OverflowError) as exc:
                raise CalculatorError(f"{name}() cannot take {values}: {exc}") from None
        case ast.Call(func=ast.Name(id=name)):
            allowed = ", ".join(sorted(FUNCTIONS))
            raise CalculatorError(f"function '{name}' is not allowed (allowed: {allowed})")
        case ast.Attribute() | ast.Call(func=ast.Attribute()):
            raise CalculatorError("attribute access is not allowed")
        case _:
            raise CalculatorError(f"'{type(node).__name__}' is not allowed in an expression")


def evaluate(expression: str) -> Number:
    """The value of an arithmetic expression; `^` means power, as people write it."""
    text = expression.strip()
    if not text:
        raise CalculatorError("the expression is empty")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(text.translate(_NORMALISE), mode="eval")
    except SyntaxError:
        raise CalculatorError(f"'{text}' is not a valid arithmetic expression") from None
    try:
        return _eval(tree)
    except OverflowError:
        raise CalculatorError("the result is too large") from None


def format_number(value: Number) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return f"{value:.12g}"
    return str(value)


PARAMETERS: dict[str, Any] = CALCULATOR.parameters


def register_calculator(registry: ToolRegistry) -> None:
    @registry.implement(CALCULATOR)
    async def calculator(expression: str) -> str:
        return f"{expression.strip()} = {format_number(evaluate(expression))}"
