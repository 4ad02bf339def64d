"""The examples in the docstrings of ``llm_locust`` and ``analysis`` run and give what they show."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import llm_locust

MODULES = sorted(
    info.name for package in (llm_locust,) for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
