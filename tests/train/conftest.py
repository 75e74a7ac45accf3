"""Native training: the loop, resume, data files, MPI ranks (test_mpi.py: slow throughout), `webmp
export` (test_export.py: slow throughout, it trains runs) and the hostile-input probes of
scripts/reliability.py (test_reliability.py: slow throughout)."""

from tiers import Tier

tier = Tier(__file__, slow_files=["test_mpi.py", "test_reliability.py", "test_export.py"])
pytest_collection_modifyitems, pytest_ignore_collect = tier.mark, tier.ignore
