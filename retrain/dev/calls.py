"""The AWS API calls a Lambda handler can make, found by reading its package's source (no import, no stack).

`handler_calls` follows the calls from a handler through the package's modules (functions, methods,
classes, function references handed to libraries), binds arguments to parameters at every call site,
and reports each boto3 client call with its keyword arguments resolved as far as the source allows:
to the environment variable they come from (through `<package>.config.from_environ`), a constant, or
Unknown with the expression that could not be resolved.
"""

from __future__ import annotations

import ast
import builtins
import functools
import gzip
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, TypeAlias

import botocore

_MAX_DEPTH = 48  # calls deep; the package's real chains are under 10
_FAR: tuple[int, int] = (1 << 30, 0)  # a position after every statement of a file
_STUB_PREFIXES = ("mypy_boto3_", "types_boto3_")  # the annotation packages that name client types


@dataclass(frozen=True)
class Env:
    """A value the function reads from its environment."""

    variable: str


@dataclass(frozen=True)
class Const:
    """A value written in the source (non-string literals as their `str`)."""

    value: str


@dataclass(frozen=True)
class Unknown:
    """A value not resolvable statically; `expression` is the source text, for messages."""

    expression: str


ValueSource: TypeAlias = Env | Const | Unknown


@dataclass(frozen=True)
class Call:
    """One AWS API call reachable from a handler."""

    service: str  # boto3 service name
    operation: str  # botocore operation name
    params: Mapping[str, ValueSource] = field(hash=False)  # every keyword argument, resolved
    where: str  # "functions/controller/ledger.py:88"
    chain: tuple[str, ...]  # qualified functions from the handler down to the call


class ExtractionError(Exception):
    """The handler, or a module it reaches, cannot be found or parsed."""


# --- Values the analysis tracks besides Env, Const and Unknown -----------------------------------------


@dataclass(frozen=True)
class _Client:
    service: str


@dataclass(frozen=True)
class _Paginator:
    service: str
    method: str  # snake_case, as given to get_paginator


@dataclass(frozen=True)
class _Config:
    """An instance of `<package>.config.Config`."""


@dataclass(frozen=True)
class _Extern:
    """A name outside the package: `boto3.client`, `os.environ`, `json.loads`, ..."""

    dotted: str


@dataclass(frozen=True)
class _ModuleRef:
    name: str


@dataclass(frozen=True)
class _ClassRef:
    module: str
    name: str


@dataclass(frozen=True)
class _Instance:
    cls: _ClassRef
    fields: tuple[tuple[str, _Value], ...] = ()


_Def: TypeAlias = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class _FuncRef:
    module: str
    qualname: str
    node: _Def = field(compare=False, repr=False)
    bound: _Instance | _ClassRef | None = None  # the first argument a method receives
    closure: _Scope | None = field(default=None, compare=False, repr=False)  # of a nested function


@dataclass(frozen=True)
class _Dict:
    items: tuple[tuple[str, _Value, str], ...]  # key, value, source text of the value


_Value: TypeAlias = (
    (Env | Const | Unknown | _Client | _Paginator | _Config | _Extern | _ModuleRef | _ClassRef | _Instance)
    | _FuncRef
    | _Dict
)


@dataclass(frozen=True)
class _Import:
    module: str
    name: str | None  # None: the module itself (`import x`)


_OPAQUE = None  # a binding whose value the analysis does not follow (tuple unpacking, loop targets, ...)
_Binding: TypeAlias = ast.expr | _Def | ast.ClassDef | _Import | None


@dataclass(frozen=True)
class _Assign:
    effect: tuple[int, int]  # from where on the name has this value
    value: _Binding
    until: tuple[int, int] | None = None  # end of a comprehension, for its targets


@dataclass
class _Locals:
    assigns: dict[str, list[_Assign]] = field(default_factory=dict)
    item_sets: dict[str, list[tuple[tuple[int, int], str, ast.expr]]] = field(default_factory=dict)
    loops: list[tuple[tuple[int, int], tuple[int, int]]] = field(default_factory=list)  # start, end

    def bind(self, name: str, assign: _Assign) -> None:
        self.assigns.setdefault(name, []).append(assign)

    def later_in_loop(self, name: str, at: tuple[int, int]) -> list[_Assign]:
        """Assignments after `at` in a loop around `at`: their value reaches `at` on the next turn."""
        around = [(start, end) for start, end in self.loops if start <= at <= end]
        return [
            assign
            for assign in self.assigns.get(name, [])
            if assign.until is None
            and assign.effect > at
            and any(start <= assign.effect <= end for start, end in around)
        ]


@dataclass
class _Scope:
    module: _Module
    func: _FuncRef | None  # None: module level
    bindings: dict[str, _Value]
    parent: _Scope | None = None
    cache: dict[int, _Value] = field(default_factory=dict)


def _start(node: ast.expr | ast.stmt | ast.excepthandler) -> tuple[int, int]:
    return (node.lineno, node.col_offset)


def _end(node: ast.expr | ast.stmt) -> tuple[int, int]:
    return (node.end_lineno or node.lineno, node.end_col_offset or 0)


@functools.lru_cache(maxsize=8192)
def _text(node: ast.AST) -> str:
    """The source text of an expression (normalised by ast.unparse: one line, one quote style)."""
    return ast.unparse(node)


def _target_names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _target_names(element)
    elif isinstance(target, ast.Starred):
        yield from _target_names(target.value)


def _nested_blocks(statement: ast.stmt) -> list[list[ast.stmt]]:
    """The blocks of a compound statement whose top-level bindings are the module's (if, while, try, with)."""
    if isinstance(statement, ast.If | ast.While):
        return [statement.body, statement.orelse]
    if isinstance(statement, ast.Try):
        return [
            statement.body,
            statement.orelse,
            statement.finalbody,
            *(handler.body for handler in statement.handlers),
        ]
    if isinstance(statement, ast.With):
        return [statement.body]
    return []


_Target: TypeAlias = tuple[ast.expr, ast.expr | None, tuple[int, int]]


def _assigned_targets(node: ast.AST) -> Iterator[_Target]:
    """The targets a node assigns to: (target, the value when the analysis follows it, from where on)."""
    if isinstance(node, ast.Assign):
        for each in node.targets:
            yield each, node.value, _end(node.value)
    elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
        yield node.target, node.value, _end(node.value)
    elif isinstance(node, ast.AugAssign):
        yield node.target, None, _end(node)
    elif isinstance(node, ast.For | ast.AsyncFor):
        yield node.target, None, _end(node.iter)
    elif isinstance(node, ast.With | ast.AsyncWith):
        for item in node.items:
            if item.optional_vars is not None:
                yield item.optional_vars, None, _end(item.context_expr)


def _bind_target(out: _Locals, target: ast.expr, value: ast.expr | None, effect: tuple[int, int]) -> None:
    """Record an assignment: a name gets the value, `name["key"] = value` an item of a dict, anything
    else (unpacking, attributes) binds its names to a value not followed."""
    if isinstance(target, ast.Name):
        out.bind(target.id, _Assign(effect, value))
    elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
        key = target.slice
        if value is not None and isinstance(key, ast.Constant) and isinstance(key.value, str):
            out.item_sets.setdefault(target.value.id, []).append((effect, key.value, value))
    else:
        for name in _target_names(target):
            out.bind(name, _Assign(effect, _OPAQUE))


def _join(values: Sequence[_Value], node: ast.AST | str) -> _Value:
    """One value for several possible ones: equal ones, or the client they agree on, else Unknown."""
    if values and all(value == values[0] for value in values):
        return values[0]
    services = {value.service for value in values if isinstance(value, _Client)}
    if len(services) == 1:
        return _Client(services.pop())
    return Unknown(node if isinstance(node, str) else _text(node))


def _source(value: _Value, node: ast.AST | str) -> ValueSource:
    if isinstance(value, Env | Const | Unknown):
        return value
    return Unknown(node if isinstance(node, str) else _text(node))


@functools.cache
def _operations(service: str) -> dict[str, str]:
    """snake_case client method -> botocore operation name, for one service ({} for an unknown service).

    Read from botocore's bundled service model (its newest API version), as botocore's loader would, but
    without importing botocore.loaders and botocore.session (a fifth of a second).
    """
    versions = sorted(
        path for path in (Path(botocore.__file__).parent / "data" / service).glob("*") if path.is_dir()
    )
    if not versions:
        return {}
    for name, opener in (("service-2.json.gz", gzip.open), ("service-2.json", open)):
        path = versions[-1] / name
        if path.is_file():
            with opener(path, "rt", encoding="utf-8") as file:
                model = json.load(file)
            return {botocore.xform_name(operation): operation for operation in model["operations"]}
    return {}


def _service_of_stub(dotted: str) -> str | None:
    """The boto3 service of a client type from the stub packages (`mypy_boto3_s3.S3Client` -> s3)."""
    head, _, name = dotted.partition(".")
    for prefix in _STUB_PREFIXES:
        if head.startswith(prefix) and name.rpartition(".")[2].endswith("Client"):
            return head[len(prefix) :].replace("_", "-")
    return None


_LOADED: dict[tuple[str, str, int, int], _Module] = {}  # (name, path, mtime_ns, size): kept across calls


def _load_module(name: str, path: Path, is_package: bool) -> _Module:
    """The parsed module in `path` (parsed once per version of the file)."""
    try:
        stat = path.stat()
        key = (name, path.as_posix(), stat.st_mtime_ns, stat.st_size)
        module = _LOADED.get(key)
        if module is None:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=path.as_posix())
            module = _LOADED[key] = _Module(name, path.as_posix(), is_package, tree)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as error:
        raise ExtractionError(f"cannot parse module {name} ({path.as_posix()}): {error}") from None
    return module


# --- Modules -------------------------------------------------------------------------------------------


class _Module:
    """One parsed source file of the package: its top-level names and, lazily, each function's locals."""

    def __init__(self, name: str, where: str, is_package: bool, tree: ast.Module) -> None:
        self.name = name
        self.where = where
        self.package = name if is_package else name.rpartition(".")[0]
        self.globals: dict[str, _Binding] = {}
        self._locals: dict[int, _Locals] = {}
        self._calls: dict[int, list[ast.Call]] = {}
        self._collect_globals(tree.body)

    def _collect_globals(self, body: Sequence[ast.stmt]) -> None:
        for statement in body:
            self.globals.update(self._global_bindings(statement))
            for block in _nested_blocks(statement):
                self._collect_globals(block)

    def _global_bindings(self, statement: ast.stmt) -> Iterator[tuple[str, _Binding]]:
        """The top-level names one statement binds (defs, classes, imports, assignments)."""
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield statement.name, statement
        elif isinstance(statement, ast.Import | ast.ImportFrom):
            yield from self.imports(statement)
        elif isinstance(statement, ast.Assign):
            for target in statement.targets:
                if isinstance(target, ast.Name):
                    yield target.id, statement.value
                else:
                    yield from ((name, _OPAQUE) for name in _target_names(target))
        elif (
            isinstance(statement, ast.AnnAssign)
            and isinstance(statement.target, ast.Name)
            and statement.value is not None
        ):
            yield statement.target.id, statement.value

    def imports(self, statement: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, _Import]]:
        if isinstance(statement, ast.Import):
            for alias in statement.names:
                if alias.asname:
                    yield alias.asname, _Import(alias.name, None)
                else:
                    head = alias.name.partition(".")[0]
                    yield head, _Import(head, None)
            return
        base = statement.module or ""
        if statement.level:
            parts = self.package.split(".")
            parts = parts[: len(parts) - (statement.level - 1)]
            base = ".".join([*parts, base] if base else parts)
        for alias in statement.names:
            if alias.name != "*":
                yield alias.asname or alias.name, _Import(base, alias.name)

    def locals_of(self, node: _Def) -> _Locals:
        """Where each local name of a function is bound (assignments, loops, nested defs, ...)."""
        found = self._locals.get(id(node))
        if found is None:
            found = _Locals()
            for statement in node.body:
                self._collect_locals(statement, found)
            for assigns in found.assigns.values():
                assigns.sort(key=lambda assign: assign.effect)
            self._locals[id(node)] = found
        return found

    def _collect_locals(self, node: ast.AST, out: _Locals) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.bind(node.name, _Assign(_start(node), node))
            return
        if isinstance(node, ast.Lambda):
            return
        for target, value, effect in _assigned_targets(node):
            _bind_target(out, target, value, effect)
        for name, assign in self._named_bindings(node):
            out.bind(name, assign)
        if isinstance(node, ast.For | ast.AsyncFor | ast.While):
            out.loops.append((_start(node), _end(node)))
        for child in ast.iter_child_nodes(node):
            self._collect_locals(child, out)

    def _named_bindings(self, node: ast.AST) -> Iterator[tuple[str, _Assign]]:
        """Names a node binds without an assignment target: `except ... as e`, comprehension variables,
        imports."""
        if isinstance(node, ast.ExceptHandler) and node.name:
            yield node.name, _Assign(_start(node), _OPAQUE)
        elif isinstance(node, ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp):
            for generator in node.generators:
                for name in _target_names(generator.target):
                    yield name, _Assign(_start(node), _OPAQUE, _end(node))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for name, imported in self.imports(node):
                yield name, _Assign(_end(node), imported)

    def calls_in(self, node: _Def) -> list[ast.Call]:
        """The call expressions of a function body in source order, nested defs and classes left out."""
        found = self._calls.get(id(node))
        if found is None:
            found = []

            def walk(each: ast.AST) -> None:
                if isinstance(each, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    return
                if isinstance(each, ast.Call):
                    found.append(each)
                for child in ast.iter_child_nodes(each):
                    walk(child)

            for statement in node.body:
                walk(statement)
            self._calls[id(node)] = found
        return found


# --- The analysis --------------------------------------------------------------------------------------


class _Program:
    """The package under `functions_dir` whose top-level package is `root`, parsed on demand."""

    def __init__(self, functions_dir: Path, root: str) -> None:
        self.functions_dir = functions_dir
        self.root = root
        self._modules: dict[str, _Module | None] = {}
        self._config_fields: dict[str, _Value] | None = None
        self._returns: dict[tuple[object, ...], _Value] = {}
        self._evaluating: set[object] = set()
        self._globals: dict[tuple[str, str], _Value] = {}
        self._visited: dict[tuple[object, ...], list[Call]] = {}
        self._stack: list[str] = []
        self._cuts = 0

    # Modules and top-level names ----------------------------------------------------------------------

    def module(self, name: str) -> _Module | None:
        if name not in self._modules:
            self._modules[name] = self._load(name)
        return self._modules[name]

    def _load(self, name: str) -> _Module | None:
        base = self.functions_dir.joinpath(*name.split("."))
        for path, is_package in ((base.parent / f"{base.name}.py", False), (base / "__init__.py", True)):
            if path.is_file():
                return _load_module(name, path, is_package)
        return None

    def _missing(self, dotted: str, scope: _Scope) -> ExtractionError:
        return ExtractionError(
            f"{scope.module.where} imports {dotted}, which is not under {self.functions_dir.as_posix()}"
        )

    def resolve_import(self, imported: _Import, scope: _Scope) -> _Value:
        internal = imported.module.partition(".")[0] == self.root
        if imported.name is None:
            if self.module(imported.module) is not None:
                return _ModuleRef(imported.module)
            if internal:
                raise self._missing(imported.module, scope)
            return _Extern(imported.module)
        dotted = f"{imported.module}.{imported.name}"
        if self.module(dotted) is not None:
            return _ModuleRef(dotted)
        source = self.module(imported.module)
        if source is not None and imported.name in source.globals:
            return self.global_value(source, imported.name, imported.name)
        if internal:
            raise self._missing(dotted, scope)
        return _Extern(dotted)

    def global_value(self, module: _Module, name: str, text: str) -> _Value:
        if name not in module.globals:
            return _Extern(f"builtins.{name}") if hasattr(builtins, name) else Unknown(text)
        cached = self._globals.get((module.name, name))
        if cached is None:
            cached = self._global_value(module, name, text)
            self._globals[(module.name, name)] = cached
        return cached

    def _global_value(self, module: _Module, name: str, text: str) -> _Value:
        binding = module.globals[name]
        scope = _Scope(module, None, {})
        if isinstance(binding, ast.FunctionDef | ast.AsyncFunctionDef):
            return _FuncRef(module.name, name, binding)
        if isinstance(binding, ast.ClassDef):
            return _ClassRef(module.name, name)
        if isinstance(binding, _Import):
            return self.resolve_import(binding, scope)
        if binding is None:
            return Unknown(text)
        key = ("global", module.name, name)
        if key in self._evaluating:
            return Unknown(text)
        self._evaluating.add(key)
        try:
            return self.eval(binding, scope)
        finally:
            self._evaluating.discard(key)

    def class_def(self, cls: _ClassRef) -> ast.ClassDef | None:
        module = self.module(cls.module)
        node = module.globals.get(cls.name) if module else None
        return node if isinstance(node, ast.ClassDef) else None

    def find_method(self, cls: _ClassRef, name: str, depth: int = 0) -> tuple[_ClassRef, _Def] | None:
        """The method `name` of a class or of its bases in the package (first found, left to right)."""
        node = self.class_def(cls)
        module = self.module(cls.module)
        if node is None or module is None or depth > _MAX_DEPTH:
            return None
        for statement in node.body:
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef) and statement.name == name:
                return cls, statement
        for base in node.bases:
            parent = self.eval(base, _Scope(module, None, {}))
            if isinstance(parent, _ClassRef):
                found = self.find_method(parent, name, depth + 1)
                if found is not None:
                    return found
        return None

    def is_config(self, cls: _ClassRef) -> bool:
        return cls.module == f"{self.root}.config" and cls.name == "Config"

    # The Config object --------------------------------------------------------------------------------

    def config_field(self, name: str, node: ast.AST) -> _Value:
        if self._config_fields is None:
            self._config_fields = self._read_config()
        found = self._config_fields.get(name)
        return found if found is not None else Unknown(_text(node))

    def _read_config(self) -> dict[str, _Value]:
        """Config's fields: the environment variable `from_environ` reads for each, else its default."""
        module = self.module(f"{self.root}.config")
        if module is None:
            return {}
        scope = _Scope(module, None, {})
        fields: dict[str, _Value] = {}
        cls = module.globals.get("Config")
        if isinstance(cls, ast.ClassDef):
            for statement in cls.body:
                if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name):
                    default = statement.value
                    fields[statement.target.id] = (
                        self.eval(default, scope)
                        if default is not None
                        else Unknown(f"config.{statement.target.id}")
                    )
        reader = module.globals.get("from_environ")
        if not isinstance(reader, ast.FunctionDef) or not reader.args.args:
            return fields
        environ = reader.args.args[0].arg
        for node in ast.walk(reader):
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Call):
                for keyword in node.value.keywords:
                    if keyword.arg is not None:
                        found = self._environment_read(keyword.value, environ, scope)
                        fields[keyword.arg] = found or _source(self.eval(keyword.value, scope), keyword.value)
        return fields

    def _environment_read(self, node: ast.expr, environ: str, scope: _Scope) -> Env | None:
        """The variable a field's expression reads: environ.get(N, ...), environ[N], f(environ, N, ...),
        or any of these before an `or` default."""
        candidates: list[ast.expr] = []
        if isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or):
            return self._environment_read(node.values[0], environ, scope)
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and _is_name(func.value, environ):
                candidates = node.args[:1]
            elif any(_is_name(arg, environ) for arg in node.args):
                candidates = [arg for arg in node.args if not _is_name(arg, environ)]
        elif isinstance(node, ast.Subscript) and _is_name(node.value, environ):
            candidates = [node.slice]
        for candidate in candidates:
            value = self.eval(candidate, scope)
            if isinstance(value, Const):
                return Env(value.value)
        return None

    # Expressions --------------------------------------------------------------------------------------

    def eval(self, node: ast.expr, scope: _Scope) -> _Value:
        """What an expression evaluates to, as far as the source tells."""
        evaluate = self._EVALUATORS.get(type(node))
        return evaluate(self, node, scope) if evaluate is not None else Unknown(_text(node))

    def _eval_constant(self, node: ast.Constant, _scope: _Scope) -> _Value:
        """A string as itself, a number or a boolean as its `str`; None, bytes, ... are Unknown."""
        if isinstance(node.value, str):
            return Const(node.value)
        if isinstance(node.value, bool | int | float):
            return Const(str(node.value))
        return Unknown(_text(node))

    def _eval_name(self, node: ast.Name, scope: _Scope) -> _Value:
        return self.lookup(node.id, _start(node), scope, node.id)

    def _eval_attribute(self, node: ast.Attribute, scope: _Scope) -> _Value:
        return self.attribute(self.eval(node.value, scope), node.attr, node)

    def _eval_if(self, node: ast.IfExp, scope: _Scope) -> _Value:
        return _join([self.eval(node.body, scope), self.eval(node.orelse, scope)], node)

    def _eval_bool(self, node: ast.BoolOp, scope: _Scope) -> _Value:
        if isinstance(node.op, ast.Or):
            return _join([self.eval(value, scope) for value in node.values], node)
        return Unknown(_text(node))

    def _eval_walrus(self, node: ast.NamedExpr, scope: _Scope) -> _Value:
        return self.eval(node.value, scope)

    def _eval_subscript(self, node: ast.Subscript, scope: _Scope) -> _Value:
        """`os.environ["NAME"]` is the variable; any other subscript is not followed."""
        base = self.eval(node.value, scope)
        if isinstance(base, _Extern) and base.dotted == "os.environ":
            key = self.eval(node.slice, scope)
            if isinstance(key, Const):
                return Env(key.value)
        return Unknown(_text(node))

    def lookup(self, name: str, at: tuple[int, int], scope: _Scope, text: str) -> _Value:
        """A name's value at a position: the last binding before it, a parameter, a closure, a global."""
        current: _Scope | None = scope
        while current is not None and current.func is not None:
            table = current.module.locals_of(current.func.node)
            assigns = table.assigns.get(name, [])
            chosen: _Assign | None = None
            for assign in assigns:
                if assign.effect < at and (assign.until is None or at <= assign.until):
                    chosen = assign
            if chosen is not None or name in current.bindings:
                value = self._assigned(chosen, name, current) if chosen else current.bindings[name]
                later = table.later_in_loop(name, at)
                if later:
                    value = _join([value, *(self._assigned(each, name, current) for each in later)], name)
                since = chosen.effect if chosen else (0, 0)
                return self._with_item_sets(value, table, name, since=since, at=at, scope=current)
            current, at = current.parent, _FAR
        return self.global_value(scope.module, name, text)

    def _assigned(self, assign: _Assign, name: str, scope: _Scope) -> _Value:
        value = scope.cache.get(id(assign))
        if value is None:
            # a value carried around a loop (`count += counted` where `counted` reads `count`) is unknown
            # to itself while it is being computed, rather than computed without end
            scope.cache[id(assign)] = Unknown(name)
            value = self._binding_value(assign.value, name, scope)
            scope.cache[id(assign)] = value
        return value

    def _binding_value(self, binding: _Binding, name: str, scope: _Scope) -> _Value:
        if isinstance(binding, ast.FunctionDef | ast.AsyncFunctionDef):
            outer = scope.func.qualname if scope.func else ""
            return _FuncRef(scope.module.name, f"{outer}.<locals>.{binding.name}", binding, closure=scope)
        if isinstance(binding, _Import):
            return self.resolve_import(binding, scope)
        if isinstance(binding, ast.expr):
            return self.eval(binding, scope)
        return Unknown(name)

    def _with_item_sets(
        self,
        value: _Value,
        table: _Locals,
        name: str,
        *,
        since: tuple[int, int],
        at: tuple[int, int],
        scope: _Scope,
    ) -> _Value:
        """A dict with the `name["key"] = value` assignments made to it between `since` and `at`."""
        if not isinstance(value, _Dict):
            return value
        later = [(key, node) for effect, key, node in table.item_sets.get(name, []) if since < effect < at]
        if not later:
            return value
        items = {key: (each, text) for key, each, text in value.items}
        for key, node in later:
            items[key] = (self.eval(node, scope), _text(node))
        return _Dict(tuple((key, each, text) for key, (each, text) in items.items()))

    def attribute(self, base: _Value, name: str, node: ast.AST) -> _Value:
        """`base.name`; `node` is the attribute expression, for the text of an Unknown."""
        found: _Value | None = None
        if isinstance(base, _ModuleRef):
            found = self._module_attribute(base, name, node)
        elif isinstance(base, _Extern):
            found = _Extern(f"{base.dotted}.{name}")
        elif isinstance(base, _Config):
            found = self.config_field(name, node)
        elif isinstance(base, _Instance | _ClassRef):
            found = self._member(base, name)
        return found if found is not None else Unknown(_text(node))

    def _module_attribute(self, base: _ModuleRef, name: str, node: ast.AST) -> _Value | None:
        """A module's global, or its submodule; None when the module is not in the package."""
        module = self.module(base.name)
        if module is None:
            return None
        if name not in module.globals and self.module(f"{base.name}.{name}") is not None:
            return _ModuleRef(f"{base.name}.{name}")
        return self.global_value(module, name, _text(node) if name not in module.globals else name)

    def _member(self, base: _Instance | _ClassRef, name: str) -> _Value | None:
        """An instance's field, a method (bound as Python would bind it), or what the class body
        declares the attribute to be; None when none of these says."""
        cls = base.cls if isinstance(base, _Instance) else base
        if isinstance(base, _Instance):
            for field_name, value in base.fields:
                if field_name == name:
                    return value
        method = self.find_method(cls, name)
        if method is None:
            return self._class_annotation(cls, name)
        owner, node = method
        bound: _Instance | _ClassRef | None = base if isinstance(base, _Instance) else None
        if _decorated(node, "classmethod"):
            bound = cls
        return _FuncRef(owner.module, f"{owner.name}.{node.name}", node, bound=bound)

    def _class_annotation(self, cls: _ClassRef, name: str) -> _Value | None:
        node = self.class_def(cls)
        module = self.module(cls.module)
        if node is None or module is None:
            return None
        for statement in node.body:
            if (
                isinstance(statement, ast.AnnAssign)
                and isinstance(statement.target, ast.Name)
                and statement.target.id == name
            ):
                return self.annotation(statement.annotation, module)
        return None

    def annotation(self, node: ast.expr | None, module: _Module) -> _Value | None:
        """The value an annotation promises when it matters here: a client, the Config, a package class."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return self._string_annotation(node.value, module)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return self.annotation(node.left, module) or self.annotation(node.right, module)
        if isinstance(node, ast.Subscript):
            return self._optional_annotation(node, module)
        if isinstance(node, ast.Name | ast.Attribute):
            return self._named_annotation(node, module)
        return None

    def _string_annotation(self, text: str, module: _Module) -> _Value | None:
        """A quoted annotation (a forward reference), parsed and read as if unquoted."""
        try:
            parsed = ast.parse(text, mode="eval").body
        except SyntaxError:
            return None
        return self.annotation(parsed, module)

    def _optional_annotation(self, node: ast.Subscript, module: _Module) -> _Value | None:
        """`Optional[X]` or `Union[X, ...]`: the first member that promises something; other generics
        promise nothing."""
        base = self.eval(node.value, _Scope(module, None, {}))
        if not (isinstance(base, _Extern) and base.dotted in ("typing.Optional", "typing.Union")):
            return None
        members = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        for each in members:
            found = self.annotation(each, module)
            if found is not None:
                return found
        return None

    def _named_annotation(self, node: ast.Name | ast.Attribute, module: _Module) -> _Value | None:
        """A client type of the stub packages, the Config, or an instance of a package class."""
        value = self.eval(node, _Scope(module, None, {}))
        if isinstance(value, _Extern):
            service = _service_of_stub(value.dotted)
            return _Client(service) if service else None
        if isinstance(value, _ClassRef):
            return _Config() if self.is_config(value) else _Instance(value)
        return None

    def dict_value(self, node: ast.Dict, scope: _Scope) -> _Dict:
        items: dict[str, tuple[_Value, str]] = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                spread = self.eval(value, scope)
                if isinstance(spread, _Dict):
                    items.update({name: (each, text) for name, each, text in spread.items})
                continue
            name = self.eval(key, scope)
            if isinstance(name, Const):
                items[name.value] = (self.eval(value, scope), _text(value))
        return _Dict(tuple((name, each, text) for name, (each, text) in items.items()))

    def call_value(self, node: ast.Call, scope: _Scope) -> _Value:
        """What a call returns: a client, a paginator, an instance, a package function's return value."""
        func = node.func
        if isinstance(func, ast.Attribute):
            base = self.eval(func.value, scope)
            if isinstance(base, _Client):
                if func.attr == "get_paginator" and node.args:
                    method = self.eval(node.args[0], scope)
                    if isinstance(method, Const):
                        return _Paginator(base.service, method.value)
                return Unknown(_text(node))
            callee = self.attribute(base, func.attr, func)
        else:
            callee = self.eval(func, scope)
        if isinstance(callee, _Extern):
            return self._extern_call(callee.dotted, node, scope)
        if isinstance(callee, _ClassRef):
            return self.construct(callee, node, scope)
        if isinstance(callee, _FuncRef):
            value = self.returns(callee, node, scope)
            return Unknown(_text(node)) if isinstance(value, Unknown) else value
        return Unknown(_text(node))

    # The evaluator of each kind of expression; any other kind is Unknown.
    _EVALUATORS: ClassVar[Mapping[type[ast.expr], Callable[[_Program, Any, _Scope], _Value]]] = {
        ast.Constant: _eval_constant,
        ast.Name: _eval_name,
        ast.Attribute: _eval_attribute,
        ast.Call: call_value,
        ast.Dict: dict_value,
        ast.IfExp: _eval_if,
        ast.BoolOp: _eval_bool,
        ast.NamedExpr: _eval_walrus,
        ast.Subscript: _eval_subscript,
    }

    def _extern_call(self, dotted: str, node: ast.Call, scope: _Scope) -> _Value:
        first = node.args[0] if node.args else None
        if dotted.startswith("boto3") and dotted.endswith(".client"):
            first = first or next((k.value for k in node.keywords if k.arg == "service_name"), None)
            service = self.eval(first, scope) if first is not None else None
            return _Client(service.value) if isinstance(service, Const) else Unknown(_text(node))
        if dotted in ("boto3.Session", "boto3.session.Session"):
            return _Extern("boto3.session.Session()")
        if dotted in ("os.getenv", "os.environ.get") and first is not None:
            variable = self.eval(first, scope)
            return Env(variable.value) if isinstance(variable, Const) else Unknown(_text(node))
        return Unknown(_text(node))

    def construct(self, cls: _ClassRef, node: ast.Call | None, scope: _Scope) -> _Value:
        """An instance, with the attributes its __init__ (or dataclass fields) set from the arguments."""
        if self.is_config(cls):
            return _Config()
        key = ("construct", cls)
        if key in self._evaluating:
            return _Instance(cls)
        self._evaluating.add(key)
        try:
            init = self.find_method(cls, "__init__")
            fields: dict[str, _Value] = {}
            if init is not None:
                owner, init_node = init
                ref = _FuncRef(owner.module, f"{owner.name}.__init__", init_node, bound=_Instance(cls))
                inner = self.enter(ref, self.bind(ref, node, scope))
                params = init_node.args.posonlyargs + init_node.args.args
                me = params[0].arg if params else "self"
                for each in ast.walk(init_node):
                    targets: list[ast.expr] = []
                    value: ast.expr | None = None
                    if isinstance(each, ast.Assign):
                        targets, value = each.targets, each.value
                    elif isinstance(each, ast.AnnAssign) and each.value is not None:
                        targets, value = [each.target], each.value
                    for target in targets:
                        if (
                            value is not None
                            and isinstance(target, ast.Attribute)
                            and isinstance(target.value, ast.Name)
                            and target.value.id == me
                        ):
                            fields[target.attr] = self.eval(value, inner)
            else:
                fields = self._dataclass_fields(cls, node, scope)
            return _Instance(cls, tuple(fields.items()))
        finally:
            self._evaluating.discard(key)

    def _dataclass_fields(self, cls: _ClassRef, node: ast.Call | None, scope: _Scope) -> dict[str, _Value]:
        definition = self.class_def(cls)
        if definition is None or node is None:
            return {}
        names = [
            statement.target.id
            for statement in definition.body
            if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
        ]
        fields: dict[str, _Value] = {}
        for name, arg in zip(names, node.args, strict=False):
            if isinstance(arg, ast.Starred):
                break
            fields[name] = self.eval(arg, scope)
        for keyword in node.keywords:
            if keyword.arg in names:
                fields[keyword.arg] = self.eval(keyword.value, scope)
        return fields

    def returns(self, ref: _FuncRef, node: ast.Call | None, scope: _Scope) -> _Value:
        """What a package function returns for these arguments (its annotation when that says enough)."""
        module = self.module(ref.module)
        if module is None:
            return Unknown(ref.qualname)
        promised = self.annotation(ref.node.returns, module)
        if isinstance(promised, _Client | _Config):
            return promised
        bindings = self.bind(ref, node, scope)
        key: tuple[object, ...] = (
            ref,
            id(ref.closure),
            tuple(sorted(bindings.items(), key=lambda item: item[0])),
        )
        if key in self._returns:
            return self._returns[key]
        if ref in self._evaluating or len(self._evaluating) > _MAX_DEPTH:
            return Unknown(ref.qualname)
        self._evaluating.add(ref)
        try:
            inner = self.enter(ref, bindings)
            values: list[_Value] = []
            for each in _own_nodes(ref.node):
                if isinstance(each, ast.Yield | ast.YieldFrom):
                    values = [Unknown(ref.qualname)]
                    break
                if isinstance(each, ast.Return) and each.value is not None:
                    values.append(self.eval(each.value, inner))
            result = _join(values, ref.qualname)
            if isinstance(result, Unknown) and promised is not None:
                result = promised
        finally:
            self._evaluating.discard(ref)
        self._returns[key] = result
        return result

    # Calls into package functions ---------------------------------------------------------------------

    def enter(self, ref: _FuncRef, bindings: dict[str, _Value]) -> _Scope:
        module = self.module(ref.module)
        if module is None:  # pragma: no cover - a _FuncRef always comes from a loaded module
            raise ExtractionError(f"module {ref.module} vanished")
        return _Scope(module, ref, bindings, parent=ref.closure)

    def bind(self, ref: _FuncRef, node: ast.Call | None, scope: _Scope) -> dict[str, _Value]:
        """Parameter -> value for a call of `ref` at `node` (None: a reference called from elsewhere)."""
        args = ref.node.args
        positional = [*args.posonlyargs, *args.args]
        bound: dict[str, _Value] = {}
        if ref.bound is not None and positional and not _decorated(ref.node, "staticmethod"):
            bound[positional[0].arg] = ref.bound
            positional = positional[1:]
        extra: dict[str, tuple[_Value, str]] = {}
        if node is not None:
            known = {a.arg for a in [*positional, *args.kwonlyargs]}
            given, extra = self._call_arguments(node, scope, positional, known)
            bound.update(given)
        if args.kwarg is not None:
            bound[args.kwarg.arg] = _Dict(tuple((name, each, text) for name, (each, text) in extra.items()))
        if args.vararg is not None:
            bound[args.vararg.arg] = Unknown(f"*{args.vararg.arg}")
        self._bind_unbound(ref, positional, bound)
        return bound

    def _call_arguments(
        self, node: ast.Call, scope: _Scope, positional: list[ast.arg], known: set[str]
    ) -> tuple[dict[str, _Value], dict[str, tuple[_Value, str]]]:
        """The arguments of a call site: those of named parameters, and the other keywords (for a
        `**kwargs`) with the source text of each value."""
        bound: dict[str, _Value] = {}
        extra: dict[str, tuple[_Value, str]] = {}
        for param, arg in zip(positional, node.args, strict=False):
            if isinstance(arg, ast.Starred):
                break
            bound[param.arg] = self.eval(arg, scope)
        for keyword in node.keywords:
            for name, each, text in self._keyword_items(keyword, scope):
                if name in known:
                    bound[name] = each
                else:
                    extra[name] = (each, text)
        return bound, extra

    def _keyword_items(self, keyword: ast.keyword, scope: _Scope) -> Sequence[tuple[str, _Value, str]]:
        """`name=value` as one item; `**mapping` as the items of the dict it evaluates to (none if not)."""
        value = self.eval(keyword.value, scope)
        if keyword.arg is not None:
            return ((keyword.arg, value, _text(keyword.value)),)
        return value.items if isinstance(value, _Dict) else ()

    def _bind_unbound(self, ref: _FuncRef, positional: list[ast.arg], bound: dict[str, _Value]) -> None:
        """Each parameter the call left unbound, or bound to an Unknown where the annotation promises
        more: the annotation's value, else the default's (evaluated where the function is defined),
        else Unknown."""
        args = ref.node.args
        module = self.module(ref.module)
        assert module is not None
        defining = ref.closure or _Scope(module, None, {})
        defaults: list[tuple[ast.arg, ast.expr | None]] = [
            *zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=False),
            *zip(args.kwonlyargs, args.kw_defaults, strict=True),
        ]
        default_of = {param.arg: default for param, default in defaults}
        for param in [*positional, *args.kwonlyargs]:
            promised = self.annotation(param.annotation, module)
            given = bound.get(param.arg)
            if given is not None and not (promised is not None and isinstance(given, Unknown)):
                continue
            default = default_of.get(param.arg)
            if promised is not None:
                bound[param.arg] = promised
            elif default is not None:
                bound[param.arg] = self.eval(default, defining)
            else:
                bound[param.arg] = Unknown(param.arg)

    def visit(self, ref: _FuncRef, bindings: dict[str, _Value]) -> list[Call]:
        """Every API call a function makes, directly or through the package functions it calls.

        Chains start at `ref`. A function already on the stack is not entered again (recursion); what
        was found under such a cut is not memoised, as it depends on the stack.
        """
        qualified = f"{ref.module}.{ref.qualname}"
        if qualified in self._stack or len(self._stack) > _MAX_DEPTH:
            self._cuts += 1
            return []
        key = (ref, id(ref.closure), tuple(sorted(bindings.items(), key=lambda item: item[0])))
        found = self._visited.get(key)
        if found is not None:
            return found
        cuts = self._cuts
        self._stack.append(qualified)
        try:
            scope = self.enter(ref, bindings)
            found = [
                replace(call, chain=(qualified, *call.chain))
                for node in scope.module.calls_in(ref.node)
                for call in self._site(node, scope)
            ]
        finally:
            self._stack.pop()
        if cuts == self._cuts:
            self._visited[key] = found
        return found

    def _site(self, node: ast.Call, scope: _Scope) -> Iterator[Call]:
        func = node.func
        if isinstance(func, ast.Attribute):
            base = self.eval(func.value, scope)
            if isinstance(base, _Client) or (isinstance(base, _Paginator) and func.attr == "paginate"):
                yield from self._api_call(base, func.attr, node, scope)
                return
            if isinstance(base, _Paginator):
                return
            callee = self.attribute(base, func.attr, func)
        else:
            callee = self.eval(func, scope)
        if isinstance(callee, _ClassRef):
            init = self.find_method(callee, "__init__")
            if init is not None:
                owner, init_node = init
                callee = _FuncRef(owner.module, f"{owner.name}.__init__", init_node, bound=_Instance(callee))
        if isinstance(callee, _FuncRef):
            yield from self.visit(callee, self.bind(callee, node, scope))
            return
        # A library call: a package function or method handed to it (a callback) is reachable too.
        for arg in [*node.args, *(keyword.value for keyword in node.keywords)]:
            if isinstance(arg, ast.Name | ast.Attribute):
                value = self.eval(arg, scope)
                if isinstance(value, _FuncRef):
                    yield from self.visit(value, self.bind(value, None, scope))

    def _api_call(
        self, base: _Client | _Paginator, method: str, node: ast.Call, scope: _Scope
    ) -> Iterator[Call]:
        service = base.service
        operations = _operations(service)
        if not operations:
            where = f"{scope.module.where}:{node.lineno}"
            raise ExtractionError(f"{where}: botocore knows no service {service!r}")
        operation = operations.get(base.method if isinstance(base, _Paginator) else method)
        if operation is None:  # client.exceptions, client.meta, get_paginator, can_paginate, ...
            return
        params: dict[str, ValueSource] = {}
        for keyword in node.keywords:
            value = self.eval(keyword.value, scope)
            if keyword.arg is not None:
                params[keyword.arg] = _source(value, keyword.value)
            elif isinstance(value, _Dict):
                params.update({name: _source(each, text) for name, each, text in value.items})
        yield Call(service, operation, MappingProxyType(params), f"{scope.module.where}:{node.lineno}", ())


def _is_name(node: ast.expr, name: str) -> bool:
    return isinstance(node, ast.Name) and node.id == name


def _decorated(node: _Def, name: str) -> bool:
    return any(isinstance(d, ast.Name) and d.id == name for d in node.decorator_list)


def _own_nodes(node: _Def) -> Iterator[ast.AST]:
    """The nodes of a function body, nested functions, lambdas and classes left out."""
    pending: list[ast.AST] = list(node.body)
    while pending:
        each = pending.pop()
        if isinstance(each, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        yield each
        pending.extend(ast.iter_child_nodes(each))


def handler_calls(functions_dir: Path, handler: str) -> list[Call]:
    """The AWS API calls reachable from `handler` ("controller.ingest.handler"), in the order it reaches them.

    Deduplicated on (service, operation, params, where): the first chain that reaches a call is kept.
    """
    module_name, _, function = handler.rpartition(".")
    if not module_name or not function:
        raise ExtractionError(f"handler {handler!r} is not <module>.<function>")
    program = _Program(functions_dir, module_name.partition(".")[0])
    module = program.module(module_name)
    if module is None:
        stem = functions_dir.joinpath(*module_name.split(".")).as_posix()
        raise ExtractionError(
            f"handler {handler}: no module {module_name} ({stem}.py or {stem}/__init__.py does not exist)"
        )
    node = module.globals.get(function)
    if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        raise ExtractionError(f"handler {handler}: {module.where} defines no function {function!r}")
    ref = _FuncRef(module_name, function, node)
    calls: list[Call] = []
    seen: set[tuple[object, ...]] = set()
    for call in program.visit(ref, program.bind(ref, None, _Scope(module, None, {}))):
        key = (call.service, call.operation, frozenset(call.params.items()), call.where)
        if key not in seen:
            seen.add(key)
            calls.append(call)
    return calls
