"""The imports of a package's modules, read from their source with an AST walk (no module is
imported): the layer and shape tests (the store's engine layers, the domain apart from
``clepsydra_core.runtime``, the client's and the retry service's shapes) hold a package's
import rules with it."""

from __future__ import annotations

import ast
from pathlib import Path


def module_name(path: Path, package: Path) -> str:
    """The dotted name of the module at ``path`` inside the package folder ``package``."""
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, package: Path) -> list[str]:
    """Every module a file of the package at ``package`` imports, at the top or inside a
    function (``from x import y``: ``x`` and ``x.y``, as y may be a module), relative imports
    resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    name = module_name(path, package)
    own = name.rsplit(".", 1)[0] if path.name != "__init__.py" else name
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = own.split(".")[:len(own.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.append(base)
            found += [f"{base}.{alias.name}" for alias in node.names]
    return found
