"""Whole models: gradients against the float64 references, the GPT, sampling, parity with PyTorch
(test_torch_parity.py and test_net_parity.py: importing torch costs seconds, slow throughout)."""

from tiers import Tier

tier = Tier(__file__, slow_files=["test_torch_parity.py", "test_net_parity.py"])
pytest_collection_modifyitems, pytest_ignore_collect = tier.mark, tier.ignore
