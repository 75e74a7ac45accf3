"""The page in a real headless Chromium (Playwright): every test here is a browser test."""

from tiers import Tier

tier = Tier(__file__, marks=["browser"])
pytest_collection_modifyitems, pytest_ignore_collect = tier.mark, tier.ignore
