"""Any engine launched from an argv template (``BACKEND="command"``, ``ENGINE_COMMAND``).

The template's placeholders (``{host}``, ``{port}``, ``{model}``, ``{python}``) are filled by
:func:`glm5lib.server.launch_command`; ready-made templates for transformers serve, vLLM, SGLang
and the stand-in are :data:`glm5lib.engines.presets.ENGINES`. The engine behind a command is not
known in advance: its log is read by whichever log adapter recognises it, and its capability
facts are unknown (None), so rules fall back to what the evidence itself shows.
"""

from __future__ import annotations

from typing import Any

from glm5lib import http
from glm5lib import server as server_mod
from glm5lib.engines.base import Capabilities, EngineAdapter, LaunchRequest
from glm5lib.errors import ConfigError
from glm5lib.masking import mask_mapping

__all__ = ["ADAPTER", "CAPABILITIES"]

# an engine launched from a command is taken to carry prefill chunks and decode tokens in one
# step under one token budget, as vLLM and transformers serve do
CAPABILITIES = Capabilities(launches_from_config=False, accepts_foreign_flags=True, mixed_steps=True)


def _launch(request: LaunchRequest) -> Any:
    if not request.command:
        raise ConfigError(
            "BACKEND 'command' needs ENGINE_COMMAND, an argv template such as "
            "['transformers', 'serve', '{model}', '--continuous-batching', '--port', '{port}']",
            field="ENGINE_COMMAND",
        )
    return server_mod.launch_command(
        [*request.command, *request.extra_args], model=request.model or None, log_path=request.log_path,
        ready_timeout=request.ready_timeout, api_key=request.api_key, changes=request.command_changes,
        port=request.port,
    )


def _identify(url: str, api_key: str | None, timeout: float) -> dict[str, Any] | None:
    """Any OpenAI-compatible server: its ``/v1/models``."""
    models = http.get_json(url, "/v1/models", api_key=api_key, timeout=timeout)
    return mask_mapping({"models": models}) if isinstance(models, dict) and "data" in models else None


ADAPTER = EngineAdapter(
    name="command",
    title="an engine launched from a command",
    description="any engine launched from the argv template ENGINE_COMMAND (transformers serve, vLLM, SGLang...)",
    capabilities=CAPABILITIES,
    metrics={},
    log_engine=None,
    launcher=_launch,
    identify=_identify,
)
