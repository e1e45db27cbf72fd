"""An example evalsweep plugin: a task, a backend and a target kind (see pyproject.toml)."""
