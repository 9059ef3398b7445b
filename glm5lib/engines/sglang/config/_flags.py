"""Flag spellings and ServerArgs field names of an SGLang release, in both directions."""

from __future__ import annotations

from glm5lib.engines.sglang.config._releases import RENAMED, Catalogue, catalogue
from glm5lib.engines.sglang.config._values import _closest
from glm5lib.errors import ConfigError

__all__ = ["field_for", "flag_for"]


def _unknown_field_error(
    name: str, what: str = "SGLang server argument", cat: Catalogue | None = None
) -> ConfigError:
    cat = cat or catalogue()
    close = _closest(name, cat.specs)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return ConfigError(
        f"unknown {what} {name!r}{hint} (SGLang {cat.release} knows "
        f"{len(cat.specs)} fields; see glm5lib.engines.sglang.config.catalogue({cat.release!r}))",
        field=name,
        valid=close or sorted(cat.specs),
    )


def flag_for(field: str, release: str | None = None) -> str:
    """The canonical command-line flag of a ServerArgs field (``fp4_gemm_runner_backend`` -> ``--fp4-gemm-backend``)."""
    cat = catalogue(release)
    name = cat.field_name(field)
    if name is None:
        raise _unknown_field_error(field, cat=cat)
    return cat.specs[name].flag


def field_for(flag: str, release: str | None = None) -> str:
    """The ServerArgs field a flag sets (``--fp4-gemm-backend`` or ``--tp-size`` -> field name).

    Accepts every spelling SGLang registers and, like argparse, an unambiguous prefix.
    """
    cat = catalogue(release)
    _FLAG_TO_FIELD, _LONG_FLAGS = cat.flag_to_field, cat.long_flags
    name = flag.split("=", 1)[0]
    if not name.startswith("-"):
        name = "--" + name
    if name in _FLAG_TO_FIELD:
        return _FLAG_TO_FIELD[name]
    prefixed = [f for f in _LONG_FLAGS if f.startswith(name)] if name.startswith("--") else []
    fields = sorted({_FLAG_TO_FIELD[f] for f in prefixed})
    if len(fields) == 1:
        return fields[0]
    if len(fields) > 1:
        older = name[2:].replace("-", "_")
        successor = cat.field_name(older) if older in RENAMED else None
        hint = (f" ({name} of earlier releases is {cat.specs[successor].flag} in SGLang {cat.release})"
                if successor in cat.specs else "")
        raise ConfigError(
            f"ambiguous SGLang flag {name!r}: it could be {', '.join(sorted(prefixed)[:8])}{hint}",
            field=name,
            valid=sorted(prefixed),
        )
    close = _closest(name, _LONG_FLAGS)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigError(
        f"unknown SGLang flag {name!r}{hint}", field=name, valid=close or _LONG_FLAGS
    )
