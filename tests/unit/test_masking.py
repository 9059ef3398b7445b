"""glm5lib.masking: one answer to "is this a secret" for every writer."""

from __future__ import annotations

import pytest

from glm5lib.masking import (
    MASK,
    is_secret_name,
    mask_argv,
    mask_env,
    mask_mapping,
    mask_text,
    mask_value,
    secret_env_values,
)


@pytest.mark.parametrize("name", [
    "api_key", "admin_api_key", "hf_token", "token", "password", "ssl_keyfile_password",
    "GLM5_API_KEY", "OPENAI_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "AWS_SECRET_ACCESS_KEY",
    "--api-key", "--admin-api-key", "client_secret", "private_key_path", "credentials",
])
def test_secret_names(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", [
    "radix_eviction_key", "tokenizer_metrics_custom_labels_header", "max_total_tokens",
    "tokenizer_path", "ssl_keyfile", "TOKENIZERS_PARALLELISM", "bucket_time_to_first_token",
    "kt_max_deferred_experts_per_token", "eos_token", "model_path", "sort_key", "CUDA_VISIBLE_DEVICES",
    "allow_credentials", "--allow-credentials",  # vLLM's CORS switch, refused by --set were it a secret
])
def test_names_that_only_look_like_secrets(name):
    assert not is_secret_name(name)


def test_every_flag_of_the_bundled_catalogue_is_judged_as_before():
    # The catalogue's only credentials are the two API keys; every other field stays readable.
    from glm5lib.engines.sglang.config import SGLANG_FLAGS, catalogue
    assert sorted(f for f in catalogue("0.5.9").specs if is_secret_name(f)) == ["admin_api_key", "api_key"]
    # 0.5.23 (the default release) adds two real credentials, masked too
    assert sorted(f for f in SGLANG_FLAGS if is_secret_name(f)) == [
        "admin_api_key", "api_key", "ssl_keyfile_password", "watermark_key"]


def test_mask_value_and_mapping_nested_and_by_value():
    data = {"api_key": "abc", "admin_api_key": None, "model_path": "x", "radix_eviction_key": "lru",
            "nested": {"hf_token": "t0ken-value", "n": 3}, "list": ["sk-" + "a" * 20, "plain"],
            "note": "Bearer abc.def"}
    masked = mask_mapping(data)
    assert masked["api_key"] == MASK
    assert masked["admin_api_key"] is None  # unset stays unset: nothing to hide
    assert masked["model_path"] == "x" and masked["radix_eviction_key"] == "lru"
    assert masked["nested"] == {"hf_token": MASK, "n": 3}
    assert masked["list"] == [MASK, "plain"]
    assert masked["note"] == MASK
    assert data["api_key"] == "abc"  # a copy
    assert mask_value("api_key", "") == ""
    with pytest.raises(TypeError):
        mask_mapping(["api_key"])  # type: ignore[arg-type]


def test_mask_text_assignments_tokens_and_known_values():
    line = "server_args=ServerArgs(api_key='abc123', admin_api_key=None, port=30000) hf_" + "x" * 24
    out = mask_text(line)
    assert "abc123" not in out and "api_key='***'" in out
    assert "admin_api_key=None" in out and "hf_x" not in out
    assert mask_text("key is zebra-9 here", ["zebra-9"]) == f"key is {MASK} here"
    assert mask_text("a b c", ["a"]) == "a b c"  # too short to replace literally
    assert mask_text("Authorization: Bearer s3cr3t") == f"Authorization: Bearer {MASK}"


def test_mask_argv_and_env():
    argv = ["python", "-m", "sglang.launch_server", "--api-key", "k3y-value", "--port", "30000",
            "--admin-api-key=adm1n", "--model-path", "m"]
    assert mask_argv(argv) == ["python", "-m", "sglang.launch_server", "--api-key", MASK, "--port", "30000",
                               f"--admin-api-key={MASK}", "--model-path", "m"]
    assert mask_argv(["--note", "uses zebra-9"], ["zebra-9"]) == ["--note", f"uses {MASK}"]
    env = {"GLM5_API_KEY": "s3cret-value", "CUDA_VISIBLE_DEVICES": "0,1", "HF_TOKEN": ""}
    assert mask_env(env) == {"GLM5_API_KEY": MASK, "CUDA_VISIBLE_DEVICES": "0,1", "HF_TOKEN": ""}
    assert secret_env_values(env) == ["s3cret-value"]
