"""Integrations of ukv into serving engines, one sub-package per engine.

Nothing here is imported by ``import ukv``: an integration imports its engine (when the
engine is installed) and is loaded only on request, e.g.
``import ukv.integrations.sglang; ukv.integrations.sglang.install()``.
"""
