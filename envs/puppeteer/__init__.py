"""Seed 003 (Puppeteer): ``orch/Puppeteer-v0``, its agent spaces, task kinds and contained
offline tools.

Modules: ``env`` (the environment), ``protocol`` (the puppeteer's prompt, actions and
parser), ``agents`` (agents = model x reasoning pattern or tool, their prompts, the simulated
``PatternBackend``), ``presets`` (Mimas, Titan and Mono, calibrated to seed 003 Table 1),
``revision`` (how simulated answers, revisions and tool evidence behave), ``outputs`` (the
texts simulated agents write), ``choices`` (the discrete view), ``tasks`` (task kinds, their
task source and grading), ``tools`` (``run_python``, ``read_file``, ``search``). docs/puppeteer.md
describes the model.
"""

from orchenv.envs.puppeteer.env import PuppeteerEnv

__all__ = ["PuppeteerEnv"]
