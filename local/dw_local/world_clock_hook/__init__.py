"""Not imported as a package: this folder goes on ``PYTHONPATH`` (``world_clock.clock_env``) so that its
``sitecustomize`` runs as each Python process of the local world starts."""
