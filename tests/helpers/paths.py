"""Where tests find the repository's files, wherever under tests/ a test file sits."""

from pathlib import Path

#: tests/ (tests/helpers/paths.py -> tests/helpers -> tests).
TESTS = Path(__file__).resolve().parents[1]
#: The repository root.
REPO = TESTS.parent
#: Real outputs kept in the repository (sources in tests/fixtures/README.md).
FIXTURES = TESTS / "fixtures"
#: Made-up inputs (each folder says how it was made).
DATA = TESTS / "data"
