"""The training recipes: scripts run as `python -m recipes.<name>` (or `kformer train <name>`)."""

from kformer import runtime

runtime.quiet_startup()  # first, before a recipe imports keras: no TensorFlow / absl start-up logging
