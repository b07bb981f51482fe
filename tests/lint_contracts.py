"""A custom import-linter contract: private names stay inside their module (docs: explanation/algorithm.md#how-it-works).

``lint-imports`` (run by ``.ci/run``) loads it from ``pyproject.toml``.  A
``from a.b import _x`` -- or ``import a._b`` from outside ``a`` -- in a module
of the root packages breaks the contract.  A private module (``_learning``) may
be imported by its siblings in the same package; a private *name* never
crosses a module boundary.
"""

from __future__ import annotations

import re

from importlinter import Contract, ContractCheck, fields, output

_FROM = re.compile(r"^\s*from\s+([\w.]+)\s+import\s+\(?(.*?)\)?\s*(#.*)?$")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


class PrivateImportsContract(Contract):
    """No module imports a private name (``_x``) of another module, nor a private
    module from outside its parent package."""

    type_name = "private_imports"
    ignore_imports = fields.ListField(subfield=fields.StringField(), required=False)

    def check(self, graph, verbose: bool) -> ContractCheck:
        ignored = set(self.ignore_imports or [])
        bad = []
        for importer in sorted(graph.modules):
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                if f"{importer} -> {imported}" in ignored:
                    continue
                for det in graph.get_import_details(importer=importer, imported=imported):
                    line = det["line_contents"]
                    why = self._violation(importer, imported, line)
                    if why:
                        bad.append({"importer": importer, "imported": imported,
                                    "line": det["line_number"], "contents": line, "why": why})
        return ContractCheck(kept=not bad, metadata={"violations": bad})

    @staticmethod
    def _violation(importer, imported, line):
        parts = imported.split(".")
        for n, part in enumerate(parts[1:], 1):
            if _private(part):
                parent = ".".join(parts[:n])
                if not (importer == parent or importer.startswith(parent + ".")):
                    return f"private module {imported} imported from outside {parent}"
        m = _FROM.match(line)
        if m:
            names = [x.strip().split(" as ")[0] for x in m.group(2).split(",") if x.strip()]
            private = [x for x in names if _private(x)]
            if private and m.group(1) != importer:
                return f"private name(s) {', '.join(private)} imported from {m.group(1)}"
        return None

    def render_broken_contract(self, check: ContractCheck) -> None:
        for v in check.metadata["violations"]:
            output.print_error(f"{v['importer']}:{v['line']}: {v['why']}  ({v['contents'].strip()})")
            output.new_line()
