"""`python -m bench.engine_profiles` (from the repository root): see bench/engine_profiles/__init__.py."""

import sys

from bench.engine_profiles.cli import main

sys.exit(main())
