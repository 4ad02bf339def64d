"""Engine flavours of the embedded server (llm_locust/simserver/flavors/): each writes lines
and metric names its own engine's parser and mapping read back, driven here step by step."""

import io

import pandas as pd
import pytest
from prometheus_client import generate_latest

from llm_locust.analysis.server.prometheus import detect_family, metrics_series
from llm_locust.analysis.server.serverlog import LogClock, LogText, parse_server_log
from llm_locust.analysis.server.userformat import load_user_format
from llm_locust.master.scraper import samples_to_rows
from llm_locust.simserver.config import FLAVOR_NAMES, SimConfig
from llm_locust.simserver.engine import SimRequest
from llm_locust.simserver.flavors import FLAVORS, make_flavor
from llm_locust.simserver.flavors.generic import FORMAT_TOML
from llm_locust.simserver.flavors.llamacpp import relative_stamp
from llm_locust.simserver.flavors.tgi import rust_duration
from llm_locust.simserver.log import LogWriter
from llm_locust.simserver.server import make_engine

T0 = 1_764_504_000.0


def drive(flavor_name: str, *, requests: int = 3, max_num_seqs: int = 2):
    """Run ``requests`` requests of 4 tokens through a 2-slot engine, 20 ms a step."""
    config = SimConfig(flavor=flavor_name, max_num_seqs=max_num_seqs, port=8000)
    engine, stream = make_engine(config), io.StringIO()
    flavor = make_flavor(flavor_name, config=config, engine=engine, writer=LogWriter(stream), started_s=T0)
    flavor.startup(8000)
    wall = T0
    for k in range(requests):
        request = SimRequest(request_id=f"r{k}", prompt_tokens=10, max_tokens=4, stop_after_tokens=4)
        engine.add_request(request)
        flavor.on_submit(request, wall)
    steps = 0
    while engine.has_work:
        plan = engine.begin_step()
        flavor.on_step_begin(plan, wall)
        wall += 0.02
        flavor.on_step_end(engine.end_step(plan), wall)
        if steps in (1, 3):  # the periodic lines, with tokens generated in between
            flavor.interval(100.0 + steps)
        steps += 1
    return flavor, stream.getvalue(), config


def test_flavor_names_match_the_config_flag():
    assert sorted(FLAVORS) == sorted(FLAVOR_NAMES)
    with pytest.raises(ValueError, match="unknown flavor 'triton'"):
        SimConfig(flavor="triton")


@pytest.mark.parametrize("name", FLAVOR_NAMES)
def test_lines_parse_back_to_the_configured_ceiling(name):
    flavor, text, config = drive(name)
    fmt = load_user_format(FORMAT_TOML) if name == "generic" else None
    result = parse_server_log(LogText.from_text(text), clock=LogClock(reference_s=T0), user_format=fmt)
    assert result.family.value == name
    assert result.config.batch_ceiling == config.max_num_seqs
    assert result.data_lines > 0


@pytest.mark.parametrize("name", FLAVOR_NAMES)
def test_metrics_map_to_running_and_waiting(name):
    config = SimConfig(flavor=name, max_num_seqs=2)
    engine = make_engine(config)
    flavor = make_flavor(name, config=config, engine=engine, writer=LogWriter(io.StringIO()), started_s=T0)
    for k in range(3):
        engine.add_request(SimRequest(request_id=f"r{k}", prompt_tokens=10, max_tokens=4, stop_after_tokens=4))
    engine.begin_step()
    text = generate_latest(flavor.registry()).decode()
    frame = pd.DataFrame(
        samples_to_rows(text, t_s=T0, source="u"), columns=["t_s", "source", "metric", "labels", "value"]
    )
    fmt = load_user_format(FORMAT_TOML) if name == "generic" else None
    mapping = fmt.family_mapping() if fmt else None
    assert (detect_family(frame, mapping).value) == name
    series = metrics_series(frame, user=mapping)
    assert (series["running"].iloc[0], series["waiting"].iloc[0]) == (2.0, 1.0)


def test_stamp_formats():
    assert relative_stamp(0.723278) == "0.00.723.278"
    assert relative_stamp(3661.5) == "61.01.500.000"
    assert rust_duration(1.0) == "1s" and rust_duration(0.0415) == "41.5ms"
