"""Seed 003 (Puppeteer): ``orch/Puppeteer-v0``, its agent space, task kinds and contained
offline tools.

Modules: ``env`` (the environment), ``protocol`` (the puppeteer's prompt, actions and
parser), ``agents`` (models x reasoning patterns, the simulated ``PatternBackend``, presets),
``tasks`` (task kinds, their task source and grading), ``tools`` (``run_python``,
``read_file``, ``search``).
"""

from orchenv.envs.puppeteer.env import PuppeteerEnv

__all__ = ["PuppeteerEnv"]
