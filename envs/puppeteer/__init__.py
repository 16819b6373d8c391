"""Seed 003 (Puppeteer): ``orch/Puppeteer-v0`` and its contained offline tools."""

from orchenv.envs.puppeteer.env import PuppeteerEnv

__all__ = ["PuppeteerEnv"]
