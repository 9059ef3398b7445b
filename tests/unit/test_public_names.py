"""One public path per name: the package's export lists are explicit and agree with their modules."""

from __future__ import annotations

import glm5lib
from glm5lib import diagnose, logs, masking
from glm5lib.diagnose import rules
from glm5lib.engines.sglang import config


def test_the_top_level_exports_are_one_list():
    assert glm5lib.__all__ == sorted(glm5lib._LAZY)
    for name in glm5lib.__all__:
        assert getattr(glm5lib, name) is not None
    assert glm5lib.ConfigError is glm5lib.errors.ConfigError


def test_diagnose_re_exports_every_rule_by_name():
    assert set(rules.__all__) <= set(diagnose.__all__)
    for name in rules.__all__:
        assert getattr(diagnose, name) is getattr(rules, name), name


def test_config_keeps_no_second_definition_of_a_secret():
    for name in ("SECRET_FIELDS", "is_secret", "mask_value", "MASK"):
        assert not hasattr(config, name), f"glm5lib.engines.sglang.config.{name}: secrets are glm5lib.masking's"
    assert not hasattr(logs, "mask_secrets") and not hasattr(logs, "mask_text")
    shown = repr(config.ServerConfig(model_path="m", api_key="sk-very-secret-key-123", admin_api_key="adminpw"))
    assert "sk-very" not in shown and "adminpw" not in shown and masking.MASK in shown


def test_the_sglang_config_type_is_named_for_what_it_is():
    assert config.ServerConfig is config.SGLangConfig
    assert repr(config.SGLangConfig(model_path="m")).startswith("SGLangConfig(")


def test_check_value_is_the_config_package_s_one_check():
    spec = config.catalogue("0.5.9").specs["max_running_requests"]
    assert config.check_value(spec, 8.0) == 8
    for bad in (0, "x"):
        try:
            config.check_value(spec, bad)
        except glm5lib.ConfigError as exc:
            assert exc.field == "max_running_requests"
        else:
            raise AssertionError(f"{bad!r} passed")
