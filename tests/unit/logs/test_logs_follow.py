"""A follower's update costs what the new lines cost: kept rows are not copied again."""

from __future__ import annotations

import numpy as np
import pandas as pd

from glm5lib import logs
from glm5lib.logs.growing import GrowingTable

DECODE = (
    "[2026-03-01 10:00:{s:02d}.{ms:03d} TP0] Decode batch, #running-req: {r}, #token: {t}, token usage: 0.10, "
    "cuda graph: True, gen throughput (token/s): 88{r}.50, #queue-req: 0, \n"
)
ACCESS = 'INFO:     127.0.0.1:{port} - "POST /generate HTTP/1.1" 200 OK\n'


def _lines(start: int, n: int) -> str:
    return "".join(
        DECODE.format(s=(k // 1000) % 60, ms=k % 1000, r=k % 97, t=100 + k) + ACCESS.format(port=40000 + k % 999)
        for k in range(start, start + n)
    )


def test_an_update_appends_to_the_kept_tables_without_copying_them(tmp_path):
    path = tmp_path / "server.log"
    path.write_text(_lines(0, 3000))
    follower = logs.follow_log(path)
    first = follower.update()
    with path.open("a") as fh:
        fh.write(_lines(3000, 5))
    second = follower.update()
    assert len(first.decode) == 3000 and len(second.decode) == 3005
    assert len(first.http) == 3000 and len(second.http) == 3005
    # The rows kept from the first update are the same memory in the second's tables.
    for table in ("decode", "http"):
        a, b = getattr(first, table), getattr(second, table)
        for col in a.columns:
            assert np.shares_memory(_memory(a[col]), _memory(b[col])), (table, col)
        pd.testing.assert_frame_equal(b.iloc[:3000], a)
    whole = logs.parse_log(path.read_text())
    pd.testing.assert_frame_equal(second.decode, whole.decode)
    pd.testing.assert_frame_equal(second.http, whole.http)


def test_a_caller_writing_into_a_table_changes_no_later_one(tmp_path):
    path = tmp_path / "server.log"
    path.write_text(_lines(0, 50))
    follower = logs.follow_log(path)
    first = follower.update()
    first.decode.loc[0, "running_req"] = -1
    first.http.loc[1, "path"] = "/changed"
    with path.open("a") as fh:
        fh.write(_lines(50, 2))
    second = follower.update()
    assert second.decode["running_req"].iat[0] == 0 and second.http["path"].iat[1] == "/generate"
    assert first.decode["running_req"].iat[0] == -1


def test_a_part_of_other_columns_or_types_joins_as_concat_joins_it():
    table = GrowingTable()
    parts = [
        pd.DataFrame({"a": [1, 2], "b": ["x", "y"]}),
        pd.DataFrame({"a": [3], "b": ["z"]}),
        pd.DataFrame({"a": [4.5], "b": ["w"], "c": [True]}),  # a float among ints, a new column
        pd.DataFrame({"a": [5], "b": ["v"]}),  # an int among floats, a column missing (NaN)
        pd.DataFrame({"a": [6.0], "b": [7]}),  # a number among text
    ]
    for k, part in enumerate(parts):
        table.append(part)
        expect = pd.concat(parts[: k + 1], ignore_index=True, sort=False)
        pd.testing.assert_frame_equal(table.frame(), expect)


def _memory(column: pd.Series) -> np.ndarray:
    """The numpy array holding a column's values."""
    array = column.array
    return getattr(array, "_ndarray", None) if hasattr(array, "_ndarray") else array._data


def test_a_mangled_cuda_graph_value_keeps_the_column_as_read():
    # Two shapes (cuda graph before and after the throughput), one value mangled: the joined
    # column holds text, and stays as read instead of failing the whole parse.
    text = (
        "[2026-02-10 23:32:05] Prefill batch, #new-seq: 2, #new-token: 578, #cached-token: 0, token usage: 0.00, "
        "#running-req: 1, #queue-req: 0, input throughput (token/s): 0.14, cuda graph: False\n"
        "[2026-04-05 20:02:51] Prefill batch, #new-seq: 1, #new-token: 158, #cached-token: 0, token usage: 0.08, "
        "#running-req: 31, #queue-req: 0, cuda graph: True0, input throughput (token/s): 559.53\n"
    )
    for slog in (logs.parse_log(text), logs.parse_log(text.encode())):
        assert slog.prefill["cuda_graph"].tolist() == [False, "True0"]


def test_error_rows_kept_from_an_update_are_not_copied_again(tmp_path):
    crash = (
        "[2026-03-01 10:00:0{s} TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        '  File "scheduler.py", line 1, in event_loop\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    path = tmp_path / "server.log"
    path.write_text(crash.format(s=1) + _lines(0, 20) + crash.format(s=2) + _lines(20, 20))
    follower = logs.follow_log(path)
    first = follower.update()
    with path.open("a") as fh:
        fh.write(crash.format(s=3))  # a traceback still open: the next update shows it as read so far
    second = follower.update()
    with path.open("a") as fh:
        fh.write(_lines(40, 2))
    third = follower.update()
    assert len(first.errors) == 2 and len(second.errors) == 3 and len(third.errors) == 3
    assert np.shares_memory(_memory(first.errors["kind"]), _memory(third.errors["kind"]))
    pd.testing.assert_frame_equal(third.errors, logs.parse_log(path.read_text()).errors)


def test_a_vllm_followers_access_lines_kept_from_an_update_are_not_copied_again(tmp_path):
    stats = (
        "INFO 01-22 18:27:{s:02d} metrics.py:449] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
        "41.7 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 2.0%, "
        "CPU KV cache usage: 0.0%.\n"
    )

    def lines(start: int, n: int) -> str:
        return "".join(
            ACCESS.format(port=40000 + k % 999) + (stats.format(s=k % 60) if k % 50 == 0 else "")
            for k in range(start, start + n)
        )

    path = tmp_path / "server.log"
    path.write_text(lines(0, 3000))
    follower = logs.follow_log(path, engine="vllm")
    first = follower.update()
    with path.open("a") as fh:
        fh.write(lines(3000, 60))
    second = follower.update()
    assert len(first.http) == 3000 and len(second.http) == 3060
    for col in first.http.columns:
        assert np.shares_memory(_memory(first.http[col]), _memory(second.http[col])), col
    whole = logs.parse_log(path.read_text(), engine="vllm")
    pd.testing.assert_frame_equal(second.http, whole.http)
    pd.testing.assert_frame_equal(second.decode, whole.decode)
