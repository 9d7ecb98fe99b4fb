"""Verifier Python: what one Python file of the Verifier (or a script inlined in test.sh) does.

Most Verifiers are pytest files. Read with `ast`, never run, they tell the
rules which files they open, which values they compare against, and, when
every statement is one this reader understands, the exact checks they make of
files (exists, contains, equals), so `start-state-passes` can hold them against
the image. Anything else makes `checks()` None and nothing is concluded.
"""

from __future__ import annotations

import ast
import posixpath

from amber_pipeline.benchmarks.lint.observations import Expected, FileCheck
from amber_pipeline.benchmarks.lint.shell import file_like, path_like, shell_commands

_READ_CALLS = {"open", "Path", "PurePath", "PosixPath", "exists", "isfile", "isdir", "lexists", "getsize", "getmtime",
               "listdir", "scandir", "walk", "stat", "lstat", "access", "read_csv", "read_json", "read_parquet",
               "read_excel", "read_table", "read_feather", "loadtxt", "genfromtxt", "load", "connect", "imread",
               "glob", "iglob", "copy", "copyfile", "cmp", "ZipFile", "TarFile", "File", "spec_from_file_location",
               "run_path", "read", "parse"}
_WRITE_CALLS = {"makedirs", "mkdir", "rmtree", "remove", "unlink", "write_text", "write_bytes", "touch"}
_PATH_TYPES = {"Path", "PurePath", "PosixPath"}
_GENERIC_CALLS = {"join", "glob", "iglob", "load", "read", "parse", "connect"}  # a relative string here may be no path
_PATH_METHODS = {"read_text", "read_bytes", "exists", "is_file", "is_dir", "open", "stat", "iterdir", "glob"}
_PROCESS_CALLS = {"run", "call", "check_call", "check_output", "Popen", "system", "getoutput", "getstatusoutput"}
_COMPARE_CALLS = {"assertEqual", "assertEquals", "assertIn", "assert_equal", "assertAlmostEqual",
                  "assert_almost_equal", "isclose", "allclose", "approx", "assertListEqual", "assertDictEqual",
                  "assertCountEqual", "assertMultiLineEqual", "assert_allclose"}


def _callee(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


class PythonFacts:
    """What one Python file (or inline script) of the Verifier reads, writes, compares and asserts."""

    def __init__(self, rel: str, tree: ast.Module, offset: int) -> None:
        self.rel, self.tree, self.offset = rel, tree, offset
        self.names: dict[str, ast.expr] = {}
        self.parents: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.names[node.targets[0].id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                self.names[node.target.id] = node.value
            elif isinstance(node, ast.withitem) and isinstance(node.optional_vars, ast.Name):
                self.names[node.optional_vars.id] = node.context_expr
        self.reads: list[tuple[int, str]] = []  # (line, path as written)
        self.writes: set[str] = set()
        self.literals: list[Expected] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                self._call(node)
            elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq):
                for side in (node.left, *node.comparators):
                    self._literals(side, node.lineno)
            elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In):
                self._literals(node.left, node.lineno)  # `"x" in text`; `v in [allowed]` lists a spec, not answers

    def _line(self, node: ast.AST) -> int:
        return getattr(node, "lineno", 1) + self.offset

    def path(self, node: ast.expr | None, depth: int = 0) -> str | None:
        """The constant path an expression stands for: a string, a name bound to one, Path(...), a / b, join()."""
        if node is None or depth > 4:
            return None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name) and node.id in self.names:
            return self.path(self.names[node.id], depth + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            left, right = self.path(node.left, depth + 1), self.path(node.right, depth + 1)
            return posixpath.join(left, right) if left is not None and right is not None else None
        if isinstance(node, ast.Call) and _callee(node) in ("Path", "PurePath", "PosixPath", "join") and node.args:
            parts = [self.path(a, depth + 1) for a in node.args]
            if all(p is not None for p in parts):
                return posixpath.join(*[p for p in parts if p is not None])
        return None

    def _call(self, node: ast.Call) -> None:
        name, line = _callee(node), self._line(node)
        if name in _COMPARE_CALLS:
            for arg in node.args:
                self._literals(arg, node.lineno)
        if name in _PROCESS_CALLS and node.args:
            arg = node.args[0]
            items = arg.elts if isinstance(arg, ast.List | ast.Tuple) else [arg]
            for command in filter(None, map(self.path, items)):
                words = [w for cmd in shell_commands(command, line) for _, w in cmd.static_words()] \
                    if len(items) == 1 else [command]  # one string: a shell command line
                self.reads += [(line, w) for w in words if w.startswith("/") and path_like(w)]
            return
        method = node.func.attr if isinstance(node.func, ast.Attribute) else None
        if method in _WRITE_CALLS or name in _WRITE_CALLS:
            target = node.func.value if method in _PATH_METHODS | _WRITE_CALLS and isinstance(
                node.func, ast.Attribute) and not node.args else (node.args[0] if node.args else None)
            written = self.path(target)
            if written is not None:
                self.writes.add(written)
            return
        if method in _PATH_METHODS and isinstance(node.func, ast.Attribute):
            used = self.path(node.func.value)
            if used is not None and used.startswith("/") and path_like(used):
                self.reads.append((line, used))
        if name not in _READ_CALLS:
            return
        if name in _PATH_TYPES and isinstance(self.parents.get(node), ast.BinOp | ast.Attribute):
            return  # Path("/app") / "out.txt", Path(p).read_text(): read where the whole expression is used
        args = node.args[1:2] if name == "spec_from_file_location" else node.args[:2] if name == "cmp" \
            else node.args[:1]
        args += [k.value for k in node.keywords if k.arg in ("path", "file", "filename", "filepath", "fname")]
        for value in filter(None, map(self.path, args)):
            absolute = value.startswith("/") and path_like(value)
            relative = name not in _PATH_TYPES | _GENERIC_CALLS and file_like(value)
            if name == "open" and self._opens_for_writing(node):
                self.writes.add(value)
            elif absolute or relative:
                self.reads.append((line, value))

    def _opens_for_writing(self, node: ast.Call) -> bool:
        mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
        return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and bool(set(mode.value) & set("wax"))

    def _literals(self, node: ast.expr, line: int, depth: int = 0) -> None:
        """The constants an expected value holds (container elements and dict values, not keys)."""
        if depth > 4:
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, str | int | float) \
                and not isinstance(node.value, bool):
            value = node.value
            if isinstance(value, str) and (value.startswith("/") and path_like(value)):
                return  # a path is where to look, not what to find
            self.literals.append(Expected(self.rel, line + self.offset, value))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            if isinstance(node.operand.value, int | float) and not isinstance(node.operand.value, bool):
                self.literals.append(Expected(self.rel, line + self.offset, -node.operand.value))
        elif isinstance(node, ast.List | ast.Tuple | ast.Set):
            for item in node.elts:
                self._literals(item, line, depth + 1)
        elif isinstance(node, ast.Dict):
            for item in node.values:
                self._literals(item, line, depth + 1)
        elif isinstance(node, ast.Name) and node.id in self.names:
            self._literals(self.names[node.id], line, depth + 1)
        elif isinstance(node, ast.Call) and _callee(node) in ("approx", "float", "int", "Decimal", "str", "set",
                                                              "list", "tuple", "sorted"):
            for arg in node.args:
                self._literals(arg, line, depth + 1)

    # -- checks, for start-state-passes: only files whose every statement this reader understands

    def checks(self) -> list[FileCheck] | None:
        """Every check the file makes, or None when it does anything else (then nothing is concluded)."""
        found: list[FileCheck] = []
        return found if self._body(self.tree.body, found, top=True) else None

    def _body(self, body: list[ast.stmt], found: list[FileCheck], top: bool) -> bool:
        for stmt in body:
            if isinstance(stmt, ast.Import | ast.ImportFrom | ast.Pass):
                continue
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # a docstring
            if isinstance(stmt, ast.Assign | ast.AnnAssign):
                if stmt.value is None or not self._plain(stmt.value):
                    return False
                continue
            if isinstance(stmt, ast.FunctionDef) and top and stmt.name.startswith("test"):
                if stmt.args.args or not self._body(stmt.body, found, top=False):
                    return False
                continue
            if isinstance(stmt, ast.With) and all(_callee(i.context_expr) == "open" for i in stmt.items
                                                   if isinstance(i.context_expr, ast.Call)):
                if not self._body(stmt.body, found, top=False):
                    return False
                continue
            if isinstance(stmt, ast.If) and top and isinstance(stmt.test, ast.Compare) \
                    and isinstance(stmt.test.left, ast.Name) and stmt.test.left.id == "__name__":
                continue  # `if __name__ == "__main__":` runs the tests above
            if isinstance(stmt, ast.Assert):
                checks = self._assertion(stmt.test)
                if checks is None:
                    return False
                found += checks
                continue
            return False
        return True

    def _plain(self, node: ast.expr) -> bool:
        """An assigned value that reads a file or names a path (no other effect)."""
        return self.path(node) is not None or self._read_of(node) is not None or (
            isinstance(node, ast.Call) and _callee(node) == "open")

    def _read_of(self, node: ast.expr, depth: int = 0) -> tuple[str, str | None] | None:
        """(path, strip) when the expression is a file's text: open(P).read(), Path(P).read_text(), .strip()."""
        if depth > 4:
            return None
        if isinstance(node, ast.Name) and node.id in self.names:
            return self._read_of(self.names[node.id], depth + 1)
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute) or node.args:
            return None
        attr, target = node.func.attr, node.func.value
        if attr in ("strip", "rstrip", "lstrip"):
            inner = self._read_of(target, depth + 1)
            return (inner[0], attr) if inner is not None and inner[1] is None else None
        if attr == "read_text":
            path = self.path(target)
            return (path, None) if path is not None else None
        if attr == "read":
            opened = self.names.get(target.id) if isinstance(target, ast.Name) else target
            if isinstance(opened, ast.Call) and _callee(opened) == "open" and opened.args \
                    and not self._opens_for_writing(opened):
                path = self.path(opened.args[0])
                return (path, None) if path is not None else None
        return None

    def _assertion(self, test: ast.expr) -> list[FileCheck] | None:
        line = self._line(test)
        if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
            parts = [self._assertion(v) for v in test.values]
            return None if any(p is None for p in parts) else [c for p in parts if p for c in p]
        if isinstance(test, ast.Call):
            name = _callee(test)
            if name in ("exists", "isfile", "isdir") and test.args:
                path = self.path(test.args[0])
                return [FileCheck(self.rel, line, "exists", path)] if path else None
            if name in ("exists", "is_file", "is_dir") and isinstance(test.func, ast.Attribute) and not test.args:
                path = self.path(test.func.value)
                return [FileCheck(self.rel, line, "exists", path)] if path else None
            return None
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            left, right, op = test.left, test.comparators[0], test.ops[0]
            if isinstance(op, ast.In) and isinstance(left, ast.Constant) and isinstance(left.value, str):
                read = self._read_of(right)
                return [FileCheck(self.rel, line, "contains", read[0], left.value)] if read else None
            if isinstance(op, ast.Eq):
                for value, other in ((left, right), (right, left)):
                    read = self._read_of(other)
                    if read and isinstance(value, ast.Constant) and isinstance(value.value, str):
                        return [FileCheck(self.rel, line, "equals", read[0], value.value, read[1])]
        return None
