"""Model builders and their preset registry (builders arrive with the model issue)."""

from kformer.models.registry import build, get_preset, list_models, register

__all__ = ["build", "get_preset", "list_models", "register"]
