"""SGLang server configurations as typed, validated objects.

:class:`SGLangConfig` (``ServerConfig`` is the same class, under the name users already type)
holds the arguments of ``python -m sglang.launch_server`` under the names of SGLang's
``ServerArgs`` fields. It is built from an argv list, from a logged ``server_args=ServerArgs(...)``
dict or ``/get_server_info``, from a JSON file (the shipped ones live in ``data/configs/``), or
from keyword fields, and it is checked against a catalogue of every flag SGLang knows before
anything starts: an unknown flag comes back with the closest valid one, a wrong type, a
non-positive size or an unknown backend with the valid values.

The catalogues are generated per release from SGLang's wheels by
``scripts/build_sglang_flags.py`` and shipped as JSON package data; :func:`catalogue` returns one
(loaded on first use, then cached: importing this package reads none). :data:`SGLANG_FLAGS` and
:data:`SGLANG_SOURCE` are the default release's, read when first asked for. Field and flag names
usually correspond (``max_running_requests`` <-> ``--max-running-requests``) but not always
(``fp4_gemm_runner_backend`` <-> ``--fp4-gemm-backend``, ``tp_size`` <-> ``--tensor-parallel-size``/
``--tp-size``): use :func:`flag_for` and :func:`field_for`.

Secrets (``api_key``, ``admin_api_key``) are kept in memory so a server can be launched with
them, but are written as ``"***"`` by :meth:`SGLangConfig.save`, ``repr`` and the CLI; what is a
secret is :mod:`glm5lib.masking`'s decision alone.

Everything is defined in private modules and exported here once: ``_releases`` (releases and
their catalogues), ``_values`` (checking one value), ``_flags`` (flag <-> field), ``_graphs``
(CUDA graphs on or off, any release) and ``_sglang`` (the configuration type).
"""

from __future__ import annotations

from typing import Any

from glm5lib.engines.sglang.config._args import arg, flag_of, norm, shown_as
from glm5lib.engines.sglang.config._config_file import (
    CONFIG_FLAG,
    merge_config_file,
    write_key_file,
)
from glm5lib.engines.sglang.config._flags import field_for, flag_for
from glm5lib.engines.sglang.config._graphs import (
    cuda_graphs_off,
    decode_graph_sizes,
    graphs_off_for,
    prefill_graph_sizes,
)
from glm5lib.engines.sglang.config._releases import (
    BUNDLED_RELEASES,
    CATALOGUE_DIR,
    CATALOGUE_FORMAT,
    DEFAULT_RELEASE,
    FALLBACK_DEFAULTS,
    NEWEST_RELEASE,
    RENAMED,
    Catalogue,
    FlagSpec,
    bundled_catalogue,
    catalogue,
    config_defaults,
    default_release,
    guess_release,
    installed_catalogue,
    installed_release,
    nearest_bundled,
    read_catalogue_file,
    release_of,
    resolved_fallback,
    version_key,
)
from glm5lib.engines.sglang.config._sglang import (
    CONFIG_FORMAT,
    ServerConfig,
    SGLangConfig,
    intent_flags,
    parse_assignment,
    shipped_configs,
)
from glm5lib.engines.sglang.config._values import check_value, type_name

__all__ = [
    "BUNDLED_RELEASES",
    "CATALOGUE_DIR",
    "CATALOGUE_FORMAT",
    "CONFIG_FLAG",
    "CONFIG_FORMAT",
    "DEFAULT_RELEASE",
    "FALLBACK_DEFAULTS",
    "NEWEST_RELEASE",
    "RENAMED",
    "SGLANG_FLAGS",
    "SGLANG_SOURCE",
    "Catalogue",
    "FlagSpec",
    "SGLangConfig",
    "ServerConfig",
    "arg",
    "bundled_catalogue",
    "catalogue",
    "check_value",
    "config_defaults",
    "cuda_graphs_off",
    "decode_graph_sizes",
    "default_release",
    "field_for",
    "flag_for",
    "flag_of",
    "graphs_off_for",
    "guess_release",
    "installed_catalogue",
    "installed_release",
    "intent_flags",
    "merge_config_file",
    "nearest_bundled",
    "norm",
    "parse_assignment",
    "prefill_graph_sizes",
    "read_catalogue_file",
    "release_of",
    "resolved_fallback",
    "shipped_configs",
    "shown_as",
    "type_name",
    "version_key",
    "write_key_file",
]


def __getattr__(name: str) -> Any:
    """``SGLANG_FLAGS`` (field -> FlagSpec of the default release, in SGLang's field order) and
    ``SGLANG_SOURCE`` (which SGLang that catalogue was generated from: version, commit, origin,
    file, sha256), read from the bundled catalogue the first time they are asked for."""
    if name == "SGLANG_FLAGS":
        value: Any = bundled_catalogue(DEFAULT_RELEASE).specs
    elif name == "SGLANG_SOURCE":
        value = bundled_catalogue(DEFAULT_RELEASE).source
    else:
        raise AttributeError(f"module 'glm5lib.engines.sglang.config' has no attribute {name!r}")
    globals()[name] = value
    return value
