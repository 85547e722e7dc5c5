from .faultkit import attacker, honest, node, world_dir  # noqa: F401  (fixtures)
