"""The package's shape, as docs/architecture.md states it: sizes, layers, no cycles, no prints,
engines compared by their facts and never by their names, every package on the page; the lazy
imports, the imports by name, the modules' own ``__getattr__``, an engine's flags and SGLang's
names outside its folder and the rules' reading of the log each only where listed with a reason
(a listed exception nothing uses is stale and fails too); the page's tables, names and paths.

These read the source with :mod:`ast`; they fail when a change breaks the layering that lets the
next engine, rule or log format land in one place.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "glm5lib"
PAGE = PACKAGE.parent / "docs" / "architecture.md"
# Generated data, not hand-written code (flag catalogues read off SGLang releases; vLLM's are JSON).
GENERATED = ("_sglang_flags", "_flags_", "catalogue")
MAX_LINES = 950

# Layers from the bottom up: a module may import its own layer and those below, never above.
# The stand-in (glm5lib.sim) is a program of its own, reached over HTTP: only the foundation,
# config and logs formats are shared with it, and nothing in the library imports it.
LAYERS: list[tuple[str, ...]] = [
    ("glm5lib._version", "glm5lib.errors", "glm5lib.paths", "glm5lib.masking", "glm5lib.http",
     "glm5lib.rundir", "glm5lib.stepmodel", "glm5lib.cpus", "glm5lib.lazy", "glm5lib.configmeta"),
    ("glm5lib.engines.sglang.config", "glm5lib.logs"),
    ("glm5lib.server", "glm5lib.loadgen", "glm5lib.telemetry"),
    ("glm5lib.engines",),
    ("glm5lib.levels", "glm5lib.patching"),
    ("glm5lib.diagnose", "glm5lib.phase", "glm5lib.stepbench", "glm5lib.watch"),
    ("glm5lib.plots", "glm5lib.report", "glm5lib.progress", "glm5lib.widgets", "glm5lib.workbook", "glm5lib.tune"),
    ("glm5lib.cli", "glm5lib.__main__"),
]
# The package itself re-exports names from every layer (resolved on first use): it sits on top.
ROOT_LAYER = len(LAYERS) - 1
# glm5lib.sim sits beside the library: it may use layers 0-1 only.
SIM_ALLOWED = LAYERS[0] + LAYERS[1]


@functools.cache
def _parsed(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once for every check that reads it."""
    return ast.parse(path.read_text(), filename=str(path))


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _shown(path: Path) -> str:
    """A file as a message names it: from the repository's root where it lies there."""
    return str(path.relative_to(PACKAGE.parent)) if path.is_relative_to(PACKAGE.parent) else str(path)


def _is_generated(name: str) -> bool:
    return any(mark in name.rsplit(".", 1)[-1] for mark in GENERATED)


def _imports(name: str, path: Path, typing: bool = True) -> list[tuple[str, int, bool]]:
    """(imported glm5lib module, line, at module top level) for every import in a file; without
    ``typing``, leaving out those under ``if TYPE_CHECKING:`` (never run, so in no circle)."""
    tree = _parsed(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    top_level = set(map(id, tree.body))
    type_only: set[int] = set()
    for node in tree.body:  # imports under ``if TYPE_CHECKING:`` are not run
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            top_level.update(map(id, ast.walk(node)))
            type_only.update(map(id, ast.walk(node)))
    found = []
    for node in ast.walk(tree):
        if not typing and id(node) in type_only:
            continue
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [mod] + [f"{mod}.{a.name}" for a in node.names]
        for target in targets:
            if target.startswith("glm5lib.") or (target == "glm5lib" and isinstance(node, ast.Import)):
                found.append((target, node.lineno, id(node) in top_level))
    return found


def _resolve(target: str, modules: dict[str, Path]) -> str | None:
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def _graph(top_level_only: bool) -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in modules.items():
        for target, _, top in _imports(name, path, typing=False):
            if top_level_only and not top:
                continue
            resolved = _resolve(target, modules)
            if resolved and resolved != name:
                graph[name].add(resolved)
    return graph


def _layer(name: str) -> int | None:
    if name == "glm5lib":
        return ROOT_LAYER
    for i, layer in enumerate(LAYERS):
        if any(name == m or name.startswith(m + ".") for m in layer):
            return i
    return None


def _plant(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, module: str, source: str) -> Path:
    """Have the checks read ``source`` as glm5lib's module ``module`` (a violation planted to show
    a check fails), in place of any module of that name planted before; returns its file."""
    path = tmp_path / str(len(list(tmp_path.iterdir()))) / (module.rsplit(".", 1)[-1] + ".py")
    path.parent.mkdir()
    path.write_text(source)
    modules = {**_modules(), module: path}
    monkeypatch.setattr(sys.modules[__name__], "_modules", lambda: modules)
    return path


def _unlisted(found: Mapping[Any, str], listed: Mapping[Any, str], table: str) -> list[str]:
    """What a check ``found`` (key -> where and what) that its list of exceptions, ``table``, does not hold."""
    return [f"{where} (or list it in {table} with why)" for key, where in sorted(found.items(), key=str)
            if key not in listed]


def _stale(found: Iterable[Any], listed: Mapping[Any, str], table: str) -> list[str]:
    """The exceptions of ``table`` that a check ``found`` nowhere: each to be removed, so the list (and
    the page's) says only what is true."""
    found = set(found)
    return [f"{table}[{key!r}] is found nowhere now (remove it)" for key in listed if key not in found]


def test_no_hand_written_module_is_too_long():
    long = {name: n for name, path in _modules().items()
            if not _is_generated(name) and (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (cut them along their concerns): {long}"


def test_no_import_cycle():
    graph = _graph(top_level_only=False)
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            # a package's __init__ importing its own submodules counts too: a submodule that
            # imports a module importing the package back closes a circle through it
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(_modules()):
        if node not in state:
            visit(node)
    # A submodule importing its parent package (to reach re-exported names) closes a cycle
    # through the parent's __init__: that counts.
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_layers_only_import_downwards():
    wrong = []
    for name, targets in _graph(top_level_only=False).items():
        if name.startswith("glm5lib.sim"):
            continue
        mine = _layer(name)
        assert mine is not None, f"{name} is in no layer of docs/architecture.md: add it to LAYERS"
        for target in targets:
            if target.startswith("glm5lib.sim"):
                if mine != _layer("glm5lib.cli"):
                    wrong.append(f"{name} imports the stand-in {target} (reach it over HTTP)")
                continue
            theirs = _layer(target)
            if theirs is not None and theirs > mine:
                wrong.append(f"{name} (layer {mine}) imports {target} (layer {theirs})")
    assert not wrong, "\n".join(wrong)


def test_the_stand_in_uses_only_the_foundation_and_formats():
    wrong = []
    for name, targets in _graph(top_level_only=False).items():
        if not name.startswith("glm5lib.sim"):
            continue
        for target in targets:
            if target.startswith("glm5lib.sim") or target == "glm5lib":
                continue
            if not any(target == m or target.startswith(m + ".") for m in SIM_ALLOWED):
                wrong.append(f"{name} imports {target}")
    assert not wrong, "\n".join(wrong)


# Function-level imports of glm5lib's own modules hide the dependency graph; the modules allowed
# them are listed here with their reason ("package.*": every module inside the package).
LAZY_ALLOWED = {
    "glm5lib.cli.*": "a command's handler imports the library modules it runs, so building the parser "
                     "(glm5 --help) loads none of them",
    "glm5lib.sim": "the stand-in's entry points start its server (aiohttp) or fit a profile only when asked to",
}


# (module, imported module) pairs imported inside a function on purpose, with the reason.
LAZY_PAIRS = {
    ("glm5lib.engines", "glm5lib.logs.engine"): "the registry lists engines without pandas (glm5 --help); an "
                                                "engine registered from outside brings its log reader",
    ("glm5lib.engines.sglang.config._sglang", "glm5lib.logs"): "the stand-in imports SGLang's configuration and "
                                                               "starts without pandas, which the server-args reader needs",
    ("glm5lib.engines.sglang", "glm5lib.engines.sglang.launcher"): "importing SGLang's configuration runs its "
                                                  "engine package: the launcher (pandas) is loaded when a server is launched",
}


def _function_level_imports() -> list[tuple[str, str, Path, int]]:
    """(module, imported glm5lib module, file, line) for each import of the package's own modules
    inside a function (a generated flag catalogue is data, read only when the engine's own parser
    is absent: left out)."""
    modules = _modules()
    found = []
    for name, path in modules.items():
        for target, line, top in _imports(name, path):
            resolved = _resolve(target, modules)
            if not top and resolved and not _is_generated(resolved):
                found.append((name, resolved, path, line))
    return found


def _lazy_allowed(name: str) -> str | None:
    """The key of :data:`LAZY_ALLOWED` that lets module ``name`` import inside functions, or None."""
    for key in LAZY_ALLOWED:
        if name == key or (key.endswith(".*") and name.startswith(key[:-1])):
            return key
    return None


def test_own_modules_are_imported_at_top_level():
    lazy = [f"{_shown(path)}:{line} imports {target} inside a function"
            for name, target, path, line in _function_level_imports()
            if _lazy_allowed(name) is None and (name, target) not in LAZY_PAIRS]
    assert not lazy, "\n".join(sorted(set(lazy)))


def test_every_listed_lazy_import_is_still_made():
    """A listed exception that no import uses any more is removed, so the list (and the page's)
    says only what is true."""
    found = _function_level_imports()
    stale = _stale((_lazy_allowed(name) for name, *_ in found), LAZY_ALLOWED, "LAZY_ALLOWED")
    stale += _stale(((name, target) for name, target, *_ in found), LAZY_PAIRS, "LAZY_PAIRS")
    assert not stale, "\n".join(stale)


# Modules that import a module named at run time (importlib.import_module), with the reason: the
# import graph above cannot see these, so each is listed.
DYNAMIC_IMPORTS = {
    "glm5lib.lazy": "module_getattr: a package's re-exports (glm5lib, glm5lib.engines, glm5lib.engines.sglang) "
                    "imported from their modules on first use",
    "glm5lib.engines": "the bundled adapters by name (ADAPTER_MODULES), each imported when the registry first "
                       "asks for it, so listing the engines loads none",
    "glm5lib.logs.engine": "the engines' log adapters by name (ENGINE_MODULES), in the engines' folders a layer "
                           "above: imported when a log of theirs is read",
    "glm5lib.report.sections": "a report section named as 'package.module:function' in PROVIDERS, imported when "
                               "a report is written",
    "glm5lib.cli": "each sub-command's module (COMMAND_MODULES), imported when the parser is built",
}
_IMPORT_CALLS = ("import_module", "__import__", "exec_module", "run_module")


def _dynamic_imports() -> dict[str, list[int]]:
    """Module -> the lines where it calls something that imports a module named at run time."""
    found: dict[str, list[int]] = defaultdict(list)
    for name, path in _modules().items():
        for node in ast.walk(_parsed(path)):
            if isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if called.endswith(_IMPORT_CALLS):
                    found[name].append(node.lineno)
    return found


def test_every_import_by_name_is_listed_with_its_reason():
    found = {name: f"{name}:{lines} imports a module named at run time" for name, lines in _dynamic_imports().items()}
    wrong = _unlisted(found, DYNAMIC_IMPORTS, "DYNAMIC_IMPORTS") + _stale(found, DYNAMIC_IMPORTS, "DYNAMIC_IMPORTS")
    assert not wrong, "\n".join(wrong)


# Modules with a ``__getattr__`` of their own rather than lazy.module_getattr (the one resolver of
# a package's re-exports), each with the reason.
OWN_GETATTR = {
    "glm5lib.engines.sglang.config": "SGLANG_FLAGS and SGLANG_SOURCE are computed from the default release's "
                                     "bundled catalogue when first asked for, not re-exported from a module",
}


def _module_getattrs() -> tuple[dict[str, int], set[str]]:
    """(module -> line of a module-level ``__getattr__`` of its own, modules whose ``__getattr__``
    is ``lazy.module_getattr``)."""
    own: dict[str, int] = {}
    lazy: set[str] = set()
    for name, path in _modules().items():
        for node in _parsed(path).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == "__getattr__":
                own[name] = node.lineno
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and "__getattr__" in [
                    getattr(t, "id", None) for t in (node.targets if isinstance(node, ast.Assign) else [node.target])]:
                if isinstance(node.value, ast.Call) and ast.unparse(node.value.func).endswith("module_getattr"):
                    lazy.add(name)
                else:
                    own[name] = node.lineno
    return own, lazy


def test_packages_resolve_their_re_exports_through_module_getattr():
    """A module-level ``__getattr__`` is ``lazy.module_getattr`` (those the page names), or listed
    in :data:`OWN_GETATTR` with why."""
    own, lazy = _module_getattrs()
    found = {name: f"{name}:{line} defines its own __getattr__ (use lazy.module_getattr)" for name, line in own.items()}
    wrong = _unlisted(found, OWN_GETATTR, "OWN_GETATTR") + _stale(found, OWN_GETATTR, "OWN_GETATTR")
    listed = re.search(r"`lazy\.module_getattr`: ([^)]*)\)", PAGE.read_text())
    on_page = set(re.findall(r"`([\w.]+)`", listed.group(1))) if listed else set()
    if on_page != lazy:
        wrong.append(f"the page names {sorted(on_page)} as resolving through lazy.module_getattr; the code: {sorted(lazy)}")
    assert not wrong, "\n".join(wrong)


def test_the_library_does_not_print_or_define_commands():
    offenders = []
    for name, path in _modules().items():
        if name.startswith(("glm5lib.cli", "glm5lib.sim")) or name == "glm5lib.__main__":
            continue
        tree = _parsed(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "print":
                offenders.append(f"{name}:{node.lineno} calls print")
            if isinstance(node, ast.FunctionDef) and node.name == "register_cli":
                offenders.append(f"{name}:{node.lineno} defines register_cli (belongs in glm5lib.cli)")
    assert not offenders, "\n".join(offenders)


def test_the_layer_test_sees_the_package_itself_and_every_command_module():
    graph = _graph(top_level_only=False)
    assert "glm5lib" in _modules() and _layer("glm5lib") == ROOT_LAYER
    commands = [n for n in _modules() if n.startswith("glm5lib.cli.")]
    assert len(commands) >= 8 and all(_layer(n) == _layer("glm5lib.cli") for n in commands)
    assert any(n.startswith("glm5lib.cli.") for n in graph)


# Command modules that still import a private name, each to be given a public path.
PRIVATE_PENDING: dict[str, str] = {}


@pytest.mark.parametrize("name", sorted(n for n in _modules() if n == "glm5lib.cli" or n.startswith("glm5lib.cli.")))
def test_commands_use_only_public_names(name):
    if name in PRIVATE_PENDING:
        pytest.xfail(PRIVATE_PENDING[name])
    path = _modules()[name]
    private = [f"{name}:{line} imports {target}" for target, line, _ in _imports(name, path)
               if any(part.startswith("_") and part != "__version__" and not part.startswith("__")
                      for part in target.split(".")[1:])
               and "_version" not in target]
    assert not private, "\n".join(private)


# --------------------------------------------------------------------------- engines are read by their facts

def _engine_names() -> set[str]:
    from glm5lib import engines

    return set(engines.names())


def _names_an_engine(node: ast.AST, names: set[str]) -> bool:
    if isinstance(node, ast.Constant) and node.value in names:
        return True
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(_names_an_engine(e, names) for e in node.elts)


# Modules that still compare engine names, each to be moved onto the adapters' capabilities.
ENGINE_NAMES_PENDING: dict[str, str] = {}


def test_no_engine_name_is_compared_outside_the_engines_package():
    """``ev.engine == "vllm"``, ``backend in ("sim", ...)``: read the adapter's capabilities instead."""
    names = _engine_names()
    found = []
    for name, path in _modules().items():
        if name.startswith(("glm5lib.engines", "glm5lib.sim")):  # the adapters themselves; the stand-in's own program
            continue
        if name in ENGINE_NAMES_PENDING:
            continue
        for node in ast.walk(_parsed(path)):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            named = [s for s in sides if _names_an_engine(s, names)]
            others = " ".join(ast.unparse(s) for s in sides if s not in named).lower()
            if named and ("engine" in others or "backend" in others):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "engine names compared (use glm5lib.engines.get(name).capabilities):\n" + "\n".join(found)


def test_the_check_for_engine_name_comparisons_can_fail():
    names = _engine_names()
    for source in ('ev.engine == "vllm"', 'backend in ("sim", "sglang")', 'merged.get("engine") != "sglang"'):
        node = ast.parse(source, mode="eval").body
        assert isinstance(node, ast.Compare) and any(_names_an_engine(s, names) for s in [node.left, *node.comparators])


def test_every_package_and_every_engine_is_on_the_page():
    text = PAGE.read_text()
    missing = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        dotted = ".".join(init.parent.relative_to(PACKAGE).parts)
        if dotted and f"`{dotted}`" not in text:
            missing.append(dotted)
    for layer in LAYERS:
        for module in layer:
            short = module.removeprefix("glm5lib.")
            if module != "glm5lib.__main__" and not short.startswith("_") and f"`{short}`" not in text:
                missing.append(short)
    from glm5lib import engines

    missing += [f"engine {n}" for n in engines.names() if f"`engines.{n}`" not in text]
    assert not missing, f"{PAGE.name} does not name: {', '.join(missing)}"


# --------------------------------------------------------------------------- one vocabulary of limits

def _engine_field_names() -> dict[str, str]:
    """Every registered engine's own spelling of a limit (field, alias, start-up fact, lever, flag)
    -> the engine it belongs to."""
    from glm5lib import engines

    out: dict[str, str] = {}
    for name in engines.names():
        adapter = engines.get(name)
        caps = adapter.capabilities
        own = [*caps.fields.values(), *caps.field_aliases, *caps.startup_keys.values(), *caps.neutral_fields]
        try:
            own += [lever.field for lever in adapter.levers()]
        except Exception:  # an engine whose catalogue is not bundled
            pass
        for field in own:
            if not field:
                continue
            # a field spelt as its neutral name (stream_interval) is neutral; its flag is the engine's
            if field not in engines.LIMITS:
                out.setdefault(field, name)
            out.setdefault("--" + field.replace("_", "-"), name)
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                ids.add(id(first.value))
    return ids


def _word(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9_-]){re.escape(name)}(?![A-Za-z0-9_])")


def _field_uses(source: str, fields: dict[str, str]) -> list[tuple[int, str]]:
    """(line, name) for each engine field spelt in code: string constants (not docstrings) that
    hold it as a word, and identifiers (names, arguments, keywords, attributes) equal to it."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    patterns = {name: _word(name) for name in fields}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            found += [(node.lineno, n) for n, pat in patterns.items() if pat.search(node.value)]
        names = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.arg) or (isinstance(node, ast.keyword) and node.arg):
            names = [node.arg]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = [node.name]
        found += [(node.lineno, n) for n in names if n in fields]
    return sorted(set(found))


def _outside_engines(name: str) -> bool:
    # the adapters themselves; the stand-in's own program, which speaks SGLang's flags
    return not name.startswith(("glm5lib.engines", "glm5lib.sim"))


def test_no_engine_field_is_spelt_outside_the_engines_package():
    """``startup["max_running_requests"]``, ``"--max-num-seqs"``: read ``Evidence.limits()`` (the
    neutral names of ``glm5lib.engines.LIMITS``) and render an engine's flag through its adapter."""
    fields = _engine_field_names()
    found = []
    for name, path in _modules().items():
        if not _outside_engines(name) or _is_generated(name):
            continue
        for line, field in _field_uses(path.read_text(), fields):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {field} ({fields[field]}'s)")
    assert not found, f"{len(found)} engine fields spelt outside glm5lib/engines:\n" + "\n".join(found)


def test_the_check_for_engine_fields_can_fail():
    fields = _engine_field_names()
    assert {"max_running_requests", "max_num_seqs", "--max-num-seqs", "chunked_prefill_size"} <= set(fields)
    source = ('''def f(ev, max_num_seqs=None):
    """max_running_requests in a docstring is prose"""
    cap = ev.startup.get("max_running_requests")
    return f"--max-num-seqs {cap}", ev.chunked_prefill_size, "recommend_max_running_requests"
''')
    spelt = {name for _, name in _field_uses(source, fields)}
    assert spelt == {"max_num_seqs", "max_running_requests", "--max-num-seqs", "chunked_prefill_size"}
    # a field named as its limit is no engine's spelling, but its flag is
    assert "stream_interval" not in fields and "--stream-interval" in fields
    assert {name for _, name in _field_uses('hint = "raise --stream-interval"\n', fields)} == {"--stream-interval"}


def _product_names() -> set[str]:
    """The engines that are products of their own (not the stand-in, not a command template)."""
    from glm5lib import engines

    return set(engines.names()) - {engines.STANDIN, engines.COMMAND}


# Modules that spell a product's name for what it also is: a registry, a Python package, a tool.
PRODUCT_NAMES_ALLOWED: dict[str, str] = {
    "glm5lib.logs.engine": "the log adapters' registry: one line per engine's log module, as engines.ADAPTER_MODULES",
    "glm5lib.logs.bench": "the benchmark tools whose output a block is (SGLang's bench_serving, vllm bench serve)",
    "glm5lib.loadgen.prompts": "the transformers library, whose tokenizer sizes prompts in the model's tokens",
    "glm5lib.telemetry.environment": "the Python packages whose versions environment.json records",
}


def test_no_engine_product_is_named_in_code_outside_the_engines_package():
    """A string constant ``"vllm"`` or ``"sglang"`` outside glm5lib/engines (prose excepted):
    ``engines.DEFAULT_ENGINE`` and the adapters' facts say what the code needs."""
    names = _product_names()
    found = []
    for name, path in _modules().items():
        if not _outside_engines(name) or name in PRODUCT_NAMES_ALLOWED:
            continue
        tree = _parsed(path)
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in skip:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.value!r}")
    assert not found, "engine names in code outside glm5lib/engines:\n" + "\n".join(found)


def test_the_check_for_engine_products_can_fail():
    names = _product_names()
    assert {"sglang", "vllm", "transformers"} <= names
    tree = ast.parse('''def f(ev):
    """Reads the sglang log."""
    return ev.engine or "vllm"
''')
    skip = _docstrings(tree)
    found = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in names and id(n) not in skip]
    assert found == ["vllm"]


# Least-squares and curve fitting outside the one solver (stepmodel.nnls), each allowed with why.
SOLVER_CALLS = ("lstsq", "polyfit", "curve_fit", "least_squares", "lsq_linear", "minimize")
SOLVER_ALLOWED = {
    ("glm5lib.stepmodel", "lstsq"): "the one solver itself (non-negative least squares by active set)",
    ("glm5lib.tune.propose", "polyfit"): "the parabola through three measured latency ratios where a tuning "
                                        "bracket crosses its limit: exact interpolation of measurements, no model",
}


def test_one_solver_and_one_model_of_throughput():
    found = []
    for name, path in _modules().items():
        for node in ast.walk(_parsed(path)):
            if isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if called in SOLVER_CALLS and (name, called) not in SOLVER_ALLOWED:
                    found.append(f"{name}:{node.lineno} calls {called}")
            if isinstance(node, ast.ClassDef) and node.name.endswith(("CapacityModel", "PerfModel")) \
                    and name != "glm5lib.diagnose.model.core":
                found.append(f"{name}:{node.lineno} defines {node.name}: the performance model is diagnose.model's")
    assert not found, "\n".join(found)


def test_the_solver_check_can_fail(tmp_path, monkeypatch):
    # a second fit of a step curve written anywhere else is found
    _plant(monkeypatch, tmp_path, "glm5lib.diagnose.second", "import numpy as np\n\ndef fit(x, y):\n    return np.linalg.lstsq(x, y, rcond=None)\n")
    with pytest.raises(AssertionError, match="second:4 calls lstsq"):
        test_one_solver_and_one_model_of_throughput()



# Blocking HTTP clients: the foundation's glm5lib.http is the one blocking GET to a server (the load
# generator and the scrapers' streams are aiohttp's).
BLOCKING_HTTP = ("urllib.request", "urllib.error", "http.client", "requests", "httpx")


def test_one_blocking_get_to_a_server():
    found = []
    for name, path in _modules().items():
        for node in ast.walk(_parsed(path)):
            targets = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for target in targets:
                if name != "glm5lib.http" and any(target == m or target.startswith(m + ".") for m in BLOCKING_HTTP):
                    found.append(f"{name}:{node.lineno} imports {target}: ask glm5lib.http")
    assert not found, "\n".join(found)


def test_the_blocking_get_check_can_fail(tmp_path, monkeypatch):
    _plant(monkeypatch, tmp_path, "glm5lib.diagnose.fetch", "import urllib.request\n")
    with pytest.raises(AssertionError, match=re.escape("fetch:1 imports urllib.request")):
        test_one_blocking_get_to_a_server()

# --------------------------------------------------------------------------- an engine's flags are its adapter's

# Flags of the bundled catalogues that are every server's words (or glm5's own options), not one engine's.
GENERIC_FLAGS = {
    "--port": "the port any server listens on",
    "--host": "the address any server listens on",
    "--config": "a configuration file (glm5's own option; every engine has one)",
    "--model": "the model a server serves (glm5's own option; vLLM's and SGLang's alias)",
}
# Text outside glm5lib/engines that still spells an engine's flag, each to be rendered from its adapter
# (none now: a text that names a flag takes it from the adapter).
FLAGS_PENDING: dict[tuple[str, str], str] = {}
_FLAG_TOKEN = re.compile(r"(?<![A-Za-z0-9_-])--[A-Za-z0-9][A-Za-z0-9-]*")


@functools.cache
def _catalogue_flags() -> frozenset[str]:
    """Every flag of every bundled engine catalogue (engines/*/flags/*.json: SGLang's list of
    specs, vLLM's and transformers serve's maps), less the generic ones."""
    flags: set[str] = set()
    for path in sorted((PACKAGE / "engines").glob("*/flags/*.json")):
        specs = json.loads(path.read_text())["flags"]
        for spec in specs if isinstance(specs, list) else specs.values():
            flags.update(f for f in spec.get("flags") or () if f.startswith("--"))
    return frozenset(flags - set(GENERIC_FLAGS))


def _flag_uses(tree: ast.AST, flags: frozenset[str]) -> list[tuple[int, str]]:
    """(line, flag) for each catalogue flag in a string constant of ``tree`` (docstrings are prose)."""
    skip = _docstrings(tree)
    return sorted({(node.lineno, token) for node in ast.walk(tree)
                   if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
                   for token in _FLAG_TOKEN.findall(node.value) if token in flags})


def test_no_engine_flag_is_spelt_outside_the_engines_package():
    """``"try --attention-backend"``: an engine's flag reaches text through its adapter
    (``Capabilities.flag(limit)``, ``metrics_flag``) or its remedies; the stand-in speaks SGLang's
    flags and the commands' own options share some of their words."""
    flags = _catalogue_flags()
    found: dict[tuple[str, str], list[int]] = defaultdict(list)
    for name, path in _modules().items():
        if name.startswith(("glm5lib.engines", "glm5lib.sim", "glm5lib.cli")) or _is_generated(name):
            continue
        for line, flag in _flag_uses(_parsed(path), flags):
            found[(name, flag)].append(line)
    where = {key: f"{key[0]}:{lines}: {key[1]}" for key, lines in found.items()}
    wrong = _unlisted(where, FLAGS_PENDING, "FLAGS_PENDING") + _stale(where, FLAGS_PENDING, "FLAGS_PENDING")
    assert not wrong, "engine flags in text outside glm5lib/engines (render them from the adapter):\n" + "\n".join(wrong)


def test_the_check_for_engine_flags_can_fail():
    flags = _catalogue_flags()
    assert {"--stream-interval", "--max-num-seqs", "--enable-metrics", "--cb-max-batch-tokens"} <= flags
    assert not set(GENERIC_FLAGS) & flags
    tree = ast.parse('''def f(port):
    """Raise --stream-interval: prose."""
    return f"try --attention-backend, --port {port}", "--not-a-flag"
''')
    assert _flag_uses(tree, flags) == [(3, "--attention-backend")]


# --------------------------------------------------------------------------- SGLang's names outside its folder

# SGLang's words that are every server's or Python's, not SGLang's facts (each a field of its catalogue too).
GENERIC_WORDS = {
    "config": "a configuration (every engine's and glm5's word; SGLang's field is a config file)",
    "dtype": "pandas' and numpy's word for a column's type",
    "host": "where any server listens",
    "port": "where any server listens",
    "api_key": "any server's key",
    "device": "a GPU or another device, in prose and HTML",
    "quantization": "a model's weight format, in prose",
}
# Facts read under SGLang's own names outside its folder: module -> {names (fnmatch patterns for
# /metrics names), space-separated: why}. The page lists every one, and this list is exactly what
# the code spells.
SGLANG_NAMES_OUTSIDE = {
    "glm5lib.diagnose.rules.admission": {
        "dp_size load_balance_method": "the data-parallel rule: SGLang's replicas and how its router spreads requests",
    },
    "glm5lib.diagnose.rules.reference": {
        "tp_size pp_size dp_size ep_size": "the reference rule's parallelism fields: GPUs the host must have",
        "model_path": "the reference rule's note that the reference runs another model",
        "kv_cache_dtype": "the KV cache's data type (vLLM's name too), which KV headroom rules out: a type, "
                          "not a neutral limit",
    },
    "glm5lib.diagnose.rules.batch": {
        "kv_cache_dtype": "the KV-capacity finding covers the KV cache's data type",
        "cuda_graph_batch_sizes": "the graph rule: the sizes SGLang's log says it captured",
        "decode_cuda_graph_capture_time_s decode_cuda_graph_mem_usage_gb cuda_graph_capture_time_s "
        "cuda_graph_mem_usage_gb": "the graph rule: what capturing the decode graphs cost (the last two before "
                                   "SGLang split its graphs by phase)",
    },
    "glm5lib.diagnose.model.core": {"cuda_graph_batch_sizes": "the performance model: the sizes captured at start-up"},
    "glm5lib.diagnose.model.graphs": {
        "tp_size attention_backend model_class weight_mem_usage_gb":
            "the eager-step prior's deployment fingerprint (step_priors.json; model_class is a start-up fact "
            "transformers serve's log writes too)",
    },
    "glm5lib.loadgen.sweep": {"model_path": "SGLang's /get_model_info answer: where the served model's tokenizer lies"},
    "glm5lib.cli.tune": {"model_path": "the configurations' model_path() method (vLLM's, transformers serve's)"},
    "glm5lib.masking": {"tokenizer_metrics_custom_labels_header": "the one definition of a secret: a field whose "
                                                                  "name ends like a secret's and holds none"},
    "glm5lib.levels": {"sglang:*": "the canonical /metrics gauges the telemetry tables alias every engine's to"},
    "glm5lib.diagnose.scrapes": {"vllm:*": "vLLM's per-step token histogram and preemption counter, no other engine's"},
}


def _names_outside() -> dict[tuple[str, str], str]:
    """:data:`SGLANG_NAMES_OUTSIDE` as (module, name or pattern) -> why."""
    return {(module, name): why for module, listed in SGLANG_NAMES_OUTSIDE.items()
            for names, why in listed.items() for name in names.split()}


FIXTURE_LOGS = PACKAGE.parent / "tests" / "fixtures" / "logs"


@functools.cache
def _sglang_names() -> frozenset[str]:
    """SGLang's own names: every bundled release's ServerArgs fields and the start-up facts its log
    adapter reads from the SGLang logs under tests/fixtures/logs, less the neutral limits and
    :data:`GENERIC_WORDS`."""
    from glm5lib import engines
    from glm5lib.logs import parse_log

    names: set[str] = set()
    for path in sorted((PACKAGE / "engines" / "sglang" / "flags").glob("*.json")):
        names.update(spec["field"] for spec in json.loads(path.read_text())["flags"] if spec.get("field"))
    for log in sorted(FIXTURE_LOGS.glob("sglang*.log")):
        names.update(parse_log(log).startup)
    return frozenset(names - set(engines.LIMITS) - set(GENERIC_WORDS))


def _name_uses(tree: ast.AST, names: frozenset[str]) -> set[tuple[int, str]]:
    """(line, name) for each of ``names`` a module spells, as ``_field_uses`` reads them (string
    constants holding it as a word, docstrings left out; identifiers equal to it), and each engine's
    ``/metrics`` name (``vllm:num_requests_running``) in a string constant."""
    skip = _docstrings(tree)
    words = re.compile(r"(?<![A-Za-z0-9_-])(" + "|".join(map(re.escape, sorted(names))) + r")(?![A-Za-z0-9_])")
    gauges = re.compile(r"^(?:" + "|".join(map(re.escape, _engine_names())) + r"):\w+$")
    found: set[tuple[int, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            found.update((node.lineno, w) for w in words.findall(node.value))
            if gauges.match(node.value):
                found.add((node.lineno, node.value))
        spelt = (getattr(node, "id", None) or getattr(node, "attr", None) or getattr(node, "arg", None)
                 or (node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else None))
        if isinstance(spelt, str) and spelt in names:
            found.add((node.lineno, spelt))
    return found


def _listed_as(module: str, name: str) -> tuple[str, str] | None:
    import fnmatch

    return next((key for key in _names_outside() if key[0] == module and fnmatch.fnmatchcase(name, key[1])), None)


def test_sglangs_names_outside_its_folder_are_exactly_those_listed():
    """``args.get("kv_cache_dtype")``, ``startup["cuda_graph_mem_usage_gb"]``: a fact read under
    SGLang's name outside glm5lib/engines (and the stand-in) is listed with why, and a listed one
    that is no longer read is removed; findings and the diff read the neutral limits instead."""
    names = _sglang_names()
    found: dict[tuple[str, str], set[str]] = defaultdict(set)
    for name, path in _modules().items():
        if not _outside_engines(name) or _is_generated(name):
            continue
        for line, spelt in _name_uses(_parsed(path), names):
            key = _listed_as(name, spelt)
            found[key or (name, spelt)].add(f"{_shown(path)}:{line} {spelt}")
    listed = _names_outside()
    where = {key: "; ".join(sorted(spelt)) for key, spelt in found.items()}
    wrong = _unlisted(where, listed, "SGLANG_NAMES_OUTSIDE") + _stale(where, listed, "SGLANG_NAMES_OUTSIDE")
    assert not wrong, "SGLang's names outside glm5lib/engines:\n" + "\n".join(wrong)


def test_the_page_lists_every_sglang_name_read_outside_its_folder():
    text = PAGE.read_text()
    missing = sorted({name for _, name in _names_outside() if "*" not in name and f"`{name}`" not in text})
    assert not missing, f"{PAGE.name} does not list: {', '.join(missing)}"


def test_the_check_for_sglang_names_can_fail(monkeypatch):
    names = _sglang_names()
    assert {"schedule_conservativeness", "kv_cache_dtype", "decode_cuda_graph_mem_usage_gb", "served_model_name"} <= names
    assert not {"running_cap", "stream_interval", "port", "dtype"} & names
    tree = ast.parse('''def f(ev, dtype):
    """served_model_name in prose."""
    return ev.startup.get("decode_cuda_graph_mem_usage_gb"), ev.tp_size, "vllm:num_requests_running", dtype
''')
    assert _name_uses(tree, names) == {(3, "decode_cuda_graph_mem_usage_gb"), (3, "tp_size"),
                                       (3, "vllm:num_requests_running")}
    monkeypatch.setitem(SGLANG_NAMES_OUTSIDE, "glm5lib.diagnose.rules.graphs2", {"served_model_name": "planted"})
    with pytest.raises(AssertionError, match=r"does not list: (.*, )?served_model_name"):
        test_the_page_lists_every_sglang_name_read_outside_its_folder()


# --------------------------------------------------------------------------- rules read the evidence

# Rules that read the server log's text besides the evidence tables, with why.
LOG_TEXT_READERS = {
    "glm5lib.diagnose.rules.environment": "known incompatibilities (data/knowledge/incompatibilities.json) are "
                                          "matched by their log_pattern against the log's text",
}
# Calls that read a file: no rule reads one (the evidence has read the phase).
_FILE_READS = ("open", "read_text", "read_bytes", "read_csv", "read_json", "parse_log", "iter_log",
               "load_metrics_csv", "load_evidence")


def test_rules_read_the_log_only_through_the_evidence():
    wrong = []
    readers: dict[str, str] = {}
    for name, path in _modules().items():
        if not name.startswith("glm5lib.diagnose.rules"):
            continue
        for node in ast.walk(_parsed(path)):
            if isinstance(node, ast.Attribute) and node.attr == "log_text":
                readers.setdefault(name, f"{name}:{node.lineno} reads the log's text (read the evidence's tables)")
            if isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if called in _FILE_READS:
                    wrong.append(f"{name}:{node.lineno} calls {called} (a rule reads the Evidence it is given)")
    wrong += _unlisted(readers, LOG_TEXT_READERS, "LOG_TEXT_READERS") + _stale(readers, LOG_TEXT_READERS, "LOG_TEXT_READERS")
    assert not wrong, "\n".join(wrong)


# --------------------------------------------------------------------------- what the page says

def _page_section(title: str) -> str:
    text = PAGE.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start: end if end >= 0 else len(text)]


def _layer_table() -> dict[int, set[str]]:
    """The page's layer table: layer number -> the modules its row names (a module's own parts named
    beside it, ``diagnose.rules`` in ``diagnose``'s row, left out)."""
    rows: dict[int, set[str]] = {}
    for line in _page_section("Layers").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0][:1].isdigit():
            continue
        named = re.findall(r"`([\w.]+)`", cells[1])
        rows[int(cells[0].split()[0])] = {m for m in named if not any(m.startswith(o + ".") for o in named)}
    return rows


def test_the_pages_layer_table_is_the_layers_the_test_checks():
    expected = {i: {m.removeprefix("glm5lib.") for m in layer if m != "glm5lib.__main__"}
                for i, layer in enumerate(LAYERS)}
    assert _layer_table() == expected


def test_the_pages_limits_are_the_engines_limits():
    from glm5lib import engines

    listed = re.search(r"\(`engines\.LIMITS`\): (.*?)\. ", PAGE.read_text(), re.DOTALL)
    assert listed is not None, "the page lists no limits after (`engines.LIMITS`):"
    assert re.findall(r"`(\w+)`", listed.group(1)) == list(engines.LIMITS)


def _bundled_log_engines() -> list[str]:
    """The bundled engines with a log module of their own (engines/<name>/log.py)."""
    return sorted(path.parent.name for path in (PACKAGE / "engines").glob("*/log.py"))


def test_every_bundled_engine_with_its_own_log_is_registered_everywhere_the_page_says():
    import importlib

    from glm5lib import engines
    from glm5lib.logs import engine as log_engines

    environment = importlib.import_module("glm5lib.telemetry.environment")  # the package re-exports a function so named
    knowledge = PACKAGE.parent / "data" / "knowledge"
    remedies = json.loads((knowledge / "remedies.json").read_text())["engines"]
    knobs = json.loads((knowledge / "engines.json").read_text())["engines"]
    places = {
        "engines.ADAPTER_MODULES": lambda n: engines.ADAPTER_MODULES.get(n) == f"glm5lib.engines.{n}",
        "logs.engine.ENGINE_MODULES": lambda n: log_engines.ENGINE_MODULES.get(n) == f"glm5lib.engines.{n}.log",
        "remedies.json": lambda n: n in remedies,
        # SGLang's names are the diff's own vocabulary: other engines map their knobs onto them
        "engines.json": lambda n: n in knobs or n == engines.DEFAULT_ENGINE,
        "telemetry/environment.py": lambda n: n in environment._PACKAGES,
    }
    bundled = _bundled_log_engines()
    assert len(bundled) >= 3
    missing = [f"{n} not in {where}" for n in bundled for where, has in places.items() if not has(n)]
    assert not missing, "\n".join(missing)


def test_the_check_for_bundled_engines_can_fail(monkeypatch):
    from glm5lib.logs import engine as log_engines

    monkeypatch.delitem(log_engines.ENGINE_MODULES, "transformers")
    with pytest.raises(AssertionError, match=r"transformers not in logs.engine.ENGINE_MODULES"):
        test_every_bundled_engine_with_its_own_log_is_registered_everywhere_the_page_says()


def test_every_rule_function_is_in_rules():
    import importlib

    from glm5lib.diagnose.rules import RULES

    missing = []
    for name, path in _modules().items():
        if not name.startswith("glm5lib.diagnose.rules."):
            continue
        module = importlib.import_module(name)
        missing += [f"{name}.{node.name}" for node in _parsed(path).body
                    if isinstance(node, ast.FunctionDef) and node.name.startswith("rule_")
                    and getattr(module, node.name) not in RULES]
    assert not missing, "rule functions not listed in rules.RULES: " + ", ".join(missing)


def test_the_page_checks_can_fail(monkeypatch):
    from glm5lib import engines
    from glm5lib.diagnose import rules

    monkeypatch.setattr(sys.modules[__name__], "LAYERS", [*LAYERS[:-1], ("glm5lib.cli", "glm5lib.shell")])
    with pytest.raises(AssertionError):
        test_the_pages_layer_table_is_the_layers_the_test_checks()
    monkeypatch.setitem(engines.LIMITS, "kv_dtype", "the KV cache's data type")
    with pytest.raises(AssertionError):
        test_the_pages_limits_are_the_engines_limits()
    monkeypatch.setattr(rules, "RULES", [r for r in rules.RULES if r.__name__ != "rule_cuda_graph"])
    with pytest.raises(AssertionError, match=r"glm5lib\.diagnose\.rules\.batch\.rule_cuda_graph"):
        test_every_rule_function_is_in_rules()


# Dotted names the page gives that are not glm5lib's (a third-party or standard-library function).
NOT_GLM5LIB = ("numpy.", "importlib.")
_FILE_SUFFIXES = (".py", ".json", ".jsonl", ".csv", ".md", ".html")


def _defined_classes() -> dict[str, str]:
    """Class name -> the module defining it (the first, in module order)."""
    out: dict[str, str] = {}
    for name, path in _modules().items():
        for node in _parsed(path).body:
            if isinstance(node, ast.ClassDef):
                out.setdefault(node.name, name)
    return out


def _resolves(dotted: str, classes: dict[str, str]) -> bool:
    """Whether ``dotted`` (``engines.LIMITS``, ``Capabilities.flag``, ``glm5lib.logs.ServerLog``)
    names something in glm5lib: a module, then attributes (a dataclass's fields among them)."""
    import importlib

    parts = dotted.removeprefix("glm5lib.").split(".")
    if parts[0][:1].isupper():
        if parts[0] not in classes:
            return False
        obj, rest = getattr(importlib.import_module(classes[parts[0]]), parts[0]), parts[1:]
    else:
        for i in range(len(parts), 0, -1):
            try:
                obj, rest = importlib.import_module("glm5lib." + ".".join(parts[:i])), parts[i:]
                break
            except ImportError:
                continue
        else:
            return False
    for part in rest:
        if hasattr(obj, part):
            obj = getattr(obj, part)
        elif part in getattr(obj, "__dataclass_fields__", {}):
            return part == rest[-1]
        else:
            return False
    return True


def _page_references() -> tuple[list[str], list[str]]:
    """The page's backticked dotted names (call arguments dropped) and paths."""
    text = PAGE.read_text()
    dotted = sorted(set(re.findall(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?:\([^`]*\))?`", text)))
    paths = sorted(set(re.findall(r"`([\w./-]+/[\w./-]*)`", text)))
    return dotted, paths


def _missing_references(dotted: list[str], paths: list[str]) -> list[str]:
    classes = _defined_classes()
    missing = [d for d in dotted
               if not d.startswith(NOT_GLM5LIB) and not d.endswith(_FILE_SUFFIXES) and not _resolves(d, classes)]
    missing += [p for p in paths if not ((PACKAGE.parent / p).exists() or (PACKAGE / p).exists())]
    return missing


def test_every_name_and_path_the_page_gives_exists():
    """``logs.model.parser_facts``, ``engines/sglang/flags/``: each dotted name on the page is
    glm5lib's (module, class, function or field) and each path is in the repository or the package."""
    missing = _missing_references(*_page_references())
    assert not missing, f"{PAGE.name} names what does not exist: {', '.join(missing)}"


def test_the_check_for_the_pages_names_can_fail():
    assert _missing_references(["logs.parser_facts", "Capabilities.metrics_switch", "rules.RULES", "Forecast.needs"],
                               ["engines/sglang/scheduler.py", "engines/sglang/schedule.py"]) \
        == ["logs.parser_facts", "Capabilities.metrics_switch", "rules.RULES", "engines/sglang/schedule.py"]
    assert not _missing_references(["logs.model.parser_facts", "Capabilities.metrics_flag", "diagnose.rules.RULES",
                                    "Forecast.needs", "glm5lib.logs.ServerLog", "numpy.polyfit", "report.md"], [])


# --------------------------------------------------------------------------- each check can fail

# (check, module planted, its source, what the check then says): each check fails on a violation.
PLANTED = [
    (test_own_modules_are_imported_at_top_level, "glm5lib.diagnose.late",
     "def f():\n    from glm5lib import rundir\n    return rundir\n",
     r"late\.py:2 imports glm5lib\.rundir inside a function"),
    (test_every_import_by_name_is_listed_with_its_reason, "glm5lib.report.plugins",
     "import importlib\n\ndef load(name):\n    return importlib.import_module(name)\n",
     r"glm5lib\.report\.plugins:\[4\] imports a module named at run time \(or list it in DYNAMIC_IMPORTS"),
    (test_packages_resolve_their_re_exports_through_module_getattr, "glm5lib.report",
     "def __getattr__(name):\n    import glm5lib.report.conclude as c\n    return getattr(c, name)\n",
     r"glm5lib\.report:1 defines its own __getattr__"),
    (test_packages_resolve_their_re_exports_through_module_getattr, "glm5lib.report",
     "from glm5lib.lazy import module_getattr\n\n__getattr__ = module_getattr(__name__, {}, globals())\n",
     r"the page names .* the code: .*'glm5lib\.report'"),
    (test_no_engine_flag_is_spelt_outside_the_engines_package, "glm5lib.diagnose.rules.streams",
     'HINT = "raise the server\'s --stream-interval"\n',
     r"glm5lib\.diagnose\.rules\.streams:\[1\]: --stream-interval"),
    (test_sglangs_names_outside_its_folder_are_exactly_those_listed, "glm5lib.diagnose.rules.graphs2",
     'def f(ev):\n    return ev.startup.get("cuda_graph_batch_sizes")\n',
     r"graphs2\.py:2 cuda_graph_batch_sizes"),
    (test_rules_read_the_log_only_through_the_evidence, "glm5lib.diagnose.rules.grep",
     'def rule_grep(ev):\n    return "OOM" in ev.log_text\n',
     r"glm5lib\.diagnose\.rules\.grep:2 reads the log's text"),
    (test_rules_read_the_log_only_through_the_evidence, "glm5lib.diagnose.rules.grep",
     'def rule_grep(ev):\n    return open(ev.run_dir / "server.log").read()\n',
     r"glm5lib\.diagnose\.rules\.grep:2 calls open"),
]


@pytest.mark.parametrize(("check", "module", "source", "message"), PLANTED,
                         ids=[f"{c.__name__}-{m}" for c, m, *_ in PLANTED])
def test_each_check_fails_on_a_planted_violation(check, module, source, message, tmp_path, monkeypatch):
    check()
    _plant(monkeypatch, tmp_path, module, source)
    with pytest.raises(AssertionError, match=message):
        check()


# (check, its list of exceptions, an entry nothing matches): a stale exception fails the check.
STALE = [
    (test_every_listed_lazy_import_is_still_made, LAZY_PAIRS, ("glm5lib.engines.sglang.config", "glm5lib.logs")),
    (test_every_listed_lazy_import_is_still_made, LAZY_ALLOWED, "glm5lib"),
    (test_every_import_by_name_is_listed_with_its_reason, DYNAMIC_IMPORTS, "glm5lib.paths"),
    (test_packages_resolve_their_re_exports_through_module_getattr, OWN_GETATTR, "glm5lib.engines.sglang"),
    (test_no_engine_flag_is_spelt_outside_the_engines_package, FLAGS_PENDING,
     ("glm5lib.report.conclude", "--enable-metrics")),
    (test_sglangs_names_outside_its_folder_are_exactly_those_listed, SGLANG_NAMES_OUTSIDE, "glm5lib.diagnose.linetime"),
    (test_rules_read_the_log_only_through_the_evidence, LOG_TEXT_READERS, "glm5lib.diagnose.rules.phases"),
]


@pytest.mark.parametrize(("check", "table", "key"), STALE, ids=[f"{c.__name__}-{k}" for c, _, k in STALE])
def test_each_check_fails_on_a_stale_exception(check, table, key, monkeypatch):
    check()
    monkeypatch.setitem(table, key, {"served_model_name": "stale"} if table is SGLANG_NAMES_OUTSIDE else "stale")
    with pytest.raises(AssertionError, match=r"\[" + re.escape(repr(key if table is not SGLANG_NAMES_OUTSIDE
                                                                     else (key, "served_model_name")))
                       + r"\] is found nowhere now"):
        check()
