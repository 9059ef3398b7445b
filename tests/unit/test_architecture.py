"""The package's shape, as docs/architecture.md states it: sizes, layers, no cycles, no prints,
engines compared by their facts and never by their names, every package on the page.

These read the source with :mod:`ast`; they fail when a change breaks the layering that lets the
next engine, rule or log format land in one place.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections import defaultdict
from pathlib import Path

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
     "glm5lib.rundir", "glm5lib.stepmodel", "glm5lib.cpus", "glm5lib.lazy"),
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


# Function-level imports of glm5lib's own modules hide the dependency graph; the few that keep
# `glm5 --help` and `import glm5lib` fast are listed here with their reason.
LAZY_ALLOWED = {
    "glm5lib": "re-exports resolved on first use (import glm5lib stays cheap)",
    "glm5lib.cli": "each sub-command's module is imported when the parser is built",
    "glm5lib.sim": "the stand-in's entry point starts its server (aiohttp) only when asked to",
}


# (module, imported module) pairs imported inside a function on purpose, with the reason.
LAZY_PAIRS = {
    ("glm5lib.engines", "glm5lib.logs.engine"): "the registry lists engines without pandas (glm5 --help); an "
                                                "engine registered from outside brings its log reader",
    ("glm5lib.engines.sglang.config", "glm5lib.logs"): "the stand-in imports config and starts without pandas, "
                                        "which the log parser needs",
    ("glm5lib.engines.sglang.config._sglang", "glm5lib.logs"): "the same import, where SGLangConfig now lives",
    ("glm5lib.engines.sglang", "glm5lib.engines.sglang.launcher"): "importing SGLang's configuration runs its "
                                                  "engine package: the launcher (pandas) is loaded when a server is launched",
}


def test_own_modules_are_imported_at_top_level():
    modules = _modules()
    lazy = []
    for name, path in modules.items():
        if name in LAZY_ALLOWED or name.startswith("glm5lib.cli"):
            continue
        for target, line, top in _imports(name, path):
            resolved = _resolve(target, modules)
            # a generated flag catalogue is data, read only when the engine's own parser is absent
            if not top and resolved and not _is_generated(resolved) and (name, resolved) not in LAZY_PAIRS:
                lazy.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target} inside a function")
    assert not lazy, "\n".join(sorted(set(lazy)))


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
            if field and field not in engines.LIMITS:
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


def _word(name: str):
    import re

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
    ("glm5lib.tune.search", "polyfit"): "the parabola through three measured latency ratios where a tuning "
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
    fake = tmp_path / "glm5lib" / "diagnose" / "second.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("import numpy as np\n\ndef fit(x, y):\n    return np.linalg.lstsq(x, y, rcond=None)\n")
    modules = {**_modules(), "glm5lib.diagnose.second": fake}
    monkeypatch.setattr(sys.modules[__name__], "_modules", lambda: modules)
    with pytest.raises(AssertionError, match="second:4 calls lstsq"):
        test_one_solver_and_one_model_of_throughput()
