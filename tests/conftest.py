"""Fixtures shared by the test modules."""

from __future__ import annotations

import pytest
from scenario import tiny_source

from orchenv.tasks import ListTaskSource


@pytest.fixture
def tiny_tasks() -> ListTaskSource:
    return tiny_source()
