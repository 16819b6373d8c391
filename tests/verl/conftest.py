"""Puts this folder on sys.path: test_verl_examples reuses test_verl_agent_loop's fakes.
(These tests run only in verl's venv, scripts/setup_verl_venv.sh.)"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
