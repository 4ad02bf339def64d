"""One schema, three users: the writer in llm_locust, the loader in analysis and the enums agree.

A new error kind or column added to :mod:`llm_locust.analysis.schema` (or to the record without it) fails
here instead of in the analysis of some later run.
"""

from __future__ import annotations

import csv
import math
from dataclasses import fields

import pandas as pd
import pytest

from llm_locust.analysis import schema
from llm_locust.analysis.rundir.reader import RunDirError, load_run
from llm_locust.analysis.server.files import read_server_files
from llm_locust.client.record import CSV_COLUMNS, ErrorKind, RequestRecord, TokensSource
from llm_locust.master.logfollow import LogFollower
from llm_locust.master.runwriter import RunDirectory
from tests.analysis_factories import REQUEST_COLUMNS as FACTORY_COLUMNS
from tests.analysis_factories import make_request, write_run_dir


def _write(tmp_path, records, server_rows=()):
    run_dir = RunDirectory(tmp_path / "run")
    run_dir.requests.write_rows([record.to_row() for record in records])
    run_dir.server_metrics.write_rows(server_rows)
    run_dir.write_meta({"started_at_s": 1000.0, "ended_at_s": 1100.0})
    run_dir.close()
    return tmp_path / "run"


def test_the_record_is_the_schema():
    assert tuple(f.name for f in fields(RequestRecord)) == schema.REQUEST_COLUMNS == CSV_COLUMNS
    assert ErrorKind is schema.ErrorKind and TokensSource is schema.TokensSource
    assert set(FACTORY_COLUMNS) <= set(schema.REQUEST_COLUMNS)


def test_every_error_kind_and_tokens_source_the_writer_writes_loads(tmp_path):
    kinds = list(ErrorKind)
    sources = list(TokensSource)
    records = [
        RequestRecord(
            request_id=f"w-{i}",
            worker_id="w",
            name="chat",
            t_start_s=1000.0 + i,
            e2e_ms=10.0 * (i + 1),
            error_kind=kind.value,
            tokens_source=sources[i % len(sources)].value,
            status_code=200 if kind is ErrorKind.NONE else 500,
        )  # fmt: skip
        for i, kind in enumerate(kinds)
    ]

    requests = load_run(_write(tmp_path, records)).requests

    assert list(requests["error_kind"]) == [kind.value for kind in kinds]
    assert list(requests["tokens_source"]) == [sources[i % len(sources)].value for i in range(len(kinds))]
    assert list(requests["e2e_ms"]) == [10.0 * (i + 1) for i in range(len(kinds))]


def test_loaded_columns_and_dtypes_are_the_schemas(tmp_path):
    record = RequestRecord(request_id="w-0", worker_id="w", name="chat", t_start_s=1000.0, ttft_ms=20.0,
                           e2e_ms=30.0, output_tokens=3, token_times_us="20000 25000 30000")  # fmt: skip
    sample = (1000.5, "http://127.0.0.1:1/metrics", "vllm:num_requests_running", "{}", 2.0)

    run = load_run(_write(tmp_path, [record], [sample]))

    assert tuple(run.requests.columns) == schema.REQUEST_COLUMNS
    for column in schema.REQUEST_SCHEMA:
        loaded = run.requests[column.name]
        if column.dtype == "float64":
            assert loaded.dtype == "float64", column.name
        else:
            assert pd.api.types.is_string_dtype(loaded) and loaded.map(type).eq(str).all(), column.name
    assert tuple(run.server_samples.columns) == schema.SERVER_METRICS_COLUMNS
    assert run.server_samples.iloc[0].tolist() == list(sample)


def test_an_error_kind_outside_the_enum_is_refused(tmp_path):
    path = write_run_dir(tmp_path, requests=[make_request(1.0, error_kind="not_a_kind")], steps=[(1, 0.0, 10.0)])
    with pytest.raises(RunDirError, match="unknown error_kind values \\['not_a_kind'\\]"):
        load_run(path)


def test_an_older_file_without_the_optional_columns_gets_their_fill(tmp_path):
    path = write_run_dir(tmp_path, requests=[make_request(1.0)], steps=[(1, 0.0, 10.0)])

    requests = load_run(path).requests

    optional = [c for c in schema.REQUEST_SCHEMA if not c.required]
    assert optional, "the schema has columns added after version 1"
    for column in optional:
        value = requests.loc[0, column.name]
        if column.missing is not None:
            assert value == column.missing, column.name
        elif column.dtype == "str":
            assert value == "", column.name
        else:
            assert math.isnan(value), column.name


def test_the_log_follower_writes_the_stamp_header_the_loader_reads(tmp_path):
    source = tmp_path / "server_source.log"
    source.write_text("line one\nline two\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    follower = LogFollower(source, run_dir)
    follower.stop()

    with open(run_dir / schema.SERVER_LOG_STAMPS, newline="") as f:
        header = next(csv.reader(f))
    files = read_server_files(run_dir)

    assert tuple(header) == schema.STAMP_COLUMNS
    assert files.log_text.splitlines() == ["line one", "line two"] and files.arrival_s is not None
    assert math.isnan(files.arrival_s[0])  # backlog lines are not dated


def test_the_factorys_run_json_keys_are_documented(tmp_path):
    import json

    path = write_run_dir(tmp_path, requests=[], steps=[(1, 0.0, 10.0)])
    keys = set(json.loads((path / schema.RUN_JSON).read_text()))

    assert keys <= set(schema.RUN_JSON_KEYS) - {"dwell_s"}
    assert set(schema.RUN_JSON_REQUIRED) <= keys


def test_every_scrape_outcome_the_scraper_writes_reads_back(tmp_path):
    from llm_locust.analysis.server.files import read_scrapes
    from llm_locust.master.scraper import ScrapeOutcome

    outcomes = [
        ScrapeOutcome(
            t_s=1000.0 + i,
            source="http://127.0.0.1:1/metrics",
            ok=kind is None,
            error_kind=kind,
            status_code=None if kind else 200,
            duration_ms=3.0,
            bytes=10,
            samples=0 if kind else 5,
        )  # fmt: skip
        for i, kind in enumerate([None, *schema.ScrapeErrorKind])
    ]
    run_dir = RunDirectory(tmp_path / "run")
    run_dir.server_scrapes.write_rows([outcome.row() for outcome in outcomes])
    run_dir.close()

    with open(tmp_path / "run" / schema.SERVER_SCRAPES_CSV, newline="") as f:
        header = next(csv.reader(f))
    scrapes = read_scrapes(tmp_path / "run" / schema.SERVER_SCRAPES_CSV)

    assert tuple(header) == schema.SCRAPE_COLUMNS == tuple(f.name for f in fields(ScrapeOutcome))
    assert list(scrapes["error_kind"]) == ["", *(kind.value for kind in schema.ScrapeErrorKind)]
    assert list(scrapes["ok"]) == [True] + [False] * len(schema.ScrapeErrorKind)
