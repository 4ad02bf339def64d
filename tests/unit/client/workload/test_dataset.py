"""``--dataset``: the three formats, errors that name the line, seeded order, per-item lengths."""

from __future__ import annotations

import argparse
import hashlib
import json

import pytest

from llm_locust.client.workload.dataset import DatasetError, DatasetPrompts, load_dataset
from llm_locust.options import validate_options

SHAREGPT = [
    {"id": "a", "conversations": [{"from": "human", "value": "Hi there"}, {"from": "gpt", "value": "x" * 40}]},
    {"id": "b", "conversations": [{"from": "human", "value": "only a question"}]},
    {"id": "c", "conversations": [{"from": "system", "value": "s"}, {"from": "user", "value": "Q"},
                                  {"from": "assistant", "value": "abcde"}]},
]  # fmt: skip


def test_sharegpt_takes_the_first_human_turn_and_its_reply_length(tmp_path):
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(SHAREGPT, indent=1))

    dataset = load_dataset(path)

    assert dataset.format == "sharegpt" and dataset.skipped == 1
    assert [(i.prompt, i.max_tokens) for i in dataset.items] == [("Hi there", 10), ("Q", 2)]  # ceil(chars / 4)
    assert dataset.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    counted = load_dataset(path, count_output=lambda text: len(text))
    assert [i.max_tokens for i in counted.items] == [40, 5]


def test_a_malformed_sharegpt_entry_is_named_by_its_line(tmp_path):
    entries = [json.dumps(SHAREGPT[0]), json.dumps(SHAREGPT[2]), json.dumps({"id": "bad", "conversations": "no"})]
    path = tmp_path / "sg.json"
    path.write_text("[\n" + ",\n".join(entries) + "\n]\n")  # the bad entry starts on line 4

    with pytest.raises(DatasetError, match=f"^{path} line 4: a ShareGPT entry must be"):
        load_dataset(path)
    path.write_text("[\n" + entries[0] + ",\n{oops\n]")
    with pytest.raises(DatasetError, match=f"^{path} line 3: not JSON"):
        load_dataset(path)


def test_jsonl_prompt_messages_and_max_tokens(tmp_path):
    path = tmp_path / "d.jsonl"
    lines = [{"prompt": "one", "max_tokens": 5}, {"messages": [{"role": "user", "content": "two"}]}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n")

    dataset = load_dataset(path)

    assert dataset.format == "jsonl" and dataset.has_messages
    assert [(i.prompt, i.max_tokens) for i in dataset.items] == [
        ("one", 5),
        ([{"role": "user", "content": "two"}], None),
    ]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"prompt": "x", "max_tokens": 0}', "'max_tokens' must be an integer from 1 to 2147483647"),
        ('{"prompt": "x", "max_tokens": true}', "'max_tokens' must be an integer from 1 to 2147483647"),
        ('{"prompt": ""}', "'prompt' must be a non-empty string"),
        ('{"prompt": "x", "messages": []}', "give exactly one of 'prompt'"),
        ('{"messages": [{"role": "user"}]}', "'messages' must be a non-empty list"),
        ('["x"]', "each line must be a JSON object"),
        ('{"prompt": "x"', "not JSON"),
    ],
)
def test_a_bad_jsonl_line_is_named(tmp_path, line, message):
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "fine"}\n\n' + line + "\n")
    with pytest.raises(DatasetError, match=f"^{path} line 3: {message}"):
        load_dataset(path)


def test_plain_text_lines_and_empty_or_binary_files(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("first prompt\n\n  \nsecond prompt\n")
    assert [i.prompt for i in load_dataset(path).items] == ["first prompt", "second prompt"]
    path.write_text("\n \n")
    with pytest.raises(DatasetError, match="no usable prompt"):
        load_dataset(path)
    path.write_bytes(b"ok\nstill ok\n\xff\xfe\n")
    with pytest.raises(DatasetError, match="line 3: not UTF-8"):
        load_dataset(path)


def test_seeded_order_is_shared_and_each_process_starts_elsewhere(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("\n".join(f"prompt {n}" for n in range(50)))
    dataset = load_dataset(path)

    def walk(seed, stream, n=50):
        source = DatasetPrompts(dataset, max_tokens=7, seed=seed, stream=stream)
        return [source.next_request().prompt for _ in range(n)]

    a, b = walk(1, "0"), walk(1, "1")
    assert walk(1, "0") == a  # reproducible
    assert sorted(a) == sorted(i.prompt for i in dataset.items)  # one cycle sends each item once
    assert a != b and b[0] in a and a[(a.index(b[0]) + 1) % 50] == b[1]  # same order, other start
    assert walk(2, "0") != a
    assert {DatasetPrompts(dataset, max_tokens=7).next_request().max_tokens} == {7}


def test_the_options_check_refuses_a_bad_dataset_and_bad_combinations(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\n{"prompt": 3}\n')
    with pytest.raises(ValueError, match=f"^--dataset: {bad} line 2: 'prompt' must be"):
        validate_options(argparse.Namespace(dataset=str(bad)))
    with pytest.raises(ValueError, match="No such file"):
        validate_options(argparse.Namespace(dataset=str(tmp_path / "missing.jsonl")))
    chat = tmp_path / "chat.jsonl"
    chat.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n')
    with pytest.raises(ValueError, match="only --protocol openai-chat"):
        validate_options(argparse.Namespace(dataset=str(chat), protocol="openai-completions"))
    with pytest.raises(ValueError, match="give one of them"):
        validate_options(argparse.Namespace(dataset=str(chat), input_tokens=64))
    with pytest.raises(ValueError, match="must be below --input-tokens"):
        validate_options(argparse.Namespace(input_tokens=64, shared_prefix_tokens=64))
    with pytest.raises(ValueError, match="need --input-tokens"):
        validate_options(argparse.Namespace(input_tokens=0, input_tokens_stddev=3.0))


def test_llm_locust_run_with_a_malformed_dataset_exits_2_before_any_load(tmp_path, capsys):
    from llm_locust.cli import main

    dataset = tmp_path / "d.jsonl"
    dataset.write_text('{"prompt": "a"}\n{"prompt": "b", "max_tokens": -1}\n')
    with pytest.raises(SystemExit) as exited:  # port 9 (discard): nothing listens, nothing is sent
        main(["run", "--host", "http://127.0.0.1:9", "--run-dir", str(tmp_path / "run"), "--dataset", str(dataset)])
    assert exited.value.code == 2
    assert (
        f"--dataset: {dataset} line 2: 'max_tokens' must be an integer from 1 to 2147483647" in capsys.readouterr().err
    )
    assert not (tmp_path / "run").exists()
