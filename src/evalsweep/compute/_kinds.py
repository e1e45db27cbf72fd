"""Target kinds by name: what ``kind = "..."`` of a ``[targets.NAME]`` table may say.

One line each for evalsweep's own; an installed package adds its own through the
entry point group ``evalsweep.targets`` (:mod:`evalsweep.plugins`,
``docs/extending.md``). A kind is a class made as ``Class(name=NAME, **settings)``
from its table (every other key of the table is a setting; a dataclass's init fields
are the settings it allows, those without a default are required, and a ``store``
field gets the results store). How a kind judges code-eval slices is code evaluation's
business: ``evalsweep.codeeval._transports.SLICE_TRANSPORTS`` names the built-in kinds'
transports, and a package's class gives its own as the class attribute
``slice_transport`` (nothing here names code evaluation, which imports this table).

Nothing here imports a target's module: ``evalsweep.compute`` reads this table when
it is imported, also in a worker that judges code-eval slices.
"""

from __future__ import annotations

from evalsweep.errors import ConfigError
from evalsweep.plugins import Registry

TARGET_KINDS = Registry("target kind", "evalsweep.targets", ConfigError)
TARGET_KINDS.add("local", "evalsweep.compute._base:LocalTarget", "this machine, in process")
TARGET_KINDS.add("ssh", "evalsweep.compute._ssh:SSHTarget", "a machine reached over ssh",
                 needs='host = "user@host"')  # fmt: skip
TARGET_KINDS.add("skypilot", "evalsweep.compute._skypilot:SkyPilotTarget",
                 "a cloud GPU launched, priced and torn down through SkyPilot")  # fmt: skip
TARGET_KINDS.add("ray", "evalsweep.compute._ray:RayTarget", "a Ray cluster")
