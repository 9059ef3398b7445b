"""SGLang's ``--config FILE``, merged as every bundled release merges it (the release's own merger is
the judge in tests/integration/contract), and the private file that carries a server's keys."""

from __future__ import annotations

import json
import stat

import pytest
import yaml

from glm5lib.engines.sglang.config import ServerConfig, catalogue, merge_config_file, write_key_file
from glm5lib.errors import ConfigError

CAT = catalogue("0.5.16")


def _file(tmp_path, text: str, name: str = "args.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_files_arguments_go_first_so_the_command_line_wins(tmp_path):
    path = _file(tmp_path, "max-running-requests: 64\nenable-metrics: true\nskip-server-warmup: false\n"
                           "cuda-graph-bs-decode: [1, 2, 4]\ntp-size: 2\nmem-fraction-static: 0.8\n")
    merged = merge_config_file(["--model-path", "m", "--config", path, "--max-running-requests", "256"], CAT)
    assert merged == ["--max-running-requests", "64", "--enable-metrics", "--cuda-graph-bs-decode", "1", "2", "4",
                      "--tp-size", "2", "--mem-fraction-static", "0.8", "--model-path", "m",
                      "--max-running-requests", "256"]
    config = ServerConfig.from_argv(merged, release="0.5.16")
    assert config.max_running_requests == 256 and config.enable_metrics is True and config.tp_size == 2
    assert config.cuda_graph_bs_decode == [1, 2, 4] and "skip_server_warmup" not in config.explicit
    assert merge_config_file(["--model-path", "m"], CAT) == ["--model-path", "m"]


def test_a_boolean_that_is_no_switch_is_written_as_its_value_and_a_mapping_as_json(tmp_path):
    path = _file(tmp_path, 'json-model-override-args: {"a": 1}\n')
    assert merge_config_file(["--config", path], CAT) == ["--json-model-override-args", '{"a": 1}']
    # YAML 1.1 reads yes as true: a field that is no switch gets it as SGLang writes it
    path = _file(tmp_path, "served-model-name: yes\n", "b.yaml")
    assert merge_config_file(["--config", path], CAT) == ["--served-model-name", "true"]


@pytest.mark.parametrize(("argv", "text", "message"), [
    (["--config", "{a}", "--config", "{a}"], "tp-size: 2\n", "given twice"),
    (["--model-path", "m", "--config"], None, "names no file"),
    (["--config", "{a}.json"], None, "existing .yaml or .yml"),
    (["--config", "{a}"], "- tp-size\n- 2\n", "one mapping"),
    (["--config", "{a}"], "tp-size: [unclosed\n", "cannot be read as YAML"),
    (["--config", "{a}"], "enable-metrics: true\nlora-paths: [a]\n", "cannot take"),
])
def test_what_sglang_refuses_is_refused_naming_the_file(tmp_path, argv, text, message):
    path = _file(tmp_path, text or "tp-size: 2\n")
    with pytest.raises(ConfigError, match=message):
        merge_config_file([a.format(a=path) for a in argv], CAT)


def test_the_key_file_is_the_users_alone_and_reads_back_whatever_the_key_holds():
    key = 'sk-"quoted": #not-a-comment\\ \u00e9\n'
    path = write_key_file({"api-key": key, "admin-api-key": "adm"})
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.suffix == ".yaml"
        assert yaml.safe_load(path.read_text()) == json.loads(path.read_text()) == {"api-key": key,
                                                                                   "admin-api-key": "adm"}
        config = ServerConfig.from_argv(merge_config_file(["--model-path", "m", "--config", str(path)], CAT),
                                        release="0.5.16")
        assert config.api_key == key and config.admin_api_key == "adm"
    finally:
        path.unlink()
