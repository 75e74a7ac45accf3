"""The server: routes, WebSockets, browser runs, the page's tuning exchange, and schemathesis fuzzing
of the REST API (test_api_fuzz.py: slow throughout). `client`: a TestClient of a fresh app (the
helpers it is made of: tests/serve/helpers.py)."""

import pytest
from tiers import Tier

from tests.serve.helpers import serving
from webmp.serve.app import create_app

tier = Tier(__file__, slow_files=["test_api_fuzz.py"])
pytest_collection_modifyitems, pytest_ignore_collect = tier.mark, tier.ignore


@pytest.fixture
def client(tmp_path):
    with serving(create_app(tmp_path / "runs")) as c:
        yield c
