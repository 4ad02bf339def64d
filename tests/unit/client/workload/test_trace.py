"""Trace readers on samples in each real format, their errors naming the line, and trace prompts.

Where the formats are documented (the samples below are copied from these files):

- Mooncake: ``kvcache-ai/Mooncake`` ``FAST25-release/README.md`` (fields, the two-sample example)
  and ``FAST25-release/traces/conversation_trace.jsonl`` (its first lines below); block size 512
  per NVIDIA Dynamo's ``benchmarks/data_generator/README.md`` (the Mooncake format's ``block_size``).
- Azure: ``Azure/AzurePublicDataset`` ``AzureLLMInferenceDataset2023.md`` / ``...2024.md`` (the
  schema table ``TIMESTAMP, ContextTokens, GeneratedTokens``) and the first rows of
  ``data/AzureLLMInferenceTrace_conv.csv`` (2023); the 2024 week files stamp
  ``2024-05-10 00:00:00.009930+00:00`` (a UTC offset, 6 digits): the 2024 rows below are written
  in that form.
"""

from __future__ import annotations

import math

import pytest

from llm_locust.client.workload.synthetic import LEAD, Calibration
from llm_locust.client.workload.trace import TraceError, TraceRow, read_trace
from llm_locust.client.workload.traceprompts import TracePrompts

MOONCAKE_CONVERSATION = """\
{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}
{"timestamp": 0, "input_length": 2290, "output_length": 316, "hash_ids": [0, 42, 43, 44, 45]}
{"timestamp": 3000, "input_length": 915, "output_length": 355, "hash_ids": [0, 462]}
{"timestamp": 5999, "input_length": 1053, "output_length": 26, "hash_ids": [0, 773, 774]}
"""

AZURE_2023 = """\
TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.2224670,879,55
"""

AZURE_2024 = """\
TIMESTAMP,ContextTokens,GeneratedTokens
2024-05-10 00:00:00.009930+00:00,4808,10
2024-05-10 00:00:00.292240+00:00,3180,8
2024-05-10 00:00:01.000000+00:00,110,27
"""


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_mooncake_reads_milliseconds_lengths_and_512_token_blocks(tmp_path):
    trace = read_trace(_write(tmp_path, "m.jsonl", MOONCAKE_CONVERSATION), "mooncake")
    rows = trace.rows
    assert [r.offset_s for r in rows] == [0.0, 0.0, 3.0, 5.999]
    assert [(r.input_tokens, r.output_tokens) for r in rows] == [(6758, 500), (2290, 316), (915, 355), (1053, 26)]
    assert [r.line for r in rows] == [1, 2, 3, 4] and [r.row_index for r in rows] == [0, 1, 2, 3]
    # 6758 tokens = 13 whole blocks of 512 + 102; 14 ids in the file
    assert len(rows[0].prefix) == 14 and rows[0].prefix[-1] == ("m:13", 6758 - 13 * 512)
    assert sum(tokens for _, tokens in rows[0].prefix) == 6758
    assert rows[2].prefix == (("m:0", 512), ("m:462", 915 - 512))
    assert {r.prefix[0] for r in rows} == {("m:0", 512)}  # every conversation starts with block 0
    assert trace.span_s == 5.999


def test_azure_2023_and_2024_offsets_from_the_first_row(tmp_path):
    rows = read_trace(_write(tmp_path, "a.csv", AZURE_2023), "azure").rows
    # 18:15:50.9951690 - 18:15:46.6805900 (microseconds: the 7th digit is below them)
    assert [round(r.offset_s, 6) for r in rows] == [0.0, 4.314579, 4.541877]
    assert [(r.input_tokens, r.output_tokens, r.line) for r in rows] == [(374, 44, 2), (396, 109, 3), (879, 55, 4)]
    assert all(r.prefix == () and r.session_id == "" for r in rows)
    rows = read_trace(_write(tmp_path, "b.csv", AZURE_2024), "azure").rows
    assert [round(r.offset_s, 6) for r in rows] == [0.0, 0.28231, 0.99007]


def test_jsonl_timestamps_or_interarrivals_sessions_and_prefixes(tmp_path):
    text = (
        '{"timestamp_s": 100.5, "input_tokens": 64, "output_tokens": 8, "session_id": "s1", '
        '"prefix_id": "sys", "prefix_tokens": 32}\n'
        "\n"
        '{"timestamp_s": 101.0, "input_tokens": 80, "output_tokens": 4, "session_id": 7}\n'
    )
    rows = read_trace(_write(tmp_path, "t.jsonl", text), "jsonl").rows
    assert [(r.offset_s, r.line, r.session_id, r.prefix) for r in rows] == [
        (0.0, 1, "s1", (("p:sys", 32),)), (0.5, 3, "7", ())]  # fmt: skip
    text = '{"interarrival_s": 0.25, "input_tokens": 9, "output_tokens": 1}\n' * 3
    rows = read_trace(_write(tmp_path, "i.jsonl", text), "jsonl").rows
    assert [r.offset_s for r in rows] == [0.0, 0.25, 0.5]  # from the first request


@pytest.mark.parametrize(
    ("fmt", "text", "message"),
    [
        ("mooncake", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1,\n', "line 2: not JSON"),
        ("mooncake", '{"timestamp": 0, "input_length": 5}\n', "line 1: missing 'output_length'"),
        ("mooncake", '{"timestamp": 10, "input_length": 5, "output_length": 1}\n'
                     '{"timestamp": 9, "input_length": 5, "output_length": 1}\n', "line 2: timestamp -0.001 s (from the first request) is earlier"),
        ("mooncake", '{"timestamp": 0, "input_length": 5.5, "output_length": 1}\n', "line 1: 'input_length' must be an integer"),
        ("mooncake", '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1, "x"]}\n',
         "line 1: 'hash_ids[1]' must be an integer"),
        ("mooncake", "[1, 2]\n", "line 1: expected a JSON object"),
        ("azure", "TIMESTAMP,Context,Generated\n", "line 1: expected the header TIMESTAMP,ContextTokens,GeneratedTokens"),
        ("azure", AZURE_2023 + "2023-11-16 18:15:52,12\n", "line 5: expected 3 cells"),
        ("azure", AZURE_2023 + "yesterday,12,3\n", "line 5: 'TIMESTAMP' is not a date and time"),
        ("azure", AZURE_2023 + "2023-11-16 18:15:40.0,12,3\n", "line 5: timestamp"),
        ("azure", AZURE_2023 + "2023-11-16 18:15:52.0+00:00,12,3\n", "line 5: 'TIMESTAMP' mixes"),
        ("azure", AZURE_2023 + "2023-11-16 18:15:52.0,-3,3\n", "line 5: 'ContextTokens' must be >= 1"),
        ("jsonl", '{"timestamp_s": 0, "input_tokens": 5, "output_tokens": 1}\n{"interarrival_s": 1, "input_tokens": 5, '
                  '"output_tokens": 1}\n', "line 2: has 'interarrival_s' where the lines before have 'timestamp_s'"),
        ("jsonl", '{"input_tokens": 5, "output_tokens": 1}\n', "line 1: missing 'timestamp_s' or 'interarrival_s'"),
        ("jsonl", '{"timestamp_s": 0, "input_tokens": 5, "output_tokens": 1, "prefix_id": 1, "prefix_tokens": 6}\n',
         "line 1: 'prefix_tokens' (6) exceeds 'input_tokens' (5)"),
        ("jsonl", '{"timestamp_s": 0, "input_tokens": 5, "output_tokens": 1, "prefix_id": 1}\n',
         "line 1: missing 'prefix_tokens'"),
        ("jsonl", "\n\n", "no requests in the trace"),
    ],
)  # fmt: skip
def test_bad_input_names_the_file_and_line(tmp_path, fmt, text, message):
    path = _write(tmp_path, "bad.txt", text)
    with pytest.raises(TraceError) as error:
        read_trace(path, fmt)
    assert str(error.value).startswith(path) and message in str(error.value)


def test_unknown_format_lists_the_known_ones(tmp_path):
    with pytest.raises(TraceError, match="known: jsonl, mooncake, azure"):
        read_trace(_write(tmp_path, "x", "{}"), "sharegpt")


CALIBRATION = Calibration(base_tokens=5, words=("the", "of", "and", "to", "in", "is"), method="test")


def _words(item) -> list[str]:
    words = item.prompt.split(" ")
    assert words[0] == LEAD
    return words[1:]


def test_trace_prompts_have_the_rows_lengths_and_share_their_prefix_blocks():
    one, other = TracePrompts(CALIBRATION, seed=3, stream="0"), TracePrompts(CALIBRATION, seed=3, stream="1")
    a = TraceRow(0, 1, 0.0, 600, 8, "", (("m:7", 512), ("m:9", 88)))
    b = TraceRow(1, 2, 0.5, 700, 4, "", (("m:7", 512), ("m:11", 188)))
    item_a, item_b = one.item_for(a), other.item_for(b)  # two processes
    # base + words = the row's length, as the calibrated counter counts
    assert (len(_words(item_a)) + 5, item_a.max_tokens, item_a.prompt_tokens_target) == (600, 8, 600.0)
    assert (len(_words(item_b)) + 5, item_b.max_tokens) == (700, 4)
    wa, wb = _words(item_a), _words(item_b)
    assert wa[:512] == wb[:512]  # block m:7 is the same text in both processes
    assert wa[512:595] != wb[512:595]  # then each its own block
    # the block's text does not depend on the row: a shorter use of m:7 is its start
    c = one.item_for(TraceRow(2, 3, 1.0, 105, 2, "", (("m:7", 100),)))
    assert _words(c) == wa[:100]
    assert one.adjusted == 0


def test_rows_without_prefix_differ_and_short_rows_are_sent_at_the_shortest_prompt():
    prompts = TracePrompts(CALIBRATION, seed=0)
    x, y = (prompts.item_for(TraceRow(i, i + 1, 0.0, 40, 3)) for i in range(2))
    assert x.prompt != y.prompt and len(_words(x)) == 35
    short = prompts.item_for(TraceRow(2, 3, 0.0, 2, 0))
    assert (len(_words(short)), short.max_tokens, short.prompt_tokens_target) == (1, 1, 6.0)
    assert prompts.adjusted == 1
    probe = prompts.next_request()  # the first-request check's
    assert probe.max_tokens == 16 and not math.isnan(probe.prompt_tokens_target)


def _options(*args: str):
    from locust.argument_parser import get_parser

    import llm_locust.plugin  # noqa: F401  (llm-locust's options on Locust's parser)

    return get_parser().parse_args(["-f", "x.py", "--host", "http://127.0.0.1:1", *args])


def test_options_refuse_a_bad_trace_and_the_flags_it_replaces(tmp_path):
    from llm_locust.options import validate_options

    good = _write(tmp_path, "m.jsonl", MOONCAKE_CONVERSATION)
    validate_options(_options("--trace", good, "--trace-format", "mooncake", "--trace-speed", "2"))
    bad = _write(
        tmp_path, "bad.jsonl", MOONCAKE_CONVERSATION + '{"timestamp": 1, "input_length": 3, "output_length": 1}\n'
    )
    with pytest.raises(
        ValueError, match=r"^--trace: .*bad.jsonl line 5: timestamp 0.001 s \(from the first request\) is earlier"
    ):
        validate_options(_options("--trace", bad, "--trace-format", "mooncake"))
    with pytest.raises(ValueError, match="leave out --input-tokens"):
        validate_options(_options("--trace", good, "--trace-format", "mooncake", "--input-tokens", "64"))
    with pytest.raises(ValueError, match=r"--trace .*missing.jsonl: No such file"):
        validate_options(_options("--trace", str(tmp_path / "missing.jsonl")))
