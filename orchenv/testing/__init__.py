"""Public test doubles and the shared env checks, so users can test their own envs and
controllers with the same suite orchenv uses: a fake OpenAI-compatible server
(``orchenv.testing.fake_openai``), scripted backends and ``check_orch_env``."""
