"""What a run trains on: reasoning-gym tasks and their rewards, and the embedded models (``tiny``,
``tiny-chat``, ``tiny-steps``) built and cached locally; model names resolved to folders or hub ids."""
