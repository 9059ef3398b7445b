"""What the flag-catalogue engines (vLLM, transformers serve) share beyond their configuration:
levers read from a release's catalogue and a KV pool set in blocks."""

from glm5lib.engines.flagconfig import blocks_as_kv_tokens, catalogue_levers

SPECS = (
    ("max_seqs", "int", 1, 512, "x2", "sequences one step holds", "running"),
    ("not_in_this_release", "float", 0.5, 0.9, "0.05", "a field another release has", "memory"),
)


def test_catalogue_levers_keeps_the_fields_the_release_has_under_their_first_flag():
    levers = catalogue_levers(SPECS, {"max_seqs": {"flags": ["--max-seqs", "-s"]}})
    assert [(lv.field, lv.flag, lv.low, lv.high, lv.step, lv.acts_on) for lv in levers] == [
        ("max_seqs", "--max-seqs", 1, 512, "x2", "running")]


def test_blocks_as_kv_tokens_sizes_blocks_from_the_change_the_arguments_or_the_default():
    hook = blocks_as_kv_tokens("num_blocks", ("block_size", "--block-size"), "block_size", 16)
    assert hook("other", 10, {}, {}) is None
    assert hook("num_blocks", 10, {}, {}) == ("kv_tokens", 160)
    assert hook("num_blocks", 10, {}, {"block_size": 32}) == ("kv_tokens", 320)
    assert hook("num_blocks", 10, {"--block-size": 8}, {"block_size": 32}) == ("kv_tokens", 80)
    assert hook("num_blocks", 10, {"block_size": 4, "--block-size": 8}, {}) == ("kv_tokens", 40)
    assert hook("num_blocks", None, {}, {}) == ("kv_tokens", None)
    assert hook("num_blocks", "many", {}, {}) is None
