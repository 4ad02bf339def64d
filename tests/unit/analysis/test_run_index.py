"""``report/index.html`` of one run: every link and figure resolves, the verdict and summary are the files' own."""

import json
from html.parser import HTMLParser

import pytest

from llm_locust.analysis.pipeline import analyze_run
from tests.analysis_factories import synthetic_ladder

pytestmark = pytest.mark.long  # seconds of work: left out of the quick path (-m quick)


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.imgs: list[str] = []
        self.pre: list[str] = []
        self._in_pre = False
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "a":
            self.hrefs.append(attrs["href"])
        elif tag == "img":
            self.imgs.append(attrs["src"])
        self._in_pre = tag == "pre"

    def handle_endtag(self, tag):
        if tag == "pre":
            self._in_pre = False

    def handle_data(self, data):
        (self.pre if self._in_pre else self.text).append(data)


def test_the_run_page_links_every_file_and_shows_the_verdict(tmp_path):
    run_dir = synthetic_ladder(tmp_path / "run")
    result = analyze_run(run_dir)
    index = result.paths.index_html
    page = _Page()
    page.feed(index.read_text(encoding="utf-8"))
    report = index.parent
    # every figure written is shown, every link resolves (relative to the page)
    written = sorted(p.name for p in report.glob("*.png"))
    assert sorted({src.rsplit("/", 1)[-1] for src in page.imgs}) == written and written
    for target in page.hrefs + page.imgs:
        assert (report / target).resolve().exists(), target
    linked = {(report / h).resolve() for h in page.hrefs}
    assert (run_dir / "requests.csv").resolve() in linked and (run_dir / "run.json").resolve() in linked
    # the summary is summary.md rendered (its headings as text, no markdown left); the bottleneck
    # and recommendations are verdict.json's
    text = "".join(page.text)
    summary = result.paths.summary_md.read_text(encoding="utf-8")
    headings = [line.lstrip("#").strip() for line in summary.splitlines() if line.startswith("## ")]
    assert headings and all(h in text for h in headings), headings
    assert "## " not in text and "|---" not in text and not page.pre
    verdict = json.loads(result.paths.verdict_json.read_text(encoding="utf-8"))
    assert f"Bottleneck: {verdict['bottleneck']}" in text
    assert f"Critical concurrency: {verdict['critical_concurrency']} users" in text
    for rec in verdict["recommendations"]:
        assert rec["change"] in text


def test_a_rerun_overwrites_the_page(tmp_path):
    run_dir = synthetic_ladder(tmp_path / "run")
    index = analyze_run(run_dir).paths.index_html
    index.write_text("stale", encoding="utf-8")
    assert analyze_run(run_dir).paths.index_html.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
