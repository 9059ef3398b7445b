from __future__ import annotations

import inspect

import glm5lib
from glm5lib import errors


def _error_classes():
    return [
        obj
        for _, obj in inspect.getmembers(errors, inspect.isclass)
        if issubclass(obj, Exception) and obj.__module__ == errors.__name__
    ]


def test_every_error_derives_from_the_base_and_has_a_one_line_docstring():
    classes = _error_classes()
    assert len(classes) >= 10
    for cls in classes:
        assert issubclass(cls, errors.Glm5Error), cls
        doc = cls.__doc__ or ""
        assert doc.strip(), f"{cls.__name__} has no docstring"
        assert "\n" not in doc.strip(), f"{cls.__name__} docstring is not one line"


def test_every_error_is_exported_from_the_package():
    for cls in _error_classes():
        assert getattr(glm5lib, cls.__name__) is cls
        assert cls.__name__ in errors.__all__


def test_config_error_is_a_value_error_and_names_the_field():
    exc = errors.ConfigError("bad", field="tp_size", valid=["1", "2"])
    assert isinstance(exc, ValueError)
    assert exc.field == "tp_size"
    assert exc.valid == ["1", "2"]


def test_server_error_shows_the_log_lines_that_explain_it():
    exc = errors.ServerLaunchError(
        "server exited", cause="oom", exit_code=1, log_lines=["RuntimeError: Not enough memory."]
    )
    text = str(exc)
    assert "server exited" in text
    assert "Not enough memory" in text
    assert exc.cause == "oom" and exc.exit_code == 1


def test_every_public_name_resolves_to_the_object_in_its_module():
    import importlib

    for name, module in glm5lib._LAZY.items():
        assert name in glm5lib.__all__
        assert getattr(glm5lib, name) is getattr(importlib.import_module(module), name), name


def test_unknown_attribute_is_an_attribute_error():
    import pytest

    with pytest.raises(AttributeError, match="no_such_name"):
        glm5lib.no_such_name  # noqa: B018


def test_a_sweep_abort_quotes_its_log_lines_as_a_server_error_does():
    from glm5lib.errors import ServerLaunchError, SweepAbortedError

    lines = ["Traceback (most recent call last):", "RuntimeError: CUDA error"]
    aborted = str(SweepAbortedError("sweep stopped", level=64, log_lines=lines))
    assert aborted == "sweep stopped\n    | Traceback (most recent call last):\n    | RuntimeError: CUDA error"
    assert str(ServerLaunchError("server exited", log_lines=lines)) == aborted.replace("sweep stopped", "server exited")
    assert str(SweepAbortedError("sweep stopped")) == "sweep stopped"
