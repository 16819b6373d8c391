"""Verified submissions: bundle a run (``orchenv submit``), re-derive and check it
(``orchenv verify``), and show the verdict on the leaderboard.

``write_bundle(run_dir, out)`` (``orchenv.verify.bundle``) writes a submission bundle: the run's
files, its pool, every recorded agent call and digests binding them. ``verify_bundle(bundle)``
(``orchenv.verify.checks``) replays every episode from the env, the submitted actions and the
recorded answers, trusting nothing the run computed, runs the statistical integrity checks and
writes ``verified.json`` and ``verification.md``. See docs/leaderboard.md.
"""

from __future__ import annotations

from orchenv.verify.bundle import write_bundle
from orchenv.verify.checks import THRESHOLDS, Check, VerifyReport, read_verification, verify_bundle

__all__ = [
    "THRESHOLDS",
    "Check",
    "VerifyReport",
    "read_verification",
    "verify_bundle",
    "write_bundle",
]
