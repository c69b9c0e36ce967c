import pytest

import core


@pytest.fixture(scope="session")
def a100():
    return core.load_hardware("a100-sxm4-80gb")
