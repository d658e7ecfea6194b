"""windvane's test suite.

A package on purpose: pytest then puts the repository root, not tests/, on
sys.path, so the helper module tests/mariadb.py (imported as tests.mariadb)
cannot shadow the `mariadb` database connector.
"""
