"""``requests.csv`` lines from RequestLines: the same text csv.writer writes, and read back the same."""

from __future__ import annotations

import csv
import io
import math
import random

from llm_locust.client.record import CSV_COLUMNS, RequestRecord
from llm_locust.master.runwriter import RequestLines

TOKEN_TIMES = CSV_COLUMNS.index("token_times_us")
AWKWARD = ["", " ", ",", '"', "a,b", 'say "hi"', "line\nbreak", "cr\r", "ünïcode ✓", "  padded  "]
AWKWARD_TIMES = ["", "1,2", '1 "2"', "1\r\n2", "1\n2", " 1 2 ", "0"]


def random_cell(rng: random.Random):
    kind = rng.randrange(6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.randint(-(10**12), 10**12)
    if kind == 2:
        return rng.choice([math.nan, math.inf, -math.inf, 0.0, rng.uniform(-1e6, 1e6), 1e-300])
    if kind == 3:
        return "".join(rng.choice('ab ,"\r\nü✓0') for _ in range(rng.randrange(12)))
    if kind == 4:
        return rng.choice(AWKWARD)
    return rng.choice([True, False])


def random_times(rng: random.Random) -> str:
    if rng.random() < 0.6:
        return " ".join(str(rng.randrange(10**9)) for _ in range(rng.randrange(300)))
    return rng.choice(AWKWARD_TIMES)


def writer_line(row) -> str:
    """What csv.writer writes for the row, NaN and None as empty cells (the file's rule, restated)."""
    out = io.StringIO()
    cells = ["" if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in row]
    csv.writer(out).writerow(cells)
    return out.getvalue()


def test_a_line_is_what_csv_writer_writes():
    rng = random.Random(15)
    lines = RequestLines()
    spliced = 0
    for _ in range(2000):
        row = [random_cell(rng) for _ in CSV_COLUMNS]
        row[TOKEN_TIMES] = random_times(rng)
        assert lines.line(row) == writer_line(row), row
        spliced += not any(c in row[TOKEN_TIMES] for c in ',"\r\n')
    assert spliced > 1000  # both ways were taken


def test_one_formatter_many_rows_and_the_file_reads_back():
    lines = RequestLines()
    records = [
        RequestRecord(request_id="a", worker_id="w", name="chat", t_start_s=1.5, ttft_ms=12.25,
                      token_times_us=" ".join(str(1000 * k) for k in range(256)), error_message='x, "y"'),
        RequestRecord(request_id="b", worker_id="w", name="chat, quoted", t_start_s=2.0,
                      token_times_us="1 2,3"),
        RequestRecord(request_id="c", worker_id="w", name="chat", t_start_s=3.0),
    ]  # fmt: skip
    text = "".join(lines.line(r.to_row()) for r in records)
    assert text == "".join(writer_line(r.to_row()) for r in records)
    back = list(csv.reader(io.StringIO(text)))
    assert [row[TOKEN_TIMES] for row in back] == [r.token_times_us for r in records]
    assert back[0][CSV_COLUMNS.index("error_message")] == 'x, "y"'
    assert back[1][CSV_COLUMNS.index("name")] == "chat, quoted"
    assert back[2][CSV_COLUMNS.index("ttft_ms")] == ""  # NaN: not measured


def test_only_float_nan_and_none_become_empty_cells():
    # what csv.writer then formats as it always did: a NaN of another type is not ours to blank
    from decimal import Decimal

    import numpy as np
    import pandas as pd

    from llm_locust.master.runwriter import csv_cells

    values = (None, math.nan, np.float64("nan"), np.float32("nan"), Decimal("NaN"), pd.NA, "", 0, False)
    assert [repr(c) for c in csv_cells(values)] == [
        "''", "''", "''", repr(np.float32("nan")), "Decimal('NaN')", "<NA>", "''", "0", "False"
    ]  # fmt: skip
