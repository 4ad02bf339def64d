"""User format files (llm_locust/analysis/server/userformat.py) and the user-regex log parser
(llm_locust/analysis/server/serverlog/user.py): a server that logs ``batch size=…, wait=…ms, queue=…``."""

import numpy as np
import pandas as pd
import pytest

from llm_locust.analysis.server.prometheus import metrics_config, metrics_series
from llm_locust.analysis.server.userformat import UserFormatError, load_user_format
from llm_locust.simserver.flavors.generic import FORMAT_TOML
from tests.serverlog_helpers import parse, unix, value_at

T0 = unix(2025, 11, 30, 12, 0, 0)
FMT = load_user_format(FORMAT_TOML, source="deepinfer.toml")
LINES = [
    "2025-11-30 12:00:00.000 INFO config: max_batch_size=8, kv_tokens=65536",
    "2025-11-30 12:00:01.000 INFO scheduler: batch size=3, wait=12.5ms, queue=0",
    "2025-11-30 12:00:02.500 INFO scheduler: batch size=8, wait=80.0ms, queue=4",
    "2025-11-30 12:00:03.000 WARN frontend: request rejected: queue full",
]


def test_series_config_and_errors_from_named_groups():
    result = parse(LINES, reference_s=T0, user_format=FMT)
    s = result.series
    assert result.family.value == "generic" and result.data_lines == 2
    assert s["t_s"].tolist()[:2] == [T0 + 1.0, T0 + 2.5]
    assert (value_at(s, "running", T0 + 2), value_at(s, "waiting", T0 + 2)) == (3.0, 0.0)
    assert (value_at(s, "running", T0 + 3), value_at(s, "waiting", T0 + 3)) == (8.0, 4.0)
    assert (result.config.engine, result.config.batch_ceiling) == ("deepinfer", 8)
    assert result.config.batch_ceiling_name == "max_batch_size"
    assert result.config.kv_capacity_tokens == 65536
    assert result.errors[["line", "kind"]].values.tolist() == [[4, "queue_full"]]
    assert result.errors["t_s"].iloc[0] == T0 + 3.0


def test_epoch_stamps_percent_kv_and_a_hold_limit():
    fmt = load_user_format(r"""
name = "other"
[log]
timestamp = '^(?P<ts>\d+\.\d+) '
timestamp_format = "epoch"
max_hold_s = 5
[[log.series]]
pattern = 'active=(?P<running>\d+) pending=(?P<waiting>\d+) kv=(?P<kv_usage_percent>[\d.]+)%'
""")
    lines = [f"{T0:.3f} active=2 pending=1 kv=40.0%", f"{T0 + 30:.3f} active=1 pending=0 kv=10%"]
    s = parse(lines, user_format=fmt).series
    assert value_at(s, "kv_usage_ratio", T0 + 1) == pytest.approx(0.4)
    assert np.isnan(value_at(s, "running", T0 + 10))  # held 5 s, then no data


def test_strptime_stamps_in_a_time_zone():
    fmt = load_user_format(r"""
[log]
timestamp = '^\[(?P<ts>[^\]]+)\]'
timestamp_format = "%d/%m/%Y %H:%M:%S"
timezone = "+01:00"
[[log.series]]
pattern = 'running=(?P<running>\d+)'
""")
    s = parse(["[30/11/2025 13:00:00] running=5"], user_format=fmt).series
    assert s["t_s"].iloc[0] == T0


@pytest.mark.parametrize(
    "text, message",
    [
        ("[log]\nnope = 1", "unknown keys ['nope']"),
        ("[[log.series]]\npattern = 'x=(?P<running>\\d+'", "bad regular expression"),
        ("[[log.series]]\npattern = 'x=(?P<speed>\\d+)'", "no named group"),
        ("[[log.config]]\npattern = 'x=(?P<speed>\\d+)'", "not among"),
        ("[metrics]\nlatency = 'x'", "is not among"),
        ("[log\n", "not valid TOML"),
    ],
)
def test_bad_format_files_say_why(text, message):
    with pytest.raises(UserFormatError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_user_format(text, source="bad.toml")


def test_metrics_table_of_the_format_file():
    rows = []
    for k, (running, waiting, tokens) in enumerate([(2, 0, 0), (2, 3, 100), (1, 0, 300)]):
        for name, value in (
            ("deepinfer_batch_size", running),
            ("deepinfer_queue_size", waiting),
            ("deepinfer_generated_tokens_total", tokens),
            ("deepinfer_max_batch_size", 2),
        ):
            rows.append((T0 + 2 * k, "http://x/metrics", name, "{}", float(value)))
    samples = pd.DataFrame(rows, columns=["t_s", "source", "metric", "labels", "value"])
    mapping = FMT.family_mapping()
    s = metrics_series(samples, user=mapping)
    assert s["running"].tolist()[:3] == [2.0, 2.0, 1.0] and s["waiting"].tolist()[:3] == [0.0, 3.0, 0.0]
    assert s["gen_tps"].tolist()[:2] == [50.0, 100.0]
    config = metrics_config(samples, user=mapping)
    assert (config.engine, config.batch_ceiling) == ("deepinfer", 2)
