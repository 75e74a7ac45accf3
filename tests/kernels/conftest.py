"""Kernels against numpy/float64 references, one launcher at a time (webmp.testing.probe).
test_properties.py draws its cases with hypothesis: slow throughout."""

from tiers import Tier

tier = Tier(__file__, slow_files=["test_properties.py"])
pytest_collection_modifyitems, pytest_ignore_collect = tier.mark, tier.ignore
