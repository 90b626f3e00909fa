"""The structure the project won, guarded: read from the code's AST (no import runs, no new dependency).

- Layers: `core` never imports Streamlit, `ui` or `app_pages`; nothing imports `app_pages` (the router opens the
  pages by path); `app_pages` import only `ui` and `core` (besides libraries).
- Units (each package of `core` and `ui`, each top-level module, `app_pages`, the entry file) sit in `LAYERS`,
  lowest first; a unit imports only units of lower layers: no upward import, and so no cycle. A cycle is also
  looked for on its own, so a unit added to the wrong layer says which loop it closes.
- No function over `MAX_LINES` lines in `core/`, `ui/`, `app_pages/`.
- A `ui` package with a face (``__all__`` in its ``__init__``, pinned in tests/unit/test_faces.py) is imported
  from outside only through that face, and only for what the face exports; no face exports a name that one of
  its package's modules would shadow (whichever is imported last wins the package's attribute).

`core`'s own faces are not enforced from `ui` and `app_pages` yet (about a hundred imports reach into `core`
packages' modules); `core.runs.session` is the first step (one call per run).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("core", "ui", "app_pages")
ENTRY = "streamlit_app"
MAX_LINES = 60
LAYERS: tuple[tuple[str, ...], ...] = (  # lowest first; a unit imports only from layers below its own
    ("core.words",),
    ("core.secrets", "core.records", "core.stats"),
    ("core.conclusions", "core.export"),
    ("core.engine",),
    ("core.backends", "core.roofline"),
    ("core.documents", "core.hosting", "core.capture"),
    ("core.experiments",),
    ("core.doctor", "core.charts", "core.runs"),
    ("core.store",),
    ("core.report",),
    ("core.cli",),
    ("core", "core.__main__"),
    ("ui", "ui.text"),
    ("ui.session", "ui.home", "ui.navigation"),
    ("ui.sidebar",),
    ("ui.runs",),
    ("ui.roofline", "ui.doctor"),
    ("app_pages", ENTRY),
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    found = {module_name(p): p for source in SOURCES for p in (ROOT / source).rglob("*.py")}
    return {**found, ENTRY: ROOT / f"{ENTRY}.py"}


@cache
def tree(name: str) -> ast.Module:
    return ast.parse(modules()[name].read_text(encoding="utf-8"))


def unit(name: str) -> str:
    """The unit a module belongs to: ``core.runs.session`` -> ``core.runs``; ``app_pages.batch`` -> ``app_pages``."""
    parts = name.split(".")
    if parts[0] in ("core", "ui") and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


def imports(name: str) -> Iterator[tuple[str, str, int]]:
    """(module imported, name taken from it or "", line) for every import in module ``name``, relative ones
    resolved; ``from core import doctor`` is the module ``core.doctor``."""
    package = name if modules()[name].name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree(name)):
        if isinstance(node, ast.Import):
            yield from ((alias.name, "", node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                whole = f"{base}.{alias.name}"
                yield (whole, "", node.lineno) if whole in modules() else (base, alias.name, node.lineno)


def ours(module: str) -> bool:
    return module.split(".")[0] in (*SOURCES, ENTRY)


def edges() -> Iterator[tuple[str, str, str, int]]:
    """(importer module, imported module, name, line) for every import between this project's modules."""
    for name in modules():
        for imported, taken, line in imports(name):
            if ours(imported):
                yield name, imported, taken, line


def layer_of(name: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if name in layer)


def test_every_unit_has_a_layer() -> None:
    units = {unit(name) for name in modules()}
    listed = {name for layer in LAYERS for name in layer}
    assert units - listed == set(), "add each new package or top-level module to a layer in LAYERS"
    assert listed - units == set(), "LAYERS names a unit that no longer exists"


def test_core_never_imports_streamlit_ui_or_the_pages() -> None:
    found = [f"{name}:{line} imports {imported}" for name in modules() if unit(name).startswith("core")
             for imported, _, line in imports(name) if imported.split(".")[0] in ("streamlit", "ui", "app_pages")]
    assert found == []


def test_nothing_imports_a_page_and_pages_import_only_ui_and_core() -> None:
    into_pages = [f"{a}:{line} imports {b}" for a, b, _, line in edges() if unit(b) == "app_pages"]
    assert into_pages == [], "pages are opened by path (ui.navigation), never imported"
    from_pages = [f"{a}:{line} imports {b}" for a, b, _, line in edges()
                  if unit(a) == "app_pages" and b.split(".")[0] not in ("ui", "core")]
    assert from_pages == []


def test_no_upward_import() -> None:
    upward = [f"{a}:{line} imports {b} ({unit(a)} is in layer {layer_of(unit(a))}, {unit(b)} in {layer_of(unit(b))})"
              for a, b, _, line in edges() if unit(a) != unit(b) and layer_of(unit(b)) >= layer_of(unit(a))]
    assert upward == [], "a unit imports only from lower layers (LAYERS): move the code, or the unit's layer"


def cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` (a path that comes back to its start), or [] (depth first, no recursion)."""
    done: set[str] = set()
    for start in sorted(graph):
        path, stack = [start], [iter(sorted(graph[start]))]
        while stack:
            following = next(stack[-1], None)
            if following is None:
                done.add(path.pop())
                stack.pop()
            elif following in path:
                return [*path[path.index(following):], following]
            elif following not in done:
                path.append(following)
                stack.append(iter(sorted(graph.get(following, ()))))
    return []


def test_no_import_cycle_between_units() -> None:
    graph: dict[str, set[str]] = {}
    for a, b, _, _ in edges():
        if unit(a) != unit(b):
            graph.setdefault(unit(a), set()).add(unit(b))
    assert cycle(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_no_function_over_60_lines() -> None:
    long = [f"{name}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for name in modules() if unit(name) != ENTRY for node in ast.walk(tree(name))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None
            and node.end_lineno - node.lineno + 1 > MAX_LINES]
    assert long == []


def face(package: str) -> set[str] | None:
    """The names a package's ``__init__`` lists in ``__all__``; None where it has no face."""
    for node in tree(package).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return None


FACED_UI = sorted(name for name in modules() if unit(name) == name and name.startswith("ui.")
                  and modules()[name].name == "__init__.py" and face(name) is not None)


def test_ui_has_faces_to_guard() -> None:
    assert {"ui.runs", "ui.sidebar"} <= set(FACED_UI)


@pytest.mark.parametrize("package", FACED_UI)
def test_callers_outside_a_ui_package_go_through_its_face(package: str) -> None:
    names = face(package) or set()
    around = [f"{a}:{line} imports {b}" for a, b, _, line in edges()
              if unit(a) != package and b.startswith(f"{package}.")]
    unknown = [f"{a}:{line} imports {taken} from {package}" for a, b, taken, line in edges()
               if unit(a) != package and b == package and taken and taken not in names]
    assert around == [], f"import these from {package} (add them to its __all__ and tests/unit/test_faces.py)"
    assert unknown == [], f"{package}'s face does not export these"


@pytest.mark.parametrize("package", sorted(name for name in modules() if modules()[name].name == "__init__.py"))
def test_no_face_exports_a_name_that_one_of_its_modules_shadows(package: str) -> None:
    """``from ui.runs.controls import history`` beside a module ``ui/runs/history.py``: whichever is imported
    last wins the package's attribute (the home page once called the module). A name taken from its namesake
    module (``from core.doctor.audit import audit``) is bound after that module, and stays."""
    submodules = {name.rpartition(".")[2] for name in modules() if name.rpartition(".")[0] == package}
    bound_from = {alias.asname or alias.name: node.module for node in tree(package).body
                  if isinstance(node, ast.ImportFrom) for alias in node.names}
    shadowed = {name for name in (face(package) or set()) & submodules if bound_from.get(name) != f"{package}.{name}"}
    assert shadowed == set(), "rename the function or the module"
