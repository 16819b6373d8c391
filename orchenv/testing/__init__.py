"""Public test doubles and the shared env checks, so you can test your own envs and
controllers with the suite orchenv uses on its own:

- ``orchenv.testing.checks``: ``check_orch_env`` and the checks it runs (Gymnasium API,
  determinism, info schema, ``fork()``, hostile actions, the horizon rule);
- ``orchenv.testing.scripted``: ``ScriptedBackend``, agents whose replies you script;
- ``orchenv.testing.fake_openai``: ``FakeOpenAIServer``, an OpenAI-compatible server on
  localhost that answers from a function.

Nothing here is imported by ``import orchenv``.
"""
